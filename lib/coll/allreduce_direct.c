/* Allreduce in two phases for host buffers: a direct reduce-scatter, where
 * every rank sends segment j of its sendbuf straight to rank j, and a
 * direct allgather, where every rank sends its reduced segment to all
 * others. The same bytes per rank as the ring (2 (W-1)/W of the buffer)
 * in 2 steps instead of the ring's 2 (W-1) or halving/doubling's
 * 2 log2(W): on a few cores shared by all ranks each step costs wake-ups
 * of every rank, so fewer steps win at mid sizes (swy_coll_algo_for()
 * chooses, see algos.c). Every rank talks to every other one, so over a
 * slow inter-node link it moves W-1 times the ring's bytes per peer: the
 * automatic choice keeps it to small W.
 *
 * Segment j is the j-th of W near-equal slices (swy_coll_seg_offset), cut
 * into chunks of at most the partition size. Rank r receives chunk c of
 * segment r from every peer into a scratch slot per peer; once all W-1
 * partials of chunk c landed (in any order), it reduces them with its own
 * in rank order 0..W-1 into recvbuf, so the result does not depend on the
 * order of arrival, and only the owner computes it, so every rank ends
 * with identical bits. That chunk then leaves for every peer at once: the
 * allgather pipelines with the reduce-scatter per chunk. Allgather chunks
 * land straight in recvbuf.
 *
 * In place (sendbuf == recvbuf): the reduction of segment r overwrites
 * rank r's own input, one of its sources; swy_coll_reduce_n allows that.
 * Segment j of recvbuf is overwritten by rank j's allgather only after
 * rank j received our segment j (it reduced that chunk), so our
 * reduce-scatter send of it has been delivered. */

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

enum { PHASE_RS = 0, PHASE_AG = 1 };

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, max_chunks;
    size_t own_count;  /* elements of segment rank */
    char *scratch;     /* W-1 slots of own_count elements, by peer */
    size_t scratch_bytes;
    size_t slot0, slot_stride; /* bytes: the first slot, from one to next */
    uint32_t *landed;  /* [chunks of own segment] partials landed */
    const void **srcs; /* [nranks] the inputs of a chunk's reduction */
};

static size_t seg_offset(const swy_coll_state_t *st, int seg)
{
    return swy_coll_seg_offset(st->args.count, st->nranks, seg);
}

static size_t seg_chunks(const swy_coll_state_t *st, int seg)
{
    size_t n = seg_offset(st, seg + 1) - seg_offset(st, seg);
    return (n + st->chunk_elems - 1) / st->chunk_elems;
}

/* Peers' scratch slots skip our own rank. */
static char *slot(const swy_coll_state_t *st, int peer, size_t chunk)
{
    size_t idx = (size_t)(peer < st->rank ? peer : peer - 1);
    return st->scratch + st->slot0 + idx * st->slot_stride +
           chunk * st->chunk_elems * st->dsize;
}

/* Chunk `chunk` of segment seg, to or from peer. Tags: reduce-scatter
 * chunks first, allgather chunks after max_chunks (the largest segment's
 * count, the same on every rank). */
static void emit_chunk(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                       int phase, int peer, int seg, size_t chunk,
                       int is_send, char *buf)
{
    size_t n = seg_offset(st, seg + 1) - seg_offset(st, seg);
    size_t off = chunk * st->chunk_elems;
    swy_coll_xfer_t x = {
        .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)((phase == PHASE_AG ? st->max_chunks : 0) + chunk),
        .buf = buf, .bytes = SWY_MIN(st->chunk_elems, n - off) * st->dsize,
        .cookie = swy_coll_cookie(phase, peer, chunk)};
    emit->post(emit->ctx, &x);
}

static char *user_chunk(const swy_coll_state_t *st, const void *base, int seg,
                        size_t chunk)
{
    return (char *)base +
           (seg_offset(st, seg) + chunk * st->chunk_elems) * st->dsize;
}

static swy_status_t direct_create(const swy_coll_args_t *args, int rank,
                                  int nranks, size_t partition_bytes,
                                  swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allreduce/direct", args, rank, nranks,
                          SWY_COLL_ANY_MEM, 2);
    size_t max_seg = seg_offset(st, 1); /* segment 0 is the longest */
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, max_seg, SWY_COLL_TAG_MAX / 2);
    st->max_chunks = (max_seg + st->chunk_elems - 1) / st->chunk_elems;
    st->own_count = seg_offset(st, rank + 1) - seg_offset(st, rank);
    if (st->own_count > 0) {
        /* Every peer sends our segment from its sendbuf. */
        const char *mirror = (const char *)args->sendbuf +
                             seg_offset(st, rank) * st->dsize;
        size_t bytes = 0, chunks = seg_chunks(st, rank);
        int overflow = 0;
        for (int i = 0; i < nranks - 1 && !overflow; i++) {
            size_t at;
            overflow = swy_coll_slot_place(&bytes, st->own_count * st->dsize,
                                           mirror, &at) != 0;
            if (i == 0)
                st->slot0 = at;
            else if (i == 1)
                st->slot_stride = at - st->slot0;
        }
        if (overflow || (st->scratch = swy_coll_scratch_get(bytes)) == NULL ||
            (st->landed = swy_calloc(chunks, sizeof(*st->landed))) == NULL ||
            (st->srcs = swy_calloc((size_t)nranks, sizeof(*st->srcs))) ==
                NULL) {
            swy_coll_scratch_put(st->scratch, bytes);
            swy_free(st->landed);
            swy_free(st);
            return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "allreduce/direct "
                               "of %zu elements on %d ranks: no memory for "
                               "the %d partials of %zu elements",
                               args->count, nranks, nranks - 1,
                               st->own_count);
        }
        st->scratch_bytes = bytes;
    }
    *state_p = st;
    return SWY_OK;
}

static swy_status_t direct_start(swy_coll_state_t *st,
                                 const swy_coll_emit_t *emit)
{
    int r = st->rank, w = st->nranks;
    /* Receives first: partials of our segment, then the others' results.
     * Peers in the order r+1, r+2, ... so that the ranks do not all
     * start with rank 0. */
    for (int s = 1; s < w; s++) {
        int p = (r + s) % w;
        for (size_t c = 0; c < seg_chunks(st, r); c++)
            emit_chunk(st, emit, PHASE_RS, p, r, c, 0, slot(st, p, c));
        for (size_t c = 0; c < seg_chunks(st, p); c++)
            emit_chunk(st, emit, PHASE_AG, p, p, c, 0,
                       user_chunk(st, st->args.recvbuf, p, c));
    }
    /* Chunk-major, so that every owner can reduce its first chunk as
     * soon as possible. */
    for (size_t c = 0; c < st->max_chunks; c++)
        for (int s = 1; s < w; s++) {
            int p = (r + s) % w;
            if (c < seg_chunks(st, p))
                emit_chunk(st, emit, PHASE_RS, p, p, c, 1,
                           user_chunk(st, st->args.sendbuf, p, c));
        }
    return SWY_OK;
}

/* Every partial of chunk c is here: reduce in rank order into recvbuf, in
 * one pass over the W inputs (swy_coll_reduce_n; in place, recvbuf is our
 * own input, which it may be). */
static void reduce_chunk(swy_coll_state_t *st, size_t c)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank, w = st->nranks;
    size_t n = SWY_MIN(st->chunk_elems, st->own_count - c * st->chunk_elems);
    char *dst = user_chunk(st, a->recvbuf, r, c);
    const void **in = st->srcs;
    for (int p = 0; p < w; p++)
        in[p] = p == r ? user_chunk(st, a->sendbuf, r, c) : slot(st, p, c);
    swy_coll_reduce_n(dst, in, w, n, a->dtype, a->redop);
    if (a->redop == SWY_AVG)
        swy_coll_scale_avg(dst, n, a->dtype, w);
}

static swy_status_t direct_recv_done(swy_coll_state_t *st,
                                     const swy_coll_xfer_t *xfer,
                                     const swy_coll_emit_t *emit)
{
    int phase = swy_coll_cookie_phase(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    if (phase == PHASE_AG)
        return SWY_OK; /* landed in recvbuf: nothing depends on it */
    if (++st->landed[chunk] < (uint32_t)(st->nranks - 1))
        return SWY_OK;
    reduce_chunk(st, chunk);
    int r = st->rank;
    for (int s = 1; s < st->nranks; s++)
        emit_chunk(st, emit, PHASE_AG, (r + s) % st->nranks, r, chunk, 1,
                   user_chunk(st, st->args.recvbuf, r, chunk));
    return SWY_OK;
}

static void direct_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_free(st->landed);
    swy_free(st->srcs);
    swy_coll_scratch_put(st->scratch, st->scratch_bytes);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allreduce_direct = {
    .name = "allreduce/direct", .create = direct_create,
    .start = direct_start, .recv_done = direct_recv_done, .finish = NULL,
    .destroy = direct_destroy};
