/* swy-bench: Switchyard's benchmarks, one subcommand each. Subcommands
 * share common.c (timing, statistics, header, table and JSON). */
#include "c2c.h"
#include "coll.h"
#include "interference.h"
#include "model.h"
#include "overhead.h"

#include "switchyard/switchyard.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *help;
    int (*main)(int argc, char **argv);
} subcommand_t;

static const subcommand_t subcommands[] = {
    {"c2c", "a cache line's round trip between two CPUs (no launcher)",
     swyb_c2c_main},
    {"coll", "alltoallv and allreduce time and bandwidth by size",
     swyb_coll_main},
    {"interference", "all-to-all alone and under an allreduce backlog, "
     "per policy", swyb_interference_main},
    {"model", "measured all-to-all time against the communication model, "
     "per traffic pattern", swyb_model_main},
    {"overhead", "scheduling cost per micro-op; CPU of an idle comm",
     swyb_overhead_main},
};

static void usage_print(FILE *out)
{
    fprintf(out, "Usage: swy-bench SUBCOMMAND [options]\n"
                 "Run under a launcher, e.g. swy-run -n 4 swy-bench coll.\n"
                 "\nSubcommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]);
         ++i) {
        fprintf(out, "  %-14s %s\n", subcommands[i].name,
                subcommands[i].help);
    }
    fprintf(out, "\n'swy-bench SUBCOMMAND --help' describes its options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage_print(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage_print(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("swy-bench (switchyard %s)\n", swy_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]);
         ++i) {
        if (strcmp(argv[1], subcommands[i].name) == 0) {
            return subcommands[i].main(argc, argv);
        }
    }
    fprintf(stderr, "swy-bench: unknown subcommand '%s'\n\n", argv[1]);
    usage_print(stderr);
    return 2;
}
