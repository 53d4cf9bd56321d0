/* The progress engine: micro-op life cycle, per-link issue, completions,
 * headers, failure and timeout handling (see sched.h). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/policy.h"
#include "sched/sched.h"
#include "sched/trace.h"
#include "transport/device.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

enum { UOP_READY, UOP_POSTED, UOP_DONE };
/* Each op exchanges headers with its peers when posted. A send of op X
 * to peer P issued before P's header for X arrived (P has not posted X
 * yet) may sit in the transport until P does — a rendezvous send to a peer
 * still busy with an older op. Such an unconfirmed send does not count
 * against the link's window or credit, so it can never hold back the
 * older ops P is waiting for: no policy can deadlock, whatever the mix.
 * (Holding such sends back until the header arrives does the same but
 * costs every large op a message latency: 25% of a 4 MiB alltoallv on
 * 4 ranks sharing 2 cores.) Sends up to the eager size are small enough
 * to count at once. An op keeps at most UNCONFIRMED_PARTITIONS partitions
 * unconfirmed per link (its other micro-ops wait for the header, without
 * holding anyone else's back), and once the header arrives its unconfirmed
 * sends in flight count like any other: otherwise an op posted before its
 * peer would hand the whole of itself to the transport at once, past
 * every window and credit, into a queue a later high-priority op must
 * wait behind.
 * Device memory is the exception: a send through NCCL blocks its stream
 * until the receiver matched it, whatever its size, so a device send of
 * op X to P waits in op->gated until P's header for X arrived (P then has
 * posted every receive of X). */
enum { HDR_NONE = 0, HDR_EXPECTED = 1, HDR_SEEN = 2 };
/* A failed op hands the caller its buffers back only once no transport
 * may still touch them: its receives cancelled or done, and each send
 * done, its receiver gone, or its receiver quiesced and the send settled
 * (SEND_SETTLE_S; swy_boot_report_quiesced: UCX's CMA
 * rendezvous has the receiver read the sender's buffer in place, and a
 * read from a freed buffer is fatal to the reader); and, for an op whose
 * peers reach into its buffers in place (swy_coll_algo_t's lends), every
 * live peer quiesced. A receiver that says
 * nothing for this long (capped at SWY_TIMEOUT_S) is given up on with a
 * warning. */
#define RELEASE_GRACE_S 5.0
/* Without the control plane (the root is gone) no receiver can say it is
 * quiesced; every rank learnt of the loss at about the same time and
 * cancels its receives at its next progress pass. */
#define RELEASE_LOST_S 0.5
/* A failed op's send whose receiver has quiesced is cancelled, then
 * waited for this long at most: a transport that sends eagerly may still
 * read the buffer from this rank's side until the receiver has taken in
 * what is queued to it, which a live receiver does within milliseconds
 * (UCX's shared-memory FIFO; a cancelled rendezvous completes at once). */
#define SEND_SETTLE_S 1.0
#define UNCONFIRMED_MIN_BYTES 8192
#define UNCONFIRMED_PARTITIONS 2
/* Freed micro-ops kept for the next ops: an alltoallv on 4 ranks
 * allocated 24 blocks per op in the engine, 14 of them micro-ops, and
 * malloc and free took 8.5% of the samples of one of 4 KiB on the 2-core
 * VM (2.9% with the pool and op_alloc). */
#define UOP_POOL_MAX 4096

/* How long after a caller stopped waiting the thread leaves progress to
 * callers: a framework posting collectives back to back waits again
 * within microseconds, and waking the thread between them would only
 * cost context switches on busy cores. */
#define HANDOFF_GRACE_NS (2 * 1000 * 1000)
/* While a caller waits, the thread parks for this long between looks.
 * Ops that the caller leaves to the thread (a non-blocking post that
 * nobody waits for, ops still in flight when the last caller stops
 * waiting) arm the hand-off timer for the end of the grace instead of
 * waking the thread at once: a caller that waits again within the grace
 * costs no wake-up, and one that computes meanwhile has the thread at
 * the grace's end. Waking the thread at each such post made a barrier
 * plus alltoallv of 1 MiB on 4 ranks of 2 cores take 382 instead of 350
 * us (medians of 6 alternating runs; docs/performance.md, "coll"), and
 * looking every 2 ms instead of parking cost 4-8%. A blocking call waits
 * at once and needs no thread. */
#define PARK_NS (20 * 1000 * 1000)

typedef struct swy_uop {
    swy_list_t op_link; /* op->uops, or sched->detached */
    swy_list_t q_link;  /* a link's ready queue, or sched->completed */
    struct swy_request *op; /* NULL once detached from a failed op */
    swy_sched_t *sched;
    swy_coll_xfer_t x;   /* x.peer: a rank of the op's communicator */
    int lpeer;           /* the engine peer (link) of x.peer */
    uint64_t wire_tag;   /* what the transports match on (wire_tag()) */
    uint64_t emit_index; /* submission order within the scheduler */
    uint64_t ready_ns, posted_ns;
    int prio;            /* its op's, kept for accounting once detached */
    uint32_t seq;
    uint64_t fair_key;   /* start tag (bytes) for fair sharing of a link */
    uint8_t is_header, state, waited_behind_lower;
    uint8_t unconfirmed; /* issued before the peer posted its op */
    uint8_t fair_keyed;  /* fair_key assigned (ready_insert) */
    uint8_t send_cancelled; /* failing: 1 cancelled once its peer
                               quiesced, 2 given up on (SEND_SETTLE_S) */
    double cancel_s;        /* when */
    swy_transport_t *tp;
    void *handle;
    swy_status_t status;
    size_t bytes_done;
} swy_uop_t;

struct swy_request {
    swy_list_t link;  /* sched->ops, in post order over every view */
    swy_list_t clink; /* comm->ops */
    swy_sched_t *sched;
    swy_sched_comm_t *comm;
    uint32_t seq;  /* the view's (or the ordered pair's, for p2p) */
    uint32_t eseq; /* the engine's post order (policies' op_seq) */
    uint8_t p2p;   /* SWY_COLL_SEND or RECV */
    int priority;
    int64_t order;
    char name[64];
    swy_coll_args_t args;
    const swy_coll_algo_t *algo;
    swy_coll_state_t *state;
    swy_list_t uops;
    int n_live;
    /* The per-peer arrays below live in the op's own allocation
     * (op_alloc). */
    swy_coll_header_t *hdr_out, *hdr_in; /* indexed by peer rank */
    uint8_t *hdr_seen; /* by peer rank: HDR_NONE, HDR_EXPECTED, HDR_SEEN */
    int *hdr_peers;    /* scratch for swy_coll_header_peers */
    size_t *counts_copy; /* alltoallv: room for args' four arrays */
    swy_list_t gated;  /* sends waiting for their peer's header: device
                          sends, and host sends beyond the unconfirmed
                          allowance (UNCONFIRMED_PARTITIONS) */
    swy_list_t start_recvs; /* receives emitted by start(), posted after
                               the first sends went out (op_post_sends_first) */
    uint8_t starting;        /* inside the algorithm's start() */
    size_t *inflight_by_peer;            /* send bytes in flight per link */
    size_t *unconfirmed_by_peer;         /* of them unconfirmed, not counted
                                            in inflight_by_peer */
    uint64_t *fair_finish;               /* last finish tag per link */
    uint64_t post_ns;
    int deferred_peer; /* peer whose data disagreed before its header */
    int completed, released;
    int failing;    /* failed; completes once its buffers are free */
    int in_handler; /* handle_completion frees it (released) at its end */
    double fail_s;           /* when it failed */
    double release_deadline; /* failing: give up waiting for receivers */
    swy_status_t status;
    char errmsg[SWY_ERRMSG_MAX];
    double deadline;
};

#define PRIO_SLOTS 8

/* Bytes (or ops) per priority value; a handful of distinct priorities is
 * the norm, so a tiny array beats a map. When full, a new priority shares
 * the slot of the nearest one (accounting stays conservative). */
typedef struct {
    int prio[PRIO_SLOTS];
    size_t amount[PRIO_SLOTS];
} prio_tally_t;

/* A communicator's view of the engine (sched.h). */
struct swy_sched_comm {
    swy_list_t link; /* sched->comms */
    swy_sched_t *sched;
    uint32_t id;
    uint64_t key;
    int rank, nranks;
    int *peers; /* [nranks] engine peer of each rank */
    void *owner;
    struct swy_coll_shm *shm, *shm_a2a;
    int multi_host; /* some member is on another host than this rank */
    uint32_t next_seq;
    uint32_t *p2p_send_seq, *p2p_recv_seq; /* [nranks]: per ordered pair */
    swy_list_t ops; /* incomplete ops in post order (op->clink) */
    swy_status_t failed;
    char failmsg[SWY_ERRMSG_MAX];
};

typedef struct {
    swy_list_t ready;
    size_t inflight_bytes;
    prio_tally_t inflight_by_prio;
    int last_prio; /* of the last data micro-op issued, -1 before any */
    uint64_t fair_clock; /* start tag of the last micro-op issued */
    int remote;    /* the peer is on another host: shares the uplink */
    size_t burst_bytes; /* swy_sched_params_t.peer_burst_bytes */
} swy_link_t;

struct swy_sched {
    pthread_mutex_t lock;
    swy_sched_params_t p;
    swy_link_t *links;
    swy_list_t ops, completed, detached;
    swy_list_t uop_pool; /* freed micro-ops kept for reuse (UOP_POOL_MAX) */
    int uop_pool_len;
    swy_list_t comms;      /* every view (swy_sched_comm_t.link) */
    swy_sched_comm_t *world;
    uint32_t next_eseq;
    uint64_t next_emit;
    int n_failed_views;    /* views that failed and are still alive */
    int job_failure_seen;  /* the control plane's failure was acted on */
    uint64_t comm_failures_seen; /* swy_boot_comm_failures() acted on */
    double next_gone_check;
    double next_deadline_check;
    int phase;
    swy_comm_stats_t stats;
    swy_policy_t policy;
    size_t credit_bytes;
    int credit_auto;             /* credit follows the partition size */
    int partition_auto;          /* partition follows the link model */
    size_t auto_partition_bytes; /* what "auto" means for this comm */
    prio_tally_t pending_ops; /* incomplete ops per priority */
    /* in flight on every link to another host (swy_link_t.remote) */
    size_t uplink_inflight_bytes;
    prio_tally_t uplink_inflight_by_prio;
    int multi_host; /* some peer is on another host */
    int n_failing;        /* ops failing (not yet completed) */
    int quiesce_reported; /* swy_boot_report_quiesced sent */
    swy_trace_t *trace;
    /* progress thread (SWY_PROGRESS=thread) */
    int max_prio_seen;
    int threaded, stop, waiters;
    uint64_t last_wait_end_ns; /* when the last caller stopped waiting */
    /* The clock as a progress pass or a post last read it (a pass reads
     * it after the transports' progress and again after completions, if
     * any): the times of micro-ops and the waiters' spin and give-up
     * checks use it (clock_gettime was 23% of the samples of a 1-rank
     * alltoallv of 4 KiB when each read it, the benchmark's own two
     * reads per op included). */
    uint64_t now_ns;
    pthread_t thread;
    /* The thread parks in thread_park() on park_fd (thread_unpark writes
     * it) and timer_fd (arm_handoff sets it), both under s->lock. */
    int park_fd, timer_fd;
    uint8_t thread_parked, timer_armed;
    int wake_fd;
};

static void tally_add(prio_tally_t *t, int prio, size_t amount)
{
    int free_slot = -1, nearest = 0;
    for (int i = 0; i < PRIO_SLOTS; i++) {
        if (t->amount[i] > 0 && t->prio[i] == prio) {
            t->amount[i] += amount;
            return;
        }
        if (t->amount[i] == 0 && free_slot < 0)
            free_slot = i;
        if (abs(t->prio[i] - prio) < abs(t->prio[nearest] - prio))
            nearest = i;
    }
    int slot = free_slot >= 0 ? free_slot : nearest;
    if (free_slot >= 0)
        t->prio[slot] = prio;
    t->amount[slot] += amount;
}

static void tally_sub(prio_tally_t *t, int prio, size_t amount)
{
    int nearest = 0;
    for (int i = 0; i < PRIO_SLOTS; i++) {
        if (t->amount[i] > 0 && t->prio[i] == prio) {
            nearest = i;
            break;
        }
        if (t->amount[i] > 0 &&
            (t->amount[nearest] == 0 ||
             abs(t->prio[i] - prio) < abs(t->prio[nearest] - prio)))
            nearest = i;
    }
    t->amount[nearest] -= SWY_MIN(amount, t->amount[nearest]);
}

/* Sum of amounts with priority <= prio (le) or > prio (!le). */
static size_t tally_sum(const prio_tally_t *t, int prio, int le)
{
    size_t sum = 0;
    for (int i = 0; i < PRIO_SLOTS; i++)
        if ((t->prio[i] <= prio) == le)
            sum += t->amount[i];
    return sum;
}

static void wake_progress(swy_sched_t *s)
{
    uint64_t one = 1;
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: the thread is awake anyway */
}

static void close_fds(swy_sched_t *s)
{
    int *fds[] = {&s->wake_fd, &s->park_fd, &s->timer_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/* Park the progress thread for at most ns, or until thread_unpark() or
 * the hand-off timer. Called and returns under s->lock; a wake-up
 * between the unlock and the poll stays in park_fd, so none is lost. */
static void thread_park(swy_sched_t *s, uint64_t ns)
{
    s->thread_parked = 1;
    pthread_mutex_unlock(&s->lock);
    struct pollfd pfds[2] = {{.fd = s->park_fd, .events = POLLIN},
                             {.fd = s->timer_fd, .events = POLLIN}};
    struct timespec timeout = {.tv_sec = (time_t)(ns / 1000000000u),
                               .tv_nsec = (long)(ns % 1000000000u)};
    uint64_t count;
    int fired = 0;
    if (ppoll(pfds, 2, &timeout, NULL) > 0) {
        if ((pfds[0].revents & POLLIN) &&
            read(s->park_fd, &count, sizeof(count)) < 0)
            (void)0; /* drained by nobody else: cannot fail */
        fired = (pfds[1].revents & POLLIN) &&
                read(s->timer_fd, &count, sizeof(count)) == sizeof(count);
    }
    pthread_mutex_lock(&s->lock);
    s->thread_parked = 0;
    if (fired)
        s->timer_armed = 0;
}

/* Under s->lock: wake the thread now if it is parked. */
static void thread_unpark(swy_sched_t *s)
{
    uint64_t one = 1;
    if (s->thread_parked && write(s->park_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter is full: a wake-up is pending anyway */
}

/* Under s->lock: have the thread look when the hand-off grace after the
 * last wait ends, without waking it now (see PARK_NS). A timer already
 * armed fires no later (the grace only moves on), and the thread parks
 * again for what is left of the grace. */
static void arm_handoff(swy_sched_t *s)
{
    if (s->timer_armed)
        return;
    uint64_t at = s->last_wait_end_ns + HANDOFF_GRACE_NS;
    struct itimerspec its = {
        .it_value = {.tv_sec = (time_t)(at / 1000000000u),
                     .tv_nsec = (long)(at % 1000000000u)}};
    if (timerfd_settime(s->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        s->timer_armed = 1;
    else
        thread_unpark(s); /* no timer: look now rather than too late */
}

static void uop_complete_cb(void *arg, swy_status_t status, size_t bytes)
{
    swy_uop_t *uop = arg;
    uop->status = status;
    uop->bytes_done = bytes;
    uop->state = UOP_DONE;
    swy_list_push_back(&uop->sched->completed, &uop->q_link);
}

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

static uint64_t wire_tag(const struct swy_request *op,
                         const swy_coll_xfer_t *x)
{
    uint64_t dir = 0;
    if (op->p2p)
        dir = op->args.kind == SWY_COLL_SEND ? !x->is_send : x->is_send;
    return (uint64_t)op->comm->id << TAG_COMM_SHIFT |
           (uint64_t)op->p2p << TAG_P2P_SHIFT | dir << TAG_DIR_SHIFT |
           (uint64_t)(op->seq & ((1u << TAG_SEQ_BITS) - 1))
               << SWY_COLL_TAG_BITS |
           x->tag;
}

static const char *op_label(const struct swy_request *op)
{
    return op->name[0] ? op->name : swy_coll_kind_name(op->args.kind);
}

/* ---- op completion and failure ---------------------------------------- */

static void op_free(struct swy_request *op)
{
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
    if (!op->failing) /* a failing op left the tally when it failed */
        tally_sub(&s->pending_ops, op->priority, 1);
    s->stats.ops_completed++;
    if (s->trace != NULL) {
        char name[40];
        snprintf(name, sizeof(name), "%.28s #%u", op_label(op), op->seq);
        swy_trace_event(s->trace, 0, name, swy_coll_kind_name(op->args.kind),
                        op->post_ns, swy_time_ns(), op->priority, 0, -1,
                        op->seq);
    }
    if (op->status != SWY_OK)
        swy_debug("sched", "op #%u '%s' failed: %s", op->seq, op_label(op),
                  op->errmsg);
    if (op->failing) {
        op->failing = 0;
        s->n_failing--;
    }
    if (op->released && !op->in_handler)
        op_free(op);
}

static int op_alive(const struct swy_request *op)
{
    return !op->completed && !op->failing;
}

static void op_error(struct swy_request *op, swy_status_t status,
                     const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void op_drain(struct swy_request *op, int force);

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

static void op_fail(struct swy_request *op, swy_status_t status,
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
    op_drain(op, 0);
}

/* A failing op completes once none of its micro-ops may still touch the
 * caller's buffers (RELEASE_GRACE_S), or at once with force (the comm
 * goes away). What is still posted then is detached: freed when its
 * callback comes, or with the scheduler. */
static void op_drain(struct swy_request *op, int force)
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
    op->n_live = 0;
    op_complete(op);
}

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
        if (report && s->p.boot != NULL && c == s->world)
            swy_boot_report_failure(s->p.boot, status, msg);
        else if (report && s->p.boot != NULL)
            swy_boot_report_comm_failure(s->p.boot, c->key, status, msg);
    }
    swy_list_for_each_safe(pos, tmp, &c->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  clink);
        op_fail(op, c->failed, c->failmsg);
    }
}

/* ---- emitting micro-ops ----------------------------------------------- */

static void policy_view(const swy_uop_t *uop, swy_policy_uop_v1_t *view)
{
    const struct swy_request *op = uop->op;
    *view = (swy_policy_uop_v1_t){
        .priority = uop->prio, .order = op->order, .op_seq = op->eseq,
        .ready_index = uop->emit_index, .ready_ns = uop->ready_ns,
        .bytes = uop->x.bytes, .peer = uop->lpeer,
        .op_inflight_bytes = op->inflight_by_peer[uop->x.peer],
        .fair_key = uop->fair_key};
}

static void ready_insert(swy_sched_t *s, swy_uop_t *uop)
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

static swy_uop_t *uop_new(struct swy_request *op, const swy_coll_xfer_t *x,
                          int is_header)
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
    uop->wire_tag = wire_tag(op, x);
    /* Headers live in engine memory (x->mem is host); data in the
     * transfer's buffer, of its memory type. */
    uop->tp = swy_transport_for_peer(s->p.transports, uop->lpeer, x->mem);
    swy_list_init(&uop->q_link);
    swy_list_push_back(&op->uops, &uop->op_link);
    op->n_live++;
    return uop;
}

static swy_status_t uop_post_recv(swy_uop_t *uop)
{
    swy_transport_t *tp = uop->tp;
    uop->state = UOP_POSTED;
    uop->posted_ns = uop->sched->now_ns;
    swy_status_t status = tp->ops->irecv(
        tp->ctx, uop->lpeer, uop->wire_tag, uop->x.buf, uop->x.bytes,
        uop->x.mem, uop_complete_cb, uop, &uop->handle);
    if (status != SWY_OK)
        uop->state = UOP_READY; /* never reached the transport */
    return status;
}

static void op_error(struct swy_request *op, swy_status_t status,
                     const char *fmt, ...)
{
    char msg[SWY_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A transport fails because a peer went away, and a peer goes away
     * because the job failed: when the control plane has already heard
     * why (another rank's mismatch, say), that is this op's error too. */
    swy_sched_t *s = op->sched;
    if (status == SWY_ERR_TRANSPORT && s->p.boot != NULL) {
        char why[SWY_ERRMSG_MAX];
        swy_status_t cause = swy_boot_failure(s->p.boot, why, sizeof(why));
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
    op_fail(op, status, msg);
}

static void emit_post_recv(struct swy_request *op, swy_uop_t *uop)
{
    swy_status_t status = uop_post_recv(uop);
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
    swy_uop_t *uop = uop_new(op, x, 0);
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
            ready_insert(op->sched, uop);
        return;
    }
    if (op->starting) { /* see op_post_sends_first */
        uop->state = UOP_READY;
        swy_list_push_back(&op->start_recvs, &uop->q_link);
        return;
    }
    emit_post_recv(op, uop);
}

/* ---- issuing sends ----------------------------------------------------- */

static void link_account(swy_sched_t *s, swy_uop_t *uop, int sign)
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
    while (pos != &link->ready && skips < 64) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, q_link);
        /* The oldest op of the micro-op's own communicator: fifo is one
         * stream per communicator, as NCCL's, so that communicators whose
         * ops ranks post in different orders never wait for each other. */
        swy_list_t *cops = &uop->op->comm->ops;
        uint32_t oldest = swy_list_empty(cops)
                              ? 0
                              : swy_container_of(cops->next,
                                                 struct swy_request,
                                                 clink)->eseq;
        swy_policy_uop_v1_t view;
        policy_view(uop, &view);
        swy_policy_link_v1_t lv = {
            .peer = peer, .inflight_bytes = link->inflight_bytes,
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
        if (unconf > 0 && unconf + uop->x.bytes >
                              UNCONFIRMED_PARTITIONS * s->p.partition_bytes) {
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
        uop->unconfirmed = (uint8_t)unconfirmed;
        link_account(s, uop, +1);
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
        swy_transport_t *tp = uop->tp;
        swy_status_t status;
        /* A transport with device services takes the op's priority (the
         * nccl plugin's high- or low-priority stream); one with send
         * hints hears which sends are bulk (the ucx plugin then skips its
         * eager path to local ranks). */
        if (!uop->is_header && tp->dev != NULL && tp->dev->isend_prio != NULL)
            status = tp->dev->isend_prio(
                tp->ctx, peer, uop->wire_tag, uop->x.buf, uop->x.bytes,
                uop->x.mem, uop->prio, uop_complete_cb, uop, &uop->handle);
        else if (!uop->is_header && uop->x.bulk && tp->hints != NULL)
            status = tp->hints->isend_hinted(
                tp->ctx, peer, uop->wire_tag, uop->x.buf, uop->x.bytes,
                uop->x.mem, SWY_SEND_HINT_BULK, uop_complete_cb, uop,
                &uop->handle);
        else
            status = tp->ops->isend(
                tp->ctx, peer, uop->wire_tag, uop->x.buf, uop->x.bytes,
                uop->x.mem, uop_complete_cb, uop, &uop->handle);
        if (status != SWY_OK) {
            link_account(s, uop, -1);
            uop->state = UOP_READY; /* never reached the transport */
            op_error(uop->op, status, "op #%u '%s': sending %zu bytes to "
                     "rank %d failed", uop->seq, op_label(uop->op),
                     uop->x.bytes, cpeer);
            pos = link->ready.next; /* the queue changed */
            continue;
        }
        s->stats.micro_ops_sent++;
        issued++;
    }
    return issued;
}

static int issue_all(swy_sched_t *s)
{
    int issued = 0;
    for (int i = 1; i <= s->p.nranks; i++)
        issued += issue_link(s, (s->p.rank + i) % s->p.nranks);
    return issued;
}

/* ---- completions ------------------------------------------------------- */

static void handle_header(struct swy_request *op, swy_uop_t *uop)
{
    swy_sched_t *s = op->sched;
    int peer = uop->x.peer;
    char msg[SWY_ERRMSG_MAX];
    if (uop->bytes_done != sizeof(swy_coll_header_t)) {
        snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a header of "
                 "%zu bytes (expected %zu)", op->seq, op_label(op), peer,
                 uop->bytes_done, sizeof(swy_coll_header_t));
        swy_sched_fail_comm(op->comm, SWY_ERR_MISMATCH, msg, 1);
        return;
    }
    op->hdr_seen[peer] = HDR_SEEN;
    swy_status_t status = swy_coll_header_check(
        &op->args, op->seq, op_label(op), op->comm->rank, peer,
        &op->hdr_in[peer], msg, sizeof(msg));
    if (status == SWY_OK && op->deferred_peer == peer) {
        snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a message of "
                 "unexpected size although its header agreed", op->seq,
                 op_label(op), peer);
        status = SWY_ERR_MISMATCH;
    }
    if (status != SWY_OK) {
        swy_sched_fail_comm(op->comm, status, msg, 1);
        return;
    }
    /* The peer has posted this op: what was sent to it unconfirmed now
     * counts against the link like any send in flight. */
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &op->uops) {
        swy_uop_t *u = swy_container_of(pos, swy_uop_t, op_link);
        if (u->unconfirmed && u->x.is_send && u->state == UOP_POSTED &&
            u->x.peer == peer) {
            link_account(s, u, -1); /* out of unconfirmed_by_peer */
            u->unconfirmed = 0;
            link_account(s, u, +1);
        }
    }
    /* The peer has posted this op: its device sends may go. */
    swy_list_for_each_safe(pos, tmp, &op->gated) {
        swy_uop_t *gated = swy_container_of(pos, swy_uop_t, q_link);
        if (gated->x.peer != peer)
            continue;
        swy_list_del(&gated->q_link);
        ready_insert(s, gated);
    }
}

static void handle_data_size_mismatch(struct swy_request *op, swy_uop_t *uop)
{
    /* The peer's header went out before its data on the same link, so its
     * check (which names both counts) normally ran already; if not, wait
     * for it rather than report a vaguer message. */
    int peer = uop->x.peer;
    if (op->hdr_seen[peer] == HDR_EXPECTED) {
        op->deferred_peer = peer;
        return;
    }
    char msg[SWY_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "op #%u '%s': rank %d sent a chunk that does "
             "not fit the %zu bytes rank %d expected (tag %u)", op->seq,
             op_label(op), peer, uop->x.bytes, op->comm->rank, uop->x.tag);
    swy_sched_fail_comm(op->comm, SWY_ERR_MISMATCH, msg, 1);
}

static void handle_completion(swy_sched_t *s, swy_uop_t *uop)
{
    struct swy_request *op = uop->op;
    if (uop->x.is_send && uop->posted_ns != 0)
        link_account(s, uop, -1);
    if (s->trace != NULL && uop->posted_ns != 0 && !uop->is_header) {
        char name[40];
        snprintf(name, sizeof(name), "%.20s #%u/%u",
                 op ? op_label(op) : "detached", uop->seq, uop->x.tag);
        swy_trace_event(s->trace, uop->x.is_send ? 1 + uop->lpeer
                                                 : 100000 + uop->lpeer,
                        name, uop->x.is_send ? "send" : "recv",
                        uop->posted_ns, swy_time_ns(), uop->prio,
                        uop->x.bytes, uop->lpeer, uop->seq);
    }
    swy_list_del(&uop->op_link);
    if (op == NULL) { /* detached from a failed op */
        uop_release(s, uop);
        return;
    }
    op->n_live--;
    if (op->failing) { /* cancelled or drained: nothing more to do */
        uop_release(s, uop);
        op_drain(op, 0);
        return;
    }
    op->in_handler = 1;
    if (uop->status == SWY_ERR_MISMATCH && !uop->x.is_send) {
        handle_data_size_mismatch(op, uop);
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
        handle_header(op, uop);
    } else if (uop->bytes_done != uop->x.bytes) {
        handle_data_size_mismatch(op, uop);
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
    if (op_alive(op) && op->n_live == 0)
        op_finish(op);
    op->in_handler = 0;
    if (op->completed && op->released)
        op_free(op);
}

/* ---- deadlines --------------------------------------------------------- */

static void check_deadlines(swy_sched_t *s, double now)
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
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg),
                 "op #%u %s '%s' timed out after %.0f s on rank %d: %s%s "
                 "(SWY_TIMEOUT_S)", op->seq, swy_coll_kind_name(op->args.kind),
                 op_label(op), s->p.timeout_s, op->comm->rank,
                 nsilent ? (nsilent == 1 ? "no data from rank "
                                         : "no data from ranks ")
                         : "sends not completed",
                 peers);
        swy_sched_fail_comm(op->comm, SWY_ERR_TIMEOUT, msg, 1);
        return; /* the list changed */
    }
}

/* ---- progress ---------------------------------------------------------- */

/* Drain the failing ops (op_drain) and, after a comm failure, report
 * this rank quiesced once it can. */
static void progress_failing(swy_sched_t *s)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &s->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        if (op->failing)
            op_drain(op, 0);
    }
    report_quiesced(s);
}

/* Failures the control plane knows of first, acted on before the
 * transports run, so a rendezvous that arrived meanwhile finds no receive
 * and reads nothing (see RELEASE_GRACE_S):
 * - the job's failure (a rank died or left, the world view's mismatch,
 *   timeout or abort, the root gone) fails the world view;
 * - a split view fails when one of its peer processes died or left (the
 *   root said so), or when the control plane is gone; its other failures
 *   come scoped to it (swy_boot_comm_failure), and leave the rest alone. */
static void check_control_plane(swy_sched_t *s, double now)
{
    swy_boot_t *boot = s->p.boot;
    char msg[SWY_ERRMSG_MAX];
    if (boot == NULL)
        return;
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
        if (c == s->world || c->failed != SWY_OK)
            continue;
        swy_status_t status = swy_boot_comm_failure(boot, c->key, msg,
                                                    sizeof(msg));
        if (status != SWY_OK)
            swy_sched_fail_comm(c, status, msg, 0);
    }
}

static int progress_locked(swy_sched_t *s)
{
    check_control_plane(s, (double)s->now_ns * 1e-9);
    int events = swy_transport_set_progress(s->p.transports);
    s->now_ns = swy_time_ns();
    int handled = 0;
    while (!swy_list_empty(&s->completed)) {
        swy_uop_t *uop = swy_container_of(s->completed.next, swy_uop_t,
                                          q_link);
        swy_list_del(&uop->q_link);
        handle_completion(s, uop);
        handled++;
    }
    /* Completions may have reduced or copied for a while: the sends
     * issued next are stamped with the time they leave. */
    if (handled > 0)
        s->now_ns = swy_time_ns();
    events += handled;
    if (s->n_failing > 0 || (s->n_failed_views > 0 && !s->quiesce_reported))
        progress_failing(s);
    events += issue_all(s);
    double now = (double)s->now_ns * 1e-9;
    if (now >= s->next_deadline_check) {
        s->next_deadline_check = now + 0.05;
        if (!swy_list_empty(&s->ops))
            check_deadlines(s, now);
    }
    return events;
}

/* ---- public entry points ------------------------------------------------ */

static void *progress_thread_main(void *arg);

/* A view, under s->lock (or before the engine runs). */
static swy_status_t comm_new(swy_sched_t *s,
                             const swy_sched_comm_params_t *params,
                             swy_sched_comm_t **comm_p)
{
    size_t n = (size_t)params->nranks;
    swy_sched_comm_t *c = swy_calloc(1, sizeof(*c));
    if (c == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    c->peers = swy_malloc(n * sizeof(int));
    c->p2p_send_seq = swy_calloc(2 * n, sizeof(uint32_t));
    if (c->peers == NULL || c->p2p_send_seq == NULL) {
        swy_free(c->peers);
        swy_free(c->p2p_send_seq);
        swy_free(c);
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    }
    c->p2p_recv_seq = c->p2p_send_seq + n;
    memcpy(c->peers, params->peers, n * sizeof(int));
    c->sched = s;
    c->id = params->id;
    c->key = params->key;
    c->rank = params->rank;
    c->nranks = params->nranks;
    c->owner = params->owner;
    c->shm = params->shm;
    c->shm_a2a = params->shm_a2a;
    for (size_t r = 0; r < n; r++)
        c->multi_host |= s->links[c->peers[r]].remote;
    swy_list_init(&c->ops);
    swy_list_push_back(&s->comms, &c->link);
    *comm_p = c;
    return SWY_OK;
}

static void comm_free(swy_sched_comm_t *c)
{
    swy_list_del(&c->link);
    if (c->failed != SWY_OK)
        c->sched->n_failed_views--;
    swy_free(c->peers);
    swy_free(c->p2p_send_seq);
    swy_free(c);
}

swy_status_t swy_sched_create(const swy_sched_params_t *params,
                              swy_sched_t **sched_p)
{
    swy_status_t status;
    swy_sched_t *s = swy_calloc(1, sizeof(*s));
    if (s == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    s->p = *params;
    s->wake_fd = s->park_fd = s->timer_fd = -1;
    s->links = swy_calloc((size_t)params->nranks, sizeof(*s->links));
    if (s->links == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
        goto err_free;
    }
    for (int i = 0; i < params->nranks; i++) {
        swy_list_init(&s->links[i].ready);
        s->links[i].last_prio = -1;
        s->links[i].remote = params->peer_remote != NULL &&
                             params->peer_remote[i] != 0;
        s->multi_host |= s->links[i].remote;
        s->links[i].burst_bytes = params->peer_burst_bytes != NULL
                                      ? params->peer_burst_bytes[i]
                                      : params->window_bytes;
    }
    swy_list_init(&s->ops);
    swy_list_init(&s->completed);
    swy_list_init(&s->detached);
    swy_list_init(&s->uop_pool);
    swy_list_init(&s->comms);
    int *identity = swy_malloc((size_t)params->nranks * sizeof(int));
    if (identity == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
        goto err_links;
    }
    for (int i = 0; i < params->nranks; i++)
        identity[i] = i;
    swy_sched_comm_params_t world = {
        .id = 0, .key = 0, .rank = params->rank, .nranks = params->nranks,
        .peers = identity, .owner = params->owner, .shm = params->shm,
        .shm_a2a = params->shm_a2a};
    status = comm_new(s, &world, &s->world);
    swy_free(identity);
    if (status != SWY_OK)
        goto err_links;
    s->stats.struct_size = sizeof(s->stats);
    s->credit_auto = params->credit_bytes == 0;
    s->credit_bytes = s->credit_auto ? params->partition_bytes
                                     : params->credit_bytes;
    s->partition_auto = !params->partition_set &&
                        params->partition_bytes == params->auto_partition_bytes;
    s->auto_partition_bytes = params->auto_partition_bytes
                                  ? params->auto_partition_bytes
                                  : params->partition_bytes;
    status = swy_policy_load(params->policy ? params->policy : "lina",
                             params->rank, params->nranks, &s->policy);
    if (status != SWY_OK)
        goto err_world;
    pthread_mutex_init(&s->lock, NULL);
    s->trace = swy_trace_create(params->rank, params->nranks);
    if (params->progress_thread) {
        s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        s->park_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        s->timer_fd = timerfd_create(CLOCK_MONOTONIC,
                                     TFD_NONBLOCK | TFD_CLOEXEC);
        if (s->wake_fd < 0 || s->park_fd < 0 || s->timer_fd < 0 ||
            pthread_create(&s->thread, NULL, progress_thread_main, s) != 0) {
            status = swy_err_set(SWY_ERR_SYSTEM, "sched", "cannot start the "
                                 "progress thread");
            goto err_policy;
        }
        s->threaded = 1;
    }
    *sched_p = s;
    return SWY_OK;

err_policy:
    close_fds(s);
    swy_trace_finish(s->trace);
    pthread_mutex_destroy(&s->lock);
    swy_policy_unload(&s->policy);
err_world:
    comm_free(s->world);
err_links:
    swy_free(s->links);
err_free:
    swy_free(s);
    return status;
}

/* The sends that start() made ready go to the transports before its
 * receives: a receive that matches a rendezvous already waiting (a peer
 * that posted first) may copy the whole message inside irecv() (UCX's
 * CMA get), and with the receives first a late rank issued its own sends
 * only after those copies, while its peers waited for them (traced on the
 * 2-core VM: an alltoallv of 1 MiB per rank issued its sends 40-215 us
 * after the op began; now 1.5-3 us). On those 2 busy cores the copies
 * are the time either way (alltoallv 1 MiB 335 against 336 us, 16 MiB
 * 12.1 against 12.4 ms; allreduce 1 MiB 922 against 962 us: 15
 * alternating runs). Receives emitted later, by recv_done(), post at once
 * as before. */
static void op_post_sends_first(swy_sched_t *s, struct swy_request *op)
{
    if (op_alive(op))
        issue_all(s);
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

swy_status_t swy_sched_post(swy_sched_comm_t *c, const swy_coll_args_t *args,
                            int priority, int64_t order, const char *name,
                            struct swy_request **req_p)
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
    /* This rank's SWY_ALLREDUCE_ALGO, resolved for the op: the header
     * carries it, so ranks that chose differently fail, not wait. */
    op->args.multi_host = (uint8_t)c->multi_host;
    op->args.shm = args->mem == SWY_MEM_HOST ? c->shm : NULL;
    op->args.shm_a2a = args->mem == SWY_MEM_HOST ? c->shm_a2a : NULL;
    if (args->kind == SWY_COLL_ALLREDUCE)
        op->args.allreduce_algo = (uint8_t)swy_coll_allreduce_choose(
            &op->args, swy_coll_allreduce_setting(), w);
    if (args->kind == SWY_COLL_ALLTOALLV)
        op->args.alltoallv_algo = (uint8_t)swy_coll_alltoallv_choose(
            &op->args, swy_coll_alltoallv_setting());
    op->algo = swy_coll_algo_for(&op->args, w);
    swy_list_init(&op->uops);
    swy_list_init(&op->gated);
    swy_list_init(&op->start_recvs);
    swy_list_init(&op->link);
    swy_list_init(&op->clink);
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

    pthread_mutex_lock(&s->lock);
    if (c->failed == SWY_OK && c == s->world) /* the job's news first */
        check_control_plane(s, swy_time_s());
    if (c->failed != SWY_OK) {
        swy_status_t status = c->failed;
        swy_err_store(c->failmsg);
        pthread_mutex_unlock(&s->lock);
        op_free(op);
        return status;
    }
    /* Sends and receives take their ordered pair's sequence: they match
     * in posting order per pair, whatever else either rank posts. */
    if (args->kind == SWY_COLL_SEND)
        op->seq = c->p2p_send_seq[args->root]++ & 0xFFFFFFu;
    else if (args->kind == SWY_COLL_RECV)
        op->seq = c->p2p_recv_seq[args->root]++ & 0xFFFFFFu;
    else
        op->seq = c->next_seq++ & 0xFFFFFFu;
    op->eseq = s->next_eseq++ & 0xFFFFFFu;
    op->args.partition_bytes = op_partition_bytes(c, &op->args);
    s->now_ns = swy_time_ns();
    op->post_ns = s->now_ns;
    op->deadline = (double)s->now_ns * 1e-9 + s->p.timeout_s;
    swy_err_clear(); /* what create() or start() set is theirs */
    swy_status_t status = op->algo->create(&op->args, c->rank, w,
                                           op->args.partition_bytes,
                                           &op->state);
    if (status != SWY_OK) {
        pthread_mutex_unlock(&s->lock);
        op_free(op);
        /* The algorithm said why, or it is the size (tag space). */
        char why[SWY_ERRMSG_MAX];
        snprintf(why, sizeof(why), "%s", swy_err_last());
        return swy_err_set(status, "sched", "cannot set up %s%s%s",
                           swy_coll_kind_name(args->kind),
                           why[0] != '\0' ? ": " : " of this size", why);
    }
    s->stats.ops_posted++;
    swy_list_push_back(&s->ops, &op->link);
    swy_list_push_back(&c->ops, &op->clink);
    tally_add(&s->pending_ops, op->priority, 1);
    if (op->priority > s->max_prio_seen)
        s->max_prio_seen = op->priority;
    /* The announced high-priority op is here: the hint has served. */
    if (s->phase == SWY_PHASE_A2A_IMMINENT && op->priority >= SWY_PRIO_HIGH)
        s->phase = SWY_PHASE_NONE;

    /* Headers first: they leave before any data on the same link. */
    int *peers = op->hdr_peers;
    int npeers = swy_coll_header_peers(&op->args, c->rank, w, peers);
    for (int i = 0; i < npeers && op_alive(op); i++) {
        int peer = peers[i];
        swy_coll_header_make(&op->args, op->seq, peer, &op->hdr_out[peer]);
        op->hdr_seen[peer] = HDR_EXPECTED;
        swy_coll_xfer_t rx = {.peer = peer, .is_send = 0,
                              .tag = SWY_COLL_TAG_HEADER,
                              .buf = &op->hdr_in[peer],
                              .bytes = sizeof(swy_coll_header_t)};
        swy_uop_t *ruop = uop_new(op, &rx, 1);
        swy_coll_xfer_t sx = rx;
        sx.is_send = 1;
        sx.buf = &op->hdr_out[peer];
        swy_uop_t *suop = uop_new(op, &sx, 1);
        if (ruop == NULL || suop == NULL || ruop->tp == NULL) {
            op_error(op, SWY_ERR_NO_MEMORY, "op #%u: cannot set up the "
                     "header exchange with rank %d", op->seq, peer);
            break;
        }
        if (uop_post_recv(ruop) != SWY_OK) {
            op_error(op, SWY_ERR_TRANSPORT, "op #%u: cannot post the header "
                     "receive from rank %d", op->seq, peer);
            break;
        }
        /* Headers jump the queue: they are tiny and gate nothing. */
        suop->state = UOP_READY;
        swy_list_insert_before(s->links[suop->lpeer].ready.next,
                               &suop->q_link);
    }
    if (op_alive(op)) {
        swy_coll_emit_t emit = {emit_post, op};
        op->starting = 1;
        status = op->algo->start(op->state, &emit);
        op->starting = 0;
        if (status != SWY_OK && op_alive(op))
            op_error(op, status, "op #%u '%s': start failed: %s", op->seq,
                     op_label(op), swy_err_last());
        op_post_sends_first(s, op);
    }
    if (op_alive(op) && op->n_live == 0)
        op_finish(op);
    progress_locked(s);
    pthread_mutex_unlock(&s->lock);
    /* A thread asleep on the transports' fds wakes for this op's incoming
     * traffic; one parked while a caller waited hears of the op from
     * swy_sched_handoff() if the caller will not wait for it at once. */
    *req_p = op;
    return SWY_OK;
}

void swy_sched_handoff(swy_sched_t *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->threaded && s->waiters == 0) {
        if (swy_time_ns() < s->last_wait_end_ns + HANDOFF_GRACE_NS)
            arm_handoff(s);
        else if (s->thread_parked)
            thread_unpark(s);
        else
            wake_progress(s); /* asleep on the fds, maybe for 500 ms */
    }
    pthread_mutex_unlock(&s->lock);
}

swy_status_t swy_sched_test(struct swy_request *op, int *done_p)
{
    swy_sched_t *s = op->sched;
    pthread_mutex_lock(&s->lock);
    if (!op->completed && !s->threaded)
        progress_locked(s);
    int done = op->completed;
    swy_status_t status = done ? op->status : SWY_OK;
    if (done && status != SWY_OK)
        swy_err_store(op->errmsg);
    pthread_mutex_unlock(&s->lock);
    *done_p = done;
    return status;
}

/* Sleep until a transport or the control plane has something, or at most
 * max_ms. Returns at once if some transport cannot sleep right now. */
static void sleep_on_events(swy_sched_t *s, int max_ms)
{
    int fds[SWY_TRANSPORT_MAX + 3];
    pthread_mutex_lock(&s->lock);
    int n = swy_transport_set_arm(s->p.transports, fds, SWY_TRANSPORT_MAX);
    pthread_mutex_unlock(&s->lock);
    if (n < 0) {
        sched_yield();
        return;
    }
    struct pollfd pfds[SWY_TRANSPORT_MAX + 3];
    for (int i = 0; i < n; i++)
        pfds[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    /* The job's failure fd stays readable once written: after it was
     * acted on (split views may live on) only the scoped one counts. */
    if (s->p.boot != NULL && !s->job_failure_seen)
        pfds[n++] = (struct pollfd){.fd = swy_boot_failure_fd(s->p.boot),
                                    .events = POLLIN};
    if (s->p.boot != NULL)
        pfds[n++] = (struct pollfd){
            .fd = swy_boot_comm_failure_fd(s->p.boot), .events = POLLIN};
    if (s->wake_fd >= 0)
        pfds[n++] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
    poll(pfds, (nfds_t)n, max_ms);
    uint64_t count;
    if (s->wake_fd >= 0 && read(s->wake_fd, &count, sizeof(count)) < 0)
        (void)0; /* nothing to drain */
}

/* The progress thread covers the time nobody waits (so sends leave while
 * the application computes). It never spins: ranks often outnumber cores,
 * and a spinning thread steals the core a peer needs to copy our data.
 * After a pass with nothing to do it sleeps on the transports' event fds,
 * the control plane and the wake fd (briefly while ops are in flight,
 * long when idle), so an idle rank burns no CPU. While a caller waits,
 * the caller drives progress and the thread parks (thread_park). */

static void *progress_thread_main(void *arg)
{
    swy_sched_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stop) {
            if (s->waiters > 0) {
                thread_park(s, PARK_NS);
                continue;
            }
            uint64_t now = swy_time_ns();
            uint64_t handoff = s->last_wait_end_ns + HANDOFF_GRACE_NS;
            if (now >= handoff)
                break;
            thread_park(s, handoff - now);
        }
        if (s->stop) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        int events = progress_locked(s);
        int busy = !swy_list_empty(&s->ops);
        pthread_mutex_unlock(&s->lock);
        if (events == 0)
            sleep_on_events(s, busy ? 5 : 500);
    }
}

void swy_sched_stop(swy_sched_t *s)
{
    if (s == NULL || !s->threaded)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    thread_unpark(s);
    pthread_mutex_unlock(&s->lock);
    wake_progress(s);
    pthread_join(s->thread, NULL);
    s->threaded = 0;
}

static void wait_polling(swy_sched_t *s, int (*done)(void *), void *arg,
                         double give_up);

/* A waiting caller drives progress itself, even with a progress thread:
 * the thread stands aside while anyone waits (s->waiters), so completions
 * need no hand-off between threads — which matters when ranks outnumber
 * cores. The thread covers the time nobody waits (compute overlap). */
static void wait_until(swy_sched_t *s, int (*done)(void *), void *arg,
                       double give_up)
{
    pthread_mutex_lock(&s->lock);
    s->waiters++;
    pthread_mutex_unlock(&s->lock);
    wait_polling(s, done, arg, give_up);
    pthread_mutex_lock(&s->lock);
    if (--s->waiters == 0) {
        s->last_wait_end_ns = swy_time_ns();
        /* Ops left in flight are the thread's after the grace: have it
         * look then rather than at its next look (PARK_NS). */
        if (s->threaded && !swy_list_empty(&s->ops))
            arm_handoff(s);
    }
    pthread_mutex_unlock(&s->lock);
}

static void wait_polling(swy_sched_t *s, int (*done)(void *), void *arg,
                         double give_up)
{
    double spin_until = -1.0; /* from the first pass's clock */
    for (;;) {
        pthread_mutex_lock(&s->lock);
        int events = progress_locked(s);
        int finished = done(arg);
        double now = (double)s->now_ns * 1e-9;
        pthread_mutex_unlock(&s->lock);
        if (finished)
            return;
        if (now >= give_up)
            return;
        if (spin_until < 0.0)
            spin_until = now + s->p.spin_s;
        if (events > 0) {
            spin_until = now + s->p.spin_s;
            continue;
        }
        if (now < spin_until) {
            sched_yield();
            continue;
        }
        sleep_on_events(s, 50);
        spin_until = swy_time_s() + s->p.spin_s / 4;
    }
}

static int request_done(void *arg)
{
    return ((struct swy_request *)arg)->completed;
}

swy_status_t swy_sched_wait(struct swy_request *op)
{
    swy_sched_t *s = op->sched;
    wait_until(s, request_done, op, 1e300);
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
    if (op->completed)
        op_free(op);
    else
        op->released = 1;
    pthread_mutex_unlock(&s->lock);
}

static int comm_idle(void *arg)
{
    swy_sched_comm_t *c = arg;
    return swy_list_empty(&c->ops) || c->failed != SWY_OK;
}

swy_status_t swy_sched_drain(swy_sched_comm_t *c, double timeout_s)
{
    swy_sched_t *s = c->sched;
    wait_until(s, comm_idle, c, swy_time_s() + timeout_s);
    pthread_mutex_lock(&s->lock);
    swy_status_t status = c->failed;
    if (status != SWY_OK)
        swy_err_store(c->failmsg);
    else if (!swy_list_empty(&c->ops))
        status = swy_err_set(SWY_ERR_TIMEOUT, "sched", "operations still in "
                             "flight after %.0f s", timeout_s);
    pthread_mutex_unlock(&s->lock);
    return status;
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
    check_control_plane(s, swy_time_s());
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
    if (s->p.boot != NULL && c == s->world)
        swy_boot_report_failure(s->p.boot, SWY_ERR_REMOTE, why);
    else if (s->p.boot != NULL)
        swy_boot_report_comm_failure(s->p.boot, c->key, SWY_ERR_REMOTE, why);
    pthread_mutex_unlock(&s->lock);
}

swy_sched_comm_t *swy_sched_world(swy_sched_t *s)
{
    return s->world;
}

swy_sched_t *swy_sched_of(const swy_sched_comm_t *c)
{
    return c->sched;
}

uint32_t swy_sched_comm_id(const swy_sched_comm_t *c)
{
    return c->id;
}

void swy_sched_comm_ids(swy_sched_t *s, uint64_t used[SWY_SCHED_COMM_IDS / 64])
{
    memset(used, 0, SWY_SCHED_COMM_IDS / 8);
    pthread_mutex_lock(&s->lock);
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        used[c->id / 64] |= UINT64_C(1) << (c->id % 64);
    }
    pthread_mutex_unlock(&s->lock);
}

swy_status_t swy_sched_comm_create(swy_sched_t *s,
                                   const swy_sched_comm_params_t *params,
                                   swy_sched_comm_t **comm_p)
{
    if (params->id == 0 || params->id >= SWY_SCHED_COMM_IDS ||
        params->nranks < 1 || params->rank < 0 ||
        params->rank >= params->nranks)
        return swy_err_set(SWY_ERR_INTERNAL, "sched", "bad view: id %u, "
                           "rank %d of %d", params->id, params->rank,
                           params->nranks);
    for (int r = 0; r < params->nranks; r++)
        if (params->peers[r] < 0 || params->peers[r] >= s->p.nranks)
            return swy_err_set(SWY_ERR_INTERNAL, "sched", "bad view: peer "
                               "%d of rank %d", params->peers[r], r);
    pthread_mutex_lock(&s->lock);
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next)
        if (swy_container_of(pos, swy_sched_comm_t, link)->id == params->id) {
            pthread_mutex_unlock(&s->lock);
            return swy_err_set(SWY_ERR_INTERNAL, "sched", "communicator id "
                               "%u is in use", params->id);
        }
    swy_status_t status = comm_new(s, params, comm_p);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_comm_destroy(swy_sched_comm_t *c)
{
    if (c == NULL || c == c->sched->world)
        return;
    swy_sched_t *s = c->sched;
    swy_list_t *pos, *tmp;
    pthread_mutex_lock(&s->lock);
    swy_sched_fail_comm(c, SWY_ERR_ABORTED, "communicator destroyed", 0);
    /* What is still failing is handed over as detached (op_drain). */
    swy_list_for_each_safe(pos, tmp, &c->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  clink);
        op_drain(op, 1);
    }
    comm_free(c);
    pthread_mutex_unlock(&s->lock);
}

int swy_sched_threads(const swy_sched_t *s)
{
    return s->threaded ? 1 : 0;
}

void swy_sched_destroy(swy_sched_t *s)
{
    swy_list_t *pos, *tmp;
    if (s == NULL)
        return;
    swy_sched_stop(s);
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        swy_sched_fail_comm(c, SWY_ERR_ABORTED, "communicator destroyed", 0);
    }
    swy_list_for_each_safe(pos, tmp, &s->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        op_drain(op, 1);
    }
    swy_list_for_each_safe(pos, tmp, &s->detached) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        swy_free(uop);
    }
    swy_list_for_each_safe(pos, tmp, &s->uop_pool) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        swy_free(uop);
    }
    swy_list_for_each_safe(pos, tmp, &s->comms)
        comm_free(swy_container_of(pos, swy_sched_comm_t, link));
    swy_trace_finish(s->trace);
    swy_policy_unload(&s->policy);
    close_fds(s);
    pthread_mutex_destroy(&s->lock);
    swy_free(s->links);
    swy_free(s);
}

void swy_sched_phase_hint(swy_sched_t *s, int phase)
{
    pthread_mutex_lock(&s->lock);
    s->phase = phase;
    pthread_mutex_unlock(&s->lock);
}

void swy_sched_stats(swy_sched_t *s, swy_comm_stats_t *stats)
{
    pthread_mutex_lock(&s->lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->lock);
}

void *swy_sched_owner(const struct swy_request *op)
{
    return op->comm->owner;
}

static swy_status_t parse_size_setting(const char *name, const char *value,
                                       size_t auto_value, size_t *out)
{
    if (strcmp(value, "auto") == 0) {
        *out = auto_value;
        return SWY_OK;
    }
    size_t parsed;
    if (swy_config_parse_size(value, &parsed) != 0 || parsed == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "sched", "%s='%s' is not a "
                           "positive size (e.g. 256K, 4M, auto)", name, value);
    *out = parsed;
    return SWY_OK;
}

swy_status_t swy_sched_configure(swy_sched_t *s, const char *name,
                                 const char *value)
{
    swy_status_t status = SWY_OK;
    size_t size = 0;
    pthread_mutex_lock(&s->lock);
    if (!swy_list_empty(&s->ops)) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "cannot change %s "
                             "while operations are in flight: wait for them "
                             "first", name);
    } else if (strcmp(name, "SWY_POLICY") == 0) {
        swy_policy_t fresh;
        status = swy_policy_load(value, s->p.rank, s->p.nranks, &fresh);
        if (status == SWY_OK) {
            swy_policy_unload(&s->policy);
            s->policy = fresh;
        }
    } else if (strcmp(name, "SWY_PARTITION_BYTES") == 0) {
        status = parse_size_setting(name, value, s->auto_partition_bytes,
                                    &size);
        if (status == SWY_OK) {
            s->p.partition_bytes = size;
            s->partition_auto = strcmp(value, "auto") == 0;
            if (s->credit_auto)
                s->credit_bytes = size;
        }
    } else if (strcmp(name, "SWY_CREDIT_BYTES") == 0) {
        status = parse_size_setting(name, value, s->p.partition_bytes, &size);
        if (status == SWY_OK) {
            s->credit_auto = strcmp(value, "auto") == 0;
            s->credit_bytes = size;
        }
    } else if (strcmp(name, "SWY_WINDOW_BYTES") == 0) {
        status = parse_size_setting(name, value, 8u << 20, &size);
        if (status == SWY_OK)
            s->p.window_bytes = size;
    } else {
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "%s cannot be "
                             "changed on a communicator (SWY_POLICY, "
                             "SWY_PARTITION_BYTES, SWY_CREDIT_BYTES and "
                             "SWY_WINDOW_BYTES can)", name);
    }
    pthread_mutex_unlock(&s->lock);
    return status;
}

swy_status_t swy_sched_query(swy_sched_t *s, const char *name, char *buf,
                             size_t len)
{
    swy_status_t status = SWY_OK;
    pthread_mutex_lock(&s->lock);
    if (strcmp(name, "SWY_POLICY") == 0)
        snprintf(buf, len, "%s", s->policy.ops->name);
    else if (strcmp(name, "SWY_PARTITION_BYTES") == 0)
        snprintf(buf, len, "%zu", s->p.partition_bytes);
    else if (strcmp(name, "SWY_CREDIT_BYTES") == 0)
        snprintf(buf, len, "%zu", s->credit_bytes);
    else if (strcmp(name, "SWY_WINDOW_BYTES") == 0)
        snprintf(buf, len, "%zu", s->p.window_bytes);
    else if (strcmp(name, "SWY_PROGRESS") == 0)
        snprintf(buf, len, "%s", s->threaded ? "thread" : "caller");
    else
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "unknown setting "
                             "%s", name);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_set_auto_partition(swy_sched_t *s, size_t bytes)
{
    pthread_mutex_lock(&s->lock);
    s->auto_partition_bytes = bytes;
    if (s->partition_auto) {
        s->p.partition_bytes = bytes;
        if (s->credit_auto)
            s->credit_bytes = bytes;
    }
    pthread_mutex_unlock(&s->lock);
}

const char *swy_sched_policy_name(const swy_sched_t *s)
{
    return s->policy.ops->name;
}

size_t swy_sched_partition_bytes(const swy_sched_t *s)
{
    return s->p.partition_bytes;
}
