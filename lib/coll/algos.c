/* The algorithm chosen for each collective kind. */
#include "coll/coll.h"

extern const swy_coll_algo_t swy_coll_alltoallv_pairwise;
extern const swy_coll_algo_t swy_coll_allreduce_ring;
extern const swy_coll_algo_t swy_coll_allgather_ring;
extern const swy_coll_algo_t swy_coll_broadcast_chain;
extern const swy_coll_algo_t swy_coll_barrier_dissemination;

const swy_coll_algo_t *swy_coll_algo(swy_coll_kind_t kind)
{
    switch (kind) {
    case SWY_COLL_ALLTOALLV: return &swy_coll_alltoallv_pairwise;
    case SWY_COLL_ALLREDUCE: return &swy_coll_allreduce_ring;
    case SWY_COLL_ALLGATHER: return &swy_coll_allgather_ring;
    case SWY_COLL_BROADCAST: return &swy_coll_broadcast_chain;
    case SWY_COLL_BARRIER: return &swy_coll_barrier_dissemination;
    default: return NULL;
    }
}
