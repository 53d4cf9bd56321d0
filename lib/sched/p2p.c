/* Sends and receives: each takes its ordered pair's sequence, so they
 * match in posting order per pair whatever else either rank posts; and
 * receives from any source (SWY_ANY_SOURCE), as MPI's.
 *
 * A receive from any source cannot take a sequence when posted: it
 * matches the first send to arrive from any rank. It listens instead
 * with a probe per peer, a header receive at the sequence that peer's
 * next send carries (a send's header leaves as soon as it is posted;
 * a send to this rank is known locally). The first probe to complete
 * decides the source: the receive takes that pair's sequence and goes on
 * as a receive from that rank, with the header it already holds; the
 * other probes are cancelled. A probe that completed before its cancel
 * caught the header of another rank's send, which the next receive from
 * that rank or from any source takes (comm->early_headers). Receives posted after one from
 * any source wait (p2p_blocked) until its probes are done: the sequence
 * of each depends on what it matched, and one must never listen where a
 * probe still does. That is MPI's order: a send matches the first
 * receive posted for it.
 *
 * Under SWY_P2P_MATCH=tag (s->p2p_match_tag) receives match on tags, as
 * MPI's and gloo's do: a receive takes the first send from its source
 * (or from any) that carries its tag and no receive posted before it
 * took. Sends are as ever. No receive takes a sequence when posted:
 * each listens (p2p_listen, comm->p2p_listening in post order) until a
 * header with its tag comes. Each peer has at most one probe out at a
 * time, at the next sequence of that pair nobody has heard (its
 * p2p_recv_seq), owned by the oldest listening receive that could take
 * from it; a header it catches goes to the oldest listening receive it
 * fits, or waits in comm->early_headers (in order per peer) for a later
 * one. Receives from different ranks, or with different tags, wait for
 * nothing but their own send. A send to this rank exchanges no header,
 * and may complete before any receive (one of no elements does at
 * once): when posted it goes to the oldest listening receive it fits,
 * or waits in comm->early_headers as if its header had come. See
 * engine_impl.h for the locking. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/engine_impl.h"

static void unblock(swy_sched_comm_t *c);

/* A header a probe caught for a later receive. */
typedef struct {
    swy_list_t link; /* comm->early_headers */
    int peer;
    uint32_t seq;
    swy_coll_header_t hdr;
} early_header_t;

static int tag_mode(const swy_sched_comm_t *c)
{
    return c->sched->p2p_match_tag;
}

static uint32_t take_recv_seq(swy_sched_comm_t *c, int peer)
{
    return c->p2p_recv_seq[peer]++ & 0xFFFFFFu;
}

/* Has this rank posted a send to itself that no receive took yet? */
static int self_send_waiting(const swy_sched_comm_t *c)
{
    return (int32_t)(c->p2p_send_seq[c->rank] - c->p2p_recv_seq[c->rank]) > 0;
}

/* A probe of op: a receive of peer's header at the pair's next sequence
 * (into op->hdr_in[peer]). On failure op failed. */
static swy_status_t probe_post(struct swy_request *op, int peer)
{
    swy_sched_comm_t *c = op->comm;
    uint32_t seq = c->p2p_recv_seq[peer] & 0xFFFFFFu;
    swy_coll_xfer_t x = {.peer = peer, .is_send = 0,
                         .tag = SWY_COLL_TAG_HEADER,
                         .buf = &op->hdr_in[peer],
                         .bytes = sizeof(swy_coll_header_t)};
    swy_uop_t *u = swy_sched_uop_new(op, &x, 1);
    if (u == NULL || u->tp == NULL) {
        op_error(op, SWY_ERR_NO_MEMORY, "op '%s': cannot set up the "
                 "receive of rank %d's header", op_label(op), peer);
        return SWY_ERR_NO_MEMORY;
    }
    u->probe = 1;
    u->seq = seq;
    u->wire_tag = swy_sched_p2p_header_tag(c, seq);
    op->n_probes++;
    if (swy_sched_uop_post_recv(u) != SWY_OK) {
        op->n_probes--;
        op_error(op, SWY_ERR_TRANSPORT, "op '%s': cannot post the "
                 "receive of rank %d's header", op_label(op), peer);
        return SWY_ERR_TRANSPORT;
    }
    return SWY_OK;
}

/* Cancel op's probes still out; their completions come later. */
static void probes_cancel(struct swy_request *op)
{
    swy_list_t *pos;
    for (pos = op->uops.next; pos != &op->uops; pos = pos->next) {
        swy_uop_t *u = swy_container_of(pos, swy_uop_t, op_link);
        if (u->probe && u->state == UOP_POSTED)
            u->tp->ops->cancel(u->tp->ctx, u->handle);
    }
}

void swy_sched_p2p_admit(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    const swy_coll_args_t *args = &op->args;
    if (args->kind == SWY_COLL_SEND) {
        op->seq = c->p2p_send_seq[args->root]++ & 0xFFFFFFu;
        return;
    }
    if (tag_mode(c)) {
        op->p2p_listen = 1; /* its sequence when a send matches */
        return;
    }
    if (args->root == SWY_ANY_SOURCE || c->wild_op != NULL ||
        !swy_list_empty(&c->p2p_blocked))
        op->p2p_blocked = 1; /* its sequence when it starts */
    else
        op->seq = take_recv_seq(c, args->root);
}

/* A receive from any source was set up as one from this rank
 * (op_admit): again for the rank it matched (args.root now), with what
 * was checked then. On failure op failed. */
static swy_status_t any_setup(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    op->algo->destroy(op->state);
    op->state = NULL;
    swy_status_t status = op->algo->create(&op->args, c->rank, c->nranks,
                                           op->args.partition_bytes,
                                           &op->state);
    if (status != SWY_OK)
        op_error(op, status, "op #%u '%s': cannot set up the receive from "
                 "rank %d: %s", op->seq, op_label(op), op->args.root,
                 swy_err_last());
    return status;
}

/* A receive from any source matched peer's send: it becomes a receive
 * from peer (early: the send's header is in hdr_in, a probe caught it),
 * and starts. */
static void wild_resolve(struct swy_request *op, int peer, int early)
{
    swy_sched_comm_t *c = op->comm;
    op->p2p_wild = 0;
    op->args.root = peer;
    op->seq = take_recv_seq(c, peer);
    op->p2p_early = (uint8_t)early;
    probes_cancel(op);
    if (peer != c->rank && any_setup(op) != SWY_OK)
        return;
    swy_sched_op_begin(op);
    if (op->n_probes == 0 && c->wild_op == op) {
        c->wild_op = NULL;
        unblock(c);
    }
}

/* op takes the caught header e (into hdr_in); returns its peer. */
static int early_take(struct swy_request *op, early_header_t *e)
{
    int peer = e->peer;
    op->hdr_in[peer] = e->hdr;
    swy_list_del(&e->link);
    swy_free(e);
    return peer;
}

/* The oldest header an earlier probe caught (comm->early_headers, in
 * the order they came), taken into op->hdr_in; its peer, or -1. */
static int take_oldest_early_header(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    if (swy_list_empty(&c->early_headers))
        return -1;
    return early_take(op, swy_container_of(c->early_headers.next,
                                            early_header_t, link));
}

/* ---- SWY_P2P_MATCH=tag ---------------------------------------------- */

/* Whether op, listening, takes sends from peer. */
static int source_fits(const struct swy_request *op, int peer)
{
    return op->args.root == SWY_ANY_SOURCE || op->args.root == peer;
}

/* Whether op, listening, takes a send from peer with tag. */
static int tag_fits(const struct swy_request *op, int peer, uint32_t tag)
{
    return source_fits(op, peer) && op->args.user_tag == tag;
}

/* The oldest listening receive of c that takes peer's send with tag (of
 * any tag: any_tag), or NULL. */
static struct swy_request *tag_listener(swy_sched_comm_t *c, int peer,
                                        uint32_t tag, int any_tag)
{
    swy_list_t *pos;
    for (pos = c->p2p_listening.next; pos != &c->p2p_listening;
         pos = pos->next) {
        struct swy_request *op =
            swy_container_of(pos, struct swy_request, plink);
        if (any_tag ? source_fits(op, peer) : tag_fits(op, peer, tag))
            return op;
    }
    return NULL;
}

/* op matched peer's send at seq, whose header is in op->hdr_in[peer]:
 * it stops listening and starts as a receive from peer. */
static void tag_resolve(struct swy_request *op, int peer, uint32_t seq)
{
    swy_sched_comm_t *c = op->comm;
    swy_list_del(&op->plink);
    swy_list_init(&op->plink);
    op->p2p_listen = 0;
    probes_cancel(op);
    int any = op->args.root == SWY_ANY_SOURCE;
    op->args.root = peer;
    op->seq = seq & 0xFFFFFFu;
    op->p2p_early = peer != c->rank; /* no header from this rank */
    if (any && peer != c->rank && any_setup(op) != SWY_OK)
        return;
    if (!op->held) /* else its stream starts it (stream.c) */
        swy_sched_op_begin(op);
}

/* Every peer some listening receive could take from, and that has no
 * probe out, gets one, owned by the oldest such receive. */
static void tag_listen(swy_sched_comm_t *c)
{
    if (c->failed != SWY_OK || swy_list_empty(&c->p2p_listening))
        return;
    uint8_t *probing = swy_calloc((size_t)c->nranks, 1);
    if (probing == NULL) {
        swy_sched_fail_comm(c, SWY_ERR_NO_MEMORY, "out of memory for the "
                            "receives waiting for their tags", 0);
        return;
    }
    swy_list_t *pos, *upos;
    for (pos = c->ops.next; pos != &c->ops; pos = pos->next) {
        struct swy_request *op =
            swy_container_of(pos, struct swy_request, clink);
        if (op->n_probes == 0)
            continue;
        for (upos = op->uops.next; upos != &op->uops; upos = upos->next) {
            swy_uop_t *u = swy_container_of(upos, swy_uop_t, op_link);
            if (u->probe)
                probing[u->x.peer] = 1;
        }
    }
    for (int p = 0; p < c->nranks && c->failed == SWY_OK; p++) {
        struct swy_request *owner =
            probing[p] || p == c->rank ? NULL : tag_listener(c, p, 0, 1);
        if (owner != NULL)
            probe_post(owner, p);
    }
    swy_free(probing);
}

/* A receive starts to listen: it takes at once the oldest header from
 * its source that carries its tag, else waits for one. */
static void tag_begin(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    swy_list_t *pos;
    for (pos = c->early_headers.next; pos != &c->early_headers;
         pos = pos->next) {
        early_header_t *e = swy_container_of(pos, early_header_t, link);
        if (tag_fits(op, e->peer, e->hdr.user_tag)) {
            uint32_t seq = e->seq;
            int peer = early_take(op, e);
            swy_list_push_back(&c->p2p_listening, &op->plink);
            tag_resolve(op, peer, seq);
            return;
        }
    }
    swy_list_push_back(&c->p2p_listening, &op->plink);
    tag_listen(c);
}

/* Peer's send at seq, of header h: to the oldest listening receive it
 * fits, or kept for a later one. */
static swy_status_t tag_deliver(swy_sched_comm_t *c, int peer, uint32_t seq,
                                const swy_coll_header_t *h)
{
    struct swy_request *to = tag_listener(c, peer, h->user_tag, 0);
    if (to != NULL) {
        to->hdr_in[peer] = *h;
        tag_resolve(to, peer, seq);
        return SWY_OK;
    }
    early_header_t *e = swy_calloc(1, sizeof(*e));
    if (e == NULL) {
        swy_sched_fail_comm(c, SWY_ERR_NO_MEMORY, "out of memory for a send "
                            "no receive took yet", 0);
        return SWY_ERR_NO_MEMORY;
    }
    e->peer = peer;
    e->seq = seq;
    e->hdr = *h;
    swy_list_push_back(&c->early_headers, &e->link);
    return SWY_OK;
}

/* op's probe of a peer completed: the header goes to the oldest
 * listening receive it fits, or waits for a later one. */
static void tag_probe_done(struct swy_request *op, swy_uop_t *uop)
{
    swy_sched_comm_t *c = op->comm;
    int peer = uop->x.peer;
    if (uop->status == SWY_OK) {
        c->p2p_recv_seq[peer]++; /* the probe was at the pair's next */
        const swy_coll_header_t *h = &op->hdr_in[peer];
        if (tag_deliver(c, peer, uop->seq, h) != SWY_OK)
            return;
    } else if (uop->status != SWY_ERR_ABORTED) {
        op_error(op, SWY_ERR_TRANSPORT, "op '%s': the receive of rank %d's "
                 "header failed: %s", op_label(op), peer,
                 swy_status_string(uop->status));
        return;
    }
    tag_listen(c);
}

/* A receive from any source begins to listen: at once to a send whose
 * header an earlier probe caught, or to a send to this rank posted
 * already; else with a probe per other rank. */
static void wild_begin(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    c->wild_op = op;
    op->p2p_wild = 1;
    int peer = take_oldest_early_header(op);
    if (peer >= 0) {
        wild_resolve(op, peer, 1);
        return;
    }
    if (self_send_waiting(c)) {
        wild_resolve(op, c->rank, 0);
        return;
    }
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && probe_post(op, p) != SWY_OK)
            return;
}

/* Start the blocked receives whose turn came, in post order: all of
 * them, up to and including the next one from any source. */
static void unblock(swy_sched_comm_t *c)
{
    while (c->wild_op == NULL && c->failed == SWY_OK &&
           !swy_list_empty(&c->p2p_blocked)) {
        struct swy_request *op =
            swy_container_of(c->p2p_blocked.next, struct swy_request, plink);
        swy_list_del(&op->plink);
        swy_list_init(&op->plink);
        op->p2p_blocked = 0;
        if (op->args.root == SWY_ANY_SOURCE) {
            wild_begin(op);
            continue;
        }
        op->seq = take_recv_seq(c, op->args.root);
        if (!op->held) /* else its stream starts it (stream.c) */
            swy_sched_op_begin(op);
    }
}

void swy_sched_p2p_start_blocked(struct swy_request *op)
{
    if (op->p2p_listen) {
        tag_begin(op);
        return;
    }
    swy_list_push_back(&op->comm->p2p_blocked, &op->plink);
    unblock(op->comm);
}

void swy_sched_p2p_self_sent(swy_sched_comm_t *c, uint32_t seq,
                             uint32_t tag)
{
    if (tag_mode(c)) {
        swy_coll_header_t h = {.user_tag = tag};
        tag_deliver(c, c->rank, seq, &h);
        return;
    }
    struct swy_request *op = c->wild_op;
    if (op != NULL && op->p2p_wild && !op->failing && self_send_waiting(c))
        wild_resolve(op, c->rank, 0);
}

void swy_sched_p2p_probe_done(struct swy_request *op, swy_uop_t *uop)
{
    swy_sched_comm_t *c = op->comm;
    int peer = uop->x.peer;
    if (uop->status == SWY_OK &&
        uop->bytes_done != sizeof(swy_coll_header_t)) {
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "'%s' (receive from any source): rank %d "
                 "sent a header of %zu bytes (expected %zu)", op_label(op),
                 peer, uop->bytes_done, sizeof(swy_coll_header_t));
        swy_sched_fail_comm(c, SWY_ERR_MISMATCH, msg, 1);
        return;
    }
    if (tag_mode(c)) {
        tag_probe_done(op, uop);
        return;
    }
    if (uop->status == SWY_OK && op->p2p_wild) {
        wild_resolve(op, peer, 1);
    } else if (uop->status == SWY_OK) {
        /* Another rank's send came too: the next receive from it takes
         * its header. */
        early_header_t *e = swy_calloc(1, sizeof(*e));
        if (e == NULL) {
            swy_sched_fail_comm(c, SWY_ERR_NO_MEMORY, "out of memory for "
                                "a header a receive from any source caught",
                                0);
            return;
        }
        e->peer = peer;
        e->seq = uop->seq;
        e->hdr = op->hdr_in[peer];
        swy_list_push_back(&c->early_headers, &e->link);
    } else if (uop->status != SWY_ERR_ABORTED || op->p2p_wild) {
        op_error(op, uop->status == SWY_ERR_ABORTED ? SWY_ERR_ABORTED
                                                    : SWY_ERR_TRANSPORT,
                 "op '%s': the receive from any source listening to rank "
                 "%d failed: %s", op_label(op), peer,
                 swy_status_string(uop->status));
        return;
    }
    /* A cancelled probe (SWY_ERR_ABORTED) after the match is no news. */
    if (op->n_probes == 0 && !op->p2p_wild && c->wild_op == op) {
        c->wild_op = NULL;
        unblock(c);
    }
}

int swy_sched_p2p_take_early_header(struct swy_request *op, int peer)
{
    if (op->args.kind != SWY_COLL_RECV)
        return 0;
    if (op->p2p_early) {
        op->p2p_early = 0;
        return 1;
    }
    swy_sched_comm_t *c = op->comm;
    swy_list_t *pos;
    for (pos = c->early_headers.next; pos != &c->early_headers;
         pos = pos->next) {
        early_header_t *e = swy_container_of(pos, early_header_t, link);
        if (e->peer == peer && e->seq == op->seq) {
            early_take(op, e);
            return 1;
        }
    }
    return 0;
}

void swy_sched_p2p_op_gone(struct swy_request *op)
{
    swy_sched_comm_t *c = op->comm;
    if (op->p2p_blocked || op->p2p_listen) {
        swy_list_del(&op->plink);
        swy_list_init(&op->plink);
        op->p2p_blocked = op->p2p_listen = 0;
    }
    if (tag_mode(c)) /* what it listened to, another may */
        tag_listen(c);
    if (c->wild_op == op) { /* it failed */
        c->wild_op = NULL;
        unblock(c);
    }
}

void swy_sched_p2p_free(swy_sched_comm_t *c)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &c->early_headers) {
        early_header_t *e = swy_container_of(pos, early_header_t, link);
        swy_list_del(&e->link);
        swy_free(e);
    }
}
