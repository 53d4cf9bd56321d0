/* swy-bench-mpi: the coll benchmark (tools/swy-bench/coll_run.c) on
 * MPI_Alltoallv and MPI_Allreduce, the peer Switchyard is measured
 * against. Same sizes, data, check, timing and table as swy-bench coll;
 * "openmpi" in the JSON lines. Run:
 *   mpirun --allow-run-as-root --oversubscribe -np 4 swy-bench-mpi [opts] */
#include "coll_run.h"

#include <mpi.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    MPI_Comm comm;
    int nranks;
    int *counts; /* MPI takes int counts: converted once per size */
    int *displs;
    size_t cached_count;
} mpi_bench_t;

static int mpi_call_check(mpi_bench_t *bench, int err, const char *what)
{
    char message[MPI_MAX_ERROR_STRING];
    int len = 0;
    int rank = -1;

    if (err == MPI_SUCCESS) {
        return 0;
    }
    MPI_Comm_rank(bench->comm, &rank);
    MPI_Error_string(err, message, &len);
    fprintf(stderr, "swy-bench-mpi: rank %d: %s failed: %s\n", rank, what,
            message);
    return -1;
}

static int mpi_impl_barrier(void *ctx)
{
    mpi_bench_t *bench = ctx;

    return mpi_call_check(bench, MPI_Barrier(bench->comm), "MPI_Barrier");
}

static int mpi_impl_alltoallv(void *ctx, const float *sendbuf,
                              const size_t *counts, const size_t *displs,
                              float *recvbuf)
{
    mpi_bench_t *bench = ctx;

    /* The benchmark sends equal blocks, so the int arrays change only
     * with the size. */
    if (counts[0] != bench->cached_count) {
        for (int r = 0; r < bench->nranks; ++r) {
            if (counts[r] > INT_MAX || displs[r] > INT_MAX) {
                fprintf(stderr, "swy-bench-mpi: alltoallv block of %zu "
                        "floats exceeds MPI's int counts\n", counts[r]);
                return -1;
            }
            bench->counts[r] = (int)counts[r];
            bench->displs[r] = (int)displs[r];
        }
        bench->cached_count = counts[0];
    }
    return mpi_call_check(bench,
                          MPI_Alltoallv(sendbuf, bench->counts, bench->displs,
                                        MPI_FLOAT, recvbuf, bench->counts,
                                        bench->displs, MPI_FLOAT,
                                        bench->comm),
                          "MPI_Alltoallv");
}

static int mpi_impl_allreduce_sum(void *ctx, const float *sendbuf,
                                  float *recvbuf, size_t count)
{
    mpi_bench_t *bench = ctx;

    if (count > INT_MAX) {
        fprintf(stderr, "swy-bench-mpi: allreduce of %zu floats exceeds "
                "MPI's int counts\n", count);
        return -1;
    }
    return mpi_call_check(bench,
                          MPI_Allreduce(sendbuf, recvbuf, (int)count,
                                        MPI_FLOAT, MPI_SUM, bench->comm),
                          "MPI_Allreduce");
}

static int mpi_impl_max_doubles(void *ctx, double *values, size_t count)
{
    mpi_bench_t *bench = ctx;

    return mpi_call_check(bench,
                          MPI_Allreduce(MPI_IN_PLACE, values, (int)count,
                                        MPI_DOUBLE, MPI_MAX, bench->comm),
                          "MPI_Allreduce (max of timings)");
}

int main(int argc, char **argv)
{
    swyb_coll_options_t opts;
    mpi_bench_t bench = {.comm = MPI_COMM_WORLD, .cached_count = (size_t)-1};
    int rank;
    int rc;

    MPI_Init(&argc, &argv);
    /* Report errors as codes, so the failing call is named before abort. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &bench.nranks);

    switch (swyb_coll_options_parse(argc, argv, 1, "swy-bench-mpi", rank,
                                    &opts)) {
    case SWYB_COLL_PARSE_EXIT_OK:
        MPI_Finalize();
        return 0;
    case SWYB_COLL_PARSE_EXIT_USAGE:
        MPI_Finalize();
        return 2;
    case SWYB_COLL_PARSE_RUN:
        break;
    }

    bench.counts = calloc((size_t)bench.nranks, sizeof(int));
    bench.displs = calloc((size_t)bench.nranks, sizeof(int));
    if (bench.counts == NULL || bench.displs == NULL) {
        fprintf(stderr, "swy-bench-mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    swyb_coll_impl_t impl = {
        .name = "openmpi",
        .rank = rank,
        .nranks = bench.nranks,
        .ctx = &bench,
        .barrier = mpi_impl_barrier,
        .alltoallv = mpi_impl_alltoallv,
        .allreduce_sum = mpi_impl_allreduce_sum,
        .max_doubles = mpi_impl_max_doubles,
    };
    rc = swyb_coll_run(&impl, &opts, argc, argv);
    if (rc < 0) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(bench.displs);
    free(bench.counts);
    MPI_Finalize();
    return rc;
}
