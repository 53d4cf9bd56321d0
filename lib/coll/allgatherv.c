/* Allgatherv as a ring, as allgather.c with blocks of their own sizes:
 * at step t rank r forwards block r-t to its right neighbour and receives
 * block r-t-1 from its left, chunk by chunk, straight into recvbuf (block
 * j at rdispls[j], recvcounts[j] elements); chunk c of a block is
 * forwarded as soon as it landed. Each rank sends at most the other
 * ranks' data once, whatever the imbalance (a rank sending its own block
 * to every peer would send the largest block W-1 times). An empty block
 * moves nothing. Chunks are cut from the largest block, so every step
 * has the same tag range; the own block is copied in first (nothing when
 * sendbuf already is it: in place).
 *
 * Host buffers only (the own block's copy is a host copy). */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, max_chunks;
};

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static swy_status_t agv_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    size_t steps = nranks > 1 ? (size_t)(nranks - 1) : 1;
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allgatherv/ring", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, steps);
    size_t max_count = 0;
    for (int p = 0; p < nranks; p++)
        max_count = SWY_MAX(max_count, args->recvcounts[p]);
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, max_count, SWY_COLL_TAG_MAX / steps);
    st->max_chunks = (max_count + st->chunk_elems - 1) / st->chunk_elems;
    *state_p = st;
    return SWY_OK;
}

static size_t block_chunks(const swy_coll_state_t *st, int b)
{
    return (st->args.recvcounts[b] + st->chunk_elems - 1) / st->chunk_elems;
}

static void agv_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                     int step, size_t chunk, int is_send)
{
    const swy_coll_args_t *a = &st->args;
    int w = st->nranks;
    int b = is_send ? mod(st->rank - step, w) : mod(st->rank - step - 1, w);
    size_t off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, a->recvcounts[b] - off);
    swy_coll_xfer_t x = {
        .peer = is_send ? mod(st->rank + 1, w) : mod(st->rank - 1, w),
        .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)((size_t)step * st->max_chunks + chunk),
        .buf = (char *)a->recvbuf + (a->rdispls[b] + off) * st->dsize,
        .bytes = n * st->dsize, .cookie = swy_coll_cookie(0, step, chunk)};
    emit->post(emit->ctx, &x);
}

static swy_status_t agv_start(swy_coll_state_t *st,
                              const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank, w = st->nranks;
    char *mine = (char *)a->recvbuf + a->rdispls[r] * st->dsize;
    /* A sendcount other than recvcounts[r] fails the op at the header
     * check (every peer's and ours): copy nothing out of bounds. */
    if ((const char *)a->sendbuf != mine && a->count > 0 &&
        a->count == a->recvcounts[r])
        memmove(mine, a->sendbuf, a->count * st->dsize);
    for (int t = 0; t < w - 1; t++) {
        int b = mod(r - t - 1, w);
        for (size_t c = 0; c < block_chunks(st, b); c++)
            agv_emit(st, emit, t, c, 0);
    }
    if (w > 1)
        for (size_t c = 0; c < block_chunks(st, r); c++)
            agv_emit(st, emit, 0, c, 1);
    return SWY_OK;
}

static swy_status_t agv_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    int step = swy_coll_cookie_step(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    if (step + 1 < st->nranks - 1)
        agv_emit(st, emit, step + 1, chunk, 1);
    return SWY_OK;
}

static void agv_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allgatherv_ring = {
    .name = "allgatherv/ring", .create = agv_create, .start = agv_start,
    .recv_done = agv_recv_done, .destroy = agv_destroy};
