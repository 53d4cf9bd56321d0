/* Device lanes: collectives of device memory that the plugin runs
 * (swy_devcoll_v1; the plan of an op: lib/coll/offload.c). Each view has
 * one plugin communicator per priority class, and per class a queue of
 * launches in op order, then partition order: the order in which every
 * rank hands them to that communicator, so that they match across ranks
 * (a plugin communicator, like an NCCL one, runs its calls in the order
 * it was given them). A launch leaves when its op has started (not held
 * by its stream, nor a chunk of swy_alltoallv_chunks not yet released:
 * the launches after it wait, so chunks released in any order launch in
 * the same order on every rank) and heard every header (a disagreement
 * fails the op before the plugin sees it), and when the policy admits it
 * against what the lanes have with the plugin: lina holds a low-priority
 * partition while higher priority is with the plugin and bounds low
 * priority in flight by its credit, fair gives each op an allowance,
 * fifo runs one op of a communicator at a time. The launches of the two
 * classes run on different plugin communicators and streams, and no
 * policy holds a high-class launch for the low class's (lane_admit).
 *
 * Sends and receives to other ranks are launches too, one call each,
 * which only their pair makes (ncclSend and ncclRecv, in the class's
 * posting order, as NCCL users call them): a receive waits for no
 * policy (run_face), and those of one swy_group_start/end that are next
 * to each other in a queue leave as one launch once the group ended
 * (launch_run), as an NCCL group. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/engine_impl.h"

int swy_sched_lane_class(int priority)
{
    return priority > SWY_PRIO_DEFAULT ? LANE_HIGH : LANE_LOW;
}

int swy_sched_lane_class_priority(int cls)
{
    return cls == LANE_HIGH ? SWY_PRIO_HIGH : SWY_PRIO_LOW;
}

swy_status_t swy_sched_lane_attach(swy_sched_comm_t *c, void *const dcomm[2])
{
    swy_sched_t *s = c->sched;
    swy_lane_t *lane = swy_calloc(1, sizeof(*lane));
    if (lane == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    for (int k = 0; k < LANE_NCLASSES; k++) {
        lane->dcomm[k] = dcomm[k];
        swy_list_init(&lane->queue[k]);
    }
    pthread_mutex_lock(&s->lock);
    int had = c->lane != NULL;
    if (!had)
        c->lane = lane;
    pthread_mutex_unlock(&s->lock);
    if (had) {
        swy_free(lane);
        return swy_err_set(SWY_ERR_INVALID_ARG, "sched", "communicator %u "
                           "has its device communicators already", c->id);
    }
    return SWY_OK;
}

int swy_sched_lane_attached(swy_sched_comm_t *c)
{
    pthread_mutex_lock(&c->sched->lock);
    int attached = c->lane != NULL;
    pthread_mutex_unlock(&c->sched->lock);
    return attached;
}

int swy_sched_lane_dcomms(swy_sched_comm_t *c, void *dcomm[2])
{
    pthread_mutex_lock(&c->sched->lock);
    int usable = c->lane != NULL && !c->lane->aborted;
    for (int k = 0; k < LANE_NCLASSES; k++)
        dcomm[k] = usable ? c->lane->dcomm[k] : NULL;
    pthread_mutex_unlock(&c->sched->lock);
    return usable;
}

static void launch_free(swy_sched_t *s, swy_launch_t *l)
{
    if (l->state == UOP_READY)
        s->n_lane_queued--;
    swy_free(l);
}

void swy_sched_lane_enqueue(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    swy_lane_t *lane = op->comm->lane;
    const swy_coll_offload_plan_t *plan = swy_coll_offload_plan(op->state);
    int cls = op->args.offload_class;
    for (int g = 0; g < plan->ngroups; g++) {
        swy_launch_t *l = swy_calloc(1, sizeof(*l));
        if (l == NULL) {
            op_error(op, SWY_ERR_NO_MEMORY, "op #%u '%s': out of memory for "
                     "its partitions", op->seq, op_label(op));
            return;
        }
        *l = (swy_launch_t){
            .op = op, .sched = s, .comm = op->comm, .cls = cls, .index = g,
            .ncalls = plan->first[g + 1] - plan->first[g],
            .prio = op->priority, .seq = op->seq, .state = UOP_READY,
            .bytes = plan->bytes[g], .ready_index = s->next_launch_index++,
            .ready_ns = s->now_ns, .calls = plan->calls + plan->first[g]};
        swy_list_push_back(&lane->queue[cls], &l->q_link);
        swy_list_push_back(&op->launches, &l->op_link);
        s->n_lane_queued++;
        op->n_live++;
    }
}

/* Every header of the op is in (and matched). */
static int headers_in(const struct swy_request *op)
{
    for (int p = 0; p < op->comm->nranks; p++)
        if (op->hdr_seen[p] == HDR_EXPECTED)
            return 0;
    return 1;
}

/* The plugin's thread: the launch is done. Wake the engine, then mark
 * it; after that store the launch may be gone. */
static void launch_done(void *arg, swy_status_t status)
{
    swy_launch_t *l = arg;
    swy_sched_t *s = l->sched;
    uint64_t one = 1;
    l->status = status;
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: the engine is awake anyway */
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
}

static void lane_account(swy_sched_t *s, swy_launch_t *l, int sign)
{
    swy_lane_t *lane = l->comm->lane;
    if (sign > 0) {
        tally_add(&s->lane_inflight_by_prio, l->prio, l->bytes);
        lane->inflight_by_class[l->cls] += l->bytes;
        tally_add(&lane->inflight_by_prio, l->prio, l->bytes);
        if (l->op != NULL)
            l->op->lane_inflight += l->bytes;
    } else {
        tally_sub(&s->lane_inflight_by_prio, l->prio, l->bytes);
        lane->inflight_by_class[l->cls] -= l->bytes;
        tally_sub(&lane->inflight_by_prio, l->prio, l->bytes);
        if (l->op != NULL)
            l->op->lane_inflight -= SWY_MIN(l->op->lane_inflight, l->bytes);
    }
}

/* The policy's verdict on the head launch of a class queue. The lanes
 * are one way out of the rank (the device's links), as an uplink is. The
 * policy's compare is not asked: a class keeps the plugin's order.
 *
 * A launch completes only once every rank of its communicator launched
 * it, and different communicators' launches come in different orders on
 * different ranks. So a launch in flight may hold back another
 * communicator's only if its priority is strictly higher: a bound shared
 * by launches of one priority on two communicators (lina's credit, or a
 * credit shared by both classes) hangs, one rank holding communicator
 * A's behind B's in flight while a peer holds B's behind A's. The policy
 * sees this view's launches with the plugin, and of the others' those
 * of strictly higher priority, as if they were on this view's link. By
 * induction from the top priority down, every launch then goes: the
 * highest in flight wait for nobody else's, and a view's own launches
 * come in the same order on every rank. A high-class launch does not see
 * this view's low-class ones either (low waits for high, never the
 * other way round). */
static int lane_admit(swy_sched_t *s, const swy_launch_t *l, size_t bytes)
{
    const swy_lane_t *lane = l->comm->lane;
    int p = l->prio;
    size_t lower = l->cls == LANE_HIGH ? lane->inflight_by_class[LANE_LOW]
                                       : 0;
    size_t higher = tally_sum(&s->lane_inflight_by_prio, p, 0); /* > p */
    size_t le = tally_sum(&lane->inflight_by_prio, p, 1);       /* <= p */
    size_t same = tally_sum(&lane->inflight_by_prio, p - 1, 0) -
                  tally_sum(&lane->inflight_by_prio, p, 0);     /* == p */
    le -= SWY_MIN(le, lower);
    const struct swy_request *op = l->op;
    uint32_t oldest = swy_sched_oldest_op(op->comm);
    swy_policy_uop_v1_t view = {
        .struct_size = sizeof(view), .priority = p, .order = op->order, .op_seq = op->eseq,
        .ready_index = l->ready_index, .ready_ns = l->ready_ns,
        .bytes = bytes, .peer = -1,
        .op_inflight_bytes = op->lane_inflight};
    swy_policy_link_v1_t lv = {
        .struct_size = sizeof(lv), .peer = -1, .inflight_bytes = higher + le,
        .inflight_le_bytes = le, .inflight_ge_bytes = higher + same,
        .higher_pending = tally_sum(&s->pending_ops, p, 0) > 0,
        .phase = s->phase, .max_priority_seen = s->max_prio_seen,
        .oldest_op_seq = oldest, .window_bytes = s->p.window_bytes,
        .credit_bytes = s->credit_bytes,
        .partition_bytes = s->p.partition_bytes, .now_ns = s->now_ns};
    lv.uplink_inflight_bytes = lv.inflight_bytes;
    lv.uplink_inflight_le_bytes = lv.inflight_le_bytes;
    return s->policy.ops->admit(s->policy.ctx, &lv, &view);
}

/* The launches of one group's sends and receives that go to the plugin
 * as one launch: its done marks them all. ops (after l) is room for
 * their ops, should the plugin refuse the launch. */
typedef struct {
    int n;
    swy_sched_t *sched;
    struct swy_request **ops;
    swy_launch_t *l[];
} launch_set_t;

static void launch_set_done(void *arg, swy_status_t status)
{
    launch_set_t *set = arg;
    swy_sched_t *s = set->sched;
    uint64_t one = 1;
    for (int i = 0; i < set->n; i++)
        set->l[i]->status = status;
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: the engine is awake anyway */
    /* After its store a launch may be gone; set is ours. */
    for (int i = 0; i < set->n; i++)
        __atomic_store_n(&set->l[i]->done, 1, __ATOMIC_RELEASE);
    swy_free(set);
}

/* May the queue's launch l leave, as far as its op goes? Its op has
 * started and heard every header, and a send or receive has its pair's
 * sequence and its group ended. */
static int launch_ready(const swy_launch_t *l)
{
    const struct swy_request *op = l->op;
    if (op->held || op->lane_hold || !headers_in(op))
        return 0;
    return !op->p2p || (!op->p2p_blocked && !op->p2p_listen);
}

/* How many launches from the head l of a class queue go as one: a run
 * of the same group's sends and receives (a collective between them
 * ends it), or l alone. 0: a launch of the run may not leave yet. */
static int launch_run(const swy_list_t *queue, const swy_launch_t *l)
{
    uint32_t group = l->op->args.lane_group;
    int n = 0;
    const swy_list_t *pos;
    for (pos = &l->q_link; pos != queue; pos = pos->next) {
        const swy_launch_t *m = swy_container_of(pos, swy_launch_t, q_link);
        if (n > 0 && (group == 0 || m->op->args.lane_group != group))
            break;
        if (!launch_ready(m))
            return 0;
        n++;
    }
    return n;
}

/* What the policy is asked about for the run of n launches from l: the
 * first of them that is not a receive, with the run's bytes (NULL: the
 * run only receives). A receive moves none of this rank's bytes and
 * goes without asking, as the transports' receives are posted early:
 * held behind this rank's sends, it would hold up its sender's, and two
 * ranks that send to each other before they receive would wait for each
 * other (under fifo, which lets only a communicator's oldest op go). */
static const swy_launch_t *run_face(const swy_launch_t *l, int n,
                                    size_t *bytes_p)
{
    const swy_launch_t *face = NULL;
    size_t bytes = 0;
    const swy_list_t *pos = &l->q_link;
    for (int i = 0; i < n; i++, pos = pos->next) {
        const swy_launch_t *m = swy_container_of(pos, swy_launch_t, q_link);
        bytes += m->bytes;
        if (face == NULL && (!m->op->p2p || m->op->args.kind != SWY_COLL_RECV))
            face = m;
    }
    *bytes_p = bytes;
    return face;
}

/* The plugin refused run[0..n-1], which never were with it: each goes,
 * and then its op fails (ops[]: room for n). */
static void launches_refused(swy_sched_t *s, swy_launch_t *const *run,
                             struct swy_request **ops, int n,
                             swy_status_t status, const char *why)
{
    int first_index = run[0]->index;
    for (int i = 0; i < n; i++) {
        swy_launch_t *l = run[i];
        ops[i] = l->op;
        /* Pinned meanwhile: one's failure may complete the others. */
        ops[i]->pins++;
        lane_account(s, l, -1);
        swy_list_del(&l->q_link);
        s->n_launched--;
        swy_list_del(&l->op_link);
        l->op->n_live--;
        swy_free(l);
    }
    for (int i = 0; i < n; i++)
        op_error(ops[i], status, "op #%u '%s': the device plugin refused "
                 "%s %d: %s", ops[i]->seq, op_label(ops[i]),
                 n > 1 ? "the group's launch, with partition"
                       : "partition", first_index, why);
    for (int i = 0; i < n; i++)
        swy_sched_op_unpin(ops[i]);
}

/* Hand the n launches from l on (a run, launch_run) to the plugin as one
 * launch; 0 when there is no memory for it now (it stays queued). */
static int lane_issue_run(swy_sched_t *s, swy_lane_t *lane, swy_launch_t *l,
                          int n)
{
    const swy_devcoll_v1_t *dc = swy_devcoll_ops();
    launch_set_t *set = NULL;
    swy_devcoll_call_v1_t *calls = NULL;
    int ncalls = 0;
    if (n > 1) {
        set = swy_malloc(sizeof(*set) + 2 * (size_t)n * sizeof(set->l[0]));
        swy_list_t *pos = &l->q_link;
        for (int i = 0; i < n; i++, pos = pos->next)
            ncalls += swy_container_of(pos, swy_launch_t, q_link)->ncalls;
        calls = swy_malloc((size_t)SWY_MAX(ncalls, 1) * sizeof(*calls));
        if (set == NULL || calls == NULL) {
            swy_free(set);
            swy_free(calls);
            return 0;
        }
        *set = (launch_set_t){.n = n, .sched = s,
                              .ops = (struct swy_request **)(set->l + n)};
    }
    ncalls = 0;
    for (int i = 0; i < n; i++) {
        swy_launch_t *m = swy_container_of(lane->queue[l->cls].next,
                                           swy_launch_t, q_link);
        swy_list_del(&m->q_link);
        s->n_lane_queued--;
        m->state = UOP_POSTED;
        m->posted_ns = s->now_ns;
        lane_account(s, m, +1);
        swy_list_push_back(&s->launched, &m->q_link);
        s->n_launched++;
        if (set != NULL) {
            set->l[i] = m;
            memcpy(calls + ncalls, m->calls,
                   (size_t)m->ncalls * sizeof(*calls));
            ncalls += m->ncalls;
        }
    }
    void *dcomm = lane->dcomm[l->cls];
    swy_status_t status =
        set == NULL ? dc->launch(dcomm, l->calls, l->ncalls, launch_done, l)
                    : dc->launch(dcomm, calls, ncalls, launch_set_done, set);
    swy_free(calls); /* the plugin reads calls during launch only */
    if (status == SWY_OK) {
        s->stats.micro_ops_sent++;
        return n;
    }
    char why[SWY_ERRMSG_MAX];
    snprintf(why, sizeof(why), "%s", dc->error_string());
    if (set == NULL) {
        struct swy_request *op;
        launches_refused(s, &l, &op, 1, status, why);
    } else {
        launches_refused(s, set->l, set->ops, n, status, why);
        swy_free(set);
    }
    return n;
}

int swy_sched_lane_issue(swy_sched_t *s)
{
    if (s->n_lane_queued == 0)
        return 0;
    int issued = 0;
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        swy_lane_t *lane = c->lane;
        if (lane == NULL)
            continue;
        for (int k = LANE_NCLASSES - 1; k >= 0; k--) {
            while (!swy_list_empty(&lane->queue[k])) {
                swy_launch_t *l = swy_container_of(lane->queue[k].next,
                                                   swy_launch_t, q_link);
                int n = launch_run(&lane->queue[k], l);
                if (n == 0)
                    break; /* the class's order holds: nothing passes */
                size_t bytes;
                const swy_launch_t *face = run_face(l, n, &bytes);
                if (face != NULL &&
                    lane_admit(s, face, bytes) != SWY_POLICY_ISSUE)
                    break;
                n = lane_issue_run(s, lane, l, n);
                if (n == 0)
                    break; /* no memory now: the next progress tries */
                issued += n;
            }
        }
    }
    return issued;
}

static void launch_complete(swy_sched_t *s, swy_launch_t *l)
{
    struct swy_request *op = l->op;
    lane_account(s, l, -1);
    if (s->trace != NULL) {
        char name[64];
        snprintf(name, sizeof(name), "%.44s #%u/%d",
                 op != NULL ? op_label(op) : "detached", l->seq, l->index);
        swy_trace_event(s->trace, 200000 + l->cls, name, "launch",
                        l->posted_ns, swy_time_ns(), l->prio, l->bytes, -1,
                        l->seq, 0u);
    }
    if (op == NULL) { /* its op failed and went */
        swy_free(l);
        return;
    }
    swy_list_del(&l->op_link);
    op->n_live--;
    swy_status_t status = l->status;
    int index = l->index;
    if (status == SWY_OK)
        s->stats.bytes_sent += l->bytes;
    swy_free(l);
    if (op->failing) {
        swy_sched_op_drain(op, 0);
        return;
    }
    op->in_handler = 1;
    if (status != SWY_OK)
        op_error(op, status == SWY_ERR_ABORTED ? SWY_ERR_ABORTED
                                               : SWY_ERR_TRANSPORT,
                 "op #%u '%s': partition %d failed on the device: %s",
                 op->seq, op_label(op), index, swy_status_string(status));
    swy_sched_op_settle(op);
}

int swy_sched_lane_poll(swy_sched_t *s)
{
    int n = 0;
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &s->launched) {
        swy_launch_t *l = swy_container_of(pos, swy_launch_t, q_link);
        if (!__atomic_load_n(&l->done, __ATOMIC_ACQUIRE))
            continue;
        swy_list_del(&l->q_link);
        s->n_launched--;
        launch_complete(s, l);
        n++;
    }
    return n;
}

/* Give up the view's plugin communicators: what they have ends, with
 * an error, and they take nothing more. */
static void lane_abort(swy_sched_comm_t *c, const char *why)
{
    swy_lane_t *lane = c->lane;
    if (lane == NULL || lane->aborted)
        return;
    lane->aborted = 1;
    snprintf(lane->why, sizeof(lane->why), "%s", why);
    const swy_devcoll_v1_t *dc = swy_devcoll_ops();
    for (int k = 0; k < LANE_NCLASSES; k++)
        dc->comm_abort(lane->dcomm[k]);
}

void swy_sched_lane_op_failed(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    swy_list_t *pos, *tmp;
    int with_plugin = 0;
    swy_list_for_each_safe(pos, tmp, &op->launches) {
        swy_launch_t *l = swy_container_of(pos, swy_launch_t, op_link);
        if (l->state == UOP_POSTED) {
            with_plugin = 1;
            continue;
        }
        swy_list_del(&l->q_link);
        swy_list_del(&l->op_link);
        op->n_live--;
        launch_free(s, l);
    }
    /* A plugin communicator whose ranks stopped at different calls is
     * out of step for good (NCCL's are): later ops on it would wait for
     * calls that never come. */
    if (with_plugin) {
        char why[SWY_ERRMSG_MAX];
        snprintf(why, sizeof(why), "op #%u '%s' failed while some of it "
                 "was with the device plugin", op->seq, op_label(op));
        lane_abort(op->comm, why);
    }
}

int swy_sched_lane_busy(const struct swy_request *op)
{
    return !swy_list_empty(&op->launches);
}

void swy_sched_lane_free(swy_sched_comm_t *c)
{
    swy_sched_t *s = c->sched;
    swy_lane_t *lane = c->lane;
    swy_list_t *pos, *tmp;
    if (lane == NULL)
        return;
    int mine = 0;
    for (pos = s->launched.next; pos != &s->launched; pos = pos->next)
        mine += swy_container_of(pos, swy_launch_t, q_link)->comm == c;
    if (mine > 0)
        lane_abort(c, "communicator destroyed");
    /* The plugin's done callbacks take no lock: wait for them here. */
    double give_up = swy_time_s() + s->p.timeout_s;
    while (mine > 0 && swy_time_s() < give_up) {
        mine = 0;
        swy_list_for_each_safe(pos, tmp, &s->launched) {
            swy_launch_t *l = swy_container_of(pos, swy_launch_t, q_link);
            if (l->comm != c)
                continue;
            if (!__atomic_load_n(&l->done, __ATOMIC_ACQUIRE)) {
                mine++;
                continue;
            }
            swy_list_del(&l->q_link);
            s->n_launched--;
            launch_complete(s, l);
        }
        if (mine > 0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    const swy_devcoll_v1_t *dc = swy_devcoll_ops();
    if (mine > 0) {
        /* Freeing them now would free memory the plugin writes to. */
        swy_warn("sched", "communicator %u: %d partition(s) still with the "
                 "device plugin %.0f s after it was given up; its device "
                 "communicators are not freed", c->id, mine, s->p.timeout_s);
    } else {
        for (int k = 0; k < LANE_NCLASSES; k++)
            dc->comm_destroy(lane->dcomm[k]);
    }
    for (int k = 0; k < LANE_NCLASSES; k++)
        swy_list_for_each_safe(pos, tmp, &lane->queue[k]) {
            swy_launch_t *l = swy_container_of(pos, swy_launch_t, q_link);
            swy_list_del(&l->q_link);
            if (l->op != NULL)
                swy_list_del(&l->op_link);
            launch_free(s, l);
        }
    swy_free(lane);
    c->lane = NULL;
}

void swy_sched_lane_group_end(struct swy_request *const *ops, size_t n)
{
    /* One at a time: a run leaves only once all its members are free to
     * (launch_run), and each op stays pinned until its own turn. */
    for (size_t i = 0; i < n; i++) {
        struct swy_request *op = ops[i];
        swy_sched_t *s = op->sched;
        pthread_mutex_lock(&s->lock);
        op->lane_hold = 0;
        swy_sched_progress_locked(s);
        swy_sched_op_unpin(op);
        pthread_mutex_unlock(&s->lock);
    }
}
