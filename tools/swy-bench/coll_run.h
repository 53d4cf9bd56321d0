/* The coll benchmark, independent of the library under test: options,
 * the sizes, the data each rank sends and how the result is checked, and
 * the timing loop. swy-bench (Switchyard) and swy-bench-mpi (Open MPI)
 * supply the four calls below and so measure in exactly the same way. */
#ifndef SWY_BENCH_COLL_RUN_H
#define SWY_BENCH_COLL_RUN_H

#include "common.h"

#include <stddef.h>

enum {
    SWYB_COLL_OP_ALLTOALLV = 1 << 0,
    SWYB_COLL_OP_ALLREDUCE = 1 << 1,
};

typedef struct {
    unsigned ops;     /* SWYB_COLL_OP_* mask */
    size_t min_bytes;
    size_t max_bytes;
    size_t factor;    /* next size = size * factor */
    int iters;        /* timed iterations per size; 0 = about 0.2 s, >= 5 */
    int warmup;       /* untimed iterations per size */
    int batch;        /* ops per iteration, back to back (default 1) */
    int json;         /* also print one JSON line per (op, size) */
    int mem_shared;   /* --mem shared: buffers from the impl's mem_alloc */
} swyb_coll_options_t;

/** What swyb_coll_options_parse() decided. */
typedef enum {
    SWYB_COLL_PARSE_RUN,
    SWYB_COLL_PARSE_EXIT_OK,    /* --help printed */
    SWYB_COLL_PARSE_EXIT_USAGE, /* bad option; message printed */
} swyb_coll_parse_t;

/**
 * Parse the coll options from argv[first..argc-1] (argv[first - 1] is the
 * name used in messages). Prints usage or errors to stderr on @p rank 0
 * only, so a job of many ranks says it once.
 */
swyb_coll_parse_t swyb_coll_options_parse(int argc, char **argv, int first,
                                          const char *prog, int rank,
                                          swyb_coll_options_t *opts_p);

/** The library under test. Each call returns 0 on success; on failure it
 * has printed the cause (naming the rank) to stderr. */
typedef struct {
    const char *name; /* "switchyard", "openmpi" */
    int rank;
    int nranks;
    void *ctx;
    int (*barrier)(void *ctx);
    /* counts and displacements are in floats, one per rank */
    int (*alltoallv)(void *ctx, const float *sendbuf, const size_t *counts,
                     const size_t *displs, float *recvbuf);
    int (*allreduce_sum)(void *ctx, const float *sendbuf, float *recvbuf,
                         size_t count);
    /* element-wise maximum over ranks, in place */
    int (*max_doubles)(void *ctx, double *values, size_t count);
    /* --mem shared: the library's own allocation (swy_mem_alloc,
     * MPI_Alloc_mem), or NULL for aligned_alloc; NULL on failure.
     * mem_what names it in the header. */
    void *(*mem_alloc)(void *ctx, size_t bytes);
    void (*mem_free)(void *ctx, void *ptr);
    const char *mem_what;
} swyb_coll_impl_t;

/**
 * Run the benchmark: the header and table on rank 0, JSON lines with
 * --json. Returns 0 when every result was right, 1 when one was wrong
 * (the job is still usable: close it normally), -1 when a call failed
 * (the cause is printed; abort the job).
 */
int swyb_coll_run(const swyb_coll_impl_t *impl,
                  const swyb_coll_options_t *opts, int argc, char **argv);

/**
 * swyb_coll_run(), also handing back rank 0's results in table order:
 * up to @p out_max of them into @p out, their number in *@p out_n_p (0 on
 * the other ranks).
 */
int swyb_coll_run_collect(const swyb_coll_impl_t *impl,
                          const swyb_coll_options_t *opts, int argc,
                          char **argv, swyb_coll_result_t *out,
                          size_t out_max, size_t *out_n_p);

/**
 * The same on two libraries in one job, over the same buffers: every
 * iteration runs both (each after its own barrier; @p a first in even
 * iterations, @p b first in odd ones), so that both meet the same phases
 * of a shared, noisy machine. Prints one table of both medians and the
 * median and quartiles of the per-iteration ratios a / b; with --json,
 * both "coll" lines and a "coll_pair" line per point. Both must number
 * the ranks alike. Returns as swyb_coll_run().
 */
int swyb_coll_run_paired(const swyb_coll_impl_t *a,
                         const swyb_coll_impl_t *b,
                         const swyb_coll_options_t *opts, int argc,
                         char **argv);

#endif /* SWY_BENCH_COLL_RUN_H */
