/* Alltoallv through the comm's alltoallv channel (coll.h), for host
 * buffers on ranks that share one host. Each block from rank r to rank p
 * moves in chunks of at most a slot, in slots of two parities: r copies
 * chunk k into its slot for p of parity k % 2 and sends P(k) to p; p
 * copies it out into recvbuf and sends D(k) back, which frees that slot
 * for chunk k + 2. The block to itself is one local copy. Only empty
 * messages go through the transports (failure, timeout and priority as
 * for any op). Every pair advances on its own; the op gives the channel
 * to the next op once every D came back (nobody reads this rank's slots)
 * and every P was served (it reads nobody's).
 *
 * Two copies per byte instead of the one of a CMA rendezvous, but both
 * in user space and through slots that stay in cache: where ranks
 * outnumber the CPUs (the 2-core test machine), the kernel's copy of
 * process_vm_readv was the slower path (docs/performance.md, "coll").
 * swy_coll_alltoallv_choose() decides.
 *
 * Unless the cores are far apart: a virtual machine's host may move its
 * CPUs to cores that share no cache, and then every byte written into a
 * slot crawls to its reader. So a block may also be pulled (coll.h,
 * swy_coll_pull_t): r publishes its sendbuf's address, its pid and the
 * op's number in its descriptor, sends every P(k) at once, and p reads
 * chunk k straight from r's sendbuf with process_vm_readv on P(k) and
 * answers D(k). Which way each op goes is rank 0's choice, made from the
 * times of recent ops both ways, which every rank writes into the
 * channel (mostly the faster way, now and then a few ops the other to
 * see whether that changed; leader_choose); it reaches the others
 * through the channel (swy_coll_shm_ctl_t), and a block pulls or not by
 * the op's way and the block's size, which both of its ends know. The
 * blocks between rank 0 and every peer have at least one round, empty
 * or not, which is what makes every rank read the way after rank 0 wrote
 * it and before it writes the next.
 *
 * A sendbuf in swy_mem_alloc memory (where every rank can map every
 * other's, ch->mem_ok) goes the direct way, whatever the op's way: the
 * sender describes it (pull_desc_t, direct) and sends every P(k) at
 * once, and the receiver maps it and copies chunk k straight into its
 * recvbuf: one copy in user space. The receiver learns that from the
 * descriptor at the sender's first P of the op. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/copy.h"
#include "util/clock.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

extern const swy_coll_algo_t swy_coll_alltoallv_shm;

enum { MSG_P = 0, MSG_D = 1, MSG_KINDS = 2 };

struct swy_coll_state {
    swy_coll_args_t args;
    swy_coll_shm_t *ch;
    int rank, nranks;
    size_t dsize, chunk_bytes;
    swy_coll_emit_t emit;
    swy_coll_shm_user_t user;
    size_t *send_rounds, *recv_rounds; /* [nranks] */
    size_t events_left; /* D and P still to come before the release */
    int stream; /* write recvbuf with non-temporal stores */
    uint64_t seq;        /* this op's number on the channel */
    int way, way_known;  /* SWY_COLL_WAY_*, once read */
    int direct;          /* this rank's sendbuf goes the direct way */
    int lent;            /* peers were told where sendbuf lies (lends) */
    swy_coll_mem_ref_t send_ref;
    /* Per peer: its block for this rank, mapped, when it goes the direct
     * way; known: its descriptor was read (bit p). */
    uint32_t peers_known;
    const char *peer_block[SWY_COLL_SHM_MAX_RANKS];
};

/* Where a rank tells its peers about its sendbuf for an op that pulls:
 * its result slot of parity 1 (unused by alltoallv/shm). */
typedef struct {
    uint64_t seq;
    int64_t pid;
    uint64_t addr[SWY_COLL_SHM_MAX_RANKS];  /* its block for each peer */
    uint64_t bytes[SWY_COLL_SHM_MAX_RANKS];
    uint64_t direct;   /* the sendbuf is in swy_mem_alloc memory: */
    uint64_t base;     /* its address, which mem describes */
    swy_coll_mem_ref_t mem;
} pull_desc_t;

_Static_assert(sizeof(pull_desc_t) <= 4096 &&
                   sizeof(swy_coll_shm_ctl_t) <= 4096,
               "the descriptor and the control words fit the smallest slot");

static pull_desc_t *pull_desc(const swy_coll_state_t *st, int owner)
{
    return (pull_desc_t *)swy_coll_shm_out_slot(st->ch, owner, 1);
}

/* Receives from the peers of at least this many bytes in all are written
 * to recvbuf with non-temporal stores; from the smaller size where ranks
 * outnumber the CPUs, whose time-shared caches rarely keep the data until
 * its reader runs. The thresholds are where streaming stopped losing in
 * the runs that docs/performance.md, "coll", points to. */
#ifndef SWY_COLL_A2A_STREAM_MIN /* -D for experiments only */
#define SWY_COLL_A2A_STREAM_MIN ((size_t)4 << 20)
#endif
#ifndef SWY_COLL_A2A_STREAM_MIN_SHARED
#define SWY_COLL_A2A_STREAM_MIN_SHARED ((size_t)1 << 20)
#endif

/* Rounds of the block between this rank and peer p: at least one where
 * either is rank 0 (see the top). */
static size_t rounds_of(const swy_coll_state_t *st, int p, size_t elems)
{
    size_t n = (elems * st->dsize + st->chunk_bytes - 1) / st->chunk_bytes;
    return n == 0 && (p == 0 || st->rank == 0) ? 1 : n;
}

/* Whether a block of `bytes` pulls in this op's way; both ends agree. */
static int block_pulls(const swy_coll_state_t *st, size_t bytes)
{
    return bytes > 0 && (st->way == SWY_COLL_WAY_PULL_ALL ||
                         (st->way == SWY_COLL_WAY_PULL_LARGE &&
                          bytes >= SWY_COLL_PULL_MIN));
}

/* Whether this rank's block for p goes without its slots (the
 * receiver pulls it or copies it straight from sendbuf). */
static int sends_direct(const swy_coll_state_t *st, int p)
{
    return st->direct || block_pulls(st, st->args.sendcounts[p] * st->dsize);
}

/* This op's way, from rank 0's control words, at the rank's first event
 * of the op (its taking the channel or a peer's message). */
static void learn_way(swy_coll_state_t *st)
{
    if (st->way_known)
        return;
    uint32_t way = atomic_load_explicit(
        &swy_coll_shm_ctl(st->ch, 0)->way[st->seq % 2],
        memory_order_acquire);
    st->way = way <= SWY_COLL_WAY_PULL_ALL ? (int)way : SWY_COLL_WAY_COPY;
    st->way_known = 1;
}

static double median_of(const double *v, int n)
{
    double a[SWY_COLL_PULL_SAMPLES];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && a[j - 1] > v[i]; j--)
            a[j] = a[j - 1];
        a[j] = v[i];
    }
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/* Rank 0's largest block of the op (to or from a peer) in bytes, and
 * its size class (coll.h), or -1 below SWY_COLL_PULL_MIN. */
static int op_class(const swy_coll_state_t *st, size_t *bytes_p)
{
    const swy_coll_args_t *a = &st->args;
    size_t bytes = 0, largest = 0;
    for (int p = 0; p < st->nranks; p++) {
        if (p == st->rank)
            continue;
        size_t out = a->sendcounts[p] * st->dsize;
        size_t in = a->recvcounts[p] * st->dsize;
        bytes += out + in;
        largest = SWY_MAX(largest, SWY_MAX(out, in));
    }
    *bytes_p = bytes;
    if (largest < SWY_COLL_PULL_MIN)
        return -1;
    int c = 0;
    while (c + 1 < SWY_COLL_PULL_CLASSES &&
           largest >= (SWY_COLL_PULL_MIN << (c + 1)))
        c++;
    return c;
}

/* Rank 0: the way of the op after the one taking the channel now, taken
 * to be of the same size class. A class goes first the way that the
 * latest clear comparison in any class (one way PULL_MARGIN faster than
 * the other) favoured, copying before any: what decides it, where the
 * host put the CPUs, holds for seconds to minutes and for every size
 * alike, while a benchmark or a new layer may spend only a few ops on a
 * size. An op that goes the other way from the two before it is slow for
 * that alone (a single pull among copies took far longer than a pull
 * among pulls), so only ops that go the way of the two before them are
 * timed, and the other way is tried in bursts of PULL_BURST ops: once,
 * as soon as the first way has a full set of times; pulls again when
 * copies run PULL_SLOWER times slower than the best they did (the cores
 * moved apart), at most once in PULL_EXPLORE ops; copies once in
 * PULL_EXPLORE ops while pulling (pulls do not show the cores coming
 * back together). The way switches when the other
 * one's median time is lower, by PULL_MARGIN to take up pulling, so that
 * noise does not flip it. */
#define PULL_TRUST 3
#define PULL_BURST 5
#define PULL_EXPLORE 64
#define PULL_SLOWER 1.4
#define PULL_MARGIN 0.9
static uint32_t way_of(int pulls)
{
    return pulls ? SWY_COLL_WAY_PULL_LARGE : SWY_COLL_WAY_COPY;
}

static uint32_t leader_choose(swy_coll_shm_t *ch, uint64_t next_seq)
{
    swy_coll_pull_t *pl = &ch->pull;
    int all = 1;
    for (int r = 0; r < ch->nranks && all; r++)
        all = atomic_load_explicit(&swy_coll_shm_ctl(ch, r)->can_pull,
                                   memory_order_acquire) != 0;
    if (!all || pl->mode == SWY_COLL_PULL_NEVER)
        return SWY_COLL_WAY_COPY;
    if (pl->mode == SWY_COLL_PULL_ALWAYS) {
        if (!pl->announced)
            swy_debug("coll", "alltoallv/shm: from op %llu on, every block "
                      "is pulled (SWY_SHM_PULL=always)",
                      (unsigned long long)next_seq);
        pl->announced = 1;
        return SWY_COLL_WAY_PULL_ALL;
    }
    if (pl->last_class < 0)
        return SWY_COLL_WAY_COPY;
    swy_coll_pull_class_t *c = &pl->cls[pl->last_class];
    if (c->chosen == 0 && pl->prefer) {
        c->faster = 1;
        swy_debug("coll", "alltoallv/shm: from op %llu on, blocks of %zu "
                  "bytes and more start pulled (largest %zu KiB and more; "
                  "the latest clear comparison favoured pulls)",
                  (unsigned long long)next_seq, SWY_COLL_PULL_MIN,
                  (SWY_COLL_PULL_MIN << pl->last_class) >> 10);
    }
    uint64_t n = c->chosen++;
    int way = c->faster, other = !way;
    if (c->burst_left > 0) {
        c->burst_left--;
        return way_of(other);
    }
    /* The first ops of a class are the slowest (pages touched for the
     * first time): a full set of copies' times outvotes them. */
    if (c->samples[way] < (c->tried ? PULL_TRUST : SWY_COLL_PULL_SAMPLES))
        return way_of(way);
    double now = median_of(c->ns_per_byte[way], c->samples[way]);
    if (way == 0 && (c->best_copy == 0 || now < c->best_copy))
        c->best_copy = now;
    if (c->samples[other] >= PULL_TRUST) {
        double then = median_of(c->ns_per_byte[other], c->samples[other]);
        /* Only a clear difference speaks for the other classes: both
         * ways can tie (blocks of 1 MiB and more, the cores far apart),
         * and a tie's winner by a percent is noise. */
        if (then < PULL_MARGIN * now)
            pl->prefer = other;
        else if (now < PULL_MARGIN * then)
            pl->prefer = way;
        if (then < (other ? PULL_MARGIN : 1.0) * now) {
            swy_debug("coll", "alltoallv/shm: from op %llu on, blocks of "
                      "%zu bytes and more are %s (largest %zu KiB and "
                      "more; ns per byte, medians of the last ops: copy "
                      "%.3f, pull %.3f)", (unsigned long long)next_seq,
                      SWY_COLL_PULL_MIN, other ? "pulled" : "copied",
                      (SWY_COLL_PULL_MIN << pl->last_class) >> 10,
                      other ? now : then, other ? then : now);
            c->faster = other;
            return way_of(other);
        }
    }
    int due = n - c->burst_at >= PULL_EXPLORE;
    int burst = !c->tried ||
                (way == 1 ? due : due && now > PULL_SLOWER * c->best_copy);
    if (!burst)
        return way_of(way);
    c->tried = 1;
    c->burst_at = n;
    c->burst_left = PULL_BURST - 1;
    return way_of(other);
}

/* Rank 0, as op c takes the channel: op c - 2 is over on every rank
 * (each sent rank 0 its P of op c - 1 after leaving c - 2, and rank 0 got
 * them all before it left c - 1), so its time, from the first rank's
 * taking the channel to the last one's leaving it, counts per byte for
 * its way and class. (From the last rank's taking it, the time left out
 * the wait for a slow rank, and chose copies where pulls were faster.) */
static void leader_sample(swy_coll_state_t *st)
{
    if (st->seq < 2)
        return;
    swy_coll_pull_t *pl = &st->ch->pull;
    uint64_t old = st->seq - 2;
    int at = (int)(old % SWY_COLL_PULL_TIMES);
    int cls = pl->recent[at].cls, way = pl->recent[at].way;
    if (cls < 0 || way == SWY_COLL_WAY_PULL_ALL || !pl->recent[at].warm)
        return;
    uint64_t taken = UINT64_MAX, left = 0;
    for (int r = 0; r < st->nranks; r++) {
        swy_coll_shm_ctl_t *ctl = swy_coll_shm_ctl(st->ch, r);
        taken = SWY_MIN(taken, atomic_load_explicit(&ctl->taken_ns[at],
                                                    memory_order_acquire));
        left = SWY_MAX(left, atomic_load_explicit(&ctl->left_ns[at],
                                                  memory_order_acquire));
    }
    if (left <= taken)
        return; /* not this op's: cannot be, but no sample is better */
    swy_coll_pull_class_t *c = &pl->cls[cls];
    int w = way != SWY_COLL_WAY_COPY;
    c->ns_per_byte[w][c->next_sample[w]] =
        (double)(left - taken) / (double)pl->recent[at].bytes;
    c->next_sample[w] = (c->next_sample[w] + 1) % SWY_COLL_PULL_SAMPLES;
    if (c->samples[w] < SWY_COLL_PULL_SAMPLES)
        c->samples[w]++;
}

static void emit_msg(const swy_coll_emit_t *emit, int kind, size_t k,
                     int peer, int is_send)
{
    swy_coll_xfer_t x = {
        .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)(k * MSG_KINDS + (size_t)kind), .buf = NULL,
        .bytes = 0, .cookie = swy_coll_cookie(0, kind, k)};
    emit->post(emit->ctx, &x);
}

/* Bytes of chunk k of a block of `elems` elements. */
static size_t chunk_bytes(const swy_coll_state_t *st, size_t elems, size_t k)
{
    size_t total = elems * st->dsize, off = k * st->chunk_bytes;
    return SWY_MIN(st->chunk_bytes, total - off);
}

static void publish(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                    int p, size_t k)
{
    const swy_coll_args_t *a = &st->args;
    swy_copy(swy_coll_shm_in_slot(st->ch, st->rank, (int)(k & 1), p),
             (const char *)a->sendbuf + a->sdispls[p] * st->dsize +
                 k * st->chunk_bytes,
             chunk_bytes(st, a->sendcounts[p], k));
    atomic_thread_fence(memory_order_release);
    emit_msg(emit, MSG_P, k, p, 1);
}

static void release_if_done(swy_coll_state_t *st)
{
    if (st->user.holding && st->events_left == 0) {
        atomic_store_explicit(
            &swy_coll_shm_ctl(st->ch, st->rank)
                 ->left_ns[st->seq % SWY_COLL_PULL_TIMES],
            swy_time_ns(), memory_order_release);
        swy_coll_shm_leave(st->ch, &st->user, 0);
    }
}

static void acquire(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    learn_way(st);
    atomic_store_explicit(&swy_coll_shm_ctl(st->ch, st->rank)
                               ->taken_ns[st->seq % SWY_COLL_PULL_TIMES],
                          swy_time_ns(), memory_order_release);
    if (st->rank == 0) {
        swy_coll_pull_t *pl = &st->ch->pull;
        int at = (int)(st->seq % SWY_COLL_PULL_TIMES);
        leader_sample(st);
        pl->last_class = op_class(st, &pl->recent[at].bytes);
        pl->recent[at].cls = pl->last_class;
        pl->recent[at].way = st->way;
        pl->recent[at].warm = st->way == pl->ways[0] &&
                              st->way == pl->ways[1];
        pl->ways[1] = pl->ways[0];
        pl->ways[0] = st->way;
        atomic_store_explicit(
            &swy_coll_shm_ctl(st->ch, 0)->way[(st->seq + 1) % 2],
            leader_choose(st->ch, st->seq + 1), memory_order_release);
    }
    int pulls = st->direct;
    for (int p = 0; p < st->nranks; p++)
        pulls |= p != st->rank && block_pulls(st, a->sendcounts[p] *
                                                      st->dsize);
    if (pulls) {
        pull_desc_t *d = pull_desc(st, st->rank);
        d->seq = st->seq;
        d->pid = (int64_t)getpid();
        d->direct = (uint64_t)st->direct;
        d->base = (uint64_t)(uintptr_t)a->sendbuf;
        d->mem = st->send_ref;
        st->lent = 1;
        for (int p = 0; p < st->nranks; p++) {
            d->addr[p] = (uint64_t)(uintptr_t)((const char *)a->sendbuf +
                                               a->sdispls[p] * st->dsize);
            d->bytes[p] = a->sendcounts[p] * st->dsize;
        }
        atomic_thread_fence(memory_order_release);
    }
    for (int s = 1; s < st->nranks; s++) {
        int p = (st->rank + s) % st->nranks;
        if (sends_direct(st, p)) {
            for (size_t k = 0; k < st->send_rounds[p]; k++)
                emit_msg(emit, MSG_P, k, p, 1);
            continue;
        }
        for (size_t k = 0; k < SWY_MIN(st->send_rounds[p], (size_t)2); k++)
            publish(st, emit, p, k);
    }
    release_if_done(st);
}

/* Chunk k of peer p's block for this rank, read from p's sendbuf. */
static swy_status_t pull_chunk(swy_coll_state_t *st, int p, size_t k)
{
    const swy_coll_args_t *a = &st->args;
    atomic_thread_fence(memory_order_acquire);
    const pull_desc_t *d = pull_desc(st, p);
    size_t want = a->recvcounts[p] * st->dsize;
    if (d->seq != st->seq || d->bytes[st->rank] != want)
        return swy_err_set(SWY_ERR_MISMATCH, "coll", "alltoallv/shm: rank "
                           "%d offers op %llu, %llu bytes; rank %d is at op "
                           "%llu and expects %zu bytes from it", p,
                           (unsigned long long)d->seq,
                           (unsigned long long)d->bytes[st->rank], st->rank,
                           (unsigned long long)st->seq, want);
    size_t off = k * st->chunk_bytes, n = chunk_bytes(st, a->recvcounts[p],
                                                      k);
    struct iovec local = {(char *)a->recvbuf + a->rdispls[p] * st->dsize +
                              off, n};
    struct iovec remote = {(void *)(uintptr_t)(d->addr[st->rank] + off), n};
    while (local.iov_len > 0) {
        ssize_t got = process_vm_readv((pid_t)d->pid, &local, 1, &remote, 1,
                                       0);
        if (got < 0 && errno == ESRCH)
            return swy_err_set(SWY_ERR_REMOTE, "coll", "alltoallv/shm: rank "
                               "%d (pid %lld) is gone", p,
                               (long long)d->pid);
        if (got <= 0)
            return swy_err_set(SWY_ERR_SYSTEM, "coll", "alltoallv/shm: "
                               "reading %zu bytes from rank %d (pid %lld): "
                               "%s", local.iov_len, p, (long long)d->pid,
                               got < 0 ? strerror(errno) : "nothing read");
        local.iov_base = (char *)local.iov_base + got;
        local.iov_len -= (size_t)got;
        remote.iov_base = (char *)remote.iov_base + got;
        remote.iov_len -= (size_t)got;
    }
    return SWY_OK;
}

static void acquired(swy_coll_shm_user_t *user)
{
    swy_coll_state_t *st = swy_container_of(user, swy_coll_state_t, user);
    acquire(st, &st->emit);
}

static swy_status_t a2a_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    swy_coll_shm_t *ch = args->shm_a2a;
    if (ch == NULL || ch->nranks != nranks || ch->rank != rank ||
        args->mem != SWY_MEM_HOST)
        return swy_err_set(SWY_ERR_INTERNAL, "coll", "alltoallv/shm without "
                           "a shared-memory channel for these ranks");
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "alltoallv/shm", args, rank, nranks,
                          SWY_COLL_HOST_ONLY, 0);
    size_t *rounds = swy_calloc(2 * (size_t)nranks, sizeof(size_t));
    if (rounds == NULL) {
        swy_free(st);
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "alltoallv/shm on %d "
                           "ranks: out of memory", nranks);
    }
    st->ch = ch;
    /* Whole elements per chunk, within a slot and the partition. */
    size_t cap = SWY_MIN(partition_bytes, ch->slot_bytes);
    st->chunk_bytes = SWY_MAX(cap / st->dsize, (size_t)1) * st->dsize;
    st->send_rounds = rounds;
    st->recv_rounds = rounds + nranks;
    size_t most = 0, recv_bytes = 0;
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        st->send_rounds[p] = rounds_of(st, p, args->sendcounts[p]);
        st->recv_rounds[p] = rounds_of(st, p, args->recvcounts[p]);
        most = SWY_MAX(most, SWY_MAX(st->send_rounds[p],
                                     st->recv_rounds[p]));
        st->events_left += st->send_rounds[p] + st->recv_rounds[p];
        recv_bytes += args->recvcounts[p] * st->dsize;
    }
    if (ch->mem_ok) {
        size_t extent = 0;
        for (int p = 0; p < nranks; p++)
            if (p != rank && args->sendcounts[p] > 0)
                extent = SWY_MAX(extent, (args->sdispls[p] +
                                          args->sendcounts[p]) *
                                             st->dsize);
        st->direct = extent > 0 &&
                     swy_coll_mem_find(ch->mem, args->sendbuf, extent,
                                       &st->send_ref);
    }
    st->stream = recv_bytes >= (ch->ranks_share_cpus
                                    ? SWY_COLL_A2A_STREAM_MIN_SHARED
                                    : SWY_COLL_A2A_STREAM_MIN);
    if (st->chunk_bytes > ch->slot_bytes ||
        most > (size_t)SWY_COLL_TAG_MAX / MSG_KINDS) {
        swy_free(rounds);
        swy_free(st);
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "alltoallv/shm: a "
                           "block of more than %zu chunks of %zu bytes",
                           (size_t)SWY_COLL_TAG_MAX / MSG_KINDS,
                           ch->slot_bytes);
    }
    *state_p = st;
    return SWY_OK;
}

static swy_status_t a2a_start(swy_coll_state_t *st,
                              const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank;
    st->emit = *emit;
    st->seq = st->ch->pull.ops++; /* every rank counts every op */
    for (int s = 1; s < st->nranks; s++) {
        int p = (r + s) % st->nranks, q = (r - s + st->nranks) % st->nranks;
        for (size_t k = 0; k < st->recv_rounds[q]; k++)
            emit_msg(emit, MSG_P, k, q, 0);
        for (size_t k = 0; k < st->send_rounds[p]; k++)
            emit_msg(emit, MSG_D, k, p, 0);
    }
    /* The block to itself needs no channel. */
    if (a->sendcounts[r] != a->recvcounts[r])
        return swy_err_set(SWY_ERR_MISMATCH, "coll", "alltoallv: rank %d "
                           "sends %zu elements to itself but expects %zu "
                           "(recvcounts[%d])", r, a->sendcounts[r],
                           a->recvcounts[r], r);
    if (a->recvcounts[r] > 0)
        swy_copy((char *)a->recvbuf + a->rdispls[r] * st->dsize,
                 (const char *)a->sendbuf + a->sdispls[r] * st->dsize,
                 a->recvcounts[r] * st->dsize);
    st->user.acquired = acquired;
    if (swy_coll_shm_enqueue(st->ch, &st->user))
        acquire(st, emit);
    return swy_coll_shm_check(&st->user, swy_coll_alltoallv_shm.name);
}

/* Peer p's descriptor, at its first P of the op: where its block for
 * this rank lies, mapped, when p's sendbuf goes the direct way. No other
 * op of p's can write the descriptor meanwhile: p's op leaves the
 * channel only once this rank answered every P. */
static swy_status_t learn_peer(swy_coll_state_t *st, int p)
{
    if (st->peers_known & (UINT32_C(1) << p))
        return SWY_OK;
    st->peers_known |= UINT32_C(1) << p;
    atomic_thread_fence(memory_order_acquire);
    const pull_desc_t *d = pull_desc(st, p);
    if (d->seq != st->seq || !d->direct)
        return SWY_OK; /* not described for this op: not direct */
    size_t want = st->args.recvcounts[p] * st->dsize;
    if (d->bytes[st->rank] != want)
        return swy_err_set(SWY_ERR_MISMATCH, "coll", "alltoallv: rank %d "
                           "sends %llu bytes to rank %d, which expects %zu",
                           p, (unsigned long long)d->bytes[st->rank],
                           st->rank, want);
    if (want == 0)
        return SWY_OK;
    swy_coll_mem_ref_t ref = d->mem;
    uint64_t skip = d->addr[st->rank] - d->base;
    if (skip > ref.size - ref.offset)
        return swy_err_set(SWY_ERR_INTERNAL, "coll", "alltoallv/shm: rank "
                           "%d's block lies outside its buffer", p);
    ref.offset += skip;
    char *at = NULL;
    SWY_CHECK(swy_coll_mem_map(st->ch->mem, p, &ref, want, &at));
    st->peer_block[p] = at;
    return SWY_OK;
}

static swy_status_t a2a_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    SWY_CHECK(swy_coll_shm_check(&st->user, swy_coll_alltoallv_shm.name));
    const swy_coll_args_t *a = &st->args;
    int kind = swy_coll_cookie_step(xfer->cookie), p = xfer->peer;
    size_t k = swy_coll_cookie_chunk(xfer->cookie);
    learn_way(st);
    if (kind == MSG_P)
        SWY_CHECK(learn_peer(st, p));
    if (kind == MSG_P && st->peer_block[p] != NULL) {
        (st->stream ? swy_copy_stream : swy_copy)(
            (char *)a->recvbuf + a->rdispls[p] * st->dsize +
                k * st->chunk_bytes,
            st->peer_block[p] + k * st->chunk_bytes,
            chunk_bytes(st, a->recvcounts[p], k));
        emit_msg(emit, MSG_D, k, p, 1);
    } else if (kind == MSG_P &&
               block_pulls(st, a->recvcounts[p] * st->dsize)) {
        SWY_CHECK(pull_chunk(st, p, k));
        emit_msg(emit, MSG_D, k, p, 1);
    } else if (kind == MSG_P) {
        atomic_thread_fence(memory_order_acquire);
        (st->stream ? swy_copy_stream : swy_copy)(
            (char *)a->recvbuf + a->rdispls[p] * st->dsize +
                k * st->chunk_bytes,
            swy_coll_shm_in_slot(st->ch, p, (int)(k & 1), st->rank),
            chunk_bytes(st, a->recvcounts[p], k));
        emit_msg(emit, MSG_D, k, p, 1);
    } else if (!sends_direct(st, p) && k + 2 < st->send_rounds[p]) {
        publish(st, emit, p, k + 2);
    }
    st->events_left--;
    release_if_done(st);
    return SWY_OK;
}

static int a2a_lends(const swy_coll_state_t *st)
{
    return st->lent;
}

static void a2a_abort(swy_coll_state_t *st)
{
    swy_coll_shm_leave(st->ch, &st->user, 1);
}

static void a2a_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    a2a_abort(st); /* a no-op unless the op never completed */
    swy_free(st->send_rounds);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_alltoallv_shm = {
    .name = "alltoallv/shm", .create = a2a_create, .start = a2a_start,
    .recv_done = a2a_recv_done, .finish = NULL, .destroy = a2a_destroy,
    .abort = a2a_abort, .lends = a2a_lends};
