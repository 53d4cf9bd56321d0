/* One ready queue per peer process (link): micro-ops of every
 * communicator, in the policy's order, admitted by the policy against
 * what is in flight on the link and on the host's uplink, and issued to
 * the transports (see engine_impl.h). */
#include <stdlib.h>

#include "sched/engine_impl.h"

static void policy_view(const swy_uop_t *uop, swy_policy_uop_v1_t *view)
{
    const struct swy_request *op = uop->op;
    *view = (swy_policy_uop_v1_t){
        .struct_size = sizeof(*view), .priority = uop->prio, .order = op->order, .op_seq = op->eseq,
        .ready_index = uop->emit_index, .ready_ns = uop->ready_ns,
        .bytes = uop->x.bytes, .peer = uop->lpeer,
        .op_inflight_bytes = op->inflight_by_peer[uop->x.peer],
        .fair_key = uop->fair_key};
}

void swy_sched_ready_insert(swy_sched_t *s, swy_uop_t *uop)
{
    swy_link_t *link = &s->links[uop->lpeer];
    swy_list_t *head = &link->ready, *pos = head->prev;
    swy_policy_uop_v1_t mine, other_view;
    uop->ready_ns = s->now_ns;
    /* Start-time fair queueing (Goyal et al., SIGCOMM'96): an op's next
     * micro-op starts where its previous one finished, or at the link's
     * current virtual time if the op was idle — so an op that arrives
     * late shares the link from now on instead of owning it. */
    struct swy_request *rop = uop->op;
    if (!uop->fair_keyed) { /* once: a gated micro-op comes back keyed */
        uint64_t start = SWY_MAX(rop->fair_finish[uop->x.peer],
                                 link->fair_clock);
        uop->fair_key = start;
        rop->fair_finish[uop->x.peer] = start + uop->x.bytes;
        uop->fair_keyed = 1;
    }
    /* Held behind lower priority already on the wire? (stats) */
    uop->waited_behind_lower =
        tally_sum(&link->inflight_by_prio, uop->prio - 1, 1) > 0;
    policy_view(uop, &mine);
    /* Usually appended at the tail: scan backwards past later ones. */
    while (pos != head) {
        swy_uop_t *other = swy_container_of(pos, swy_uop_t, q_link);
        policy_view(other, &other_view);
        if (s->policy.ops->compare(s->policy.ctx, &other_view, &mine) <= 0)
            break;
        pos = pos->prev;
    }
    swy_list_insert_before(pos->next, &uop->q_link);
}

void swy_sched_link_account(swy_sched_t *s, swy_uop_t *uop, int sign)
{
    swy_link_t *link = &s->links[uop->lpeer];
    if (uop->unconfirmed) { /* see UNCONFIRMED_MIN_BYTES */
        if (uop->op != NULL) {
            size_t *u = &uop->op->unconfirmed_by_peer[uop->x.peer];
            *u = sign > 0 ? *u + uop->x.bytes
                          : *u - SWY_MIN(*u, uop->x.bytes);
        }
        return;
    }
    if (link->remote) {
        if (sign > 0) {
            s->uplink_inflight_bytes += uop->x.bytes;
            tally_add(&s->uplink_inflight_by_prio, uop->prio, uop->x.bytes);
        } else {
            s->uplink_inflight_bytes -= uop->x.bytes;
            tally_sub(&s->uplink_inflight_by_prio, uop->prio, uop->x.bytes);
        }
    }
    if (sign > 0) {
        link->inflight_bytes += uop->x.bytes;
        tally_add(&link->inflight_by_prio, uop->prio, uop->x.bytes);
        if (uop->op != NULL)
            uop->op->inflight_by_peer[uop->x.peer] += uop->x.bytes;
    } else {
        link->inflight_bytes -= uop->x.bytes;
        tally_sub(&link->inflight_by_prio, uop->prio, uop->x.bytes);
        if (uop->op != NULL)
            uop->op->inflight_by_peer[uop->x.peer] -= uop->x.bytes;
    }
}

uint32_t swy_sched_oldest_op(const swy_sched_comm_t *c)
{
    const swy_list_t *pos;
    for (pos = c->ops.next; pos != &c->ops; pos = pos->next) {
        const struct swy_request *op =
            swy_container_of(pos, struct swy_request, clink);
        if (op->args.kind != SWY_COLL_RECV)
            return op->eseq;
    }
    return 0;
}

/* Give the link's queue to the policy: issue what it admits. A skipped
 * micro-op stays; scanning stops after a bounded number of skips so the
 * cost per call stays small. */
static int issue_link(swy_sched_t *s, int peer)
{
    swy_link_t *link = &s->links[peer];
    if (swy_list_empty(&link->ready))
        return 0; /* the common case while waiting: no clock read */
    int issued = 0, skips = 0, multi_view = 0;
    swy_list_t *pos = link->ready.next;
    uint64_t stopped[SWY_SCHED_COMM_IDS / 64] = {0};
    uint32_t first_cid =
        swy_container_of(pos, swy_uop_t, q_link)->op->comm->id;
    const swy_policy_v1_t *policy = s->policy.ops;
    uint64_t now = s->now_ns;
    /* The oldest op of the micro-op's own communicator: fifo is one
     * stream per communicator, as NCCL's, so that communicators whose ops
     * ranks post in different orders never wait for each other. Looked up
     * once per communicator and pass (receives are skipped on the way). */
    const swy_sched_comm_t *oldest_of = NULL;
    uint32_t oldest = 0;
    while (pos != &link->ready && skips < 64) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, q_link);
        if (uop->op->comm != oldest_of) {
            oldest_of = uop->op->comm;
            oldest = swy_sched_oldest_op(oldest_of);
        }
        swy_policy_uop_v1_t view;
        policy_view(uop, &view);
        swy_policy_link_v1_t lv = {
            .struct_size = sizeof(lv), .peer = peer, .inflight_bytes = link->inflight_bytes,
            .inflight_le_bytes = tally_sum(&link->inflight_by_prio,
                                           uop->prio, 1),
            .inflight_ge_bytes = tally_sum(&link->inflight_by_prio,
                                           uop->prio - 1, 0),
            .higher_pending = tally_sum(&s->pending_ops, uop->prio, 0) > 0,
            .phase = s->phase, .oldest_op_seq = oldest,
            .max_priority_seen = s->max_prio_seen,
            .window_bytes = s->p.window_bytes, .credit_bytes = s->credit_bytes,
            .partition_bytes = s->p.partition_bytes, .now_ns = now,
            .burst_bytes = link->burst_bytes};
        if (link->remote) {
            lv.uplink_inflight_bytes = s->uplink_inflight_bytes;
            lv.uplink_inflight_le_bytes =
                tally_sum(&s->uplink_inflight_by_prio, uop->prio, 1);
        } else {
            lv.uplink_inflight_bytes = lv.inflight_bytes;
            lv.uplink_inflight_le_bytes = lv.inflight_le_bytes;
        }
        int cpeer = uop->x.peer; /* the rank in the op's communicator */
        int unconfirmed = !uop->is_header &&
                          uop->op->hdr_seen[cpeer] == HDR_EXPECTED &&
                          uop->x.bytes >= UNCONFIRMED_MIN_BYTES;
        size_t unconf = unconfirmed ? uop->op->unconfirmed_by_peer[cpeer] : 0;
        /* A series' head sends early for all its chunks: were every chunk
         * to send its own allowance early, the chunks would share the
         * link and land together instead of one after another. */
        int later_chunk = uop->op->series != 0 && !uop->op->series_head;
        if ((unconfirmed && later_chunk) ||
            (unconf > 0 && unconf + uop->x.bytes >
                               UNCONFIRMED_PARTITIONS * s->p.partition_bytes)) {
            /* Enough of this op is out unconfirmed: the rest waits for
             * the peer's header in op->gated, out of the queue (where it
             * would use up the scan's skips and hide other ops'
             * micro-ops that the peer may be waiting for). */
            pos = pos->next;
            swy_list_del(&uop->q_link);
            swy_list_push_back(&uop->op->gated, &uop->q_link);
            continue;
        }
        uint32_t cid = uop->op->comm->id;
        if (stopped[cid / 64] & (UINT64_C(1) << (cid % 64))) {
            pos = pos->next;
            skips++;
            continue;
        }
        int verdict = uop->is_header
                          ? SWY_POLICY_ISSUE
                          : policy->admit(s->policy.ctx, &lv, &view);
        pos = pos->next;
        if (verdict == SWY_POLICY_STOP) {
            /* Nothing more of this communicator leaves on the link now;
             * another's may (fifo is one stream per communicator, and a
             * communicator's stream never waits for another's). */
            stopped[cid / 64] |= UINT64_C(1) << (cid % 64);
            multi_view |= cid != first_cid;
            if (!multi_view && s->comms.next->next == &s->comms)
                break; /* one view: the link is done */
            skips++;
            continue;
        }
        if (verdict != SWY_POLICY_ISSUE) {
            skips++;
            continue;
        }
        swy_list_del(&uop->q_link);
        uop->state = UOP_POSTED;
        uop->posted_ns = now;
        uop->unconfirmed = uop->issued_early = (uint8_t)unconfirmed;
        swy_sched_link_account(s, uop, +1);
        if (!uop->is_header)
            link->fair_clock = SWY_MAX(link->fair_clock, uop->fair_key);
        if (uop->waited_behind_lower && !uop->is_header)
            s->stats.high_wait_s += (double)(now - uop->ready_ns) * 1e-9;
        /* The link switches to a higher priority: lower waits. */
        if (!uop->is_header && link->last_prio >= 0 &&
            uop->prio > link->last_prio)
            s->stats.preemptions++;
        if (!uop->is_header)
            link->last_prio = uop->prio;
        /* Headers carry no priority or hint: they gate nothing. */
        uint32_t hints = 0;
        if (!uop->is_header && uop->x.bulk)
            hints |= SWY_SEND_HINT_BULK;
        /* The policy bounds what it holds back by the bytes in flight:
         * they must be what a higher priority sent later waits behind. */
        if (!uop->is_header && s->policy.by_priority &&
            uop->prio < s->max_prio_seen)
            hints |= SWY_SEND_HINT_PREEMPTIBLE;
        uop->hints = (uint8_t)hints;
        swy_status_t status = swy_transport_isend(
            uop->tp, peer, uop->wire_tag, uop->x.buf, uop->x.bytes,
            uop->x.mem, uop->is_header ? -1 : uop->prio, hints,
            swy_sched_uop_complete_cb, uop, &uop->handle);
        if (status != SWY_OK) {
            swy_sched_link_account(s, uop, -1);
            uop->state = UOP_READY; /* never reached the transport */
            op_error(uop->op, status, "op #%u '%s': sending %zu bytes to "
                     "rank %d failed", uop->seq, op_label(uop->op),
                     uop->x.bytes, cpeer);
            pos = link->ready.next; /* the queue changed */
            oldest_of = NULL;       /* and maybe the ops */
            continue;
        }
        s->stats.micro_ops_sent++;
        issued++;
    }
    return issued;
}

int swy_sched_issue_all(swy_sched_t *s)
{
    int issued = 0;
    for (int i = 1; i <= s->p.nranks; i++)
        issued += issue_link(s, (s->p.rank + i) % s->p.nranks);
    return issued + swy_sched_lane_issue(s);
}
