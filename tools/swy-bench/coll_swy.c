/* The coll benchmark's calls on Switchyard's public API; see coll_swy.h. */
#include "coll_swy.h"

#include <stdio.h>

int swyb_swy_check(swy_comm_t comm, swy_status_t status, const char *what)
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

    return swyb_swy_check(comm, swy_barrier(comm), "swy_barrier");
}

static int swy_impl_alltoallv(void *ctx, const float *sendbuf,
                              const size_t *counts, const size_t *displs,
                              float *recvbuf)
{
    swy_comm_t comm = ctx;

    return swyb_swy_check(comm,
                          swy_alltoallv(sendbuf, counts, displs, recvbuf,
                                        counts, displs, SWY_FLOAT32, comm,
                                        NULL, NULL),
                          "swy_alltoallv");
}

static int swy_impl_allreduce_sum(void *ctx, const float *sendbuf,
                                  float *recvbuf, size_t count)
{
    swy_comm_t comm = ctx;

    return swyb_swy_check(comm,
                          swy_allreduce(sendbuf, recvbuf, count, SWY_FLOAT32,
                                        SWY_SUM, comm, NULL, NULL),
                          "swy_allreduce");
}

static int swy_impl_max_doubles(void *ctx, double *values, size_t count)
{
    swy_comm_t comm = ctx;

    return swyb_swy_check(comm,
                          swy_allreduce(values, values, count, SWY_FLOAT64,
                                        SWY_MAX, comm, NULL, NULL),
                          "swy_allreduce (max of timings)");
}

static void *swy_impl_mem_alloc(void *ctx, size_t bytes)
{
    swy_comm_t comm = ctx;
    void *ptr = NULL;

    if (swyb_swy_check(comm, swy_mem_alloc(comm, bytes, &ptr),
                       "swy_mem_alloc") != 0)
        return NULL;
    return ptr;
}

static void swy_impl_mem_free(void *ctx, void *ptr)
{
    swy_comm_t comm = ctx;

    (void)swyb_swy_check(comm, swy_mem_free(comm, ptr), "swy_mem_free");
}

void swyb_coll_switchyard_impl(swy_comm_t comm, swyb_coll_impl_t *impl)
{
    *impl = (swyb_coll_impl_t){
        .name = "switchyard",
        .rank = swy_comm_rank(comm),
        .nranks = swy_comm_size(comm),
        .ctx = comm,
        .barrier = swy_impl_barrier,
        .alltoallv = swy_impl_alltoallv,
        .allreduce_sum = swy_impl_allreduce_sum,
        .max_doubles = swy_impl_max_doubles,
        .mem_alloc = swy_impl_mem_alloc,
        .mem_free = swy_impl_mem_free,
        .mem_what = "shared (swy_mem_alloc: the local ranks reach them "
                    "directly)",
    };
}
