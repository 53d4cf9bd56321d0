/* Point-to-point send and receive (swy_send/swy_recv) as ops of one
 * peer: the buffer cut into chunks of the partition size, chunk c with
 * tag c. The scheduler gives each op the sequence number of its ordered
 * pair (sender, receiver), so sends and receives match in posting order
 * per pair, and exchanges a header with the peer first: a count or dtype
 * that differs from the matching call fails both sides. */
#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, nchunks;
};

static swy_status_t p2p_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, args->kind == SWY_COLL_SEND ? "send" : "recv",
                          args, rank, nranks, SWY_COLL_ANY_MEM, 1);
    st->chunk_elems = swy_coll_chunk_elems(partition_bytes, st->dsize,
                                           args->count, SWY_COLL_TAG_MAX);
    st->nchunks = (args->count + st->chunk_elems - 1) / st->chunk_elems;
    *state_p = st;
    return SWY_OK;
}

static swy_status_t p2p_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    int is_send = st->args.kind == SWY_COLL_SEND;
    char *buf = is_send ? (char *)st->args.sendbuf : (char *)st->args.recvbuf;
    for (size_t c = 0; c < st->nchunks; c++) {
        size_t off = c * st->chunk_elems;
        size_t n = SWY_MIN(st->chunk_elems, st->args.count - off);
        swy_coll_xfer_t x = {
            .peer = st->args.root, .is_send = (uint8_t)is_send,
            .mem = st->args.mem, .tag = (uint32_t)c,
            .buf = buf + off * st->dsize, .bytes = n * st->dsize,
            .cookie = c, .bulk = st->nchunks > 1};
        emit->post(emit->ctx, &x);
    }
    return SWY_OK;
}

static swy_status_t p2p_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    return SWY_OK; /* the chunk is in place */
}

static void p2p_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_send = {
    .name = "send", .create = p2p_create, .start = p2p_start,
    .recv_done = p2p_recv_done, .destroy = p2p_destroy};
const swy_coll_algo_t swy_coll_recv = {
    .name = "recv", .create = p2p_create, .start = p2p_start,
    .recv_done = p2p_recv_done, .destroy = p2p_destroy};
