/* swy-bench coll: the coll benchmark (coll_run.c) on Switchyard's public
 * API. */
#include "coll.h"

#include "coll_run.h"
#include "common.h"

#include "switchyard/switchyard.h"

#include <stdio.h>

static int swy_call_check(swy_comm_t comm, swy_status_t status,
                          const char *what)
{
    if (status == SWY_OK) {
        return 0;
    }
    fprintf(stderr, "swy-bench: rank %d: %s failed: %s: %s\n",
            swy_comm_rank(comm), what, swy_status_string(status),
            swy_last_error(comm));
    return -1;
}

static int swy_impl_barrier(void *ctx)
{
    swy_comm_t comm = ctx;

    return swy_call_check(comm, swy_barrier(comm), "swy_barrier");
}

static int swy_impl_alltoallv(void *ctx, const float *sendbuf,
                              const size_t *counts, const size_t *displs,
                              float *recvbuf)
{
    swy_comm_t comm = ctx;

    return swy_call_check(comm,
                          swy_alltoallv(sendbuf, counts, displs, recvbuf,
                                        counts, displs, SWY_FLOAT32, comm,
                                        NULL, NULL),
                          "swy_alltoallv");
}

static int swy_impl_allreduce_sum(void *ctx, const float *sendbuf,
                                  float *recvbuf, size_t count)
{
    swy_comm_t comm = ctx;

    return swy_call_check(comm,
                          swy_allreduce(sendbuf, recvbuf, count, SWY_FLOAT32,
                                        SWY_SUM, comm, NULL, NULL),
                          "swy_allreduce");
}

static int swy_impl_max_doubles(void *ctx, double *values, size_t count)
{
    swy_comm_t comm = ctx;

    return swy_call_check(comm,
                          swy_allreduce(values, values, count, SWY_FLOAT64,
                                        SWY_MAX, comm, NULL, NULL),
                          "swy_allreduce (max of timings)");
}

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

    swyb_coll_impl_t impl = {
        .name = "switchyard",
        .rank = swy_comm_rank(comm),
        .nranks = swy_comm_size(comm),
        .ctx = comm,
        .barrier = swy_impl_barrier,
        .alltoallv = swy_impl_alltoallv,
        .allreduce_sum = swy_impl_allreduce_sum,
        .max_doubles = swy_impl_max_doubles,
    };
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
