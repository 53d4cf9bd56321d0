/* Parsing of swy-run's command line into swy_run_options_t. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifndef SWY_RUN_VERSION
#define SWY_RUN_VERSION "unknown"
#endif

#define SWY_RUN_DEFAULT_GRACE_S 3.0

enum {
    OPT_TIMEOUT = 256,
    OPT_GRACE,
    OPT_NO_PREFIX,
    OPT_VERSION,
    OPT_NODES,
    OPT_RANKS_PER_NODE,
    OPT_LINK,
};

void swy_run_options_print_usage(FILE *out)
{
    fprintf(out,
        "Usage: swy-run [options] [--] prog [args...]\n"
        "Start ranks of prog on this host, each with the caller's environment\n"
        "plus the variables below; prefix their output with the rank; stop\n"
        "all ranks when one fails.\n"
        "\n"
        "Options:\n"
        "  -n, --np N          number of ranks, 1..%d (default 1)\n"
        "      --timeout S     stop all ranks after S seconds; exit 124\n"
        "      --grace S       seconds between SIGTERM and SIGKILL when\n"
        "                      stopping ranks (default %g)\n"
        "      --no-prefix     do not prefix output lines with \"[rank] \"\n"
        "  -h, --help          show this text and exit\n"
        "      --version       show the version and exit\n"
        "\n"
        "Emulated cluster (not available in this build yet):\n"
        "      --nodes N           emulated nodes (network namespaces)\n"
        "      --ranks-per-node M  ranks in each node\n"
        "      --link RATE         shaped uplink rate of each node, e.g. 1gbit\n"
        "\n"
        "Variables set for each rank:\n"
        "  SWY_RANK         rank, 0..N-1\n"
        "  SWY_WORLD_SIZE   N\n"
        "  SWY_LOCAL_RANK   rank among the ranks of this host\n"
        "  SWY_ROOT         127.0.0.1:<free port> where rank 0 listens\n"
        "                   (kept if already set in the environment)\n"
        "  SWY_JOB_KEY      64 random hex characters, the job's secret\n"
        "                   (kept if already set in the environment)\n"
        "\n"
        "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded\n"
        "to every rank. Each rank runs in its own process group, so a Ctrl-C\n"
        "at the terminal reaches the ranks once, through swy-run. Rank 0\n"
        "reads swy-run's standard input unless it is a terminal; the other\n"
        "ranks read /dev/null.\n"
        "\n"
        "Exit status: 0 when every rank exits 0; otherwise the first failing\n"
        "rank's status (128+signal if it was killed), 124 on --timeout,\n"
        "127 if prog cannot be run, 125 if swy-run itself fails, 2 on bad\n"
        "usage.\n",
        SWY_RUN_MAX_RANKS, SWY_RUN_DEFAULT_GRACE_S);
}

static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("swy-run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'swy-run --help' for more information.\n", stderr);
}

/* Whole-string decimal integer in [min, max]. */
static bool parse_int(const char *option, const char *text, int min, int max,
                      int *value_p)
{
    char *end;
    long  value;

    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min ||
        value > max) {
        usage_error("%s: '%s' is not an integer in %d..%d", option, text, min,
                    max);
        return false;
    }
    *value_p = (int)value;
    return true;
}

/* Non-negative, finite number of seconds; strictly positive if asked. */
static bool parse_seconds(const char *option, const char *text,
                          bool must_be_positive, double *value_p)
{
    char  *end;
    double value;

    errno = 0;
    value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(value) ||
        value < 0 || (must_be_positive && value == 0) ||
        value > (double)INT_MAX) {
        usage_error("%s: '%s' is not a %s number of seconds", option, text,
                    must_be_positive ? "positive" : "non-negative");
        return false;
    }
    *value_p = value;
    return true;
}

swy_run_parse_result_t swy_run_options_parse(int argc, char **argv,
                                             swy_run_options_t *opts_p)
{
    static const struct option long_options[] = {
        {"np", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"grace", required_argument, NULL, OPT_GRACE},
        {"no-prefix", no_argument, NULL, OPT_NO_PREFIX},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"ranks-per-node", required_argument, NULL, OPT_RANKS_PER_NODE},
        {"link", required_argument, NULL, OPT_LINK},
        {NULL, 0, NULL, 0},
    };
    swy_run_options_t opts = {
        .mode    = SWY_RUN_MODE_LOCAL,
        .np      = 0,
        .grace_s = SWY_RUN_DEFAULT_GRACE_S,
        .prefix  = true,
    };
    int c;

    /* '+': stop at the program name so its own options stay its own;
     * ':': report a missing argument as ':' rather than '?'. */
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:n:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!parse_int("-n", optarg, 1, SWY_RUN_MAX_RANKS, &opts.np)) {
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_TIMEOUT:
            if (!parse_seconds("--timeout", optarg, true, &opts.timeout_s)) {
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_GRACE:
            if (!parse_seconds("--grace", optarg, false, &opts.grace_s)) {
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_NO_PREFIX:
            opts.prefix = false;
            break;
        case 'h':
            swy_run_options_print_usage(stdout);
            return SWY_RUN_PARSE_EXIT_OK;
        case OPT_VERSION:
            printf("swy-run (switchyard) %s\n", SWY_RUN_VERSION);
            return SWY_RUN_PARSE_EXIT_OK;
        case OPT_NODES:
            if (!parse_int("--nodes", optarg, 1, SWY_RUN_MAX_RANKS,
                           &opts.nodes)) {
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_RANKS_PER_NODE:
            if (!parse_int("--ranks-per-node", optarg, 1, SWY_RUN_MAX_RANKS,
                           &opts.ranks_per_node)) {
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            break;
        case OPT_LINK:
            if (optarg[0] == '\0') {
                usage_error("--link: empty rate");
                return SWY_RUN_PARSE_EXIT_USAGE;
            }
            opts.link_rate = optarg;
            break;
        case ':':
            usage_error("option '%s' needs an argument", argv[optind - 1]);
            return SWY_RUN_PARSE_EXIT_USAGE;
        default:
            if (optopt != 0) {
                usage_error("unknown option '-%c'", optopt);
            } else {
                usage_error("unknown option '%s'", argv[optind - 1]);
            }
            return SWY_RUN_PARSE_EXIT_USAGE;
        }
    }

    if (optind >= argc) {
        usage_error("no program to run");
        return SWY_RUN_PARSE_EXIT_USAGE;
    }
    opts.prog_argv = &argv[optind];

    if (opts.nodes > 0) {
        int per_node = opts.ranks_per_node > 0 ? opts.ranks_per_node : 1;

        if ((long)opts.nodes * per_node > SWY_RUN_MAX_RANKS) {
            usage_error("--nodes %d x --ranks-per-node %d exceeds %d ranks",
                        opts.nodes, per_node, SWY_RUN_MAX_RANKS);
            return SWY_RUN_PARSE_EXIT_USAGE;
        }
        if (opts.np != 0 && opts.np != opts.nodes * per_node) {
            usage_error("-n %d does not match --nodes %d x --ranks-per-node "
                        "%d", opts.np, opts.nodes, per_node);
            return SWY_RUN_PARSE_EXIT_USAGE;
        }
        opts.mode           = SWY_RUN_MODE_CLUSTER;
        opts.ranks_per_node = per_node;
        opts.np             = opts.nodes * per_node;
    } else {
        if (opts.ranks_per_node > 0 || opts.link_rate != NULL) {
            usage_error("--ranks-per-node and --link need --nodes");
            return SWY_RUN_PARSE_EXIT_USAGE;
        }
        if (opts.np == 0) {
            opts.np = 1;
        }
    }

    *opts_p = opts;
    return SWY_RUN_PARSE_RUN;
}
