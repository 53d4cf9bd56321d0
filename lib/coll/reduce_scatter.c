/* Reduce-scatter as a ring (the reduce-scatter phase of allreduce.c's
 * ring, with the blocks of the user's layout): W-1 steps, each block cut
 * into chunks; chunk c of step s+1 leaves as soon as chunk c of step s
 * landed and was reduced, so the steps pipeline.
 *
 * Block b (b = 0..W-1) is elements [b*count, (b+1)*count) of sendbuf;
 * rank b ends with its full reduction. At step s rank r sends block
 * r-s-1 (mod W) to its right neighbour and receives block r-s-2 from its
 * left one into the step's scratch slot, where it adds its own
 * contribution; the slot is what it sends at step s+1. At the last step
 * (s = W-2) the block received is r's own: its sum goes to recvbuf.
 * recvbuf may be rank r's block of sendbuf (in place): that block is
 * never sent, and read only by the reduction that overwrites it.
 *
 * The reduction runs on the host: host buffers only. */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, nchunks;
    char *scratch; /* W-1 slots of a block, one per step */
    size_t scratch_bytes;
    size_t *slot_at; /* [W-1] byte offset of each step's slot */
};

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static const char *block(const swy_coll_state_t *st, int b)
{
    return (const char *)st->args.sendbuf +
           (size_t)b * st->args.count * st->dsize;
}

static void rs_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_coll_scratch_put(st->scratch, st->scratch_bytes);
    swy_free(st->slot_at);
    swy_free(st);
}

static swy_status_t rs_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    size_t steps = nranks > 1 ? (size_t)(nranks - 1) : 1;
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "reduce_scatter/ring", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, steps);
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, args->count, SWY_COLL_TAG_MAX / steps);
    st->nchunks = (args->count + st->chunk_elems - 1) / st->chunk_elems;
    if (nranks > 1 && args->count > 0) {
        /* Each slot receives what the left neighbour sends from its
         * sendbuf (step 0) or its own slot: lay it out as the block. */
        size_t bytes = 0, block_bytes = args->count * st->dsize;
        int overflow = (st->slot_at = swy_calloc(steps, sizeof(size_t))) ==
                       NULL;
        for (int s = 0; s < nranks - 1 && !overflow; s++)
            overflow = swy_coll_slot_place(&bytes, block_bytes,
                                           block(st, mod(rank - s - 2,
                                                         nranks)),
                                           &st->slot_at[s]) != 0;
        if (overflow || (st->scratch = swy_coll_scratch_get(bytes)) == NULL) {
            rs_destroy(st);
            return SWY_ERR_NO_MEMORY;
        }
        st->scratch_bytes = bytes;
    }
    *state_p = st;
    return SWY_OK;
}

/* Chunk `chunk` of step `step`: the send (from sendbuf at step 0, else
 * from the slot of the step before) or the receive (into the step's
 * slot). */
static void rs_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    int step, size_t chunk, int is_send)
{
    int w = st->nranks;
    size_t off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, st->args.count - off);
    char *buf;
    if (is_send && step == 0)
        buf = (char *)block(st, mod(st->rank - 1, w)) + off * st->dsize;
    else
        buf = st->scratch + st->slot_at[is_send ? step - 1 : step] +
              off * st->dsize;
    swy_coll_xfer_t x = {
        .peer = is_send ? mod(st->rank + 1, w) : mod(st->rank - 1, w),
        .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)((size_t)step * st->nchunks + chunk), .buf = buf,
        .bytes = n * st->dsize, .cookie = swy_coll_cookie(0, step, chunk)};
    emit->post(emit->ctx, &x);
}

static swy_status_t rs_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    if (st->nranks == 1) {
        if (a->recvbuf != a->sendbuf && a->count > 0)
            memmove(a->recvbuf, a->sendbuf, a->count * st->dsize);
        return SWY_OK;
    }
    for (int s = 0; s < st->nranks - 1; s++)
        for (size_t c = 0; c < st->nchunks; c++)
            rs_emit(st, emit, s, c, 0);
    for (size_t c = 0; c < st->nchunks; c++)
        rs_emit(st, emit, 0, c, 1);
    return SWY_OK;
}

static swy_status_t rs_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int w = st->nranks;
    int step = swy_coll_cookie_step(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    size_t off = chunk * st->chunk_elems * st->dsize;
    size_t n = xfer->bytes / st->dsize;
    const char *mine = block(st, mod(st->rank - step - 2, w)) + off;
    if (step + 1 < w - 1) {
        swy_coll_reduce(xfer->buf, mine, xfer->buf, n, a->dtype, a->redop);
        rs_emit(st, emit, step + 1, chunk, 1);
        return SWY_OK;
    }
    char *dst = (char *)a->recvbuf + off; /* mine is our own block */
    swy_coll_reduce(dst, mine, xfer->buf, n, a->dtype, a->redop);
    if (a->redop == SWY_AVG)
        swy_coll_scale_avg(dst, n, a->dtype, w);
    return SWY_OK;
}

const swy_coll_algo_t swy_coll_reduce_scatter_ring = {
    .name = "reduce_scatter/ring", .create = rs_create, .start = rs_start,
    .recv_done = rs_recv_done, .destroy = rs_destroy};
