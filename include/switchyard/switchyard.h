/**
 * @file switchyard.h
 * @brief Switchyard public API: communicators and NCCL-shaped collectives
 *        with priorities, for distributed Mixture-of-Experts training.
 *
 * Counts and displacements are in elements, as in MPI. Passing
 * `req == NULL` makes a collective blocking. All ranks of a communicator
 * must post the same collectives in the same order (as with NCCL); a
 * violation is detected and reported as SWY_ERR_MISMATCH on every rank.
 *
 * Thread safety: every call on a communicator may be made from any thread;
 * calls on one communicator are serialized internally. A request may be
 * tested or waited on by one thread at a time.
 *
 * Ownership: user buffers and count arrays are borrowed until the request
 * completes (count arrays are copied at post time, so they may be reused at
 * once). Requests are owned by the caller and released with
 * swy_request_free().
 *
 * Structs (here, in moe.h and in load.h): from 0.1.0 on, no field is
 * removed, reordered, retyped or given a new meaning; a struct only
 * grows at its end, by fields whose zero means what the struct meant
 * before, and each carries struct_size, which the library reads and
 * writes by the rule of swy_common.h (older and newer callers work).
 * Start each from its _INIT macro, or set struct_size to its sizeof.
 */
#ifndef SWITCHYARD_H
#define SWITCHYARD_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SWY_EXPORT __attribute__((visibility("default")))
#else
#define SWY_EXPORT
#endif

/** Status codes returned by every call. */
typedef enum {
    SWY_OK = 0,
    SWY_INPROGRESS = 1,
    SWY_ERR_INVALID_ARG = -1,
    SWY_ERR_NO_MEMORY = -2,
    SWY_ERR_UNSUPPORTED = -3,
    /** names the op and the silent peers; also every rank's error when a
     *  peer's control connection is silent longer than SWY_OUTAGE_S (a
     *  stopped process, a network outage; a shorter one is survived) */
    SWY_ERR_TIMEOUT = -4,
    SWY_ERR_REMOTE = -5,    /**< a peer died (its connection closed) or aborted */
    SWY_ERR_MISMATCH = -6,  /**< ranks disagree on op order, counts or dtype */
    SWY_ERR_TRANSPORT = -7,
    SWY_ERR_SYSTEM = -8,
    SWY_ERR_ABORTED = -9,
    SWY_ERR_INTERNAL = -10,
} swy_status_t;

typedef struct swy_comm *swy_comm_t;
typedef struct swy_request *swy_request_t;

/** Opaque job rendezvous token: root address plus job secret. */
typedef struct {
    unsigned char bytes[128];
} swy_unique_id_t;

typedef enum {
    SWY_INT8,
    SWY_UINT8,
    SWY_INT32,
    SWY_INT64,
    SWY_FLOAT16,
    SWY_BFLOAT16,
    SWY_FLOAT32,
    SWY_FLOAT64
} swy_dtype_t;

typedef enum { SWY_SUM, SWY_PROD, SWY_MAX, SWY_MIN, SWY_AVG } swy_redop_t;

enum { SWY_PRIO_LOW = 0, SWY_PRIO_DEFAULT = 50, SWY_PRIO_HIGH = 100 };

/** Per-operation attributes; pass NULL for the defaults. Start from
 *  SWY_OP_ATTR_INIT (it sets struct_size and every default) and change
 *  the fields wanted:
 *  @code
 *  swy_op_attr_t attr = SWY_OP_ATTR_INIT;
 *  attr.priority = SWY_PRIO_HIGH;
 *  @endcode
 *  An attr whose struct_size is 0 or below this struct's first release
 *  (one not made from SWY_OP_ATTR_INIT) is SWY_ERR_INVALID_ARG. Like
 *  every struct of this API it follows the struct_size rule of
 *  swy_common.h: one built against an older, smaller or a newer, larger
 *  swy_op_attr_t works. */
typedef struct {
    size_t struct_size; /**< sizeof(swy_op_attr_t), by SWY_OP_ATTR_INIT */
    int priority;  /**< higher first; default by op kind (a2a high,
                        allreduce low). Range 0..1000. Ranks may
                        differ, except for a device op the nccl
                        plugin runs: it goes to the plugin's
                        communicator of its class (above
                        SWY_PRIO_DEFAULT or not), which every rank
                        must agree on (else SWY_ERR_MISMATCH). */
    int64_t order; /**< tie-break within a priority, lower first
                        (e.g. layer index) */
    /** cudaStream_t that produced the device buffers (NULL: the legacy
     *  default stream). With device buffers the op is ordered on this
     *  stream, as NCCL's are: it reads sendbuf only after all work queued
     *  on the stream before the call, and work queued on the stream after
     *  the call waits until the op has completed (result in recvbuf).
     *  The post does not wait for the stream (a non-blocking call returns
     *  at once; a blocking one returns when the op completed), and
     *  swy_wait/swy_test still tell completion to the host. Ops on one
     *  stream therefore run one after another, as NCCL's do: sends and
     *  receives that need each other go in one swy_group_start/end,
     *  whose ops on a stream start together and hold the stream until
     *  all of them completed. Ops whose stream never gets to them fail
     *  with SWY_ERR_TIMEOUT (SWY_TIMEOUT_S), naming the stream. A stream
     *  that is being captured into a CUDA graph is SWY_ERR_UNSUPPORTED:
     *  the op runs from the host and cannot be captured. A blocking call
     *  on a stream whose earlier work waits for a later call of this
     *  thread cannot end: use a group. The chunks of one
     *  swy_alltoallv_chunks are ordered on the stream as one op: they
     *  start together and the stream's later work waits for all of
     *  them. Held chunks (SWY_CHUNKS_HELD, started by the caller), and
     *  device services without the stream functions (an older nccl
     *  plugin), wait for the stream instead: the post blocks the calling
     *  thread until the stream drains, and nothing is queued on it.
     *  Where the stream cannot be held (the nccl plugin under CUDA's
     *  lazy kernel loading: set CUDA_MODULE_LOADING=EAGER), the post
     *  (or swy_group_end) returns once the op completed. Under
     *  SWY_PROGRESS=caller the op moves only inside swy_test/swy_wait:
     *  wait for it there before waiting on the stream.
     *  With host buffers it is ignored. Without device services (no GPU,
     *  or the nccl plugin is not built) a non-NULL stream is
     *  SWY_ERR_UNSUPPORTED. */
    void *stream;
    const char *name; /**< label for traces and error messages; copied */
} swy_op_attr_t;

/** Initializer giving struct_size and every field its default. */
#define SWY_OP_ATTR_INIT {sizeof(swy_op_attr_t), -1, 0, NULL, NULL}

/**
 * @brief Human-readable name of a status code.
 * @return A static string; never NULL (unknown codes give "unknown status").
 */
SWY_EXPORT const char *swy_status_string(swy_status_t status);

/**
 * @brief Detail of the last failure.
 * @param comm The communicator, or NULL for the calling thread's last
 *             failure (e.g. of swy_comm_init_rank()).
 * @return A message naming the op, the peer and the values involved; an
 *         empty string when nothing failed. Valid until the next call on
 *         @p comm (or, for NULL, the next call from this thread).
 */
SWY_EXPORT const char *swy_last_error(swy_comm_t comm);

/**
 * @brief Bytes per element of a data type (SWY_FLOAT16: 2, SWY_FLOAT64: 8).
 * @return The size; 0 for a value that is not a swy_dtype_t, and then
 *         swy_last_error(NULL) names the value (SWY_ERR_INVALID_ARG). A
 *         non-zero size leaves swy_last_error(NULL) as it was.
 */
SWY_EXPORT size_t swy_dtype_size(swy_dtype_t dtype);

/**
 * @brief Read a size in bytes as the library reads its SWY_* size
 *        variables (SWY_PARTITION_BYTES=256K), so that programs and tools
 *        accept the same spellings.
 *
 * Digits, then an optional binary multiplier K, M or G (any case; 2^10,
 * 2^20, 2^30), then an optional "iB" or "B"; surrounding white space is
 * ignored. "4M", "4MiB", "4mb" and "4194304" are the same size. No sign,
 * fraction or exponent.
 *
 * @param text    The text to read; not modified.
 * @param bytes_p Receives the size; left untouched on failure.
 * @return SWY_OK; SWY_ERR_INVALID_ARG when text or bytes_p is NULL, text is
 *         not such a size, or the size does not fit a size_t (the message
 *         of swy_last_error(NULL) quotes the text).
 */
SWY_EXPORT swy_status_t swy_parse_size(const char *text, size_t *bytes_p);

/**
 * @brief Create a job rendezvous token and start the root service in the
 *        calling process. Distribute the token to every rank out of band
 *        (e.g. MPI_Bcast) and call swy_comm_init_rank() on each.
 *
 * The root listens on the address from `SWY_ROOT` when set, otherwise on an
 * ephemeral port of this host's first non-loopback address (or loopback).
 * The job secret is `SWY_JOB_KEY` when set, otherwise 32 random bytes.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (id NULL), SWY_ERR_SYSTEM.
 */
SWY_EXPORT swy_status_t swy_get_unique_id(swy_unique_id_t *id);

/**
 * @brief Create a communicator of @p nranks ranks; collective over them.
 * @param comm   Output handle, set only on success.
 * @param nranks Number of ranks (1..65535).
 * @param id     Token from swy_get_unique_id() on one of the ranks.
 * @param rank   This rank, 0..nranks-1.
 * @return SWY_OK, SWY_ERR_INVALID_ARG, SWY_ERR_MISMATCH (ranks disagree on
 *         nranks, or two ranks claim the same rank), SWY_ERR_TIMEOUT,
 *         SWY_ERR_REMOTE, SWY_ERR_TRANSPORT, SWY_ERR_UNSUPPORTED (no
 *         transport reaches a peer), SWY_ERR_SYSTEM.
 */
SWY_EXPORT swy_status_t swy_comm_init_rank(swy_comm_t *comm, int nranks,
                                           const swy_unique_id_t *id,
                                           int rank);

/**
 * @brief Create a communicator from launcher variables: `SWY_RANK`,
 *        `SWY_WORLD_SIZE`, `SWY_ROOT=host:port`, or torchrun (`RANK`,
 *        `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), Open MPI
 *        (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`) and Slurm
 *        (`SLURM_PROCID`, `SLURM_NTASKS`). Rank 0 listens on the root
 *        address; the job secret is `SWY_JOB_KEY` when set.
 * @return As swy_comm_init_rank(); SWY_ERR_INVALID_ARG when the variables
 *         are missing or malformed (the message names the variable).
 */
SWY_EXPORT swy_status_t swy_comm_init_env(swy_comm_t *comm);

/**
 * @brief Destroy a communicator: waits (bounded by `SWY_TIMEOUT_S`) for
 *        every rank to arrive, then releases everything. Collective.
 *        Accepts NULL. Outstanding requests must be completed or freed.
 */
SWY_EXPORT swy_status_t swy_comm_destroy(swy_comm_t comm);

/**
 * @brief Abort a communicator: fail every in-flight op locally, tell every
 *        other rank (they get SWY_ERR_REMOTE), and release it. Not
 *        collective. Accepts NULL.
 */
SWY_EXPORT swy_status_t swy_comm_abort(swy_comm_t comm);

/** Color for swy_comm_split() of a rank that joins no new communicator. */
#define SWY_SPLIT_NOCOLOR (-1)

/**
 * @brief Split a communicator (MPI_Comm_split, ncclCommSplit). Collective
 *        over @p comm: every rank calls it, in the same order relative to
 *        the other collectives on @p comm.
 *
 * Ranks that pass the same @p color form a new communicator, ordered by
 * @p key and then by their rank in @p comm. The new communicator shares
 * the process's engine (progress thread, transports, policy and per-link
 * queues): its micro-ops are ordered by priority together with those of
 * every other communicator on the same links. It has its own op sequence,
 * so its ops never match ops of another communicator. No new rendezvous
 * is made: the split runs over @p comm itself.
 *
 * Failure: a peer process that dies fails every communicator that holds
 * it; a mismatch, timeout or swy_comm_abort() fails only the communicator
 * where it happened. A parent may be destroyed before its children.
 * @param color >= 0, or SWY_SPLIT_NOCOLOR: then *newcomm is set to NULL.
 * @param newcomm Set on success (NULL for SWY_SPLIT_NOCOLOR).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm or newcomm, a color below
 *         -1), SWY_ERR_NO_MEMORY, SWY_ERR_UNSUPPORTED (the process has no
 *         free communicator ids: 4095 live communicators), and the
 *         failures of a collective on @p comm.
 */
SWY_EXPORT swy_status_t swy_comm_split(swy_comm_t comm, int color, int key,
                                       swy_comm_t *newcomm);

/** @return This rank, or -1 when @p comm is NULL. */
SWY_EXPORT int swy_comm_rank(swy_comm_t comm);
/** @return The number of ranks, or -1 when @p comm is NULL. */
SWY_EXPORT int swy_comm_size(swy_comm_t comm);

/*
 * Memory of the collectives' buffers: host memory, or device memory (CUDA
 * device or managed memory) where the nccl transport plugin is built and
 * sees a GPU. sendbuf and recvbuf must be of the same type (a buffer with
 * no data, count 0, takes the other's), and every rank must pass the same
 * type (else SWY_ERR_MISMATCH on every rank, naming both types). With
 * device memory every peer the op exchanges data with must be reached by
 * a transport that moves device memory, which is checked before anything
 * is sent; see swy_op_attr_t.stream for the ordering. Errors particular to
 * device memory: SWY_ERR_UNSUPPORTED (mixed host and device buffers; no
 * transport moves device memory to some peer, the message names it, its
 * link class and the transports loaded; a stream without device
 * services), SWY_ERR_TRANSPORT (a CUDA failure, named in the message).
 * Where the nccl plugin runs collectives (SWY_DEVICE_COLL=auto, the
 * default), swy_allreduce(), swy_reduce_scatter(), swy_allgather(),
 * swy_broadcast() and swy_alltoallv() of device memory run on NCCL a
 * partition at a time, each partition an NCCL call on the communicator
 * and stream of the op's priority class (two per communicator, made
 * collectively at its first swy_comm_split, or else by its first such
 * op; a split's by swy_comm_split from the parent's), released by
 * Switchyard's policy;
 * nothing is staged through host memory. Otherwise (SWY_DEVICE_COLL=
 * staged, or a plugin without them), and always for swy_allgatherv(),
 * swy_reduce(), swy_gather() and swy_scatter(), device buffers move
 * through pinned host copies (the whole receive region is copied in and
 * out, so bytes the op does not write keep their values) and reductions
 * run on the host.
 */

/**
 * @brief All-to-all with per-peer counts (MPI_Alltoallv semantics).
 *
 * Rank r sends sendcounts[j] elements from sendbuf + sdispls[j] to rank j,
 * and receives recvcounts[j] elements from rank j into
 * recvbuf + rdispls[j]. Zeros are allowed. Default priority: high.
 * @return SWY_OK (or SWY_INPROGRESS never: non-blocking posts return
 *         SWY_OK and set *req), SWY_ERR_INVALID_ARG (NULL arrays, NULL
 *         buffer with a non-zero count, overflowing sizes, bad dtype,
 *         overlapping receive regions), SWY_ERR_MISMATCH (a peer's count
 *         or memory type disagrees; reported on every rank),
 *         SWY_ERR_TIMEOUT, SWY_ERR_REMOTE, SWY_ERR_UNSUPPORTED (device
 *         memory, see above).
 */
SWY_EXPORT swy_status_t swy_alltoallv(const void *sendbuf,
                                      const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts,
                                      const size_t *rdispls,
                                      swy_dtype_t dtype, swy_comm_t comm,
                                      const swy_op_attr_t *attr,
                                      swy_request_t *req);

/** Most chunks one swy_alltoallv_chunks() takes. */
#define SWY_CHUNKS_MAX 1024
/** swy_alltoallv_chunks() flag: each chunk starts at
 *  swy_chunk_release() of its request. */
#define SWY_CHUNKS_HELD 1u

/**
 * @brief An all-to-all in @p nchunks chunks that complete one by one: a
 *        pipelined exchange (the chunks of an MoE dispatch).
 *
 * Chunk j is the alltoallv of sendcounts + j * nranks, sdispls +
 * j * nranks, recvcounts + j * nranks and rdispls + j * nranks (arrays of
 * nchunks * nranks, chunk-major; displacements into the one sendbuf and
 * recvbuf; receive regions disjoint within a chunk), with the priority of
 * @p attr (default high) and order attr->order + j; its request is
 * reqs[j] (wait, test and free each). Every rank passes the same
 * nchunks and, chunk by chunk, counts that agree. The chunks check their
 * arguments across ranks once, in one header exchange (the first
 * chunk's), instead of once each: the first chunk's header carries the
 * number of chunks, the counts summed over them and a digest of each
 * chunk's (a disagreement is SWY_ERR_MISMATCH on every rank, naming the
 * ranks and the counts); a chunk's size is still checked when its data
 * arrives. (Held chunks of device memory exchange a header each, at
 * their release: a device send waits for its receiver's header.) Device
 * chunks are, as a device swy_alltoallv(), grouped sends and receives of
 * the nccl plugin on its communicator of their priority class, launched
 * in chunk order: a held chunk released before an earlier one moves
 * once that one is released too, and the device ops of the same class
 * posted on the communicator after the chunks wait for every chunk's
 * release (the plugin takes them in the same order on every rank): do
 * not wait for such an op before releasing the chunks. A
 * chunk without data takes the memory type of the others. With
 * SWY_CHUNKS_HELD chunk j moves nothing (neither reads
 * its part of sendbuf nor writes its part of recvbuf) until
 * swy_chunk_release(reqs[j]): fill a chunk's part of sendbuf, then
 * release it; every rank must release every chunk (a chunk never
 * released fails with SWY_ERR_TIMEOUT after SWY_TIMEOUT_S, as any op
 * not completed). Non-blocking only.
 * @return SWY_OK (every chunk posted) or, with no chunk posted,
 *         SWY_ERR_INVALID_ARG (as swy_alltoallv() for any chunk, naming
 *         it; reqs NULL; nchunks out of 1..SWY_CHUNKS_MAX; unknown flags),
 *         SWY_ERR_UNSUPPORTED (device memory, as swy_alltoallv()),
 *         SWY_ERR_NO_MEMORY, or the communicator's failure.
 */
SWY_EXPORT swy_status_t swy_alltoallv_chunks(const void *sendbuf,
                                             const size_t *sendcounts,
                                             const size_t *sdispls,
                                             void *recvbuf,
                                             const size_t *recvcounts,
                                             const size_t *rdispls,
                                             int nchunks, swy_dtype_t dtype,
                                             swy_comm_t comm,
                                             const swy_op_attr_t *attr,
                                             unsigned flags,
                                             swy_request_t *reqs);

/**
 * @brief Start a held chunk of swy_alltoallv_chunks() (SWY_CHUNKS_HELD):
 *        its part of sendbuf is ready.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (req NULL, not a held chunk, or
 *         released already).
 */
SWY_EXPORT swy_status_t swy_chunk_release(swy_request_t req);

/**
 * @brief Reduce @p count elements over all ranks and leave the result on
 *        every rank. In place when sendbuf == recvbuf. SWY_AVG divides
 *        the sum by the number of ranks (integer division for integer
 *        types). Default priority: low. Device buffers: see above (NCCL
 *        partition by partition; staged, they are reduced on the host: on
 *        more than one rank the op copies sendbuf to pinned host memory
 *        when it starts and the result back to recvbuf before the request
 *        completes; on one rank it is a device copy).
 */
SWY_EXPORT swy_status_t swy_allreduce(const void *sendbuf, void *recvbuf,
                                      size_t count, swy_dtype_t dtype,
                                      swy_redop_t op, swy_comm_t comm,
                                      const swy_op_attr_t *attr,
                                      swy_request_t *req);

/**
 * @brief Gather @p count elements from every rank into recvbuf, rank r's
 *        block at recvbuf + r*count. In place when sendbuf equals rank r's
 *        block. Default priority: default.
 */
SWY_EXPORT swy_status_t swy_allgather(const void *sendbuf, void *recvbuf,
                                      size_t count, swy_dtype_t dtype,
                                      swy_comm_t comm,
                                      const swy_op_attr_t *attr,
                                      swy_request_t *req);

/** @brief Broadcast @p count elements from @p root to every rank. */
SWY_EXPORT swy_status_t swy_broadcast(void *buf, size_t count,
                                      swy_dtype_t dtype, int root,
                                      swy_comm_t comm,
                                      const swy_op_attr_t *attr,
                                      swy_request_t *req);

/** @brief Block until every rank has entered the barrier. */
SWY_EXPORT swy_status_t swy_barrier(swy_comm_t comm);

/**
 * @brief Reduce over all ranks and scatter the result: rank r receives
 *        elements [r*recvcount, (r+1)*recvcount) of the reduction of
 *        every rank's sendbuf (nranks*recvcount elements). In place when
 *        recvbuf is rank r's block of sendbuf. Default priority: low.
 *
 * @p op as swy_allreduce(): SWY_AVG divides the sum by the number of
 * ranks (integer division for integer types). Runs as a pipelined ring
 * (nranks-1 steps, each block cut into chunks of at most the partition
 * size, 256 KiB at most); each rank sends and receives (nranks-1) blocks
 * and holds nranks-1 blocks of scratch while the op runs (host
 * buffers). Device buffers: run by the nccl plugin's collectives, a
 * partition at a time (SWY_DEVICE_COLL=staged: through the transports and
 * host copies).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm or buffer with a
 *         non-zero count, bad dtype or op, nranks*recvcount elements
 *         that overflow), SWY_ERR_MISMATCH (a rank's recvcount, dtype or
 *         op differs; reported on every rank, naming both sides),
 *         SWY_ERR_UNSUPPORTED (device buffers that nothing loaded can move),
 *         SWY_ERR_NO_MEMORY,
 *         SWY_ERR_TIMEOUT, SWY_ERR_REMOTE.
 */
SWY_EXPORT swy_status_t swy_reduce_scatter(const void *sendbuf,
                                           void *recvbuf, size_t recvcount,
                                           swy_dtype_t dtype, swy_redop_t op,
                                           swy_comm_t comm,
                                           const swy_op_attr_t *attr,
                                           swy_request_t *req);

/**
 * @brief Gather @p sendcount elements from every rank, rank j's block of
 *        recvcounts[j] elements at recvbuf + rdispls[j] (sendcount must
 *        equal recvcounts[r] on rank r: else SWY_ERR_MISMATCH). Receive
 *        regions may not overlap. Default priority: default.
 *
 * Counts may differ between ranks and may be zero; recvcounts and rdispls
 * (nranks elements each, copied when the op is posted) must agree on
 * every rank with each rank's sendcount: every pair of ranks compares
 * them before any data moves, so a disagreement is SWY_ERR_MISMATCH on
 * every rank, naming the sender, the receiver and both counts. In place
 * when sendbuf is rank r's block, recvbuf + rdispls[r]. Runs as a
 * pipelined ring (nranks-1 steps, each block forwarded chunk by chunk as
 * it arrives): each rank sends every block but its right neighbour's
 * once (host buffers). Device buffers: run by the nccl plugin's
 * broadcasts, a partition at a time (SWY_DEVICE_COLL=staged: through the
 * transports and host copies).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm, recvcounts or
 *         rdispls, NULL sendbuf with a non-zero sendcount, NULL recvbuf
 *         with non-zero recvcounts, bad dtype, receive regions that
 *         overflow or overlap), SWY_ERR_MISMATCH, SWY_ERR_UNSUPPORTED
 *         (device buffers that nothing loaded can move), SWY_ERR_TIMEOUT,
 *         SWY_ERR_REMOTE.
 */
SWY_EXPORT swy_status_t swy_allgatherv(const void *sendbuf, size_t sendcount,
                                       void *recvbuf,
                                       const size_t *recvcounts,
                                       const size_t *rdispls,
                                       swy_dtype_t dtype, swy_comm_t comm,
                                       const swy_op_attr_t *attr,
                                       swy_request_t *req);

/**
 * @brief Reduce @p count elements over all ranks into @p root's recvbuf
 *        (recvbuf is not touched, and may be NULL, on other ranks).
 *        Default priority: low.
 *
 * @p op as swy_allreduce(). In place when sendbuf == recvbuf on the
 * root. Runs as a pipelined chain towards the root (root-1 -> root-2 ->
 * ... -> root+1 -> root, chunk by chunk): each rank sends and receives
 * the buffer once, and every rank but the chain's end (root-1) holds
 * count elements of scratch while the op runs (host buffers). Device
 * buffers: run by the nccl plugin's reduce, a partition at a time
 * (SWY_DEVICE_COLL=staged: through the transports and host copies).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm, NULL sendbuf or root's
 *         recvbuf with a non-zero count, bad dtype or op, root out of
 *         range, a count that overflows), SWY_ERR_MISMATCH (a rank's
 *         count, root, dtype or op differs; on every rank),
 *         SWY_ERR_UNSUPPORTED (device buffers that nothing loaded can move),
 *         SWY_ERR_NO_MEMORY,
 *         SWY_ERR_TIMEOUT, SWY_ERR_REMOTE.
 */
SWY_EXPORT swy_status_t swy_reduce(const void *sendbuf, void *recvbuf,
                                   size_t count, swy_dtype_t dtype,
                                   swy_redop_t op, int root, swy_comm_t comm,
                                   const swy_op_attr_t *attr,
                                   swy_request_t *req);

/**
 * @brief Gather @p count elements from every rank into @p root's recvbuf,
 *        rank r's block at recvbuf + r*count (recvbuf unused elsewhere).
 *        Default priority: default.
 *
 * recvbuf may be NULL on the other ranks. In place when the root's
 * sendbuf is its own block, recvbuf + root*count. Every rank sends its
 * block straight to the root, in chunks of at most the partition size
 * (device buffers: the nccl plugin's sends and receives, or with
 * SWY_DEVICE_COLL=staged the transports).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm, NULL sendbuf or root's
 *         recvbuf with a non-zero count, bad dtype, root out of range,
 *         count*nranks elements that overflow), SWY_ERR_MISMATCH (a
 *         rank's count, root or dtype differs; on every rank),
 *         SWY_ERR_UNSUPPORTED (device buffers that nothing loaded can move),
 *         SWY_ERR_TIMEOUT,
 *         SWY_ERR_REMOTE.
 */
SWY_EXPORT swy_status_t swy_gather(const void *sendbuf, void *recvbuf,
                                   size_t count, swy_dtype_t dtype, int root,
                                   swy_comm_t comm, const swy_op_attr_t *attr,
                                   swy_request_t *req);

/**
 * @brief Scatter from @p root: rank r receives @p count elements from
 *        root's sendbuf + r*count (sendbuf unused elsewhere). Default
 *        priority: default.
 *
 * sendbuf may be NULL on the other ranks. In place when the root's
 * recvbuf is its own block, sendbuf + root*count. The root sends each
 * rank its block directly, in chunks of at most the partition size
 * (device buffers: the nccl plugin's sends and receives, or with
 * SWY_DEVICE_COLL=staged the transports).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm, NULL recvbuf or root's
 *         sendbuf with a non-zero count, bad dtype, root out of range,
 *         count*nranks elements that overflow), SWY_ERR_MISMATCH (a
 *         rank's count, root or dtype differs; on every rank),
 *         SWY_ERR_UNSUPPORTED (device buffers that nothing loaded can move),
 *         SWY_ERR_TIMEOUT,
 *         SWY_ERR_REMOTE.
 */
SWY_EXPORT swy_status_t swy_scatter(const void *sendbuf, void *recvbuf,
                                    size_t count, swy_dtype_t dtype, int root,
                                    swy_comm_t comm, const swy_op_attr_t *attr,
                                    swy_request_t *req);

/**
 * @brief Send @p count elements to @p peer. Sends and receives match in
 *        posting order per ordered pair of ranks on a communicator (as
 *        NCCL's); a count or dtype that differs from the matching
 *        swy_recv() is SWY_ERR_MISMATCH on both sides. Default priority:
 *        default. A blocking send waits until the data left this rank.
 */
SWY_EXPORT swy_status_t swy_send(const void *buf, size_t count,
                                 swy_dtype_t dtype, int peer, swy_comm_t comm,
                                 const swy_op_attr_t *attr,
                                 swy_request_t *req);

/** A receive's peer that matches a send from any rank (MPI_ANY_SOURCE). */
#define SWY_ANY_SOURCE (-2)

/**
 * @brief Receive @p count elements from @p peer (see swy_send()).
 *        @p peer SWY_ANY_SOURCE receives the first send to this rank to
 *        arrive from any rank of @p comm, as MPI_ANY_SOURCE does (host
 *        buffers only); swy_request_source() tells which rank sent it.
 *        A send matches the first receive posted for it: a receive from
 *        a given rank posted after one from any source waits until that
 *        one matched (under SWY_P2P_MATCH=tag it waits for nothing but
 *        a send it fits: swy_send_tagged()). Count, dtype and tag
 *        are checked against the send it matched, as for any receive.
 * @return as swy_send(); SWY_ERR_UNSUPPORTED for SWY_ANY_SOURCE with
 *         device buffers.
 */
SWY_EXPORT swy_status_t swy_recv(void *buf, size_t count, swy_dtype_t dtype,
                                 int peer, swy_comm_t comm,
                                 const swy_op_attr_t *attr,
                                 swy_request_t *req);

/**
 * @brief swy_send() with a tag (0..INT_MAX; swy_send() is tag 0), as
 *        MPI's and gloo's sends take one. How the receiving rank matches
 *        is its SWY_P2P_MATCH (environment, or swy_comm_configure()):
 *        - "order" (default, as NCCL): the tag is checked, not matched
 *          on: sends and receives match in posting order per ordered
 *          pair of ranks, and a send whose receive in that order carries
 *          another tag is SWY_ERR_MISMATCH on both sides, as a count that
 *          differs is.
 *        - "tag" (as MPI and gloo; the torch backend's): a receive takes
 *          the first send from its source (any rank for SWY_ANY_SOURCE)
 *          that carries its tag and that no receive posted before it
 *          took; sends of one tag from one rank are received in the order
 *          they were sent. A receive waits for nothing but a send it
 *          fits, and one that never comes is SWY_ERR_TIMEOUT after
 *          SWY_TIMEOUT_S. Each receive then costs its sender one header
 *          trip more before the bulk of the data leaves.
 * @return as swy_send(); SWY_ERR_INVALID_ARG for a negative tag.
 */
SWY_EXPORT swy_status_t swy_send_tagged(const void *buf, size_t count,
                                        swy_dtype_t dtype, int peer, int tag,
                                        swy_comm_t comm,
                                        const swy_op_attr_t *attr,
                                        swy_request_t *req);

/** @brief swy_recv() with a tag (see swy_send_tagged()). */
SWY_EXPORT swy_status_t swy_recv_tagged(void *buf, size_t count,
                                        swy_dtype_t dtype, int peer, int tag,
                                        swy_comm_t comm,
                                        const swy_op_attr_t *attr,
                                        swy_request_t *req);

/**
 * @brief Start a group (ncclGroupStart): until the matching
 *        swy_group_end(), calls of this thread on any communicator are
 *        collected instead of posted, and a blocking call (req == NULL)
 *        does not block. Groups nest; the outermost end posts.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (nested too deep).
 */
SWY_EXPORT swy_status_t swy_group_start(void);

/**
 * @brief End a group: post every call collected since the outermost
 *        swy_group_start() together, so a batch of sends and receives to
 *        many peers cannot deadlock whatever the order of the calls, then
 *        wait for the blocking ones (req == NULL). Non-blocking calls of
 *        the group got their request at the call. Calls with device
 *        buffers are ordered on their streams here, those of one stream
 *        together (see swy_op_attr_t.stream). End a group before
 *        destroying a communicator it posted on.
 * @return SWY_OK, the first failure of a blocking call of the group, or
 *         SWY_ERR_INVALID_ARG without a matching swy_group_start().
 */
SWY_EXPORT swy_status_t swy_group_end(void);

/**
 * @brief Non-blocking completion check; drives progress.
 * @param done Set to 1 when the request completed (successfully or not).
 * @return SWY_OK, or the op's failure status once it completed with one.
 */
SWY_EXPORT swy_status_t swy_test(swy_request_t req, int *done);

/** @brief Block until the request completes; returns its status. */
SWY_EXPORT swy_status_t swy_wait(swy_request_t req);

/**
 * @brief The rank a receive's data comes from: its peer, or for a
 *        receive from SWY_ANY_SOURCE the rank whose send it matched
 *        (SWY_ANY_SOURCE while it has matched none). Valid until the
 *        request is released.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL argument, not a receive).
 */
SWY_EXPORT swy_status_t swy_request_source(swy_request_t req, int *source);

/**
 * @brief Release a request. An incomplete request keeps running and is
 *        released when it completes (as MPI_Request_free). Accepts NULL.
 */
SWY_EXPORT void swy_request_free(swy_request_t req);

/** Phases for swy_phase_hint(). */
enum {
    SWY_PHASE_NONE = 0,        /**< no high-priority traffic expected   */
    SWY_PHASE_A2A_IMMINENT = 1 /**< an all-to-all is about to be posted */
};

/**
 * @brief Tell the scheduler what comes next (e.g. an all-to-all is
 *        imminent, so hold low-priority traffic). Local; cheap.
 */
SWY_EXPORT swy_status_t swy_phase_hint(swy_comm_t comm, int phase);

/** Counters of the communicator's engine (swy_comm_stats()): every
 *  communicator of a process shares one engine (see swy_comm_split()), so
 *  they count the ops of all of them, as the links carry them together. */
typedef struct {
    size_t struct_size;         /**< set by the caller to sizeof */
    uint64_t ops_posted;        /**< collectives posted              */
    uint64_t ops_completed;     /**< collectives completed           */
    uint64_t bytes_sent;        /**< payload bytes sent to peers     */
    uint64_t bytes_received;    /**< payload bytes received          */
    uint64_t micro_ops_sent;    /**< send micro-ops issued           */
    uint64_t micro_ops_received;/**< receive micro-ops completed     */
    uint64_t preemptions;       /**< times a link switched from a
                                     lower-priority micro-op to a
                                     higher-priority one             */
    double high_wait_s;         /**< summed over micro-ops: time from
                                     ready to issued of those that
                                     became ready while lower
                                     priority was in flight on their
                                     link                            */
    uint64_t headers_sent;      /**< op headers sent: one to each peer
                                     an op checks its arguments with;
                                     the chunks of
                                     swy_alltoallv_chunks() share
                                     their first chunk's             */
} swy_comm_stats_t;

/**
 * @brief Read the counters of the communicator's engine (all the
 *        process's communicators on it together).
 * @param stats struct_size set to sizeof(swy_comm_stats_t); the library
 *              writes the fields that struct_size covers (the
 *              struct_size rule of swy_common.h).
 */
SWY_EXPORT swy_status_t swy_comm_stats(swy_comm_t comm,
                                       swy_comm_stats_t *stats);

/**
 * @brief Change a scheduling setting of the communicator's engine (every
 *        communicator of the process on it) while no operation of the
 *        engine is in flight (benchmarks and tuners switch policies
 *        within one run). SWY_POLICY, SWY_CREDIT_BYTES,
 *        SWY_WINDOW_BYTES and SWY_P2P_MATCH are local (ranks may differ
 *        without harm);
 *        SWY_PARTITION_BYTES decides where transfers are cut and must be
 *        set to the same value on every rank before their next op (ranks
 *        that differ get SWY_ERR_MISMATCH, never corrupted data).
 * @param name  "SWY_POLICY" (fifo, fair, lina, credit, or a plugin name),
 *              "SWY_PARTITION_BYTES", "SWY_CREDIT_BYTES" or
 *              "SWY_WINDOW_BYTES" (sizes like "256K", or "auto"), or
 *              "SWY_P2P_MATCH" ("order" or "tag": swy_send_tagged()).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (unknown name, bad value, or
 *         operations in flight; for SWY_P2P_MATCH also a send that no
 *         receive took yet whose header a receive already caught).
 */
SWY_EXPORT swy_status_t swy_comm_configure(swy_comm_t comm, const char *name,
                                           const char *value);

/**
 * @brief Read a setting in effect: the names of swy_comm_configure() and
 *        "SWY_PROGRESS". Sizes are printed in bytes.
 */
SWY_EXPORT swy_status_t swy_comm_query(swy_comm_t comm, const char *name,
                                       char *buf, size_t len);

/** What a communicator knows of one of its ranks (swy_comm_peer_info()). */
typedef struct {
    size_t struct_size;  /**< set by the caller to sizeof */
    char hostname[64];   /**< the rank's host */
    int node;            /**< its host's index among the communicator's */
    int numa;            /**< its NUMA node there, -1 unknown */
    char link_class[16]; /**< from the caller: "self", "same_numa",
                              "same_node" or "cross_node" */
    double bandwidth;    /**< bytes/s of that link in the model (measured
                              with SWY_TOPO_PROBE, or from SWY_TOPO_FILE) */
    double latency;      /**< seconds, likewise */
    char transport[32];  /**< the transport carrying host memory to it,
                              "" when none reaches it */
    char path[192];      /**< that transport's account of the path (UCX:
                              the devices it uses), or "" */
} swy_peer_info_t;

/**
 * @brief Describe rank @p peer of @p comm as this rank sees it: its host,
 *        the link class and model, and the transport chosen for it.
 *        Local; any thread.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL comm or info, peer out of
 *         range, struct_size below swy_peer_info_t's first release);
 *         the fields struct_size covers are written (swy_common.h).
 */
SWY_EXPORT swy_status_t swy_comm_peer_info(swy_comm_t comm, int peer,
                                           swy_peer_info_t *info);

/**
 * @brief Text that tools show (swy-info): @p what is "host" (this host's
 *        topology as hwloc finds it), "transports" (the transport plugins
 *        that load, their memory types and scores, and the choice per link
 *        class), "config" (every SWY_* variable: value, default, type,
 *        range, help, and the rule for bad values) or "config-markdown"
 *        (the same variables with their defaults only, as the Markdown
 *        page docs/configuration.md). Needs no communicator.
 * @param buf Filled with a NUL-terminated text, cut at len - 1 bytes
 *        (config-markdown: never cut; a len too small is an error).
 * @return SWY_OK, SWY_ERR_INVALID_ARG (NULL what or buf, len 0, unknown
 *         what, config-markdown longer than len), SWY_ERR_SYSTEM (discovery or loading failed: the message
 *         says why).
 */
SWY_EXPORT swy_status_t swy_describe(const char *what, char *buf, size_t len);

/**
 * @brief Allocate host memory that the communicator's ranks on this host
 *        can reach directly, as ncclMemAlloc or MPI_Win_allocate_shared
 *        do. Collectives whose buffers lie in such memory on a one-host
 *        communicator skip copies: an allreduce reads the peers' sendbufs
 *        in place and writes its results straight into their recvbufs,
 *        and an alltoallv receiver copies each block once, straight from
 *        the sender's buffer (both where every rank may map the others'
 *        memory, checked at init). Elsewhere it is ordinary memory and
 *        collectives treat it as any other. Not collective: each rank
 *        allocates on its own, and any mix of such and other buffers
 *        across ranks works.
 * @param comm  the communicator whose ranks will use the memory
 * @param bytes more than 0; rounded up to whole pages
 * @param ptr   receives the address: page aligned, zero filled
 * @return SWY_OK, SWY_ERR_INVALID_ARG, or SWY_ERR_NO_MEMORY when the
 *         pages cannot be reserved (they are, at once, so that running
 *         out of memory is an error here and not a signal later).
 */
SWY_EXPORT swy_status_t swy_mem_alloc(swy_comm_t comm, size_t bytes,
                                      void **ptr);

/**
 * @brief Free memory from swy_mem_alloc() on the same communicator once
 *        this rank's operations that use it have returned (completed or
 *        failed: then no peer reads or writes it any more). The pages go
 *        back once the peers drop their mappings too, which they do at
 *        their next operation on such memory of this rank's, or when the
 *        communicator is destroyed. NULL is a no-op. Memory still
 *        allocated when the communicator is destroyed is freed with it.
 * @return SWY_OK, or SWY_ERR_INVALID_ARG for an address that
 *         swy_mem_alloc() did not return on this communicator.
 */
SWY_EXPORT swy_status_t swy_mem_free(swy_comm_t comm, void *ptr);

/** @return The library version string, e.g. "0.1.0". */
SWY_EXPORT const char *swy_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_H */
