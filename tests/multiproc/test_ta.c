/* swy_moe_ta_target and swy_moe_model_alltoall through the public API on
 * 3 local ranks whose link matrix comes from an asymmetric SWY_TOPO_FILE
 * written here: the shares must be proportional to each rank's row of the
 * file, the weights must follow w_e = 1 / (E c_e), the weighted balance
 * loss must be smallest at the target, and the model must give the
 * hand-computed time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "switchyard/moe.h"

#define W 3
#define EPR 2

/* GB/s of pair (i, j), symmetric; self on the diagonal. */
static const double gbps[W][W] = {
    {20.0, 4.0, 1.0},
    {4.0, 20.0, 2.0},
    {1.0, 2.0, 20.0},
};

/* l(f) = E * sum_e w_e f_e^2: the weighted GShard loss with the mean gate
 * probability equal to the routed fraction (its value at equilibrium). */
static double weighted_loss(const double *w, const double *f, int E)
{
    double l = 0.0;
    for (int e = 0; e < E; e++)
        l += w[e] * f[e] * f[e];
    return E * l;
}

static int run_rank(swy_comm_t comm, int rank, int nranks, void *arg)
{
    (void)arg;
    const int E = W * EPR;
    double share[W], weight[W * EPR];

    CHECK_RET(nranks == W, "need %d ranks", W);
    CHECK_OK_RET(swy_moe_ta_target(comm, EPR, share, weight), comm);
    double row = 0.0, sum = 0.0;
    for (int j = 0; j < W; j++)
        row += gbps[rank][j];
    for (int j = 0; j < W; j++) {
        CHECK_RET(fabs(share[j] - gbps[rank][j] / row) < 1e-12,
                  "rank %d share[%d] %g, expected %g", rank, j, share[j],
                  gbps[rank][j] / row);
        sum += share[j];
    }
    CHECK_RET(fabs(sum - 1.0) < 1e-12, "shares sum to %g", sum);
    double target[W * EPR];
    for (int e = 0; e < E; e++) {
        target[e] = share[e / EPR] / EPR;
        CHECK_RET(fabs(weight[e] - 1.0 / (E * target[e])) < 1e-9 * weight[e],
                  "weight[%d] %g", e, weight[e]);
    }

    /* The minimum of the weighted loss over the simplex is the target:
     * every feasible perturbation (sum zero) raises it. */
    double l0 = weighted_loss(weight, target, E);
    unsigned seed = 17u + (unsigned)rank;
    for (int trial = 0; trial < 200; trial++) {
        double f[W * EPR], d[W * EPR], mean = 0.0;
        for (int e = 0; e < E; e++) {
            d[e] = (double)rand_r(&seed) / RAND_MAX - 0.5;
            mean += d[e] / E;
        }
        double eps = 1e-3 * (1 + trial % 10);
        int ok = 1;
        for (int e = 0; e < E; e++) {
            f[e] = target[e] + eps * (d[e] - mean);
            ok &= f[e] >= 0.0;
        }
        if (!ok)
            continue;
        double l = weighted_loss(weight, f, E);
        CHECK_RET(l >= l0 - 1e-12, "loss %g below the target's %g (trial %d)",
                  l, l0, trial);
    }
    /* The uniform routing is worse than the target unless they agree. */
    double uni[W * EPR];
    for (int e = 0; e < E; e++)
        uni[e] = 1.0 / E;
    CHECK_RET(weighted_loss(weight, uni, E) > l0, "uniform not worse");

    /* Model: one node, no uplink; the slowest pair link bounds. Rank 0
     * sends 1 MB to rank 2 (1 GB/s, 5 us) and 1 MB to rank 1 (4 GB/s). */
    double bytes[W * W] = {0};
    bytes[0 * W + 2] = 1e6;
    bytes[0 * W + 1] = 1e6;
    double t = 0.0;
    char why[96];
    CHECK_OK_RET(swy_moe_model_alltoall(comm, bytes, &t, why, sizeof(why)),
                 comm);
    CHECK_RET(fabs(t - (1e6 / 1e9 + 5e-6)) < 1e-12, "model %g s", t);
    CHECK_RET(strstr(why, "link 0->2") != NULL, "bottleneck '%s'", why);

    /* One host: every rank on node 0. */
    int node_of[W] = {-1, -1, -1}, nnodes = 0;
    CHECK_OK_RET(swy_moe_topo_nodes(comm, node_of, &nnodes), comm);
    CHECK_RET(nnodes == 1 && node_of[0] == 0 && node_of[1] == 0 &&
              node_of[2] == 0, "nodes %d: %d %d %d", nnodes, node_of[0],
              node_of[1], node_of[2]);
    CHECK_RET(swy_moe_topo_nodes(comm, NULL, NULL) == SWY_ERR_INVALID_ARG,
              "NULL nodes");

    /* Bad input. */
    CHECK_RET(swy_moe_ta_target(NULL, EPR, share, weight) ==
                  SWY_ERR_INVALID_ARG,
              "NULL comm");
    CHECK_RET(swy_moe_ta_target(comm, 0, share, weight) == SWY_ERR_INVALID_ARG,
              "0 experts");
    CHECK_RET(strstr(swy_last_error(comm), "experts_per_rank") != NULL,
              "message '%s'", swy_last_error(comm));
    bytes[1] = -1.0;
    CHECK_RET(swy_moe_model_alltoall(comm, bytes, &t, NULL, 0) ==
                  SWY_ERR_INVALID_ARG, "negative bytes");
    bytes[1] = NAN;
    CHECK_RET(swy_moe_model_alltoall(comm, bytes, &t, NULL, 0) ==
                  SWY_ERR_INVALID_ARG, "NaN bytes");
    CHECK_RET(swy_moe_model_alltoall(comm, NULL, &t, NULL, 0) ==
                  SWY_ERR_INVALID_ARG, "NULL bytes");
    return 0;
}

int main(void)
{
    char path[] = "/tmp/swy-ta-topo-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# asymmetric 3-rank matrix for test_ta\nself 20 0\n");
    for (int i = 0; i < W; i++)
        for (int j = i + 1; j < W; j++)
            fprintf(f, "%d %d %g %g\n", i, j, gbps[i][j],
                    gbps[i][j] == 1.0 ? 5.0 : 1.0);
    fclose(f);
    setenv("SWY_TOPO_FILE", path, 1);
    swy_test_result_t result;
    int rc = swy_test_spawn(W, run_rank, NULL, 60, &result);
    unlink(path);
    return rc;
}
