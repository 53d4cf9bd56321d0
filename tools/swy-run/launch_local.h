/* Starting, supervising and stopping the ranks of a job on this host. */
#ifndef SWY_RUN_LAUNCH_LOCAL_H
#define SWY_RUN_LAUNCH_LOCAL_H

#include "options.h"

/* swy-run's own failure (fork, pipe, ...), as timeout(1) uses 125. */
#define SWY_RUN_EXIT_INTERNAL 125
#define SWY_RUN_EXIT_TIMEOUT  124
#define SWY_RUN_EXIT_NOEXEC   127

/* Runs opts->np ranks of opts->prog_argv to completion and returns
 * swy-run's exit status: 0 if all ranks exit 0; the first failing rank's
 * status (128+signal if killed); 124 on timeout; 127 if the program cannot
 * be executed; 125 if swy-run itself fails. */
int swy_run_local_launch(const swy_run_options_t *opts);

#endif
