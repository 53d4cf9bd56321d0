/* Allreduce through the comm's shared-memory channel (coll.h), for host
 * buffers on a communicator whose ranks share one host. The cut is the
 * direct algorithm's: rank r owns segment r of W near-equal segments and
 * reduces it; the data moves through shared memory instead of transport
 * messages, so each byte is copied once on its way to a peer instead of
 * twice (into and out of UCX's FIFO), and the peer's reduction reads it in
 * place. The transports carry only empty messages that say a step is done
 * (and wake a rank asleep on their event fds), so failure, timeout and
 * priority handling are the scheduler's as for any op.
 *
 * Segments are cut into chunks (at most the channel's slot); round k
 * moves chunk k of every segment, in slots of parity k % 2, so two rounds
 * overlap. Rank r, in round k:
 *   publish  copy chunk k of segment p of sendbuf into its input slot for
 *            p, for every peer p; send P(k) to every peer;
 *   reduce   once P(k) came from every peer: reduce, in rank order, its
 *            own chunk k of segment r and the peers' input slots for r
 *            into its result slot (AVG scaled there), copy that to
 *            recvbuf; send R(k) to every peer;
 *   gather   on R(k) from peer q: copy q's result slot into recvbuf's
 *            chunk k of segment q;
 *   done     reduced and gathered from every peer: send D(k) to all.
 * D(k) from every peer frees this rank's slots of parity k % 2: round
 * k + 2 may start. The op gives the channel to the next op once every
 * round's D came from every peer: then no peer reads this rank's slots
 * and this rank reads none of theirs. Only the owner computes a segment,
 * so every rank ends with the same bits, the same as the direct
 * algorithm's.
 *
 * Buffers in swy_mem_alloc memory (where every rank can map every
 * other's, ch->mem_ok) skip copies. A rank says at the start of an op,
 * in its descriptor page (ar_desc_t), where its sendbuf and recvbuf lie;
 * a peer reads that on the rank's first P and maps them. A sendbuf
 * there is not staged: publish only sends P(k), and the owners reduce
 * straight from it. A recvbuf there is written by every owner directly
 * (the block copied out of the result slot to its own recvbuf goes to
 * such peers' too), and gather copies nothing from that peer. Each rank
 * decides for its own buffers, so any mix works; the descriptors say it
 * before any message that depends on it.
 *
 * In place (sendbuf == recvbuf): publish(k) reads chunk k of segment q
 * before gather(k) overwrites it, since q sends R(k) only after P(k) from
 * this rank; reduce reads and writes only segment r, which
 * swy_coll_reduce_n allows.
 *
 * Only the ranks' own reads and writes touch a peer's slots, so a rank
 * that dies or disagrees leaves nothing dangling in anyone's buffers:
 * headers catch the disagreement, the control plane the death, and the
 * op fails like any other. An op that fails while it holds the channel
 * leaves the rounds out of step between ranks: later ops on the channel
 * fail (SWY_ERR_TRANSPORT) instead of reading stale slots. */
#include <stdatomic.h>
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/copy.h"
#include "util/list.h"
#include "util/pool.h"
#include "util/status.h"

extern const swy_coll_algo_t swy_coll_allreduce_shm;

enum { MSG_P = 0, MSG_R = 1, MSG_D = 2, MSG_KINDS = 3 };
enum { R_PUBLISHED = 1, R_REDUCED = 2, R_DONE_SENT = 4 };

struct swy_coll_state {
    swy_coll_args_t args;
    swy_coll_shm_t *ch;
    int rank, nranks;
    size_t dsize, chunk_elems, rounds;
    swy_coll_emit_t emit; /* the op's own, kept for the hand-over */
    swy_coll_shm_user_t user;
    size_t rounds_freed;  /* rounds with D(k) from every peer */
    uint8_t *flags;       /* [rounds] R_* */
    uint8_t *posted, *gathered, *freed; /* [rounds] peers counted */
    uint32_t *r_pending;  /* [rounds] R(k) came, slot not yet gathered */
    uint64_t seq;         /* this op's number on the channel */
    /* This rank's buffers in swy_mem_alloc memory (valid), and the
     * peers': their sendbuf or recvbuf here, mapped, or NULL (slots). */
    swy_coll_mem_ref_t my_send, my_recv;
    uint32_t peers_known; /* bit p: p's descriptor read */
    int lent;             /* the descriptor named a buffer (lends) */
    const char *peer_send[SWY_COLL_SHM_MAX_RANKS];
    char *peer_recv[SWY_COLL_SHM_MAX_RANKS];
};

/* A rank's descriptor page (swy_coll_shm_desc): written as its op takes
 * the channel, before P(0); read by the peers at the first P. */
typedef struct {
    uint64_t seq, bytes;
    swy_coll_mem_ref_t send, recv;
} ar_desc_t;
_Static_assert(sizeof(ar_desc_t) <= SWY_COLL_SHM_DESC_RING_AT &&
                   SWY_COLL_SHM_DESC_RING_AT + SWY_COLL_MEM_RING_BYTES <=
                       SWY_COLL_SHM_DESC_BYTES,
               "the descriptor and the ring of frees fit the page");

static size_t seg_offset(const swy_coll_state_t *st, int seg)
{
    return swy_coll_seg_offset(st->args.count, st->nranks, seg);
}

/* Elements of chunk k of segment seg (0 past its end). */
static size_t chunk_len(const swy_coll_state_t *st, int seg, size_t k)
{
    size_t n = seg_offset(st, seg + 1) - seg_offset(st, seg);
    size_t off = k * st->chunk_elems;
    return off >= n ? 0 : SWY_MIN(st->chunk_elems, n - off);
}

static char *user_chunk(const swy_coll_state_t *st, const void *base, int seg,
                        size_t k)
{
    return (char *)base +
           (seg_offset(st, seg) + k * st->chunk_elems) * st->dsize;
}

static void emit_msg(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                     int kind, size_t k, int peer, int is_send)
{
    swy_coll_xfer_t x = {
        .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)((size_t)kind * st->rounds + k), .buf = NULL,
        .bytes = 0, .cookie = swy_coll_cookie(0, kind, k)};
    emit->post(emit->ctx, &x);
}

static void send_all(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                     int kind, size_t k)
{
    /* What this rank wrote to its slots is visible before the message
     * that says so (the transport's own queue orders it too). */
    atomic_thread_fence(memory_order_release);
    for (int s = 1; s < st->nranks; s++)
        emit_msg(st, emit, kind, k, (st->rank + s) % st->nranks, 1);
}

static void try_done(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                     size_t k)
{
    if ((st->flags[k] & (R_REDUCED | R_DONE_SENT)) != R_REDUCED ||
        st->gathered[k] != st->nranks - 1)
        return;
    st->flags[k] |= R_DONE_SENT;
    send_all(st, emit, MSG_D, k);
}

/* Ops of at least this many bytes write recvbuf with non-temporal
 * stores; from the smaller size where ranks outnumber the CPUs, whose
 * time-shared caches rarely keep a result until its reader runs. The
 * thresholds are where streaming stopped losing in the runs that
 * docs/performance.md, "coll", points to. */
#ifndef SWY_COLL_SHM_STREAM_MIN /* -D for experiments only */
#define SWY_COLL_SHM_STREAM_MIN ((size_t)16 << 20)
#endif
#ifndef SWY_COLL_SHM_STREAM_MIN_SHARED
#define SWY_COLL_SHM_STREAM_MIN_SHARED ((size_t)2 << 20)
#endif
#ifndef SWY_COLL_SHM_BLOCK
#define SWY_COLL_SHM_BLOCK ((size_t)16 << 10)
#endif

static int stream_out(const swy_coll_state_t *st)
{
    return st->args.count * st->dsize >=
           (st->ch->ranks_share_cpus ? SWY_COLL_SHM_STREAM_MIN_SHARED
                                     : SWY_COLL_SHM_STREAM_MIN);
}

static void copy_out(const swy_coll_state_t *st, void *dst, const void *src,
                     size_t bytes)
{
    if (stream_out(st))
        swy_copy_stream(dst, src, bytes);
    else
        swy_copy(dst, src, bytes);
}

/* A step's copies or its reduction, cut into pieces of PIECE_BYTES that
 * the helper threads (util/pool.h) share with this one. */
#define PIECE_BYTES ((size_t)64 << 10)

typedef struct {
    swy_coll_state_t *st;
    int reduce;  /* else copies */
    int stream;  /* copies: into recvbuf, streaming */
    int n;       /* copies */
    struct {
        char *dst;
        const char *src;
        size_t bytes;
        size_t first_piece;
    } item[SWY_COLL_SHM_MAX_RANKS];
    size_t pieces;
    /* reduce: chunk k of segment rank */
    size_t k, elems;
} job_t;

static void job_add_copy(job_t *job, char *dst, const char *src,
                         size_t bytes)
{
    if (bytes == 0)
        return;
    job->item[job->n].dst = dst;
    job->item[job->n].src = src;
    job->item[job->n].bytes = bytes;
    job->item[job->n].first_piece = job->pieces;
    job->pieces += (bytes + PIECE_BYTES - 1) / PIECE_BYTES;
    job->n++;
}

static void reduce_range(swy_coll_state_t *st, size_t k, size_t from,
                         size_t to, const void **srcs);

static void job_piece(void *arg, size_t piece)
{
    job_t *job = arg;
    if (job->reduce) {
        size_t per = SWY_MAX(PIECE_BYTES / job->st->dsize, (size_t)1);
        const void *srcs[SWY_COLL_SHM_MAX_RANKS];
        reduce_range(job->st, job->k, piece * per,
                     SWY_MIN(job->elems, (piece + 1) * per), srcs);
        return;
    }
    int i = 0;
    while (i + 1 < job->n && job->item[i + 1].first_piece <= piece)
        i++;
    size_t off = (piece - job->item[i].first_piece) * PIECE_BYTES;
    size_t bytes = SWY_MIN(PIECE_BYTES, job->item[i].bytes - off);
    if (job->stream)
        swy_copy_stream(job->item[i].dst + off, job->item[i].src + off,
                        bytes);
    else
        swy_copy(job->item[i].dst + off, job->item[i].src + off, bytes);
}

/* Copy the results of round k that came (R) into recvbuf. */
static void gather(swy_coll_state_t *st, size_t k)
{
    atomic_thread_fence(memory_order_acquire);
    job_t job = {.st = st, .stream = stream_out(st)};
    for (int q = 0; q < st->nranks && st->r_pending[k] != 0; q++) {
        if (!(st->r_pending[k] & (UINT32_C(1) << q)))
            continue;
        st->r_pending[k] &= ~(UINT32_C(1) << q);
        if (!st->my_recv.valid) /* else q wrote it here itself */
            job_add_copy(&job, user_chunk(st, st->args.recvbuf, q, k),
                         swy_coll_shm_out_slot(st->ch, q, (int)(k & 1)),
                         chunk_len(st, q, k) * st->dsize);
        st->gathered[k]++;
    }
    swy_pool_run(job_piece, &job, job.pieces);
}

/* Elements [from, to) of chunk k of this rank's segment: reduced in rank
 * order into its result slot, in blocks, each copied to recvbuf while it
 * is in L1. */
static void reduce_range(swy_coll_state_t *st, size_t k, size_t from,
                         size_t to, const void **srcs)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank, par = (int)(k & 1);
    char *out = swy_coll_shm_out_slot(st->ch, r, par);
    char *dst = user_chunk(st, a->recvbuf, r, k);
    const char *own = user_chunk(st, a->sendbuf, r, k);
    size_t block = SWY_MAX(SWY_COLL_SHM_BLOCK / st->dsize, (size_t)1);
    for (size_t at = from; at < to; at += block) {
        size_t m = SWY_MIN(block, to - at), off = at * st->dsize;
        for (int p = 0; p < st->nranks; p++)
            srcs[p] = p == r ? own + off
                      : st->peer_send[p] != NULL
                          ? user_chunk(st, st->peer_send[p], r, k) + off
                          : swy_coll_shm_in_slot(st->ch, p, par, r) + off;
        swy_coll_reduce_n(out + off, srcs, st->nranks, m, a->dtype,
                          a->redop);
        if (a->redop == SWY_AVG)
            swy_coll_scale_avg(out + off, m, a->dtype, st->nranks);
        copy_out(st, dst + off, out + off, m * st->dsize);
        for (int q = 0; q < st->nranks; q++)
            if (st->peer_recv[q] != NULL)
                copy_out(st, user_chunk(st, st->peer_recv[q], r, k) + off,
                         out + off, m * st->dsize);
    }
}

/* Whether round k may write this rank's result slot of its parity: no
 * peer reads round k - 2's any more (D from every peer), or none reads
 * it at all (every peer's recvbuf is written directly; known once every
 * P(k) came). */
static int out_slot_free(const swy_coll_state_t *st, size_t k)
{
    if (k < 2 || st->freed[k - 2] == st->nranks - 1)
        return 1;
    for (int q = 0; q < st->nranks; q++)
        if (q != st->rank && st->peer_recv[q] == NULL)
            return 0;
    return 1;
}

static void try_reduce(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                       size_t k)
{
    if ((st->flags[k] & (R_PUBLISHED | R_REDUCED)) != R_PUBLISHED ||
        st->posted[k] != st->nranks - 1 || !out_slot_free(st, k))
        return;
    atomic_thread_fence(memory_order_acquire);
    size_t n = chunk_len(st, st->rank, k);
    size_t per = SWY_MAX(PIECE_BYTES / st->dsize, (size_t)1);
    job_t job = {.st = st, .reduce = 1, .k = k, .elems = n,
                 .pieces = (n + per - 1) / per};
    swy_pool_run(job_piece, &job, job.pieces);
    st->flags[k] |= R_REDUCED;
    send_all(st, emit, MSG_R, k);
    try_done(st, emit, k);
}

/* Round k's slots are ours: stage the peers' chunks, tell them. */
static void run_round(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                      size_t k)
{
    int r = st->rank, par = (int)(k & 1);
    job_t job = {.st = st};
    for (int s = 1; s < st->nranks && !st->my_send.valid; s++) {
        int p = (r + s) % st->nranks;
        job_add_copy(&job, swy_coll_shm_in_slot(st->ch, r, par, p),
                     user_chunk(st, st->args.sendbuf, p, k),
                     chunk_len(st, p, k) * st->dsize);
    }
    swy_pool_run(job_piece, &job, job.pieces);
    st->flags[k] |= R_PUBLISHED;
    send_all(st, emit, MSG_P, k);
    try_reduce(st, emit, k);
}

/* The channel is ours: both parities are free. A sendbuf in
 * swy_mem_alloc memory uses no slots of its own: every round is
 * published at once, and the owners' reductions go at their own pace
 * (their result slots permitting, out_slot_free). */
static void acquire(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    ar_desc_t *d = (ar_desc_t *)swy_coll_shm_desc(st->ch, st->rank);
    d->seq = st->seq;
    d->bytes = st->args.count * st->dsize;
    d->send = st->my_send;
    d->recv = st->my_recv;
    st->lent = st->my_send.valid || st->my_recv.valid;
    size_t first = st->my_send.valid ? st->rounds : (size_t)2;
    for (size_t k = 0; k < SWY_MIN(st->rounds, first); k++)
        run_round(st, emit, k);
}

/* Handed over by the op before: run through this op's own emit. */
static void acquired(swy_coll_shm_user_t *user)
{
    swy_coll_state_t *st = swy_container_of(user, swy_coll_state_t, user);
    acquire(st, &st->emit);
}

static swy_status_t shm_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    swy_coll_shm_t *ch = args->shm;
    if (ch == NULL || ch->nranks != nranks || ch->rank != rank ||
        args->mem != SWY_MEM_HOST || nranks > SWY_COLL_SHM_MAX_RANKS)
        return swy_err_set(SWY_ERR_INTERNAL, "coll", "allreduce/shm without "
                           "a shared-memory channel for these ranks");
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allreduce/shm", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, 0);
    st->ch = ch;
    size_t max_seg = seg_offset(st, 1); /* segment 0 is the longest */
    /* The partition (256 KiB at most by default on one host), within a
     * slot. */
    st->chunk_elems = swy_coll_chunk_elems(
        SWY_MIN(partition_bytes, ch->slot_bytes), st->dsize, max_seg,
        SWY_COLL_TAG_MAX / MSG_KINDS);
    st->rounds = (max_seg + st->chunk_elems - 1) / st->chunk_elems;
    if (st->chunk_elems * st->dsize > ch->slot_bytes) {
        swy_free(st);
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "allreduce/shm of "
                           "%zu elements: more than %zu rounds of %zu bytes",
                           args->count, (size_t)SWY_COLL_TAG_MAX / MSG_KINDS,
                           ch->slot_bytes);
    }
    size_t r = st->rounds;
    st->flags = swy_calloc(r, 4);
    st->r_pending = swy_calloc(r, sizeof(*st->r_pending));
    if (st->flags == NULL || st->r_pending == NULL) {
        swy_free(st->flags);
        swy_free(st->r_pending);
        swy_free(st);
        return SWY_ERR_NO_MEMORY;
    }
    st->posted = st->flags + r;
    st->gathered = st->flags + 2 * r;
    st->freed = st->flags + 3 * r;
    *state_p = st;
    return SWY_OK;
}

static swy_status_t shm_start(swy_coll_state_t *st,
                              const swy_coll_emit_t *emit)
{
    st->emit = *emit;
    st->seq = st->ch->ops++; /* every rank counts every op */
    if (st->ch->mem_ok) {
        size_t bytes = st->args.count * st->dsize;
        swy_coll_mem_find(st->ch->mem, st->args.sendbuf, bytes,
                          &st->my_send);
        swy_coll_mem_find(st->ch->mem, st->args.recvbuf, bytes,
                          &st->my_recv);
    }
    for (int s = 1; s < st->nranks; s++) {
        int p = (st->rank + s) % st->nranks;
        for (size_t k = 0; k < st->rounds; k++)
            for (int kind = 0; kind < MSG_KINDS; kind++)
                emit_msg(st, emit, kind, k, p, 0);
    }
    st->user.acquired = acquired;
    if (swy_coll_shm_enqueue(st->ch, &st->user))
        acquire(st, emit);
    return swy_coll_shm_check(&st->user, swy_coll_allreduce_shm.name);
}

/* Peer p's descriptor, at its first P of the op: map its buffers that
 * are in swy_mem_alloc memory. */
static swy_status_t learn_peer(swy_coll_state_t *st, int p)
{
    if (st->peers_known & (UINT32_C(1) << p))
        return SWY_OK;
    atomic_thread_fence(memory_order_acquire);
    const ar_desc_t *d = (const ar_desc_t *)swy_coll_shm_desc(st->ch, p);
    if (d->seq != st->seq)
        return swy_err_set(SWY_ERR_MISMATCH, "coll", "allreduce/shm: rank %d "
                           "describes op %llu of the channel; rank %d is at "
                           "op %llu", p, (unsigned long long)d->seq,
                           st->rank, (unsigned long long)st->seq);
    size_t bytes = st->args.count * st->dsize;
    /* Before any byte is read from or written into its buffers: ranks
     * whose headers have not arrived yet may still disagree. */
    if ((d->send.valid || d->recv.valid) && d->bytes != bytes)
        return swy_err_set(SWY_ERR_MISMATCH, "coll", "allreduce: rank %d "
                           "reduces %llu bytes, rank %d %zu (count)", p,
                           (unsigned long long)d->bytes, st->rank, bytes);
    char *at = NULL;
    if (d->send.valid) {
        SWY_CHECK(swy_coll_mem_map(st->ch->mem, p, &d->send, bytes, &at));
        st->peer_send[p] = at;
    }
    if (d->recv.valid) {
        SWY_CHECK(swy_coll_mem_map(st->ch->mem, p, &d->recv, bytes, &at));
        st->peer_recv[p] = at;
    }
    st->peers_known |= UINT32_C(1) << p;
    return SWY_OK;
}

static swy_status_t shm_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    SWY_CHECK(swy_coll_shm_check(&st->user, swy_coll_allreduce_shm.name));
    int kind = swy_coll_cookie_step(xfer->cookie);
    size_t k = swy_coll_cookie_chunk(xfer->cookie);
    switch (kind) {
    case MSG_P:
        SWY_CHECK(learn_peer(st, xfer->peer));
        st->posted[k]++;
        try_reduce(st, emit, k);
        break;
    case MSG_R:
        st->r_pending[k] |= UINT32_C(1) << xfer->peer;
        gather(st, k);
        try_done(st, emit, k);
        break;
    default:
        if (++st->freed[k] < st->nranks - 1)
            break;
        if (k + 2 < st->rounds && !st->my_send.valid)
            run_round(st, emit, k + 2);
        else if (k + 2 < st->rounds)
            try_reduce(st, emit, k + 2); /* its result slot is free */
        if (++st->rounds_freed == st->rounds)
            swy_coll_shm_leave(st->ch, &st->user, 0);
        break;
    }
    return SWY_OK;
}

static int shm_lends(const swy_coll_state_t *st)
{
    return st->lent;
}

static void shm_abort(swy_coll_state_t *st)
{
    swy_coll_shm_leave(st->ch, &st->user, 1);
}

static void shm_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    shm_abort(st); /* a no-op unless the op never completed */
    swy_free(st->flags);
    swy_free(st->r_pending);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allreduce_shm = {
    .name = "allreduce/shm", .create = shm_create, .start = shm_start,
    .recv_done = shm_recv_done, .finish = NULL, .destroy = shm_destroy,
    .abort = shm_abort, .lends = shm_lends};
