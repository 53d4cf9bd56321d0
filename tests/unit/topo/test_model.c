/* The communication model and TA-MoE's target shares on a fabricated
 * cluster of 2 hosts x 2 ranks, against hand-computed figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "topo/topo.h"

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b);
}

/* 2 hosts x 2 ranks; self 20 GB/s, same node 10 GB/s, cross node 0.1 GB/s,
 * no latency (set per test). */
static swy_topo_t *make_topo(void)
{
    swy_topo_local_t ranks[4];
    swy_topo_t *topo = NULL;

    memset(ranks, 0, sizeof(ranks));
    for (int r = 0; r < 4; r++) {
        snprintf(ranks[r].hostname, sizeof(ranks[r].hostname), "h%d", r / 2);
        snprintf(ranks[r].host_id, sizeof(ranks[r].host_id), "h%d:boot%d",
                 r / 2, r / 2);
        ranks[r].numa = -1;
        ranks[r].package = -1;
        snprintf(ranks[r].source, sizeof(ranks[r].source), "synthetic");
    }
    if (swy_topo_build(ranks, 4, 0, &topo) != SWY_OK)
        return NULL;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            swy_topo_set_link(topo, a, b,
                              a == b ? 20e9 : a / 2 == b / 2 ? 10e9 : 1e8,
                              0.0);
    return topo;
}

static void test_model(swy_topo_t *topo)
{
    double bytes[16];
    char why[96];
    const double M = 1 << 20;

    /* Uniform: every pair M. Node 0's uplink carries 2 ranks x 2 remote
     * peers x M = 4M at 0.1 GB/s; that beats any single link. */
    for (int i = 0; i < 16; i++)
        bytes[i] = M;
    double t = swy_topo_model_alltoall(topo, bytes, why, sizeof(why));
    CHECK(close_to(t, 4 * M / 1e8));
    CHECK(strstr(why, "uplink of node") != NULL);

    /* One intra-node flow: its own link. */
    memset(bytes, 0, sizeof(bytes));
    bytes[0 * 4 + 1] = M;
    t = swy_topo_model_alltoall(topo, bytes, why, sizeof(why));
    CHECK(close_to(t, M / 10e9));
    CHECK(strcmp(why, "link 0->1 (same_node)") == 0);

    /* Two ranks of node 0 send M each to node 1: the uplink is shared,
     * twice the time of one flow. Ingress of node 1 is the same. */
    memset(bytes, 0, sizeof(bytes));
    bytes[0 * 4 + 2] = M;
    bytes[1 * 4 + 3] = M;
    t = swy_topo_model_alltoall(topo, bytes, why, sizeof(why));
    CHECK(close_to(t, 2 * M / 1e8));

    /* Full duplex: M each way between the nodes costs one M. */
    memset(bytes, 0, sizeof(bytes));
    bytes[0 * 4 + 2] = M;
    bytes[2 * 4 + 0] = M;
    t = swy_topo_model_alltoall(topo, bytes, why, sizeof(why));
    CHECK(close_to(t, M / 1e8));

    /* A slow pair below the uplink rate bounds its own flow. */
    swy_topo_set_link(topo, 0, 3, 5e7, 0.0);
    memset(bytes, 0, sizeof(bytes));
    bytes[0 * 4 + 3] = M;
    t = swy_topo_model_alltoall(topo, bytes, why, sizeof(why));
    CHECK(close_to(t, M / 5e7));
    CHECK(strcmp(why, "link 0->3 (cross_node)") == 0);
    swy_topo_set_link(topo, 0, 3, 1e8, 0.0);

    /* Latency of the slowest pair that carries bytes is added once. */
    swy_topo_set_link(topo, 1, 2, 1e8, 1e-3);
    memset(bytes, 0, sizeof(bytes));
    bytes[1 * 4 + 2] = M;
    t = swy_topo_model_alltoall(topo, bytes, NULL, 0);
    CHECK(close_to(t, M / 1e8 + 1e-3));
    bytes[1 * 4 + 2] = 0;
    bytes[0 * 4 + 1] = M; /* the slow-latency pair carries nothing now */
    t = swy_topo_model_alltoall(topo, bytes, NULL, 0);
    CHECK(close_to(t, M / 10e9));
    swy_topo_set_link(topo, 1, 2, 1e8, 0.0);

    /* Nothing to send costs nothing. */
    memset(bytes, 0, sizeof(bytes));
    CHECK(swy_topo_model_alltoall(topo, bytes, NULL, 0) == 0.0);
}

static void test_shares(swy_topo_t *topo)
{
    double share[4], sum = 0.0;

    /* Rank 0: self 20, peer 10, and each remote rank gets the 0.1 GB/s
     * uplink divided among 2 senders x 2 receivers = 0.025 GB/s. */
    swy_topo_ta_shares(topo, 0, share);
    double w[4] = {20e9, 10e9, 2.5e7, 2.5e7}, wsum = 20e9 + 10e9 + 5e7;
    for (int j = 0; j < 4; j++) {
        CHECK(close_to(share[j], w[j] / wsum));
        sum += share[j];
    }
    CHECK(close_to(sum, 1.0));

    /* A remote pair slower than its share of the uplink keeps its own
     * rate; the shares stay proportional to what each link gives. */
    swy_topo_set_link(topo, 3, 0, 1e7, 0.0);
    swy_topo_ta_shares(topo, 3, share);
    double w3[4] = {1e7, 2.5e7, 10e9, 20e9};
    double w3sum = w3[0] + w3[1] + w3[2] + w3[3];
    sum = 0.0;
    for (int j = 0; j < 4; j++) {
        CHECK(close_to(share[j], w3[j] / w3sum));
        sum += share[j];
    }
    CHECK(close_to(sum, 1.0));

    /* Symmetric single-class matrix: the uniform target. */
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            swy_topo_set_link(topo, a, b, 1e8, 0.0);
    swy_topo_ta_shares(topo, 2, share);
    /* Cross-node pairs get 1e8 / 4 each, local ones 1e8. */
    CHECK(close_to(share[2], 1e8 / (2 * 1e8 + 2 * 2.5e7)));
    CHECK(close_to(share[0], 2.5e7 / (2 * 1e8 + 2 * 2.5e7)));
}

int main(void)
{
    swy_topo_t *topo = make_topo();
    if (topo == NULL) {
        fprintf(stderr, "swy_topo_build failed\n");
        return 1;
    }
    CHECK(swy_topo_nnodes(topo) == 2);
    test_model(topo);
    test_shares(topo);
    swy_topo_destroy(topo);
    if (check_failures != 0)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    return check_failures != 0;
}
