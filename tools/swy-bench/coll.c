/* swy-bench coll: the coll benchmark (coll_run.c) on Switchyard's public
 * API. */
#include "coll.h"

#include "coll_run.h"
#include "coll_swy.h"
#include "common.h"

#include "switchyard/switchyard.h"

#include <stdio.h>

int swyb_coll_main(int argc, char **argv)
{
    swyb_coll_options_t opts;
    swy_comm_t comm;
    swy_status_t status;
    int rc;

    /* Options first: a usage error should not need a job. Every rank
     * parses the same argv, rank 0 (from the launcher's variables, if any)
     * prints. */
    switch (swyb_coll_options_parse(argc, argv, 2, "swy-bench coll",
                                    swyb_env_rank(), &opts)) {
    case SWYB_COLL_PARSE_EXIT_OK:
        return 0;
    case SWYB_COLL_PARSE_EXIT_USAGE:
        return 2;
    case SWYB_COLL_PARSE_RUN:
        break;
    }

    status = swy_comm_init_env(&comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: swy_comm_init_env failed: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
        return 1;
    }

    swyb_coll_impl_t impl;
    swyb_coll_switchyard_impl(comm, &impl);
    rc = swyb_coll_run(&impl, &opts, argc, argv);
    if (rc < 0) {
        /* Peers may be blocked in a collective this rank will never post. */
        swy_comm_abort(comm);
        return 1;
    }
    status = swy_comm_destroy(comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: swy_comm_destroy failed: %s\n",
                swy_status_string(status));
        return 1;
    }
    return rc;
}
