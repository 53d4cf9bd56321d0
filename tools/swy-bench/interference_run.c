/* The interference benchmark's options, data, check and timing; see
 * interference_run.h.
 *
 * One repetition of a configuration runs three timed phases, each after a
 * barrier, interleaved so that a slow phase of a shared machine hits all
 * three alike:
 *   1. the all-to-all alone;
 *   2. the allreduce alone;
 *   3. loaded: post the allreduce, let it run alone for --delay-ms (so its
 *      micro-ops occupy the links and the buffers beneath), post the
 *      all-to-all and time it from post to completion, note whether the
 *      allreduce was still running when the all-to-all ended (it must be:
 *      otherwise the all-to-all did not meet a backlog), then wait for the
 *      allreduce and time it from its own post.
 * Every time is per rank; the slowest rank's counts, as in coll. */
#include "interference_run.h"

#include "common.h"
#include "switchyard/switchyard.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IB_DEFAULT_A2A_BYTES ((size_t)2 << 20)
#define IB_BACKLOG_FACTOR 8
#define IB_MAX_REPS 1000
/* How often the delay loop looks at the backlog: a library without a
 * progress thread (MPI) advances only inside such calls. */
#define IB_POLL_S 100e-6

static void ib_usage_print(FILE *out, const char *prog, int scheduled)
{
    fprintf(out,
        "Usage: %s [options]\n"
        "Time an all-to-all alone and under a concurrent allreduce backlog:\n"
        "post the allreduce, wait --delay-ms, post the all-to-all and time it\n"
        "from post to completion (slowest rank), then wait the allreduce and\n"
        "time it from its own post. Reports per configuration the all-to-all\n"
        "median/p95 alone and loaded, slowdown = loaded / alone (medians), and\n"
        "allreduce throughput alone and loaded (MB/s, 1e6 B/s).\n"
        "\n"
        "  --a2a-size SIZE        bytes each rank sends in the all-to-all, split\n"
        "                         evenly over all ranks (default 2M)\n"
        "  --allreduce-size SIZE  allreduce buffer bytes (default 8 x a2a)\n"
        "  --delay-ms MS          backlog alone before the all-to-all (default 5)\n"
        "  --reps N               timed repetitions (default 7, >= 1)\n"
        "  --warmup N             untimed loaded rounds (default 1)\n"
        "  --nodes N              node count to report (default SWY_NNODES or 1)\n"
        "  --json                 also print one JSON line per configuration\n",
        prog);
    if (scheduled) {
        fprintf(out,
        "  --a2a-comm world|split the all-to-all on the world (default) or on\n"
        "                         a communicator split from it (same ranks),\n"
        "                         the backlog on the world: priorities across\n"
        "                         communicators\n");
        fprintf(out,
        "  --policies LIST        policies, each measured in this run\n"
        "                         (default fifo,fair,lina,credit)\n"
        "  --credits LIST         credit sizes for the priority policies (lina,\n"
        "                         credit); 'auto' = one partition (default auto)\n"
        "  --partitions LIST      partition sweep under --sweep-policy (default\n"
        "                         64K,128K,256K,512K,1M,4M; 'none' skips it)\n"
        "  --sweep-policy NAME    policy of the partition sweep (default lina)\n"
        "  --window SIZE          SWY_WINDOW_BYTES for every configuration\n"
        "                         (default: the library's)\n"
        "A policy named NAME+hint runs NAME and calls swy_phase_hint(A2A_\n"
        "IMMINENT) when the backlog is posted, as a framework that knows an\n"
        "all-to-all follows would, and SWY_PHASE_NONE after the all-to-all.\n"
        "Configurations switch with swy_comm_configure between measurements.\n");
    }
    fprintf(out, "  -h, --help             show this text\n"
                 "SIZE takes K, M, G suffixes (binary).\n");
}

static int int_parse(const char *text, int min, int max, int *value_p)
{
    char *end;
    long value = strtol(text, &end, 10);

    if (*text == '\0' || *end != '\0' || value < min || value > max) {
        return -1;
    }
    *value_p = (int)value;
    return 0;
}

/* Comma-separated sizes; "auto" is 0 when allowed, "none" an empty list. */
static int size_list_parse(const char *text, int allow_auto, size_t *sizes,
                           int *n_p)
{
    char copy[512];
    char *save = NULL;
    int n = 0;

    if (strcmp(text, "none") == 0) {
        *n_p = 0;
        return 0;
    }
    if (strlen(text) >= sizeof(copy)) {
        return -1;
    }
    strcpy(copy, text);
    for (char *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        size_t value = 0;

        if (n == SWYB_IB_MAX_LIST) {
            return -1;
        }
        if (strcmp(item, "auto") == 0 && allow_auto) {
            value = 0;
        } else if (swy_parse_size(item, &value) != 0 || value == 0) {
            return -1;
        }
        sizes[n++] = value;
    }
    if (n == 0) {
        return -1;
    }
    *n_p = n;
    return 0;
}

static int name_list_parse(const char *text, char names[][32], int *n_p)
{
    char copy[512];
    char *save = NULL;
    int n = 0;

    if (strlen(text) >= sizeof(copy)) {
        return -1;
    }
    strcpy(copy, text);
    for (char *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (n == SWYB_IB_MAX_LIST || strlen(item) >= 32) {
            return -1;
        }
        strcpy(names[n++], item);
    }
    if (n == 0) {
        return -1;
    }
    *n_p = n;
    return 0;
}

static int ib_nodes = 0; /* --nodes; 0: from SWY_NNODES */

swyb_ib_parse_t swyb_ib_options_parse(int argc, char **argv, int first,
                                      const char *prog, int rank,
                                      int scheduled, swyb_ib_options_t *opts_p)
{
    enum { OPT_A2A = 256, OPT_AR, OPT_DELAY, OPT_REPS, OPT_WARMUP,
           OPT_NODES, OPT_JSON, OPT_POLICIES, OPT_CREDITS, OPT_PARTITIONS,
           OPT_SWEEP, OPT_WINDOW, OPT_A2A_COMM };
    static const struct option long_options[] = {
        {"a2a-size", required_argument, NULL, OPT_A2A},
        {"allreduce-size", required_argument, NULL, OPT_AR},
        {"delay-ms", required_argument, NULL, OPT_DELAY},
        {"reps", required_argument, NULL, OPT_REPS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"json", no_argument, NULL, OPT_JSON},
        {"policies", required_argument, NULL, OPT_POLICIES},
        {"credits", required_argument, NULL, OPT_CREDITS},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"sweep-policy", required_argument, NULL, OPT_SWEEP},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"a2a-comm", required_argument, NULL, OPT_A2A_COMM},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    swyb_ib_options_t opts = {
        .a2a_bytes = IB_DEFAULT_A2A_BYTES,
        .allreduce_bytes = 0,
        .delay_s = 5e-3,
        .reps = 7,
        .warmup = 1,
        .npolicies = 4,
        .policies = {"fifo", "fair", "lina", "credit"},
        .ncredits = 1,
        .credits = {0},
        .npartitions = 6,
        .partitions = {64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20,
                       4 << 20},
        .sweep_policy = "lina",
    };
    FILE *err = rank == 0 ? stderr : NULL;
    char *end;
    int c;

    optind = 1;
    opterr = rank == 0;
    while ((c = getopt_long(argc - first + 1, argv + first - 1, "h",
                            long_options, NULL)) != -1) {
        if (!scheduled && (c == OPT_POLICIES || c == OPT_CREDITS ||
                           c == OPT_PARTITIONS || c == OPT_SWEEP ||
                           c == OPT_WINDOW)) {
            if (err) fprintf(err, "%s: %s has no scheduling policies\n",
                             prog, prog);
            return SWYB_IB_PARSE_EXIT_USAGE;
        }
        switch (c) {
        case OPT_A2A:
        case OPT_AR:
            if (swy_parse_size(optarg, c == OPT_A2A ? &opts.a2a_bytes
                                                     : &opts.allreduce_bytes)
                != 0) {
                if (err) fprintf(err, "%s: bad size '%s'\n", prog, optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_DELAY:
            opts.delay_s = strtod(optarg, &end) * 1e-3;
            if (*optarg == '\0' || *end != '\0' || !(opts.delay_s >= 0.0) ||
                opts.delay_s > 10.0) {
                if (err) fprintf(err, "%s: --delay-ms needs 0..10000, not "
                                 "'%s'\n", prog, optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_REPS:
        case OPT_WARMUP:
        case OPT_NODES:
            if (int_parse(optarg, c == OPT_WARMUP ? 0 : 1, IB_MAX_REPS,
                          c == OPT_REPS     ? &opts.reps
                          : c == OPT_WARMUP ? &opts.warmup
                                            : &ib_nodes) != 0) {
                if (err) fprintf(err, "%s: bad count '%s'\n", prog, optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_JSON:
            opts.json = 1;
            break;
        case OPT_POLICIES:
            if (name_list_parse(optarg, opts.policies, &opts.npolicies) != 0) {
                if (err) fprintf(err, "%s: bad --policies '%s'\n", prog,
                                 optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_CREDITS:
            if (size_list_parse(optarg, 1, opts.credits, &opts.ncredits) != 0
                || opts.ncredits == 0) {
                if (err) fprintf(err, "%s: bad --credits '%s'\n", prog,
                                 optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_PARTITIONS:
            if (size_list_parse(optarg, 1, opts.partitions,
                                &opts.npartitions) != 0) {
                if (err) fprintf(err, "%s: bad --partitions '%s'\n", prog,
                                 optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_SWEEP:
            if (strlen(optarg) >= sizeof(opts.sweep_policy)) {
                if (err) fprintf(err, "%s: bad --sweep-policy\n", prog);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            strcpy(opts.sweep_policy, optarg);
            break;
        case OPT_WINDOW:
            if (swy_parse_size(optarg, &opts.window_bytes) != 0 ||
                opts.window_bytes == 0) {
                if (err) fprintf(err, "%s: bad --window '%s'\n", prog,
                                 optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_A2A_COMM:
            if (strcmp(optarg, "world") != 0 && strcmp(optarg, "split") != 0) {
                if (err) fprintf(err, "%s: --a2a-comm is world or split, not "
                                 "'%s'\n", prog, optarg);
                return SWYB_IB_PARSE_EXIT_USAGE;
            }
            opts.a2a_split = strcmp(optarg, "split") == 0;
            break;
        case 'h':
            if (rank == 0) ib_usage_print(stdout, prog, scheduled);
            return SWYB_IB_PARSE_EXIT_OK;
        default:
            if (err) ib_usage_print(err, prog, scheduled);
            return SWYB_IB_PARSE_EXIT_USAGE;
        }
    }
    if (optind != argc - first + 1) {
        if (err) fprintf(err, "%s: unexpected argument '%s'\n", prog,
                         argv[first - 1 + optind]);
        return SWYB_IB_PARSE_EXIT_USAGE;
    }
    if (opts.allreduce_bytes == 0) {
        opts.allreduce_bytes = opts.a2a_bytes * IB_BACKLOG_FACTOR;
    }
    if (opts.a2a_bytes < sizeof(float) || opts.allreduce_bytes <
        sizeof(float)) {
        if (err) fprintf(err, "%s: sizes must hold at least one float\n",
                         prog);
        return SWYB_IB_PARSE_EXIT_USAGE;
    }
    if (!scheduled) {
        opts.npolicies = 0;
        opts.npartitions = 0;
        opts.ncredits = 0;
    }
    *opts_p = opts;
    return SWYB_IB_PARSE_RUN;
}

/* Data: small integers, exact in float32 and in any summation order, so
 * the check demands equality (as coll does). */
static float a2a_value(int src, int dst, size_t k)
{
    return (float)(((size_t)src * 29 + (size_t)dst * 11 + k) % 8191);
}

static float allreduce_value(int rank, size_t i)
{
    return (float)((i * 5 + (size_t)rank * 3) % 4093);
}

static void *buffer_alloc(size_t floats)
{
    size_t bytes = (floats * sizeof(float) + 4095) & ~(size_t)4095;

    return aligned_alloc(4096, bytes > 0 ? bytes : 4096);
}

typedef struct {
    const swyb_ib_impl_t *impl;
    const swyb_ib_options_t *opts;
    size_t a2a_count;   /* floats per peer */
    size_t a2a_floats;  /* per rank in total */
    size_t ar_count;    /* allreduce floats */
    size_t *counts;
    size_t *displs;
    float *a2a_send;
    float *a2a_recv;
    float *ar_send;
    float *ar_recv;
    int hint; /* of the configuration being measured */
} ib_bench_t;

/* One configuration's results. */
typedef struct {
    char policy[32];
    const char *sweep; /* "policies", "credit", "partition", "peer" */
    size_t partition_bytes;
    size_t credit_bytes;
    size_t window_bytes;
    int hint;           /* swy_phase_hint around the backlog */
    swyb_stats_t a2a_alone;
    swyb_stats_t a2a_loaded;
    swyb_stats_t ar_alone;
    swyb_stats_t ar_loaded;
    double a2a_alone_p95;
    double a2a_loaded_p95;
    double slowdown;
    double ar_MBps;
    double ar_alone_MBps;
    double preemptions; /* per loaded repetition, summed over ranks */
    double high_wait_ms;
    double overlap;     /* share of (rank, rep) whose backlog outlived a2a */
    int correct;
} ib_result_t;

static int ib_sleep_polling(const ib_bench_t *b, double until_s)
{
    const swyb_ib_impl_t *impl = b->impl;
    int done = 0;

    while (swyb_now_s() < until_s) {
        struct timespec ts = {0, (long)(IB_POLL_S * 1e9)};

        if (!done && impl->test(impl->ctx, SWYB_IB_SLOT_ALLREDUCE, &done)
            != 0) {
            return -1;
        }
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int ib_a2a_post(const ib_bench_t *b)
{
    return b->impl->ialltoallv(b->impl->ctx, SWYB_IB_SLOT_A2A, b->a2a_send,
                               b->counts, b->displs, b->a2a_recv);
}

static int ib_ar_post(const ib_bench_t *b)
{
    return b->impl->iallreduce_sum(b->impl->ctx, SWYB_IB_SLOT_ALLREDUCE,
                                   b->ar_send, b->ar_recv, b->ar_count);
}

/* Phases 1 and 2: one op alone, timed from post to completion. */
static int ib_alone(const ib_bench_t *b, int slot, double *elapsed_p)
{
    const swyb_ib_impl_t *impl = b->impl;
    double start;

    if (impl->barrier(impl->ctx) != 0) {
        return -1;
    }
    start = swyb_now_s();
    if ((slot == SWYB_IB_SLOT_A2A ? ib_a2a_post(b) : ib_ar_post(b)) != 0 ||
        impl->wait(impl->ctx, slot) != 0) {
        return -1;
    }
    *elapsed_p = swyb_now_s() - start;
    return 0;
}

/* Phase 3. */
static int ib_loaded(const ib_bench_t *b, double *a2a_s_p, double *ar_s_p,
                     int *overlap_p)
{
    const swyb_ib_impl_t *impl = b->impl;
    double ar_start, a2a_start, a2a_end;
    int ar_done = 0;

    if (impl->barrier(impl->ctx) != 0) {
        return -1;
    }
    if (b->hint && impl->phase_hint(impl->ctx, 1) != 0) {
        return -1;
    }
    ar_start = swyb_now_s();
    if (ib_ar_post(b) != 0 ||
        ib_sleep_polling(b, ar_start + b->opts->delay_s) != 0) {
        return -1;
    }
    a2a_start = swyb_now_s();
    if (ib_a2a_post(b) != 0 ||
        impl->wait(impl->ctx, SWYB_IB_SLOT_A2A) != 0) {
        return -1;
    }
    a2a_end = swyb_now_s();
    if (b->hint && impl->phase_hint(impl->ctx, 0) != 0) {
        return -1;
    }
    if (impl->test(impl->ctx, SWYB_IB_SLOT_ALLREDUCE, &ar_done) != 0 ||
        impl->wait(impl->ctx, SWYB_IB_SLOT_ALLREDUCE) != 0) {
        return -1;
    }
    *ar_s_p = swyb_now_s() - ar_start;
    *a2a_s_p = a2a_end - a2a_start;
    *overlap_p = !ar_done;
    return 0;
}

static size_t ib_check(const ib_bench_t *b)
{
    int rank = b->impl->rank;
    int n = b->impl->nranks;
    size_t wrong = 0;

    for (int src = 0; src < n; ++src) {
        const float *block = b->a2a_recv + (size_t)src * b->a2a_count;

        for (size_t k = 0; k < b->a2a_count; ++k) {
            wrong += block[k] != a2a_value(src, rank, k);
        }
    }
    for (size_t i = 0; i < b->ar_count; ++i) {
        double expected = 0.0;

        for (int r = 0; r < n; ++r) {
            expected += allreduce_value(r, i);
        }
        wrong += b->ar_recv[i] != (float)expected;
    }
    return wrong;
}

/* p95 by nearest rank of a sorted sample: with fewer than 20 samples it is
 * the maximum. */
static double p95_sorted(const double *sorted, int n)
{
    int index = (int)ceil(0.95 * n) - 1;

    return sorted[index < 0 ? 0 : index];
}

static int ib_counters(const ib_bench_t *b, double *preempt_p,
                       double *wait_p)
{
    if (b->impl->counters == NULL) {
        *preempt_p = 0.0;
        *wait_p = 0.0;
        return 0;
    }
    return b->impl->counters(b->impl->ctx, preempt_p, wait_p);
}

/* Measure the configuration in effect. */
static int ib_measure(const ib_bench_t *b, ib_result_t *result)
{
    const swyb_ib_impl_t *impl = b->impl;
    int reps = b->opts->reps;
    /* max over ranks: 4 timings per rep, then the wrong count */
    double *times = calloc((size_t)reps * 4 + 1, sizeof(double));
    /* sum over ranks: preemptions, high wait, overlaps */
    double sums[3] = {0.0, 0.0, 0.0};
    double *a2a_alone = times, *ar_alone = times + reps;
    double *a2a_loaded = times + 2 * reps, *ar_loaded = times + 3 * reps;
    double scratch_a, scratch_b;
    int overlap;
    int rc = -1;

    if (times == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", impl->rank);
        return -1;
    }
    for (int w = 0; w < b->opts->warmup; ++w) {
        if (ib_alone(b, SWYB_IB_SLOT_A2A, &scratch_a) != 0 ||
            ib_loaded(b, &scratch_a, &scratch_b, &overlap) != 0) {
            goto out;
        }
    }
    for (int i = 0; i < reps; ++i) {
        double p0, w0, p1, w1;

        if (ib_alone(b, SWYB_IB_SLOT_A2A, &a2a_alone[i]) != 0 ||
            ib_alone(b, SWYB_IB_SLOT_ALLREDUCE, &ar_alone[i]) != 0) {
            goto out;
        }
        if (i == reps - 1) {
            /* NaN everywhere: the checked round must write every element. */
            memset(b->a2a_recv, 0xff, b->a2a_floats * sizeof(float));
            memset(b->ar_recv, 0xff, b->ar_count * sizeof(float));
        }
        if (ib_counters(b, &p0, &w0) != 0 ||
            ib_loaded(b, &a2a_loaded[i], &ar_loaded[i], &overlap) != 0 ||
            ib_counters(b, &p1, &w1) != 0) {
            goto out;
        }
        sums[0] += p1 - p0;
        sums[1] += w1 - w0;
        sums[2] += overlap;
    }
    {
        size_t wrong = ib_check(b);

        if (wrong > 0) {
            fprintf(stderr, "rank %d: interference (%s): %zu elements "
                    "wrong\n", impl->rank, result->policy, wrong);
        }
        times[reps * 4] = (double)wrong;
    }
    if (impl->max_doubles(impl->ctx, times, (size_t)reps * 4 + 1) != 0 ||
        impl->sum_doubles(impl->ctx, sums, 3) != 0) {
        goto out;
    }
    result->correct = times[reps * 4] == 0.0;
    swyb_stats_compute(a2a_alone, (size_t)reps, &result->a2a_alone);
    result->a2a_alone_p95 = p95_sorted(a2a_alone, reps);
    swyb_stats_compute(a2a_loaded, (size_t)reps, &result->a2a_loaded);
    result->a2a_loaded_p95 = p95_sorted(a2a_loaded, reps);
    swyb_stats_compute(ar_alone, (size_t)reps, &result->ar_alone);
    swyb_stats_compute(ar_loaded, (size_t)reps, &result->ar_loaded);
    result->slowdown = result->a2a_loaded.median / result->a2a_alone.median;
    result->ar_MBps = (double)(b->ar_count * sizeof(float)) /
                      result->ar_loaded.median / 1e6;
    result->ar_alone_MBps = (double)(b->ar_count * sizeof(float)) /
                            result->ar_alone.median / 1e6;
    result->preemptions = sums[0] / reps;
    result->high_wait_ms = sums[1] * 1e3 / reps;
    result->overlap = sums[2] / ((double)reps * impl->nranks);
    rc = 0;
out:
    free(times);
    return rc;
}

static int ib_nodes_value(void)
{
    const char *env = getenv("SWY_NNODES");

    if (ib_nodes > 0) {
        return ib_nodes;
    }
    return env != NULL && atoi(env) > 0 ? atoi(env) : 1;
}

static void ib_table_header_print(FILE *out)
{
    fprintf(out,
            "%-9s %-9s %6s %6s %6s | %-26s %7s | %-26s %7s | %8s | %9s %9s"
            " %6s | %8s %8s %7s %5s\n",
            "policy", "sweep", "part", "credit", "window",
            "a2a alone ms med[min-max]",
            "p95", "a2a loaded ms med[min-max]", "p95", "slowdown",
            "ar MB/s", "alone", "ratio", "preempt", "hiwait", "overlap",
            "check");
}

static void ib_table_row_print(FILE *out, const ib_result_t *r)
{
    char part[32] = "-", credit[32] = "-", window[32] = "-";
    char alone[64], loaded[64];

    if (r->partition_bytes > 0) {
        swyb_size_format(r->partition_bytes, part, sizeof(part));
    }
    if (r->credit_bytes > 0) {
        swyb_size_format(r->credit_bytes, credit, sizeof(credit));
    }
    if (r->window_bytes > 0) {
        swyb_size_format(r->window_bytes, window, sizeof(window));
    }
    snprintf(alone, sizeof(alone), "%.2f [%.2f-%.2f]",
             r->a2a_alone.median * 1e3, r->a2a_alone.min * 1e3,
             r->a2a_alone.max * 1e3);
    snprintf(loaded, sizeof(loaded), "%.2f [%.2f-%.2f]",
             r->a2a_loaded.median * 1e3, r->a2a_loaded.min * 1e3,
             r->a2a_loaded.max * 1e3);
    fprintf(out,
            "%-9s %-9s %6s %6s %6s | %-26s %7.2f | %-26s %7.2f | %7.2fx | "
            "%9.1f %9.1f %5.2fx | %8.1f %8.2f %6.0f%% %5s\n",
            r->policy, r->sweep, part, credit, window, alone, r->a2a_alone_p95 * 1e3,
            loaded, r->a2a_loaded_p95 * 1e3, r->slowdown, r->ar_MBps,
            r->ar_alone_MBps, r->ar_MBps / r->ar_alone_MBps, r->preemptions,
            r->high_wait_ms, r->overlap * 100.0, r->correct ? "ok" : "WRONG");
}

static void ib_json_print(FILE *out, const ib_bench_t *b, const ib_result_t *r)
{
    fprintf(out,
            "{\"bench\":\"interference\",\"impl\":\"%s\",\"policy\":\"%s\","
            "\"sweep\":\"%s\",\"partition_bytes\":%zu,\"credit_bytes\":%zu,"
            "\"window_bytes\":%zu,\"phase_hint\":%s,"
            "\"a2a_bytes\":%zu,\"allreduce_bytes\":%zu,\"delay_ms\":%.3f,"
            "\"reps\":%d,"
            "\"a2a_alone_ms\":%.4f,\"a2a_alone_min_ms\":%.4f,"
            "\"a2a_alone_max_ms\":%.4f,\"a2a_alone_p95_ms\":%.4f,"
            "\"a2a_loaded_ms\":%.4f,\"a2a_loaded_min_ms\":%.4f,"
            "\"a2a_loaded_max_ms\":%.4f,\"a2a_loaded_p95_ms\":%.4f,"
            "\"slowdown\":%.4f,\"allreduce_MBps\":%.3f,"
            "\"allreduce_alone_MBps\":%.3f,\"allreduce_loaded_ms\":%.4f,"
            "\"allreduce_alone_ms\":%.4f,\"preemptions\":%.2f,"
            "\"high_wait_ms\":%.4f,\"backlog_overlap\":%.3f,"
            "\"ranks\":%d,\"nodes\":%d,\"comms\":\"%s\","
            "\"check\":\"%s\"}\n",
            b->impl->name, r->policy, r->sweep, r->partition_bytes,
            r->credit_bytes, r->window_bytes, r->hint ? "true" : "false",
            b->a2a_floats * sizeof(float),
            b->ar_count * sizeof(float), b->opts->delay_s * 1e3,
            b->opts->reps, r->a2a_alone.median * 1e3, r->a2a_alone.min * 1e3,
            r->a2a_alone.max * 1e3, r->a2a_alone_p95 * 1e3,
            r->a2a_loaded.median * 1e3, r->a2a_loaded.min * 1e3,
            r->a2a_loaded.max * 1e3, r->a2a_loaded_p95 * 1e3, r->slowdown,
            r->ar_MBps, r->ar_alone_MBps, r->ar_loaded.median * 1e3,
            r->ar_alone.median * 1e3, r->preemptions, r->high_wait_ms,
            r->overlap, b->impl->nranks, ib_nodes_value(),
            b->impl->comms != NULL ? b->impl->comms : "one",
            r->correct ? "ok" : "WRONG");
}

static void ib_header_print(const ib_bench_t *b, int argc, char **argv)
{
    const swyb_ib_options_t *opts = b->opts;
    const char *sndbuf = getenv("UCX_TCP_SNDBUF");
    char a2a[32], ar[32];

    swyb_header_print(stdout, "interference", b->impl->name, argc, argv,
                      b->impl->nranks);
    swyb_size_format(b->a2a_floats * sizeof(float), a2a, sizeof(a2a));
    swyb_size_format(b->ar_count * sizeof(float), ar, sizeof(ar));
    printf("# nodes: %d  UCX_TCP_SNDBUF=%s  window: %s\n", ib_nodes_value(),
           sndbuf != NULL ? sndbuf : "(default)",
           opts->window_bytes > 0 ? "--window (see command)"
                                  : "the library's (SWY_WINDOW_BYTES)");
    printf("# a2a: %s per rank (float32, high priority)  allreduce backlog: "
           "%s (float32 sum, low priority)  delay: %.1f ms  reps: %d  "
           "warmup: %d\n", a2a, ar, opts->delay_s * 1e3, opts->reps,
           opts->warmup);
    printf("# columns: a2a times in ms (slowest rank; p95 = nearest rank, "
           "the max below 20 reps); slowdown = loaded/alone medians;\n"
           "#   ar MB/s = allreduce bytes / its median time from post "
           "(loaded), alone beside it, ratio = loaded/alone;\n"
           "#   preempt, hiwait (ms) = swy_comm_stats deltas per loaded "
           "rep, summed over ranks; overlap = share of rank-reps whose\n"
           "#   allreduce was still running when the a2a ended (must be "
           "100%% for a valid load)\n");
    fflush(stdout);
}

/* A configuration to measure. */
typedef struct {
    const char *policy;
    const char *sweep;
    size_t partition; /* 0 = auto */
    size_t credit;    /* 0 = auto */
} ib_config_t;

static int ib_config_apply(ib_bench_t *b, const ib_config_t *config,
                           ib_result_t *result)
{
    const swyb_ib_impl_t *impl = b->impl;
    char policy[32];
    char *suffix;

    snprintf(result->policy, sizeof(result->policy), "%s", config->policy);
    result->sweep = config->sweep;
    b->hint = 0;
    if (impl->configure == NULL) {
        return 0;
    }
    snprintf(policy, sizeof(policy), "%s", config->policy);
    suffix = strstr(policy, "+hint");
    if (suffix != NULL && suffix[5] == '\0' && impl->phase_hint != NULL) {
        *suffix = '\0';
        b->hint = 1;
    }
    result->hint = b->hint;
    /* swy_comm_configure needs no op in flight: all ranks are past their
     * waits after the barrier. */
    if (impl->barrier(impl->ctx) != 0 ||
        impl->configure(impl->ctx, policy, config->partition,
                        config->credit, b->opts->window_bytes) != 0 ||
        impl->query(impl->ctx, &result->partition_bytes,
                    &result->credit_bytes, &result->window_bytes) != 0) {
        return -1;
    }
    return 0;
}

static int ib_configs_build(const swyb_ib_impl_t *impl,
                            const swyb_ib_options_t *opts,
                            ib_config_t *configs, int max)
{
    int n = 0;

    if (impl->configure == NULL) {
        configs[n++] = (ib_config_t){impl->name, "peer", 0, 0};
        return n;
    }
    for (int p = 0; p < opts->npolicies; ++p) {
        const char *policy = opts->policies[p];
        int prioritized = strcmp(policy, "fifo") != 0 &&
                          strcmp(policy, "fair") != 0;

        /* The credit matters to the priority policies only. */
        for (int c = 0; c < (prioritized ? opts->ncredits : 1); ++c) {
            if (n < max) {
                configs[n++] = (ib_config_t){
                    policy, c == 0 ? "policies" : "credit", 0,
                    prioritized ? opts->credits[c] : 0};
            }
        }
    }
    for (int s = 0; s < opts->npartitions; ++s) {
        if (n < max) {
            configs[n++] = (ib_config_t){opts->sweep_policy, "partition",
                                         opts->partitions[s], 0};
        }
    }
    return n;
}

int swyb_ib_run(const swyb_ib_impl_t *impl, const swyb_ib_options_t *opts,
                int argc, char **argv)
{
    enum { MAX_CONFIGS = 3 * SWYB_IB_MAX_LIST * SWYB_IB_MAX_LIST };
    int n = impl->nranks;
    ib_bench_t b = {.impl = impl, .opts = opts};
    ib_config_t *configs = calloc(MAX_CONFIGS, sizeof(*configs));
    ib_result_t *results = calloc(MAX_CONFIGS, sizeof(*results));
    int nconfigs = 0;
    int all_correct = 1;
    int rc = -1;

    b.a2a_count = opts->a2a_bytes / sizeof(float) / (size_t)n;
    if (b.a2a_count == 0) {
        b.a2a_count = 1;
    }
    b.a2a_floats = b.a2a_count * (size_t)n;
    b.ar_count = opts->allreduce_bytes / sizeof(float);
    b.counts = calloc((size_t)n, sizeof(size_t));
    b.displs = calloc((size_t)n, sizeof(size_t));
    b.a2a_send = buffer_alloc(b.a2a_floats);
    b.a2a_recv = buffer_alloc(b.a2a_floats);
    b.ar_send = buffer_alloc(b.ar_count);
    b.ar_recv = buffer_alloc(b.ar_count);
    if (configs == NULL || results == NULL || b.counts == NULL ||
        b.displs == NULL || b.a2a_send == NULL || b.a2a_recv == NULL ||
        b.ar_send == NULL || b.ar_recv == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", impl->rank);
        goto out;
    }
    for (int r = 0; r < n; ++r) {
        b.counts[r] = b.a2a_count;
        b.displs[r] = (size_t)r * b.a2a_count;
        for (size_t k = 0; k < b.a2a_count; ++k) {
            b.a2a_send[b.displs[r] + k] = a2a_value(impl->rank, r, k);
        }
    }
    for (size_t i = 0; i < b.ar_count; ++i) {
        b.ar_send[i] = allreduce_value(impl->rank, i);
    }
    /* Touch the receive buffers, so no round pays first faults. */
    memset(b.a2a_recv, 0, b.a2a_floats * sizeof(float));
    memset(b.ar_recv, 0, b.ar_count * sizeof(float));

    nconfigs = ib_configs_build(impl, opts, configs, MAX_CONFIGS);
    if (impl->rank == 0) {
        ib_header_print(&b, argc, argv);
        ib_table_header_print(stdout);
        fflush(stdout);
    }
    for (int c = 0; c < nconfigs; ++c) {
        if (ib_config_apply(&b, &configs[c], &results[c]) != 0 ||
            ib_measure(&b, &results[c]) != 0) {
            goto out;
        }
        if (!results[c].correct) {
            all_correct = 0;
        }
        if (impl->rank == 0) {
            ib_table_row_print(stdout, &results[c]);
            fflush(stdout);
        }
    }
    if (impl->rank == 0 && opts->json) {
        for (int c = 0; c < nconfigs; ++c) {
            ib_json_print(stdout, &b, &results[c]);
        }
        fflush(stdout);
    }
    if (impl->rank == 0) {
        for (int c = 0; c < nconfigs; ++c) {
            /* Under fifo the all-to-all waits for the whole backlog by
             * design: it can never end first. */
            if (results[c].overlap < 1.0 &&
                strncmp(results[c].policy, "fifo", 4) != 0) {
                fprintf(stderr, "interference: %s (%s): the allreduce ended "
                        "before the all-to-all in %.0f%% of rank-reps: "
                        "raise --allreduce-size\n", results[c].policy,
                        results[c].sweep, (1.0 - results[c].overlap) * 100);
            }
        }
        if (!all_correct) {
            fprintf(stderr, "interference: some results were WRONG\n");
        }
    }
    rc = all_correct ? 0 : 1;
out:
    free(b.ar_recv);
    free(b.ar_send);
    free(b.a2a_recv);
    free(b.a2a_send);
    free(b.displs);
    free(b.counts);
    free(results);
    free(configs);
    return rc;
}
