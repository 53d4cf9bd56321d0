/* Alltoallv across hosts in two stages (Tutel's 2DH and NCCL's PXN
 * shape): the blocks that the ranks of host A send to a rank d of
 * another host B meet first at one rank of A, the forwarder, which sends
 * them to d as one message. The forwarder of d on A is A's local rank
 * (local index of d on B) mod |A|: with M ranks on every host, local
 * rank l of A serves local rank l of every other host (a rail), every
 * rank forwards, and M messages cross between two hosts instead of M^2,
 * each M times larger. d receives one message per remote host; its
 * blocks are laid out by source rank in rank order, so d receives it in
 * place when those blocks lie in that order in its recvbuf (the usual
 * layout), else into scratch and scatters each chunk as it lands.
 *
 * Which blocks: a block to a rank of another host goes through the
 * forwarder when its host has more than one rank and the block holds at
 * most SWY_COLL_HIER_BLOCK_MAX_BYTES; larger blocks go straight to d as
 * in pairwise (no hop, no copy: one message per block is then no cost
 * worth saving). Blocks inside a host go straight too. The sender
 * decides from its sendcount, the receiver from its recvcount, so that
 * neither waits for anything before it posts.
 *
 * Counts: the forwarder needs the sizes of the blocks it gathers. The
 * ranks of a host exchange their sendcounts rows first (one message to
 * each local peer, which also carries the direct block to that peer when
 * the block is small); the forwarder posts its receives once it has
 * them, and sends a rank's message once all its blocks are in.
 *
 * Every transfer is a chunk of at most the partition size, so the
 * policy orders both stages on their links like any other op: a
 * high-priority dispatch's aggregated messages go ahead of a backlog on
 * the uplink. Tags, per ordered pair: inside a host, the counts row
 * with the direct block behind it when that is small (row_carries), else
 * 0 for the row and the direct block's chunks from 1; then the blocks
 * that the receiver forwards, in the order of their final ranks; across
 * hosts,
 * the direct block's chunks from 0, then the aggregated message's (a
 * forwarder's own block may be too large to join its message). */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

enum {
    PH_ROW = 0,  /* a local peer's counts row landed (step: its index) */
    PH_FWD = 1,  /* a block to forward landed (step: the served index) */
    PH_AGG = 2,  /* a chunk of an aggregated message (step: its host) */
    PH_DIRECT = 3 /* a direct block's chunk: nothing to do */
};

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_bytes;
    int nhosts, host, nlocal, local; /* this rank's host, its size, index */
    int *host_first; /* [nhosts + 1]: host h's ranks are members[first..] */
    int *members;    /* [nranks]: ranks by host, in rank order */
    int *local_of;   /* [nranks]: each rank's index on its host */
    uint64_t *rows;  /* [nlocal][nranks]: this host's sendcounts */
    int rows_pending;
    /* A small direct block inside the host travels behind its sender's
     * row, in one message (packed in ride_out, landing in ride_in): per
     * local rank, its place there (SIZE_MAX: apart) and the chunks of
     * the message still to land. */
    char *ride_out, *ride_in;
    size_t ride_out_bytes, ride_in_bytes;
    size_t *ride_out_at, *ride_in_at;
    int *row_chunks;
    /* Forwarding: the remote ranks this rank aggregates for, the place of
     * each one's message in agg, and the chunks still to land for it. */
    int nserved;
    int *served;
    size_t *served_off, *served_bytes;
    int *served_pending;
    char *agg;
    size_t agg_bytes;
    /* Receiving: per host, the scratch of an aggregated message that
     * does not land in place (NULL: in place or none). */
    char **rx;
    char *rx_scratch;
    size_t rx_bytes;
    /* Per rank: the next tag from/to a local peer. */
    uint32_t *tag_to, *tag_from;
};

static int fwd_of(const swy_coll_state_t *st, int host, int dest)
{
    int size = st->host_first[host + 1] - st->host_first[host];
    return st->members[st->host_first[host] + st->local_of[dest] % size];
}

static size_t host_size(const swy_coll_state_t *st, int host)
{
    return (size_t)(st->host_first[host + 1] - st->host_first[host]);
}

static void hier_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_coll_scratch_put(st->agg, st->agg_bytes);
    swy_coll_scratch_put(st->rx_scratch, st->rx_bytes);
    swy_coll_scratch_put(st->ride_out, st->ride_out_bytes);
    swy_coll_scratch_put(st->ride_in, st->ride_in_bytes);
    swy_free(st->ride_out_at);
    swy_free(st->ride_in_at);
    swy_free(st->row_chunks);
    swy_free(st->host_first);
    swy_free(st->members);
    swy_free(st->local_of);
    swy_free(st->rows);
    swy_free(st->served);
    swy_free(st->served_off);
    swy_free(st->served_bytes);
    swy_free(st->served_pending);
    swy_free(st->rx);
    swy_free(st->tag_to);
    swy_free(st->tag_from);
    swy_free(st);
}

static swy_status_t hier_create(const swy_coll_args_t *args, int rank,
                                int nranks, size_t partition_bytes,
                                swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    if (args->host_of == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "alltoallv/hier: "
                           "the ranks' hosts are not known");
    SWY_COLL_CREATE_BEGIN(st, "alltoallv/hier", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, 0);
    size_t w = (size_t)nranks;
    for (int r = 0; r < nranks; r++)
        st->nhosts = SWY_MAX(st->nhosts, args->host_of[r] + 1);
    st->host_first = swy_calloc((size_t)st->nhosts + 1, sizeof(int));
    st->members = swy_malloc(w * sizeof(int));
    st->local_of = swy_malloc(w * sizeof(int));
    st->rx = swy_calloc((size_t)st->nhosts, sizeof(char *));
    st->tag_to = swy_calloc(w, sizeof(uint32_t));
    st->tag_from = swy_calloc(w, sizeof(uint32_t));
    st->ride_out_at = swy_malloc(w * sizeof(size_t));
    st->ride_in_at = swy_malloc(w * sizeof(size_t));
    st->row_chunks = swy_calloc(w, sizeof(int));
    if (st->host_first == NULL || st->members == NULL ||
        st->local_of == NULL || st->rx == NULL || st->tag_to == NULL ||
        st->tag_from == NULL || st->ride_out_at == NULL ||
        st->ride_in_at == NULL || st->row_chunks == NULL)
        goto err_nomem;
    for (int r = 0; r < nranks; r++)
        st->host_first[args->host_of[r] + 1]++;
    for (int h = 0; h < st->nhosts; h++)
        st->host_first[h + 1] += st->host_first[h];
    int *fill = swy_calloc((size_t)st->nhosts, sizeof(int));
    if (fill == NULL)
        goto err_nomem;
    for (int r = 0; r < nranks; r++) {
        int h = args->host_of[r];
        st->local_of[r] = fill[h]++;
        st->members[st->host_first[h] + st->local_of[r]] = r;
    }
    swy_free(fill);
    st->host = args->host_of[rank];
    st->nlocal = (int)host_size(st, st->host);
    st->local = st->local_of[rank];
    st->rows = swy_calloc((size_t)st->nlocal * w, sizeof(uint64_t));
    if (st->rows == NULL)
        goto err_nomem;
    for (int d = 0; d < nranks; d++)
        st->rows[(size_t)st->local * w + (size_t)d] = args->sendcounts[d];
    st->rows_pending = st->nlocal - 1;
    /* Cut by the partition alone, alike on every rank whatever its
     * counts; a message of more chunks than tags fails when posted. */
    st->chunk_bytes =
        swy_coll_chunk_elems(partition_bytes, st->dsize, 0, 1) * st->dsize;
    *state_p = st;
    return SWY_OK;

err_nomem:
    hier_destroy(st);
    return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: out of "
                       "memory");
}

static size_t chunks_of(const swy_coll_state_t *st, size_t bytes)
{
    return (bytes + st->chunk_bytes - 1) / st->chunk_bytes;
}

/* Emit the chunks of bytes at buf to or from peer, tags from *tag on. */
static swy_status_t emit_chunks(swy_coll_state_t *st,
                                const swy_coll_emit_t *emit, int peer,
                                int is_send, char *buf, size_t bytes,
                                uint32_t *tag, int phase, int step)
{
    size_t n = chunks_of(st, bytes);
    if ((size_t)*tag + n > (size_t)SWY_COLL_TAG_MAX)
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "alltoallv/hier: "
                           "%zu bytes between ranks %d and %d need more "
                           "than %u chunks of %zu bytes", bytes, st->rank,
                           peer, (unsigned)SWY_COLL_TAG_MAX, st->chunk_bytes);
    for (size_t c = 0; c < n; c++) {
        size_t off = c * st->chunk_bytes;
        swy_coll_xfer_t x = {
            .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
            .tag = (*tag)++, .buf = buf + off,
            .bytes = SWY_MIN(st->chunk_bytes, bytes - off),
            .cookie = swy_coll_cookie(phase, step, c), .bulk = 1};
        emit->post(emit->ctx, &x);
    }
    return SWY_OK;
}

static char *send_block(const swy_coll_state_t *st, int dest)
{
    return (char *)st->args.sendbuf + st->args.sdispls[dest] * st->dsize;
}

static char *recv_block(const swy_coll_state_t *st, int src)
{
    return (char *)st->args.recvbuf + st->args.rdispls[src] * st->dsize;
}

/* Does a block of bytes from a rank of host h to a rank of another host
 * go through the forwarder? The same answer for its sender (its
 * sendcount), its forwarder (the sender's row) and its receiver (its
 * recvcount): each decides alone, so that nothing waits for the rows
 * but the forwarder. */
static int aggregates(const swy_coll_state_t *st, int h, size_t bytes)
{
    return host_size(st, h) > 1 && bytes > 0 &&
           bytes <= SWY_COLL_HIER_BLOCK_MAX_BYTES;
}

/* The message this rank gets from host h's forwarder: its bytes (0: none)
 * and whether its blocks (h's aggregated ones, in rank order) lie in
 * that order, back to back, in recvbuf, from *first_p's. */
static size_t agg_message(const swy_coll_state_t *st, int h, int *in_place_p,
                          int *first_p)
{
    const swy_coll_args_t *a = &st->args;
    size_t total = 0, next = 0;
    int first = -1, in_place = 1;
    for (int i = st->host_first[h]; i < st->host_first[h + 1]; i++) {
        int s = st->members[i];
        if (!aggregates(st, h, a->recvcounts[s] * st->dsize))
            continue;
        if (first >= 0 && a->rdispls[s] != next)
            in_place = 0;
        if (first < 0)
            first = s;
        next = a->rdispls[s] + a->recvcounts[s];
        total += a->recvcounts[s] * st->dsize;
    }
    *in_place_p = in_place;
    *first_p = first;
    return total;
}

/* What this rank receives from host h (another one): the aggregated
 * message, in place or into st->rx[h], and the other blocks straight. */
static swy_status_t post_remote_recvs(swy_coll_state_t *st,
                                      const swy_coll_emit_t *emit, int h)
{
    const swy_coll_args_t *a = &st->args;
    for (int i = st->host_first[h]; i < st->host_first[h + 1]; i++) {
        int s = st->members[i];
        size_t bytes = a->recvcounts[s] * st->dsize;
        uint32_t tag = 0;
        if (!aggregates(st, h, bytes))
            SWY_CHECK(emit_chunks(st, emit, s, 0, recv_block(st, s), bytes,
                                  &tag, PH_DIRECT, 0));
    }
    int in_place, first;
    size_t total = agg_message(st, h, &in_place, &first);
    if (total == 0)
        return SWY_OK;
    char *buf = in_place ? recv_block(st, first) : st->rx[h];
    int fwd = fwd_of(st, h, st->rank);
    size_t fwd_own = a->recvcounts[fwd] * st->dsize;
    uint32_t tag =
        aggregates(st, h, fwd_own) ? 0 : (uint32_t)chunks_of(st, fwd_own);
    return emit_chunks(st, emit, fwd, 0, buf, total, &tag, PH_AGG, h);
}

/* Bytes of host h's aggregated message that land in scratch. */
static size_t rx_scratch_bytes(const swy_coll_state_t *st, int h)
{
    int in_place, first;
    size_t total = agg_message(st, h, &in_place, &first);
    return in_place ? 0 : total;
}

/* This rank's blocks to other hosts: those to forward, to their
 * forwarders in the order of their final ranks (as the forwarders number
 * them), its own share kept for plan_forwarding; then the others
 * straight, to rank + 1, rank + 2, ... as pairwise does (ranks that all
 * began with the same destination would pile onto its link at once). */
static swy_status_t send_remote(swy_coll_state_t *st,
                                const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int A = st->host;
    for (int d = 0; d < st->nranks; d++) {
        int fwd = fwd_of(st, A, d);
        if (a->host_of[d] != A && fwd != st->rank &&
            aggregates(st, A, a->sendcounts[d] * st->dsize))
            SWY_CHECK(emit_chunks(st, emit, fwd, 1, send_block(st, d),
                                  a->sendcounts[d] * st->dsize,
                                  &st->tag_to[fwd], PH_DIRECT, 0));
    }
    for (int s = 1; s < st->nranks; s++) {
        int d = (st->rank + s) % st->nranks;
        size_t bytes = a->sendcounts[d] * st->dsize;
        uint32_t tag = 0;
        if (a->host_of[d] != A && !aggregates(st, A, bytes))
            SWY_CHECK(emit_chunks(st, emit, d, 1, send_block(st, d), bytes,
                                  &tag, PH_DIRECT, 0));
    }
    return SWY_OK;
}

/* Does the direct block between two ranks of this host (bytes) travel
 * behind the sender's row? Small ones do: a message less, for a copy
 * each side; both sides decide alike from their counts. */
static int row_carries(const swy_coll_state_t *st, size_t bytes)
{
    return bytes <= SWY_COLL_HIER_BLOCK_MAX_BYTES;
}

/* Lay out and get the scratch of the rows that carry blocks. */
static swy_status_t ride_scratch(swy_coll_state_t *st)
{
    const swy_coll_args_t *a = &st->args;
    size_t row = (size_t)st->nranks * sizeof(uint64_t);
    for (int i = st->host_first[st->host]; i < st->host_first[st->host + 1];
         i++) {
        int p = st->members[i];
        size_t out = a->sendcounts[p] * st->dsize;
        size_t in = a->recvcounts[p] * st->dsize;
        st->ride_out_at[p] = st->ride_in_at[p] = SIZE_MAX;
        if (p == st->rank)
            continue;
        if (row_carries(st, out)) {
            st->ride_out_at[p] = st->ride_out_bytes;
            st->ride_out_bytes += row + out;
        }
        if (row_carries(st, in)) {
            st->ride_in_at[p] = st->ride_in_bytes;
            st->ride_in_bytes += row + in;
        }
    }
    if (st->ride_out_bytes > 0 &&
        (st->ride_out = swy_coll_scratch_get(st->ride_out_bytes)) == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: no "
                           "%zu bytes of scratch", st->ride_out_bytes);
    if (st->ride_in_bytes > 0 &&
        (st->ride_in = swy_coll_scratch_get(st->ride_in_bytes)) == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: no "
                           "%zu bytes of scratch", st->ride_in_bytes);
    return SWY_OK;
}

static swy_status_t hier_start(swy_coll_state_t *st,
                               const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    size_t w = (size_t)st->nranks;
    int A = st->host;
    /* Scratch for aggregated messages that cannot land in place. */
    for (int h = 0; h < st->nhosts; h++)
        if (h != A)
            st->rx_bytes += rx_scratch_bytes(st, h);
    if (st->rx_bytes > 0) {
        st->rx_scratch = swy_coll_scratch_get(st->rx_bytes);
        if (st->rx_scratch == NULL)
            return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: "
                               "no %zu bytes of scratch", st->rx_bytes);
        size_t off = 0;
        for (int h = 0; h < st->nhosts; h++) {
            size_t bytes = h != A ? rx_scratch_bytes(st, h) : 0;
            if (bytes > 0)
                st->rx[h] = st->rx_scratch + off;
            off += bytes;
        }
    }
    SWY_CHECK(ride_scratch(st));
    /* Receives: the local peers' rows and direct blocks, then each
     * remote host's. */
    for (int i = st->host_first[A]; i < st->host_first[A + 1]; i++) {
        int s = st->members[i];
        size_t bytes = a->recvcounts[s] * st->dsize;
        st->tag_from[s] = 0;
        if (s != st->rank && st->ride_in_at[s] != SIZE_MAX) {
            /* the row, then the block */
            size_t len = w * sizeof(uint64_t) + bytes;
            st->row_chunks[s] = (int)chunks_of(st, len);
            SWY_CHECK(emit_chunks(st, emit, s, 0,
                                  st->ride_in + st->ride_in_at[s], len,
                                  &st->tag_from[s], PH_ROW,
                                  st->local_of[s]));
            continue;
        }
        if (s != st->rank) {
            st->row_chunks[s] = (int)chunks_of(st, w * sizeof(uint64_t));
            SWY_CHECK(emit_chunks(st, emit, s, 0,
                                  (char *)(st->rows +
                                           (size_t)st->local_of[s] * w),
                                  w * sizeof(uint64_t), &st->tag_from[s],
                                  PH_ROW, st->local_of[s]));
        }
        st->tag_from[s] = 1;
        SWY_CHECK(emit_chunks(st, emit, s, 0, recv_block(st, s), bytes,
                              &st->tag_from[s], PH_DIRECT, 0));
    }
    for (int h = 0; h < st->nhosts; h++)
        if (h != A)
            SWY_CHECK(post_remote_recvs(st, emit, h));
    /* Sends: this rank's row and direct blocks inside the host, to the
     * next local rank first (as send_remote), then the rest. */
    for (int i = 0; i < st->nlocal; i++) {
        int d = st->members[st->host_first[A] + (st->local + i) % st->nlocal];
        size_t bytes = a->sendcounts[d] * st->dsize;
        size_t row = w * sizeof(uint64_t);
        st->tag_to[d] = 0;
        if (d != st->rank && st->ride_out_at[d] != SIZE_MAX) {
            char *msg = st->ride_out + st->ride_out_at[d];
            memcpy(msg, st->rows + (size_t)st->local * w, row);
            memcpy(msg + row, send_block(st, d), bytes);
            SWY_CHECK(emit_chunks(st, emit, d, 1, msg, row + bytes,
                                  &st->tag_to[d], PH_ROW, st->local));
            continue;
        }
        if (d != st->rank)
            SWY_CHECK(emit_chunks(st, emit, d, 1,
                                  (char *)(st->rows + (size_t)st->local * w),
                                  row, &st->tag_to[d], PH_ROW, st->local));
        st->tag_to[d] = 1;
        SWY_CHECK(emit_chunks(st, emit, d, 1, send_block(st, d), bytes,
                              &st->tag_to[d], PH_DIRECT, 0));
    }
    return send_remote(st, emit);
}

static swy_status_t send_aggregate(swy_coll_state_t *st,
                                   const swy_coll_emit_t *emit, int j)
{
    /* After this rank's own block to the same rank, if that went
     * straight. */
    size_t own = st->args.sendcounts[st->served[j]] * st->dsize;
    uint32_t tag =
        aggregates(st, st->host, own) ? 0 : (uint32_t)chunks_of(st, own);
    return emit_chunks(st, emit, st->served[j], 1,
                       st->agg + st->served_off[j], st->served_bytes[j],
                       &tag, PH_AGG, j);
}

/* Bytes of local rank k's block to dest, from the rows, if it goes
 * through the forwarder; else 0. */
static size_t fwd_block(const swy_coll_state_t *st, int k, int dest)
{
    size_t bytes =
        st->rows[(size_t)k * (size_t)st->nranks + (size_t)dest] * st->dsize;
    return aggregates(st, st->host, bytes) ? bytes : 0;
}

/* Every row is in: for each remote rank this rank forwards to, receive
 * its host's blocks into one message (its own copied), in rank order;
 * send the message once they are all in. */
static swy_status_t plan_forwarding(swy_coll_state_t *st,
                                    const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int A = st->host;
    size_t w = (size_t)st->nranks;
    st->served = swy_malloc((w + 1) * sizeof(int));
    st->served_off = swy_malloc((w + 1) * sizeof(size_t));
    st->served_bytes = swy_malloc((w + 1) * sizeof(size_t));
    st->served_pending = swy_calloc(w + 1, sizeof(int));
    if (st->served == NULL || st->served_off == NULL ||
        st->served_bytes == NULL || st->served_pending == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: out "
                           "of memory");
    for (int d = 0; d < st->nranks; d++) {
        if (a->host_of[d] == A || fwd_of(st, A, d) != st->rank)
            continue;
        size_t bytes = 0;
        for (int k = 0; k < st->nlocal; k++)
            bytes += fwd_block(st, k, d);
        if (bytes == 0)
            continue;
        st->served[st->nserved] = d;
        st->served_off[st->nserved] = st->agg_bytes;
        st->served_bytes[st->nserved] = bytes;
        st->agg_bytes += bytes;
        st->nserved++;
    }
    if (st->agg_bytes > 0) {
        st->agg = swy_coll_scratch_get(st->agg_bytes);
        if (st->agg == NULL)
            return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/hier: "
                               "no %zu bytes of scratch", st->agg_bytes);
    }
    for (int j = 0; j < st->nserved; j++) {
        int d = st->served[j];
        char *at = st->agg + st->served_off[j];
        for (int k = 0; k < st->nlocal; k++) {
            int s = st->members[st->host_first[A] + k];
            size_t bytes = fwd_block(st, k, d);
            if (s == st->rank)
                memcpy(at, send_block(st, d), bytes);
            else {
                st->served_pending[j] += (int)chunks_of(st, bytes);
                SWY_CHECK(emit_chunks(st, emit, s, 0, at, bytes,
                                      &st->tag_from[s], PH_FWD, j));
            }
            at += bytes;
        }
    }
    for (int j = 0; j < st->nserved; j++)
        if (st->served_pending[j] == 0)
            SWY_CHECK(send_aggregate(st, emit, j));
    return SWY_OK;
}

/* A chunk of host h's aggregated message landed in scratch: copy its
 * pieces to their sources' places. */
static void scatter_chunk(swy_coll_state_t *st, int h, size_t chunk,
                          size_t bytes)
{
    const swy_coll_args_t *a = &st->args;
    size_t lo = chunk * st->chunk_bytes, hi = lo + bytes, at = 0;
    for (int i = st->host_first[h]; i < st->host_first[h + 1] && at < hi;
         i++) {
        int s = st->members[i];
        size_t len = a->recvcounts[s] * st->dsize;
        if (!aggregates(st, h, len))
            continue;
        size_t from = SWY_MAX(lo, at), to = SWY_MIN(hi, at + len);
        if (from < to)
            memcpy(recv_block(st, s) + (from - at), st->rx[h] + from,
                   to - from);
        at += len;
    }
}

static swy_status_t hier_recv_done(swy_coll_state_t *st,
                                   const swy_coll_xfer_t *xfer,
                                   const swy_coll_emit_t *emit)
{
    int step = swy_coll_cookie_step(xfer->cookie);
    switch (swy_coll_cookie_phase(xfer->cookie)) {
    case PH_ROW: {
        int s = st->members[st->host_first[st->host] + step];
        if (--st->row_chunks[s] > 0)
            return SWY_OK;
        if (st->ride_in_at[s] != SIZE_MAX) {
            size_t row = (size_t)st->nranks * sizeof(uint64_t);
            const char *msg = st->ride_in + st->ride_in_at[s];
            memcpy(st->rows + (size_t)step * (size_t)st->nranks, msg, row);
            memcpy(recv_block(st, s), msg + row,
                   st->args.recvcounts[s] * st->dsize);
        }
        if (--st->rows_pending == 0)
            return plan_forwarding(st, emit);
        return SWY_OK;
    }
    case PH_FWD:
        if (--st->served_pending[step] == 0)
            return send_aggregate(st, emit, step);
        return SWY_OK;
    case PH_AGG:
        if (st->rx[step] != NULL)
            scatter_chunk(st, step, swy_coll_cookie_chunk(xfer->cookie),
                          xfer->bytes);
        return SWY_OK;
    default:
        return SWY_OK;
    }
}

const swy_coll_algo_t swy_coll_alltoallv_hier = {
    .name = "alltoallv/hier", .create = hier_create, .start = hier_start,
    .recv_done = hier_recv_done, .destroy = hier_destroy};
