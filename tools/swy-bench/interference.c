/* swy-bench interference: the interference benchmark (interference_run.c)
 * on Switchyard's public API, every policy and the partition sweep in one
 * run (swy_comm_configure between measurements). The all-to-all and the
 * allreduce keep their default priorities (high and low) and are named in
 * traces ("a2a", "backlog"). */
#include "interference.h"

#include "coll_swy.h"
#include "common.h"
#include "interference_run.h"

#include "switchyard/switchyard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    swy_comm_t comm;
    swy_comm_t a2a_comm; /* comm, or one split from it (--a2a-comm split) */
    swy_request_t req[SWYB_IB_SLOTS];
} swy_ib_t;

static int swy_ib_barrier(void *ctx)
{
    swy_ib_t *s = ctx;

    return swyb_swy_check(s->comm, swy_barrier(s->comm), "swy_barrier");
}

static int swy_ib_ialltoallv(void *ctx, int slot, const float *sendbuf,
                             const size_t *counts, const size_t *displs,
                             float *recvbuf)
{
    swy_ib_t *s = ctx;
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;

    attr.name = "a2a";
    return swyb_swy_check(s->a2a_comm,
                          swy_alltoallv(sendbuf, counts, displs, recvbuf,
                                        counts, displs, SWY_FLOAT32,
                                        s->a2a_comm, &attr, &s->req[slot]),
                          "swy_alltoallv");
}

static int swy_ib_iallreduce_sum(void *ctx, int slot, const float *sendbuf,
                                 float *recvbuf, size_t count)
{
    swy_ib_t *s = ctx;
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;

    attr.name = "backlog";
    return swyb_swy_check(s->comm,
                          swy_allreduce(sendbuf, recvbuf, count, SWY_FLOAT32,
                                        SWY_SUM, s->comm, &attr,
                                        &s->req[slot]),
                          "swy_allreduce");
}

static int swy_ib_test(void *ctx, int slot, int *done_p)
{
    swy_ib_t *s = ctx;

    return swyb_swy_check(s->comm, swy_test(s->req[slot], done_p),
                          "swy_test");
}

static int swy_ib_wait(void *ctx, int slot)
{
    swy_ib_t *s = ctx;
    swy_status_t status = swy_wait(s->req[slot]);

    swy_request_free(s->req[slot]);
    s->req[slot] = NULL;
    return swyb_swy_check(s->comm, status, "swy_wait");
}

static int swy_ib_reduce_doubles(swy_ib_t *s, double *values, size_t count,
                                 swy_redop_t op)
{
    return swyb_swy_check(s->comm,
                          swy_allreduce(values, values, count, SWY_FLOAT64,
                                        op, s->comm, NULL, NULL),
                          "swy_allreduce (timings)");
}

static int swy_ib_max_doubles(void *ctx, double *values, size_t count)
{
    return swy_ib_reduce_doubles(ctx, values, count, SWY_MAX);
}

static int swy_ib_sum_doubles(void *ctx, double *values, size_t count)
{
    return swy_ib_reduce_doubles(ctx, values, count, SWY_SUM);
}

static int swy_ib_configure(void *ctx, const char *policy,
                            size_t partition_bytes, size_t credit_bytes,
                            size_t window_bytes)
{
    swy_ib_t *s = ctx;
    char partition[32] = "auto", credit[32] = "auto", window[32];

    if (partition_bytes > 0) {
        snprintf(partition, sizeof(partition), "%zu", partition_bytes);
    }
    if (credit_bytes > 0) {
        snprintf(credit, sizeof(credit), "%zu", credit_bytes);
    }
    /* Partition before credit: an "auto" credit follows the partition. */
    if (swyb_swy_check(s->comm, swy_comm_configure(s->comm, "SWY_POLICY",
                                                   policy),
                       "swy_comm_configure(SWY_POLICY)") != 0 ||
        swyb_swy_check(s->comm,
                       swy_comm_configure(s->comm, "SWY_PARTITION_BYTES",
                                          partition),
                       "swy_comm_configure(SWY_PARTITION_BYTES)") != 0 ||
        swyb_swy_check(s->comm,
                       swy_comm_configure(s->comm, "SWY_CREDIT_BYTES",
                                          credit),
                       "swy_comm_configure(SWY_CREDIT_BYTES)") != 0) {
        return -1;
    }
    if (window_bytes > 0) {
        snprintf(window, sizeof(window), "%zu", window_bytes);
        if (swyb_swy_check(s->comm,
                           swy_comm_configure(s->comm, "SWY_WINDOW_BYTES",
                                              window),
                           "swy_comm_configure(SWY_WINDOW_BYTES)") != 0) {
            return -1;
        }
    }
    return 0;
}

static int swy_ib_query(void *ctx, size_t *partition_bytes_p,
                        size_t *credit_bytes_p, size_t *window_bytes_p)
{
    swy_ib_t *s = ctx;
    char partition[64], credit[64], window[64];

    if (swyb_swy_check(s->comm,
                       swy_comm_query(s->comm, "SWY_PARTITION_BYTES",
                                      partition, sizeof(partition)),
                       "swy_comm_query") != 0 ||
        swyb_swy_check(s->comm,
                       swy_comm_query(s->comm, "SWY_CREDIT_BYTES", credit,
                                      sizeof(credit)),
                       "swy_comm_query") != 0 ||
        swyb_swy_check(s->comm,
                       swy_comm_query(s->comm, "SWY_WINDOW_BYTES", window,
                                      sizeof(window)),
                       "swy_comm_query") != 0) {
        return -1;
    }
    return swyb_swy_check(s->comm, swy_parse_size(window, window_bytes_p),
                          "swy_parse_size(SWY_WINDOW_BYTES)") != 0 ||
                   swyb_swy_check(s->comm,
                                  swy_parse_size(partition, partition_bytes_p),
                                  "swy_parse_size(SWY_PARTITION_BYTES)") != 0 ||
                   swyb_swy_check(s->comm,
                                  swy_parse_size(credit, credit_bytes_p),
                                  "swy_parse_size(SWY_CREDIT_BYTES)") != 0
               ? -1
               : 0;
}

static int swy_ib_phase_hint(void *ctx, int a2a_imminent)
{
    swy_ib_t *s = ctx;

    return swyb_swy_check(s->comm,
                          swy_phase_hint(s->comm,
                                         a2a_imminent ? SWY_PHASE_A2A_IMMINENT
                                                      : SWY_PHASE_NONE),
                          "swy_phase_hint");
}

static int swy_ib_counters(void *ctx, double *preemptions_p,
                           double *high_wait_s_p)
{
    swy_ib_t *s = ctx;
    swy_comm_stats_t stats;

    memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    if (swyb_swy_check(s->comm, swy_comm_stats(s->comm, &stats),
                       "swy_comm_stats") != 0) {
        return -1;
    }
    *preemptions_p = (double)stats.preemptions;
    *high_wait_s_p = stats.high_wait_s;
    return 0;
}

int swyb_interference_main(int argc, char **argv)
{
    swyb_ib_options_t opts;
    swy_ib_t s = {0};
    swy_status_t status;
    int rc;

    switch (swyb_ib_options_parse(argc, argv, 2, "swy-bench interference",
                                  swyb_env_rank(), 1, &opts)) {
    case SWYB_IB_PARSE_EXIT_OK:
        return 0;
    case SWYB_IB_PARSE_EXIT_USAGE:
        return 2;
    case SWYB_IB_PARSE_RUN:
        break;
    }

    status = swy_comm_init_env(&s.comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: swy_comm_init_env failed: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
        return 1;
    }

    s.a2a_comm = s.comm;
    if (opts.a2a_split) {
        status = swy_comm_split(s.comm, 0, swy_comm_rank(s.comm), &s.a2a_comm);
        if (status != SWY_OK) {
            fprintf(stderr, "swy-bench: swy_comm_split failed: %s: %s\n",
                    swy_status_string(status), swy_last_error(s.comm));
            swy_comm_abort(s.comm);
            return 1;
        }
    }
    swyb_ib_impl_t impl = {
        .name = "switchyard",
        .comms = opts.a2a_split ? "a2a-split" : "one",
        .rank = swy_comm_rank(s.comm),
        .nranks = swy_comm_size(s.comm),
        .ctx = &s,
        .barrier = swy_ib_barrier,
        .ialltoallv = swy_ib_ialltoallv,
        .iallreduce_sum = swy_ib_iallreduce_sum,
        .test = swy_ib_test,
        .wait = swy_ib_wait,
        .max_doubles = swy_ib_max_doubles,
        .sum_doubles = swy_ib_sum_doubles,
        .configure = swy_ib_configure,
        .query = swy_ib_query,
        .counters = swy_ib_counters,
        .phase_hint = swy_ib_phase_hint,
    };
    rc = swyb_ib_run(&impl, &opts, argc, argv);
    if (rc < 0) {
        /* Peers may be blocked in a collective this rank will never post. */
        if (s.a2a_comm != s.comm)
            swy_comm_abort(s.a2a_comm);
        swy_comm_abort(s.comm);
        return 1;
    }
    if (s.a2a_comm != s.comm &&
        swyb_swy_check(s.a2a_comm, swy_comm_destroy(s.a2a_comm),
                       "swy_comm_destroy") != 0)
        rc = 1;
    status = swy_comm_destroy(s.comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: swy_comm_destroy failed: %s\n",
                swy_status_string(status));
        return 1;
    }
    return rc;
}
