/* Op headers: what each rank tells its header peers, and the comparison
 * that turns a disagreement into SWY_ERR_MISMATCH naming both sides. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/device.h"

static const char *kind_names[SWY_COLL_NKINDS] = {
    "alltoallv", "allreduce", "allgather", "broadcast", "barrier",
    "reduce_scatter", "allgatherv", "reduce", "gather", "scatter", "send",
    "recv"};

const char *swy_coll_kind_name(swy_coll_kind_t kind)
{
    return (unsigned)kind < SWY_COLL_NKINDS ? kind_names[kind] : "unknown-op";
}

int swy_coll_header_peers(const swy_coll_args_t *args, int rank, int nranks,
                          int *peers)
{
    int n = 0;
    if (nranks == 1)
        return 0;
    /* A send or receive hears from its one peer (not from itself: the
     * data's size checks a send to this rank). */
    if (args->kind == SWY_COLL_SEND || args->kind == SWY_COLL_RECV) {
        if (args->root != rank)
            peers[n++] = args->root;
        return n;
    }
    /* The direct and shared-memory allreduces talk to everyone (the
     * latter reads every peer's slots), as alltoallv does. */
    swy_coll_ar_algo_t ar =
        args->kind == SWY_COLL_ALLREDUCE
            ? swy_coll_allreduce_choose(
                  args, (swy_coll_ar_algo_t)args->allreduce_algo, nranks)
            : SWY_COLL_AR_AUTO;
    /* allgatherv: each rank's count is its own, so every pair compares
     * what one sends with what the other expects (as alltoallv). */
    if (args->kind == SWY_COLL_ALLTOALLV ||
        args->kind == SWY_COLL_ALLGATHERV || ar == SWY_COLL_AR_DIRECT ||
        ar == SWY_COLL_AR_SHM) {
        for (int s = 1; s < nranks; s++)
            peers[n++] = (rank + s) % nranks;
        return n;
    }
    /* Ring neighbours: every pair of ranks is linked through a chain of
     * adjacent pairs, so any disagreement shows at some adjacent pair. */
    peers[n++] = (rank + 1) % nranks;
    int left = (rank - 1 + nranks) % nranks;
    if (left != peers[0])
        peers[n++] = left;
    /* Recursive halving and doubling talks to rank ^ 2^i as well: hear
     * from them too, so a disagreement there fails before data moves. */
    if (ar == SWY_COLL_AR_RHD)
        for (int m = 1; m < nranks; m <<= 1) {
            int p = rank ^ m, seen = 0;
            for (int i = 0; i < n; i++)
                seen |= peers[i] == p;
            if (!seen)
                peers[n++] = p;
        }
    /* The same for gather and scatter: the root talks to every rank. */
    if (args->kind == SWY_COLL_GATHER || args->kind == SWY_COLL_SCATTER)
        for (int p = 0; p < nranks; p++) {
            int seen = p == rank || (rank != args->root && p != args->root);
            for (int i = 0; i < n; i++)
                seen |= peers[i] == p;
            if (!seen)
                peers[n++] = p;
        }
    return n;
}

void swy_coll_header_make(const swy_coll_args_t *args, uint32_t seq, int peer,
                          swy_coll_header_t *hdr)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->magic = SWY_COLL_HEADER_MAGIC;
    hdr->seq = seq;
    hdr->kind = (uint8_t)args->kind;
    hdr->dtype = (uint8_t)args->dtype;
    hdr->redop = (uint8_t)args->redop;
    hdr->mem = (uint8_t)args->mem;
    hdr->algo = args->kind == SWY_COLL_ALLREDUCE   ? args->allreduce_algo
                : args->kind == SWY_COLL_ALLTOALLV ? args->alltoallv_algo
                                                   : 0;
    hdr->offload = args->offload;
    hdr->offload_class = args->offload_class;
    hdr->user_tag = args->user_tag;
    hdr->root = args->root;
    hdr->count = args->count;
    hdr->partition_bytes = args->partition_bytes;
    if (args->kind == SWY_COLL_ALLTOALLV) {
        hdr->send_to_peer = args->sendcounts[peer];
        hdr->recv_from_peer = args->recvcounts[peer];
    }
    if (args->kind == SWY_COLL_ALLGATHERV) {
        hdr->send_to_peer = args->count; /* the same block to everyone */
        hdr->recv_from_peer = args->recvcounts[peer];
    }
}

/* The name of an algorithm number in a header (allreduce or alltoallv). */
static const char *algo_name(int alltoallv, uint8_t algo)
{
    return alltoallv ? swy_coll_alltoallv_algo_name((swy_coll_a2a_algo_t)algo)
                     : swy_coll_allreduce_algo_name((swy_coll_ar_algo_t)algo);
}

static void describe(const swy_coll_header_t *h, char *buf, size_t len)
{
    swy_coll_kind_t kind = (swy_coll_kind_t)h->kind;
    switch (kind) {
    case SWY_COLL_ALLREDUCE:
        snprintf(buf, len, "allreduce(%s, %s, count %" PRIu64 ")",
                 swy_dtype_name((swy_dtype_t)h->dtype),
                 swy_redop_name((swy_redop_t)h->redop), h->count);
        break;
    case SWY_COLL_ALLGATHER:
        snprintf(buf, len, "allgather(%s, count %" PRIu64 ")",
                 swy_dtype_name((swy_dtype_t)h->dtype), h->count);
        break;
    case SWY_COLL_BROADCAST:
        snprintf(buf, len, "broadcast(%s, count %" PRIu64 ", root %d)",
                 swy_dtype_name((swy_dtype_t)h->dtype), h->count, h->root);
        break;
    case SWY_COLL_ALLTOALLV:
    case SWY_COLL_ALLGATHERV:
        snprintf(buf, len, "%s(%s)", swy_coll_kind_name(kind),
                 swy_dtype_name((swy_dtype_t)h->dtype));
        break;
    case SWY_COLL_SEND:
    case SWY_COLL_RECV:
        snprintf(buf, len, "%s(%s, count %" PRIu64 ", tag %" PRIu32 ")",
                 swy_coll_kind_name(kind),
                 swy_dtype_name((swy_dtype_t)h->dtype), h->count,
                 h->user_tag);
        break;
    case SWY_COLL_REDUCE_SCATTER:
        snprintf(buf, len, "reduce_scatter(%s, %s, recvcount %" PRIu64 ")",
                 swy_dtype_name((swy_dtype_t)h->dtype),
                 swy_redop_name((swy_redop_t)h->redop), h->count);
        break;
    case SWY_COLL_REDUCE:
        snprintf(buf, len, "reduce(%s, %s, count %" PRIu64 ", root %d)",
                 swy_dtype_name((swy_dtype_t)h->dtype),
                 swy_redop_name((swy_redop_t)h->redop), h->count, h->root);
        break;
    case SWY_COLL_GATHER:
    case SWY_COLL_SCATTER:
        snprintf(buf, len, "%s(%s, count %" PRIu64 ", root %d)",
                 swy_coll_kind_name(kind),
                 swy_dtype_name((swy_dtype_t)h->dtype), h->count, h->root);
        break;
    default:
        snprintf(buf, len, "%s", swy_coll_kind_name(kind));
    }
}

swy_status_t swy_coll_header_check(const swy_coll_args_t *args, uint32_t seq,
                                   const char *op_name, int rank, int peer,
                                   const swy_coll_header_t *hdr, char *msg,
                                   size_t msg_len)
{
    swy_coll_header_t mine;
    char my_desc[128], peer_desc[128];
    swy_coll_header_make(args, seq, peer, &mine);
    if (hdr->magic != SWY_COLL_HEADER_MAGIC || hdr->seq != seq) {
        snprintf(msg, msg_len,
                 "op #%u '%s': rank %d received a malformed header from "
                 "rank %d (magic %#x, op #%u)", seq, op_name, rank, peer,
                 hdr->magic, hdr->seq);
        return SWY_ERR_MISMATCH;
    }
    swy_coll_kind_t kind = (swy_coll_kind_t)mine.kind;
    int p2p = kind == SWY_COLL_SEND || kind == SWY_COLL_RECV;
    int reduces = kind == SWY_COLL_ALLREDUCE ||
                  kind == SWY_COLL_REDUCE_SCATTER || kind == SWY_COLL_REDUCE;
    int rooted = kind == SWY_COLL_BROADCAST || kind == SWY_COLL_REDUCE ||
                 kind == SWY_COLL_GATHER || kind == SWY_COLL_SCATTER;
    /* count is op-wide but for alltoallv and allgatherv (per peer,
     * below) and the barrier (none); a send's and its receive's agree. */
    int counted = reduces || rooted || p2p || kind == SWY_COLL_ALLGATHER;
    /* A send meets its receive. */
    int want_kind = !p2p ? (int)kind
                    : kind == SWY_COLL_SEND ? SWY_COLL_RECV
                                            : SWY_COLL_SEND;
    int same = hdr->kind == want_kind && hdr->dtype == mine.dtype;
    if (same && reduces)
        same = hdr->redop == mine.redop;
    if (same && counted)
        same = hdr->count == mine.count;
    if (same && rooted)
        same = hdr->root == mine.root;
    /* Tags are checked, not matched on: the pair's calls in order. */
    if (same && p2p)
        same = hdr->user_tag == mine.user_tag;
    if (!same) {
        describe(&mine, my_desc, sizeof(my_desc));
        describe(hdr, peer_desc, sizeof(peer_desc));
        snprintf(msg, msg_len,
                 "op #%u '%s': ranks disagree on the collective: rank %d "
                 "posted %s, rank %d posted %s", seq, op_name, rank, my_desc,
                 peer, peer_desc);
        return SWY_ERR_MISMATCH;
    }
    if (hdr->mem != mine.mem) {
        snprintf(msg, msg_len,
                 "op #%u %s '%s': rank %d passed %s memory, rank %d %s "
                 "memory: every rank must pass buffers of the same memory "
                 "type", seq, swy_coll_kind_name((swy_coll_kind_t)mine.kind),
                 op_name, rank,
                 swy_mem_type_name((swy_mem_type_t)mine.mem), peer,
                 swy_mem_type_name((swy_mem_type_t)hdr->mem));
        return SWY_ERR_MISMATCH;
    }
    /* One side's plugin runs the collective, the other's transports
     * would: neither would ever see the other's data. */
    if (hdr->offload != mine.offload) {
        int off = mine.offload ? rank : peer;
        snprintf(msg, msg_len,
                 "op #%u %s '%s': rank %d hands the collective to the "
                 "device plugin, rank %d runs it through the transports: "
                 "set SWY_DEVICE_COLL to the same value on every rank, and "
                 "give every rank the same plugin", seq,
                 swy_coll_kind_name((swy_coll_kind_t)mine.kind), op_name,
                 off, off == rank ? peer : rank);
        return SWY_ERR_MISMATCH;
    }
    /* Each class has a plugin communicator of its own: there the op
     * would meet another op of the peer's, perhaps of the same shape. */
    if (hdr->offload_class != mine.offload_class) {
        int high = mine.offload_class != 0 ? rank : peer;
        snprintf(msg, msg_len,
                 "op #%u %s '%s': rank %d posts it at high priority (above "
                 "SWY_PRIO_DEFAULT), rank %d at low: the device plugin runs "
                 "each priority class on a communicator of its own, so every "
                 "rank must give a device op the same class", seq,
                 swy_coll_kind_name((swy_coll_kind_t)mine.kind), op_name,
                 high, high == rank ? peer : rank);
        return SWY_ERR_MISMATCH;
    }
    /* Different algorithms wait for different messages: fail instead. */
    if (hdr->algo != mine.algo) {
        int a2a = mine.kind == SWY_COLL_ALLTOALLV;
        snprintf(msg, msg_len,
                 "op #%u %s '%s': rank %d chose the %s algorithm, rank %d "
                 "the %s algorithm: set %s to the same value on every rank",
                 seq, swy_coll_kind_name((swy_coll_kind_t)mine.kind), op_name,
                 rank, algo_name(a2a, mine.algo), peer,
                 algo_name(a2a, hdr->algo),
                 a2a ? "SWY_ALLTOALLV_ALGO" : "SWY_ALLREDUCE_ALGO");
        return SWY_ERR_MISMATCH;
    }
    if (hdr->partition_bytes != mine.partition_bytes) {
        snprintf(msg, msg_len,
                 "op #%u '%s': rank %d cuts transfers into micro-ops of "
                 "%" PRIu64 " bytes, rank %d into %" PRIu64 " bytes: set "
                 "SWY_PARTITION_BYTES to the same value on every rank", seq,
                 op_name, rank, mine.partition_bytes, peer,
                 hdr->partition_bytes);
        return SWY_ERR_MISMATCH;
    }
    /* Our own allgatherv block, which no peer sees twice: our sendcount
     * and our recvcounts[rank] (the comm's failure reaches every rank). */
    if (mine.kind == SWY_COLL_ALLGATHERV &&
        args->count != args->recvcounts[rank]) {
        snprintf(msg, msg_len,
                 "op #%u allgatherv '%s': rank %d sends %zu elements (its "
                 "sendcount) but expects %zu of its own (recvcounts[%d])",
                 seq, op_name, rank, args->count, args->recvcounts[rank],
                 rank);
        return SWY_ERR_MISMATCH;
    }
    /* What each side sends the other against what the other expects. */
    if (mine.kind == SWY_COLL_ALLTOALLV || mine.kind == SWY_COLL_ALLGATHERV) {
        const char *sent = mine.kind == SWY_COLL_ALLGATHERV
                               ? " (its sendcount)" : "";
        int from = hdr->send_to_peer != mine.recv_from_peer ? peer : rank;
        int to = from == peer ? rank : peer;
        uint64_t sends = from == peer ? hdr->send_to_peer : mine.send_to_peer;
        uint64_t expects = from == peer ? mine.recv_from_peer
                                        : hdr->recv_from_peer;
        if (sends != expects) {
            snprintf(msg, msg_len,
                     "op #%u %s '%s': rank %d sends %" PRIu64 " elements%s "
                     "to rank %d, which expects %" PRIu64 " (recvcounts[%d] "
                     "on rank %d)", seq, swy_coll_kind_name(kind), op_name,
                     from, sends, sent, to, expects, from, to);
            return SWY_ERR_MISMATCH;
        }
    }
    return SWY_OK;
}
