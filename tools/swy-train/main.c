/* swy-train: the reference MoE training workload (docs/tools.md).
 * Flags, the training loop, progress lines, the summary table and the
 * --json line. The model is in model.c, one MoE block in
 * moe_block.c, the gradient buckets in ddp.c, the task in task.c and the
 * timers in timing.c; with --device cuda, the model is model_cuda.c and
 * its blocks moe_block_cuda.c (built when the CUDA kernels are). The
 * model is called through the table of its device (trainer.h).
 *
 * Exit status: 0 on success, 2 on bad input (every rank parses the same
 * flags, so every rank exits 2; also no launcher variables, and --device
 * cuda where there is no GPU or no CUDA path), 1 on a failure while
 * training. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "moe_block.h"
#include "placement.h"
#ifdef SWT_HAVE_CUDA
#include "model_cuda.h"
#endif
#include "blas_core.h"
#include "swt_commit.h"
#include "swy_kernels.h"
#include "switchyard/load.h"
#include "switchyard/switchyard.h"
#include "task.h"
#include "timing.h"
#include "trainer.h"

typedef struct {
    swt_model_config_t model;
    int steps;
    double noise;
    const char *policy;      /* NULL: whatever SWY_POLICY gives */
    const char *partition;   /* NULL: whatever SWY_PARTITION_BYTES gives */
    const char *device;
    const swt_trainer_ops_t *ops; /* the model's, chosen by --device */
    char device_desc[160];   /* "cpu" or "cuda (<GPU name>)" */
    int json;
    const char *trace_loads; /* CSV path, rank 0 writes */
    const char *loss_file;   /* CSV path, rank 0 writes */
    double compute_scale;
    int threads;
    int log_every;           /* 0: about 20 lines per run */
    int warmup;              /* steps left out of the timing medians */
    double skew;             /* Zipf exponent of the token ids, 0 = uniform */
    int placement;           /* swt_placement_kind_t */
    int placement_every;
    int placement_horizon;      /* -1: placement_every */
    const char *oracle_trace;
    double placement_bw;     /* bytes/s of the placement's latency model */
    double placement_flops;  /* flop/s of one rank, same */
    int placement_max_shadow;
    int ep; /* --ep: expert-parallel group size; 0: the world */
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
"Usage: swy-train [options]   (start it with swy-run, e.g. swy-run -n 4)\n"
"Train the reference MoE model on a synthetic task: embedding -> L x\n"
"[dense block + MoE block] -> output -> cross-entropy; dense gradients in\n"
"DDP buckets over swy_allreduce (low priority), experts over lib/moe\n"
"(high priority).\n"
"\n"
"Model and task:\n"
"  --layers N            blocks L (default 2)\n"
"  --hidden N            hidden size H (default 128)\n"
"  --ffn N               FFN inner size F, dense and expert (default 256)\n"
"  --dense-ffn N         the dense block's inner size, if not --ffn's\n"
"  --experts-per-rank N  experts per rank before packing (default 2);\n"
"                        the model has ranks*N*packing experts\n"
"  --top-k N             experts per token (default 2)\n"
"  --capacity-factor X   per gate group, 0 = no limit (default 1.25)\n"
"  --gate-group N        tokens per gate group (capacity and aux loss),\n"
"                        must divide --tokens-per-rank (default: all)\n"
"  --aux-coef X          weight of the GShard aux loss (default 0.01)\n"
"  --tokens-per-rank N   tokens per rank per step S (default 512)\n"
"  --vocab N             vocabulary V (default 256)\n"
"  --noise Q             label noise: a label is uniform with prob. Q\n"
"                        (default 0.1; sets the loss floor)\n"
"  --seed N              seed of the task and the init (default 1)\n"
"  --skew Z              token ids Zipf(Z)-distributed instead of uniform,\n"
"                        so a few experts get most rows (default 0)\n"
"Training:\n"
"  --steps N             steps (default 300)\n"
"  --lr X                Adam learning rate (default 0.003)\n"
"  --policy NAME         scheduling policy (fifo, fair, lina, credit, ...)\n"
"                        set with swy_comm_configure\n"
"  --partition SIZE      micro-op size (SWY_PARTITION_BYTES: 256K, 1G,\n"
"                        auto), set with swy_comm_configure\n"
"  --pipeline D          pipelining degree of dispatch/combine (default 1)\n"
"  --packing P           packing factor: P times the experts per rank\n"
"                        (changes the model; default 1)\n"
"  --bucket-bytes N      DDP bucket size, K/M suffixes (default 256K)\n"
"  --phase-hints 0|1     swy_phase_hint before backward all-to-alls (1)\n"
"  --overlap 0|1         1: the dense allreduce overlaps the next forward\n"
"                        (ByteScheduler): each tensor's wait and Adam step\n"
"                        move to just before its first use, buckets go in\n"
"                        the order that forward needs them; the same loss\n"
"                        curve bit for bit (default 1 on the CPU; 0, wait\n"
"                        before the optimizer, on the GPU, which has no\n"
"                        overlap yet)\n"
"  --ep N                expert-parallel groups of N ranks (N divides the\n"
"                        ranks), in the layout frameworks use: the\n"
"                        all-to-all on the group's own communicator,\n"
"                        experts sharded within a group and replicated\n"
"                        across the W/N groups (their gradients summed at\n"
"                        low priority on the expert-data-parallel\n"
"                        communicator), dense gradients on the world. A\n"
"                        group takes every (W/N)-th rank, so it spans the\n"
"                        nodes. Default: one group of all ranks, on the\n"
"                        world itself\n"
"  --gate NAME           gshard (default), ta (TA-MoE: balance loss\n"
"                        weighted toward bandwidth-proportional dispatch)\n"
"                        or topo (FasterMoE: reroute cross-node choices)\n"
"  --topo-cross-frac X   --gate topo: tokens per group that may keep a\n"
"                        cross-node expert (default 0.14)\n"
"  --ta-capacity KIND    --gate ta: how each expert's capacity is sized,\n"
"                        the total as GShard's: routed (default: this\n"
"                        rank's share of slots that chose it in earlier\n"
"                        steps, an EMA, following the gate as it moves to\n"
"                        TA-MoE's target), target (TA-MoE's target share\n"
"                        from the first step) or uniform (1/E, GShard's)\n"
"  --placement KIND      none (default), predicted or oracle: every N\n"
"                        steps plan which experts to shadow (replicate on\n"
"                        every rank, FasterMoE) from the loads of the next\n"
"                        N steps, EMA-predicted or read from the trace\n"
"  --placement-every N   plan every N steps (default 10)\n"
"  --placement-horizon N a relocation is made only when its modeled gain\n"
"                        over N steps exceeds its bytes (parameters and\n"
"                        Adam state) on the link; 0: moves are free\n"
"                        (default: --placement-every, the steps a plan\n"
"                        stands)\n"
"  --oracle-trace FILE   --placement oracle: a --trace-loads CSV of an\n"
"                        earlier run with the same flags\n"
"  --placement-bw X      link bytes/s of the latency model (default\n"
"                        1.25e8, the emulated cluster's 1 gbit)\n"
"  --placement-flops X   flop/s of one rank in the model (default 2e10)\n"
"  --placement-max-shadow N  experts shadowed per layer at most\n"
"                        (default 4)\n"
"  --device cpu|cuda     kernels to use (default cpu); cuda: every tensor\n"
"                        on this rank's GPU (local rank modulo the GPUs)\n"
"  --dtype fp32|bf16     precision (default fp32); bf16 (--device cuda):\n"
"                        bf16 weights and activations, fp32 master\n"
"                        weights, gradients and Adam\n"
"  --threads N           OpenBLAS threads per rank (default 1)\n"
"  --compute-scale X     emulate X times slower compute by sleeping\n"
"                        (X-1) times each measured compute block (1)\n"
"Output:\n"
"  --log-every N         progress every N steps (default: ~20 lines)\n"
"  --warmup N            steps left out of the timing medians (default 3)\n"
"  --json                one JSON line with the results at the end\n"
"  --trace-loads FILE    CSV step,layer,expert,tokens per step\n"
"  --loss-file FILE      CSV step,loss,aux per step\n"
"  -h, --help            this text\n");
}

/* Per layer, the newest (up to 100) steps' mean expert share from the
 * load tracker: the busiest and the idlest expert, in percent (a
 * balanced layer has every expert at 100/E). */
static void print_load_spread(swy_load_tracker_t tracker, int L, int E)
{
    double *props = malloc((size_t)100 * (size_t)E * sizeof(double));
    double *mean = malloc((size_t)E * sizeof(double));
    if (props == NULL || mean == NULL)
        goto out;
    for (int l = 0; l < L; l++) {
        int n = 0;
        if (swy_load_tracker_proportions(tracker, l, 100, props, NULL, &n) !=
                SWY_OK ||
            n == 0)
            continue;
        double lo = 1, hi = 0;
        for (int e = 0; e < E; e++) {
            mean[e] = 0;
            for (int i = 0; i < n; i++)
                mean[e] += props[(size_t)i * E + e] / n;
            lo = mean[e] < lo ? mean[e] : lo;
            hi = mean[e] > hi ? mean[e] : hi;
        }
        printf("%-22s layer %d: busiest %.1f%%, idlest %.1f%% (even: "
               "%.1f%%; last %d steps)\n", l == 0 ? "expert load" : "", l,
               100 * hi, 100 * lo, 100.0 / E, n);
    }
out:
    free(props);
    free(mean);
}

static int bad(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "swy-train: %s %s: %s\n", flag, value, why);
    return -1;
}

static int parse_int(const char *flag, const char *s, long lo, long hi,
                     int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return bad(flag, s, "not an integer");
    if (v < lo || v > hi) {
        char why[96];
        snprintf(why, sizeof(why), "out of range %ld..%ld", lo, hi);
        return bad(flag, s, why);
    }
    *out = (int)v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double lo,
                        double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return bad(flag, s, "not a number");
    if (v < lo || v > hi) {
        char why[96];
        snprintf(why, sizeof(why), "out of range %g..%g", lo, hi);
        return bad(flag, s, why);
    }
    *out = v;
    return 0;
}

static int parse_bytes(const char *flag, const char *s, size_t *out)
{
    size_t v;
    if (swy_parse_size(s, &v) != SWY_OK || v > ((size_t)1 << 40))
        return bad(flag, s, "not a size (N, NK, NM, NG; at most 1T)");
    *out = v;
    return 0;
}

enum {
    O_LAYERS = 256, O_HIDDEN, O_FFN, O_EPR, O_TOPK, O_CAP, O_GROUP, O_AUX,
    O_TOKENS, O_VOCAB, O_NOISE, O_SEED, O_STEPS, O_LR, O_POLICY,
    O_PARTITION, O_PIPE, O_PACK, O_BUCKET, O_HINTS, O_DEVICE, O_DTYPE,
    O_THREADS,
    O_SCALE, O_LOG,
    O_WARMUP, O_JSON, O_TRACE, O_LOSS, O_GATE, O_TOPO_FRAC, O_TA_CAP,
    O_SKEW, O_PLACE, O_PLACE_EVERY, O_PLACE_HORIZON, O_ORACLE, O_PLACE_BW,
    O_PLACE_FLOPS, O_PLACE_MAX,
    O_EP,
    O_OVERLAP,
    O_DENSE_FFN
};

/* Parses and checks everything that does not need the communicator.
 * Returns 0, 1 for --help, -1 on bad input (already reported). */
static int parse_args(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        {"layers", required_argument, NULL, O_LAYERS},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"ffn", required_argument, NULL, O_FFN},
        {"experts-per-rank", required_argument, NULL, O_EPR},
        {"top-k", required_argument, NULL, O_TOPK},
        {"capacity-factor", required_argument, NULL, O_CAP},
        {"gate-group", required_argument, NULL, O_GROUP},
        {"aux-coef", required_argument, NULL, O_AUX},
        {"tokens-per-rank", required_argument, NULL, O_TOKENS},
        {"vocab", required_argument, NULL, O_VOCAB},
        {"noise", required_argument, NULL, O_NOISE},
        {"seed", required_argument, NULL, O_SEED},
        {"steps", required_argument, NULL, O_STEPS},
        {"lr", required_argument, NULL, O_LR},
        {"policy", required_argument, NULL, O_POLICY},
        {"partition", required_argument, NULL, O_PARTITION},
        {"pipeline", required_argument, NULL, O_PIPE},
        {"packing", required_argument, NULL, O_PACK},
        {"bucket-bytes", required_argument, NULL, O_BUCKET},
        {"phase-hints", required_argument, NULL, O_HINTS},
        {"device", required_argument, NULL, O_DEVICE},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"gate", required_argument, NULL, O_GATE},
        {"topo-cross-frac", required_argument, NULL, O_TOPO_FRAC},
        {"ta-capacity", required_argument, NULL, O_TA_CAP},
        {"threads", required_argument, NULL, O_THREADS},
        {"compute-scale", required_argument, NULL, O_SCALE},
        {"log-every", required_argument, NULL, O_LOG},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"json", no_argument, NULL, O_JSON},
        {"trace-loads", required_argument, NULL, O_TRACE},
        {"loss-file", required_argument, NULL, O_LOSS},
        {"skew", required_argument, NULL, O_SKEW},
        {"placement", required_argument, NULL, O_PLACE},
        {"placement-every", required_argument, NULL, O_PLACE_EVERY},
        {"placement-horizon", required_argument, NULL, O_PLACE_HORIZON},
        {"oracle-trace", required_argument, NULL, O_ORACLE},
        {"placement-bw", required_argument, NULL, O_PLACE_BW},
        {"placement-flops", required_argument, NULL, O_PLACE_FLOPS},
        {"placement-max-shadow", required_argument, NULL, O_PLACE_MAX},
        {"ep", required_argument, NULL, O_EP},
        {"overlap", required_argument, NULL, O_OVERLAP},
        {"dense-ffn", required_argument, NULL, O_DENSE_FFN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    swt_model_config_t *m = &o->model;
    int rc = 0, seed = 1;
    int opt, idx = -1;
    char f[48];
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        const char *a = optarg;
        snprintf(f, sizeof(f), "--%s", idx >= 0 ? longopts[idx].name : "?");
        idx = -1;
        switch (opt) {
        case O_LAYERS: rc = parse_int(f, a, 1, 1024, &m->layers); break;
        case O_HIDDEN: rc = parse_int(f, a, 1, 1 << 16, &m->hidden); break;
        case O_FFN: rc = parse_int(f, a, 1, 1 << 16, &m->ffn); break;
        case O_DENSE_FFN:
            rc = parse_int(f, a, 1, 1 << 16, &m->dense_ffn);
            break;
        case O_EPR:
            rc = parse_int(f, a, 1, 4096, &m->experts_per_rank);
            break;
        case O_TOPK: rc = parse_int(f, a, 1, 4096, &m->top_k); break;
        case O_CAP:
            rc = parse_double(f, a, 0, 1e6, &m->capacity_factor);
            break;
        case O_GROUP: rc = parse_int(f, a, 1, 1 << 24, &m->gate_group); break;
        case O_AUX: rc = parse_double(f, a, 0, 1e6, &m->aux_coef); break;
        case O_TOKENS: rc = parse_int(f, a, 1, 1 << 24, &m->tokens); break;
        case O_VOCAB: rc = parse_int(f, a, 2, 1 << 24, &m->vocab); break;
        case O_NOISE: rc = parse_double(f, a, 0, 1, &o->noise); break;
        case O_SEED: rc = parse_int(f, a, 0, 0x7fffffff, &seed); break;
        case O_STEPS: rc = parse_int(f, a, 1, 1 << 24, &o->steps); break;
        case O_LR:
            rc = parse_double(f, a, 1e-12, 10, &m->lr);
            break;
        case O_POLICY:
            o->policy = a;
            if (a[0] == '\0')
                rc = bad(f, "''", "empty policy name");
            break;
        case O_PARTITION:
            o->partition = a; /* checked by swy_comm_configure */
            break;
        case O_PIPE: rc = parse_int(f, a, 1, 256, &m->pipeline); break;
        case O_PACK: rc = parse_int(f, a, 1, 256, &m->packing); break;
        case O_BUCKET: rc = parse_bytes(f, a, &m->bucket_bytes); break;
        case O_HINTS: rc = parse_int(f, a, 0, 1, &m->phase_hints); break;
        case O_OVERLAP: rc = parse_int(f, a, 0, 1, &m->overlap); break;
        case O_GATE:
            if (strcmp(a, "gshard") == 0) m->gate = SWT_GATE_GSHARD;
            else if (strcmp(a, "ta") == 0) m->gate = SWT_GATE_TA;
            else if (strcmp(a, "topo") == 0) m->gate = SWT_GATE_TOPO;
            else {
                fprintf(stderr, "swy-train: --gate '%s': expected gshard, "
                        "ta or topo\n", a);
                rc = -1;
            }
            break;
        case O_TOPO_FRAC:
            rc = parse_double(f, a, 0, 1, &m->topo_cross_frac);
            break;
        case O_TA_CAP:
            if (strcmp(a, "routed") == 0) m->ta_capacity = SWT_TA_CAP_ROUTED;
            else if (strcmp(a, "target") == 0)
                m->ta_capacity = SWT_TA_CAP_TARGET;
            else if (strcmp(a, "uniform") == 0)
                m->ta_capacity = SWT_TA_CAP_UNIFORM;
            else {
                fprintf(stderr, "swy-train: --ta-capacity '%s': expected "
                        "routed, target or uniform\n", a);
                rc = -1;
            }
            break;
        case O_DEVICE:
            o->device = a;
            if (strcmp(a, "cpu") != 0 && strcmp(a, "cuda") != 0)
                rc = bad(f, a, "expected cpu or cuda");
            break;
        case O_DTYPE:
            if (strcmp(a, "fp32") != 0 && strcmp(a, "bf16") != 0)
                rc = bad(f, a, "expected fp32 or bf16");
            m->bf16 = strcmp(a, "bf16") == 0;
            break;
        case O_THREADS: rc = parse_int(f, a, 1, 1024, &o->threads); break;
        case O_SCALE:
            rc = parse_double(f, a, 1, 1e6, &o->compute_scale);
            break;
        case O_LOG: rc = parse_int(f, a, 0, 1 << 24, &o->log_every); break;
        case O_WARMUP: rc = parse_int(f, a, 0, 1 << 24, &o->warmup); break;
        case O_JSON: o->json = 1; break;
        case O_TRACE: o->trace_loads = a; break;
        case O_LOSS: o->loss_file = a; break;
        case O_SKEW: rc = parse_double(f, a, 0, 100, &o->skew); break;
        case O_PLACE:
            if (strcmp(a, "none") == 0) o->placement = SWT_PLACE_NONE;
            else if (strcmp(a, "predicted") == 0)
                o->placement = SWT_PLACE_PREDICTED;
            else if (strcmp(a, "oracle") == 0)
                o->placement = SWT_PLACE_ORACLE;
            else
                rc = bad(f, a, "expected none, predicted or oracle");
            break;
        case O_PLACE_EVERY:
            rc = parse_int(f, a, 1, 1 << 24, &o->placement_every);
            break;
        case O_PLACE_HORIZON:
            rc = parse_int(f, a, 0, 1 << 24, &o->placement_horizon);
            break;
        case O_ORACLE: o->oracle_trace = a; break;
        case O_PLACE_BW:
            rc = parse_double(f, a, 1, 1e15, &o->placement_bw);
            break;
        case O_PLACE_FLOPS:
            rc = parse_double(f, a, 1, 1e18, &o->placement_flops);
            break;
        case O_PLACE_MAX:
            rc = parse_int(f, a, 0, 1 << 20, &o->placement_max_shadow);
            break;
        case O_EP: rc = parse_int(f, a, 1, 65535, &o->ep); break;
        case 'h': usage(stdout); return 1;
        default:
            if (optopt != 0 && optopt < 256 && optopt != '?')
                fprintf(stderr, "swy-train: option -%c needs a value or is "
                        "unknown\n", optopt);
            else
                fprintf(stderr, "swy-train: bad option %s (a value "
                        "missing, or unknown; see --help)\n",
                        argv[optind - 1]);
            return -1;
        }
        if (rc != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "swy-train: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    m->seed = (uint64_t)seed;
    if (m->gate_group == 0)
        m->gate_group = m->tokens;
    if (m->tokens % m->gate_group != 0) {
        fprintf(stderr, "swy-train: --gate-group %d does not divide "
                "--tokens-per-rank %d\n", m->gate_group, m->tokens);
        return -1;
    }
    if (o->placement == SWT_PLACE_ORACLE && o->oracle_trace == NULL) {
        fprintf(stderr, "swy-train: --placement oracle needs --oracle-trace "
                "FILE (the --trace-loads CSV of a run with the same "
                "flags)\n");
        return -1;
    }
    if (o->oracle_trace != NULL && o->placement != SWT_PLACE_ORACLE) {
        fprintf(stderr, "swy-train: --oracle-trace is read by --placement "
                "oracle only\n");
        return -1;
    }
    if (o->warmup >= o->steps)
        o->warmup = o->steps > 1 ? o->steps - 1 : 0;
    return 0;
}

/* Host facts for the run header. */
static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c != NULL) {
                c++;
                while (*c == ' ')
                    c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    fclose(f);
}

/* --ta-capacity's name; "none" for the other gates, whose capacity is
 * the uniform one. */
static const char *ta_capacity_name(const swt_model_config_t *m)
{
    if (m->gate != SWT_GATE_TA)
        return "none";
    switch (m->ta_capacity) {
    case SWT_TA_CAP_TARGET: return "target";
    case SWT_TA_CAP_UNIFORM: return "uniform";
    default: return "routed";
    }
}

/* OpenBLAS older than the CPU runs SSE kernels on it (blas_core.h):
 * swy-run sets OPENBLAS_CORETYPE for the ranks; without it, say so. */
static void blas_core_warn(void)
{
    const char *pick =
        swy_blas_core_pick(swy_k_blas_core(), swy_blas_cpu_features());
    if (pick == NULL || getenv("OPENBLAS_CORETYPE") != NULL)
        return;
    fprintf(stderr, "swy-train: OpenBLAS runs its %s kernels on this CPU, "
            "which it does not know; its %s kernels run here several times "
            "faster. Start the ranks with swy-run, or set "
            "OPENBLAS_CORETYPE=%s for them.\n", swy_k_blas_core(), pick,
            pick);
}

static void print_header(const options_t *o, int argc, char **argv,
                         int W, const char *policy, const swt_trainer_t *md,
                         double floor_nats)
{
    const swt_model_config_t *m = &o->model;
    char host[256] = "?", cpu[256], date[64];
    gethostname(host, sizeof(host) - 1);
    cpu_model(cpu, sizeof(cpu));
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    printf("# swy-train  commit: %s  date: %s\n", SWT_GIT_COMMIT, date);
    printf("# command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# machine: %s  nproc: %ld  cpu: %s\n", host,
           sysconf(_SC_NPROCESSORS_ONLN), cpu);
    printf("# ranks: %d  policy: %s  pipeline: %d  packing: %d  "
           "bucket: %zu bytes (%d buckets)  phase hints: %s  device: %s  "
           "blas: %s, %d threads  gate: %s (capacity per expert: %s)  "
           "overlap: %s\n", W, policy,
           m->pipeline,
           m->packing, m->bucket_bytes, md->ops->num_buckets(md->model),
           m->phase_hints ? "on" : "off", o->device_desc, swy_k_blas_core(),
           o->threads,
           m->gate == SWT_GATE_TA     ? "ta"
           : m->gate == SWT_GATE_TOPO ? "topo"
                                      : "gshard",
           ta_capacity_name(m), m->overlap ? "next forward" : "off");
    printf("# model: layers %d  hidden %d  ffn %d (dense %d)  experts %d "
           "(%d per rank)  top-k %d  capacity %.3g per group of %d tokens  "
           "aux %g  vocab %d\n", m->layers, m->hidden, m->ffn, m->dense_ffn,
           md->ops->num_experts(md->model), md->ops->num_local_experts(md->model),
           m->top_k, m->capacity_factor, m->gate_group, m->aux_coef,
           m->vocab);
    printf("# params: %zu dense (replicated), %zu expert on this rank  "
           "tokens: %d per rank, %d per step  lr %g  seed %llu\n",
           md->ops->dense_params(md->model), md->ops->expert_params(md->model),
           m->tokens, m->tokens * W, m->lr, (unsigned long long)m->seed);
    printf("# task: label = perm[token] with prob. %.3g, else uniform; "
           "loss floor %.4f nats; token ids %s (skew %g)\n", 1.0 - o->noise,
           floor_nats, o->skew > 0 ? "Zipf" : "uniform", o->skew);
    if (o->placement != SWT_PLACE_NONE)
        printf("# placement: %s every %d steps (shadowing applied, packing "
               "%s); model: link %.3g bytes/s, %.3g flop/s per "
               "rank, at most %d shadowed per layer\n",
               swt_placement_name(o->placement), o->placement_every,
               o->model.gate == SWT_GATE_GSHARD
                   ? "applied into the fixed slots when it lowers the "
                     "modeled latency"
                   : "reported only: --gate ta and topo weigh experts by "
                     "their rank",
               o->placement_bw, o->placement_flops,
               o->placement_max_shadow);
    if (o->compute_scale > 1.0)
        printf("# compute-scale %.3g: every compute block is followed by a "
               "sleep of %.3g times its measured time (EMULATED slower "
               "compute)\n", o->compute_scale, o->compute_scale - 1.0);
    printf("%6s %9s %9s %10s %9s %9s %9s %9s\n", "step", "loss", "aux",
           "tokens/s", "step_ms", "a2a_ms", "ar_ms", "exposed");
    fflush(stdout);
}

/* The last plan's packing per layer: the home rank of each expert and
 * whether the plan moved experts there (swt_model_set_slots). */
static void print_packing(const swt_placement_t *pl, int L, int E,
                          int moved_total)
{
    for (int l = 0; l < L; l++) {
        double before, after;
        int moved;
        const int *home = swt_placement_home(pl, l, &before, &after, &moved);
        if (home == NULL)
            return;
        if (l == 0)
            printf("%-22s %s (%d moves in all)\n", "packing",
                   moved_total > 0 ? "applied" : "not applied",
                   moved_total);
        printf("%-22s layer %d: home", "", l);
        for (int e = 0; e < E; e++)
            printf(" %d", home[e]);
        printf("; %d %s; modeled %.2f -> %.2f ms\n", moved,
               swt_placement_packed(pl, l) ? "moved" : "would move (kept)",
               1e3 * before, 1e3 * after);
    }
}

/* Every rank plans from the same allreduced counts, so the plans agree;
 * a disagreement would pair up the wrong broadcasts, so it is checked
 * (one small allreduce per plan): max and -min of the flags.
 * @return 0, or -1 (printed). */
static int check_same_plan(swy_comm_t comm, const int *plan, int L, int E,
                           double *scratch)
{
    size_t n = (size_t)L * E;
    for (size_t i = 0; i < n; i++) {
        scratch[i] = plan[i];
        scratch[n + i] = -plan[i];
    }
    if (swy_allreduce(scratch, scratch, 2 * n, SWY_FLOAT64, SWY_MAX, comm,
                      NULL, NULL) != SWY_OK) {
        fprintf(stderr, "swy-train: allreduce of the placement plan: %s\n",
                swy_last_error(comm));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (scratch[i] != -scratch[n + i]) {
            fprintf(stderr, "swy-train: internal error: the ranks planned "
                    "different placements (layer %zu, expert %zu)\n",
                    i / (size_t)E, i % (size_t)E);
            return -1;
        }
    return 0;
}

/* Per-step record, summed over ranks: R_ROWS and R_CROSS are the rows
 * dispatched in all layers and those that crossed to another node. */
enum { R_XENT, R_AUX, R_DROPPED, R_ROWS, R_CROSS, R_TIMERS,
       R_LEN = R_TIMERS + SWT_T_COUNT };

/* comm: the world (dense parameters, the step's records); ep: the
 * experts' group (the world itself without --ep); expert_dp: the
 * replicas of this rank's experts, or NULL. */
static int run(const options_t *o, int argc, char **argv, swy_comm_t comm,
               swy_comm_t ep, swy_comm_t expert_dp)
{
    const swt_model_config_t *m = &o->model;
    int W = swy_comm_size(comm), rank = swy_comm_rank(comm);
    int Wep = swy_comm_size(ep), ep_rank = swy_comm_rank(ep);
    int E = Wep * m->experts_per_rank * m->packing;
    if (m->top_k > E) {
        if (rank == 0)
            fprintf(stderr, "swy-train: --top-k %d exceeds the %d experts "
                    "(%d ranks x %d per rank x packing %d)\n", m->top_k, E,
                    Wep, m->experts_per_rank, m->packing);
        return 2;
    }
    if (o->policy != NULL) {
        swy_status_t st = swy_comm_configure(comm, "SWY_POLICY", o->policy);
        if (st != SWY_OK) {
            if (rank == 0)
                fprintf(stderr, "swy-train: --policy %s: %s\n", o->policy,
                        swy_last_error(comm));
            return 2;
        }
    }
    if (o->partition != NULL) {
        swy_status_t st = swy_comm_configure(comm, "SWY_PARTITION_BYTES",
                                             o->partition);
        if (st != SWY_OK) {
            if (rank == 0)
                fprintf(stderr, "swy-train: --partition %s: %s\n",
                        o->partition, swy_last_error(comm));
            return 2;
        }
    }
    char policy[64] = "?", partition[32] = "null"; /* bytes, for JSON */
    (void)swy_comm_query(comm, "SWY_POLICY", policy, sizeof(policy));
    if (swy_comm_query(comm, "SWY_PARTITION_BYTES", partition,
                       sizeof(partition)) != SWY_OK ||
        partition[strspn(partition, "0123456789")] != '\0')
        snprintf(partition, sizeof(partition), "null");

    swt_task_t task;
    if (swt_task_init(&task, m->vocab, o->noise, o->skew, m->seed) != 0) {
        fprintf(stderr, "swy-train: out of memory for the task\n");
        return 1;
    }
    double floor_nats = swt_task_floor(&task);
    swt_trainer_t model, *md = &model;
    if (swt_trainer_create(md, o->ops, comm, ep, expert_dp, m) != SWY_OK) {
        swt_task_fini(&task);
        return 1;
    }
    int S = m->tokens, L = m->layers, trace = o->trace_loads != NULL;
    int steps = o->steps;
    /* The per-expert rows of every step, summed over ranks, for the trace
     * and for the placement (which every rank plans from). */
    int counts = trace || o->placement != SWT_PLACE_NONE;
    size_t rec_len = R_LEN + (counts ? (size_t)L * E : 0);
    int *ids = malloc((size_t)S * sizeof(int));
    int *labels = malloc((size_t)S * sizeof(int));
    int *node_of = malloc((size_t)Wep * sizeof(int));
    double *rec = malloc(rec_len * sizeof(double));
    double *hist = malloc((size_t)steps * R_LEN * sizeof(double));
    double *col = malloc((size_t)steps * sizeof(double));
    FILE *trace_f = NULL, *loss_f = NULL;
    swy_load_tracker_t tracker = NULL; /* rank 0, with --trace-loads */
    int64_t *layer_counts = NULL;
    swt_placement_t *placement = NULL;
    int *shadow_plan = malloc((size_t)L * E * sizeof(int));
    int *slot_cur = malloc((size_t)L * E * sizeof(int));
    int *slot_plan = malloc((size_t)L * E * sizeof(int));
    double *plan_check = malloc((size_t)2 * L * E * sizeof(double));
    int plan_pending = 0, moved_total = 0;
    double shadowed_sum = 0, apply_s = 0;
    int rc = 1;
    if (!ids || !labels || !node_of || !rec || !hist || !col ||
        !shadow_plan || !slot_cur || !slot_plan || !plan_check) {
        fprintf(stderr, "swy-train: out of memory\n");
        goto out;
    }
    if (swy_moe_topo_nodes(ep, node_of, NULL) != SWY_OK) {
        fprintf(stderr, "swy-train: swy_moe_topo_nodes: %s\n",
                swy_last_error(ep));
        goto out;
    }
    int n_local = E / Wep;
    if (rank == 0 && trace) {
        trace_f = fopen(o->trace_loads, "w");
        if (trace_f == NULL)
            fprintf(stderr, "swy-train: --trace-loads %s: %s\n",
                    o->trace_loads, strerror(errno));
        else
            fprintf(trace_f, "step,layer,expert,tokens\n");
        /* The same counts also go to the library's load tracker, whose
         * ring the summary reads (the last 100 steps' load spread). */
        layer_counts = malloc((size_t)E * sizeof(int64_t));
        if (layer_counts == NULL ||
            swy_load_tracker_create(L, E, 100, &tracker) != SWY_OK)
            fprintf(stderr, "swy-train: load tracker: %s\n",
                    swy_last_error(NULL));
    }
    if (rank == 0 && o->loss_file != NULL) {
        loss_f = fopen(o->loss_file, "w");
        if (loss_f == NULL)
            fprintf(stderr, "swy-train: --loss-file %s: %s\n", o->loss_file,
                    strerror(errno));
        else
            fprintf(loss_f, "step,loss,aux\n");
    }
    if (o->placement != SWT_PLACE_NONE) {
        swt_placement_config_t pc = {
            .kind = o->placement, .every = o->placement_every,
            /* A plan stands until the next one: by default its moves must
             * pay for themselves within those steps. */
            .horizon = o->placement_horizon >= 0 ? o->placement_horizon
                                                 : o->placement_every,
            .oracle_trace = o->oracle_trace,
            .link_bandwidth = o->placement_bw,
            .flops = o->placement_flops,
            .max_shadow = o->placement_max_shadow, .layers = L, .ranks = W,
            .experts_per_rank = n_local, .hidden = m->hidden,
            .ffn = m->ffn, .steps = steps,
            .apply_packing = m->gate == SWT_GATE_GSHARD};
        int prc = swt_placement_create(&pc, &placement);
        if (prc == -2)
            goto out;
        if (prc != 0)
            rc = 2; /* bad trace: every rank read the same file */
    }
    if ((rank == 0 && trace && trace_f == NULL) ||
        (rank == 0 && o->loss_file != NULL && loss_f == NULL)) {
        rc = 2; /* every rank must stop: tell them through the barrier */
    }
    {
        /* Agree on stopping (a file rank 0 cannot open). */
        double flag = rc == 2 ? 1.0 : 0.0;
        if (swy_allreduce(&flag, &flag, 1, SWY_FLOAT64, SWY_MAX, comm, NULL,
                          NULL) != SWY_OK) {
            fprintf(stderr, "swy-train: allreduce: %s\n",
                    swy_last_error(comm));
            goto out;
        }
        if (flag != 0.0) {
            rc = 2;
            goto out;
        }
    }
    if (rank == 0) {
        print_header(o, argc, argv, W, policy, md, floor_nats);
        blas_core_warn();
    }
    if (rank == 0 && ep != comm)
        printf("# groups: experts over %d expert-parallel groups of %d "
               "ranks (every %d-th rank), gradients of each expert summed "
               "over its %d replicas (expert data-parallel, low priority); "
               "dense gradients over all %d ranks\n", W / Wep, Wep, W / Wep,
               W / Wep, W);
    int log_every = o->log_every > 0 ? o->log_every
                                     : (steps >= 20 ? steps / 20 : 1);
    swt_timing_t tm = {{0}, o->compute_scale};
    for (int step = 1; step <= steps; step++) {
        swt_task_batch(&task, step, (int64_t)rank * S, S, ids, labels);
        swt_timing_reset(&tm);
        swt_step_result_t res;
        double t0 = swt_now();
        /* The plan made after the last step: the broadcasts of newly
         * shadowed experts and the moves of packed ones count in this
         * step's time. Shadows first: an expert no longer shadowed may
         * move, a newly shadowed one keeps its slot. */
        if (plan_pending) {
            for (int l = 0; l < L; l++) {
                int moved = 0;
                if (swt_model_set_shadow(md->cpu, l,
                                         shadow_plan + (size_t)l * E) !=
                        SWY_OK ||
                    swt_model_set_slots(md->cpu, l,
                                        slot_plan + (size_t)l * E,
                                        &moved) != SWY_OK)
                    goto out;
                moved_total += moved;
            }
            plan_pending = 0;
            apply_s += swt_now() - t0;
        }
        if (placement != NULL)
            for (int l = 0; l < L; l++)
                shadowed_sum += swt_model_num_shadowed(md->cpu, l);
        swy_status_t st = md->ops->step(md->model, ids, labels, step, &tm,
                                         &res);
        tm.acc[SWT_T_STEP] = swt_now() - t0;
        if (st != SWY_OK) {
            fprintf(stderr, "swy-train: rank %d: step %d failed: %s\n",
                    rank, step, swy_status_string(st));
            goto out;
        }
        rec[R_XENT] = res.xent;
        rec[R_AUX] = res.aux;
        rec[R_DROPPED] = res.dropped;
        rec[R_ROWS] = rec[R_CROSS] = 0.0;
        for (int l = 0; l < L; l++) {
            const int64_t *sent = md->ops->layer_sent(md->model, l);
            const int *slot = placement != NULL
                                  ? swt_model_slot_of(md->cpu, l) : NULL;
            for (int e = 0; e < E; e++) {
                int where = slot != NULL ? slot[e] : e;
                rec[R_ROWS] += (double)sent[e];
                if (node_of[where / n_local] != node_of[ep_rank])
                    rec[R_CROSS] += (double)sent[e];
            }
        }
        for (int t = 0; t < SWT_T_COUNT; t++)
            rec[R_TIMERS + t] = tm.acc[t];
        if (counts)
            for (int l = 0; l < L; l++) {
                const int64_t *rows = md->ops->layer_chosen(md->model, l);
                for (int e = 0; e < E; e++)
                    rec[R_LEN + (size_t)l * E + e] = (double)rows[e];
            }
        /* Outside the timed step: loss and timers, summed over ranks. */
        st = swy_allreduce(rec, rec, rec_len, SWY_FLOAT64, SWY_SUM, comm,
                           NULL, NULL);
        if (st != SWY_OK) {
            fprintf(stderr, "swy-train: rank %d: allreduce of the step "
                    "record: %s\n", rank, swy_last_error(comm));
            goto out;
        }
        double *h = hist + (size_t)(step - 1) * R_LEN;
        for (int i = 0; i < R_LEN; i++)
            h[i] = i == R_DROPPED || i == R_ROWS || i == R_CROSS
                       ? rec[i] : rec[i] / W;
        if (placement != NULL) {
            if (swt_placement_observe(placement, step, rec + R_LEN) != 0)
                goto out;
            for (int l = 0; l < L; l++)
                memcpy(slot_cur + (size_t)l * E, swt_model_slot_of(md->cpu, l),
                       (size_t)E * sizeof(int));
            int planned = swt_placement_plan(placement, step, slot_cur,
                                             shadow_plan, slot_plan);
            if (planned < 0)
                goto out;
            if (planned && (check_same_plan(comm, shadow_plan, L, E,
                                            plan_check) != 0 ||
                            check_same_plan(comm, slot_plan, L, E,
                                            plan_check) != 0))
                goto out;
            plan_pending = planned;
        }
        if (rank != 0)
            continue;
        if (loss_f != NULL)
            fprintf(loss_f, "%d,%.9g,%.9g\n", step, h[R_XENT], h[R_AUX]);
        if (trace_f != NULL)
            for (int l = 0; l < L; l++)
                for (int e = 0; e < E; e++)
                    fprintf(trace_f, "%d,%d,%d,%.0f\n", step, l, e,
                            rec[R_LEN + (size_t)l * E + e]);
        if (tracker != NULL && layer_counts != NULL)
            for (int l = 0; l < L; l++) {
                for (int e = 0; e < E; e++)
                    layer_counts[e] =
                        (int64_t)rec[R_LEN + (size_t)l * E + e];
                swy_load_record(tracker, step, l, layer_counts);
            }
        if (step % log_every == 0 || step == 1 || step == steps) {
            double *T = h + R_TIMERS;
            printf("%6d %9.4f %9.4f %10.0f %9.2f %9.2f %9.2f %9.2f\n", step,
                   h[R_XENT], h[R_AUX],
                   (double)S * W / T[SWT_T_STEP], 1e3 * T[SWT_T_STEP],
                   1e3 * T[SWT_T_A2A], 1e3 * T[SWT_T_AR],
                   1e3 * (T[SWT_T_A2A_WAIT] + T[SWT_T_AR_WAIT]));
            fflush(stdout);
        }
    }

    /* --overlap: the last step's dense update is still in flight. */
    if (md->cpu != NULL) {
        swt_timing_t flush_tm = {{0}, 1.0};
        swy_status_t st = swt_model_flush(md->cpu, &flush_tm);
        if (st != SWY_OK) {
            fprintf(stderr, "swy-train: rank %d: last dense update: %s\n",
                    rank, swy_status_string(st));
            goto out;
        }
    }
    /* Data parallelism must have kept the dense replicas identical. */
    uint64_t hash = 0;
    if (md->ops->dense_hash(md->model, &hash) != SWY_OK)
        goto out;
    double hv[2] = {(double)(hash >> 12), -(double)(hash >> 12)};
    if (swy_allreduce(hv, hv, 2, SWY_FLOAT64, SWY_MAX, comm, NULL, NULL) !=
        SWY_OK) {
        fprintf(stderr, "swy-train: allreduce: %s\n", swy_last_error(comm));
        goto out;
    }
    int identical = hv[0] == -hv[1];
    /* --ep: the replicas of each expert, across the expert-parallel
     * groups, saw the same summed gradients and must be equal. */
    int experts_identical = 1;
    if (expert_dp != NULL) {
        uint64_t eh = swt_model_expert_hash(md->cpu);
        double ev[2] = {(double)(eh >> 12), -(double)(eh >> 12)};
        if (swy_allreduce(ev, ev, 2, SWY_FLOAT64, SWY_MAX, expert_dp, NULL,
                          NULL) != SWY_OK) {
            fprintf(stderr, "swy-train: allreduce: %s\n",
                    swy_last_error(expert_dp));
            goto out;
        }
        experts_identical = ev[0] == -ev[1];
        hv[0] = experts_identical ? 0.0 : 1.0; /* any rank's verdict */
        if (swy_allreduce(hv, hv, 1, SWY_FLOAT64, SWY_MAX, comm, NULL,
                          NULL) != SWY_OK) {
            fprintf(stderr, "swy-train: allreduce: %s\n",
                    swy_last_error(comm));
            goto out;
        }
        experts_identical = hv[0] == 0.0;
    }
    /* Shadowing must have kept every replica equal to its owner's copy. */
    int shadow_compared = 0, shadow_identical = 1;
    if (placement != NULL) {
        size_t n = (size_t)L * E;
        for (int l = 0; l < L; l++)
            for (int e = 0; e < E; e++) {
                uint64_t x = swt_model_shadow_hash(md->cpu, l, e);
                plan_check[(size_t)l * E + e] = (double)(x >> 12);
                plan_check[n + (size_t)l * E + e] = -(double)(x >> 12);
                shadow_compared += x != 0;
            }
        if (swy_allreduce(plan_check, plan_check, 2 * n, SWY_FLOAT64,
                          SWY_MAX, comm, NULL, NULL) != SWY_OK) {
            fprintf(stderr, "swy-train: allreduce: %s\n",
                    swy_last_error(comm));
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            shadow_identical &= plan_check[i] == -plan_check[n + i];
    }
    rc = 0;
    if (rank == 0) {
        int first = o->warmup, n = steps - first;
        swt_stats_t st[SWT_T_COUNT + 1];
        for (int t = 0; t <= SWT_T_COUNT; t++) {
            for (int i = 0; i < n; i++) {
                const double *T = hist + (size_t)(first + i) * R_LEN +
                                  R_TIMERS;
                col[i] = t == SWT_T_COUNT
                             ? T[SWT_T_A2A_WAIT] + T[SWT_T_AR_WAIT]
                             : T[t];
            }
            st[t] = swt_stats(col, (size_t)n);
        }
        double loss_first = hist[R_XENT];
        double loss_last = hist[(size_t)(steps - 1) * R_LEN + R_XENT];
        double dropped_total = 0;
        for (int i = 0; i < steps; i++)
            dropped_total += hist[(size_t)i * R_LEN + R_DROPPED];
        /* Routing at the end: the last quarter of the steps. */
        double rows_end = 0, cross_end = 0;
        for (int i = steps - (steps + 3) / 4; i < steps; i++) {
            rows_end += hist[(size_t)i * R_LEN + R_ROWS];
            cross_end += hist[(size_t)i * R_LEN + R_CROSS];
        }
        double cross_pct = rows_end > 0 ? 100.0 * cross_end / rows_end : 0;
        /* What every gate figure reports beside its speed: the slots it
         * dropped (rows never sent, expert work never done) and the bytes
         * it moved across nodes, over the whole run. A dispatched row
         * crosses four times: dispatch and combine, forward and backward. */
        double slots_total = (double)steps * W * S * m->top_k * L;
        double dropped_pct = slots_total > 0
                                 ? 100.0 * dropped_total / slots_total
                                 : 0.0;
        double cross_total = 0;
        for (int i = 0; i < steps; i++)
            cross_total += hist[(size_t)i * R_LEN + R_CROSS];
        double cross_bytes = 4.0 * cross_total * m->hidden *
                             (m->bf16 ? 2.0 : 4.0);
        double tps = (double)S * W / st[SWT_T_STEP].median;
        printf("\n# summary (timings: median [min, max] over steps %d..%d, "
               "mean over ranks)\n", first + 1, steps);
        printf("%-22s %d\n", "ranks", W);
        printf("%-22s %s\n", "device", o->device_desc);
        printf("%-22s %s\n", "dtype", m->bf16 ? "bf16" : "fp32");
        if (md->ops->print_summary != NULL)
            md->ops->print_summary(md->model);
        printf("%-22s %s\n", "policy", policy);
        printf("%-22s %s\n", "partition bytes", partition);
        printf("%-22s %d\n", "steps", steps);
        printf("%-22s %.4f / %.4f / %.4f\n", "loss first/last/floor",
               loss_first, loss_last, floor_nats);
        static const struct {
            const char *label;
            int t;
        } rows[] = {{"step ms", SWT_T_STEP},
                    {"a2a ms", SWT_T_A2A},
                    {"allreduce ms", SWT_T_AR},
                    {"exposed comm ms", SWT_T_COUNT},
                    {"  a2a wait ms", SWT_T_A2A_WAIT},
                    {"  allreduce wait ms", SWT_T_AR_WAIT},
                    {"expert compute ms", SWT_T_EXPERT},
                    {"moe segment ms", SWT_T_MOE_SEG},
                    {"compute ms", SWT_T_COMPUTE}};
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            swt_stats_t s = st[rows[i].t];
            printf("%-22s %.2f [%.2f, %.2f]\n", rows[i].label,
                   1e3 * s.median, 1e3 * s.min, 1e3 * s.max);
        }
        printf("%-22s %.0f\n", "tokens/s", tps);
        printf("%-22s %.0f of %.0f (%.2f%%)\n", "slots dropped",
               dropped_total, slots_total, dropped_pct);
        printf("%-22s %.0f (%.3g MB)\n", "bytes across nodes", cross_bytes,
               cross_bytes / 1e6);
        printf("%-22s %.1f (last quarter of the steps)\n",
               "cross-node rows %", cross_pct);
        if (expert_dp != NULL)
            printf("%-22s %s\n", "expert replicas",
                   experts_identical ? "identical" : "DIFFER");
        printf("%-22s %s\n", "dense replicas", identical ? "identical"
                                                         : "DIFFER");
        double shadowed_mean = steps > 0 && L > 0
                                   ? shadowed_sum / ((double)steps * L)
                                   : 0.0;
        printf("%-22s %s", "placement", swt_placement_name(o->placement));
        if (placement != NULL)
            printf(" (every %d steps, %d plans; broadcasts and moves "
                   "%.1f ms in all)", o->placement_every,
                   swt_placement_num_plans(placement), 1e3 * apply_s);
        printf("\n");
        if (placement != NULL) {
            printf("%-22s %.2f per layer (of %d; mean over steps)\n",
                   "experts shadowed (mean)", shadowed_mean, E);
            printf("%-22s %s (%d shadowed at the end)\n",
                   "shadow replicas", shadow_identical ? "identical"
                                                       : "DIFFER",
                   shadow_compared);
            printf("%-22s %d (%.1f per 100 steps; %d more not worth "
                   "their bytes)\n", "experts moved (total)", moved_total,
                   steps > 0 ? 100.0 * moved_total / steps : 0.0,
                   swt_placement_kept_back(placement));
            print_packing(placement, L, E, moved_total);
        }
        if (o->compute_scale > 1.0)
            printf("%-22s %.3g (emulated by sleeping)\n", "compute scale",
                   o->compute_scale);
        if (tracker != NULL)
            print_load_spread(tracker, L, E);
        if (o->json) {
            printf("{\"bench\":\"train\",\"commit\":\"%s\",\"ranks\":%d,"
                   "\"steps\":%d,\"device\":\"%s\",\"dtype\":\"%s\","
                   "\"policy\":\"%s\","
                   "\"partition_bytes\":%s,\"pipeline\":%d,\"overlap\":%d,"
                   "\"packing\":%d,\"layers\":%d,\"hidden\":%d,\"ffn\":%d,"
                   "\"dense_ffn\":%d,"
                   "\"experts\":%d,\"top_k\":%d,\"tokens_per_rank\":%d,"
                   "\"bucket_bytes\":%zu,\"compute_scale\":%g,"
                   "\"loss_first\":%.6f,\"loss_last\":%.6f,"
                   "\"loss_floor\":%.6f,\"ep\":%d,\"blas\":\"%s\",",
                   SWT_GIT_COMMIT, W, steps,
                   o->device_desc, m->bf16 ? "bf16" : "fp32", policy,
                   partition,
                   m->pipeline, m->overlap, m->packing, m->layers, m->hidden,
                   m->ffn, m->dense_ffn, E,
                   m->top_k, m->tokens, m->bucket_bytes, o->compute_scale,
                   loss_first, loss_last, floor_nats, Wep, swy_k_blas_core());
            static const char *const keys[SWT_T_COUNT + 1] = {
                "step_ms", "a2a_ms", "a2a_wait_ms", "allreduce_ms",
                "allreduce_wait_ms", "expert_ms", "moe_segment_ms",
                "compute_ms", "slept_ms", "exposed_comm_ms"};
            for (int t = 0; t <= SWT_T_COUNT; t++)
                printf("\"%s_median\":%.4f,\"%s_min\":%.4f,\"%s_max\":%.4f,",
                       keys[t], 1e3 * st[t].median, keys[t],
                       1e3 * st[t].min, keys[t], 1e3 * st[t].max);
            printf("\"tokens_per_s\":%.1f,\"dropped\":%.0f,"
                   "\"slots\":%.0f,\"dropped_pct\":%.4f,"
                   "\"cross_node_bytes\":%.0f,\"gate\":\"%s\","
                   "\"ta_capacity\":\"%s\","
                   "\"cross_node_pct\":%.2f,\"dense_identical\":%s,"
                   "\"experts_identical\":%s,"
                   "\"skew\":%g,\"placement\":\"%s\","
                   "\"shadowed_mean\":%.4f,\"shadow_identical\":%s,"
                   "\"moved_total\":%d,\"moves_per_100_steps\":%.2f,"
                   "\"moves_kept_back\":%d}\n",
                   tps, dropped_total, slots_total, dropped_pct,
                   cross_bytes,
                   m->gate == SWT_GATE_TA     ? "ta"
                   : m->gate == SWT_GATE_TOPO ? "topo"
                                              : "gshard",
                   ta_capacity_name(m), cross_pct,
                   identical ? "true" : "false",
                   experts_identical ? "true" : "false", o->skew,
                   swt_placement_name(o->placement), shadowed_mean,
                   shadow_identical ? "true" : "false", moved_total,
                   steps > 0 ? 100.0 * moved_total / steps : 0.0,
                   placement != NULL ? swt_placement_kept_back(placement)
                                     : 0);
        }
        fflush(stdout);
    }
out:
    swt_placement_destroy(placement);
    free(plan_check);
    free(slot_plan);
    free(slot_cur);
    free(shadow_plan);
    swy_load_tracker_destroy(tracker);
    free(layer_counts);
    if (trace_f != NULL)
        fclose(trace_f);
    if (loss_f != NULL)
        fclose(loss_f);
    free(col);
    free(hist);
    free(rec);
    free(labels);
    free(node_of);
    free(ids);
    swt_trainer_destroy(md);
    swt_task_fini(&task);
    return rc;
}

#ifdef SWT_HAVE_CUDA
/* This process's rank among those of its host, from the launcher, before
 * the communicator exists: swy-run's, Open MPI's, torchrun's, Slurm's; else
 * the global rank (one rank per host); else 0. */
static int local_rank_from_env(void)
{
    static const char *const names[] = {
        "SWY_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK",
        "SLURM_LOCALID", "SWY_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID", NULL};
    for (int i = 0; names[i] != NULL; i++) {
        const char *v = getenv(names[i]);
        char *end;
        if (v == NULL || v[0] == '\0')
            continue;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno == 0 && *end == '\0' && r >= 0 && r <= 1 << 20)
            return (int)r;
    }
    return 0;
}
#endif

/* --device cuda: check what the GPU path supports and pick this rank's
 * GPU, before swy_comm_init_env (whatever the communicator sets up on a
 * device must be on this one). Returns 0, or the exit status. */
static int select_gpu(options_t *o)
{
#ifdef SWT_HAVE_CUDA
    if (o->model.overlap) {
        fprintf(stderr, "swy-train: --device cuda: --overlap 1 is not "
                "implemented on the GPU path (use --overlap 0)\n");
        return 2;
    }
    if (o->model.dense_ffn != o->model.ffn) {
        fprintf(stderr, "swy-train: --device cuda: --dense-ffn other than "
                "--ffn is not implemented on the GPU path\n");
        return 2;
    }
    int dev = -1;
    char name[128], why[256];
    int rc = swt_cuda_device_select(local_rank_from_env(), &dev, name,
                                    sizeof(name), why, sizeof(why));
    if (rc == -1) {
        fprintf(stderr, "swy-train: --device cuda: no CUDA device (%s)\n",
                why);
        return 2;
    }
    if (rc != 0) {
        fprintf(stderr, "swy-train: --device cuda: cannot use the GPU "
                "(%s)\n", why);
        return 1;
    }
    /* The name goes into the JSON line: keep it a plain string. */
    for (char *c = name; *c != '\0'; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = '_';
    snprintf(o->device_desc, sizeof(o->device_desc), "cuda (%s)", name);
    return 0;
#else
    (void)o;
    fprintf(stderr, "swy-train: --device cuda: this swy-train is built "
            "without the CUDA kernels (no CUDA toolkit or no "
            "swy_kernels_cuda at configure time); use --device cpu\n");
    return 2;
#endif
}

int main(int argc, char **argv)
{
    options_t o = {
        .model = {.layers = 2, .hidden = 128, .ffn = 256, .vocab = 256,
                  .experts_per_rank = 2, .packing = 1, .top_k = 2,
                  .pipeline = 1, .tokens = 512, .gate_group = 0,
                  .capacity_factor = 1.25, .aux_coef = 0.01, .lr = 3e-3,
                  .seed = 1, .bucket_bytes = 256 << 10, .phase_hints = 1,
                  .topo_cross_frac = 0.14, .overlap = -1},
        .steps = 300, .noise = 0.1, .device = "cpu", .compute_scale = 1.0,
        .threads = 1, .warmup = 3, .placement_every = 10,
        .placement_horizon = -1,
        .placement_bw = 1.25e8, .placement_flops = 2e10,
        .placement_max_shadow = 4};
    int p = parse_args(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    if (o.model.dense_ffn == 0)
        o.model.dense_ffn = o.model.ffn;
    /* What a user should get: ByteScheduler's overlap where it exists
     * (the CPU path; bit-identical, tests/multiproc/train). */
    if (o.model.overlap < 0)
        o.model.overlap = strcmp(o.device, "cuda") != 0;
    snprintf(o.device_desc, sizeof(o.device_desc), "cpu");
    if (o.model.bf16 && strcmp(o.device, "cuda") != 0) {
        fprintf(stderr, "swy-train: --dtype bf16 runs on the GPU path only "
                "(--device cuda); the CPU kernels compute in fp32\n");
        return 2;
    }
    if (strcmp(o.device, "cuda") == 0 && o.model.gate != SWT_GATE_GSHARD) {
        fprintf(stderr, "swy-train: --gate ta and --gate topo run on the "
                "CPU path only (--device cpu); the GPU gate is GShard's\n");
        return 2;
    }
    if (o.ep > 0 && (strcmp(o.device, "cuda") == 0 ||
                     o.placement != SWT_PLACE_NONE)) {
        fprintf(stderr, "swy-train: --ep runs on the CPU path without "
                "--placement (shadowed experts are not replicated across "
                "expert-parallel groups yet)\n");
        return 2;
    }
    if (strcmp(o.device, "cuda") == 0 && o.placement != SWT_PLACE_NONE) {
        fprintf(stderr, "swy-train: --placement %s runs on the CPU path "
                "only (--device cpu); the GPU model has no shadowing\n",
                swt_placement_name(o.placement));
        return 2;
    }
    if (strcmp(o.device, "cuda") == 0) {
        int rc = select_gpu(&o);
        if (rc != 0)
            return rc;
    }
    /* Every model operation goes through this table (select_gpu refused a
     * device that this build has none for). */
    o.ops = swt_trainer_ops_find(o.device);
    swy_k_blas_set_threads(o.threads);

    swy_comm_t comm = NULL;
    swy_status_t st = swy_comm_init_env(&comm);
    if (st != SWY_OK) {
        fprintf(stderr, "swy-train: swy_comm_init_env: %s: %s\n(start "
                "swy-train with a launcher, e.g. swy-run -n 4 swy-train)\n",
                swy_status_string(st), swy_last_error(NULL));
        /* No or bad launcher variables (SWY_RANK, ...) are bad input,
         * like a bad flag; anything else failed while starting. */
        return st == SWY_ERR_INVALID_ARG ? 2 : 1;
    }
    /* --ep: the expert-parallel group takes every (W/N)-th rank (so it
     * spans the nodes); the ranks with the same place in their groups
     * hold the same experts and sum their gradients. */
    swy_comm_t ep = comm, expert_dp = NULL;
    int W = swy_comm_size(comm), rank = swy_comm_rank(comm);
    if (o.ep > 0 && W % o.ep != 0) {
        if (rank == 0)
            fprintf(stderr, "swy-train: --ep %d does not divide the %d "
                    "ranks\n", o.ep, W);
        swy_comm_destroy(comm);
        return 2;
    }
    int groups = o.ep > 0 ? W / o.ep : 1;
    if (o.ep > 0) {
        st = swy_comm_split(comm, rank % groups, rank, &ep);
        if (st == SWY_OK && groups > 1)
            st = swy_comm_split(comm, rank / groups, rank, &expert_dp);
        if (st != SWY_OK) {
            fprintf(stderr, "swy-train: swy_comm_split: %s: %s\n",
                    swy_status_string(st), swy_last_error(comm));
            swy_comm_abort(comm);
            return 1;
        }
    }
    int rc = run(&o, argc, argv, comm, ep, expert_dp);
    if (rc == 1) {
        if (expert_dp != NULL)
            swy_comm_abort(expert_dp);
        if (ep != comm)
            swy_comm_abort(ep);
        swy_comm_abort(comm);
        return 1;
    }
    if (expert_dp != NULL)
        st = swy_comm_destroy(expert_dp);
    if (st == SWY_OK && ep != comm)
        st = swy_comm_destroy(ep);
    if (st != SWY_OK && rc == 0) {
        fprintf(stderr, "swy-train: swy_comm_destroy: %s\n",
                swy_status_string(st));
        return 1;
    }
    st = swy_comm_destroy(comm);
    if (st != SWY_OK && rc == 0) {
        fprintf(stderr, "swy-train: swy_comm_destroy: %s\n",
                swy_status_string(st));
        return 1;
    }
    return rc;
}
