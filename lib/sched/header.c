/* The wire tag of every transfer, and the op header protocol: each op
 * exchanges a header with its header peers, which detects ranks that
 * disagree and tells a sender that its peer posted the op (see the
 * UNCONFIRMED notes in engine_impl.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sched/engine_impl.h"

/* The 48 bits a transport matches on (with the source): the view's id,
 * whether the op is a send/recv, for those which side of the ordered pair
 * speaks (dir: 0 the sender of the pair's data, 1 its receiver, so that
 * the headers of A->B and B->A never meet), the op's sequence number
 * (TAG_SEQ_BITS of it: that many ops of a view in flight at once before
 * tags repeat) and the algorithm's tag. */
#define TAG_SEQ_BITS 13
#define TAG_DIR_SHIFT (SWY_COLL_TAG_BITS + TAG_SEQ_BITS)
#define TAG_P2P_SHIFT (TAG_DIR_SHIFT + 1)
#define TAG_COMM_SHIFT (TAG_P2P_SHIFT + 1)
_Static_assert(TAG_COMM_SHIFT + SWY_SCHED_COMM_ID_BITS <=
                   SWY_TRANSPORT_TAG_BITS,
               "the wire tag must fit the transports' tag bits");

static uint64_t wire_tag(const swy_sched_comm_t *c, int p2p, uint64_t dir,
                         uint32_t seq, uint32_t tag)
{
    return (uint64_t)c->id << TAG_COMM_SHIFT | (uint64_t)p2p << TAG_P2P_SHIFT |
           dir << TAG_DIR_SHIFT |
           (uint64_t)(seq & ((1u << TAG_SEQ_BITS) - 1)) << SWY_COLL_TAG_BITS |
           tag;
}

uint64_t swy_sched_wire_tag(const struct swy_request *op,
                            const swy_coll_xfer_t *x)
{
    uint64_t dir = 0;
    if (op->p2p)
        dir = op->args.kind == SWY_COLL_SEND ? !x->is_send : x->is_send;
    return wire_tag(op->comm, op->p2p, dir, op->seq, x->tag);
}

uint64_t swy_sched_p2p_header_tag(const swy_sched_comm_t *c, uint32_t seq)
{
    return wire_tag(c, 1, 0, seq, SWY_COLL_TAG_HEADER);
}

/* A 64-bit mix of a count into a running digest (splitmix64's finalizer
 * over the sum): the same counts in the same order give the same value
 * on every rank. */
static uint64_t digest_add(uint64_t h, uint64_t v)
{
    uint64_t z = h + v + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void swy_sched_series_header(struct swy_request *const *chunks, int n,
                             int peer)
{
    swy_coll_header_t *h = &chunks[0]->hdr_out[peer];
    h->series_chunks = (uint32_t)n;
    for (int j = 0; j < n; j++) {
        const swy_coll_args_t *a = &chunks[j]->args;
        h->series_send += a->sendcounts[peer];
        h->series_recv += a->recvcounts[peer];
        h->series_send_digest = digest_add(h->series_send_digest,
                                           a->sendcounts[peer]);
        h->series_recv_digest = digest_add(h->series_recv_digest,
                                           a->recvcounts[peer]);
    }
}

/* What a series head's header says of the series against ours. */
static swy_status_t series_check(const struct swy_request *op, int peer,
                                 char *msg, size_t len)
{
    const swy_coll_header_t *in = &op->hdr_in[peer], *out = &op->hdr_out[peer];
    int me = op->comm->rank;
    if (in->series_chunks != out->series_chunks) {
        snprintf(msg, len, "op #%u '%s': rank %d posted %u chunk%s "
                 "(swy_alltoallv_chunks), rank %d %u", op->seq, op_label(op),
                 me, out->series_chunks, out->series_chunks == 1 ? "" : "s",
                 peer, in->series_chunks);
        return SWY_ERR_MISMATCH;
    }
    if (out->series_chunks == 0)
        return SWY_OK;
    int from = in->series_send != out->series_recv ? peer : me;
    int to = from == peer ? me : peer;
    uint64_t sends = from == peer ? in->series_send : out->series_send;
    uint64_t expects = from == peer ? out->series_recv : in->series_recv;
    if (sends != expects) {
        snprintf(msg, len, "op #%u '%s': over its %u chunks rank %d sends "
                 "%" PRIu64 " elements to rank %d, which expects %" PRIu64
                 " (recvcounts[%d] summed over the chunks on rank %d)",
                 op->seq, op_label(op), out->series_chunks, from, sends, to,
                 expects, from, to);
        return SWY_ERR_MISMATCH;
    }
    if (in->series_send_digest != out->series_recv_digest ||
        in->series_recv_digest != out->series_send_digest) {
        snprintf(msg, len, "op #%u '%s': ranks %d and %d agree on the "
                 "totals of their %u chunks but not on how the chunks "
                 "divide them (sendcounts of one against recvcounts of the "
                 "other, chunk by chunk)", op->seq, op_label(op), me, peer,
                 out->series_chunks);
        return SWY_ERR_MISMATCH;
    }
    return SWY_OK;
}

static swy_status_t confirm_peer(struct swy_request *op, int peer);

/* Whether a peer's header of this op has yet to arrive. */
static int headers_expected(const struct swy_request *op)
{
    for (int p = 0; p < op->comm->nranks; p++)
        if (op->hdr_seen[p] == HDR_EXPECTED)
            return 1;
    return 0;
}

void swy_sched_handle_header(struct swy_request *op, int peer, size_t bytes)
{
    char msg[SWY_ERRMSG_MAX];
    if (bytes != sizeof(swy_coll_header_t)) {
        snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a header of "
                 "%zu bytes (expected %zu)", op->seq, op_label(op), peer,
                 bytes, sizeof(swy_coll_header_t));
        swy_sched_fail_comm(op->comm, SWY_ERR_MISMATCH, msg, 1);
        return;
    }
    swy_status_t status = swy_coll_header_check(
        &op->args, op->seq, op_label(op), op->comm->rank, peer,
        &op->hdr_in[peer], msg, sizeof(msg));
    if (status == SWY_OK)
        status = series_check(op, peer, msg, sizeof(msg));
    if (status != SWY_OK) {
        swy_sched_fail_comm(op->comm, status, msg, 1);
        return;
    }
    if (confirm_peer(op, peer) != SWY_OK || !op->series_head)
        return;
    /* The head speaks for its chunks. */
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &op->comm->ops) {
        struct swy_request *o =
            swy_container_of(pos, struct swy_request, clink);
        if (o != op && o->series == op->series &&
            o->hdr_seen[peer] == HDR_EXPECTED &&
            confirm_peer(o, peer) != SWY_OK)
            return;
    }
}

/* op's header from peer arrived and agreed (or its series head's did):
 * what op sent the peer unconfirmed counts from now on, its gated sends
 * go. Fails the comm if op's data already disagreed (and nothing is left
 * to explain it). */
static swy_status_t confirm_peer(struct swy_request *op, int peer)
{
    swy_sched_t *s = op->sched;
    op->hdr_seen[peer] = HDR_SEEN;
    if (op->deferred_peer >= 0 && !headers_expected(op)) {
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a message of "
                 "unexpected size although every header agreed", op->seq,
                 op_label(op), op->deferred_peer);
        swy_sched_fail_comm(op->comm, SWY_ERR_MISMATCH, msg, 1);
        return SWY_ERR_MISMATCH;
    }
    /* The peer has posted this op: what was sent to it unconfirmed now
     * counts against the link like any send in flight. */
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &op->uops) {
        swy_uop_t *u = swy_container_of(pos, swy_uop_t, op_link);
        if (u->unconfirmed && u->x.is_send && u->state == UOP_POSTED &&
            u->x.peer == peer) {
            swy_sched_link_account(s, u, -1); /* out of unconfirmed_by_peer */
            u->unconfirmed = 0;
            swy_sched_link_account(s, u, +1);
        }
    }
    /* The peer has posted this op: its device sends may go. */
    swy_list_for_each_safe(pos, tmp, &op->gated) {
        swy_uop_t *gated = swy_container_of(pos, swy_uop_t, q_link);
        if (gated->x.peer != peer)
            continue;
        swy_list_del(&gated->q_link);
        swy_sched_ready_insert(s, gated);
    }
    return SWY_OK;
}

void swy_sched_data_size_mismatch(struct swy_request *op, swy_uop_t *uop)
{
    /* The peer's header went out before its data on the same link, so its
     * check (which names both counts) normally ran already. A forwarded
     * chunk (a ring) carries another rank's block, whose header comes on
     * another link and may still be on its way: wait for every header
     * rather than report a vaguer message. */
    int peer = uop->x.peer;
    if (headers_expected(op)) {
        op->deferred_peer = peer;
        return;
    }
    char msg[SWY_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a chunk that does "
             "not fit the %zu bytes rank %d expected (tag %u)", op->seq,
             op_label(op), peer, uop->x.bytes, op->comm->rank, uop->x.tag);
    swy_sched_fail_comm(op->comm, SWY_ERR_MISMATCH, msg, 1);
}
