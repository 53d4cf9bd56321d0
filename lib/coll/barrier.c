/* Barrier by dissemination (Hensgen, Finkel, Manber 1988): in round k each
 * rank signals rank+2^k and waits for rank-2^k; after ceil(log2 W) rounds
 * every rank has transitively heard from every other. Zero-byte messages. */
#include "coll/coll.h"
#include "util/alloc.h"

struct swy_coll_state {
    swy_coll_args_t args; /* no data: dsize unused */
    int rank, nranks, rounds;
    size_t dsize;
};

static swy_status_t br_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "barrier/dissemination", args, rank, nranks,
                          SWY_COLL_ANY_MEM, 0);
    while ((1 << st->rounds) < nranks)
        st->rounds++;
    *state_p = st;
    return SWY_OK;
}

static void br_emit(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    int round, int is_send)
{
    int dist = 1 << round, w = st->nranks;
    swy_coll_xfer_t x = {
        .peer = is_send ? (st->rank + dist) % w : ((st->rank - dist) % w + w) % w,
        .is_send = (uint8_t)is_send, .tag = (uint32_t)round, .buf = NULL,
        .bytes = 0, .cookie = swy_coll_cookie(0, 0, (size_t)round)};
    emit->post(emit->ctx, &x);
}

static swy_status_t br_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    for (int k = 0; k < st->rounds; k++)
        br_emit(st, emit, k, 0);
    if (st->rounds > 0)
        br_emit(st, emit, 0, 1);
    return SWY_OK;
}

static swy_status_t br_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    int round = (int)swy_coll_cookie_chunk(xfer->cookie);
    if (round + 1 < st->rounds)
        br_emit(st, emit, round + 1, 1);
    return SWY_OK;
}

static void br_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_barrier_dissemination = {
    .name = "barrier/dissemination", .create = br_create, .start = br_start,
    .recv_done = br_recv_done, .destroy = br_destroy};
