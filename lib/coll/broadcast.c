/* Broadcast as a pipelined chain root -> root+1 -> ... : each chunk is
 * forwarded as soon as it landed, so a large buffer takes about
 * bytes/bandwidth + (W-2) chunk times, independent of W for large
 * messages (bandwidth-optimal, as NCCL's ring broadcast). */
#include "coll/coll.h"
#include "util/alloc.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks, pos; /* pos: distance from the root along the chain */
    size_t dsize, chunk_elems, nchunks;
};

static swy_status_t bc_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "broadcast/chain", args, rank, nranks,
                          SWY_COLL_ANY_MEM, 1);
    st->pos = (rank - args->root + nranks) % nranks;
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, args->count, SWY_COLL_TAG_MAX);
    st->nchunks = (args->count + st->chunk_elems - 1) / st->chunk_elems;
    *state_p = st;
    return SWY_OK;
}

static void bc_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    size_t chunk, int is_send)
{
    size_t off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, st->args.count - off);
    swy_coll_xfer_t x = {
        .peer = is_send ? (st->rank + 1) % st->nranks
                        : (st->rank - 1 + st->nranks) % st->nranks,
        .is_send = (uint8_t)is_send, .mem = st->args.mem,
        .tag = (uint32_t)chunk,
        .buf = (char *)st->args.recvbuf + off * st->dsize,
        .bytes = n * st->dsize, .cookie = swy_coll_cookie(0, 0, chunk)};
    emit->post(emit->ctx, &x);
}

static swy_status_t bc_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    if (st->nranks == 1)
        return SWY_OK;
    for (size_t c = 0; c < st->nchunks; c++)
        bc_emit(st, emit, c, st->pos == 0);
    return SWY_OK;
}

static swy_status_t bc_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    if (st->pos < st->nranks - 1)
        bc_emit(st, emit, swy_coll_cookie_chunk(xfer->cookie), 1);
    return SWY_OK;
}

static void bc_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_broadcast_chain = {
    .name = "broadcast/chain", .create = bc_create, .start = bc_start,
    .recv_done = bc_recv_done, .destroy = bc_destroy};
