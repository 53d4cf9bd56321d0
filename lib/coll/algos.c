/* The algorithm chosen for each collective kind. */
#include "coll/coll.h"

extern const swy_coll_algo_t swy_coll_alltoallv_pairwise;
extern const swy_coll_algo_t swy_coll_allreduce_ring;
extern const swy_coll_algo_t swy_coll_allreduce_rhd;
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

const swy_coll_algo_t *swy_coll_algo_for(const swy_coll_args_t *args,
                                         int nranks)
{
    if (swy_coll_allreduce_rhd_applies(args, nranks))
        return &swy_coll_allreduce_rhd;
    return swy_coll_algo(args->kind);
}

static int add_peer(int *peers, int n, int peer)
{
    for (int i = 0; i < n; i++)
        if (peers[i] == peer)
            return n;
    peers[n] = peer;
    return n + 1;
}

int swy_coll_data_peers(const swy_coll_args_t *args, int rank, int nranks,
                        int *peers)
{
    int n = 0;
    int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
    switch (args->kind) {
    case SWY_COLL_ALLTOALLV:
        for (int p = 0; p < nranks; p++)
            if (args->sendcounts[p] > 0 || args->recvcounts[p] > 0)
                n = add_peer(peers, n, p);
        break;
    case SWY_COLL_ALLREDUCE:
        /* Device buffers are staged: only host memory travels. */
        if (swy_coll_allreduce_rhd_applies(args, nranks)) {
            for (int m = 1; m < nranks; m <<= 1)
                n = add_peer(peers, n, rank ^ m);
        } else if (nranks > 1 && args->count > 0 &&
                   args->mem == SWY_MEM_HOST) {
            n = add_peer(peers, n, right);
            n = add_peer(peers, n, left);
        }
        break;
    case SWY_COLL_ALLGATHER:
        if (nranks > 1 && args->count > 0) {
            n = add_peer(peers, n, right);
            n = add_peer(peers, n, left);
        }
        break;
    case SWY_COLL_BROADCAST:
        /* The chain root -> root+1 -> ...: the root only sends, its
         * left neighbour (the chain's end) only receives. */
        if (nranks > 1 && args->count > 0) {
            if (right != args->root)
                n = add_peer(peers, n, right);
            if (rank != args->root)
                n = add_peer(peers, n, left);
        }
        break;
    default:
        break; /* barrier: zero-byte host messages */
    }
    return n;
}
