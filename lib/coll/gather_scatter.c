/* Gather and scatter as direct exchanges with the root: every other rank
 * sends its block to the root (gather) or receives its block from it
 * (scatter), cut into chunks of at most the partition size. The blocks
 * do not depend on each other, so, as in alltoallv.c, the root posts all
 * its receives (or sends) at once, in the order of the ranks after it,
 * and the scheduler decides which link goes next; nothing waits on one
 * send alone, so sends go as bulk. The root's own block is a copy
 * (nothing when it is in place: gather's sendbuf at the root's block of
 * recvbuf, scatter's recvbuf at the root's block of sendbuf).
 *
 * The root's link carries W-1 blocks either way, which no tree shortens;
 * a tree would save latency for small blocks on many ranks only.
 *
 * Host buffers only (the own block's copy is a host copy). */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks, gather;
    size_t dsize, chunk_elems;
};

static swy_status_t gs_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    int gather = args->kind == SWY_COLL_GATHER;
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, gather ? "gather/direct" : "scatter/direct",
                          args, rank, nranks, SWY_COLL_HOST_ONLY, 1);
    st->gather = gather;
    /* Tags count the chunks of one block (one block per pair of ranks):
     * chunk_elems grows until they fit. */
    st->chunk_elems = swy_coll_chunk_elems(partition_bytes, st->dsize,
                                           args->count, SWY_COLL_TAG_MAX);
    *state_p = st;
    return SWY_OK;
}

/* Every chunk of one block, sent to or received from `peer`: the user's
 * own buffer on a non-root rank, block `peer` of the root's buffer. */
static void gs_emit_block(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                          int peer)
{
    const swy_coll_args_t *a = &st->args;
    int root = st->rank == a->root;
    int is_send = st->gather ? !root : root;
    char *base = is_send ? (char *)a->sendbuf : (char *)a->recvbuf;
    if (root)
        base += (size_t)peer * a->count * st->dsize;
    uint32_t tag = 0;
    for (size_t off = 0; off < a->count; off += st->chunk_elems, tag++) {
        size_t n = SWY_MIN(st->chunk_elems, a->count - off);
        swy_coll_xfer_t x = {
            .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
            .tag = tag, .buf = base + off * st->dsize,
            .bytes = n * st->dsize, .cookie = 0, .bulk = (uint8_t)is_send};
        emit->post(emit->ctx, &x);
    }
}

static swy_status_t gs_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int w = st->nranks, r = st->rank;
    size_t bytes = a->count * st->dsize;
    if (r != a->root) {
        gs_emit_block(st, emit, a->root);
        return SWY_OK;
    }
    /* The root's own block: from sendbuf into its place in recvbuf
     * (gather), from its place in sendbuf into recvbuf (scatter). */
    const char *src = (const char *)a->sendbuf +
                      (st->gather ? 0 : (size_t)r * bytes);
    char *dst = (char *)a->recvbuf + (st->gather ? (size_t)r * bytes : 0);
    if (src != dst && bytes > 0)
        memmove(dst, src, bytes);
    for (int s = 1; s < w; s++)
        gs_emit_block(st, emit, (r + s) % w);
    return SWY_OK;
}

static swy_status_t gs_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    return SWY_OK; /* nothing depends on a received chunk */
}

static void gs_destroy(swy_coll_state_t *st)
{
    swy_free(st);
}

const swy_coll_algo_t swy_coll_gather_direct = {
    .name = "gather/direct", .create = gs_create, .start = gs_start,
    .recv_done = gs_recv_done, .destroy = gs_destroy};

const swy_coll_algo_t swy_coll_scatter_direct = {
    .name = "scatter/direct", .create = gs_create, .start = gs_start,
    .recv_done = gs_recv_done, .destroy = gs_destroy};
