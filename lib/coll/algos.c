/* The algorithm chosen for each collective kind, and for allreduce by
 * size and number of ranks. */
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

extern const swy_coll_algo_t swy_coll_alltoallv_pairwise;
extern const swy_coll_algo_t swy_coll_allreduce_ring;
extern const swy_coll_algo_t swy_coll_allreduce_rhd;
extern const swy_coll_algo_t swy_coll_allreduce_direct;
extern const swy_coll_algo_t swy_coll_allreduce_shm;
extern const swy_coll_algo_t swy_coll_alltoallv_shm;
extern const swy_coll_algo_t swy_coll_alltoallv_hier;
extern const swy_coll_algo_t swy_coll_allgather_ring;
extern const swy_coll_algo_t swy_coll_broadcast_chain;
extern const swy_coll_algo_t swy_coll_barrier_dissemination;
extern const swy_coll_algo_t swy_coll_reduce_scatter_ring;
extern const swy_coll_algo_t swy_coll_allgatherv_ring;
extern const swy_coll_algo_t swy_coll_staged;
extern const swy_coll_algo_t swy_coll_reduce_chain;
extern const swy_coll_algo_t swy_coll_gather_direct;
extern const swy_coll_algo_t swy_coll_scatter_direct;
extern const swy_coll_algo_t swy_coll_send;
extern const swy_coll_algo_t swy_coll_recv;

const swy_coll_algo_t *swy_coll_algo(swy_coll_kind_t kind)
{
    switch (kind) {
    case SWY_COLL_ALLTOALLV: return &swy_coll_alltoallv_pairwise;
    case SWY_COLL_ALLREDUCE: return &swy_coll_allreduce_ring;
    case SWY_COLL_ALLGATHER: return &swy_coll_allgather_ring;
    case SWY_COLL_BROADCAST: return &swy_coll_broadcast_chain;
    case SWY_COLL_BARRIER: return &swy_coll_barrier_dissemination;
    case SWY_COLL_REDUCE_SCATTER: return &swy_coll_reduce_scatter_ring;
    case SWY_COLL_ALLGATHERV: return &swy_coll_allgatherv_ring;
    case SWY_COLL_REDUCE: return &swy_coll_reduce_chain;
    case SWY_COLL_GATHER: return &swy_coll_gather_direct;
    case SWY_COLL_SCATTER: return &swy_coll_scatter_direct;
    case SWY_COLL_SEND: return &swy_coll_send;
    case SWY_COLL_RECV: return &swy_coll_recv;
    default: return NULL;
    }
}

static const char *const ar_algo_names[SWY_COLL_AR_NALGOS] = {
    "auto", "ring", "rhd", "direct", "shm"};

static const char *const a2a_algo_names[SWY_COLL_A2A_NALGOS] = {
    "auto", "pairwise", "shm", "hier"};

const char *swy_coll_allreduce_algo_name(swy_coll_ar_algo_t algo)
{
    return (unsigned)algo < SWY_COLL_AR_NALGOS ? ar_algo_names[algo]
                                               : "unknown-algorithm";
}

/* The index of the variable's value in names[n] (names[0] is "auto"):
 * the config table holds the values the variable takes (a value it does
 * not know gives its default, auto, with a warning), and test_config
 * checks that they are these names. */
static int algo_setting(const char *variable, const char *const *names,
                        int n)
{
    const char *value = swy_config_get_text(variable);
    for (int a = 0; value != NULL && a < n; a++)
        if (strcasecmp(value, names[a]) == 0)
            return a;
    return 0;
}

swy_coll_ar_algo_t swy_coll_allreduce_setting(void)
{
    return (swy_coll_ar_algo_t)algo_setting("SWY_ALLREDUCE_ALGO",
                                            ar_algo_names,
                                            SWY_COLL_AR_NALGOS);
}

/* The automatic rule. Measured on 4 local ranks over UCX shared memory
 * on 2 shared, busy cores and on 16 cores (float32 sum, SWY_* defaults;
 * the runs: docs/performance.md, "coll").
 * Every step needs every rank scheduled, so the fewest steps win while
 * the messages are small: halving/doubling (2 log2 W steps) up to
 * 256 KiB, then the direct algorithm (2 steps; between them the two are
 * within noise; direct also runs on any W). Since the pipelined chunks
 * (256 KiB on one host) and eager local sends, direct also beats the
 * ring from 4 MiB, on 2 cores and on 16. So the ring takes over only
 * above SWY_COLL_ALLREDUCE_DIRECT_MAX_BYTES, where direct's scratch
 * grows large. The direct algorithm sends W-1 times the ring's bytes
 * over each link: it stops at 8 ranks, and ranks on several hosts take
 * halving/doubling (or the ring) at every size. */
static swy_coll_ar_algo_t ar_auto(size_t count, size_t bytes, int nranks,
                                  int multi_host, int shm)
{
    int pow2 = (nranks & (nranks - 1)) == 0;
    /* Across hosts the uplink is the bottleneck: halving/doubling with
     * its nearest partners first sends D/2 per rank each way through it,
     * the ring 2 (W - 1) / W D, the direct algorithm (W - W_host) / W D
     * per segment phase. */
    if (multi_host)
        return pow2 && count >= (size_t)nranks ? SWY_COLL_AR_RHD
                                               : SWY_COLL_AR_RING;
    if (shm && bytes > SWY_COLL_ALLREDUCE_SHM_MIN_BYTES)
        return SWY_COLL_AR_SHM;
    if (pow2 && nranks >= 4 && count >= (size_t)nranks &&
        bytes <= SWY_COLL_ALLREDUCE_RHD_MAX_BYTES)
        return SWY_COLL_AR_RHD;
    if (nranks <= SWY_COLL_ALLREDUCE_DIRECT_MAX_RANKS &&
        bytes <= SWY_COLL_ALLREDUCE_DIRECT_MAX_BYTES)
        return SWY_COLL_AR_DIRECT;
    return SWY_COLL_AR_RING;
}

swy_coll_ar_algo_t swy_coll_allreduce_choose(const swy_coll_args_t *args,
                                             swy_coll_ar_algo_t wanted,
                                             int nranks)
{
    /* Device buffers are staged through the ring; one rank copies;
     * halving/doubling needs a power of two of ranks and no empty
     * segment. */
    if (args->kind != SWY_COLL_ALLREDUCE || args->mem != SWY_MEM_HOST ||
        nranks < 2 || args->count == 0)
        return SWY_COLL_AR_RING;
    size_t bytes = args->count * swy_dtype_size(args->dtype);
    swy_coll_ar_algo_t algo = wanted;
    /* Without a channel (ranks on several hosts, or none could be made)
     * the shared-memory algorithm gives way to the automatic rule; every
     * rank has a channel or none alike. */
    if (algo == SWY_COLL_AR_SHM && args->shm == NULL)
        algo = SWY_COLL_AR_AUTO;
    if (algo == SWY_COLL_AR_AUTO || algo >= SWY_COLL_AR_NALGOS)
        algo = ar_auto(args->count, bytes, nranks, args->multi_host,
                       args->shm != NULL);
    if (algo == SWY_COLL_AR_RHD &&
        ((nranks & (nranks - 1)) != 0 || args->count < (size_t)nranks))
        algo = SWY_COLL_AR_RING;
    return algo;
}

const char *swy_coll_alltoallv_algo_name(swy_coll_a2a_algo_t algo)
{
    return (unsigned)algo < SWY_COLL_A2A_NALGOS ? a2a_algo_names[algo]
                                                : "unknown-algorithm";
}

swy_coll_a2a_algo_t swy_coll_alltoallv_setting(void)
{
    return (swy_coll_a2a_algo_t)algo_setting("SWY_ALLTOALLV_ALGO",
                                             a2a_algo_names,
                                             SWY_COLL_A2A_NALGOS);
}

/* The automatic rule: through the channel only where the ranks share
 * CPUs (the CPUs they may run on, together, are fewer than the ranks).
 * There the CMA rendezvous's kernel copy was the slower path; with a
 * core per rank the pairwise exchange is ahead of Open MPI's alltoallv,
 * and the channel's two copies have not been measured against it
 * (docs/performance.md, "coll"). Across hosts pairwise too: hier has
 * not won where it was measured (the emulated 2 x 4 cluster on 2 cores,
 * where pairwise runs at the shaped uplink's rate from 4 KiB per peer
 * and every op still checks its counts with every peer), so it runs
 * only when asked for (docs/performance.md, "hier"). */
swy_coll_a2a_algo_t swy_coll_alltoallv_choose(const swy_coll_args_t *args,
                                              swy_coll_a2a_algo_t wanted)
{
    if (args->kind != SWY_COLL_ALLTOALLV || args->mem != SWY_MEM_HOST)
        return SWY_COLL_A2A_PAIRWISE;
    int hier_ok = args->multi_host && args->host_of != NULL;
    if (wanted == SWY_COLL_A2A_HIER && !hier_ok)
        wanted = SWY_COLL_A2A_AUTO;
    if (wanted == SWY_COLL_A2A_AUTO || wanted >= SWY_COLL_A2A_NALGOS)
        return args->shm_a2a != NULL && args->shm_a2a->ranks_share_cpus
                   ? SWY_COLL_A2A_SHM
                   : SWY_COLL_A2A_PAIRWISE;
    if (wanted == SWY_COLL_A2A_SHM && args->shm_a2a == NULL)
        return SWY_COLL_A2A_PAIRWISE;
    return wanted;
}

static swy_coll_ar_algo_t ar_algo_of(const swy_coll_args_t *args, int nranks)
{
    return swy_coll_allreduce_choose(
        args, (swy_coll_ar_algo_t)args->allreduce_algo, nranks);
}

const swy_coll_algo_t *swy_coll_algo_choose(swy_coll_args_t *args,
                                            int nranks)
{
    if (args->kind == SWY_COLL_ALLREDUCE)
        args->allreduce_algo = (uint8_t)swy_coll_allreduce_choose(
            args, swy_coll_allreduce_setting(), nranks);
    if (args->kind == SWY_COLL_ALLTOALLV)
        args->alltoallv_algo = (uint8_t)swy_coll_alltoallv_choose(
            args, swy_coll_alltoallv_setting());
    return swy_coll_algo_for(args, nranks);
}

const swy_coll_algo_t *swy_coll_algo_for(const swy_coll_args_t *args,
                                         int nranks)
{
    if (args->offload)
        return &swy_coll_offload;
    if (args->kind == SWY_COLL_ALLTOALLV) {
        switch (swy_coll_alltoallv_choose(
            args, (swy_coll_a2a_algo_t)args->alltoallv_algo)) {
        case SWY_COLL_A2A_SHM: return &swy_coll_alltoallv_shm;
        case SWY_COLL_A2A_HIER: return &swy_coll_alltoallv_hier;
        default: return &swy_coll_alltoallv_pairwise;
        }
    }
    if (args->mem != SWY_MEM_HOST &&
        (args->kind == SWY_COLL_REDUCE_SCATTER ||
         args->kind == SWY_COLL_ALLGATHERV || args->kind == SWY_COLL_REDUCE ||
         args->kind == SWY_COLL_GATHER || args->kind == SWY_COLL_SCATTER))
        return &swy_coll_staged; /* staged.c */
    if (args->kind != SWY_COLL_ALLREDUCE)
        return swy_coll_algo(args->kind);
    switch (ar_algo_of(args, nranks)) {
    case SWY_COLL_AR_RHD: return &swy_coll_allreduce_rhd;
    case SWY_COLL_AR_DIRECT: return &swy_coll_allreduce_direct;
    case SWY_COLL_AR_SHM: return &swy_coll_allreduce_shm;
    default: return &swy_coll_allreduce_ring;
    }
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
    if (args->offload)
        return 0; /* the plugin moves it, on its own communicators */
    switch (args->kind) {
    case SWY_COLL_ALLTOALLV:
        for (int p = 0; p < nranks; p++)
            if (args->sendcounts[p] > 0 || args->recvcounts[p] > 0)
                n = add_peer(peers, n, p);
        break;
    case SWY_COLL_SEND:
    case SWY_COLL_RECV:
        if (args->count > 0)
            n = add_peer(peers, n, args->root);
        break;
    case SWY_COLL_ALLREDUCE:
        /* Device buffers are staged: only host memory travels. */
        if (nranks == 1 || args->count == 0 || args->mem != SWY_MEM_HOST)
            break;
        switch (ar_algo_of(args, nranks)) {
        case SWY_COLL_AR_RHD:
            for (int m = 1; m < nranks; m <<= 1)
                n = add_peer(peers, n, rank ^ m);
            break;
        case SWY_COLL_AR_DIRECT:
        case SWY_COLL_AR_SHM: /* its messages: host memory, empty */
            for (int p = 0; p < nranks; p++)
                if (p != rank)
                    n = add_peer(peers, n, p);
            break;
        default:
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
    case SWY_COLL_REDUCE_SCATTER:
    case SWY_COLL_ALLGATHERV: {
        /* Rings: each rank forwards to its right neighbour. */
        size_t moved = args->count;
        if (args->kind == SWY_COLL_ALLGATHERV)
            for (int p = 0; p < nranks; p++)
                moved |= args->recvcounts[p];
        if (nranks > 1 && moved > 0) {
            n = add_peer(peers, n, right);
            n = add_peer(peers, n, left);
        }
        break;
    }
    case SWY_COLL_REDUCE:
        /* The chain root-1 -> ... -> root+1 -> root. */
        if (nranks > 1 && args->count > 0) {
            if (rank != args->root)
                n = add_peer(peers, n, left);
            if (right != args->root)
                n = add_peer(peers, n, right);
        }
        break;
    case SWY_COLL_GATHER:
    case SWY_COLL_SCATTER:
        if (nranks > 1 && args->count > 0)
            for (int p = 0; p < nranks; p++)
                if (p != rank && (rank == args->root || p == args->root))
                    n = add_peer(peers, n, p);
        break;
    default:
        break; /* barrier: zero-byte host messages */
    }
    return n;
}
