/* swy-info: what Switchyard sees on this rank.
 *
 *   swy-info            version, topology, transports and their choice per
 *                       link class
 *   swy-info -c         every SWY_* variable: value, default, help
 *   swy-info -c --markdown
 *                       the same as docs/configuration.md (defaults only)
 *   swy-info --peers    (under swy-run / mpirun / srun) create a
 *                       communicator and show, per peer, the link class and
 *                       the transport that carries its traffic */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <switchyard/switchyard.h>

/* A describe text: enough for hundreds of variables or transports. */
#define TEXT_BYTES (256u << 10)

static int show_text(const char *what, const char *title)
{
    char *text = malloc(TEXT_BYTES);
    if (text == NULL) {
        fprintf(stderr, "swy-info: out of memory\n");
        return 1;
    }
    swy_status_t st = swy_describe(what, text, TEXT_BYTES);
    if (title != NULL)
        printf("%s", title);
    if (st != SWY_OK)
        printf("  %s failed: %s\n", what, swy_last_error(NULL));
    else
        printf("%s", text);
    free(text);
    return st == SWY_OK ? 0 : 1;
}

static int show_config(int markdown)
{
    if (markdown)
        return show_text("config-markdown", NULL);
    printf("Switchyard %s configuration variables "
           "(environment > SWY_CONFIG file > default).\n", swy_version());
    return show_text("config", NULL);
}

static int show_local(void)
{
    printf("Switchyard %s\n\nTopology of this rank:\n", swy_version());
    show_text("host", NULL);
    show_text("transports", "\nTransports:\n");
    return 0;
}

static int show_peers(void)
{
    swy_comm_t comm;
    if (swy_comm_init_env(&comm) != SWY_OK) {
        fprintf(stderr, "swy-info: cannot create the communicator: %s\n",
                swy_last_error(NULL));
        return 1;
    }
    int rank = swy_comm_rank(comm), n = swy_comm_size(comm);
    char partition[32] = "?";
    (void)swy_comm_query(comm, "SWY_PARTITION_BYTES", partition,
                         sizeof(partition));
    swy_peer_info_t me = {.struct_size = sizeof(me)};
    int rc = swy_comm_peer_info(comm, rank, &me) != SWY_OK;
    /* One block per rank, in rank order, so the output reads whole. */
    for (int turn = 0; turn < n && rc == 0; turn++) {
        if (turn == rank) {
            printf("rank %d of %d on %s (node %d, NUMA %d), partition %s "
                   "bytes:\n", rank, n, me.hostname, me.node, me.numa,
                   partition);
            for (int p = 0; p < n; p++) {
                swy_peer_info_t info = {.struct_size = sizeof(info)};
                if (swy_comm_peer_info(comm, p, &info) != SWY_OK) {
                    rc = 1;
                    break;
                }
                printf("  peer %-3d %-10s %7.3f GB/s  %-5s %s\n", p,
                       info.link_class, info.bandwidth / 1e9,
                       info.transport[0] ? info.transport : "none",
                       info.path);
            }
            fflush(stdout);
        }
        if (swy_barrier(comm) != SWY_OK)
            break;
    }
    if (rc != 0)
        fprintf(stderr, "swy-info: %s\n", swy_last_error(comm));
    return swy_comm_destroy(comm) == SWY_OK ? rc : 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: swy-info [-c|--config [--markdown]] [--peers] [-h]\n"
                 "  (none)      version, topology, transports\n"
                 "  -c          every SWY_* variable with default and help\n"
                 "  -c --markdown  the same, defaults only, as Markdown "
                 "(docs/configuration.md)\n"
                 "  --peers     per-peer link class and transport (run it "
                 "under swy-run -n N)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", no_argument, 0, 'c'},
                                         {"peers", no_argument, 0, 'p'},
                                         {"markdown", no_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, mode = 0, markdown = 0;
    while ((c = getopt_long(argc, argv, "ch", opts, NULL)) != -1) {
        switch (c) {
        case 'c': mode = 'c'; break;
        case 'p': mode = 'p'; break;
        case 'm': markdown = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (markdown && mode != 'c') {
        fprintf(stderr, "swy-info: --markdown goes with -c\n");
        usage(stderr);
        return 2;
    }
    if (mode == 'c')
        return show_config(markdown);
    if (mode == 'p')
        return show_peers();
    return show_local();
}
