/* swy-bench coll: the coll benchmark (coll_run.c) on Switchyard's public
 * API, then (rank 0, --compare) the same on Open MPI and the
 * ucx_perftest limit, in one table (coll_compare.c). */
#include "coll.h"

#include "coll_compare.h"
#include "coll_run.h"
#include "coll_swy.h"
#include "common.h"

#include "switchyard/switchyard.h"

#include <stdio.h>

#define COLL_MAX_RESULTS 128

/* Whether every rank runs on this one's host: the peers run where rank 0
 * is, so a job across hosts has nothing to compare there. A collective:
 * every rank calls it. Returns 0 / 1, or -1 when the call failed. */
static int coll_one_host(const swyb_coll_impl_t *impl)
{
    double key = swyb_host_key();
    double keys[2] = {key, -key}; /* max of both: max and min over ranks */

    if (impl->max_doubles(impl->ctx, keys, 2) != 0) {
        return -1;
    }
    return keys[0] == -keys[1];
}

int swyb_coll_main(int argc, char **argv)
{
    static swyb_coll_result_t results[COLL_MAX_RESULTS];
    swyb_coll_options_t opts;
    swyb_compare_mode_t compare;
    swy_comm_t comm;
    swy_status_t status;
    size_t nresults = 0;
    int one_host = 1;
    int rc;

    /* Options first: a usage error should not need a job. Every rank
     * parses the same argv, rank 0 (from the launcher's variables, if any)
     * prints. */
    argc = swyb_compare_args_take(argc, argv, 2, swyb_env_rank(), &compare);
    if (argc < 0) {
        return 2;
    }
    switch (swyb_coll_options_parse(argc, argv, 2, "swy-bench coll",
                                    swyb_env_rank(), &opts)) {
    case SWYB_COLL_PARSE_EXIT_OK:
        if (swyb_env_rank() == 0) {
            printf("swy-bench coll also takes:\n"
                   "  --compare MODE    afterwards rank 0 runs Open MPI "
                   "(swy-bench-mpi\n"
                   "                    under mpirun) and ucx_perftest on "
                   "this host and\n"
                   "                    prints the comparison: auto (the "
                   "default: the\n"
                   "                    peers found), none, or require "
                   "(fail without them)\n");
        }
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
    rc = swyb_coll_run_collect(&impl, &opts, argc, argv, results,
                               COLL_MAX_RESULTS, &nresults);
    if (rc >= 0 && compare != SWYB_COMPARE_NONE) {
        one_host = coll_one_host(&impl);
        if (one_host < 0) {
            rc = -1;
        }
    }
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
    /* The other ranks have left: the peers get the CPUs to themselves. */
    if (impl.rank == 0 &&
        swyb_coll_compare(compare,
                          one_host ? NULL : "the ranks are on more than one "
                                            "host; run swy-bench-mpi there",
                          impl.nranks, results, nresults, argv + 2, argc - 2,
                          opts.json) != 0) {
        rc = 1;
    }
    return rc;
}
