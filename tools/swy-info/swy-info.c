/* swy-info: what Switchyard sees on this rank.
 *
 *   swy-info            version, topology, transports and their choice per
 *                       link class
 *   swy-info -c         every SWY_* variable: value, default, help
 *   swy-info --peers    (under swy-run / mpirun / srun) create a
 *                       communicator and show, per peer, the link class and
 *                       the transport that carries its traffic */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "api/comm_impl.h"
#include "switchyard/switchyard.h"
#include "topo/topo.h"
#include "transport/transport.h"
#include "util/config.h"

static void print_var(const swy_config_entry_t *e, const char *value,
                      void *arg)
{
    (void)arg;
    char range[64] = "";
    if (e->type == SWY_CONFIG_INT || e->type == SWY_CONFIG_SIZE)
        snprintf(range, sizeof(range), " %.0f..%.0f", e->min, e->max);
    else if (e->type == SWY_CONFIG_DOUBLE)
        snprintf(range, sizeof(range), " %g..%g", e->min, e->max);
    printf("%-22s = %-10s (default: %s; %s%s)\n    %s\n", e->name,
           value ? value : "(unset)",
           e->default_value ? e->default_value : "unset",
           swy_config_type_name(e->type), range, e->help);
}

static int show_config(void)
{
    printf("Switchyard %s configuration variables "
           "(environment > SWY_CONFIG file > default).\n%s\n\n",
           swy_version(), SWY_CONFIG_RULE);
    swy_config_foreach(print_var, NULL);
    return 0;
}

static void show_transports(void)
{
    swy_transport_set_t *set;
    printf("\nTransports:\n");
    if (swy_transport_set_create(0, 1, &set) != SWY_OK) {
        printf("  cannot load transports: %s\n", swy_last_error(NULL));
        return;
    }
    for (int i = 0; i < set->count; i++) {
        swy_transport_t *tp = &set->tps[i];
        printf("  %-6s %s\n         memory:%s%s  score self/numa/node/cross: "
               "%d/%d/%d/%d\n", tp->ops->name, tp->path,
               tp->caps.mem_types & (1u << SWY_MEM_HOST) ? " host" : "",
               tp->caps.mem_types & (1u << SWY_MEM_CUDA) ? " cuda" : "",
               tp->caps.score[SWY_LINK_SELF],
               tp->caps.score[SWY_LINK_SAME_NUMA],
               tp->caps.score[SWY_LINK_SAME_NODE],
               tp->caps.score[SWY_LINK_CROSS_NODE]);
    }
    const char *forced = swy_config_get("SWY_TRANSPORT");
    printf("\nChosen for host memory, per link class%s%s%s:\n",
           forced ? " (SWY_TRANSPORT=" : "", forced ? forced : "",
           forced ? ")" : "");
    for (int cls = 0; cls < SWY_LINK_NCLASSES; cls++) {
        int best = -1;
        for (int i = 0; i < set->count; i++) {
            swy_transport_t *tp = &set->tps[i];
            if (!(tp->caps.mem_types & (1u << SWY_MEM_HOST)) ||
                tp->caps.score[cls] <= 0)
                continue;
            if (forced && strcmp(forced, tp->ops->name) == 0) {
                best = i;
                break;
            }
            if (best < 0 || tp->caps.score[cls] > set->tps[best].caps.score[cls])
                best = i;
        }
        printf("  %-11s -> %s\n",
               swy_topo_link_class_name((swy_link_class_t)cls),
               best >= 0 ? set->tps[best].ops->name : "(none)");
    }
    swy_transport_set_destroy(set);
}

static int show_local(void)
{
    swy_topo_local_t local;
    char text[8192];
    printf("Switchyard %s\n\nTopology of this rank:\n", swy_version());
    if (swy_topo_discover(&local) != SWY_OK) {
        printf("  discovery failed: %s\n", swy_last_error(NULL));
    } else {
        swy_topo_describe_local(&local, text, sizeof(text));
        printf("%s", text);
    }
    show_transports();
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
    const swy_topo_local_t *me = swy_topo_rank_info(comm->topo, rank);
    /* One block per rank, in rank order, so the output reads whole. */
    for (int turn = 0; turn < n; turn++) {
        if (turn == rank) {
            printf("rank %d of %d on %s (node %d, NUMA %d), partition %zu "
                   "bytes:\n", rank, n, me->hostname,
                   swy_topo_node_of(comm->topo, rank), me->numa,
                   swy_sched_partition_bytes(comm->sched));
            for (int p = 0; p < n; p++) {
                char desc[256] = "";
                swy_transport_t *tp = swy_transport_for_peer(
                    comm->transports, p, SWY_MEM_HOST);
                if (tp != NULL && tp->ops->describe_peer != NULL)
                    tp->ops->describe_peer(tp->ctx, p, desc, sizeof(desc));
                printf("  peer %-3d %-10s %7.3f GB/s  %-5s %s\n", p,
                       swy_topo_link_class_name(
                           swy_topo_link_class(comm->topo, rank, p)),
                       swy_topo_bandwidth(comm->topo, rank, p) / 1e9,
                       tp ? tp->ops->name : "none", desc);
            }
            fflush(stdout);
        }
        if (swy_barrier(comm) != SWY_OK)
            break;
    }
    return swy_comm_destroy(comm) == SWY_OK ? 0 : 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: swy-info [-c|--config] [--peers] [-h]\n"
                 "  (none)      version, topology, transports\n"
                 "  -c          every SWY_* variable with default and help\n"
                 "  --peers     per-peer link class and transport (run it "
                 "under swy-run -n N)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", no_argument, 0, 'c'},
                                         {"peers", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, mode = 0;
    while ((c = getopt_long(argc, argv, "ch", opts, NULL)) != -1) {
        switch (c) {
        case 'c': mode = 'c'; break;
        case 'p': mode = 'p'; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (mode == 'c')
        return show_config();
    if (mode == 'p')
        return show_peers();
    return show_local();
}
