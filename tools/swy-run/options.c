/* Parsing of swy-run's command line into swy_run_options_t. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
        "all ranks when one fails (one killed by a signal: at once; one that\n"
        "exits with a failure: 0.5 s later, so that the others may end on\n"
        "their own and say why).\n"
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
        "Emulated cluster (root; needs ip and tc from iproute2):\n"
        "      --nodes N           N emulated nodes, 1..%d: each a network\n"
        "                          namespace with its own hostname (nodeI),\n"
        "                          IPC, PID and mount namespace and a private\n"
        "                          /dev/shm; node I has 198.18.0.<I+1>/24 on\n"
        "                          eth0, joined to the others by a bridge\n"
        "      --ranks-per-node M  M ranks in each node (default 1), sharing\n"
        "                          the node's namespaces; global ranks are\n"
        "                          node-major (node I runs I*M..I*M+M-1)\n"
        "      --link RATE         shape each node's uplink, both directions,\n"
        "                          with tc tbf at RATE (tc syntax: 1gbit,\n"
        "                          100mbit, 50mbps, ...); default unshaped\n"
        "  The namespaces are swy-<pid>-nI (node I) and swy-<pid>-br, with\n"
        "  <pid> swy-run's (`ip netns exec swy-<pid>-n0 ...` looks inside).\n"
        "  Everything it creates is removed on exit and on SIGINT, SIGTERM\n"
        "  and SIGHUP (ranks still running --grace seconds after such a\n"
        "  signal are killed); what a run killed outright leaves behind is\n"
        "  removed by the next run.\n"
        "\n"
        "Variables set for each rank:\n"
        "  SWY_RANK         rank, 0..N-1\n"
        "  SWY_WORLD_SIZE   N\n"
        "  SWY_LOCAL_RANK   rank among the ranks of this host (or node)\n"
        "  SWY_LOCAL_WORLD_SIZE  ranks on this host (or node)\n"
        "  SWY_ROOT         127.0.0.1:<free port> where rank 0 listens\n"
        "                   (kept if already set in the environment); with\n"
        "                   --nodes always 198.18.0.1:<random port>\n"
        "  SWY_JOB_KEY      64 random hex characters, the job's secret\n"
        "                   (kept if already set in the environment)\n"
        "  SWY_NODE         with --nodes: the node index, 0..nodes-1\n"
        "  SWY_NNODES       with --nodes: the number of nodes\n"
        "  OPENBLAS_CORETYPE  only where the OpenBLAS the ranks load does\n"
        "                   not know this CPU and would run its SSE\n"
        "                   kernels: the kernels the CPU runs (SkylakeX\n"
        "                   with AVX-512, else Haswell); kept if set\n"
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
        "usage, 77 if --nodes lacks root, ip or tc (a test can skip).\n",
        SWY_RUN_MAX_RANKS, SWY_RUN_DEFAULT_GRACE_S, SWY_RUN_MAX_NODES);
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

bool swy_run_rate_parse(const char *text, double *bits_s_p)
{
    /* tc(8): "bit" or a bare number is bits per second, "bps" bytes per
     * second; k, m, g, t are powers of 1000, ki, mi, gi, ti of 1024. */
    static const struct {
        const char *unit;
        double      bits;
    } units[] = {
        {"", 1},
        {"bit", 1},         {"kbit", 1e3},  {"mbit", 1e6},
        {"gbit", 1e9},      {"tbit", 1e12}, {"kibit", 1024.0},
        {"mibit", 1048576.0}, {"gibit", 1073741824.0},
        {"tibit", 1099511627776.0},
        {"bps", 8},         {"kbps", 8e3},  {"mbps", 8e6},
        {"gbps", 8e9},      {"tbps", 8e12}, {"kibps", 8 * 1024.0},
        {"mibps", 8 * 1048576.0}, {"gibps", 8 * 1073741824.0},
        {"tibps", 8 * 1099511627776.0},
    };
    char  *end;
    double value;

    /* No sign, space, "inf" or "nan": strtod would take them. */
    if (!((text[0] >= '0' && text[0] <= '9') || text[0] == '.')) {
        return false;
    }
    errno = 0;
    value = strtod(text, &end);
    if (errno != 0 || end == text || !isfinite(value) || value <= 0) {
        return false;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); ++i) {
        if (strcasecmp(end, units[i].unit) == 0) {
            double bits_s = value * units[i].bits;

            if (bits_s < 1e3 || bits_s > 1e13) {
                return false;
            }
            *bits_s_p = bits_s;
            return true;
        }
    }
    return false;
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
            if (!parse_int("--nodes", optarg, 1, SWY_RUN_MAX_NODES,
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
            if (!swy_run_rate_parse(optarg, &opts.link_bits_s)) {
                usage_error("--link: '%s' is not a rate in 1kbit..10tbit "
                            "(tc syntax, e.g. 1gbit, 100mbit, 50mbps)",
                            optarg);
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
