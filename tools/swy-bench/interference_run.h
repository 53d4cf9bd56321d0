/* The interference benchmark, independent of the library under test: an
 * all-to-all (the MoE dispatch) timed alone and while a concurrent
 * allreduce backlog (dense gradients) occupies the links, per scheduling
 * configuration. swy-bench interference (Switchyard, every policy and a
 * partition sweep in one run) and swy-bench-mpi interference (Open MPI's
 * MPI_Ialltoallv under MPI_Iallreduce, one configuration) supply the calls
 * below and so measure in exactly the same way. */
#ifndef SWY_BENCH_INTERFERENCE_RUN_H
#define SWY_BENCH_INTERFERENCE_RUN_H

#include <stddef.h>

#define SWYB_IB_MAX_LIST 16

typedef struct {
    size_t a2a_bytes;       /* per rank, in total, split evenly over ranks */
    size_t allreduce_bytes; /* the backlog's buffer */
    double delay_s;         /* backlog alone on the links before the a2a */
    int reps;               /* timed repetitions per configuration */
    int warmup;             /* untimed loaded rounds per configuration */
    int json;
    /* Configurations (ignored by a peer without a scheduler). Sizes of 0
     * mean "auto". */
    int npolicies;
    char policies[SWYB_IB_MAX_LIST][32];
    int ncredits;
    size_t credits[SWYB_IB_MAX_LIST];
    int npartitions; /* 0: no partition sweep */
    size_t partitions[SWYB_IB_MAX_LIST];
    char sweep_policy[32];
    size_t window_bytes; /* 0: the library's setting */
    /* The all-to-all on a communicator of its own (split from the world,
     * the same ranks), the backlog on the world: --a2a-comm split. */
    int a2a_split;
} swyb_ib_options_t;

typedef enum {
    SWYB_IB_PARSE_RUN,
    SWYB_IB_PARSE_EXIT_OK,
    SWYB_IB_PARSE_EXIT_USAGE,
} swyb_ib_parse_t;

/**
 * Parse the interference options from argv[first..argc-1]; @p prog names
 * the program in messages. @p scheduled is 0 for a peer without policies
 * (the policy, partition and credit options are then refused). Prints on
 * @p rank 0 only.
 */
swyb_ib_parse_t swyb_ib_options_parse(int argc, char **argv, int first,
                                      const char *prog, int rank,
                                      int scheduled, swyb_ib_options_t *opts_p);

/* Request slots: the benchmark has at most one of each in flight. */
enum { SWYB_IB_SLOT_A2A = 0, SWYB_IB_SLOT_ALLREDUCE = 1, SWYB_IB_SLOTS = 2 };

/** The library under test. Each call returns 0 on success; on failure it
 * has printed the cause (naming the rank) to stderr. */
typedef struct {
    const char *name; /* "switchyard", "openmpi" */
    /* Which communicators carry the ops (JSON "comms"): "one", or
     * "a2a-split" (all-to-all on its own communicator). NULL: "one". */
    const char *comms;
    int rank;
    int nranks;
    void *ctx;
    int (*barrier)(void *ctx);
    /* Non-blocking posts into a slot; counts and displacements in floats.
     * The all-to-all is the high-priority op where priorities exist. */
    int (*ialltoallv)(void *ctx, int slot, const float *sendbuf,
                      const size_t *counts, const size_t *displs,
                      float *recvbuf);
    int (*iallreduce_sum)(void *ctx, int slot, const float *sendbuf,
                          float *recvbuf, size_t count);
    int (*test)(void *ctx, int slot, int *done_p);
    int (*wait)(void *ctx, int slot); /* completes and releases the slot */
    /* element-wise max / sum over ranks, in place */
    int (*max_doubles)(void *ctx, double *values, size_t count);
    int (*sum_doubles)(void *ctx, double *values, size_t count);
    /* Scheduler hooks, NULL for a peer without one. configure: sizes of 0
     * mean "auto" (window: leave as is); query: the values in effect, in
     * bytes. */
    int (*configure)(void *ctx, const char *policy, size_t partition_bytes,
                     size_t credit_bytes, size_t window_bytes);
    int (*query)(void *ctx, size_t *partition_bytes_p,
                 size_t *credit_bytes_p, size_t *window_bytes_p);
    /* Announce (1) or end (0) the phase before an all-to-all; NULL for a
     * peer without hints. Used by the policies named "<policy>+hint". */
    int (*phase_hint)(void *ctx, int a2a_imminent);
    /* cumulative counters of this rank: preemptions, high-priority wait */
    int (*counters)(void *ctx, double *preemptions_p, double *high_wait_s_p);
} swyb_ib_impl_t;

/**
 * Run the benchmark: header and table on rank 0, JSON lines with --json.
 * Returns 0 when every result was right, 1 when one was wrong (the job is
 * still usable), -1 when a call failed (the cause is printed; abort).
 */
int swyb_ib_run(const swyb_ib_impl_t *impl, const swyb_ib_options_t *opts,
                int argc, char **argv);

#endif /* SWY_BENCH_INTERFERENCE_RUN_H */
