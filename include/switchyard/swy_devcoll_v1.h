/**
 * @file swy_devcoll_v1.h
 * @brief Collectives on device memory that a transport plugin may run on
 *        a partition, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_devcoll_v2.h) with a new symbol.
 *
 * A plugin whose library runs collectives on device memory (NCCL) exports
 * `const swy_devcoll_v1_t swy_devcoll_plugin_v1` next to
 * swy_device_plugin_v1. Switchyard then cuts a device allreduce,
 * reduce_scatter, allgather, allgatherv, broadcast, reduce, gather,
 * scatter or alltoallv into partitions and
 * hands each partition to the plugin as one launch: a group of calls
 * (ncclGroupStart, the calls, ncclGroupEnd) on the plugin communicator
 * of the op's priority class, on that communicator's stream. Switchyard
 * decides what is launched and when (its policy: lina holds low-priority
 * partitions while high priority is pending); the plugin moves and
 * reduces the data on the device. No host staging, no host reduction.
 *
 * Ordering: on one plugin communicator the launches come in the same
 * order on every rank (Switchyard keeps, per communicator and class, the
 * op order and the partition order); launches of different classes are
 * on different communicators and streams and may interleave differently
 * on different ranks. The exception are the caller's sends and receives
 * (swy_send, swy_recv): a launch of SEND and RECV calls only, which
 * only the ranks it names make, each in its order of posting, as
 * ncclSend and ncclRecv are called; it meets its peers' calls as NCCL's
 * do.
 *
 * Threading: unique_id, comm_init and comm_destroy are called by one
 * thread of a rank at a time per communicator; launch and comm_abort may
 * come from any thread and must be thread-safe; done callbacks run on a
 * thread of the plugin's.
 */
#ifndef SWY_DEVCOLL_V1_H
#define SWY_DEVCOLL_V1_H

#include <stddef.h>
#include <stdint.h>

#include "swy_transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_DEVCOLL_ABI_V1 1u
#define SWY_DEVCOLL_PLUGIN_SYMBOL_V1 "swy_devcoll_plugin_v1"
/** Largest unique id a plugin may use (NCCL_UNIQUE_ID_BYTES is 128). */
#define SWY_DEVCOLL_ID_MAX 128

/** What one call of a launch does, as the NCCL call of the same name. */
typedef enum {
    SWY_DEVCOLL_ALLREDUCE = 1, /**< sendbuf, recvbuf, count, dtype, redop */
    SWY_DEVCOLL_REDUCE = 2,    /**< + root; recvbuf is read at root only */
    SWY_DEVCOLL_BROADCAST = 3, /**< root; sendbuf at root only; recvbuf */
    SWY_DEVCOLL_SEND = 4,      /**< sendbuf, count, dtype to rank root */
    SWY_DEVCOLL_RECV = 5       /**< recvbuf, count, dtype from rank root */
} swy_devcoll_kind_t;

/** One call, an element of the array launch() takes: its layout is
 *  fixed within v1 (it is the array's stride), so it carries no
 *  struct_size; a call of another layout comes with a new launch entry
 *  appended to swy_devcoll_v1_t. Buffers are device memory; count is in
 *  elements. For SEND and RECV, root is the peer (it may be the calling rank itself: the
 *  pair of calls then copies on the device). Within a launch, the SENDs
 *  and RECVs of one ordered pair match in the order of the calls. */
typedef struct {
    int32_t kind;  /**< swy_devcoll_kind_t */
    int32_t root;  /**< REDUCE, BROADCAST: root; SEND, RECV: peer */
    swy_dtype_t dtype;
    swy_redop_t redop; /**< ALLREDUCE, REDUCE */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
} swy_devcoll_call_v1_t;

/** A launch is complete (status SWY_OK: its results are in device memory
 *  and the plugin touches none of its buffers any more), or failed. */
typedef void (*swy_devcoll_done_cb_v1_t)(void *arg, swy_status_t status);

typedef struct swy_devcoll_v1 {
    uint32_t abi_version; /**< SWY_DEVCOLL_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_devcoll_v1_t) */
    const char *name;     /**< e.g. "nccl" */
    /** Bytes of a unique id, at most SWY_DEVCOLL_ID_MAX. */
    size_t id_bytes;

    /** Make a new unique id (id_bytes into id). One rank calls it and
     *  passes the id to the others over Switchyard's control plane. */
    swy_status_t (*unique_id)(void *id);

    /** Collective over the nranks processes that pass the same id (as
     *  ncclCommInitRank): a communicator whose launches run in order on a
     *  stream of its own, of the CUDA stream priority that suits
     *  priority (SWY_PRIO_*). Returns once every rank joined, or fails
     *  after timeout_s. */
    swy_status_t (*comm_init)(const void *id, int nranks, int rank,
                              int priority, double timeout_s, void **comm_p);

    /** Free a communicator: every launch's done came (or comm_abort
     *  returned). */
    void (*comm_destroy)(void *comm);

    /** Give up (as ncclCommAbort): launches in flight end promptly with
     *  their done called with an error status, whether from here or
     *  from the plugin's thread; after comm_abort returns no launch
     *  touches its buffers, and the communicator takes no new launch. */
    void (*comm_abort)(void *comm);

    /** Enqueue calls[0..ncalls-1] as one group on comm's stream, then
     *  done(arg, status) once, from a thread of the plugin's (never
     *  inside launch), when they complete or fail. done only tells the
     *  host: it must not call this table or block. An error return
     *  (SWY_ERR_INVALID_ARG, SWY_ERR_ABORTED, SWY_ERR_TRANSPORT, ...)
     *  means nothing was enqueued and done will not be called. The
     *  plugin reads calls during launch only. */
    swy_status_t (*launch)(void *comm, const swy_devcoll_call_v1_t *calls,
                           int ncalls, swy_devcoll_done_cb_v1_t done,
                           void *arg);

    /** Text of the last failure of a function above on the calling
     *  thread; never NULL. */
    const char *(*error_string)(void);

    /** Optional (NULL: the host makes a sub-communicator's own, with
     *  unique_id and comm_init, at its first offloaded op). As
     *  ncclCommSplit: collective over every rank of parent, each calling
     *  it once per split, in the same order; the ranks that pass the same
     *  color >= 0 form a communicator, ordered by key then by their rank
     *  in parent, its stream of the priority that suits priority; a
     *  color < 0 gives *comm_p = NULL. Launches may be running on parent
     *  meanwhile (from another thread). */
    swy_status_t (*comm_split)(void *parent, int color, int key,
                               int priority, double timeout_s,
                               void **comm_p);
} swy_devcoll_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_DEVCOLL_V1_H */
