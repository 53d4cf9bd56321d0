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
 * swy_coll_alltoallv_choose() decides. */
#include <stdatomic.h>
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/copy.h"
#include "util/list.h"
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
};

/* Receives from the peers of at least this many bytes in all are written
 * to recvbuf with non-temporal stores; from the smaller size where ranks
 * outnumber the CPUs, whose time-shared caches rarely keep the data until
 * its reader runs (on the 2-core VM, 4 ranks: 1.5 MiB received 995
 * against 1252 us, 3 MiB 2441 against 2897; 768 KiB was slower
 * streamed, 299 against 236; docs/performance.md, "coll"). */
#ifndef SWY_COLL_A2A_STREAM_MIN /* -D for experiments only */
#define SWY_COLL_A2A_STREAM_MIN ((size_t)4 << 20)
#endif
#ifndef SWY_COLL_A2A_STREAM_MIN_SHARED
#define SWY_COLL_A2A_STREAM_MIN_SHARED ((size_t)1 << 20)
#endif

static size_t rounds_of(const swy_coll_state_t *st, size_t elems)
{
    return (elems * st->dsize + st->chunk_bytes - 1) / st->chunk_bytes;
}

static void emit_msg(const swy_coll_emit_t *emit, int kind, size_t k,
                     int peer, int is_send)
{
    swy_coll_xfer_t x = {
        .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
        .tag = (uint32_t)(k * MSG_KINDS + (size_t)kind), .buf = NULL,
        .bytes = 0, .cookie = ((uint64_t)kind << 40) | k};
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
    if (st->user.holding && st->events_left == 0)
        swy_coll_shm_leave(st->ch, &st->user, 0);
}

static void acquire(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    for (int s = 1; s < st->nranks; s++) {
        int p = (st->rank + s) % st->nranks;
        for (size_t k = 0; k < SWY_MIN(st->send_rounds[p], (size_t)2); k++)
            publish(st, emit, p, k);
    }
    release_if_done(st);
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
    swy_coll_state_t *st = swy_calloc(1, sizeof(*st));
    size_t *rounds = swy_calloc(2 * (size_t)nranks, sizeof(size_t));
    if (st == NULL || rounds == NULL) {
        swy_free(st);
        swy_free(rounds);
        return SWY_ERR_NO_MEMORY;
    }
    st->args = *args;
    st->ch = ch;
    st->rank = rank;
    st->nranks = nranks;
    st->dsize = swy_dtype_size(args->dtype);
    /* Whole elements per chunk, within a slot and the partition. */
    size_t cap = SWY_MIN(partition_bytes, ch->slot_bytes);
    st->chunk_bytes = SWY_MAX(cap / st->dsize, (size_t)1) * st->dsize;
    st->send_rounds = rounds;
    st->recv_rounds = rounds + nranks;
    size_t most = 0, recv_bytes = 0;
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        st->send_rounds[p] = rounds_of(st, args->sendcounts[p]);
        st->recv_rounds[p] = rounds_of(st, args->recvcounts[p]);
        most = SWY_MAX(most, SWY_MAX(st->send_rounds[p],
                                     st->recv_rounds[p]));
        st->events_left += st->send_rounds[p] + st->recv_rounds[p];
        recv_bytes += args->recvcounts[p] * st->dsize;
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

static swy_status_t a2a_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    SWY_CHECK(swy_coll_shm_check(&st->user, swy_coll_alltoallv_shm.name));
    const swy_coll_args_t *a = &st->args;
    int kind = (int)(xfer->cookie >> 40), p = xfer->peer;
    size_t k = (size_t)(xfer->cookie & ((UINT64_C(1) << 40) - 1));
    if (kind == MSG_P) {
        atomic_thread_fence(memory_order_acquire);
        (st->stream ? swy_copy_stream : swy_copy)(
            (char *)a->recvbuf + a->rdispls[p] * st->dsize +
                k * st->chunk_bytes,
            swy_coll_shm_in_slot(st->ch, p, (int)(k & 1), st->rank),
            chunk_bytes(st, a->recvcounts[p], k));
        emit_msg(emit, MSG_D, k, p, 1);
    } else if (k + 2 < st->send_rounds[p]) {
        publish(st, emit, p, k + 2);
    }
    st->events_left--;
    release_if_done(st);
    return SWY_OK;
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
    .abort = a2a_abort};
