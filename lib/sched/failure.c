/* Failure: of a communicator (its ops fail, its peers hear of it),
 * news from the control plane (the job's failure, a peer process gone,
 * a split communicator's scoped failure), quiescence after a failure,
 * and op deadlines (SWY_TIMEOUT_S) (see engine_impl.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sched/engine_impl.h"

/* After the comm failed: once this rank has no receive in flight it reads
 * no peer's memory any more; say so, so that peers may release the
 * buffers of their failed sends to it. */
static void report_quiesced(swy_sched_t *s)
{
    swy_list_t *pos, *upos;
    if (s->n_failed_views == 0 || s->quiesce_reported)
        return;
    for (pos = s->ops.next; pos != &s->ops; pos = pos->next) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        for (upos = op->uops.next; upos != &op->uops; upos = upos->next) {
            swy_uop_t *uop = swy_container_of(upos, swy_uop_t, op_link);
            if (!uop->x.is_send && uop->state == UOP_POSTED)
                return;
        }
    }
    for (upos = s->detached.next; upos != &s->detached; upos = upos->next) {
        swy_uop_t *uop = swy_container_of(upos, swy_uop_t, op_link);
        if (!uop->x.is_send && uop->state == UOP_POSTED)
            return;
    }
    s->quiesce_reported = 1;
    swy_boot_report_quiesced(s->p.boot);
}

void swy_sched_fail_comm(swy_sched_comm_t *c, swy_status_t status,
                         const char *msg, int report)
{
    swy_sched_t *s = c->sched;
    swy_list_t *pos, *tmp;
    if (c->failed == SWY_OK) {
        c->failed = status;
        s->n_failed_views++;
        snprintf(c->failmsg, sizeof(c->failmsg), "%s", msg);
        /* Only a failure that hits ops in flight is news to the user. */
        SWY_LOG_AT(swy_list_empty(&c->ops) ? SWY_LOG_DEBUG : SWY_LOG_WARN,
                   "sched", "communicator %u failed (%s): %s", c->id,
                   swy_status_string(status), msg);
        /* The world view's failure is the job's (every rank hears it);
         * a split communicator's reaches the ranks that hold it. */
        if (report && c->boot != NULL)
            swy_boot_report_failure(c->boot, status, msg);
        else if (report && s->p.boot != NULL && c == s->world)
            swy_boot_report_failure(s->p.boot, status, msg);
        else if (report && s->p.boot != NULL)
            swy_boot_report_comm_failure(s->p.boot, c->key, status, msg);
    }
    swy_list_for_each_safe(pos, tmp, &c->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  clink);
        swy_sched_op_fail(op, c->failed, c->failmsg);
    }
}

void swy_sched_check_deadlines(swy_sched_t *s, double now)
{
    swy_list_t *pos, *tmp, *upos;
    swy_list_for_each_safe(pos, tmp, &s->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        if (now < op->deadline || op->failing)
            continue;
        /* Name the peers we still wait for. */
        char peers[256] = "";
        size_t len = 0;
        int nsilent = 0;
        uint8_t *listed = swy_calloc((size_t)op->comm->nranks, 1);
        for (upos = op->uops.next; upos != &op->uops; upos = upos->next) {
            swy_uop_t *uop = swy_container_of(upos, swy_uop_t, op_link);
            int peer = uop->x.peer;
            if (uop->x.is_send || listed == NULL || listed[peer])
                continue;
            listed[peer] = 1;
            nsilent++;
            if (len + 16 < sizeof(peers))
                len += (size_t)snprintf(peers + len, sizeof(peers) - len,
                                        "%s%d", len ? ", " : "", peer);
        }
        swy_free(listed);
        /* An offloaded op's partitions: in its lane, or with the plugin. */
        int queued = 0, launched = 0;
        for (upos = op->launches.next; upos != &op->launches;
             upos = upos->next) {
            swy_launch_t *l = swy_container_of(upos, swy_launch_t, op_link);
            if (l->state == UOP_READY)
                queued++;
            else
                launched++;
        }
        char msg[SWY_ERRMSG_MAX];
        if (op->on_stream)
            snprintf(msg, sizeof(msg), "op #%u %s '%s' timed out after %.0f "
                     "s on rank %d: the work queued on its stream "
                     "(attr.stream) before the post never finished there "
                     "(SWY_TIMEOUT_S)", op->seq,
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank);
        else if (op->held)
            snprintf(msg, sizeof(msg), "op #%u %s '%s' timed out after %.0f "
                     "s on rank %d: a held chunk never released there "
                     "(swy_chunk_release; SWY_TIMEOUT_S)", op->seq,
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank);
        else if (op->p2p_wild)
            snprintf(msg, sizeof(msg), "op %s '%s' timed out after %.0f s "
                     "on rank %d: a receive from any source (SWY_ANY_SOURCE) "
                     "that no rank sent to (SWY_TIMEOUT_S)",
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank);
        else if (op->p2p_listen && op->args.root == SWY_ANY_SOURCE)
            snprintf(msg, sizeof(msg), "op %s '%s' timed out after %.0f s "
                     "on rank %d: no rank sent it a message with its tag %u "
                     "(SWY_P2P_MATCH=tag; SWY_TIMEOUT_S)",
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank, op->args.user_tag);
        else if (op->p2p_listen)
            snprintf(msg, sizeof(msg), "op %s '%s' timed out after %.0f s "
                     "on rank %d: rank %d sent it no message with its tag %u "
                     "(SWY_P2P_MATCH=tag; SWY_TIMEOUT_S)",
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank, op->args.root,
                     op->args.user_tag);
        else if (op->p2p_blocked)
            snprintf(msg, sizeof(msg), "op %s '%s' from rank %d timed out "
                     "after %.0f s on rank %d: it waits behind a receive "
                     "from any source posted before it, which no rank sent "
                     "to (SWY_TIMEOUT_S)", swy_coll_kind_name(op->args.kind),
                     op_label(op), op->args.root, s->p.timeout_s,
                     op->comm->rank);
        else if (op->args.kind == SWY_COLL_SEND && nsilent == 1)
            /* What a send waits for is the header of the receive that
             * takes it. */
            snprintf(msg, sizeof(msg), "op %s '%s' to rank %d timed out "
                     "after %.0f s on rank %d: no receive there took it "
                     "(tag %u; SWY_P2P_MATCH=%s; SWY_TIMEOUT_S)",
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     op->args.root, s->p.timeout_s, op->comm->rank,
                     op->args.user_tag, s->p2p_match_tag ? "tag" : "order");
        else if (nsilent == 0 && queued + launched > 0)
            snprintf(msg, sizeof(msg), "op #%u %s '%s' timed out after %.0f "
                     "s on rank %d: %d of its partitions with the device "
                     "plugin not completed, %d waiting in its lane behind "
                     "earlier ops (SWY_TIMEOUT_S)", op->seq,
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank, launched, queued);
        else
            snprintf(msg, sizeof(msg),
                     "op #%u %s '%s' timed out after %.0f s on rank %d: "
                     "%s%s (SWY_TIMEOUT_S)", op->seq,
                     swy_coll_kind_name(op->args.kind), op_label(op),
                     s->p.timeout_s, op->comm->rank,
                     nsilent ? (nsilent == 1 ? "no data from rank "
                                             : "no data from ranks ")
                             : "sends not completed",
                     peers);
        swy_sched_fail_comm(op->comm, SWY_ERR_TIMEOUT, msg, 1);
        return; /* the list changed */
    }
}

/* Drain the failing ops (swy_sched_op_drain) and, after a comm failure, report
 * this rank quiesced once it can. */
void swy_sched_progress_failing(swy_sched_t *s)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &s->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        if (op->failing)
            swy_sched_op_drain(op, 0);
    }
    report_quiesced(s);
}

/* Failures the control plane knows of. A progress pass acts on them after
 * the transports' completions of the pass: what a peer sent before it
 * failed or exited (a header saying that it disagrees, an op's last
 * bytes) counts first, so that a rank that was not looking when both
 * came reports what happened first (SWY_ERR_MISMATCH, not the peer's
 * exit). A rendezvous read in that pass reads live memory: a failed peer
 * hands its buffers back only once this rank said it quiesced, which it
 * says after acting here (or after RELEASE_GRACE_S), and a dead one's
 * read fails and waits for the cause (TRANSPORT_CAUSE_WAIT_S):
 * - the job's failure (a rank died or left, the world view's mismatch,
 *   timeout or abort, the root gone) fails the world view;
 * - a split view fails when one of its peer processes died or left (the
 *   root said so), or when the control plane is gone; its other failures
 *   come scoped to it (swy_boot_comm_failure), and leave the rest alone. */
void swy_sched_check_control_plane(swy_sched_t *s, double now)
{
    swy_boot_t *boot = s->p.boot;
    char msg[SWY_ERRMSG_MAX];
    if (boot == NULL)
        return;
    /* Views with a control plane of their own: its failure is theirs. */
    for (swy_list_t *pos = s->comms.next;
         s->own_boot_views > 0 && pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        if (c->boot == NULL || c->failed != SWY_OK)
            continue;
        swy_status_t status = swy_boot_failure(c->boot, msg, sizeof(msg));
        if (status != SWY_OK)
            swy_sched_fail_comm(c, status, msg, 0);
    }
    if (!s->job_failure_seen) {
        swy_status_t status = swy_boot_failure(boot, msg, sizeof(msg));
        if (status == SWY_OK)
            goto scoped;
        s->job_failure_seen = 1;
        if (s->world->failed == SWY_OK)
            swy_sched_fail_comm(s->world, status, msg, 0);
    }
    if (now >= s->next_gone_check) {
        s->next_gone_check = now + 0.01;
        int lost = swy_boot_lost(boot);
        swy_list_t *pos;
        for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
            swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t,
                                                   link);
            if (c == s->world || c->failed != SWY_OK)
                continue;
            for (int r = 0; r < c->nranks; r++) {
                int lp = c->peers[r];
                if (!lost && (lp == s->p.rank ||
                              !swy_boot_peer_gone(boot, lp)))
                    continue;
                char why[SWY_ERRMSG_MAX - 64];
                swy_boot_failure(boot, why, sizeof(why));
                snprintf(msg, sizeof(msg), "communicator %u: %s%s", c->id,
                         lost ? "" : "a peer is gone: ", why);
                swy_sched_fail_comm(c, SWY_ERR_REMOTE, msg, 0);
                break;
            }
        }
    }
scoped:;
    uint64_t seen = swy_boot_comm_failures(boot);
    if (seen == s->comm_failures_seen)
        return;
    s->comm_failures_seen = seen;
    uint64_t count;
    if (read(swy_boot_comm_failure_fd(boot), &count, sizeof(count)) < 0)
        (void)0; /* nothing to drain */
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        if (c == s->world || c->boot != NULL || c->failed != SWY_OK)
            continue;
        swy_status_t status = swy_boot_comm_failure(boot, c->key, msg,
                                                    sizeof(msg));
        if (status != SWY_OK)
            swy_sched_fail_comm(c, status, msg, 0);
    }
}

void swy_sched_fail_all(swy_sched_comm_t *c, swy_status_t status,
                        const char *msg)
{
    pthread_mutex_lock(&c->sched->lock);
    swy_sched_fail_comm(c, status, msg, 0);
    pthread_mutex_unlock(&c->sched->lock);
}

swy_status_t swy_sched_failure(swy_sched_comm_t *c, char *msg, size_t len)
{
    swy_sched_t *s = c->sched;
    pthread_mutex_lock(&s->lock);
    swy_sched_check_control_plane(s, swy_time_s());
    swy_status_t status = c->failed;
    if (msg != NULL && len > 0)
        snprintf(msg, len, "%s", c->failmsg);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_report_abort(swy_sched_comm_t *c, const char *why)
{
    swy_sched_t *s = c->sched;
    pthread_mutex_lock(&s->lock);
    swy_sched_fail_comm(c, SWY_ERR_ABORTED, why, 0);
    if (c->boot != NULL)
        swy_boot_report_failure(c->boot, SWY_ERR_REMOTE, why);
    else if (s->p.boot != NULL && c == s->world)
        swy_boot_report_failure(s->p.boot, SWY_ERR_REMOTE, why);
    else if (s->p.boot != NULL)
        swy_boot_report_comm_failure(s->p.boot, c->key, SWY_ERR_REMOTE, why);
    pthread_mutex_unlock(&s->lock);
}
