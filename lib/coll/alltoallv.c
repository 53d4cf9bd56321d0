/* Alltoallv as pairwise exchange: step s sends to rank+s and receives from
 * rank-s (step 0 is the rank itself), so at every step each rank has one
 * partner each way and no receiver is a hot spot. Every step is cut into
 * chunks of at most the partition size; steps do not depend on each other,
 * so all receives are posted at once and all sends are ready at once — the
 * scheduler decides what goes on each link next. Nothing waits on one
 * send alone, so they go as bulk (SWY_SEND_HINT_BULK): bandwidth first. */
#include "coll/coll.h"
#include "util/alloc.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems;
};

static swy_status_t a2a_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "alltoallv/pairwise", args, rank, nranks,
                          SWY_COLL_ANY_MEM, 0);
    size_t max_elems = 0;
    for (int p = 0; p < nranks; p++) {
        max_elems = SWY_MAX(max_elems, args->sendcounts[p]);
        max_elems = SWY_MAX(max_elems, args->recvcounts[p]);
    }
    st->chunk_elems = swy_coll_chunk_elems(partition_bytes, st->dsize,
                                           max_elems, SWY_COLL_TAG_MAX);
    *state_p = st;
    return SWY_OK;
}

static void a2a_emit_chunks(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                            int peer, int is_send)
{
    const swy_coll_args_t *a = &st->args;
    size_t count = is_send ? a->sendcounts[peer] : a->recvcounts[peer];
    size_t displ = is_send ? a->sdispls[peer] : a->rdispls[peer];
    char *base = is_send ? (char *)a->sendbuf : (char *)a->recvbuf;
    uint32_t tag = 0;
    for (size_t off = 0; off < count; off += st->chunk_elems, tag++) {
        size_t n = SWY_MIN(st->chunk_elems, count - off);
        swy_coll_xfer_t x = {
            .peer = peer, .is_send = (uint8_t)is_send, .mem = a->mem,
            .tag = tag,
            .buf = base + (displ + off) * st->dsize, .bytes = n * st->dsize,
            .cookie = 0, .bulk = 1};
        emit->post(emit->ctx, &x);
    }
}

static swy_status_t a2a_start(swy_coll_state_t *st,
                              const swy_coll_emit_t *emit)
{
    for (int s = 0; s < st->nranks; s++)
        a2a_emit_chunks(st, emit, (st->rank - s + st->nranks) % st->nranks,
                        0);
    for (int s = 0; s < st->nranks; s++)
        a2a_emit_chunks(st, emit, (st->rank + s) % st->nranks, 1);
    return SWY_OK;
}

static swy_status_t a2a_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    return SWY_OK; /* nothing depends on a received chunk */
}

static void a2a_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_alltoallv_pairwise = {
    .name = "alltoallv/pairwise", .create = a2a_create, .start = a2a_start,
    .recv_done = a2a_recv_done, .destroy = a2a_destroy};
