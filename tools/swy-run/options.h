/* Command line of swy-run: what to launch and how. The local launcher and
 * the emulated-cluster launcher both start from this struct, so
 * options of either mode are parsed here and nowhere else. */
#ifndef SWY_RUN_OPTIONS_H
#define SWY_RUN_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#define SWY_RUN_MAX_RANKS 4096
/* Node i gets 198.18.0.<i+1>/24. */
#define SWY_RUN_MAX_NODES 254

typedef enum {
    SWY_RUN_MODE_LOCAL,   /* -n N ranks on this host */
    SWY_RUN_MODE_CLUSTER, /* --nodes: emulated cluster in namespaces */
} swy_run_mode_t;

typedef struct {
    swy_run_mode_t mode;
    int            np;           /* total ranks (local: -n; cluster: N*M) */
    double         timeout_s;    /* 0: no timeout */
    double         grace_s;      /* SIGTERM -> SIGKILL delay when stopping */
    bool           prefix;       /* "[r] " before each output line */

    /* Emulated cluster (mode SWY_RUN_MODE_CLUSTER only). */
    int            nodes;
    int            ranks_per_node;
    const char    *link_rate;    /* as given, e.g. "1gbit"; NULL: unshaped */
    double         link_bits_s;  /* link_rate in bits per second; 0: none */

    char         **prog_argv;    /* NULL-terminated, points into argv */
} swy_run_options_t;

/* Result of parsing: run the job, or exit now with the given status
 * (help/version printed: 0; usage error already reported: 2). */
typedef enum {
    SWY_RUN_PARSE_RUN,
    SWY_RUN_PARSE_EXIT_OK,
    SWY_RUN_PARSE_EXIT_USAGE,
} swy_run_parse_result_t;

swy_run_parse_result_t swy_run_options_parse(int argc, char **argv,
                                             swy_run_options_t *opts_p);

void swy_run_options_print_usage(FILE *out);

/* A rate as tc(8) writes it: a number and a unit (bit, kbit, mbit, gbit,
 * tbit, bps, kbps, mbps, gbps, tbps, or the IEC kibit, mibps, ...; no unit
 * means bits per second). False if it is not one or is outside
 * 1kbit..10tbit. */
bool swy_run_rate_parse(const char *text, double *bits_s_p);

#endif
