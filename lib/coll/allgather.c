/* Allgather as a ring: at step t rank r forwards block r-t to its right
 * neighbour and receives block r-t-1 from its left, chunk by chunk; chunk c
 * of a block is forwarded as soon as it landed (pipelined steps). The own
 * block is copied in by hand (device copy for device buffers). */
#include "coll/coll.h"
#include "transport/device.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, nchunks;
};

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static swy_status_t ag_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    size_t steps = nranks > 1 ? (size_t)(nranks - 1) : 1;
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allgather/ring", args, rank, nranks,
                          SWY_COLL_ANY_MEM, steps);
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, args->count, SWY_COLL_TAG_MAX / steps);
    st->nchunks = (args->count + st->chunk_elems - 1) / st->chunk_elems;
    *state_p = st;
    return SWY_OK;
}

static void ag_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    int step, size_t chunk, int is_send)
{
    int w = st->nranks;
    int block = is_send ? mod(st->rank - step, w) : mod(st->rank - step - 1, w);
    size_t off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, st->args.count - off);
    swy_coll_xfer_t x = {
        .peer = is_send ? mod(st->rank + 1, w) : mod(st->rank - 1, w),
        .is_send = (uint8_t)is_send, .mem = st->args.mem,
        .tag = (uint32_t)((size_t)step * st->nchunks + chunk),
        .buf = (char *)st->args.recvbuf +
               ((size_t)block * st->args.count + off) * st->dsize,
        .bytes = n * st->dsize,
        .cookie = swy_coll_cookie(0, step, chunk)};
    emit->post(emit->ctx, &x);
}

static swy_status_t ag_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    char *mine = (char *)a->recvbuf + (size_t)st->rank * a->count * st->dsize;
    if ((const char *)a->sendbuf != mine && a->count > 0)
        SWY_CHECK(swy_device_copy(mine, a->sendbuf, a->count * st->dsize,
                                  a->mem));
    for (int t = 0; t < st->nranks - 1; t++)
        for (size_t c = 0; c < st->nchunks; c++)
            ag_emit(st, emit, t, c, 0);
    if (st->nranks > 1)
        for (size_t c = 0; c < st->nchunks; c++)
            ag_emit(st, emit, 0, c, 1);
    return SWY_OK;
}

static swy_status_t ag_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    int step = swy_coll_cookie_step(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    if (step + 1 < st->nranks - 1)
        ag_emit(st, emit, step + 1, chunk, 1);
    return SWY_OK;
}

static void ag_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allgather_ring = {
    .name = "allgather/ring", .create = ag_create, .start = ag_start,
    .recv_done = ag_recv_done, .destroy = ag_destroy};
