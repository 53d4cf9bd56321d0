/* swy-bench model: validate the communication model.
 *
 * For each traffic pattern, every rank sends --bytes in all, split over
 * the destinations by the pattern's shares; the all-to-all (one
 * swy_alltoallv of floats) is timed --iters times (the slowest rank's time
 * per iteration, median reported) and compared with the time
 * swy_moe_model_alltoall predicts for the same byte matrix on the comm's
 * link matrix (per-class defaults, SWY_TOPO_FILE as swy-run --link writes
 * it, or SWY_TOPO_PROBE=1). Patterns:
 *   uniform  1/n to every rank (plain GShard routing)
 *   ta       TA-MoE's target (swy_moe_ta_target): bandwidth-proportional
 *   local    only the ranks of the sender's node (FasterMoE's topology
 *            gate taken to its limit)
 *   hot      half of everything to rank 0, the rest uniform (a hot expert)
 * The error is (measured - model) / measured. */
#include "model.h"

#include "common.h"

#include "switchyard/moe.h"
#include "switchyard/switchyard.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_MAX_PATTERNS 8

typedef struct {
    size_t bytes;
    int iters, warmup, json;
    char patterns[256];
} model_opts_t;

static int model_check(swy_comm_t comm, swy_status_t status, const char *what)
{
    if (status == SWY_OK)
        return 0;
    fprintf(stderr, "swy-bench model: rank %d: %s failed: %s: %s\n",
            swy_comm_rank(comm), what, swy_status_string(status),
            swy_last_error(comm));
    return -1;
}

static void model_usage_print(FILE *out)
{
    fprintf(out,
            "Usage: swy-bench model [options]  (under a launcher, e.g.\n"
            "  swy-run --nodes 2 --ranks-per-node 2 --link 1gbit swy-bench "
            "model)\n"
            "  --bytes N       bytes each rank sends per all-to-all, K/M/G "
            "(default 4M)\n"
            "  --patterns L    comma list of uniform,ta,local,hot (default "
            "all)\n"
            "  --iters N       timed all-to-alls per pattern (default 10)\n"
            "  --warmup N      untimed ones first (default 2)\n"
            "  --json          one JSON line per pattern as well\n");
}

static int model_opts_parse(int argc, char **argv, model_opts_t *o)
{
    static const struct option longopts[] = {
        {"bytes", required_argument, NULL, 'b'},
        {"patterns", required_argument, NULL, 'p'},
        {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    o->bytes = 4u << 20;
    o->iters = 10;
    o->warmup = 2;
    o->json = 0;
    snprintf(o->patterns, sizeof(o->patterns), "uniform,ta,local,hot");
    optind = 2; /* argv[1] is the subcommand */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'b':
            if (swy_parse_size(optarg, &o->bytes) != 0 || o->bytes < 64) {
                fprintf(stderr, "swy-bench model: --bytes '%s': need a size "
                        ">= 64\n", optarg);
                return -1;
            }
            break;
        case 'p':
            snprintf(o->patterns, sizeof(o->patterns), "%s", optarg);
            break;
        case 'i':
        case 'w': {
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < (c == 'i') || v > 10000) {
                fprintf(stderr, "swy-bench model: --%s '%s': need an integer "
                        "in %d..10000\n", c == 'i' ? "iters" : "warmup",
                        optarg, c == 'i');
                return -1;
            }
            *(c == 'i' ? &o->iters : &o->warmup) = (int)v;
            break;
        }
        case 'j':
            o->json = 1;
            break;
        case 'h':
            return 1;
        default:
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "swy-bench model: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    return 0;
}

/* This rank's shares of its bytes per destination for a pattern; -1 for
 * an unknown name. node[] is every rank's node number. */
static int pattern_shares(swy_comm_t comm, const char *name, const int *node,
                          double *share)
{
    int n = swy_comm_size(comm), me = swy_comm_rank(comm);
    if (strcmp(name, "uniform") == 0) {
        for (int j = 0; j < n; j++)
            share[j] = 1.0 / n;
    } else if (strcmp(name, "ta") == 0) {
        if (model_check(comm, swy_moe_ta_target(comm, 1, share, NULL),
                        "swy_moe_ta_target") != 0)
            return -2;
    } else if (strcmp(name, "local") == 0) {
        int local = 0;
        for (int j = 0; j < n; j++)
            local += node[j] == node[me];
        for (int j = 0; j < n; j++)
            share[j] = node[j] == node[me] ? 1.0 / local : 0.0;
    } else if (strcmp(name, "hot") == 0) {
        for (int j = 0; j < n; j++)
            share[j] = 0.5 / n + (j == 0 ? 0.5 : 0.0);
    } else {
        return -1;
    }
    return 0;
}

static int model_pattern_run(swy_comm_t comm, const model_opts_t *o,
                             const char *name, const int *node)
{
    int n = swy_comm_size(comm), me = swy_comm_rank(comm), rc = -1;
    size_t total_floats = o->bytes / sizeof(float);
    double *share = calloc((size_t)n, sizeof(double));
    double *matrix = calloc((size_t)n * n, sizeof(double));
    double *row = calloc((size_t)n, sizeof(double));
    size_t *scount = calloc((size_t)n, sizeof(size_t));
    size_t *sdispl = calloc((size_t)n, sizeof(size_t));
    size_t *rcount = calloc((size_t)n, sizeof(size_t));
    size_t *rdispl = calloc((size_t)n, sizeof(size_t));
    double *samples = calloc((size_t)o->iters, sizeof(double));
    float *sendbuf = NULL, *recvbuf = NULL;
    if (!share || !matrix || !row || !scount || !sdispl || !rcount ||
        !rdispl || !samples) {
        fprintf(stderr, "swy-bench model: out of memory\n");
        goto out;
    }
    int prc = pattern_shares(comm, name, node, share);
    if (prc == -1) {
        if (me == 0)
            fprintf(stderr, "swy-bench model: unknown pattern '%s'\n", name);
        goto out;
    }
    if (prc != 0)
        goto out;
    /* Floats per destination; the rounding remainder goes to the largest
     * share so every rank sends exactly total_floats. */
    size_t given = 0;
    int biggest = 0;
    for (int j = 0; j < n; j++) {
        scount[j] = (size_t)floor(share[j] * (double)total_floats);
        given += scount[j];
        if (share[j] > share[biggest])
            biggest = j;
    }
    scount[biggest] += total_floats - given;
    for (int j = 0; j < n; j++)
        row[j] = (double)scount[j] * sizeof(float);
    if (model_check(comm, swy_allgather(row, matrix, (size_t)n, SWY_FLOAT64,
                                        comm, NULL, NULL),
                    "swy_allgather") != 0)
        goto out;
    size_t recv_floats = 0, off = 0;
    for (int j = 0; j < n; j++) {
        sdispl[j] = off;
        off += scount[j];
        rcount[j] = (size_t)(matrix[(size_t)j * n + me] / sizeof(float));
        rdispl[j] = recv_floats;
        recv_floats += rcount[j];
    }
    sendbuf = malloc(total_floats * sizeof(float));
    recvbuf = malloc((recv_floats ? recv_floats : 1) * sizeof(float));
    if (sendbuf == NULL || recvbuf == NULL) {
        fprintf(stderr, "swy-bench model: out of memory\n");
        goto out;
    }
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < scount[j]; i++)
            sendbuf[sdispl[j] + i] = (float)(me * 1000 + j);
    for (int it = 0; it < o->warmup + o->iters; it++) {
        if (model_check(comm, swy_barrier(comm), "swy_barrier") != 0)
            goto out;
        double t0 = swyb_now_s();
        if (model_check(comm, swy_alltoallv(sendbuf, scount, sdispl, recvbuf,
                                            rcount, rdispl, SWY_FLOAT32, comm,
                                            NULL, NULL),
                        "swy_alltoallv") != 0)
            goto out;
        double dt = swyb_now_s() - t0;
        if (model_check(comm, swy_allreduce(&dt, &dt, 1, SWY_FLOAT64, SWY_MAX,
                                            comm, NULL, NULL),
                        "swy_allreduce") != 0)
            goto out;
        if (it >= o->warmup)
            samples[it - o->warmup] = dt;
    }
    /* Check every float, and agree on the verdict so that no rank goes
     * on alone. */
    double bad = 0.0;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < rcount[j]; i++)
            if (recvbuf[rdispl[j] + i] != (float)(j * 1000 + me)) {
                if (bad == 0.0)
                    fprintf(stderr, "swy-bench model: rank %d: wrong data "
                            "from rank %d at %zu (%g)\n", me, j, i,
                            (double)recvbuf[rdispl[j] + i]);
                bad = 1.0;
            }
    if (model_check(comm, swy_allreduce(&bad, &bad, 1, SWY_FLOAT64, SWY_MAX,
                                        comm, NULL, NULL),
                    "swy_allreduce") != 0 || bad != 0.0)
        goto out;
    double model_s = 0.0;
    char why[96] = "";
    if (model_check(comm, swy_moe_model_alltoall(comm, matrix, &model_s, why,
                                                 sizeof(why)),
                    "swy_moe_model_alltoall") != 0)
        goto out;
    swyb_stats_t st;
    swyb_stats_compute(samples, (size_t)o->iters, &st);
    double cross = 0.0, all = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            all += matrix[(size_t)i * n + j];
            if (node[i] != node[j])
                cross += matrix[(size_t)i * n + j];
        }
    double err = (st.median - model_s) / st.median;
    if (me == 0) {
        printf("%-8s %10.1f %7.1f %10.3f %10.3f %10.3f %7.1f  %s\n", name,
               o->bytes / 1024.0, 100.0 * cross / all, st.median * 1e3,
               st.min * 1e3, model_s * 1e3, 100.0 * err, why);
        if (o->json)
            printf("{\"bench\":\"model\",\"pattern\":\"%s\",\"ranks\":%d,"
                   "\"bytes_per_rank\":%zu,\"cross_node_pct\":%.2f,"
                   "\"median_ms\":%.4f,\"min_ms\":%.4f,\"max_ms\":%.4f,"
                   "\"model_ms\":%.4f,\"error_pct\":%.2f,"
                   "\"bottleneck\":\"%s\"}\n", name, n, o->bytes,
                   100.0 * cross / all, st.median * 1e3, st.min * 1e3,
                   st.max * 1e3, model_s * 1e3, 100.0 * err, why);
        fflush(stdout);
    }
    rc = 0;
out:
    free(share);
    free(matrix);
    free(row);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    free(samples);
    free(sendbuf);
    free(recvbuf);
    return rc;
}

int swyb_model_main(int argc, char **argv)
{
    model_opts_t o;
    int prc = model_opts_parse(argc, argv, &o);
    if (prc != 0) {
        if (swyb_env_rank() == 0)
            model_usage_print(prc > 0 ? stdout : stderr);
        return prc > 0 ? 0 : 2;
    }
    swy_comm_t comm = NULL;
    swy_status_t status = swy_comm_init_env(&comm);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-bench model: swy_comm_init_env: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
        return 1;
    }
    int n = swy_comm_size(comm), rc = 0;
    int *node = calloc((size_t)n, sizeof(int));
    if (node == NULL ||
        model_check(comm, swy_moe_topo_nodes(comm, node, NULL),
                    "swy_moe_topo_nodes") != 0) {
        free(node);
        swy_comm_destroy(comm);
        return 1;
    }
    if (swy_comm_rank(comm) == 0) {
        swyb_header_print(stdout, "model", "switchyard", argc, argv, n);
        printf("%-8s %10s %7s %10s %10s %10s %7s  %s\n", "pattern",
               "KiB/rank", "cross%", "median_ms", "min_ms", "model_ms",
               "err%", "model bottleneck");
    }
    char list[256];
    snprintf(list, sizeof(list), "%s", o.patterns);
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p != NULL && rc == 0;
         p = strtok_r(NULL, ",", &save))
        rc = model_pattern_run(comm, &o, p, node) != 0;
    free(node);
    swy_comm_destroy(comm);
    return rc;
}
