/* swy-bench overhead: what the scheduler itself costs.
 *
 * 1. Per micro-op: an alltoallv that moves S bytes from a rank to itself
 *    only (the `self` transport: no network, a memcpy per chunk), once per
 *    partition size. The bytes copied are the same at every partition
 *    size; only the number of micro-ops changes. A least-squares line of
 *    the median time over the micro-op count gives the cost per micro-op
 *    (its slope) and the fixed cost of an op (its intercept, less a plain
 *    memcpy of S bytes). Each row also shows (time - memcpy) / micro-ops,
 *    an upper bound that still carries the op's fixed cost. Micro-ops are
 *    counted by swy_comm_stats (send micro-ops; each has its receive).
 * 2. Idle CPU: the communicator with its default progress engine sits idle
 *    for --idle-s seconds; the process's CPU time (all threads) over that
 *    interval, as a share of one core (the slowest rank's).
 *
 * Run it on one rank (`swy-bench overhead`, no launcher: a 1-rank
 * communicator of its own) for the per-micro-op figure. Under a launcher
 * with several ranks every rank runs the self-only alltoallv at once (the
 * other blocks are empty), and the idle figure then covers the transports
 * between ranks too. */
#include "overhead.h"

#include "coll_swy.h"
#include "common.h"

#include "switchyard/switchyard.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OH_MAX_PARTITIONS 16

typedef struct {
    size_t bytes;
    int npartitions;
    size_t partitions[OH_MAX_PARTITIONS]; /* 0 = one partition (S) */
    int reps;
    double idle_s;
    int json;
} oh_options_t;

static void oh_usage_print(FILE *out)
{
    fprintf(out,
        "Usage: swy-bench overhead [options]\n"
        "Scheduler cost per micro-op (1-rank alltoallv through the self\n"
        "transport at several partition sizes, against a plain memcpy) and\n"
        "the CPU an idle communicator burns. Without a launcher it builds a\n"
        "1-rank communicator of its own.\n"
        "\n"
        "  --size SIZE        bytes each alltoallv moves (default 16M)\n"
        "  --partitions LIST  partition sizes; 'one' = a single partition\n"
        "                     (default 4K,16K,64K,256K,one)\n"
        "  --reps N           timed repetitions per point (default 7)\n"
        "  --idle-s S         idle interval (default 2; 0 skips it)\n"
        "  --json             also print one JSON line per result\n"
        "  -h, --help         show this text\n");
}

static int oh_options_parse(int argc, char **argv, int rank,
                            oh_options_t *opts_p)
{
    enum { OPT_SIZE = 256, OPT_PARTS, OPT_REPS, OPT_IDLE, OPT_JSON };
    static const struct option long_options[] = {
        {"size", required_argument, NULL, OPT_SIZE},
        {"partitions", required_argument, NULL, OPT_PARTS},
        {"reps", required_argument, NULL, OPT_REPS},
        {"idle-s", required_argument, NULL, OPT_IDLE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    oh_options_t opts = {
        .bytes = 16 << 20,
        .npartitions = 5,
        .partitions = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 0},
        .reps = 7,
        .idle_s = 2.0,
    };
    FILE *err = rank == 0 ? stderr : NULL;
    char copy[512], *save = NULL, *end;
    long value;
    int c;

    optind = 1;
    opterr = rank == 0;
    while ((c = getopt_long(argc - 1, argv + 1, "h", long_options, NULL))
           != -1) {
        switch (c) {
        case OPT_SIZE:
            if (swy_parse_size(optarg, &opts.bytes) != 0 ||
                opts.bytes < sizeof(float)) {
                if (err) fprintf(err, "overhead: bad --size '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_PARTS:
            opts.npartitions = 0;
            snprintf(copy, sizeof(copy), "%s", optarg);
            for (char *item = strtok_r(copy, ",", &save); item != NULL;
                 item = strtok_r(NULL, ",", &save)) {
                size_t size = 0;

                if (opts.npartitions == OH_MAX_PARTITIONS ||
                    (strcmp(item, "one") != 0 &&
                     (swy_parse_size(item, &size) != 0 || size == 0))) {
                    if (err) fprintf(err, "overhead: bad --partitions '%s'\n",
                                     optarg);
                    return 2;
                }
                opts.partitions[opts.npartitions++] = size;
            }
            if (opts.npartitions < 2) {
                if (err) fprintf(err, "overhead: --partitions needs at least "
                                 "two sizes (a line needs two points)\n");
                return 2;
            }
            break;
        case OPT_REPS:
            value = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || value < 1 || value > 10000) {
                if (err) fprintf(err, "overhead: bad --reps '%s'\n", optarg);
                return 2;
            }
            opts.reps = (int)value;
            break;
        case OPT_IDLE:
            opts.idle_s = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(opts.idle_s >= 0.0) ||
                opts.idle_s > 600.0) {
                if (err) fprintf(err, "overhead: bad --idle-s '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_JSON:
            opts.json = 1;
            break;
        case 'h':
            if (rank == 0) oh_usage_print(stdout);
            return 0;
        default:
            if (err) oh_usage_print(err);
            return 2;
        }
    }
    if (optind != argc - 1) {
        if (err) fprintf(err, "overhead: unexpected argument '%s'\n",
                         argv[1 + optind]);
        return 2;
    }
    *opts_p = opts;
    return -1;
}

/* A launcher's variables name the job; without them, a 1-rank job. */
static swy_status_t oh_comm_init(swy_comm_t *comm_p)
{
    static const char *const names[] = {"SWY_WORLD_SIZE", "WORLD_SIZE",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "SLURM_NTASKS"};
    swy_unique_id_t id;
    swy_status_t status;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        if (getenv(names[i]) != NULL) {
            return swy_comm_init_env(comm_p);
        }
    }
    status = swy_get_unique_id(&id);
    if (status != SWY_OK) {
        return status;
    }
    return swy_comm_init_rank(comm_p, 1, &id, 0);
}

typedef struct {
    size_t partition_bytes; /* in effect */
    double micro_ops;       /* per alltoallv, this rank */
    swyb_stats_t time_s;    /* slowest rank */
    double us_per_uop;      /* (median - memcpy) / micro_ops */
} oh_point_t;

static int oh_uops_sent(swy_comm_t comm, double *uops_p)
{
    swy_comm_stats_t stats;

    memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    if (swyb_swy_check(comm, swy_comm_stats(comm, &stats), "swy_comm_stats") != 0) {
        return -1;
    }
    *uops_p = (double)stats.micro_ops_sent;
    return 0;
}

static int oh_max(swy_comm_t comm, double *values, size_t count)
{
    return swyb_swy_check(comm, swy_allreduce(values, values, count, SWY_FLOAT64,
                                        SWY_MAX, comm, NULL, NULL),
                    "swy_allreduce (timings)");
}

static double oh_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* utime + stime of /proc/self/stat (fields 14 and 15), in seconds. */
static double oh_proc_stat_cpu_s(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    char line[1024];
    unsigned long utime = 0, stime = 0;
    char *p;

    if (f == NULL) {
        return -1.0;
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        fclose(f);
        return -1.0;
    }
    fclose(f);
    /* The command name may hold spaces: fields count from its ')'. */
    p = strrchr(line, ')');
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &utime, &stime) != 2) {
        return -1.0;
    }
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

int swyb_overhead_main(int argc, char **argv)
{
    oh_options_t opts;
    swy_comm_t comm;
    swy_status_t status;
    int rank, nranks, rc = 1, correct = 1;
    size_t floats;
    size_t *counts = NULL, *displs = NULL;
    float *sendbuf = NULL, *recvbuf = NULL;
    double *times = NULL;
    double *memcpy_times = NULL; /* interleaved with the alltoallv reps */
    oh_point_t points[OH_MAX_PARTITIONS];
    swyb_stats_t memcpy_s;
    double idle_cpu[2] = {0.0, 0.0};

    rc = oh_options_parse(argc, argv, swyb_env_rank(), &opts);
    if (rc >= 0) {
        return rc;
    }
    rc = 1;
    status = oh_comm_init(&comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: communicator init failed: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
        return 1;
    }
    rank = swy_comm_rank(comm);
    nranks = swy_comm_size(comm);
    floats = opts.bytes / sizeof(float);
    counts = calloc((size_t)nranks, sizeof(size_t));
    displs = calloc((size_t)nranks, sizeof(size_t));
    sendbuf = malloc(floats * sizeof(float));
    recvbuf = malloc(floats * sizeof(float));
    times = calloc((size_t)opts.reps + 1, sizeof(double));
    if (counts == NULL || displs == NULL || sendbuf == NULL ||
        recvbuf == NULL || times == NULL) {
        fprintf(stderr, "swy-bench: rank %d: out of memory\n", rank);
        goto abort;
    }
    /* Only the block to itself is non-empty: the self transport. */
    counts[rank] = floats;
    for (size_t i = 0; i < floats; ++i) {
        sendbuf[i] = (float)((i * 13 + (size_t)rank) % 8191);
    }
    memset(recvbuf, 0, floats * sizeof(float));

    if (rank == 0) {
        char size[32];

        swyb_header_print(stdout, "overhead", "switchyard", argc, argv,
                          nranks);
        swyb_size_format(opts.bytes, size, sizeof(size));
        printf("# alltoallv of %s to itself only (self transport), %d reps "
               "per point; time = median [min-max] of the slowest rank\n",
               size, opts.reps);
        printf("%-10s %10s %26s\n", "partition", "micro-ops",
               "time ms med [min-max]");
        fflush(stdout);
    }

    memcpy_times = calloc((size_t)opts.reps * (size_t)opts.npartitions,
                          sizeof(double));
    if (memcpy_times == NULL) {
        fprintf(stderr, "swy-bench: rank %d: out of memory\n", rank);
        goto abort;
    }
    /* Warm the copy path (pages, caches) before anything is timed. */
    memcpy(recvbuf, sendbuf, floats * sizeof(float));

    for (int p = 0; p < opts.npartitions; ++p) {
        char value[32], in_effect[64];
        size_t part = opts.partitions[p] ? opts.partitions[p] : opts.bytes;
        double u0, u1;

        snprintf(value, sizeof(value), "%zu", part);
        if (swyb_swy_check(comm, swy_barrier(comm), "swy_barrier") != 0 ||
            swyb_swy_check(comm, swy_comm_configure(comm, "SWY_PARTITION_BYTES",
                                              value),
                     "swy_comm_configure") != 0 ||
            swyb_swy_check(comm, swy_comm_query(comm, "SWY_PARTITION_BYTES",
                                          in_effect, sizeof(in_effect)),
                     "swy_comm_query") != 0 ||
            swyb_swy_check(comm, swy_parse_size(in_effect,
                                                &points[p].partition_bytes),
                     "swy_parse_size(SWY_PARTITION_BYTES)") != 0) {
            goto abort;
        }
        /* One warm-up: first-touch of scratch and queues. */
        if (swyb_swy_check(comm, swy_alltoallv(sendbuf, counts, displs, recvbuf,
                                         counts, displs, SWY_FLOAT32, comm,
                                         NULL, NULL),
                     "swy_alltoallv") != 0 ||
            oh_uops_sent(comm, &u0) != 0) {
            goto abort;
        }
        for (int i = 0; i < opts.reps; ++i) {
            double start;

            if (swyb_swy_check(comm, swy_barrier(comm), "swy_barrier") != 0) {
                goto abort;
            }
            /* The plain copy of the same bytes, the floor of every point,
             * timed beside each alltoallv so both see the same machine. */
            start = swyb_now_s();
            memcpy(recvbuf, sendbuf, floats * sizeof(float));
            memcpy_times[p * opts.reps + i] = swyb_now_s() - start;
            if (i == opts.reps - 1) {
                memset(recvbuf, 0xff, floats * sizeof(float));
            }
            start = swyb_now_s();
            if (swyb_swy_check(comm, swy_alltoallv(sendbuf, counts, displs,
                                             recvbuf, counts, displs,
                                             SWY_FLOAT32, comm, NULL, NULL),
                         "swy_alltoallv") != 0) {
                goto abort;
            }
            times[i] = swyb_now_s() - start;
        }
        if (oh_uops_sent(comm, &u1) != 0) {
            goto abort;
        }
        times[opts.reps] =
            memcmp(recvbuf, sendbuf, floats * sizeof(float)) != 0;
        if (oh_max(comm, times, (size_t)opts.reps + 1) != 0) {
            goto abort;
        }
        if (times[opts.reps] != 0.0) {
            correct = 0;
        }
        points[p].micro_ops = (u1 - u0) / opts.reps;
        swyb_stats_compute(times, (size_t)opts.reps, &points[p].time_s);
        if (rank == 0) {
            char part_text[32], t[64];

            swyb_size_format(points[p].partition_bytes, part_text,
                             sizeof(part_text));
            snprintf(t, sizeof(t), "%.3f [%.3f-%.3f]",
                     points[p].time_s.median * 1e3,
                     points[p].time_s.min * 1e3, points[p].time_s.max * 1e3);
            printf("%-10s %10.0f %26s\n", part_text, points[p].micro_ops,
                   t);
            fflush(stdout);
        }
    }
    {
        size_t n = (size_t)opts.reps * (size_t)opts.npartitions;

        if (oh_max(comm, memcpy_times, n) != 0) {
            goto abort;
        }
        swyb_stats_compute(memcpy_times, n, &memcpy_s);
    }
    for (int p = 0; p < opts.npartitions; ++p) {
        points[p].us_per_uop =
            points[p].micro_ops > 0
                ? (points[p].time_s.median - memcpy_s.median) * 1e6 /
                      points[p].micro_ops
                : 0.0;
    }

    /* Idle: nothing posted; only the progress engine could use the CPU. */
    if (opts.idle_s > 0.0) {
        struct timespec ts = {(time_t)opts.idle_s,
                              (long)((opts.idle_s - (time_t)opts.idle_s) *
                                     1e9)};
        double c0, s0, w0;

        if (swyb_swy_check(comm, swy_comm_configure(comm, "SWY_PARTITION_BYTES",
                                              "auto"),
                     "swy_comm_configure") != 0 ||
            swyb_swy_check(comm, swy_barrier(comm), "swy_barrier") != 0) {
            goto abort;
        }
        c0 = oh_cpu_s();
        s0 = oh_proc_stat_cpu_s();
        w0 = swyb_now_s();
        while (nanosleep(&ts, &ts) != 0) {
        }
        w0 = swyb_now_s() - w0;
        idle_cpu[0] = (oh_cpu_s() - c0) / w0 * 100.0;
        idle_cpu[1] = (oh_proc_stat_cpu_s() - s0) / w0 * 100.0;
        if (oh_max(comm, idle_cpu, 2) != 0) {
            goto abort;
        }
    }

    if (rank == 0) {
        /* Least squares of median time over micro-ops. */
        double sx = 0, sy = 0, sxx = 0, sxy = 0, n = opts.npartitions;
        double slope, intercept, denom;
        char progress[32] = "?";

        for (int p = 0; p < opts.npartitions; ++p) {
            double x = points[p].micro_ops, y = points[p].time_s.median;

            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
        }
        denom = n * sxx - sx * sx;
        slope = denom != 0.0 ? (n * sxy - sx * sy) / denom : 0.0;
        intercept = (sy - slope * sx) / n;
        swy_comm_query(comm, "SWY_PROGRESS", progress, sizeof(progress));
        for (int p = 0; p < opts.npartitions; ++p) {
            char part_text[32];

            swyb_size_format(points[p].partition_bytes, part_text,
                             sizeof(part_text));
            printf("partition %-6s (time - memcpy) / micro-ops: %.2f us "
                   "(a bound: carries the op's fixed cost)\n", part_text,
                   points[p].us_per_uop);
        }
        printf("memcpy of the same bytes: %.3f ms [%.3f-%.3f]\n",
               memcpy_s.median * 1e3, memcpy_s.min * 1e3,
               memcpy_s.max * 1e3);
        printf("per micro-op (slope of time over micro-ops): %.3f us   "
               "(target <= 2 us)\n", slope * 1e6);
        printf("fixed per op (intercept - memcpy): %.1f us\n",
               (intercept - memcpy_s.median) * 1e6);
        if (opts.idle_s > 0.0) {
            printf("idle CPU, progress=%s, %.1f s: %.2f%% of a core "
                   "(CLOCK_PROCESS_CPUTIME_ID), %.1f%% (/proc/self/stat "
                   "utime+stime), slowest rank   (target ~0)\n",
                   progress, opts.idle_s, idle_cpu[0], idle_cpu[1]);
        }
        printf("partitioning share of a training step: measured by "
               "swy-train, not here\n");
        if (opts.json) {
            for (int p = 0; p < opts.npartitions; ++p) {
                printf("{\"bench\":\"overhead\",\"kind\":\"microop\","
                       "\"ranks\":%d,\"bytes\":%zu,\"partition_bytes\":%zu,"
                       "\"micro_ops\":%.1f,\"time_ms\":%.4f,"
                       "\"time_min_ms\":%.4f,\"time_max_ms\":%.4f,"
                       "\"memcpy_ms\":%.4f,\"us_per_microop_bound\":%.4f,"
                       "\"check\":\"%s\"}\n",
                       nranks, opts.bytes, points[p].partition_bytes,
                       points[p].micro_ops, points[p].time_s.median * 1e3,
                       points[p].time_s.min * 1e3, points[p].time_s.max * 1e3,
                       memcpy_s.median * 1e3, points[p].us_per_uop,
                       correct ? "ok" : "WRONG");
            }
            printf("{\"bench\":\"overhead\",\"kind\":\"fit\",\"ranks\":%d,"
                   "\"bytes\":%zu,\"us_per_microop\":%.4f,"
                   "\"fixed_us\":%.2f,\"memcpy_ms\":%.4f}\n",
                   nranks, opts.bytes, slope * 1e6,
                   (intercept - memcpy_s.median) * 1e6,
                   memcpy_s.median * 1e3);
            if (opts.idle_s > 0.0) {
                printf("{\"bench\":\"overhead\",\"kind\":\"idle\","
                       "\"ranks\":%d,\"progress\":\"%s\",\"idle_s\":%.2f,"
                       "\"cpu_percent\":%.3f,\"cpu_percent_proc_stat\":%.2f"
                       "}\n", nranks, progress, opts.idle_s, idle_cpu[0],
                       idle_cpu[1]);
            }
        }
        if (!correct) {
            fprintf(stderr, "overhead: a result was WRONG\n");
        }
        fflush(stdout);
    }
    rc = correct ? 0 : 1;
    free(memcpy_times);
    free(times);
    free(recvbuf);
    free(sendbuf);
    free(displs);
    free(counts);
    status = swy_comm_destroy(comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench: swy_comm_destroy failed: %s\n",
                swy_status_string(status));
        return 1;
    }
    return rc;
abort:
    free(memcpy_times);
    free(times);
    free(recvbuf);
    free(sendbuf);
    free(displs);
    free(counts);
    swy_comm_abort(comm);
    return 1;
}
