/* Communication model and topology-aware dispatch targets, both computed
 * from the communicator's link matrix (per-class defaults, SWY_TOPO_FILE or
 * the SWY_TOPO_PROBE measurement).
 *
 * The model is FasterMoE's toposim reduced to the two levels a cluster of
 * hosts has: every flow i -> j is limited by its own link (bytes_ij /
 * B_ij), and the flows leaving (entering) a node share that node's uplink,
 * whose rate is the fastest cross-node link of the node (one NIC; links are
 * full duplex, so egress and ingress are separate resources). The time of
 * an all-to-all is the largest of these resource times plus the largest
 * latency of a pair that carries bytes: every resource drains in parallel,
 * so the busiest one finishes last.
 *
 * TA-MoE's target follows from the same model: with S*k slots split into
 * shares c_ij, rank i finishes when its slowest resource does, and equal
 * finish times give c_ij proportional to the bandwidth each destination can
 * get. A cross-node destination does not get the full B_ij: every rank of
 * the node sends to every rank off the node through the one uplink, so its
 * effective bandwidth is U_node / (ranks on the node * ranks off it). */
#include <stdio.h>
#include <string.h>

#include "topo/topo.h"

/* Uplink rate of a node: its fastest cross-node link (0 when it has
 * none). */
static double topo_uplink(const swy_topo_t *topo, int node)
{
    int n = swy_topo_nranks(topo);
    double best = 0.0;

    for (int a = 0; a < n; a++) {
        if (swy_topo_node_of(topo, a) != node)
            continue;
        for (int b = 0; b < n; b++) {
            if (swy_topo_node_of(topo, b) == node)
                continue;
            double bw = swy_topo_bandwidth(topo, a, b);
            if (bw > best)
                best = bw;
        }
    }
    return best;
}

double swy_topo_model_alltoall(const swy_topo_t *topo, const double *bytes,
                               char *why, size_t why_len)
{
    int n = swy_topo_nranks(topo);
    int nnodes = swy_topo_nnodes(topo);
    double worst = 0.0, lat = 0.0;
    char what[96] = "nothing to send";

    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            double b = bytes[(size_t)i * n + j];
            if (b <= 0.0)
                continue;
            double t = b / swy_topo_bandwidth(topo, i, j);
            if (swy_topo_latency(topo, i, j) > lat)
                lat = swy_topo_latency(topo, i, j);
            if (t > worst) {
                worst = t;
                snprintf(what, sizeof(what), "link %d->%d (%s)", i, j,
                         swy_topo_link_class_name(
                             swy_topo_link_class(topo, i, j)));
            }
        }
    }
    for (int node = 0; node < nnodes; node++) {
        double up = topo_uplink(topo, node), out = 0.0, in = 0.0;
        if (up <= 0.0)
            continue;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) {
                int ni = swy_topo_node_of(topo, i);
                int nj = swy_topo_node_of(topo, j);
                if (ni == nj)
                    continue;
                if (ni == node)
                    out += bytes[(size_t)i * n + j];
                if (nj == node)
                    in += bytes[(size_t)i * n + j];
            }
        }
        if (out / up > worst) {
            worst = out / up;
            snprintf(what, sizeof(what), "uplink of node %d, egress", node);
        }
        if (in / up > worst) {
            worst = in / up;
            snprintf(what, sizeof(what), "uplink of node %d, ingress", node);
        }
    }
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "%s", what);
    return worst + lat;
}

double swy_topo_flow_bandwidth(const swy_topo_t *topo, int a, int b)
{
    int n = swy_topo_nranks(topo);
    int node = swy_topo_node_of(topo, a);
    double bw = swy_topo_bandwidth(topo, a, b);
    if (swy_topo_node_of(topo, b) == node)
        return bw;
    int on_node = 0;
    for (int j = 0; j < n; j++)
        on_node += swy_topo_node_of(topo, j) == node;
    double up = topo_uplink(topo, node);
    if (up > 0.0) {
        double shared = up / ((double)on_node * (double)(n - on_node));
        if (shared < bw)
            bw = shared;
    }
    return bw;
}

void swy_topo_ta_shares(const swy_topo_t *topo, int rank, double *share)
{
    int n = swy_topo_nranks(topo);
    double sum = 0.0;

    for (int j = 0; j < n; j++) {
        share[j] = swy_topo_flow_bandwidth(topo, rank, j);
        sum += share[j];
    }
    for (int j = 0; j < n; j++)
        share[j] = sum > 0.0 ? share[j] / sum : 1.0 / n;
}
