/* The coll benchmark's options, data, check and timing loop; see
 * coll_run.h. */
#include "coll_run.h"

#include "common.h"
#include "switchyard/switchyard.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Without --iters, each size runs for about this long (and at least
 * SWYB_MIN_ITERS times), as nccl-tests and OSU scale iterations by size. */
#define SWYB_TARGET_S 0.2
#define SWYB_MIN_ITERS 5
#define SWYB_MAX_ITERS 100000
#define SWYB_MAX_POINTS 128
#define SWYB_MAX_BATCH 1000

static void coll_usage_print(FILE *out, const char *prog)
{
    fprintf(out,
        "Usage: %s [options]\n"
        "Time alltoallv (size = bytes each rank sends in total, split evenly\n"
        "over all ranks including itself) and allreduce (size = bytes of the\n"
        "buffer, float32 sum) over a range of sizes. Each iteration is timed\n"
        "on every rank after a barrier; the slowest rank's time counts.\n"
        "With --batch N an iteration is N ops back to back, and its time\n"
        "over N counts (throughput without a barrier between ops, as IMB\n"
        "and nccl-tests time their loops).\n"
        "\n"
        "  --op OP           alltoallv, allreduce or all (default all)\n"
        "  --min-size SIZE   smallest size (default 4K)\n"
        "  --max-size SIZE   largest size (default 64M)\n"
        "  --factor N        size step factor (default 4)\n"
        "  --iters N         timed iterations per size (default: about\n"
        "                    0.2 s per size, at least 5)\n"
        "  --warmup N        untimed iterations per size (default 2)\n"
        "  --batch N         ops per iteration, back to back (default 1)\n"
        "  --json            also print one JSON line per (op, size)\n"
        "  --mem KIND        the buffers: malloc (default; page aligned) or\n"
        "                    shared: the library's own allocation, which\n"
        "                    its ranks on a host may reach directly\n"
        "                    (swy_mem_alloc; swy-bench-mpi: MPI_Alloc_mem)\n"
        "  -h, --help        show this text\n"
        "SIZE takes K, M, G suffixes (binary).\n",
        prog);
}

/* --name's integer in min..max into *value_p; else a message (on rank 0,
 * err != NULL) and -1. */
static int int_option_parse(FILE *err, const char *prog, const char *name,
                            const char *text, int min, int max, int *value_p)
{
    char *end;
    long value = strtol(text, &end, 10);

    if (*text != '\0' && *end == '\0' && value >= min && value <= max) {
        *value_p = (int)value;
        return 0;
    }
    if (err != NULL && max == INT32_MAX)
        fprintf(err, "%s: --%s needs an integer >= %d, not '%s'\n", prog,
                name, min, text);
    else if (err != NULL)
        fprintf(err, "%s: --%s needs %d..%d, not '%s'\n", prog, name, min,
                max, text);
    return -1;
}

swyb_coll_parse_t swyb_coll_options_parse(int argc, char **argv, int first,
                                          const char *prog, int rank,
                                          swyb_coll_options_t *opts_p)
{
    enum { OPT_OP = 256, OPT_MIN, OPT_MAX, OPT_FACTOR, OPT_ITERS, OPT_WARMUP,
           OPT_BATCH, OPT_JSON, OPT_MEM };
    static const struct option long_options[] = {
        {"op", required_argument, NULL, OPT_OP},
        {"min-size", required_argument, NULL, OPT_MIN},
        {"max-size", required_argument, NULL, OPT_MAX},
        {"factor", required_argument, NULL, OPT_FACTOR},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"json", no_argument, NULL, OPT_JSON},
        {"mem", required_argument, NULL, OPT_MEM},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    swyb_coll_options_t opts = {
        .ops = SWYB_COLL_OP_ALLTOALLV | SWYB_COLL_OP_ALLREDUCE,
        .min_bytes = 4 << 10,
        .max_bytes = 64 << 20,
        .factor = 4,
        .iters = 0,
        .warmup = 2,
        .batch = 1,
        .json = 0,
    };
    FILE *err = rank == 0 ? stderr : NULL;
    int factor;
    int c;

    /* getopt treats its argv[0] as the program name. */
    optind = 1;
    opterr = rank == 0;
    while ((c = getopt_long(argc - first + 1, argv + first - 1, "h",
                            long_options, NULL)) != -1) {
        switch (c) {
        case OPT_OP:
            if (strcmp(optarg, "alltoallv") == 0) {
                opts.ops = SWYB_COLL_OP_ALLTOALLV;
            } else if (strcmp(optarg, "allreduce") == 0) {
                opts.ops = SWYB_COLL_OP_ALLREDUCE;
            } else if (strcmp(optarg, "all") == 0) {
                opts.ops = SWYB_COLL_OP_ALLTOALLV | SWYB_COLL_OP_ALLREDUCE;
            } else {
                if (err) fprintf(err, "%s: unknown --op '%s'\n", prog, optarg);
                return SWYB_COLL_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_MIN:
        case OPT_MAX:
            if (swy_parse_size(optarg, c == OPT_MIN ? &opts.min_bytes
                                                     : &opts.max_bytes) != 0) {
                if (err) fprintf(err, "%s: bad size '%s'\n", prog, optarg);
                return SWYB_COLL_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_FACTOR:
            if (int_option_parse(err, prog, "factor", optarg, 2, INT32_MAX,
                                 &factor) != 0)
                return SWYB_COLL_PARSE_EXIT_USAGE;
            opts.factor = (size_t)factor;
            break;
        case OPT_ITERS:
            if (int_option_parse(err, prog, "iters", optarg, 1,
                                 SWYB_MAX_ITERS, &opts.iters) != 0)
                return SWYB_COLL_PARSE_EXIT_USAGE;
            break;
        case OPT_WARMUP:
            if (int_option_parse(err, prog, "warmup", optarg, 0, INT32_MAX,
                                 &opts.warmup) != 0)
                return SWYB_COLL_PARSE_EXIT_USAGE;
            break;
        case OPT_BATCH:
            if (int_option_parse(err, prog, "batch", optarg, 1,
                                 SWYB_MAX_BATCH, &opts.batch) != 0)
                return SWYB_COLL_PARSE_EXIT_USAGE;
            break;
        case OPT_JSON:
            opts.json = 1;
            break;
        case OPT_MEM:
            if (strcmp(optarg, "malloc") == 0 ||
                strcmp(optarg, "shared") == 0) {
                opts.mem_shared = strcmp(optarg, "shared") == 0;
            } else {
                if (err) fprintf(err, "%s: --mem takes malloc or shared, "
                                 "not '%s'\n", prog, optarg);
                return SWYB_COLL_PARSE_EXIT_USAGE;
            }
            break;
        case 'h':
            if (rank == 0) coll_usage_print(stdout, prog);
            return SWYB_COLL_PARSE_EXIT_OK;
        default:
            if (err) coll_usage_print(err, prog);
            return SWYB_COLL_PARSE_EXIT_USAGE;
        }
    }
    if (optind != argc - first + 1) {
        if (err) fprintf(err, "%s: unexpected argument '%s'\n", prog,
                         argv[first - 1 + optind]);
        return SWYB_COLL_PARSE_EXIT_USAGE;
    }
    if (opts.min_bytes == 0 || opts.min_bytes > opts.max_bytes) {
        if (err) fprintf(err, "%s: need 0 < --min-size <= --max-size\n", prog);
        return SWYB_COLL_PARSE_EXIT_USAGE;
    }
    *opts_p = opts;
    return SWYB_COLL_PARSE_RUN;
}

/* Data. Every value is a small integer, so float32 holds it exactly and a
 * sum over ranks is exact in any order: the check can demand equality. */

/* What rank `src` sends to rank `dst` at element k of their block; a block
 * delivered to the wrong place or shifted by an element reads differently. */
static float a2a_value(int src, int dst, size_t k)
{
    return (float)(((size_t)src * 31 + (size_t)dst * 7 + k) % 8191);
}

/* Rank r's allreduce input at element i; the sum over 4096 ranks stays
 * below 2^24. */
static float allreduce_value(int rank, size_t i)
{
    return (float)((i * 7 + (size_t)rank * 3) % 4093);
}

static void a2a_fill(float *sendbuf, size_t count_per_peer, int rank,
                     int nranks)
{
    for (int dst = 0; dst < nranks; ++dst) {
        float *block = sendbuf + (size_t)dst * count_per_peer;

        for (size_t k = 0; k < count_per_peer; ++k) {
            block[k] = a2a_value(rank, dst, k);
        }
    }
}

static size_t a2a_check(const float *recvbuf, size_t count_per_peer,
                        int rank, int nranks)
{
    size_t wrong = 0;

    for (int src = 0; src < nranks; ++src) {
        const float *block = recvbuf + (size_t)src * count_per_peer;

        for (size_t k = 0; k < count_per_peer; ++k) {
            wrong += block[k] != a2a_value(src, rank, k);
        }
    }
    return wrong;
}

static void allreduce_fill(float *sendbuf, size_t count, int rank)
{
    for (size_t i = 0; i < count; ++i) {
        sendbuf[i] = allreduce_value(rank, i);
    }
}

static size_t allreduce_check(const float *recvbuf, size_t count, int nranks)
{
    size_t wrong = 0;

    for (size_t i = 0; i < count; ++i) {
        double expected = 0.0;

        for (int r = 0; r < nranks; ++r) {
            expected += allreduce_value(r, i);
        }
        wrong += recvbuf[i] != (float)expected;
    }
    return wrong;
}

/* One (op, size) point. Buffers live for the point only, so a 64 MiB
 * alltoallv does not keep its memory while allreduce runs. With two
 * implementations (swyb_coll_run_paired) both use the same buffers. */
typedef struct {
    unsigned op;
    size_t count;          /* floats per peer (alltoallv) or in total */
    size_t *counts;        /* alltoallv, one per rank */
    size_t *displs;
    float *sendbuf;
    float *recvbuf;
    size_t buf_floats;
} coll_point_t;

static int coll_point_once(const swyb_coll_impl_t *impl,
                           coll_point_t *point)
{
    if (point->op == SWYB_COLL_OP_ALLTOALLV) {
        return impl->alltoallv(impl->ctx, point->sendbuf, point->counts,
                               point->displs, point->recvbuf);
    }
    return impl->allreduce_sum(impl->ctx, point->sendbuf, point->recvbuf,
                               point->count);
}

/* Barrier, then time batch calls back to back on this rank: the time
 * per call. */
static int coll_point_timed(const swyb_coll_impl_t *impl,
                            coll_point_t *point, int batch,
                            double *elapsed_p)
{
    double start;

    if (impl->barrier(impl->ctx) != 0) {
        return -1;
    }
    start = swyb_now_s();
    for (int b = 0; b < batch; ++b) {
        if (coll_point_once(impl, point) != 0) {
            return -1;
        }
    }
    *elapsed_p = (swyb_now_s() - start) / batch;
    return 0;
}

/* The last timed iteration of an implementation: recvbuf NaN first, so
 * it must write every element; then its result is checked. Returns the
 * number of wrong elements, or (size_t)-1 when a call failed. */
static size_t coll_point_checked(const swyb_coll_impl_t *impl,
                                 coll_point_t *point, int batch,
                                 double *elapsed_p)
{
    memset(point->recvbuf, 0xff, point->buf_floats * sizeof(float));
    if (coll_point_timed(impl, point, batch, elapsed_p) != 0) {
        return (size_t)-1;
    }
    size_t wrong = point->op == SWYB_COLL_OP_ALLTOALLV
                       ? a2a_check(point->recvbuf, point->count, impl->rank,
                                   impl->nranks)
                       : allreduce_check(point->recvbuf, point->count,
                                         impl->nranks);
    if (wrong > 0) {
        fprintf(stderr, "rank %d: %s: %s of %zu floats: %zu elements "
                "wrong\n", impl->rank, impl->name,
                point->op == SWYB_COLL_OP_ALLTOALLV ? "alltoallv"
                                                    : "allreduce",
                point->buf_floats, wrong);
    }
    return wrong;
}

/* The implementation whose allocation --mem shared uses: with two in
 * one job (swy-bench-mpi --with-switchyard), Switchyard's, whose ranks
 * reach such buffers directly (Open MPI reads them as any other). */
static const swyb_coll_impl_t *mem_owner(const swyb_coll_impl_t *const *impls,
                                         int nimpl,
                                         const swyb_coll_options_t *opts)
{
    if (!opts->mem_shared)
        return NULL;
    for (int j = nimpl - 1; j >= 0; --j)
        if (impls[j]->mem_alloc != NULL &&
            strcmp(impls[j]->name, "switchyard") == 0)
            return impls[j];
    return impls[0]->mem_alloc != NULL ? impls[0] : NULL;
}

static void *buffer_alloc(const swyb_coll_impl_t *owner, size_t floats)
{
    size_t bytes = floats * sizeof(float);

    /* Page alignment, as a framework's tensors would have; round up so
     * aligned_alloc's size rule holds. */
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (bytes == 0)
        bytes = 4096;
    if (owner != NULL)
        return owner->mem_alloc(owner->ctx, bytes);
    return aligned_alloc(4096, bytes);
}

static void buffer_free(const swyb_coll_impl_t *owner, void *buf)
{
    if (owner != NULL && buf != NULL)
        owner->mem_free(owner->ctx, buf);
    else
        free(buf);
}

/* Measure the point on nimpl (1 or 2) implementations. With two, every
 * iteration runs both, each after its own barrier, the first one first
 * in even iterations and second in odd ones, so that both see the same
 * phases of a noisy machine; ratio_p then gets the statistics of the
 * per-iteration ratios impls[0] / impls[1] (of the slowest rank's
 * times). */
static int coll_point_measure(const swyb_coll_impl_t *const *impls,
                              int nimpl, coll_point_t *point,
                              const swyb_coll_options_t *opts,
                              swyb_coll_result_t *results,
                              swyb_stats_t *ratio_p)
{
    double *times = NULL;
    double elapsed[2] = {0.0, 0.0};
    int iters = opts->iters;
    int rc = -1;

    for (int w = 0; w < opts->warmup; ++w) {
        for (int j = 0; j < nimpl; ++j) {
            if (coll_point_timed(impls[j], point, opts->batch,
                                 &elapsed[j]) != 0) {
                goto out;
            }
        }
    }
    if (iters == 0) {
        /* Every rank must run the same number of iterations: plan from the
         * slowest rank's time of the last warm-up (or of a probe), so that
         * each implementation runs for about SWYB_TARGET_S. */
        double per_iter = 0.0;

        for (int j = 0; j < nimpl && opts->warmup == 0; ++j) {
            if (coll_point_timed(impls[j], point, opts->batch,
                                 &elapsed[j]) != 0) {
                goto out;
            }
        }
        if (impls[0]->max_doubles(impls[0]->ctx, elapsed,
                                  (size_t)nimpl) != 0) {
            goto out;
        }
        for (int j = 0; j < nimpl; ++j) {
            per_iter += elapsed[j] * opts->batch / nimpl;
        }
        iters = SWYB_MIN_ITERS;
        if (per_iter > 0.0 && SWYB_TARGET_S / per_iter > SWYB_MIN_ITERS) {
            double planned = ceil(SWYB_TARGET_S / per_iter);

            iters = planned < SWYB_MAX_ITERS ? (int)planned : SWYB_MAX_ITERS;
        }
    }

    /* Row j holds implementation j's times and, in its extra slot, its
     * check result, so one max over the ranks carries all of it. */
    size_t row = (size_t)iters + 1;
    times = calloc(row * (size_t)nimpl, sizeof(*times));
    if (times == NULL) {
        fprintf(stderr, "rank %d: out of memory for %d timings\n",
                impls[0]->rank, iters);
        goto out;
    }
    for (int i = 0; i < iters; ++i) {
        for (int k = 0; k < nimpl; ++k) {
            int j = (i + k) % nimpl;
            double *t = &times[(size_t)j * row + (size_t)i];

            if (i < iters - 1) {
                if (coll_point_timed(impls[j], point, opts->batch, t) != 0) {
                    goto out;
                }
                continue;
            }
            size_t wrong = coll_point_checked(impls[j], point, opts->batch,
                                              t);
            if (wrong == (size_t)-1) {
                goto out;
            }
            times[(size_t)j * row + (size_t)iters] = wrong > 0 ? 1.0 : 0.0;
        }
    }
    if (impls[0]->max_doubles(impls[0]->ctx, times,
                              row * (size_t)nimpl) != 0) {
        goto out;
    }

    if (nimpl == 2) {
        /* The ratios before the per-implementation statistics sort the
         * times. times[0] / times[1], overwritten in place, is a ratio
         * only of the times that ran in one iteration. */
        double *ratios = malloc((size_t)iters * sizeof(*ratios));

        if (ratios == NULL) {
            fprintf(stderr, "rank %d: out of memory for %d ratios\n",
                    impls[0]->rank, iters);
            goto out;
        }
        for (int i = 0; i < iters; ++i) {
            ratios[i] = times[i] / times[row + (size_t)i];
        }
        swyb_stats_compute(ratios, (size_t)iters, ratio_p);
        free(ratios);
    }
    for (int j = 0; j < nimpl; ++j) {
        swyb_coll_result_t *result = &results[j];

        result->iters = iters;
        result->batch = opts->batch;
        result->correct = times[(size_t)j * row + (size_t)iters] == 0.0;
        swyb_stats_compute(&times[(size_t)j * row], (size_t)iters,
                           &result->time_s);
        swyb_coll_result_finish(result);
    }
    rc = 0;
out:
    free(times);
    return rc;
}

static int coll_point_run(const swyb_coll_impl_t *const *impls, int nimpl,
                          unsigned op, size_t bytes,
                          const swyb_coll_options_t *opts,
                          swyb_coll_result_t *results,
                          swyb_stats_t *ratio_p)
{
    int rank = impls[0]->rank;
    int n = impls[0]->nranks;
    coll_point_t point = {.op = op};
    const swyb_coll_impl_t *owner = mem_owner(impls, nimpl, opts);
    int rc = -1;

    if (op == SWYB_COLL_OP_ALLTOALLV) {
        point.count = bytes / sizeof(float) / (size_t)n;
        point.buf_floats = point.count * (size_t)n;
    } else {
        point.count = bytes / sizeof(float);
        point.buf_floats = point.count;
    }
    if (point.count == 0) {
        return 1; /* too small to split over the ranks: skipped */
    }
    for (int j = 0; j < nimpl; ++j) {
        results[j] = (swyb_coll_result_t){
            .impl = impls[j]->name,
            .op = op == SWYB_COLL_OP_ALLTOALLV ? "alltoallv" : "allreduce",
            .ranks = n,
            .bytes = point.buf_floats * sizeof(float),
            .mem = opts->mem_shared ? "shared" : "malloc",
        };
    }

    point.counts = calloc((size_t)n, sizeof(size_t));
    point.displs = calloc((size_t)n, sizeof(size_t));
    point.sendbuf = buffer_alloc(owner, point.buf_floats);
    point.recvbuf = buffer_alloc(owner, point.buf_floats);
    if (point.counts == NULL || point.displs == NULL ||
        point.sendbuf == NULL || point.recvbuf == NULL) {
        fprintf(stderr, "rank %d: out of memory for %s of %zu bytes\n",
                rank, results[0].op, results[0].bytes);
        goto out;
    }
    for (int r = 0; r < n; ++r) {
        point.counts[r] = point.count;
        point.displs[r] = (size_t)r * point.count;
    }
    if (op == SWYB_COLL_OP_ALLTOALLV) {
        a2a_fill(point.sendbuf, point.count, rank, n);
    } else {
        allreduce_fill(point.sendbuf, point.count, rank);
    }
    /* Touch the receive buffer too, so no iteration pays first faults. */
    memset(point.recvbuf, 0, point.buf_floats * sizeof(float));

    rc = coll_point_measure(impls, nimpl, &point, opts, results, ratio_p);
out:
    buffer_free(owner, point.recvbuf);
    buffer_free(owner, point.sendbuf);
    free(point.displs);
    free(point.counts);
    return rc;
}

static void pair_table_header_print(FILE *out, const char *num,
                                    const char *den)
{
    char ratio[48];

    snprintf(ratio, sizeof(ratio), "%s/%s", num, den);
    fprintf(out, "%-10s %8s %6s %12s %12s %20s %15s %9s %6s\n", "op", "size",
            "iters", num, den, ratio, "quartiles", "busbw", "check");
    fprintf(out, "%-10s %8s %6s %12s %12s %20s %15s %9s %6s\n", "", "",
            "", "median(us)", "median(us)", "median per iter", "per iter",
            den, "");
}

static void pair_table_row_print(FILE *out, const swyb_coll_result_t *r,
                                 const swyb_stats_t *ratio)
{
    char size[32];

    swyb_size_format(r[0].bytes, size, sizeof(size));
    fprintf(out, "%-10s %8s %6d %12.1f %12.1f %19.2fx %7.2f-%-7.2f %9.3f "
            "%6s\n", r[0].op, size, r[0].iters, r[0].time_s.median * 1e6,
            r[1].time_s.median * 1e6, ratio->median, ratio->q1, ratio->q3,
            r[1].busbw_GBps, r[0].correct && r[1].correct ? "ok" : "WRONG");
}

static void pair_json_print(FILE *out, const swyb_coll_result_t *r,
                            const swyb_stats_t *ratio)
{
    fprintf(out,
            "{\"bench\":\"coll_pair\",\"num\":\"%s\",\"den\":\"%s\","
            "\"op\":\"%s\",\"bytes\":%zu,\"ranks\":%d,\"iters\":%d,"
            "\"batch\":%d,\"ratio_median\":%.4f,\"ratio_q1\":%.4f,"
            "\"ratio_q3\":%.4f,\"ratio_min\":%.4f,\"ratio_max\":%.4f,"
            "\"mem\":\"%s\"}\n",
            r[0].impl, r[1].impl, r[0].op, r[0].bytes, r[0].ranks,
            r[0].iters, r[0].batch > 0 ? r[0].batch : 1, ratio->median,
            ratio->q1, ratio->q3, ratio->min, ratio->max,
            r[0].mem != NULL ? r[0].mem : "malloc");
}

static int coll_run(const swyb_coll_impl_t *const *impls, int nimpl,
                    const swyb_coll_options_t *opts, int argc, char **argv,
                    swyb_coll_result_t *out, size_t out_max, size_t *out_n_p)
{
    static const unsigned op_order[] = {SWYB_COLL_OP_ALLTOALLV,
                                        SWYB_COLL_OP_ALLREDUCE};
    /* [point][implementation] */
    swyb_coll_result_t results[SWYB_MAX_POINTS][2];
    swyb_stats_t ratios[SWYB_MAX_POINTS];
    size_t nresults = 0;
    int all_correct = 1;
    int rank = impls[0]->rank;

    if (rank == 0) {
        char name[64];

        snprintf(name, sizeof(name), "%s%s%s", impls[0]->name,
                 nimpl == 2 ? "+" : "", nimpl == 2 ? impls[1]->name : "");
        swyb_header_print(stdout, "coll", name, argc, argv,
                          impls[0]->nranks);
        const swyb_coll_impl_t *owner = mem_owner(impls, nimpl, opts);
        printf("# buffers: %s\n",
               owner != NULL && owner->mem_what != NULL ? owner->mem_what
               : opts->mem_shared ? "shared asked, but aligned_alloc (no "
                                    "allocator of the library)"
                                  : "malloc (aligned_alloc, page aligned)");
        if (nimpl == 2) {
            printf("# paired: every iteration runs both, in turn first\n");
            pair_table_header_print(stdout, impls[0]->name, impls[1]->name);
        } else {
            swyb_coll_table_header_print(stdout);
        }
        fflush(stdout);
    }
    for (size_t o = 0; o < sizeof(op_order) / sizeof(op_order[0]); ++o) {
        if (!(opts->ops & op_order[o])) {
            continue;
        }
        for (size_t bytes = opts->min_bytes; bytes <= opts->max_bytes;) {
            swyb_coll_result_t result[2] = {{0}};
            swyb_stats_t ratio = {0};
            int rc = coll_point_run(impls, nimpl, op_order[o], bytes, opts,
                                    result, &ratio);

            if (rc < 0) {
                return -1;
            }
            for (int j = 0; rc == 0 && j < nimpl; ++j) {
                all_correct &= result[j].correct;
            }
            if (rc == 0 && rank == 0) {
                if (nimpl == 2) {
                    pair_table_row_print(stdout, result, &ratio);
                } else {
                    swyb_coll_table_row_print(stdout, &result[0]);
                }
                fflush(stdout);
                if (nresults < SWYB_MAX_POINTS) {
                    memcpy(results[nresults], result, sizeof(result));
                    ratios[nresults++] = ratio;
                }
            }
            if (bytes > SIZE_MAX / opts->factor) {
                break;
            }
            bytes *= opts->factor;
        }
    }
    if (rank == 0 && opts->json) {
        for (size_t i = 0; i < nresults; ++i) {
            for (int j = 0; j < nimpl; ++j) {
                swyb_coll_json_print(stdout, &results[i][j]);
            }
            if (nimpl == 2) {
                pair_json_print(stdout, results[i], &ratios[i]);
            }
        }
        fflush(stdout);
    }
    if (rank == 0 && !all_correct) {
        fprintf(stderr, "coll: some results were WRONG\n");
    }
    if (out_n_p != NULL) {
        size_t n = nresults < out_max ? nresults : out_max;

        for (size_t i = 0; i < n; ++i) {
            out[i] = results[i][0];
        }
        *out_n_p = n;
    }
    return all_correct ? 0 : 1;
}

int swyb_coll_run(const swyb_coll_impl_t *impl,
                  const swyb_coll_options_t *opts, int argc, char **argv)
{
    return coll_run(&impl, 1, opts, argc, argv, NULL, 0, NULL);
}

int swyb_coll_run_collect(const swyb_coll_impl_t *impl,
                          const swyb_coll_options_t *opts, int argc,
                          char **argv, swyb_coll_result_t *out,
                          size_t out_max, size_t *out_n_p)
{
    *out_n_p = 0;
    return coll_run(&impl, 1, opts, argc, argv, out, out_max, out_n_p);
}

int swyb_coll_run_paired(const swyb_coll_impl_t *a,
                         const swyb_coll_impl_t *b,
                         const swyb_coll_options_t *opts, int argc,
                         char **argv)
{
    const swyb_coll_impl_t *impls[2] = {a, b};

    if (a->rank != b->rank || a->nranks != b->nranks) {
        fprintf(stderr, "coll: %s is rank %d of %d but %s rank %d of %d\n",
                a->name, a->rank, a->nranks, b->name, b->rank, b->nranks);
        return -1;
    }
    return coll_run(impls, 2, opts, argc, argv, NULL, 0, NULL);
}
