/* Ops and micro-ops: posting a collective (its header exchange, its
 * algorithm's transfers as micro-ops), their completions, the failure
 * of one op and the hand-back of its buffers, and the caller's test,
 * wait and release (see engine_impl.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/engine_impl.h"

void swy_sched_uop_complete_cb(void *arg, swy_status_t status, size_t bytes)
{
    swy_uop_t *uop = arg;
    uop->status = status;
    uop->bytes_done = bytes;
    uop->state = UOP_DONE;
    swy_list_push_back(&uop->sched->completed, &uop->q_link);
}

void op_free(struct swy_request *op)
{
    swy_free(op->series_chunks);
    if (op->state != NULL)
        op->algo->destroy(op->state);
    swy_free(op);
}

/* An op with its per-peer arrays (and an alltoallv's copy of the
 * counts and displacements) in one zeroed block. Every array is of 8-byte
 * elements (a header is a multiple of 8 bytes) but the two last. */
static struct swy_request *op_alloc(int nranks, int count_arrays)
{
    size_t w = (size_t)nranks;
    size_t hdr = w * sizeof(swy_coll_header_t), words = w * sizeof(size_t);
    size_t at = (sizeof(struct swy_request) + 7) & ~(size_t)7;
    size_t hdr_out = at, hdr_in = hdr_out + hdr, inflight = hdr_in + hdr;
    size_t unconfirmed = inflight + words, fair = unconfirmed + words;
    size_t counts = fair + w * sizeof(uint64_t);
    size_t peers = counts + (size_t)count_arrays * words;
    size_t seen = peers + w * sizeof(int), end = seen + w;
    char *block = swy_calloc(1, end);
    if (block == NULL)
        return NULL;
    struct swy_request *op = (struct swy_request *)block;
    op->hdr_out = (swy_coll_header_t *)(block + hdr_out);
    op->hdr_in = (swy_coll_header_t *)(block + hdr_in);
    op->inflight_by_peer = (size_t *)(block + inflight);
    op->unconfirmed_by_peer = (size_t *)(block + unconfirmed);
    op->fair_finish = (uint64_t *)(block + fair);
    if (count_arrays > 0)
        op->counts_copy = (size_t *)(block + counts);
    op->hdr_peers = (int *)(block + peers);
    op->hdr_seen = (uint8_t *)(block + seen);
    return op;
}

/* A micro-op from the pool, zeroed, or a new one. Under s->lock. */
static swy_uop_t *uop_alloc(swy_sched_t *s)
{
    if (swy_list_empty(&s->uop_pool))
        return swy_calloc(1, sizeof(swy_uop_t));
    swy_uop_t *uop = swy_container_of(s->uop_pool.next, swy_uop_t, op_link);
    swy_list_del(&uop->op_link);
    s->uop_pool_len--;
    memset(uop, 0, sizeof(*uop));
    return uop;
}

/* Back to the pool: off every list. Under s->lock. */
static void uop_release(swy_sched_t *s, swy_uop_t *uop)
{
    if (s->uop_pool_len >= UOP_POOL_MAX) {
        swy_free(uop);
        return;
    }
    swy_list_push_back(&s->uop_pool, &uop->op_link);
    s->uop_pool_len++;
}

static void op_complete(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    op->completed = 1;
    swy_list_del(&op->link);
    swy_list_del(&op->clink);
    if (op->p2p)
        swy_sched_p2p_op_gone(op);
    if (!op->failing) /* a failing op left the tally when it failed */
        tally_sub(&s->pending_ops, op->priority, 1);
    s->stats.ops_completed++;
    if (s->trace != NULL) {
        char name[64];
        snprintf(name, sizeof(name), "%.52s #%u", op_label(op), op->seq);
        swy_trace_event(s->trace, 0, name, swy_coll_kind_name(op->args.kind),
                        op->post_ns, swy_time_ns(), op->priority, 0, -1,
                        op->seq, 0u);
    }
    if (op->status != SWY_OK)
        swy_debug("sched", "op #%u '%s' failed: %s", op->seq, op_label(op),
                  op->errmsg);
    if (op->failing) {
        op->failing = 0;
        s->n_failing--;
    }
    /* The caller's stream goes on past the op, done or failed: a stream
     * held for an op that failed would hang the caller's GPU work. */
    if (op->gate != NULL) {
        swy_stream_gate_t *g = op->gate;
        op->gate = NULL;
        gate_share_drop(g);
    }
    if (op->released && !op->in_handler && !op->on_stream && !op->pins)
        op_free(op);
}

void swy_sched_op_unpin(struct swy_request *op)
{
    if (--op->pins == 0 && op->completed && op->released &&
        !op->in_handler && !op->on_stream)
        op_free(op);
}

/* Every micro-op of an op that has not failed is done: the algorithm's
 * last local work (a staged allreduce's copy back to the device), then
 * completion. */
static void op_finish(struct swy_request *op)
{
    if (op->algo->finish != NULL) {
        swy_status_t status = op->algo->finish(op->state);
        if (status != SWY_OK) {
            op_error(op, status, "op #%u '%s': finishing failed: %s",
                     op->seq, op_label(op), swy_err_last());
            return;
        }
    }
    op_complete(op);
}

void swy_sched_op_fail(struct swy_request *op, swy_status_t status,
                       const char *msg)
{
    swy_sched_t *s = op->sched;
    swy_list_t *pos, *tmp;
    if (!op_alive(op))
        return;
    op->status = status;
    snprintf(op->errmsg, sizeof(op->errmsg), "%s", msg);
    op->failing = 1;
    s->n_failing++;
    if (op->algo->abort != NULL && op->state != NULL)
        op->algo->abort(op->state);
    tally_sub(&s->pending_ops, op->priority, 1);
    op->fail_s = swy_time_s();
    op->release_deadline =
        op->fail_s + SWY_MIN(RELEASE_GRACE_S, s->p.timeout_s);
    swy_list_for_each_safe(pos, tmp, &op->uops) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        if (uop->state == UOP_READY) { /* in a queue or op->gated */
            swy_list_del(&uop->op_link);
            swy_list_del(&uop->q_link);
            uop_release(s, uop);
            op->n_live--;
        } else if (uop->state == UOP_POSTED && !uop->x.is_send) {
            uop->tp->ops->cancel(uop->tp->ctx, uop->handle);
        }
    }
    if (!swy_list_empty(&op->launches))
        swy_sched_lane_op_failed(op);
    swy_sched_op_drain(op, 0);
}

/* A failing op completes once none of its micro-ops may still touch the
 * caller's buffers (RELEASE_GRACE_S), or at once with force (the comm
 * goes away). What is still posted then is detached: freed when its
 * callback comes, or with the scheduler. */
void swy_sched_op_drain(struct swy_request *op, int force)
{
    swy_sched_t *s = op->sched;
    swy_list_t *pos, *tmp;
    int waiting = 0, late_peer = -1;
    double now = swy_time_s();
    for (pos = op->uops.next; pos != &op->uops && !force; pos = pos->next) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        /* A send to this rank feeds only this op's receives; one to a
         * rank that left or died reads nothing any more. */
        if (uop->x.is_send && uop->state == UOP_POSTED &&
            (uop->lpeer == s->p.rank ||
             swy_boot_peer_gone(s->p.boot, uop->lpeer)))
            continue;
        if (uop->x.is_send && uop->state == UOP_POSTED &&
            swy_boot_peer_quiesced(s->p.boot, uop->lpeer)) {
            if (!uop->send_cancelled) {
                uop->send_cancelled = 1;
                uop->cancel_s = now;
                /* Its completion, if any, comes from a later progress
                 * pass. */
                uop->tp->ops->cancel(uop->tp->ctx, uop->handle);
            }
            if (now >= uop->cancel_s + SEND_SETTLE_S) {
                if (uop->send_cancelled == 1) {
                    uop->send_cancelled = 2;
                    swy_warn("sched", "op #%u '%s' failed; a send of %zu "
                             "bytes to rank %d is still with the transport "
                             "%.0f s after that rank stopped receiving: "
                             "returning its buffer all the same", op->seq,
                             op_label(op), uop->x.bytes, uop->x.peer,
                             SEND_SETTLE_S);
                }
                continue;
            }
        }
        waiting = 1;
        if (uop->x.is_send && late_peer < 0)
            late_peer = uop->x.peer;
    }
    /* Peers that reach into the op's buffers in place may still do so
     * after every transfer of the op is done. */
    if (!force && op->algo->lends != NULL && op->state != NULL &&
        op->algo->lends(op->state))
        for (int p = 0; p < op->comm->nranks; p++) {
            int lp = op->comm->peers[p];
            if (lp != s->p.rank && !swy_boot_peer_gone(s->p.boot, lp) &&
                !swy_boot_peer_quiesced(s->p.boot, lp)) {
                waiting = 1;
                if (late_peer < 0)
                    late_peer = p;
            }
        }
    /* Partitions with the device plugin: their communicators were given
     * up (swy_sched_lane_op_failed), so their ends come promptly. */
    if (!force && swy_sched_lane_busy(op))
        waiting = 1;
    int lost = swy_boot_lost(s->p.boot);
    if (waiting && now < op->release_deadline &&
        !(lost && now >= op->fail_s + RELEASE_LOST_S))
        return;
    if (waiting && !lost)
        swy_warn("sched", "op #%u '%s' failed; returning its buffers to the "
                 "caller although %s%d has not said it stopped reading them "
                 "(%.0f s)", op->seq, op_label(op),
                 late_peer >= 0 ? "rank " : "a receive of rank ",
                 late_peer >= 0 ? late_peer : op->comm->rank,
                 SWY_MIN(RELEASE_GRACE_S, s->p.timeout_s));
    swy_list_for_each_safe(pos, tmp, &op->uops) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        swy_list_del(&uop->op_link);
        uop->op = NULL;
        swy_list_push_back(&s->detached, &uop->op_link);
    }
    /* Launches still with the plugin are freed when their ends come. */
    swy_list_for_each_safe(pos, tmp, &op->launches) {
        swy_launch_t *l = swy_container_of(pos, swy_launch_t, op_link);
        swy_list_del(&l->op_link);
        l->op = NULL;
    }
    op->n_live = 0;
    op_complete(op);
}

swy_uop_t *swy_sched_uop_new(struct swy_request *op,
                             const swy_coll_xfer_t *x, int is_header)
{
    swy_sched_t *s = op->sched;
    swy_uop_t *uop = uop_alloc(s);
    if (uop == NULL)
        return NULL;
    uop->op = op;
    uop->sched = s;
    uop->x = *x;
    uop->is_header = (uint8_t)is_header;
    uop->emit_index = s->next_emit++;
    uop->prio = op->priority;
    uop->seq = op->seq;
    uop->lpeer = op->comm->peers[x->peer];
    uop->wire_tag = swy_sched_wire_tag(op, x);
    /* Headers live in engine memory (x->mem is host); data in the
     * transfer's buffer, of its memory type. */
    uop->tp = swy_transport_for_peer(s->p.transports, uop->lpeer, x->mem);
    swy_list_init(&uop->q_link);
    swy_list_push_back(&op->uops, &uop->op_link);
    op->n_live++;
    return uop;
}

swy_status_t swy_sched_uop_post_recv(swy_uop_t *uop)
{
    swy_transport_t *tp = uop->tp;
    uop->state = UOP_POSTED;
    uop->posted_ns = uop->sched->now_ns;
    swy_status_t status = tp->ops->irecv(
        tp->ctx, uop->lpeer, uop->wire_tag, uop->x.buf, uop->x.bytes,
        uop->x.mem, swy_sched_uop_complete_cb, uop, &uop->handle);
    if (status != SWY_OK)
        uop->state = UOP_READY; /* never reached the transport */
    return status;
}

void swy_sched_op_error(struct swy_request *op, swy_status_t status,
                        const char *fmt, ...)
{
    char msg[SWY_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A transport fails because a peer went away, and a peer goes away
     * because the job failed: when the control plane has heard why
     * (another rank's mismatch, a process that died), that is this op's
     * error too. A peer's transport can fail a moment before the root
     * has told everyone (the root sees a dead process's connection close
     * at once): wait that moment, so the user reads why. */
    swy_sched_t *s = op->sched;
    if (status == SWY_ERR_TRANSPORT && s->p.boot != NULL) {
        char why[SWY_ERRMSG_MAX];
        swy_status_t cause = swy_boot_failure(s->p.boot, why, sizeof(why));
        for (double end = swy_time_s() + TRANSPORT_CAUSE_WAIT_S;
             cause == SWY_OK && !swy_boot_lost(s->p.boot) &&
             swy_time_s() < end;) {
            struct timespec ms = {0, 1000 * 1000};
            nanosleep(&ms, NULL);
            cause = swy_boot_failure(s->p.boot, why, sizeof(why));
        }
        if (cause != SWY_OK) {
            swy_info("sched", "%s (after the job failed: %s)", msg, why);
            status = cause;
            int n = snprintf(msg, sizeof(msg), "op #%u '%s': ", op->seq,
                             op_label(op));
            if (n > 0 && (size_t)n < sizeof(msg)) {
                size_t room = sizeof(msg) - (size_t)n;
                size_t len = strlen(why);
                if (len >= room)
                    len = room - 1;
                memcpy(msg + n, why, len);
                msg[(size_t)n + len] = '\0';
            }
        }
    }
    swy_warn("sched", "%s", msg);
    swy_sched_op_fail(op, status, msg);
}

static void emit_post_recv(struct swy_request *op, swy_uop_t *uop)
{
    swy_status_t status = swy_sched_uop_post_recv(uop);
    if (status != SWY_OK)
        op_error(op, status, "op #%u '%s': posting a receive of %zu bytes "
                 "from rank %d failed", op->seq, op_label(op), uop->x.bytes,
                 uop->x.peer);
}

static void emit_post(void *ctx, const swy_coll_xfer_t *x)
{
    struct swy_request *op = ctx;
    if (!op_alive(op))
        return;
    swy_uop_t *uop = swy_sched_uop_new(op, x, 0);
    if (uop == NULL) {
        op_error(op, SWY_ERR_NO_MEMORY, "op #%u '%s': out of memory for a "
                 "micro-op", op->seq, op_label(op));
        return;
    }
    if (uop->tp == NULL) {
        op_error(op, SWY_ERR_UNSUPPORTED, "op #%u '%s': no transport moves "
                 "%s memory to rank %d", op->seq, op_label(op),
                 swy_mem_type_name(x->mem), x->peer);
        return;
    }
    if (x->is_send) {
        uop->state = UOP_READY;
        if (x->mem != SWY_MEM_HOST && op->hdr_seen[x->peer] == HDR_EXPECTED)
            swy_list_push_back(&op->gated, &uop->q_link);
        else
            swy_sched_ready_insert(op->sched, uop);
        return;
    }
    if (op->starting) { /* see op_post_sends_first */
        uop->state = UOP_READY;
        swy_list_push_back(&op->start_recvs, &uop->q_link);
        return;
    }
    emit_post_recv(op, uop);
}

void swy_sched_handle_completion(swy_sched_t *s, swy_uop_t *uop)
{
    struct swy_request *op = uop->op;
    if (uop->x.is_send && uop->posted_ns != 0)
        swy_sched_link_account(s, uop, -1);
    if (s->trace != NULL && uop->posted_ns != 0 && !uop->is_header) {
        char name[64];
        snprintf(name, sizeof(name), "%.44s #%u/%u",
                 op ? op_label(op) : "detached", uop->seq, uop->x.tag);
        swy_trace_event(s->trace, uop->x.is_send ? 1 + uop->lpeer
                                                 : 100000 + uop->lpeer,
                        name,
                        !uop->x.is_send      ? "recv"
                        : uop->issued_early ? "send_early"
                                            : "send",
                        uop->posted_ns, swy_time_ns(), uop->prio,
                        uop->x.bytes, uop->lpeer, uop->seq, uop->hints);
    }
    swy_list_del(&uop->op_link);
    if (op == NULL) { /* detached from a failed op */
        uop_release(s, uop);
        return;
    }
    op->n_live--;
    op->n_probes -= uop->probe;
    if (op->failing) { /* cancelled or drained: nothing more to do */
        uop_release(s, uop);
        swy_sched_op_drain(op, 0);
        return;
    }
    op->in_handler = 1;
    if (uop->probe) {
        swy_sched_p2p_probe_done(op, uop);
    } else if (uop->status == SWY_ERR_MISMATCH && !uop->x.is_send) {
        swy_sched_data_size_mismatch(op, uop);
    } else if (uop->status != SWY_OK) {
        op_error(op, uop->status == SWY_ERR_ABORTED ? SWY_ERR_ABORTED
                                                    : SWY_ERR_TRANSPORT,
                 "op #%u '%s': %s %zu bytes %s rank %d failed: %s", op->seq,
                 op_label(op), uop->x.is_send ? "sending" : "receiving",
                 uop->x.bytes, uop->x.is_send ? "to" : "from", uop->x.peer,
                 swy_status_string(uop->status));
    } else if (uop->x.is_send) {
        if (!uop->is_header)
            s->stats.bytes_sent += uop->x.bytes;
    } else if (uop->is_header) {
        swy_sched_handle_header(op, uop->x.peer, uop->bytes_done);
    } else if (uop->bytes_done != uop->x.bytes) {
        swy_sched_data_size_mismatch(op, uop);
    } else {
        s->stats.bytes_received += uop->x.bytes;
        s->stats.micro_ops_received++;
        swy_coll_emit_t emit = {emit_post, op};
        swy_status_t status = op->algo->recv_done(op->state, &uop->x, &emit);
        if (status != SWY_OK)
            op_error(op, status, "op #%u '%s': processing a chunk from rank "
                     "%d failed", op->seq, op_label(op), uop->x.peer);
    }
    uop_release(s, uop);
    swy_sched_op_settle(op);
}

void swy_sched_op_settle(struct swy_request *op)
{
    if (op_alive(op) && op->n_live == 0 && !op->held)
        op_finish(op);
    op->in_handler = 0;
    if (op->completed && op->released && !op->pins)
        op_free(op);
}

/* The sends that start() made ready go to the transports before its
 * receives: a receive that matches a rendezvous already waiting (a peer
 * that posted first) may copy the whole message inside irecv() (UCX's
 * CMA get), and with the receives first a late rank issued its own sends
 * only after those copies, while its peers waited for them. The copies
 * take the same time either way; what changes is that the peers no longer
 * wait for a late rank's sends (docs/performance.md, "coll").
 * Receives emitted later, by recv_done(), post at once as before. */
static void op_post_sends_first(swy_sched_t *s, struct swy_request *op)
{
    if (op_alive(op))
        swy_sched_issue_all(s);
    /* op_error() frees what is left (READY micro-ops) with the op. */
    while (op_alive(op) && !swy_list_empty(&op->start_recvs)) {
        swy_uop_t *uop =
            swy_container_of(op->start_recvs.next, swy_uop_t, q_link);
        swy_list_del(&uop->q_link);
        emit_post_recv(op, uop);
    }
}

/* Where an op is cut, under s->lock. The partition (the micro-op that a
 * higher priority waits behind at most), except for an alltoallv with
 * every rank on one host and the partition left to auto: its chunks have
 * no step to pipeline with and nothing to preempt them, so host memory is
 * cut at SWY_COLL_BULK_BYTES, above the eager size, where UCX moves it
 * with one copy, and device memory at SWY_COLL_BULK_DEVICE_BYTES. The
 * same on every rank: multi_host and partition_auto come from the shared
 * topology and the same settings, the memory type must agree (and the op
 * header compares the result). */
static size_t op_partition_bytes(const swy_sched_comm_t *c,
                                 const swy_coll_args_t *args)
{
    const swy_sched_t *s = c->sched;
    if (args->kind != SWY_COLL_ALLTOALLV || !s->partition_auto ||
        c->multi_host)
        return s->p.partition_bytes;
    size_t bulk = args->mem == SWY_MEM_HOST ? SWY_COLL_BULK_BYTES
                                            : SWY_COLL_BULK_DEVICE_BYTES;
    return SWY_MAX(s->p.partition_bytes, bulk);
}

/* Under s->lock: the algorithm starts the op (a held chunk's at its
 * release): its first micro-ops go out. */
void op_run(struct swy_request *op)
{
    if (op_alive(op)) {
        swy_coll_emit_t emit = {emit_post, op};
        op->starting = 1;
        swy_status_t status = op->algo->start(op->state, &emit);
        op->starting = 0;
        if (status != SWY_OK && op_alive(op))
            op_error(op, status, "op #%u '%s': start failed: %s", op->seq,
                     op_label(op), swy_err_last());
        op_post_sends_first(op->sched, op);
    }
    if (op_alive(op) && op->n_live == 0)
        op_finish(op);
}

/* A new op of view c for args, its arrays copied and its algorithm
 * chosen; not yet known to the engine. */
static swy_status_t op_prepare(swy_sched_comm_t *c,
                               const swy_coll_args_t *args, int priority,
                               int64_t order, const char *name, int held,
                               struct swy_request **op_p)
{
    swy_sched_t *s = c->sched;
    int w = c->nranks;
    int count_arrays = args->kind == SWY_COLL_ALLTOALLV    ? 4
                       : args->kind == SWY_COLL_ALLGATHERV ? 2
                                                           : 0;
    struct swy_request *op = op_alloc(w, count_arrays);
    if (op == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    op->sched = s;
    op->comm = c;
    op->p2p = args->kind == SWY_COLL_SEND || args->kind == SWY_COLL_RECV;
    op->priority = priority;
    op->order = order;
    op->deferred_peer = -1;
    if (name != NULL) { /* op_alloc zeroed the rest */
        size_t len = strnlen(name, sizeof(op->name) - 1);
        memcpy(op->name, name, len);
    }
    op->args = *args;
    op->args.offload_class =
        args->offload ? (uint8_t)swy_sched_lane_class(priority) : 0;
    /* What the algorithm's choice depends on (lib/coll chooses). */
    op->args.multi_host = (uint8_t)c->multi_host;
    op->args.host_of = c->host_of;
    op->args.shm = args->mem == SWY_MEM_HOST ? c->shm : NULL;
    op->args.shm_a2a = args->mem == SWY_MEM_HOST ? c->shm_a2a : NULL;
    op->algo = swy_coll_algo_choose(&op->args, w);
    /* A held chunk starts when the caller says, which need not be in the
     * order of the ops' numbers, nor at the same point among other ops on
     * every rank; the shared-memory channel takes ops in the order they
     * start: such a chunk goes through the transports, which match by
     * tag (the same choice on every rank: held is everyone's). */
    op->held = (uint8_t)(held != 0);
    op->lane_hold = (uint8_t)(args->lane_group != 0);
    op->pins = args->lane_group != 0;
    if (held && args->kind == SWY_COLL_ALLTOALLV &&
        op->args.alltoallv_algo == SWY_COLL_A2A_SHM) {
        op->args.alltoallv_algo = SWY_COLL_A2A_PAIRWISE;
        op->algo = swy_coll_algo_for(&op->args, w);
    }
    swy_list_init(&op->uops);
    swy_list_init(&op->gated);
    swy_list_init(&op->start_recvs);
    swy_list_init(&op->launches);
    swy_list_init(&op->link);
    swy_list_init(&op->clink);
    swy_list_init(&op->plink);
    if (op->algo == NULL) {
        op_free(op);
        return swy_err_set(SWY_ERR_UNSUPPORTED, "sched", "no algorithm for "
                           "%s", swy_coll_kind_name(args->kind));
    }
    if (args->kind == SWY_COLL_ALLGATHERV) {
        size_t *copy = op->counts_copy;
        memcpy(copy, args->recvcounts, (size_t)w * sizeof(size_t));
        memcpy(copy + w, args->rdispls, (size_t)w * sizeof(size_t));
        op->args.sendcounts = op->args.sdispls = NULL;
        op->args.recvcounts = copy;
        op->args.rdispls = copy + w;
    } else if (args->kind == SWY_COLL_ALLTOALLV) {
        size_t *copy = op->counts_copy;
        memcpy(copy, args->sendcounts, (size_t)w * sizeof(size_t));
        memcpy(copy + w, args->sdispls, (size_t)w * sizeof(size_t));
        memcpy(copy + 2 * w, args->recvcounts, (size_t)w * sizeof(size_t));
        memcpy(copy + 3 * w, args->rdispls, (size_t)w * sizeof(size_t));
        op->args.sendcounts = copy;
        op->args.sdispls = copy + w;
        op->args.recvcounts = copy + 2 * w;
        op->args.rdispls = copy + 3 * w;
    } else {
        op->args.sendcounts = op->args.sdispls = NULL;
        op->args.recvcounts = op->args.rdispls = NULL;
    }
    *op_p = op;
    return SWY_OK;
}

/* Under s->lock: a failed view takes no op; else the op's sequence and
 * the algorithm's state. On failure the op is not the engine's (the
 * caller frees it). */
static swy_status_t op_admit(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    swy_sched_comm_t *c = op->comm;
    const swy_coll_args_t *args = &op->args;
    if (c->failed == SWY_OK && c == s->world) /* the job's news first */
        swy_sched_check_control_plane(s, swy_time_s());
    if (c->failed != SWY_OK) {
        swy_err_store(c->failmsg);
        return c->failed;
    }
    if (args->offload && (c->lane == NULL || c->lane->aborted))
        return swy_err_set(SWY_ERR_ABORTED, "sched", "%s of device memory: "
                           "the device plugin's communicators of this "
                           "communicator %s%s", swy_coll_kind_name(args->kind),
                           c->lane == NULL ? "were not made" : "were given up: ",
                           c->lane == NULL ? "" : c->lane->why);
    /* Under tag matching a receive takes its pair's sequence when a send
     * with its tag comes, but a device communicator matches a pair's
     * calls in the order they were launched. */
    if (op->p2p && args->offload && args->kind == SWY_COLL_RECV &&
        s->p2p_match_tag)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "sched", "a receive of "
                           "device memory under SWY_P2P_MATCH=tag: the device "
                           "communicators match a pair's sends and receives "
                           "in posting order, as NCCL's; set SWY_P2P_MATCH="
                           "order, or receive into host memory");
    if (op->p2p)
        swy_sched_p2p_admit(op);
    else
        op->seq = c->next_seq++ & 0xFFFFFFu;
    op->eseq = s->next_eseq++ & 0xFFFFFFu;
    op->args.partition_bytes = op_partition_bytes(c, &op->args);
    s->now_ns = swy_time_ns();
    op->post_ns = s->now_ns;
    op->deadline = (double)s->now_ns * 1e-9 + s->p.timeout_s;
    swy_err_clear(); /* what create() or start() set is theirs */
    /* A receive from any source is set up as one from this rank until
     * it matched a send (p2p.c). */
    swy_coll_args_t create_args = op->args;
    if (create_args.root == SWY_ANY_SOURCE)
        create_args.root = c->rank;
    swy_status_t status = op->algo->create(&create_args, c->rank, c->nranks,
                                           op->args.partition_bytes,
                                           &op->state);
    if (status != SWY_OK) {
        /* The algorithm said why, or it is the size (tag space). */
        char why[SWY_ERRMSG_MAX];
        snprintf(why, sizeof(why), "%s", swy_err_last());
        return swy_err_set(status, "sched", "cannot set up %s%s%s",
                           swy_coll_kind_name(args->kind),
                           why[0] != '\0' ? ": " : " of this size", why);
    }
    return SWY_OK;
}

/* Under s->lock: the op's header exchange with its header peers, or, for
 * a chunk of a series other than its head (chunks[0]), the head's view of
 * it. */
void op_headers(struct swy_request *op,
                struct swy_request *const *chunks, int n)
{
    const struct swy_request *head =
        chunks != NULL && op != chunks[0] ? chunks[0] : NULL;
    swy_sched_t *s = op->sched;
    swy_sched_comm_t *c = op->comm;
    /* Headers first: they leave before any data on the same link. */
    int *peers = op->hdr_peers;
    int npeers = swy_coll_header_peers(&op->args, c->rank, c->nranks, peers);
    for (int i = 0; i < npeers && op_alive(op); i++) {
        int peer = peers[i];
        if (head != NULL) {
            op->hdr_seen[peer] = head->hdr_seen[peer];
            continue;
        }
        swy_coll_header_make(&op->args, op->seq, peer, &op->hdr_out[peer]);
        if (op->series_head)
            swy_sched_series_header(chunks, n, peer);
        op->hdr_seen[peer] = HDR_EXPECTED;
        swy_coll_xfer_t rx = {.peer = peer, .is_send = 0,
                              .tag = SWY_COLL_TAG_HEADER,
                              .buf = &op->hdr_in[peer],
                              .bytes = sizeof(swy_coll_header_t)};
        /* A receive from any source caught its peer's header (p2p.c). */
        int early = swy_sched_p2p_take_early_header(op, peer);
        swy_uop_t *ruop = early ? NULL : swy_sched_uop_new(op, &rx, 1);
        swy_coll_xfer_t sx = rx;
        sx.is_send = 1;
        sx.buf = &op->hdr_out[peer];
        swy_uop_t *suop = swy_sched_uop_new(op, &sx, 1);
        if (suop == NULL || (!early && (ruop == NULL || ruop->tp == NULL))) {
            op_error(op, SWY_ERR_NO_MEMORY, "op #%u: cannot set up the "
                     "header exchange with rank %d", op->seq, peer);
            break;
        }
        if (!early && swy_sched_uop_post_recv(ruop) != SWY_OK) {
            op_error(op, SWY_ERR_TRANSPORT, "op #%u: cannot post the header "
                     "receive from rank %d", op->seq, peer);
            break;
        }
        /* Headers jump the queue: they are tiny and gate nothing. */
        suop->state = UOP_READY;
        swy_list_insert_before(s->links[suop->lpeer].ready.next,
                               &suop->q_link);
        s->stats.headers_sent++;
        if (early) {
            /* Ours leaves first: a peer whose header disagrees then sees
             * the disagreement itself, rather than only hearing of it
             * (or of this rank's exit, if that comes first). */
            swy_sched_issue_all(s);
            swy_sched_handle_header(op, peer, sizeof(swy_coll_header_t));
        }
    }
}

/* Under s->lock, after op_admit: the op joins the engine, exchanges its
 * headers and starts. In a series (chunks[0..n-1], NULL for a lone op)
 * only the head, chunks[0], exchanges headers, for all: the others start
 * with its view of them. */
static void op_start(struct swy_request *op, struct swy_request *const *chunks,
                     int n)
{
    swy_sched_t *s = op->sched;
    swy_sched_comm_t *c = op->comm;
    s->stats.ops_posted++;
    swy_list_push_back(&s->ops, &op->link);
    swy_list_push_back(&c->ops, &op->clink);
    tally_add(&s->pending_ops, op->priority, 1);
    if (op->priority > s->max_prio_seen)
        s->max_prio_seen = op->priority;
    /* The announced high-priority op is here: the hint has served. */
    if (s->phase == SWY_PHASE_A2A_IMMINENT && op->priority >= SWY_PRIO_HIGH)
        s->phase = SWY_PHASE_NONE;

    /* An offloaded op's launches queue in post order, whenever it
     * starts: the order every rank gives the plugin (lane.c). */
    if (op->args.offload)
        swy_sched_lane_enqueue(op);
    /* A held chunk of device memory exchanges its own header when it is
     * released: a device send on a transport, or the chunk's launch,
     * waits for its peer's header, which must then mean that the peer
     * released this chunk too (NCCL blocks a stream on a send until its
     * receive is matched; engine_impl.h). */
    if (op->p2p_blocked || op->p2p_listen) { /* starts its turn */
        swy_sched_p2p_start_blocked(op);
        return;
    }
    /* op_run may complete a send to this rank (one of no elements). */
    int self_send =
        op->args.kind == SWY_COLL_SEND && op->args.root == c->rank;
    uint32_t seq = op->seq, tag = op->args.user_tag;
    if (!(op->held && op->args.mem != SWY_MEM_HOST))
        op_headers(op, chunks, n);
    if (!op->held)
        op_run(op);
    if (self_send)
        swy_sched_p2p_self_sent(c, seq, tag);
}

void swy_sched_op_begin(struct swy_request *op)
{
    op_headers(op, NULL, 0);
    op_run(op);
}

/* A lone op prepared and admitted: on SWY_OK with s->lock held. */
static swy_status_t op_prepare_admit(swy_sched_comm_t *c,
                                     const swy_coll_args_t *args,
                                     int priority, int64_t order,
                                     const char *name, int held,
                                     struct swy_request **op_p)
{
    swy_sched_t *s = c->sched;
    struct swy_request *op;
    SWY_CHECK(op_prepare(c, args, priority, order, name, held, &op));
    pthread_mutex_lock(&s->lock);
    swy_status_t status = op_admit(op);
    if (status != SWY_OK) {
        pthread_mutex_unlock(&s->lock);
        op_free(op);
        return status;
    }
    *op_p = op;
    return SWY_OK;
}

swy_status_t swy_sched_post(swy_sched_comm_t *c, const swy_coll_args_t *args,
                            int priority, int64_t order, const char *name,
                            struct swy_request **req_p)
{
    swy_sched_t *s = c->sched;
    struct swy_request *op = NULL;
    SWY_CHECK(op_prepare_admit(c, args, priority, order, name, 0, &op));
    op_start(op, NULL, 0);
    swy_sched_progress_locked(s);
    pthread_mutex_unlock(&s->lock);
    /* A thread asleep on the transports' fds wakes for this op's incoming
     * traffic; one parked while a caller waited hears of the op from
     * swy_sched_handoff() if the caller will not wait for it at once. */
    *req_p = op;
    return SWY_OK;
}

swy_status_t swy_sched_post_on_stream(swy_sched_comm_t *c,
                                      const swy_coll_args_t *args,
                                      int priority, int64_t order,
                                      const char *name,
                                      struct swy_request **req_p)
{
    swy_sched_t *s = c->sched;
    struct swy_request *op = NULL;
    if (!swy_device_has_streams(swy_device_ops()))
        return swy_err_set(SWY_ERR_INTERNAL, "sched", "an op on a stream "
                           "without the device's stream functions");
    /* Held: it starts when the stream gets there, with its own header
     * exchange then (op_start), as a held chunk of device memory. */
    SWY_CHECK(op_prepare_admit(c, args, priority, order, name, 1, &op));
    op->on_stream = 1;
    swy_list_push_back(&s->stream_ops, &op->slink);
    s->n_stream_ops++;
    op_start(op, NULL, 0);
    pthread_mutex_unlock(&s->lock);
    *req_p = op;
    return SWY_OK;
}

swy_status_t swy_sched_post_series(swy_sched_comm_t *c,
                                   const swy_coll_args_t *args, int n,
                                   int held, int on_stream, int priority,
                                   int64_t order, const char *name,
                                   struct swy_request **reqs)
{
    swy_sched_t *s = c->sched;
    swy_status_t status = SWY_OK;
    struct swy_request **chunks = NULL;
    if (on_stream) {
        if (held || !swy_device_has_streams(swy_device_ops()))
            return swy_err_set(SWY_ERR_INTERNAL, "sched", "a series on a "
                               "stream that is held, or without the "
                               "device's stream functions");
        chunks = swy_malloc((size_t)n * sizeof(*chunks));
        if (chunks == NULL)
            return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    }
    for (int j = 0; j < n; j++) {
        char label[sizeof(reqs[0]->name)];
        snprintf(label, sizeof(label), "%.*s[%d/%d]",
                 (int)sizeof(label) - 24, name != NULL ? name : "chunk", j,
                 n);
        status = op_prepare(c, &args[j], priority, order + j, label,
                            held || on_stream, &reqs[j]);
        if (status != SWY_OK) {
            while (j-- > 0)
                op_free(reqs[j]);
            swy_free(chunks);
            return status;
        }
    }
    pthread_mutex_lock(&s->lock);
    /* Every chunk admitted before any starts: a chunk that cannot be set
     * up leaves none posted (the sequence numbers it took are lost as a
     * lone op's are when its set-up fails). */
    for (int j = 0; j < n && status == SWY_OK; j++)
        status = op_admit(reqs[j]);
    if (status != SWY_OK) {
        pthread_mutex_unlock(&s->lock);
        for (int j = 0; j < n; j++)
            op_free(reqs[j]);
        swy_free(chunks);
        return status;
    }
    /* Held chunks of device memory are lone ops, each with its own header
     * at its release (op_start). Chunks on a stream are held until the
     * stream gets there, and then start together, head first. */
    int share = !(held && args[0].mem != SWY_MEM_HOST);
    uint32_t id = 0;
    if (share) {
        id = ++c->next_series;
        if (id == 0) /* 0 is a lone op's */
            id = ++c->next_series;
    }
    for (int j = 0; j < n; j++) {
        reqs[j]->series = id;
        reqs[j]->series_head = share && j == 0;
        if (on_stream) {
            reqs[j]->on_stream = 1;
            reqs[j]->series_head_op = reqs[0];
            swy_list_push_back(&s->stream_ops, &reqs[j]->slink);
            s->n_stream_ops++;
        }
    }
    if (on_stream) {
        memcpy(chunks, reqs, (size_t)n * sizeof(*chunks));
        reqs[0]->series_chunks = chunks;
        reqs[0]->series_n = n;
    }
    for (int j = 0; j < n; j++)
        op_start(reqs[j], share ? reqs : NULL, share ? n : 0);
    swy_sched_progress_locked(s);
    pthread_mutex_unlock(&s->lock);
    return SWY_OK;
}

swy_status_t swy_sched_release_held(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    pthread_mutex_lock(&s->lock);
    /* An op waiting for its stream is held too, but not the caller's to
     * start. */
    if (!op->held || op->on_stream) {
        pthread_mutex_unlock(&s->lock);
        return swy_err_set(SWY_ERR_INVALID_ARG, "sched", "op #%u '%s': not "
                           "a held chunk, or released already", op->seq,
                           op_label(op));
    }
    op->held = 0;
    if (op->args.mem != SWY_MEM_HOST && op_alive(op))
        op_headers(op, NULL, 0); /* see op_start */
    op_run(op);
    swy_sched_progress_locked(s);
    pthread_mutex_unlock(&s->lock);
    return SWY_OK;
}

swy_status_t swy_sched_test(struct swy_request *op, int *done_p)
{
    swy_sched_t *s = op->sched;
    pthread_mutex_lock(&s->lock);
    if (!op->completed && !s->threaded)
        swy_sched_progress_locked(s);
    int done = op->completed;
    swy_status_t status = done ? op->status : SWY_OK;
    if (done && status != SWY_OK)
        swy_err_store(op->errmsg);
    pthread_mutex_unlock(&s->lock);
    *done_p = done;
    return status;
}

static int request_done(void *arg)
{
    return ((struct swy_request *)arg)->completed;
}

swy_status_t swy_sched_wait(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    swy_sched_wait_until(s, request_done, op, 1e300);
    pthread_mutex_lock(&s->lock);
    swy_status_t status = op->status;
    if (status != SWY_OK)
        swy_err_store(op->errmsg);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_release(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    pthread_mutex_lock(&s->lock);
    if (op->completed && !op->on_stream && !op->pins)
        op_free(op);
    else
        op->released = 1;
    pthread_mutex_unlock(&s->lock);
}

void *swy_sched_owner(const struct swy_request *op)
{
    return op->comm->owner;
}

int swy_sched_source(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    pthread_mutex_lock(&s->lock);
    int source = op->args.kind == SWY_COLL_RECV ? op->args.root : -1;
    pthread_mutex_unlock(&s->lock);
    return source;
}
