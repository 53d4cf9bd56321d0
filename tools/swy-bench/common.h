/* Shared pieces of the Switchyard benchmarks (swy-bench and its peers such
 * as swy-bench-mpi): clocks, statistics, size parsing, the run header
 * (command, commit, machine, settings) and the result table and JSON lines.
 * Nothing here calls a communication library, so a peer benchmark compiles
 * this file in and prints exactly the same table. */
#ifndef SWY_BENCH_COMMON_H
#define SWY_BENCH_COMMON_H

#include <stddef.h>
#include <stdio.h>

/**
 * This process's rank as a launcher announced it (SWY_RANK, RANK,
 * OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID), or 0. For deciding who
 * prints before a communicator exists.
 */
int swyb_env_rank(void);

/** Monotonic time in seconds. */
double swyb_now_s(void);

/** Median, quartiles, minimum and maximum of a set of samples. */
typedef struct {
    double median;
    double min;
    double max;
    double q1; /* the samples at ranks (n - 1) / 4 and 3 (n - 1) / 4 */
    double q3;
} swyb_stats_t;

/**
 * Statistics of @p samples (n >= 1). The array is sorted in place; the
 * median of an even count is the mean of the two middle samples.
 */
void swyb_stats_compute(double *samples, size_t n, swyb_stats_t *stats_p);

/** Format a byte size compactly: 4K, 16M, 1G, or plain bytes. */
void swyb_size_format(size_t bytes, char *buf, size_t buf_len);

/**
 * Print the run header: benchmark, implementation, the command line, the
 * git commit the tool was built from, the machine (nproc, CPU model), the
 * number of ranks and the settings that shape the result (SWY_POLICY,
 * SWY_PARTITION_BYTES, SWY_WINDOW_BYTES, SWY_CREDIT_BYTES, UCX_TLS, as set
 * in the environment; "default" when not). Each line starts with "# ".
 */
void swyb_header_print(FILE *out, const char *bench, const char *impl,
                       int argc, char **argv, int nranks);

/** One measured (op, size) point of a collective benchmark. */
typedef struct {
    const char *impl;    /* "switchyard", "openmpi" */
    const char *op;      /* "alltoallv", "allreduce" */
    size_t bytes;        /* the size the bandwidth is computed from */
    int ranks;
    int iters;           /* timed iterations */
    int batch;           /* ops per iteration, back to back */
    swyb_stats_t time_s; /* per op: each iteration's slowest rank's time
                            over batch */
    double algbw_GBps;   /* bytes / median time, 1e9 bytes per GB */
    double busbw_GBps;   /* algbw scaled as nccl-tests does for the op */
    int correct;         /* the last iteration's result was verified */
    const char *mem;     /* "malloc" or "shared" (--mem) */
} swyb_coll_result_t;

/**
 * Fill algbw and busbw from bytes, ranks and the median time. The bus
 * bandwidth factor follows nccl-tests (doc/PERFORMANCE.md): (n-1)/n for
 * all-to-all, 2(n-1)/n for allreduce.
 */
void swyb_coll_result_finish(swyb_coll_result_t *result);

/** Print the table's column titles. */
void swyb_coll_table_header_print(FILE *out);

/** Print one table row. */
void swyb_coll_table_row_print(FILE *out, const swyb_coll_result_t *result);

/** Print one JSON line: {"bench":"coll","impl":...,...}. */
void swyb_coll_json_print(FILE *out, const swyb_coll_result_t *result);

#endif /* SWY_BENCH_COMMON_H */
