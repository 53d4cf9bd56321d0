/* Public entry points of the topology-aware dispatch target and the
 * communication model (the math is in lib/topo/model.c). */
#include <math.h>
#include <stdlib.h>

#include "api/comm_impl.h"
#include "switchyard/moe.h"
#include "util/alloc.h"

swy_status_t swy_moe_ta_target(swy_comm_t comm, int experts_per_rank,
                               double *rank_share, double *expert_weight)
{
    static const char fn[] = "swy_moe_ta_target";
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: comm is NULL",
                           fn);
    if (experts_per_rank < 1)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                            "%s: experts_per_rank %d must be >= 1", fn,
                            experts_per_rank));
    int n = comm->nranks;
    double *share = swy_calloc((size_t)n, sizeof(*share));
    if (share == NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_NO_MEMORY, "moe",
                            "%s: no memory for %d shares", fn, n));
    swy_topo_ta_shares(comm->topo, comm->rank, share);
    double E = (double)n * experts_per_rank;
    for (int j = 0; j < n; j++) {
        if (rank_share != NULL)
            rank_share[j] = share[j];
        if (expert_weight == NULL)
            continue;
        for (int l = 0; l < experts_per_rank; l++) {
            double per_expert = share[j] / experts_per_rank;
            expert_weight[(size_t)j * experts_per_rank + l] =
                per_expert > 0.0 ? 1.0 / (E * per_expert) : 0.0;
        }
    }
    swy_free(share);
    return SWY_OK;
}

swy_status_t swy_moe_model_alltoall(swy_comm_t comm, const double *bytes,
                                    double *seconds_p, char *bottleneck,
                                    size_t bottleneck_len)
{
    static const char fn[] = "swy_moe_model_alltoall";
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: comm is NULL",
                           fn);
    if (bytes == NULL || seconds_p == NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                            "%s: %s is NULL", fn,
                            bytes == NULL ? "bytes" : "seconds_p"));
    size_t n = (size_t)comm->nranks;
    for (size_t i = 0; i < n * n; i++) {
        if (!isfinite(bytes[i]) || bytes[i] < 0.0)
            return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                                "%s: bytes[%zu] (rank %zu -> %zu) is %g; "
                                "must be finite and >= 0", fn, i, i / n,
                                i % n, bytes[i]));
    }
    *seconds_p = swy_topo_model_alltoall(comm->topo, bytes, bottleneck,
                                         bottleneck_len);
    return SWY_OK;
}

swy_status_t swy_moe_topo_nodes(swy_comm_t comm, int *node_of_rank,
                                int *nnodes_p)
{
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                           "swy_moe_topo_nodes: comm is NULL");
    if (node_of_rank == NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                            "swy_moe_topo_nodes: node_of_rank is NULL"));
    for (int r = 0; r < comm->nranks; r++)
        node_of_rank[r] = swy_topo_node_of(comm->topo, r);
    if (nnodes_p != NULL)
        *nnodes_p = swy_topo_nnodes(comm->topo);
    return SWY_OK;
}
