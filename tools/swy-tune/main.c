/* swy-tune: measure Switchyard's scheduling settings on this cluster with
 * `swy-bench interference` and write the best as a SWY_CONFIG file.
 *
 * First version: a grid search (every policy x partition x credit asked
 * for), optionally followed by one refinement round that measures half and
 * double the best partition. ByteScheduler (SOSP 2019) tunes partition and
 * credit by Bayesian optimization at run time; a grid is the honest start
 * while one benchmark run measures the whole grid at once. */
#include "tune.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_POLICIES "fifo,fair,lina,credit"
#define DEFAULT_PARTITIONS "64K,128K,256K,512K,1M,2M"
#define DEFAULT_CREDITS "auto,2x,4x"

enum {
    EXIT_NO_FEASIBLE = 1,
    EXIT_USAGE = 2,
    EXIT_RUN_FAILED = 3,
};

typedef struct {
    const char *policies;
    const char *partitions;
    const char *credits;
    const char *bench;
    const char *bench_args;
    const char *out_path;
    const char *csv_path;
    const char *svg_path;
    swyt_objective_t objective;
    int refine;
    int verbose;
    int dry_run;
    double timeout_s;
    const char *sim_platform; /* --sim: swy-sim on this platform file */
    char *sim_args;           /* "--platform FILE" + --bench-args */
    char **launcher;
    int nlauncher;
} tune_options_t;

static void usage_print(FILE *out)
{
    fprintf(out,
        "Usage: swy-tune [options] -- LAUNCHER [launcher options]\n"
        "       swy-tune [options] --sim PLATFORM\n"
        "Runs LAUNCHER swy-bench interference --json --policies ... "
        "--partitions ...\n"
        "--credits ... over the grid below, and picks the setting that "
        "minimizes the\n"
        "all-to-all time under a concurrent allreduce backlog while the "
        "allreduce keeps\n"
        ">= 90%% of fair's throughput at the same partition (ties within "
        "2%%: higher\n"
        "allreduce throughput). Example:\n"
        "  swy-tune --out tuned.conf -- swy-run --nodes 2 --ranks-per-node "
        "2 --link 1gbit\n"
        "\nSearch space:\n"
        "  --policies LIST     default " DEFAULT_POLICIES "\n"
        "  --partitions LIST   default " DEFAULT_PARTITIONS "\n"
        "  --credits LIST      auto, N partitions (2x) or a size; default "
        DEFAULT_CREDITS "\n"
        "  --refine            then measure half and double the best "
        "partition (the\n"
        "                      best policy and fair) and choose again\n"
        "  --objective a2a|balanced\n"
        "                      a2a (default): minimize the loaded "
        "all-to-all time;\n"
        "                      balanced: minimize loaded a2a / best a2a "
        "alone +\n"
        "                      best allreduce alone / allreduce under load\n"
        "\nBenchmark:\n"
        "  --bench PATH        swy-bench (default: beside swy-tune, else "
        "on PATH)\n"
        "  --bench-args ARGS   more interference options, split at spaces "
        "(sizes,\n"
        "                      repetitions; see swy-bench interference "
        "--help)\n"
        "  --sim PLATFORM      tune on the cluster a swy-sim platform file "
        "describes:\n"
        "                      runs swy-sim interference (beside swy-tune, "
        "else on\n"
        "                      PATH; --bench names another) instead of a "
        "launcher\n"
        "  --timeout SEC       stop a benchmark run after SEC seconds "
        "(default: none)\n"
        "  --dry-run           print the benchmark command(s) and exit\n"
        "  -v, --verbose       show the benchmark's output\n"
        "\nOutput:\n"
        "  --out FILE          the chosen settings as a SWY_CONFIG file\n"
        "  --csv FILE          the table as CSV\n"
        "  --svg FILE          a plot of a2a time and allreduce throughput "
        "by partition\n"
        "\nExit status: 0 chosen, 1 no feasible candidate, 2 usage, 3 the "
        "benchmark run\nfailed.\n");
}

static int options_parse(int argc, char **argv, tune_options_t *opts)
{
    enum {
        OPT_POLICIES = 256, OPT_PARTITIONS, OPT_CREDITS, OPT_BENCH,
        OPT_BENCH_ARGS, OPT_OUT, OPT_CSV, OPT_SVG, OPT_OBJECTIVE, OPT_REFINE,
        OPT_TIMEOUT, OPT_DRY_RUN, OPT_SIM,
    };
    static const struct option longopts[] = {
        {"policies", required_argument, NULL, OPT_POLICIES},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"credits", required_argument, NULL, OPT_CREDITS},
        {"bench", required_argument, NULL, OPT_BENCH},
        {"bench-args", required_argument, NULL, OPT_BENCH_ARGS},
        {"out", required_argument, NULL, OPT_OUT},
        {"csv", required_argument, NULL, OPT_CSV},
        {"svg", required_argument, NULL, OPT_SVG},
        {"objective", required_argument, NULL, OPT_OBJECTIVE},
        {"refine", no_argument, NULL, OPT_REFINE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"sim", required_argument, NULL, OPT_SIM},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    /* '+': stop at the first non-option, so the launcher's own options
     * after "--" are never taken for ours. */
    while ((c = getopt_long(argc, argv, "+vh", longopts, NULL)) != -1) {
        char *end;

        switch (c) {
        case OPT_POLICIES: opts->policies = optarg; break;
        case OPT_PARTITIONS: opts->partitions = optarg; break;
        case OPT_CREDITS: opts->credits = optarg; break;
        case OPT_BENCH: opts->bench = optarg; break;
        case OPT_BENCH_ARGS: opts->bench_args = optarg; break;
        case OPT_OUT: opts->out_path = optarg; break;
        case OPT_CSV: opts->csv_path = optarg; break;
        case OPT_SVG: opts->svg_path = optarg; break;
        case OPT_REFINE: opts->refine = 1; break;
        case OPT_DRY_RUN: opts->dry_run = 1; break;
        case OPT_SIM: opts->sim_platform = optarg; break;
        case 'v': opts->verbose = 1; break;
        case OPT_OBJECTIVE:
            if (strcmp(optarg, "a2a") == 0) {
                opts->objective = SWYT_OBJECTIVE_A2A;
            } else if (strcmp(optarg, "balanced") == 0) {
                opts->objective = SWYT_OBJECTIVE_BALANCED;
            } else {
                fprintf(stderr, "swy-tune: --objective takes a2a or "
                                "balanced, not '%s'\n", optarg);
                return -1;
            }
            break;
        case OPT_TIMEOUT:
            opts->timeout_s = strtod(optarg, &end);
            if (*end != '\0' || opts->timeout_s <= 0) {
                fprintf(stderr, "swy-tune: --timeout takes seconds > 0, "
                                "not '%s'\n", optarg);
                return -1;
            }
            break;
        case 'h':
            usage_print(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (opts->sim_platform != NULL) {
        /* The simulation needs no launcher: every rank is in swy-sim. */
        if (optind < argc) {
            fprintf(stderr, "swy-tune: --sim takes no launcher ('%s')\n",
                    argv[optind]);
            return -1;
        }
        size_t len = strlen(opts->sim_platform) + 16 +
                     (opts->bench_args ? strlen(opts->bench_args) : 0);
        opts->sim_args = malloc(len);
        if (opts->sim_args == NULL) {
            fprintf(stderr, "swy-tune: out of memory\n");
            return -1;
        }
        snprintf(opts->sim_args, len, "--platform %s%s%s",
                 opts->sim_platform, opts->bench_args ? " " : "",
                 opts->bench_args ? opts->bench_args : "");
        opts->bench_args = opts->sim_args;
        opts->launcher = argv + optind;
        opts->nlauncher = 0;
        return 0;
    }
    if (optind >= argc) {
        fprintf(stderr, "swy-tune: no launcher given after '--' (e.g. -- "
                        "swy-run -n 4)\n");
        return -1;
    }
    opts->launcher = argv + optind;
    opts->nlauncher = argc - optind;
    return 0;
}

/* The command line as one string, for the output header and the config
 * file's comment. */
static char *command_join(int argc, char **argv)
{
    size_t len = 1;
    char *text;

    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 3;
    text = malloc(len);
    if (text == NULL)
        return NULL;
    text[0] = '\0';
    for (int i = 0; i < argc; i++) {
        int quote = argv[i][0] == '\0' || strpbrk(argv[i], " \t") != NULL;

        if (i > 0)
            strcat(text, " ");
        if (quote)
            strcat(text, "'");
        strcat(text, argv[i]);
        if (quote)
            strcat(text, "'");
    }
    return text;
}

static void sizes_join(const uint64_t *sizes, size_t n, char *buf,
                       size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        char text[32];

        swyt_size_format(sizes[i], text, sizeof(text));
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 i ? "," : "", text);
    }
}

/* One benchmark run; fills @p list. @p sweep_policy is NULL for a
 * benchmark that crosses every list itself. Returns 0, or EXIT_RUN_FAILED
 * after reporting why. */
static int bench_run(const tune_options_t *opts, const char *bench,
                     const char *policies, const char *sweep_policy,
                     const char *partitions, const char *credits,
                     swyt_candidate_list_t *list, char *header,
                     size_t header_len)
{
    char *args_copy = opts->bench_args ? strdup(opts->bench_args) : NULL;
    char **argv = calloc((size_t)opts->nlauncher + 16 +
                             (opts->bench_args ? strlen(opts->bench_args)
                                               : 0),
                         sizeof(char *));
    swyt_run_result_t result;
    size_t before = list->count;
    int argc = 0, rc = EXIT_RUN_FAILED;

    if (argv == NULL || (opts->bench_args && args_copy == NULL)) {
        fprintf(stderr, "swy-tune: out of memory\n");
        goto out;
    }
    for (int i = 0; i < opts->nlauncher; i++)
        argv[argc++] = opts->launcher[i];
    argv[argc++] = (char *)bench;
    argv[argc++] = "interference";
    argv[argc++] = "--json";
    argv[argc++] = "--policies";
    argv[argc++] = (char *)policies;
    if (sweep_policy != NULL) {
        argv[argc++] = "--sweep-policy";
        argv[argc++] = (char *)sweep_policy;
    }
    argv[argc++] = "--partitions";
    argv[argc++] = (char *)partitions;
    argv[argc++] = "--credits";
    argv[argc++] = (char *)credits;
    if (args_copy != NULL) {
        char *save = NULL;

        for (char *word = strtok_r(args_copy, " \t", &save); word != NULL;
             word = strtok_r(NULL, " \t", &save))
            argv[argc++] = word;
    }
    argv[argc] = NULL;

    char *command = command_join(argc, argv);
    printf("# run: %s\n", command ? command : argv[0]);
    free(command);
    fflush(stdout);
    if (opts->dry_run) {
        rc = 0;
        goto out;
    }
    if (swyt_run_command(argv, opts->timeout_s, opts->verbose, list,
                         &result) != 0)
        goto out;
    if (header != NULL && header[0] == '\0')
        snprintf(header, header_len, "%s", result.header);
    if (result.exit_status != 0 || result.timed_out) {
        size_t tail_len = strlen(result.stderr_tail);

        fprintf(stderr, "swy-tune: the benchmark run %s with status %d%s\n",
                result.timed_out ? "was stopped (timeout)" : "failed",
                result.exit_status,
                result.exit_status == 127 ? " (command not found)" : "");
        if (tail_len > 0)
            fprintf(stderr, "swy-tune: its stderr ended with:\n%s%s",
                    result.stderr_tail,
                    result.stderr_tail[tail_len - 1] == '\n' ? "" : "\n");
        goto out;
    }
    if (list->count == before && strcmp(partitions, "none") != 0) {
        fprintf(stderr, "swy-tune: the benchmark printed no new "
                        "interference result (%zu malformed lines); is "
                        "this swy-bench built with the interference "
                        "subcommand?\n", result.rejected);
        if (result.stderr_tail[0] != '\0')
            fprintf(stderr, "swy-tune: its stderr ended with:\n%s\n",
                    result.stderr_tail);
        goto out;
    }
    printf("# got %zu new results", list->count - before);
    if (result.rejected)
        printf(", %zu malformed lines skipped", result.rejected);
    printf("\n");
    rc = 0;
out:
    free(argv);
    free(args_copy);
    return rc;
}

/* Whether the benchmark crosses the lists itself or sweeps partitions
 * under one policy (--sweep-policy) and credits at the automatic
 * partition, as swy-bench interference does. */
typedef enum { BENCH_CROSSES, BENCH_SWEEPS } bench_mode_t;

typedef struct {
    const tune_options_t *opts;
    const char *bench;
    const swyt_space_t *space;
    bench_mode_t mode;
    swyt_candidate_list_t *list;
    char *header;
    size_t header_len;
} tune_ctx_t;

/* fifo and fair ignore the credit (the benchmark measures them once). */
static int policy_prioritized(const char *policy)
{
    return strcmp(policy, "fifo") != 0 && strcmp(policy, "fair") != 0;
}

/* Crossing benchmark: one run for the whole grid, or one per partition
 * when credits are relative to the partition (the benchmark takes
 * absolute credits and crosses every credit with every partition). */
static int crossed_run(tune_ctx_t *t, const char *policies,
                       const uint64_t *partitions, size_t npartitions)
{
    size_t step = swyt_space_has_relative_credit(t->space) ? 1 : npartitions;

    for (size_t i = 0; i < npartitions; i += step) {
        char parts[1024], credits[4096];
        int rc;

        sizes_join(&partitions[i], step, parts, sizeof(parts));
        if (swyt_credits_resolve(t->space, &partitions[i], step, credits,
                                 sizeof(credits)) != 0) {
            fprintf(stderr, "swy-tune: too many credits\n");
            return EXIT_RUN_FAILED;
        }
        rc = bench_run(t->opts, t->bench, policies, NULL, parts, credits,
                       t->list, t->header, t->header_len);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Sweeping benchmark: per policy, its partition sweep (credit auto) and
 * its credits at the automatic partition; then the credits relative to
 * the partition ("2x") at the automatic partition, which the first runs
 * revealed. */
static int swept_run(tune_ctx_t *t, char **policies, size_t npolicies,
                     const uint64_t *partitions, size_t npartitions,
                     int with_credits)
{
    const swyt_space_t *space = t->space;
    char parts[1024], credits[1024] = "", prioritized[512] = "";
    const char *first_prioritized = NULL;
    uint64_t auto_partition = 0;

    if (npartitions > 0)
        sizes_join(partitions, npartitions, parts, sizeof(parts));
    else
        snprintf(parts, sizeof(parts), "none");
    for (size_t c = 0; with_credits && c < space->ncredits; c++) {
        char text[32] = "auto";

        if (space->credits[c].kind == SWYT_CREDIT_PARTITIONS)
            continue;
        if (space->credits[c].kind == SWYT_CREDIT_BYTES)
            swyt_size_format(space->credits[c].value, text, sizeof(text));
        snprintf(credits + strlen(credits), sizeof(credits) - strlen(credits),
                 "%s%s", credits[0] ? "," : "", text);
    }
    if (credits[0] == '\0')
        snprintf(credits, sizeof(credits), "auto");
    for (size_t p = 0; p < npolicies; p++) {
        int rc = bench_run(t->opts, t->bench, policies[p], policies[p], parts,
                           policy_prioritized(policies[p]) ? credits : "auto",
                           t->list, t->header, t->header_len);

        if (rc != 0)
            return rc;
        if (policy_prioritized(policies[p])) {
            snprintf(prioritized + strlen(prioritized),
                     sizeof(prioritized) - strlen(prioritized), "%s%s",
                     prioritized[0] ? "," : "", policies[p]);
            if (first_prioritized == NULL)
                first_prioritized = policies[p];
        }
    }
    if (!with_credits || !swyt_space_has_relative_credit(space) ||
        first_prioritized == NULL)
        return 0;
    for (size_t i = 0; i < t->list->count; i++) {
        if (strcmp(t->list->items[i].sweep, "policies") == 0)
            auto_partition = t->list->items[i].partition_bytes;
    }
    if (auto_partition == 0) {
        if (t->opts->dry_run) {
            printf("# (then the credits relative to the partition, at the "
                   "automatic partition the runs above report)\n");
            return 0;
        }
        fprintf(stderr, "swy-tune: warning: no result at the automatic "
                        "partition; credits such as 2x not measured\n");
        return 0;
    }
    credits[0] = '\0';
    for (size_t c = 0; c < space->ncredits; c++) {
        char text[32];

        if (space->credits[c].kind != SWYT_CREDIT_PARTITIONS)
            continue;
        swyt_size_format(space->credits[c].value * auto_partition, text,
                         sizeof(text));
        snprintf(credits + strlen(credits), sizeof(credits) - strlen(credits),
                 "%s%s", credits[0] ? "," : "", text);
    }
    swyt_size_format(auto_partition, parts, sizeof(parts));
    printf("# credits relative to the automatic partition (%s): %s\n", parts,
           credits);
    return bench_run(t->opts, t->bench, prioritized, first_prioritized, "none",
                     credits, t->list, t->header, t->header_len);
}

static int grid_run(tune_ctx_t *t)
{
    const swyt_space_t *space = t->space;

    if (t->mode == BENCH_SWEEPS)
        return swept_run(t, space->policies, space->npolicies,
                         space->partitions, space->npartitions, 1);
    char policies[512] = "";
    for (size_t i = 0; i < space->npolicies; i++)
        snprintf(policies + strlen(policies),
                 sizeof(policies) - strlen(policies), "%s%s", i ? "," : "",
                 space->policies[i]);
    return crossed_run(t, policies, space->partitions, space->npartitions);
}

/* Half and double the best partition, for the best policy and fair (the
 * allreduce floor at a new partition is relative to fair there). */
static int refine_run(tune_ctx_t *t, const swyt_candidate_t *best,
                      char *search, size_t search_len)
{
    const swyt_space_t *space = t->space;
    uint64_t partitions[2];
    size_t n = 0, npolicies = 0;
    char *policies[2];
    char policies_text[80], text[128];
    int has_fair = 0;

    for (size_t i = 0; i < space->npolicies; i++)
        has_fair |= strcmp(space->policies[i], "fair") == 0;
    policies[npolicies++] = (char *)best->policy;
    if (has_fair && strcmp(best->policy, "fair") != 0)
        policies[npolicies++] = "fair";
    snprintf(policies_text, sizeof(policies_text), "%s%s%s", policies[0],
             npolicies > 1 ? "," : "", npolicies > 1 ? policies[1] : "");
    uint64_t around[2] = {best->partition_bytes / 2,
                          best->partition_bytes * 2};
    for (int k = 0; k < 2; k++) {
        int measured = 0;

        for (size_t i = 0; i < space->npartitions; i++)
            measured |= space->partitions[i] == around[k];
        if (!measured && around[k] >= 4096 && around[k] <= (1ull << 30))
            partitions[n++] = around[k];
    }
    if (n == 0) {
        snprintf(search + strlen(search), search_len - strlen(search),
                 "; no refinement: half and double the best partition "
                 "were in the grid");
        return 0;
    }
    sizes_join(partitions, n, text, sizeof(text));
    snprintf(search + strlen(search), search_len - strlen(search),
             "; then one refinement round: %s at %s", policies_text, text);
    printf("# refinement round around the best partition: %s at %s\n",
           policies_text, text);
    if (t->mode == BENCH_SWEEPS)
        return swept_run(t, policies, npolicies, partitions, n, 0);
    return crossed_run(t, policies_text, partitions, n);
}

int main(int argc, char **argv)
{
    tune_options_t opts = {
        .policies = DEFAULT_POLICIES,
        .partitions = DEFAULT_PARTITIONS,
        .credits = DEFAULT_CREDITS,
        .objective = SWYT_OBJECTIVE_A2A,
    };
    swyt_space_t space;
    swyt_candidate_list_t list = {0};
    char why[256], bench[4096], search[1024], header[2048] = "";
    char partitions_text[512], policies_text[512] = "";
    char *command = NULL;
    size_t winner = 0;
    int have_winner = 0, rc;

    if (options_parse(argc, argv, &opts) != 0) {
        fprintf(stderr, "Try 'swy-tune --help'.\n");
        return EXIT_USAGE;
    }
    if (swyt_space_parse(opts.policies, opts.partitions, opts.credits, &space,
                         why, sizeof(why)) != 0) {
        fprintf(stderr, "swy-tune: %s\n", why);
        return EXIT_USAGE;
    }
    if (opts.bench != NULL)
        snprintf(bench, sizeof(bench), "%s", opts.bench);
    else if (opts.sim_platform != NULL)
        swyt_sim_path_find(bench, sizeof(bench));
    else
        swyt_bench_path_find(bench, sizeof(bench));
    for (size_t i = 0; i < space.npolicies; i++)
        snprintf(policies_text + strlen(policies_text),
                 sizeof(policies_text) - strlen(policies_text), "%s%s",
                 i ? "," : "", space.policies[i]);
    sizes_join(space.partitions, space.npartitions, partitions_text,
               sizeof(partitions_text));
    char *help = malloc(16384);
    if (help == NULL || swyt_bench_help_read(bench, help, 16384) != 0) {
        fprintf(stderr, "swy-tune: '%s interference --help' failed: is "
                        "this swy-bench built with the interference "
                        "benchmark? (--bench PATH names another)\n", bench);
        free(help);
        swyt_space_destroy(&space);
        return EXIT_RUN_FAILED;
    }
    tune_ctx_t t = {
        .opts = &opts,
        .bench = bench,
        .space = &space,
        .mode = strstr(help, "--sweep-policy") ? BENCH_SWEEPS : BENCH_CROSSES,
        .list = &list,
        .header = header,
        .header_len = sizeof(header),
    };
    free(help);
    if (t.mode == BENCH_SWEEPS)
        snprintf(search, sizeof(search),
                 "grid search, one axis at a time as swy-bench interference "
                 "sweeps: each policy of %s over partitions %s (credit auto "
                 "= one partition) and over credits %s at the automatic "
                 "partition",
                 policies_text, partitions_text, opts.credits);
    else
        snprintf(search, sizeof(search),
                 "grid search over %zu candidates: policies %s x partitions "
                 "%s x credits %s",
                 swyt_space_size(&space), policies_text, partitions_text,
                 opts.credits);
    command = command_join(argc, argv);
    printf("# swy-tune: %s\n", command ? command : "swy-tune");
    printf("# benchmark: %s\n", bench);
    printf("# search: %s%s\n", search,
           opts.refine ? "; then one refinement round around the best "
                         "partition" : "");
    printf("# objective: %s\n", swyt_objective_describe(opts.objective));

    rc = grid_run(&t);
    if (rc != 0 || opts.dry_run)
        goto out;
    have_winner = swyt_select(&list, opts.objective, &winner) == 0;
    if (opts.refine && have_winner) {
        swyt_candidate_t best = list.items[winner];

        rc = refine_run(&t, &best, search, sizeof(search));
        if (rc != 0)
            goto out;
        have_winner = swyt_select(&list, opts.objective, &winner) == 0;
    }
    printf("# %zu candidates measured\n", list.count);

    if (header[0] != '\0')
        printf("# benchmark header:\n%s", header);
    printf("\n");
    swyt_report_table_print(stdout, &list, have_winner ? (long)winner : -1);
    printf("\n");
    if (opts.csv_path != NULL &&
        swyt_report_csv_write(opts.csv_path, &list,
                              have_winner ? (long)winner : -1) != 0) {
        fprintf(stderr, "swy-tune: cannot write %s\n", opts.csv_path);
        rc = EXIT_RUN_FAILED;
    }
    if (opts.svg_path != NULL && list.count > 0) {
        char title[256];
        const swyt_candidate_t *any = &list.items[0];

        snprintf(title, sizeof(title),
                 "swy-tune: %d ranks on %d nodes, all-to-all %llu KiB "
                 "under a %llu KiB allreduce backlog",
                 any->ranks, any->nodes,
                 (unsigned long long)any->a2a_bytes / 1024,
                 (unsigned long long)any->allreduce_bytes / 1024);
        if (swyt_report_svg_write(opts.svg_path, &list,
                                  have_winner ? (long)winner : -1,
                                  title) != 0) {
            fprintf(stderr, "swy-tune: cannot write %s\n", opts.svg_path);
            rc = EXIT_RUN_FAILED;
        }
    }
    if (!have_winner) {
        fprintf(stderr, "swy-tune: no feasible candidate: every setting "
                        "leaves the allreduce below 90%% of its reference; "
                        "nothing written to %s\n",
                opts.out_path ? opts.out_path : "a config file");
        if (rc == 0)
            rc = EXIT_NO_FEASIBLE;
        goto out;
    }
    const swyt_candidate_t *w = &list.items[winner];
    char part[32], credit[32];
    swyt_size_format(w->partition_bytes, part, sizeof(part));
    if (w->credit_bytes == 0)
        snprintf(credit, sizeof(credit), "auto");
    else
        swyt_size_format(w->credit_bytes, credit, sizeof(credit));
    printf("chosen: SWY_POLICY=%s SWY_PARTITION_BYTES=%s SWY_CREDIT_BYTES=%s"
           " (a2a loaded %.2f ms, slowdown %.3f, allreduce %.1f MB/s >= "
           "floor %.1f)\n",
           w->policy, part, credit, w->a2a_loaded_ms, w->slowdown,
           w->allreduce_MBps, SWYT_ALLREDUCE_FLOOR * w->reference_MBps);
    if (opts.out_path != NULL) {
        if (swyt_conf_write(opts.out_path, w, command ? command : "",
                            search, opts.objective) != 0) {
            fprintf(stderr, "swy-tune: cannot write %s\n", opts.out_path);
            rc = EXIT_RUN_FAILED;
        } else {
            printf("wrote %s (load it with SWY_CONFIG=%s)\n", opts.out_path,
                   opts.out_path);
        }
    }
out:
    free(command);
    free(opts.sim_args);
    swyt_candidate_list_clear(&list);
    swyt_space_destroy(&space);
    return rc;
}
