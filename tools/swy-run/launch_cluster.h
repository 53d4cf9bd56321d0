/* The emulated-cluster launcher: swy-run --nodes N --ranks-per-node M. */
#ifndef SWY_RUN_LAUNCH_CLUSTER_H
#define SWY_RUN_LAUNCH_CLUSTER_H

#include "options.h"

/* Exit status when the cluster cannot be built here (not root, no ip or
 * tc, no namespaces): what meson counts as a skipped test. */
#define SWY_RUN_EXIT_UNSUPPORTED 77

/* Builds opts->nodes emulated nodes (netns.h), runs opts->ranks_per_node
 * ranks in each, supervises them as swy_run_local_launch does, removes
 * everything and returns the same exit statuses, or 77 (above). */
int swy_run_cluster_launch(const swy_run_options_t *opts);

#endif
