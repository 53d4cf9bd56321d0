/* Starting, supervising and stopping the ranks of a job on this host. */
#ifndef SWY_RUN_LAUNCH_LOCAL_H
#define SWY_RUN_LAUNCH_LOCAL_H

#include "options.h"

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

/* swy-run's own failure (fork, pipe, ...), as timeout(1) uses 125. */
#define SWY_RUN_EXIT_INTERNAL 125
#define SWY_RUN_EXIT_TIMEOUT  124
#define SWY_RUN_EXIT_NOEXEC   127

/* Runs opts->np ranks of opts->prog_argv to completion and returns
 * swy-run's exit status: 0 if all ranks exit 0; the first failing rank's
 * status (128+signal if killed); 124 on timeout; 127 if the program cannot
 * be executed; 125 if swy-run itself fails. */
int swy_run_local_launch(const swy_run_options_t *opts);

/* What a launcher adds to the supervision core below. All optional. */
typedef struct {
    void *ctx;
    /* Runs in rank's forked child after its process group, stdio and
     * SWY_RANK are set, right before exec. It returns in the process that
     * is to exec the program; if it forks for that, the process that stays
     * behind must close status_fd (so that a successful exec is seen) and
     * end with the program's status. It may _exit(SWY_RUN_EXIT_INTERNAL)
     * after a message on stderr. */
    void (*rank_enter)(void *ctx, int rank, int status_fd);
    /* Sets the rank's variables other than SWY_RANK, in the child.
     * NULL: SWY_LOCAL_RANK = rank. */
    void (*rank_env)(void *ctx, int rank);
    /* A child of swy-run that is not a rank (a helper the launcher
     * started) was reaped. */
    void (*child_exited)(void *ctx, pid_t pid, int status);
    /* Signal mask the ranks run with; NULL: the mask at the call. */
    const sigset_t *rank_sigmask;
    /* After forwarding SIGINT, SIGTERM or SIGHUP, SIGKILL the ranks still
     * running --grace seconds later (the launcher must tear down what it
     * built, and cannot while ranks live). */
    bool kill_after_signal;
} swy_run_launch_hooks_t;

/* The supervision core: starts opts->np ranks of opts->prog_argv with
 * swy-run's environment (job variables already set by the caller) and
 * supervises them as described for swy_run_local_launch. */
int swy_run_ranks_launch(const swy_run_options_t *opts,
                         const swy_run_launch_hooks_t *hooks);

#endif
