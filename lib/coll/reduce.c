/* Reduce to a root as a pipelined chain, broadcast.c's chain run
 * backwards: root-1 -> root-2 -> ... -> root+1 -> root, each rank taking
 * in its right neighbour's partial result chunk by chunk, adding its own
 * contribution and passing the chunk on at once. Like the ring's steps
 * (and NCCL's ring reduce) it is bandwidth-optimal for large buffers:
 * each rank sends and receives the buffer once, and the time grows by one
 * chunk per rank, not one buffer.
 *
 * A rank at distance pos from the root (pos = rank - root mod W) receives
 * from rank+1 unless it ends the chain (pos = W-1: it sends its sendbuf)
 * and sends to rank-1 unless it is the root. Partial results land in a
 * scratch copy of the buffer, where the rank reduces them with its own
 * data before sending them on; the root reduces into recvbuf (its
 * sendbuf may be recvbuf: in place) and divides for SWY_AVG. recvbuf of
 * the other ranks is not touched.
 *
 * The reduction runs on the host: host buffers only. */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks, pos;
    size_t dsize, chunk_elems, nchunks;
    char *scratch; /* the partial results from the right (pos < W-1) */
    size_t scratch_bytes, scratch_at;
};

static swy_status_t rd_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "reduce/chain", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, 1);
    st->pos = (rank - args->root + nranks) % nranks;
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, args->count, SWY_COLL_TAG_MAX);
    st->nchunks = (args->count + st->chunk_elems - 1) / st->chunk_elems;
    if (nranks > 1 && st->pos < nranks - 1 && args->count > 0) {
        size_t bytes = 0;
        if (swy_coll_slot_place(&bytes, args->count * st->dsize,
                                args->sendbuf, &st->scratch_at) != 0 ||
            (st->scratch = swy_coll_scratch_get(bytes)) == NULL) {
            swy_free(st);
            return SWY_ERR_NO_MEMORY;
        }
        st->scratch_bytes = bytes;
    }
    *state_p = st;
    return SWY_OK;
}

static void rd_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    size_t chunk, int is_send)
{
    int w = st->nranks;
    size_t off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, st->args.count - off);
    /* The end of the chain sends its own data; the others receive into
     * the scratch copy and send the partial results from there. */
    char *buf = st->pos == w - 1
                    ? (char *)st->args.sendbuf + off * st->dsize
                    : st->scratch + st->scratch_at + off * st->dsize;
    swy_coll_xfer_t x = {
        .peer = is_send ? (st->rank - 1 + w) % w : (st->rank + 1) % w,
        .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)chunk, .buf = buf, .bytes = n * st->dsize,
        .cookie = swy_coll_cookie(0, 0, chunk)};
    emit->post(emit->ctx, &x);
}

static swy_status_t rd_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    if (st->nranks == 1) {
        if (a->recvbuf != a->sendbuf && a->count > 0)
            memmove(a->recvbuf, a->sendbuf, a->count * st->dsize);
        return SWY_OK;
    }
    for (size_t c = 0; c < st->nchunks; c++)
        rd_emit(st, emit, c, st->pos == st->nranks - 1);
    return SWY_OK;
}

static swy_status_t rd_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    size_t off = chunk * st->chunk_elems * st->dsize;
    size_t n = xfer->bytes / st->dsize;
    const char *mine = (const char *)a->sendbuf + off;
    if (st->pos > 0) {
        swy_coll_reduce(xfer->buf, mine, xfer->buf, n, a->dtype, a->redop);
        rd_emit(st, emit, chunk, 1);
        return SWY_OK;
    }
    char *dst = (char *)a->recvbuf + off;
    swy_coll_reduce(dst, mine, xfer->buf, n, a->dtype, a->redop);
    if (a->redop == SWY_AVG)
        swy_coll_scale_avg(dst, n, a->dtype, st->nranks);
    return SWY_OK;
}

static void rd_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_coll_scratch_put(st->scratch, st->scratch_bytes);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_reduce_chain = {
    .name = "reduce/chain", .create = rd_create, .start = rd_start,
    .recv_done = rd_recv_done, .destroy = rd_destroy};
