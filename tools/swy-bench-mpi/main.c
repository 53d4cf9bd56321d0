/* swy-bench-mpi: the peer Switchyard is measured against, in two modes.
 *
 *   swy-bench-mpi [coll] [opts]       the coll benchmark
 *       (tools/swy-bench/coll_run.c) on MPI_Alltoallv and MPI_Allreduce;
 *       with --with-switchyard, on Switchyard too in the same job (its
 *       communicator set up through MPI, as an NCCL user does), every
 *       iteration running both: the comparison then does not depend on
 *       which phase of a noisy machine each run met;
 *   swy-bench-mpi interference [opts] the interference benchmark
 *       (tools/swy-bench/interference_run.c) on MPI_Ialltoallv under an
 *       MPI_Iallreduce backlog. MPI has no priorities: one configuration,
 *       "policy":"openmpi".
 *
 * Same sizes, data, check, timing and table as swy-bench; "openmpi" in the
 * JSON lines. Run:
 *   mpirun --allow-run-as-root --oversubscribe -np 4 swy-bench-mpi [opts] */
#include "coll_run.h"
#include "coll_swy.h"
#include "interference_run.h"

#include <mpi.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Comm comm;
    int nranks;
    int *counts; /* MPI takes int counts: converted once per size */
    int *displs;
    size_t cached_count;
    MPI_Request req[SWYB_IB_SLOTS]; /* interference */
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

/* MPI's int count and displacement arrays, converted once per size (the
 * benchmark sends equal blocks, so they change only with the size). */
static int mpi_int_counts(mpi_bench_t *bench, const size_t *counts,
                          const size_t *displs)
{
    if (counts[0] == bench->cached_count) {
        return 0;
    }
    for (int r = 0; r < bench->nranks; ++r) {
        if (counts[r] > INT_MAX || displs[r] > INT_MAX) {
            fprintf(stderr, "swy-bench-mpi: alltoallv block of %zu floats "
                    "exceeds MPI's int counts\n", counts[r]);
            return -1;
        }
        bench->counts[r] = (int)counts[r];
        bench->displs[r] = (int)displs[r];
    }
    bench->cached_count = counts[0];
    return 0;
}

static int mpi_impl_alltoallv(void *ctx, const float *sendbuf,
                              const size_t *counts, const size_t *displs,
                              float *recvbuf)
{
    mpi_bench_t *bench = ctx;

    if (mpi_int_counts(bench, counts, displs) != 0)
        return -1;
    return mpi_call_check(bench,
                          MPI_Alltoallv(sendbuf, bench->counts, bench->displs,
                                        MPI_FLOAT, recvbuf, bench->counts,
                                        bench->displs, MPI_FLOAT,
                                        bench->comm),
                          "MPI_Alltoallv");
}

/* MPI counts are ints: larger buffers cannot be measured. */
static int count_fits_int(size_t count, const char *what)
{
    if (count <= INT_MAX)
        return 1;
    fprintf(stderr, "swy-bench-mpi: %s of %zu floats exceeds MPI's int "
            "counts\n", what, count);
    return 0;
}

static int mpi_impl_allreduce_sum(void *ctx, const float *sendbuf,
                                  float *recvbuf, size_t count)
{
    mpi_bench_t *bench = ctx;

    if (!count_fits_int(count, "allreduce"))
        return -1;
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

/* The interference hooks. */

/* --mem shared: MPI's own allocation, which an MPI library may place
 * where its transports reach it best (registered or shared memory). */
static void *mpi_mem_alloc(void *ctx, size_t bytes)
{
    mpi_bench_t *bench = ctx;
    void *ptr = NULL;

    if ((MPI_Aint)bytes < 0 ||
        mpi_call_check(bench, MPI_Alloc_mem((MPI_Aint)bytes, MPI_INFO_NULL,
                                            &ptr),
                       "MPI_Alloc_mem") != 0)
        return NULL;
    return ptr;
}

static void mpi_mem_free(void *ctx, void *ptr)
{
    (void)mpi_call_check(ctx, MPI_Free_mem(ptr), "MPI_Free_mem");
}

static int mpi_ib_ialltoallv(void *ctx, int slot, const float *sendbuf,
                             const size_t *counts, const size_t *displs,
                             float *recvbuf)
{
    mpi_bench_t *bench = ctx;

    if (mpi_int_counts(bench, counts, displs) != 0) {
        return -1;
    }
    return mpi_call_check(bench,
                          MPI_Ialltoallv(sendbuf, bench->counts,
                                         bench->displs, MPI_FLOAT, recvbuf,
                                         bench->counts, bench->displs,
                                         MPI_FLOAT, bench->comm,
                                         &bench->req[slot]),
                          "MPI_Ialltoallv");
}

static int mpi_ib_iallreduce_sum(void *ctx, int slot, const float *sendbuf,
                                 float *recvbuf, size_t count)
{
    mpi_bench_t *bench = ctx;

    if (!count_fits_int(count, "allreduce"))
        return -1;
    return mpi_call_check(bench,
                          MPI_Iallreduce(sendbuf, recvbuf, (int)count,
                                         MPI_FLOAT, MPI_SUM, bench->comm,
                                         &bench->req[slot]),
                          "MPI_Iallreduce");
}

static int mpi_ib_test(void *ctx, int slot, int *done_p)
{
    mpi_bench_t *bench = ctx;
    int flag = 0;

    /* A completed request becomes MPI_REQUEST_NULL, which tests done. */
    if (mpi_call_check(bench,
                       MPI_Test(&bench->req[slot], &flag, MPI_STATUS_IGNORE),
                       "MPI_Test") != 0) {
        return -1;
    }
    *done_p = flag;
    return 0;
}

static int mpi_ib_wait(void *ctx, int slot)
{
    mpi_bench_t *bench = ctx;

    return mpi_call_check(bench,
                          MPI_Wait(&bench->req[slot], MPI_STATUS_IGNORE),
                          "MPI_Wait");
}

static int mpi_ib_sum_doubles(void *ctx, double *values, size_t count)
{
    mpi_bench_t *bench = ctx;

    return mpi_call_check(bench,
                          MPI_Allreduce(MPI_IN_PLACE, values, (int)count,
                                        MPI_DOUBLE, MPI_SUM, bench->comm),
                          "MPI_Allreduce (sum of counters)");
}

static int interference_main(mpi_bench_t *bench, int rank, int argc,
                             char **argv)
{
    swyb_ib_options_t opts;

    switch (swyb_ib_options_parse(argc, argv, 2,
                                  "swy-bench-mpi interference", rank, 0,
                                  &opts)) {
    case SWYB_IB_PARSE_EXIT_OK:
        return 0;
    case SWYB_IB_PARSE_EXIT_USAGE:
        return 2;
    case SWYB_IB_PARSE_RUN:
        break;
    }
    swyb_ib_impl_t impl = {
        .name = "openmpi",
        .rank = rank,
        .nranks = bench->nranks,
        .ctx = bench,
        .barrier = mpi_impl_barrier,
        .ialltoallv = mpi_ib_ialltoallv,
        .iallreduce_sum = mpi_ib_iallreduce_sum,
        .test = mpi_ib_test,
        .wait = mpi_ib_wait,
        .max_doubles = mpi_impl_max_doubles,
        .sum_doubles = mpi_ib_sum_doubles,
    };
    return swyb_ib_run(&impl, &opts, argc, argv);
}

/* Switchyard's communicator on the ranks of MPI_COMM_WORLD: rank 0's
 * unique id reaches the others by MPI_Bcast. */
static int switchyard_init(mpi_bench_t *bench, int rank, swy_comm_t *comm_p)
{
    swy_unique_id_t id;
    swy_status_t status = SWY_OK;
    int failed = 0;
    int any_failed = 0;

    if (rank == 0) {
        status = swy_get_unique_id(&id);
        if (status != SWY_OK) {
            fprintf(stderr, "swy-bench-mpi: swy_get_unique_id failed: %s: "
                    "%s\n", swy_status_string(status), swy_last_error(NULL));
        }
    }
    /* Rank 0's failure reaches everyone before anyone waits on it. */
    failed = status != SWY_OK;
    if (mpi_call_check(bench, MPI_Bcast(&failed, 1, MPI_INT, 0,
                                        bench->comm), "MPI_Bcast") != 0 ||
        failed ||
        mpi_call_check(bench, MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0,
                                        bench->comm), "MPI_Bcast") != 0) {
        return -1;
    }
    status = swy_comm_init_rank(comm_p, bench->nranks, &id, rank);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench-mpi: rank %d: swy_comm_init_rank "
                "failed: %s: %s\n", rank, swy_status_string(status),
                swy_last_error(NULL));
    }
    failed = status != SWY_OK;
    if (mpi_call_check(bench, MPI_Allreduce(&failed, &any_failed, 1,
                                            MPI_INT, MPI_MAX, bench->comm),
                       "MPI_Allreduce") != 0 || any_failed) {
        return -1;
    }
    return 0;
}

/* Take --with-switchyard out of argv; 1 if it was there. */
static int with_switchyard_take(int *argc_p, char **argv)
{
    int found = 0;
    int out = 1;

    for (int i = 1; i < *argc_p; ++i) {
        if (strcmp(argv[i], "--with-switchyard") == 0) {
            found = 1;
        } else {
            argv[out++] = argv[i];
        }
    }
    argv[out] = NULL;
    *argc_p = out;
    return found;
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
    for (int i = 0; i < SWYB_IB_SLOTS; ++i) {
        bench.req[i] = MPI_REQUEST_NULL;
    }
    bench.counts = calloc((size_t)bench.nranks, sizeof(int));
    bench.displs = calloc((size_t)bench.nranks, sizeof(int));
    if (bench.counts == NULL || bench.displs == NULL) {
        fprintf(stderr, "swy-bench-mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    if (argc > 1 && strcmp(argv[1], "interference") == 0) {
        rc = interference_main(&bench, rank, argc, argv);
        if (rc < 0) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(bench.displs);
        free(bench.counts);
        MPI_Finalize();
        return rc;
    }
    /* "coll" is the default mode; the word itself may be given. */
    int with_switchyard = with_switchyard_take(&argc, argv);
    switch (swyb_coll_options_parse(argc, argv,
                                    argc > 1 && strcmp(argv[1], "coll") == 0
                                        ? 2 : 1,
                                    "swy-bench-mpi", rank, &opts)) {
    case SWYB_COLL_PARSE_EXIT_OK:
        if (rank == 0) {
            printf("  --with-switchyard also run Switchyard in this job: "
                   "every iteration\n"
                   "                    runs both, each first in turn; "
                   "prints both medians\n"
                   "                    and the per-iteration ratios "
                   "openmpi / switchyard\n");
        }
        MPI_Finalize();
        return 0;
    case SWYB_COLL_PARSE_EXIT_USAGE:
        MPI_Finalize();
        return 2;
    case SWYB_COLL_PARSE_RUN:
        break;
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
        .mem_alloc = mpi_mem_alloc,
        .mem_free = mpi_mem_free,
        .mem_what = "shared (MPI_Alloc_mem)",
    };
    if (with_switchyard) {
        swy_comm_t comm;
        swyb_coll_impl_t swy_impl;

        if (switchyard_init(&bench, rank, &comm) != 0) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        swyb_coll_switchyard_impl(comm, &swy_impl);
        rc = swyb_coll_run_paired(&impl, &swy_impl, &opts, argc, argv);
        if (rc < 0) {
            swy_comm_abort(comm);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (swy_comm_destroy(comm) != SWY_OK) {
            fprintf(stderr, "swy-bench-mpi: rank %d: swy_comm_destroy "
                    "failed\n", rank);
            rc = 1;
        }
    } else {
        rc = swyb_coll_run(&impl, &opts, argc, argv);
    }
    if (rc < 0) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(bench.displs);
    free(bench.counts);
    MPI_Finalize();
    return rc;
}
