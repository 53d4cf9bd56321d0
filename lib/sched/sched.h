/* lib/sched: the process's engine. Micro-ops, one ready queue per peer
 * process (link) shared by every communicator of the process, the policy
 * that orders and admits them (policy.c: fifo, fair, lina, credit, or a
 * swy_policy_v1 plugin), the progress engine (caller-driven or a progress
 * thread), and failure/timeout handling for in-flight ops.
 *
 * A posted collective becomes a request (struct swy_request) on one
 * communicator's view of the engine: its algorithm (lib/coll) emits
 * transfers, each a micro-op. Receives are posted to the transport at
 * once (receives early); sends wait in the ready queue of their peer link
 * in the policy's order and leave when the policy admits them
 * (sender-driven). Tags carry (communicator, op sequence, step, chunk), so
 * different ops may interleave differently on different ranks. Each op
 * first exchanges a small header with its peers (header.c): it detects
 * ranks that disagree, and tells a sender when its peer has posted the
 * op, which keeps every policy free of deadlock. The files: engine_impl.h.
 *
 * Locking: one mutex per engine; every entry point takes it. */
#ifndef SWY_SCHED_SCHED_H
#define SWY_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "boot/boot.h"
#include "coll/coll.h"
#include "transport/transport.h"

typedef struct swy_sched swy_sched_t;
/* A communicator's view of the engine: its ranks mapped onto the
 * engine's peers, its own op sequence (in every wire tag, with its id),
 * and its own failure state. The engine (swy_sched_t: one per process's
 * transports, progress thread, policy, and one ready queue per peer
 * process) orders the micro-ops of every view on a link together. */
typedef struct swy_sched_comm swy_sched_comm_t;

/* Communicator ids ride in wire tags: SWY_SCHED_COMM_ID_BITS of them.
 * Id 0 is the view the engine was made for (swy_comm_init_*). */
#define SWY_SCHED_COMM_ID_BITS 9
#define SWY_SCHED_COMM_IDS (1u << SWY_SCHED_COMM_ID_BITS)

typedef struct {
    int rank, nranks;
    swy_transport_set_t *transports; /* borrowed */
    swy_boot_t *boot;                /* borrowed */
    size_t partition_bytes;
    size_t window_bytes;
    double timeout_s;
    double spin_s; /* poll this long before sleeping on event fds */
    void *owner;   /* the communicator, for swy_sched_owner() */
    const char *policy;     /* SWY_POLICY: built-in or plugin name */
    size_t credit_bytes;    /* SWY_CREDIT_BYTES (0: one partition) */
    int progress_thread;    /* SWY_PROGRESS=thread */
    int p2p_match_tag;      /* SWY_P2P_MATCH=tag */
    size_t auto_partition_bytes; /* what SWY_PARTITION_BYTES=auto means */
    int partition_set; /* the user set SWY_PARTITION_BYTES (not auto) */
    /* [nranks]: 1 for a peer on another host. Every link to another host
     * leaves through this host's network uplink, so the policies see the
     * bytes in flight on all of them together (swy_policy_link_v1_t's
     * uplink_* fields). NULL: no peer is remote. Borrowed for create. */
    const uint8_t *peer_remote;
    /* [nranks]: the index of each peer's host, the same on every rank
     * (lib/topo's node index), for the node-aware algorithms; NULL: not
     * known (they then give way to the flat ones). Borrowed for create. */
    const int *peer_host;
    /* [nranks]: about 4 ms of the link to each peer at its own bandwidth
     * (swy_policy_link_v1_t.burst_bytes). NULL: the window. Borrowed. */
    const size_t *peer_burst_bytes;
    /* The comm's shared-memory channel (coll.h), or NULL; borrowed for
     * the scheduler's life. */
    struct swy_coll_shm *shm;
    struct swy_coll_shm *shm_a2a; /* the alltoallv channel, or NULL */
} swy_sched_params_t;

swy_status_t swy_sched_create(const swy_sched_params_t *params,
                              swy_sched_t **sched_p);

typedef struct {
    uint32_t id;      /* < SWY_SCHED_COMM_IDS, unique among the live views
                         of every member process (agreed at the split) */
    uint64_t key;     /* job-wide name for scoped failures (boot) */
    int rank, nranks; /* this process's rank in the view, its size */
    const int *peers; /* [nranks]: the engine peer of each rank (copied) */
    void *owner;      /* the communicator, for swy_sched_owner() */
    struct swy_coll_shm *shm, *shm_a2a; /* its channels, or NULL */
    /* A communicator with a rendezvous of its own (swy_comm_init_rank on
     * processes the engine already reaches): its failures are that control
     * plane's job failures, both ways. NULL: the engine's, scoped by key.
     * Borrowed until swy_sched_comm_destroy. */
    swy_boot_t *boot;
} swy_sched_comm_params_t;

/* The view the engine was created for (id 0, every engine peer in
 * order): made by swy_sched_create. */
swy_sched_comm_t *swy_sched_world(swy_sched_t *sched);
/* A further view on the engine (swy_comm_split). */
swy_status_t swy_sched_comm_create(swy_sched_t *sched,
                                   const swy_sched_comm_params_t *params,
                                   swy_sched_comm_t **comm_p);
/* Forget a view once its ops are drained (or failed); NULL ok. Not the
 * world view, which goes with the engine. */
void swy_sched_comm_destroy(swy_sched_comm_t *comm);
swy_sched_t *swy_sched_of(const swy_sched_comm_t *comm);
uint32_t swy_sched_comm_id(const swy_sched_comm_t *comm);
/* The ids in use by live views of this engine: bit i of used[i / 64]. */
void swy_sched_comm_ids(swy_sched_t *sched,
                        uint64_t used[SWY_SCHED_COMM_IDS / 64]);

/* Fail every in-flight op of the view with status/msg (local only). */
void swy_sched_fail_all(swy_sched_comm_t *comm, swy_status_t status,
                        const char *msg);
/* Progress until every op of the view (freed-but-running ones included)
 * completed, or the view failed, or timeout_s passed (SWY_ERR_TIMEOUT). */
swy_status_t swy_sched_drain(swy_sched_comm_t *comm, double timeout_s);
/* The caller posted an op that it will not wait for at once (a
 * non-blocking call): a progress thread parked while callers waited
 * takes over after the hand-off grace instead of at its next look. */
void swy_sched_handoff(swy_sched_t *sched);
/* Threads the engine runs (the progress thread, when there is one). */
int swy_sched_threads(const swy_sched_t *sched);
/* Stop the progress thread (if any); call before the transports are
 * finalized. NULL ok. */
void swy_sched_stop(swy_sched_t *sched);
/* Change SWY_POLICY, SWY_PARTITION_BYTES, SWY_CREDIT_BYTES or
 * SWY_WINDOW_BYTES while no op is in flight; read them back. */
swy_status_t swy_sched_configure(swy_sched_t *sched, const char *name,
                                 const char *value);
swy_status_t swy_sched_query(swy_sched_t *sched, const char *name, char *buf,
                             size_t len);
/* The link model changed (SWY_TOPO_PROBE): what "auto" means now; applied
 * at once unless the user set a partition size. Same on every rank. */
void swy_sched_set_auto_partition(swy_sched_t *sched, size_t bytes);
/* Name of the policy in use. */
const char *swy_sched_policy_name(const swy_sched_t *sched);
/* Free everything; call after the transports were finalized. NULL ok. */
void swy_sched_destroy(swy_sched_t *sched);

/* Post a collective (or a send/recv, SWY_COLL_SEND/RECV: those take the
 * sequence of their ordered pair, so they match in posting order per
 * pair and need not be posted in the same order on every rank) on a
 * view. args' count arrays are copied. On failure *req_p is untouched
 * and the per-thread error message says why. */
swy_status_t swy_sched_post(swy_sched_comm_t *comm, const swy_coll_args_t *args,
                            int priority, int64_t order, const char *name,
                            struct swy_request **req_p);

/* As swy_sched_post, for an op of device memory to be ordered on a
 * CUDA stream (the device services' stream functions must be there:
 * swy_device_has_streams): posted, but held until swy_sched_stream_order
 * names it. */
swy_status_t swy_sched_post_on_stream(swy_sched_comm_t *comm,
                                      const swy_coll_args_t *args,
                                      int priority, int64_t order,
                                      const char *name,
                                      struct swy_request **req_p);
/* Order ops posted by swy_sched_post_on_stream on stream (NULL: the
 * legacy default stream), without blocking: they start when the work
 * queued on stream before this call has finished, all at once (a group's
 * sends and receives to each other), and the work queued after it waits
 * until every one of them completed. *gated_p = 0 when the device could
 * not hold the stream: the caller must then wait for the ops before it
 * queues more work on it. On failure the ops fail (their requests say
 * so) and the message says why. */
swy_status_t swy_sched_stream_order(struct swy_request *const *ops, int n,
                                    void *stream, int *gated_p);

/* Post n alltoallv ops (args[0..n-1], priority, order + j, "name[j/n]")
 * as the chunks of one series: only the first exchanges op headers, and
 * its header speaks for every chunk (their number, the counts summed and
 * a digest of each chunk's). With held, each chunk starts (reads its
 * send buffer, posts its receives) at swy_sched_release_held(reqs[j]). All
 * or nothing: on failure no chunk was posted. With on_stream (device
 * memory, not held), the chunks are held until swy_sched_stream_order
 * names them all: they start when the stream gets there, head first. */
swy_status_t swy_sched_post_series(swy_sched_comm_t *comm,
                                   const swy_coll_args_t *args, int n,
                                   int held, int on_stream, int priority,
                                   int64_t order, const char *name,
                                   struct swy_request **reqs);
/* Start a held chunk. SWY_ERR_INVALID_ARG (with a message) if
 * req is not a held chunk or was released already. */
swy_status_t swy_sched_release_held(struct swy_request *req);

swy_status_t swy_sched_test(struct swy_request *req, int *done_p);
swy_status_t swy_sched_wait(struct swy_request *req);
void swy_sched_release(struct swy_request *req);
/* The owner given in the params of the request's scheduler. */
void *swy_sched_owner(const struct swy_request *req);
/* A receive's source: its peer, the rank whose send a receive from any
 * source matched, or SWY_ANY_SOURCE while it has matched none; -1 for
 * another op. */
int swy_sched_source(struct swy_request *req);

/* swy_comm_abort of one view while the engine lives on for others: fail its ops here (SWY_ERR_ABORTED) and tell
 * its other ranks (SWY_ERR_REMOTE with why). */
void swy_sched_report_abort(swy_sched_comm_t *comm, const char *why);
/* The view's failure, if any (SWY_OK otherwise); msg may be NULL. */
swy_status_t swy_sched_failure(swy_sched_comm_t *comm, char *msg,
                               size_t len);
/* Fail the view (and tell its other ranks through boot if report: the
 * world view's failure is the job's, another view's is scoped to it). */
void swy_sched_fail_comm(swy_sched_comm_t *comm, swy_status_t status,
                         const char *msg, int report);

/* Device collectives the plugin runs (lib/coll/offload.c; lane.c): the
 * view's communicators of the plugin, one per class (dcomm[0] for
 * priorities up to SWY_PRIO_DEFAULT, dcomm[1] above), made by the caller
 * on every rank before its first offloaded op; the view owns them from
 * here on (SWY_ERR_INVALID_ARG if it has them already). Ops posted with
 * args.offload set need them. */
swy_status_t swy_sched_lane_attach(swy_sched_comm_t *comm,
                                   void *const dcomm[2]);
/* 1 when the view has the plugin's communicators, 0 when not. */
int swy_sched_lane_attached(swy_sched_comm_t *comm);
/* The view's plugin communicators (dcomm[0..1]) while they are usable:
 * 1, or 0 when it has none or gave them up. */
int swy_sched_lane_dcomms(swy_sched_comm_t *comm, void *dcomm[2]);
/* The priority (SWY_PRIO_*) a class's communicator is made with. */
int swy_sched_lane_class_priority(int cls);
/* A group (swy_group_start/end) ended: its offloaded sends and receives
 * ops[0..n-1] (posted with args.lane_group) may launch, those of one
 * view and class that are next to each other in its lane as one
 * launch. */
void swy_sched_lane_group_end(struct swy_request *const *ops, size_t n);

void swy_sched_phase_hint(swy_sched_t *sched, int phase);
void swy_sched_stats(swy_sched_t *sched, swy_comm_stats_t *stats);
size_t swy_sched_partition_bytes(const swy_sched_t *sched);

#endif
