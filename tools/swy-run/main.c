/* swy-run: start the ranks of a Switchyard job. The command line decides
 * the launcher: local ranks (launch_local.c) or an emulated cluster of
 * network namespaces (launch_cluster.c). */
#include "blas_env.h"
#include "launch_cluster.h"
#include "launch_local.h"
#include "options.h"

#include <stdio.h>
#include <unistd.h>
#include <fcntl.h>

/* Pipes and /dev/null created later must not land on 0, 1 or 2, or a rank
 * would get its output pipe as stdin (and dup2 onto itself would keep
 * close-on-exec). */
static void std_fds_ensure_open(void)
{
    for (int fd = 0; fd < 3; ++fd) {
        if (fcntl(fd, F_GETFD) < 0) {
            int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);

            if (null_fd >= 0 && null_fd != fd) {
                dup2(null_fd, fd);
                close(null_fd);
            }
        }
    }
}

int main(int argc, char **argv)
{
    swy_run_options_t opts;

    std_fds_ensure_open();
    switch (swy_run_options_parse(argc, argv, &opts)) {
    case SWY_RUN_PARSE_EXIT_OK:
        return 0;
    case SWY_RUN_PARSE_EXIT_USAGE:
        return 2;
    case SWY_RUN_PARSE_RUN:
        break;
    }

    swy_run_blas_env_set();
    if (opts.mode == SWY_RUN_MODE_CLUSTER) {
        return swy_run_cluster_launch(&opts);
    }
    return swy_run_local_launch(&opts);
}
