/* lib/sched internal: what the engine's files share (sched.h says what
 * the engine does). The engine is split by job:
 *   engine.c   the engine and its communicator views: create, destroy,
 *              settings, counters
 *   op.c       ops and micro-ops: post, completion, failure of one op,
 *              the caller's test/wait/release
 *   stream.c   ops on the caller's stream: the device's callback when the
 *              stream reaches them, the gate that holds the stream's later
 *              work, and their start
 *   link.c     one ready queue per peer process, ordered and admitted by
 *              the policy (policy.c), and issue to the transports
 *   header.c   the wire tag and the op header protocol (agreement between
 *              ranks, confirmation that a peer posted an op)
 *   p2p.c      sends and receives: the ordered pair's sequence, receives
 *              from any source
 *   failure.c  a communicator's failure, the control plane's news,
 *              quiescence after a failure, deadlines
 *   progress.c progress passes, the progress thread and its parking,
 *              waiting callers
 *   lane.c     device collectives the plugin runs (swy_devcoll_v1): per
 *              communicator and priority class, the launches in op
 *              order, admitted by the policy and handed to the plugin
 * Locking: one mutex per engine (swy_sched_t.lock); every function here
 * runs under it unless it says otherwise. */
#ifndef SWY_SCHED_ENGINE_IMPL_H
#define SWY_SCHED_ENGINE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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
 * costs every large op a message latency, a large share of its time
 * where ranks share cores.) Sends up to the eager size are small enough
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
/* How long a transport's error waits for the control plane to say why
 * (swy_sched_op_error). */
#define TRANSPORT_CAUSE_WAIT_S 1.0
#define UNCONFIRMED_MIN_BYTES 8192
#define UNCONFIRMED_PARTITIONS 2
/* Freed micro-ops kept for the next ops: an alltoallv allocates a
 * micro-op per peer and direction at least, and for small ops malloc and
 * free showed up in profiles as a visible share of the op (see
 * docs/performance.md, "overhead"). */
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
 * the grace's end. Waking the thread at each such post, or looking
 * every few ms instead of parking, costs context switches that busy
 * cores feel as a slower op (docs/performance.md, "coll"). A blocking
 * call waits at once and needs no thread. */
#define PARK_NS (20 * 1000 * 1000)

typedef struct swy_uop {
    swy_list_t op_link; /* op->uops, or sched->detached */
    swy_list_t q_link;  /* a link's ready queue, or sched->completed */
    struct swy_request *op; /* NULL once detached from a failed op */
    swy_sched_t *sched;
    swy_coll_xfer_t x;   /* x.peer: a rank of the op's communicator */
    int lpeer;           /* the engine peer (link) of x.peer */
    uint64_t wire_tag;   /* what the transports match on */
    uint64_t emit_index; /* submission order within the scheduler */
    uint64_t ready_ns, posted_ns;
    int prio;            /* its op's, kept for accounting once detached */
    uint32_t seq;
    uint64_t fair_key;   /* start tag (bytes) for fair sharing of a link */
    uint8_t is_header, state, waited_behind_lower;
    uint8_t probe;       /* a receive from any source's header receive
                            (p2p.c); seq: the pair's it listens at */
    uint8_t unconfirmed; /* issued before the peer posted its op */
    uint8_t issued_early; /* was, when issued (traced as "send_early") */
    uint8_t fair_keyed;  /* fair_key assigned (swy_sched_ready_insert) */
    uint8_t hints;       /* SWY_SEND_HINT_* it was sent with (traced) */
    uint8_t send_cancelled; /* failing: 1 cancelled once its peer
                               quiesced, 2 given up on (SEND_SETTLE_S) */
    double cancel_s;        /* when */
    swy_transport_t *tp;
    void *handle;
    swy_status_t status;
    size_t bytes_done;
} swy_uop_t;

/* A launch: one partition of an offloaded op (lib/coll/offload.c), a
 * group of plugin calls. READY in its lane's class queue, POSTED (in
 * sched->launched) from its hand-over to the plugin until the plugin's
 * done, which a thread of the plugin's reports by setting done (atomic)
 * and waking the engine. A launch whose op failed is detached (op NULL)
 * and freed when its done comes. */
typedef struct swy_launch {
    swy_list_t q_link;  /* lane->queue[cls], then sched->launched */
    swy_list_t op_link; /* op->launches */
    struct swy_request *op;
    swy_sched_t *sched;
    swy_sched_comm_t *comm;
    int cls, index, ncalls, prio;
    uint32_t seq;
    uint8_t state;      /* UOP_READY, UOP_POSTED */
    int done;           /* atomic */
    swy_status_t status; /* the plugin's, written before done */
    size_t bytes;
    uint64_t ready_index, ready_ns, posted_ns;
    const swy_devcoll_call_v1_t *calls; /* the op's plan */
} swy_launch_t;

#define PRIO_SLOTS 8

/* Bytes (or ops) per priority value; a handful of distinct priorities is
 * the norm, so a tiny array beats a map. When full, a new priority shares
 * the slot of the nearest one (accounting stays conservative). */
typedef struct {
    int prio[PRIO_SLOTS];
    size_t amount[PRIO_SLOTS];
} prio_tally_t;

/* Priority classes of the plugin's communicators: each has its own
 * communicator and stream; a launch goes to its op's class. */
enum { LANE_LOW = 0, LANE_HIGH = 1, LANE_NCLASSES = 2 };

/* A view's device lane: the plugin's communicators, made on the first
 * offloaded op (swy_sched_lane_attach), and the launches not yet handed
 * over, in op order then partition order (the order every rank gives
 * the plugin, so that a communicator's launches match across ranks). */
typedef struct {
    void *dcomm[LANE_NCLASSES];
    swy_list_t queue[LANE_NCLASSES];
    /* This view's launches with the plugin (lane_admit) */
    prio_tally_t inflight_by_prio;
    size_t inflight_by_class[LANE_NCLASSES];
    int aborted;        /* the plugin's communicators were given up */
    char why[SWY_ERRMSG_MAX];
} swy_lane_t;

struct swy_request {
    swy_list_t link;  /* sched->ops, in post order over every view */
    swy_list_t clink; /* comm->ops */
    swy_sched_t *sched;
    swy_sched_comm_t *comm;
    uint32_t seq;  /* the view's (or the ordered pair's, for p2p) */
    uint32_t eseq; /* the engine's post order (policies' op_seq) */
    uint8_t p2p;   /* SWY_COLL_SEND or RECV */
    /* Receives (p2p.c): from any source and not yet matched (p2p_wild,
     * args.root SWY_ANY_SOURCE), with n_probes header receives posted;
     * waiting behind such a receive for its pair's sequence (p2p_blocked,
     * in comm->p2p_blocked by plink); its peer's header already in
     * hdr_in (p2p_early: it came to a probe). Under SWY_P2P_MATCH=tag
     * every receive waits for a send with its tag (p2p_listen, in
     * comm->p2p_listening by plink) instead. */
    uint8_t p2p_wild, p2p_blocked, p2p_early, p2p_listen;
    int n_probes;
    swy_list_t plink;
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
    swy_list_t launches; /* an offloaded op's (swy_launch_t.op_link) */
    size_t lane_inflight; /* bytes of its launches with the plugin */
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
    int deferred_peer; /* peer whose data disagreed before the headers */
    /* The chunks of one swy_alltoallv_chunks share the id (unique in the
     * communicator; 0: a lone op). The first chunk (series_head)
     * exchanges the headers for all of them: the others start with its
     * hdr_seen and hear of each header from it (header.c, confirm_peer). */
    uint32_t series;
    uint8_t series_head;
    /* A series on a stream starts when the stream gets there: every chunk
     * knows its head (which starts first and exchanges the headers), and
     * the head keeps the chunks until then (its series header sums
     * them). */
    struct swy_request *series_head_op;
    struct swy_request **series_chunks;
    int series_n;
    uint8_t held;           /* a chunk not released: not started */
    /* An offloaded send or recv of a group (args.lane_group): lane_hold
     * keeps its launch in its lane until the group ends (to be merged
     * with the group's others). pins > 0 keeps the op allocated even if
     * it fails and is released meanwhile: one from its group (whose
     * list points at it) until swy_sched_lane_group_end. */
    uint8_t lane_hold;
    int pins;
    /* An op of device memory ordered on the caller's stream
     * (swy_sched_post_on_stream): held until the work queued on the
     * stream before the post has finished, which the device's callback
     * says by setting stream_ready (from a thread of its own: atomic);
     * on_stream until the engine took note of it (the op's memory stays
     * until then: the callback writes into it); gate holds the stream's
     * later work until the op completes. */
    uint8_t on_stream;
    int stream_ready;
    struct swy_stream_gate *gate;
    swy_list_t slink; /* sched->stream_ops while on_stream */
    int completed, released;
    int failing;    /* failed; completes once its buffers are free */
    int in_handler; /* handle_completion frees it (released) at its end */
    double fail_s;           /* when it failed */
    double release_deadline; /* failing: give up waiting for receivers */
    swy_status_t status;
    char errmsg[SWY_ERRMSG_MAX];
    double deadline;
};

/* A gate on a stream (the device's stream_gate) shared by the ops of one
 * swy_sched_stream_order: opened when the last of them completed. */
typedef struct swy_stream_gate {
    void *gate;  /* the device's; NULL when it could not be made */
    int pending; /* atomic: ops not yet completed, + 1 while set up */
} swy_stream_gate_t;

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
    swy_boot_t *boot; /* its own control plane, or NULL (the engine's) */
    int multi_host; /* some member is on another host than this rank */
    /* [nranks]: each rank's host, numbered 0.. in the order the hosts
     * first appear among the ranks (the same on every member), or NULL
     * when the engine was not told the hosts (coll.h, args.host_of). */
    int *host_of;
    uint32_t next_seq;
    uint32_t next_series; /* id of the next swy_alltoallv_chunks */
    uint32_t *p2p_send_seq, *p2p_recv_seq; /* [nranks]: per ordered pair */
    /* Receives from any source (p2p.c): the one being matched (until its
     * probes are done), the receives posted after it (op->plink), and
     * the headers its probes caught for later receives. */
    struct swy_request *wild_op;
    swy_list_t p2p_blocked;
    swy_list_t early_headers;
    /* SWY_P2P_MATCH=tag: the receives not yet matched, in post order. */
    swy_list_t p2p_listening;
    swy_list_t ops; /* incomplete ops in post order (op->clink) */
    swy_lane_t *lane; /* NULL until its first offloaded op */
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
    int host;      /* its host's index, alike on every rank; -1: unknown */
    size_t burst_bytes; /* swy_sched_params_t.peer_burst_bytes */
} swy_link_t;

struct swy_sched {
    pthread_mutex_t lock;
    swy_sched_params_t p;
    swy_link_t *links;
    swy_list_t ops, completed, detached;
    swy_list_t stream_ops; /* ops waiting for their stream (op->slink) */
    int n_stream_ops;
    /* Device lanes (lane.c): launches queued in some view, those with
     * the plugin, and the bytes of those by priority. */
    int n_lane_queued;
    swy_list_t launched;
    int n_launched;
    prio_tally_t lane_inflight_by_prio;
    uint64_t next_launch_index;
    swy_list_t uop_pool; /* freed micro-ops kept for reuse (UOP_POOL_MAX) */
    int uop_pool_len;
    swy_list_t comms;      /* every view (swy_sched_comm_t.link) */
    swy_sched_comm_t *world;
    uint32_t next_eseq;
    uint64_t next_emit;
    int n_failed_views;    /* views that failed and are still alive */
    int own_boot_views;    /* views with a control plane of their own */
    /* ids of views gone, not handed out again before the others were */
    uint64_t retired_ids[SWY_SCHED_COMM_IDS / 64];
    int job_failure_seen;  /* the control plane's failure was acted on */
    uint64_t comm_failures_seen; /* swy_boot_comm_failures() acted on */
    double next_gone_check;
    double next_deadline_check;
    int phase;
    swy_comm_stats_t stats;
    swy_policy_t policy;
    size_t credit_bytes;
    int credit_auto;             /* credit follows the partition size */
    int p2p_match_tag;           /* SWY_P2P_MATCH=tag (p2p.c) */
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
     * checks use it (reading the clock at each of those was a large share
     * of a small op's profile). */
    uint64_t now_ns;
    pthread_t thread;
    /* The thread parks in thread_park() on park_fd (thread_unpark writes
     * it) and timer_fd (arm_handoff sets it), both under s->lock. */
    int park_fd, timer_fd;
    uint8_t thread_parked, timer_armed;
    int wake_fd;
};

static inline void tally_add(prio_tally_t *t, int prio, size_t amount)
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

static inline void tally_sub(prio_tally_t *t, int prio, size_t amount)
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
static inline size_t tally_sum(const prio_tally_t *t, int prio, int le)
{
    size_t sum = 0;
    for (int i = 0; i < PRIO_SLOTS; i++)
        if ((t->prio[i] <= prio) == le)
            sum += t->amount[i];
    return sum;
}

/* The op's name for messages: the caller's label, or its kind. */
static inline const char *op_label(const struct swy_request *op)
{
    return op->name[0] ? op->name : swy_coll_kind_name(op->args.kind);
}

static inline int op_alive(const struct swy_request *op)
{
    return !op->completed && !op->failing;
}

/* ---- shared between the engine's files (all under s->lock) ---------- */

/* header.c: the wire tag of a transfer of op; the header protocol. */
uint64_t swy_sched_wire_tag(const struct swy_request *op,
                            const swy_coll_xfer_t *x);
/* The tag of a send's header to its receiver at the pair's seq. */
uint64_t swy_sched_p2p_header_tag(const swy_sched_comm_t *c, uint32_t seq);
/* op's header from peer (bytes long) is in op->hdr_in[peer]. */
void swy_sched_handle_header(struct swy_request *op, int peer, size_t bytes);

/* Fill the series fields of the header to peer of a series' head,
 * chunks[0], from its n chunks. */
void swy_sched_series_header(struct swy_request *const *chunks, int n,
                             int peer);
void swy_sched_data_size_mismatch(struct swy_request *op, swy_uop_t *uop);

/* op.c: ops and micro-ops. */
void swy_sched_uop_complete_cb(void *arg, swy_status_t status, size_t bytes);
void swy_sched_op_fail(struct swy_request *op, swy_status_t status,
                       const char *msg);
void swy_sched_op_drain(struct swy_request *op, int force);
void swy_sched_op_error(struct swy_request *op, swy_status_t status,
                        const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define op_error swy_sched_op_error /* fails op, logging the cause */
void swy_sched_handle_completion(swy_sched_t *s, swy_uop_t *uop);
swy_uop_t *swy_sched_uop_new(struct swy_request *op,
                             const swy_coll_xfer_t *x, int is_header);
swy_status_t swy_sched_uop_post_recv(swy_uop_t *uop);
/* A lone op's header exchange, then its algorithm's start. */
void swy_sched_op_begin(struct swy_request *op);
/* Free an op with its arrays (not in any list). */
void swy_sched_op_free(struct swy_request *op);
#define op_free swy_sched_op_free
/* The op's header exchange with its header peers; for a chunk of a series
 * (chunks[0..n-1]) other than its head, the head's view of it. */
void swy_sched_op_headers(struct swy_request *op,
                          struct swy_request *const *chunks, int n);
#define op_headers swy_sched_op_headers
/* The algorithm starts the op: its first micro-ops go out. */
void swy_sched_op_run(struct swy_request *op);
#define op_run swy_sched_op_run

/* stream.c: ops on the caller's stream. */
/* One op's share of its batch's gate gone (it completed, or the set-up is
 * done): the last one opens the gate. */
void swy_sched_gate_share_drop(swy_stream_gate_t *g);
#define gate_share_drop swy_sched_gate_share_drop
/* Under s->lock: start the ops whose stream got to them (start = 0: only
 * note that their callbacks came, as the engine goes away); returns how
 * many. */
int swy_sched_stream_ops_poll(swy_sched_t *s, int start);

/* p2p.c: sends and receives: the pair's sequence, receives from any
 * source. */
/* In op_admit: the op's sequence, or blocked (a receive from any source,
 * or one behind it: its sequence comes when it starts). */
void swy_sched_p2p_admit(struct swy_request *op);
/* In op_start, for a blocked receive: it waits its turn (and may begin
 * at once). */
void swy_sched_p2p_start_blocked(struct swy_request *op);
/* A send to this rank (at seq, with tag) was posted: it may match a
 * receive from any source, or under SWY_P2P_MATCH=tag any receive. */
void swy_sched_p2p_self_sent(swy_sched_comm_t *c, uint32_t seq,
                             uint32_t tag);
/* A probe's completion (op alive). */
void swy_sched_p2p_probe_done(struct swy_request *op, swy_uop_t *uop);
/* Is op's header from peer already here (caught by a probe)? If so it
 * is now in hdr_in, and no later call finds it. */
int swy_sched_p2p_take_early_header(struct swy_request *op, int peer);
/* Under s->lock: one pin of op (pins) less; with none left it is freed
 * if it completed and its caller released it. */
void swy_sched_op_unpin(struct swy_request *op);
/* op completes: it leaves the view's receive bookkeeping. */
void swy_sched_p2p_op_gone(struct swy_request *op);
/* The view goes: the headers nobody received. */
void swy_sched_p2p_free(swy_sched_comm_t *c);

/* link.c: per-link ready queues, in the policy's order, and issue. */
void swy_sched_ready_insert(swy_sched_t *s, swy_uop_t *uop);
void swy_sched_link_account(swy_sched_t *s, swy_uop_t *uop, int sign);
int swy_sched_issue_all(swy_sched_t *s);
/* The policies' oldest op of a view (swy_policy_link_v1_t.oldest_op_seq):
 * its oldest incomplete op but receives. A receive sends no data, so
 * holding later ops behind it orders nothing on the wire; and as ranks
 * post their receives and sends in orders of their own, a send held
 * behind a receive whose send is held behind a receive on the peer would
 * wait forever (fifo did, for any receive posted before a send). */
uint32_t swy_sched_oldest_op(const swy_sched_comm_t *c);

/* op.c: after one of an op's micro-ops or launches completed (in_handler
 * set): finish the op when nothing of it is left, free it when the
 * caller released it. */
void swy_sched_op_settle(struct swy_request *op);

/* lane.c: device lanes. */
/* The class (LANE_HIGH, LANE_LOW) of an offloaded op of that priority. */
int swy_sched_lane_class(int priority);
void swy_sched_lane_enqueue(struct swy_request *op);
int swy_sched_lane_issue(swy_sched_t *s);
int swy_sched_lane_poll(swy_sched_t *s);
/* The op failed: drop its queued launches; give up the plugin's
 * communicators if some are with it. */
void swy_sched_lane_op_failed(struct swy_request *op);
/* Has the op launches with the plugin? */
int swy_sched_lane_busy(const struct swy_request *op);
/* Before the view is freed: its launches done, its communicators gone. */
void swy_sched_lane_free(swy_sched_comm_t *c);

/* failure.c: failures, quiescence, deadlines. */
void swy_sched_check_control_plane(swy_sched_t *s, double now);
void swy_sched_check_deadlines(swy_sched_t *s, double now);
void swy_sched_progress_failing(swy_sched_t *s);

/* progress.c: progress passes, the progress thread, waiting. */
int swy_sched_progress_locked(swy_sched_t *s);
void *swy_sched_progress_thread_main(void *arg);
void swy_sched_wait_until(swy_sched_t *s, int (*done)(void *), void *arg,
                          double give_up);

#endif
