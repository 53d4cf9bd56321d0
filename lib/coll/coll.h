/* lib/coll: collective algorithms as programs of chunked point-to-point
 * steps. An algorithm knows nothing of transports or scheduling: it emits
 * transfers (sends and receives of at most the partition size, each with a
 * 24-bit tag unique within the op for its (source, destination) pair) and
 * reacts to completed receives (reduce, forward) by emitting the sends
 * that became ready. lib/sched turns transfers into micro-ops, orders them
 * and posts them to transports.
 *
 * Before any data, every op exchanges a header with each of its header
 * peers (at least the ring neighbours, so any disagreement between any two
 * ranks is seen by some adjacent pair); check_header() compares the peer's
 * view with ours and names both sides on a mismatch.
 *
 * Memory: args.mem is the type of the user's buffers (host or device),
 * carried in the header so that ranks passing different types fail with
 * SWY_ERR_MISMATCH. Every transfer names the type of its own buffer
 * (xfer.mem): an algorithm's host scratch is host memory whatever the
 * user passed. Host code here never dereferences a device buffer: copies
 * inside a rank go through swy_device_copy(), and allreduce stages device
 * buffers through pinned host memory to reduce them on the host. */
#ifndef SWY_COLL_COLL_H
#define SWY_COLL_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"
#include "switchyard/swy_devcoll_v1.h"
#include "switchyard/swy_transport_v1.h"
#include "util/half.h"
#include "util/status.h"

#define SWY_COLL_TAG_BITS 24
#define SWY_COLL_TAG_HEADER 0xFFFFFFu             /* reserved for headers */
#define SWY_COLL_TAG_MAX (SWY_COLL_TAG_HEADER - 1) /* largest data tag */

typedef enum {
    SWY_COLL_ALLTOALLV,
    SWY_COLL_ALLREDUCE,
    SWY_COLL_ALLGATHER,
    SWY_COLL_BROADCAST,
    SWY_COLL_BARRIER,
    SWY_COLL_REDUCE_SCATTER, /* count: elements each rank receives */
    SWY_COLL_ALLGATHERV,     /* count: this rank's sendcount; recvcounts,
                                rdispls: nranks each */
    SWY_COLL_REDUCE,         /* root */
    SWY_COLL_GATHER,         /* root; count per rank */
    SWY_COLL_SCATTER,        /* root; count per rank */
    SWY_COLL_SEND,           /* root: the peer; count */
    SWY_COLL_RECV,           /* root: the peer; count */
    SWY_COLL_NKINDS
} swy_coll_kind_t;

typedef struct {
    swy_coll_kind_t kind;
    swy_dtype_t dtype;
    swy_redop_t redop;
    swy_mem_type_t mem; /* of sendbuf and recvbuf (the same for both) */
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* allreduce, allgather (per rank), broadcast; the
                     others as the kinds above say */
    int root;     /* broadcast, reduce, gather, scatter */
    size_t partition_bytes; /* micro-op size: must agree between ranks */
    /* allreduce: the algorithm, a swy_coll_ar_algo_t. The scheduler sets
     * it when the op is posted (SWY_ALLREDUCE_ALGO resolved by
     * swy_coll_allreduce_choose); left AUTO, the automatic rule holds. */
    uint8_t allreduce_algo;
    /* The comm's ranks are on more than one host (the scheduler sets it;
     * the same on every rank, from the shared topology). */
    uint8_t multi_host;
    /* [nranks]: each rank's host, numbered 0.. in order of first
     * appearance, the same on every rank (the scheduler sets it from the
     * shared topology; borrowed for the op's life), or NULL when not
     * known: alltoallv/hier needs it. */
    const int *host_of;
    /* The comm's shared-memory channel (shm.c), or NULL: the scheduler
     * sets it; every rank of the comm has one or none alike. */
    struct swy_coll_shm *shm;
    /* The comm's alltoallv channel (a second one, so that an all-to-all
     * never waits for an allreduce's turn), or NULL; set alike. */
    struct swy_coll_shm *shm_a2a;
    /* alltoallv: the swy_coll_a2a_algo_t it runs (the scheduler sets it
     * with swy_coll_alltoallv_choose; the header carries it). */
    uint8_t alltoallv_algo;
    /* Device buffers whose collective the plugin runs, partition by
     * partition (offload.c); the scheduler sets it, alike on every rank
     * of a communicator with the plugin's communicators (the header
     * carries it). */
    uint8_t offload;
    /* An offloaded op's priority class, 1 high or 0 low (0 for the
     * others): the plugin communicator that runs it (lib/sched sets it;
     * the header carries it, since ranks that differ would each meet
     * another op there). */
    uint8_t offload_class;
    /* An offloaded send or recv posted inside swy_group_start/end: the
     * group's number (nonzero, unique in the process), whose p2p
     * launches lib/sched holds until the group ends and then merges
     * into one launch (lane.c); 0 else. This rank's own: no header
     * carries it. */
    uint32_t lane_group;
    /* send, recv: the caller's tag (swy_send_tagged; 0 for the others),
     * which the header checks against the matching call's */
    uint32_t user_tag;
    /* alltoallv: arrays of nranks elements, owned by the op (copies);
     * allgatherv: recvcounts and rdispls only */
    size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} swy_coll_args_t;

/* What a rank tells a peer about an op, on the wire (host byte order:
 * ranks of one job share an architecture). */
typedef struct {
    uint32_t magic;
    uint32_t seq;
    uint8_t kind, dtype, redop;
    uint8_t mem;            /* swy_mem_type_t of the user's buffers */
    uint8_t algo;           /* allreduce: swy_coll_ar_algo_t it runs */
    uint8_t offload;        /* args.offload */
    uint8_t offload_class;  /* args.offload_class */
    int32_t root;
    uint64_t count;         /* op-wide count (allreduce/allgather/bcast) */
    uint64_t send_to_peer;  /* alltoallv, allgatherv: elements I send to
                               the reader */
    uint64_t recv_from_peer;/* alltoallv, allgatherv: elements I expect
                               from it */
    uint64_t partition_bytes; /* where I cut transfers into micro-ops */
    /* The first chunk of swy_alltoallv_chunks speaks for all its chunks,
     * which send no header of their own (lib/sched, "series"); 0 else. */
    uint32_t series_chunks;   /* how many chunks */
    uint32_t user_tag;        /* args.user_tag */
    uint64_t series_send;     /* elements I send the reader, all chunks */
    uint64_t series_recv;     /* elements I expect from it, all chunks */
    uint64_t series_send_digest; /* of my per-chunk counts to the reader */
    uint64_t series_recv_digest; /* of my per-chunk counts from it */
} swy_coll_header_t;

#define SWY_COLL_HEADER_MAGIC 0x53575948u /* "SWYH" */

typedef struct {
    int peer;
    uint8_t is_send;
    swy_mem_type_t mem; /* of buf: the user's type, or host for scratch */
    uint32_t tag; /* < SWY_COLL_TAG_HEADER */
    void *buf;
    size_t bytes;
    uint64_t cookie; /* the algorithm's own label, given back on completion */
    /* A send that nothing waits on alone, one of many posted at once
     * (alltoallv): the transport may favour bandwidth over an early
     * completion (SWY_SEND_HINT_BULK). */
    uint8_t bulk;
} swy_coll_xfer_t;

/* How an algorithm hands transfers to the scheduler. post() never fails
 * synchronously: errors surface on the op. */
typedef struct {
    void (*post)(void *ctx, const swy_coll_xfer_t *xfer);
    void *ctx;
} swy_coll_emit_t;

typedef struct swy_coll_state swy_coll_state_t;

typedef struct {
    const char *name;
    /* Validate sizes against tag space etc. and allocate state. */
    swy_status_t (*create)(const swy_coll_args_t *args, int rank, int nranks,
                           size_t partition_bytes,
                           swy_coll_state_t **state_p);
    /* Post every receive and the sends that are ready at once. */
    swy_status_t (*start)(swy_coll_state_t *state, const swy_coll_emit_t *emit);
    /* A receive completed with `bytes` (== xfer->bytes, checked by the
     * caller): reduce or forward, emit sends that became ready. */
    swy_status_t (*recv_done)(swy_coll_state_t *state,
                              const swy_coll_xfer_t *xfer,
                              const swy_coll_emit_t *emit);
    /* Optional (NULL: nothing to do). Every transfer completed and the op
     * has not failed: last local work before the request completes (a
     * staged allreduce copies its result to the device). */
    swy_status_t (*finish)(swy_coll_state_t *state);
    void (*destroy)(swy_coll_state_t *state);
    /* Optional: the op failed (its transfers are being cancelled); give
     * back what it shares with other ops. destroy() still follows. */
    void (*abort)(swy_coll_state_t *state);
    /* Optional (NULL: never): the peers may read or write this op's user
     * buffers in place, with no transfer of the op's in flight (they were
     * told where the buffers lie: swy_mem_alloc memory, or a sendbuf
     * that receivers pull). A failed op then hands the buffers back only
     * once every live peer has quiesced, as for a posted send. */
    int (*lends)(const swy_coll_state_t *state);
} swy_coll_algo_t;

/* Allreduce algorithms, as SWY_ALLREDUCE_ALGO names them and the header
 * carries them. */
typedef enum {
    SWY_COLL_AR_AUTO = 0, /* by size and number of ranks (algos.c) */
    SWY_COLL_AR_RING,     /* allreduce.c; any op, device buffers too */
    SWY_COLL_AR_RHD,      /* allreduce_rhd.c; a power of two of ranks */
    SWY_COLL_AR_DIRECT,   /* allreduce_direct.c */
    SWY_COLL_AR_SHM,      /* allreduce_shm.c; needs the comm's channel */
    SWY_COLL_AR_NALGOS
} swy_coll_ar_algo_t;

/* Alltoallv algorithms, as SWY_ALLTOALLV_ALGO names them. */
typedef enum {
    SWY_COLL_A2A_AUTO = 0, /* shm where the ranks share CPUs, else
                              pairwise */
    SWY_COLL_A2A_PAIRWISE, /* alltoallv.c, through the transports */
    SWY_COLL_A2A_SHM,      /* alltoallv_shm.c; needs the channel */
    SWY_COLL_A2A_HIER,     /* alltoallv_hier.c; ranks on several hosts */
    SWY_COLL_A2A_NALGOS
} swy_coll_a2a_algo_t;

/* alltoallv/hier sends a block to a rank of another host through the
 * forwarder, in one message with the other such blocks of its host to
 * that rank, when it holds at most this many bytes (small blocks pay a
 * message each across the fabric; larger ones go straight, as in
 * pairwise, sparing the hop and copy inside the host). The rule and the
 * runs behind it: docs/performance.md, "hier". */
#ifndef SWY_COLL_HIER_BLOCK_MAX_BYTES /* -D for experiments only */
#define SWY_COLL_HIER_BLOCK_MAX_BYTES ((size_t)4 << 10)
#endif

/* The alltoallv algorithm an op runs when `wanted` is asked for (shm
 * gives way to pairwise without a channel or for device buffers, hier
 * to the automatic rule on one host or without a host map); a function
 * of what every rank shares (not of the counts). */
swy_coll_a2a_algo_t swy_coll_alltoallv_choose(const swy_coll_args_t *args,
                                              swy_coll_a2a_algo_t wanted);
swy_coll_a2a_algo_t swy_coll_alltoallv_setting(void);
const char *swy_coll_alltoallv_algo_name(swy_coll_a2a_algo_t algo);

/* Largest allreduce, in bytes, that AUTO gives to halving/doubling; then
 * the direct algorithm up to SWY_COLL_ALLREDUCE_DIRECT_MAX_BYTES on at
 * most SWY_COLL_ALLREDUCE_DIRECT_MAX_RANKS ranks; then the ring. The
 * direct algorithm's scratch is (W-1)/W of the buffer: the bound keeps
 * it to the sizes measured. */
#ifndef SWY_COLL_ALLREDUCE_RHD_MAX_BYTES /* -D for experiments only */
#define SWY_COLL_ALLREDUCE_RHD_MAX_BYTES (256u << 10)
#endif
#ifndef SWY_COLL_ALLREDUCE_DIRECT_MAX_BYTES
#define SWY_COLL_ALLREDUCE_DIRECT_MAX_BYTES (64u << 20)
#endif
#define SWY_COLL_ALLREDUCE_DIRECT_MAX_RANKS 8
/* Above this size, on a comm with a shared-memory channel (all ranks on
 * one host), AUTO takes allreduce/shm, before any other rule. */
#ifndef SWY_COLL_ALLREDUCE_SHM_MIN_BYTES
#define SWY_COLL_ALLREDUCE_SHM_MIN_BYTES (32u << 10)
#endif

/* The shared-memory channel of a communicator whose ranks all share one
 * host (shm.c): a segment every rank maps, where rank o owns a region of
 * 2 x (W + 1) slots of slot_bytes: per parity, one input slot per
 * destination rank and one result slot. allreduce/shm stages data there
 * so that a peer reads it in place (one copy per byte moved instead of
 * the two of a transport's shared-memory FIFO) and signals with empty
 * messages through the transports. One op uses the channel at a time, in
 * post order (the same on every rank); the fields below the geometry
 * belong to allreduce_shm.c and change under the scheduler's lock. */
/* An op that uses a channel: it holds it, waits for it in post order,
 * or neither. acquired() runs when the channel passes to it from a
 * release (under the scheduler's lock, in the releasing op's callback),
 * unless the channel is out of step (broken): then the user holds it
 * with out_of_step set, and swy_coll_shm_check() fails it. */
typedef struct swy_coll_shm_user {
    struct swy_coll_shm_user *next;
    void (*acquired)(struct swy_coll_shm_user *user);
    int holding, waiting, out_of_step;
} swy_coll_shm_user_t;

/* How alltoallv/shm moves a block (alltoallv_shm.c): copied through the
 * sender's slots (two copies in user space, fast where the ranks' cores
 * share a cache), or pulled by the receiver straight from the sender's
 * sendbuf with process_vm_readv (one copy in the kernel, which holds up
 * where they do not: a virtual machine whose host moves its CPUs apart;
 * docs/performance.md, "coll"). Rank 0 chooses, op by op, from the times
 * of recent ops (every rank's, through the channel), and tells the others
 * through the channel too.
 * SWY_SHM_PULL (rank 0's): auto, never, or always (every block). */
enum {
    SWY_COLL_PULL_AUTO = 0,
    SWY_COLL_PULL_NEVER = 1,
    SWY_COLL_PULL_ALWAYS = 2
};
/* The ways of an op: no block pulls, blocks of at least
 * SWY_COLL_PULL_MIN bytes do, every non-empty block does. */
enum {
    SWY_COLL_WAY_COPY = 0,
    SWY_COLL_WAY_PULL_LARGE = 1,
    SWY_COLL_WAY_PULL_ALL = 2
};
#ifndef SWY_COLL_PULL_MIN
#define SWY_COLL_PULL_MIN ((size_t)256 << 10)
#endif
#define SWY_COLL_PULL_SAMPLES 5
#define SWY_COLL_PULL_TIMES 4 /* ops whose times the channel keeps */
/* Size classes of rank 0's largest block: 256 KiB .. 512 KiB, and so
 * on, doubling; the last holds everything larger. */
#define SWY_COLL_PULL_CLASSES 8
typedef struct {
    double ns_per_byte[2][SWY_COLL_PULL_SAMPLES]; /* copy, pull */
    int samples[2], next_sample[2];
    uint64_t chosen;       /* ways chosen in this class */
    uint64_t burst_at;     /* when the last burst of the other way began */
    int burst_left;        /* ops of that burst still to go */
    int tried;             /* a first burst of the other way went */
    int faster;            /* the way taken, 1: pull; logged on change */
    double best_copy;      /* the lowest median time of copies seen */
} swy_coll_pull_class_t;
typedef struct {
    int mode;              /* SWY_COLL_PULL_*, from SWY_SHM_PULL */
    uint64_t ops;          /* alltoallv ops posted on the channel */
    /* Rank 0 only: per size class, the last few ops' times per byte (ns)
     * each way, and the class of the op that took the channel last. */
    swy_coll_pull_class_t cls[SWY_COLL_PULL_CLASSES];
    int last_class;        /* -1: no block large enough to care */
    int prefer;            /* the way the latest comparison favoured */
    /* Rank 0: each of the last ops' class, way and bytes (op c at
     * c % SWY_COLL_PULL_TIMES), for its time once every rank is done. */
    struct {
        int cls, way, warm; /* warm: the way of the two ops before */
        size_t bytes;
    } recent[SWY_COLL_PULL_TIMES];
    int ways[2];           /* rank 0: the last two ops' ways */
    int announced;         /* SWY_SHM_PULL=always logged */
} swy_coll_pull_t;

/* The control words of the alltoallv channel: in each rank's result slot
 * of parity 0, which alltoallv/shm leaves unused. Rank 0's way[c % 2] is
 * the way of the channel's op c: rank 0 writes way[(c + 1) % 2] when op c
 * takes the channel, before any message of op c, and rank 0 exchanges at
 * least one message with every peer each way per op, so every rank reads
 * it after it was written and before it is written again
 * (alltoallv_shm.c).
 * can_pull: this rank read every peer's memory at setup
 * (swy_coll_shm_probe_pull). taken_ns and left_ns[c % 4]: when this rank's
 * op c took the channel and left it (CLOCK_MONOTONIC, one clock for the
 * host), which rank 0 reads for op c - 2 as op c takes the channel: the
 * time from the first rank's taking it to the last rank's leaving it is
 * the op's time, whoever was slowest. */
typedef struct {
    _Atomic uint32_t way[2];
    _Atomic uint32_t can_pull;
    _Atomic uint64_t taken_ns[SWY_COLL_PULL_TIMES];
    _Atomic uint64_t left_ns[SWY_COLL_PULL_TIMES];
} swy_coll_shm_ctl_t;

/* Memory from swy_mem_alloc (shm_mem.c): the comm's allocations and the
 * peers' that this rank mapped. Its calls lock it; any thread. */
typedef struct swy_coll_mem swy_coll_mem_t;
/* Where a buffer lies in an allocation, as its owner tells the peers
 * through a channel (valid 0: not in one, or not mappable). */
typedef struct {
    uint32_t valid;
    int32_t fd;        /* the memfd, in the owner (pid) */
    int64_t pid;
    uint64_t id, ino;  /* never reused in the owner; the file's inode */
    uint64_t size, offset;
} swy_coll_mem_ref_t;
swy_status_t swy_coll_mem_create(int nranks, swy_coll_mem_t **reg_p);
void swy_coll_mem_destroy(swy_coll_mem_t *reg); /* NULL ok; frees all */
swy_status_t swy_coll_mem_alloc(swy_coll_mem_t *reg, size_t bytes,
                                void **ptr);
swy_status_t swy_coll_mem_free(swy_coll_mem_t *reg, void *ptr);
/* 1 and *ref filled when [ptr, ptr + bytes) lies within one allocation
 * of this rank that peers can map; else 0. reg may be NULL. */
int swy_coll_mem_find(swy_coll_mem_t *reg, const void *ptr, size_t bytes,
                      swy_coll_mem_ref_t *ref);
/* The address in this process of the first of `bytes` bytes that a
 * peer's ref names: mapped on first use, kept for later ops.
 * SWY_ERR_REMOTE when the peer or its allocation is gone. */
swy_status_t swy_coll_mem_map(swy_coll_mem_t *reg, int peer,
                              const swy_coll_mem_ref_t *ref, size_t bytes,
                              char **addr_p);
/* Where each rank announces its frees (a ring of the freed numbers, in
 * shared memory: places[r] for rank r, SWY_COLL_MEM_RING_BYTES each), so
 * that the peers drop their mappings (shm_mem.c). Until attached, peers
 * keep mappings until they need the room. */
#define SWY_COLL_MEM_RING 126
#define SWY_COLL_MEM_RING_BYTES ((size_t)1024)
swy_status_t swy_coll_mem_attach(swy_coll_mem_t *reg, int rank,
                                 char *const *places);
/* At setup: an allocation holding a known word (free it with
 * swy_coll_mem_free once every peer probed), and whether this rank can
 * map a peer's and read that word (logs why not). */
swy_status_t swy_coll_mem_probe_make(swy_coll_mem_t *reg, void **probe,
                                     swy_coll_mem_ref_t *ref);
int swy_coll_mem_probe_peer(swy_coll_mem_t *reg, int peer,
                            const swy_coll_mem_ref_t *ref);

/* Each rank's descriptor page at the end of a channel's segment
 * (swy_coll_shm_desc): allreduce/shm tells its peers there where its
 * buffers lie when they are in swy_mem_alloc memory. */
#define SWY_COLL_SHM_DESC_BYTES ((size_t)4096)
/* Where, in the allreduce channel's descriptor page, the ring of freed
 * swy_mem_alloc numbers lies (swy_coll_mem_attach). */
#define SWY_COLL_SHM_DESC_RING_AT ((size_t)2048)

typedef struct swy_coll_shm {
    char *base;
    size_t bytes, slot_bytes, region_bytes;
    int rank, nranks;
    /* The comm's swy_mem_alloc memory; mem_ok: every rank can map every
     * other's (agreed at init), else ops ignore it. */
    swy_coll_mem_t *mem;
    int mem_ok;
    uint64_t ops; /* ops that took this channel (allreduce/shm) */
    /* The CPUs all ranks may run on, together, are fewer than the ranks
     * (agreed at init; ranks pinned to a core each do not share):
     * alltoallv's automatic choice, and the sizes from which the shm
     * algorithms write recvbuf with non-temporal stores. */
    int ranks_share_cpus;
    swy_coll_shm_user_t *holder, *wait_head, *wait_tail;
    int broken;            /* an op failed while it held the channel */
    swy_coll_pull_t pull;  /* alltoallv/shm's choice of copy or pull */
} swy_coll_shm_t;

/* Hold the channel at once and may use it (returns 1), or wait in line
 * or hold an out-of-step channel (0). */
int swy_coll_shm_enqueue(swy_coll_shm_t *shm, swy_coll_shm_user_t *user);
/* SWY_OK, or SWY_ERR_TRANSPORT naming the algorithm (`name`, e.g.
 * "allreduce/shm") when the user holds an out-of-step channel. */
swy_status_t swy_coll_shm_check(const swy_coll_shm_user_t *user,
                                const char *name);
/* The user is done with the channel (or fails: broken marks the rounds
 * out of step between ranks, for the ops after it): leave the line, or
 * pass the channel on to the next user, whose acquired() runs now. */
void swy_coll_shm_leave(swy_coll_shm_t *shm, swy_coll_shm_user_t *user,
                        int broken);

/* Most ranks of a channel: the segment is 2 W (W + 1) slots. */
#define SWY_COLL_SHM_MAX_RANKS 32
/* The shared-memory channels of a comm whose nranks ranks all share this
 * host (shm_setup.c; none where they do not, or SWY_SHM_CHANNEL=0): one
 * for allreduce, one for alltoallv, made over the control plane `boot`
 * and carrying whether the ranks can map each other's swy_mem_alloc
 * memory (mem). Collective. Sets *shm_p and *shm_a2a_p, each NULL when
 * that channel could not be made (a note in the log); fails only when
 * the control plane does, and then what it set is the caller's to
 * destroy. */
struct swy_boot;
struct swy_topo;
swy_status_t swy_coll_shm_setup(struct swy_boot *boot,
                                const struct swy_topo *topo, int rank,
                                int nranks, double timeout_s,
                                swy_coll_mem_t *mem, swy_coll_shm_t **shm_p,
                                swy_coll_shm_t **shm_a2a_p);
/* Rank 0 creates the segment (name_out: its name, for the others) of the
 * size for nranks, backed by reserved pages (posix_fallocate: a full
 * /dev/shm fails here, not as SIGBUS at first touch); the others attach
 * by name; rank 0 unlinks the name once every rank attached (or failed
 * to). Errors are logged and returned; the caller then runs without. */
swy_status_t swy_coll_shm_create(int rank, int nranks, char *name_out,
                                 size_t name_len, swy_coll_shm_t **shm_p);
swy_status_t swy_coll_shm_attach(const char *name, int rank, int nranks,
                                 swy_coll_shm_t **shm_p);
void swy_coll_shm_unlink(const char *name);
/* Whether this process can read the peers' memory with process_vm_readv
 * (pids[r] and addrs[r]: a peer's pid and the address of a word there
 * that holds SWY_COLL_PULL_PROBE): sets this rank's can_pull, logs why
 * not. Peers must have allowed it first (swy_coll_shm_allow_pull). */
#define SWY_COLL_PULL_PROBE UINT64_C(0x53575950554c4c21)
void swy_coll_shm_probe_pull(swy_coll_shm_t *shm, const int64_t *pids,
                             const uint64_t *addrs);
/* Let processes of this user read this one's memory where Yama would
 * stop them (PR_SET_PTRACER, as UCX's CMA transport does). */
void swy_coll_shm_allow_pull(void);
static inline swy_coll_shm_ctl_t *swy_coll_shm_ctl(const swy_coll_shm_t *shm,
                                                   int owner);
void swy_coll_shm_destroy(swy_coll_shm_t *shm); /* NULL ok */
static inline char *swy_coll_shm_in_slot(const swy_coll_shm_t *shm,
                                         int owner, int parity, int dest)
{
    return shm->base + (size_t)owner * shm->region_bytes +
           ((size_t)parity * (size_t)(shm->nranks + 1) + (size_t)dest) *
               shm->slot_bytes;
}
static inline char *swy_coll_shm_out_slot(const swy_coll_shm_t *shm,
                                          int owner, int parity)
{
    return swy_coll_shm_in_slot(shm, owner, parity, shm->nranks);
}

static inline char *swy_coll_shm_desc(const swy_coll_shm_t *shm, int owner)
{
    return shm->base + (size_t)shm->nranks * shm->region_bytes +
           (size_t)owner * SWY_COLL_SHM_DESC_BYTES;
}

static inline swy_coll_shm_ctl_t *swy_coll_shm_ctl(const swy_coll_shm_t *shm,
                                                   int owner)
{
    return (swy_coll_shm_ctl_t *)swy_coll_shm_out_slot(shm, owner, 0);
}

/* Scratch memory of the algorithms (scratch.c): page-aligned blocks kept
 * warm between ops, since fresh pages cost a fault each. put accepts
 * NULL; the size given to put must be the one asked of get. */
void *swy_coll_scratch_get(size_t bytes);
void swy_coll_scratch_put(void *ptr, size_t bytes);

/* Lays out a scratch slot of `bytes` that receives data which the sender
 * sends from the place `mirror` has in this rank's own buffer: the slot
 * gets mirror's page offset (ranks allocate their buffers alike, so the
 * sender's copy sits there too). A large copy whose destination lies a
 * little past its source modulo the page size is slow: on some x86 CPUs
 * rep movsb (the kernel's copy in process_vm_readv, and glibc's memcpy
 * from 4 KiB to about the L2 size) is an order of magnitude slower with
 * the destination 1 to 31 bytes past (util/copy.h), as it is from a
 * page-aligned buffer into malloc's scratch, 16 bytes into a page
 * (docs/performance.md, "coll", points to the runs). The slot starts at
 * the first such offset from *end, which moves past it; a slot below
 * 4 KiB only at the next 64-byte line (no padding of up to a page for
 * it). -1 on overflow. */
int swy_coll_slot_place(size_t *end, size_t bytes, const void *mirror,
                        size_t *at);

const swy_coll_algo_t *swy_coll_algo(swy_coll_kind_t kind);
/* For an algorithm's create() that reads or writes the user's buffers on
 * the host (reduces them, or copies through scratch): SWY_OK for host
 * buffers, else SWY_ERR_UNSUPPORTED naming the algorithm (`name`) and
 * the memory type. */
swy_status_t swy_coll_host_only(const swy_coll_args_t *args,
                                const char *name);

/* The start of every algorithm's create() (create.c), so that the
 * checks and the state's common fields are written once. Each
 * algorithm's struct swy_coll_state has the members args, rank, nranks
 * and dsize. SWY_COLL_CREATE_BEGIN refuses device buffers where mem is
 * SWY_COLL_HOST_ONLY (swy_coll_host_only), and an op whose `steps`
 * (tag-consuming steps per chunk; 0: not counted) exceed the tags of an
 * op; then allocates the zeroed state `st` and fills those members. On
 * failure it returns the status, with a message naming the algorithm,
 * from the create() it is used in. */
typedef enum {
    SWY_COLL_ANY_MEM = 0,  /* host or device buffers */
    SWY_COLL_HOST_ONLY = 1 /* host buffers only */
} swy_coll_mem_need_t;
swy_status_t swy_coll_create_check(const char *name,
                                   const swy_coll_args_t *args, int nranks,
                                   swy_coll_mem_need_t mem, size_t steps);
void *swy_coll_state_alloc(const char *name, size_t bytes);
#define SWY_COLL_CREATE_BEGIN(st, name, args_, rank_, nranks_, mem, steps)  \
    do {                                                                    \
        SWY_CHECK(swy_coll_create_check((name), (args_), (nranks_), (mem),  \
                                        (steps)));                          \
        if (((st) = swy_coll_state_alloc((name), sizeof(*(st)))) == NULL)   \
            return SWY_ERR_NO_MEMORY;                                       \
        (st)->args = *(args_);                                              \
        (st)->rank = (rank_);                                               \
        (st)->nranks = (nranks_);                                           \
        (st)->dsize = swy_dtype_size((args_)->dtype);                       \
    } while (0)

/* An algorithm's cookie for a transfer (xfer.cookie, handed back with it
 * when it completes), packed alike by every algorithm: a phase (0..3),
 * a step, peer or message kind (below 2^22) and a chunk or round (below
 * 2^40). */
#define SWY_COLL_COOKIE_CHUNK_BITS 40
static inline uint64_t swy_coll_cookie(int phase, int step, size_t chunk)
{
    return ((uint64_t)phase << 62) |
           ((uint64_t)step << SWY_COLL_COOKIE_CHUNK_BITS) | (uint64_t)chunk;
}
static inline int swy_coll_cookie_phase(uint64_t cookie)
{
    return (int)(cookie >> 62);
}
static inline int swy_coll_cookie_step(uint64_t cookie)
{
    return (int)((cookie >> SWY_COLL_COOKIE_CHUNK_BITS) & 0x3fffff);
}
static inline size_t swy_coll_cookie_chunk(uint64_t cookie)
{
    return (size_t)(cookie &
                    ((UINT64_C(1) << SWY_COLL_COOKIE_CHUNK_BITS) - 1));
}
/* The allreduce algorithm an op runs when `wanted` is asked for: AUTO
 * applies the rule above; an algorithm that cannot run this op (device
 * buffers, one rank, a count below the ranks, halving/doubling on a
 * number of ranks that is no power of two) gives way to the ring. A
 * function of the op's arguments and nranks only. */
swy_coll_ar_algo_t swy_coll_allreduce_choose(const swy_coll_args_t *args,
                                             swy_coll_ar_algo_t wanted,
                                             int nranks);
/* SWY_ALLREDUCE_ALGO as this process reads it now (AUTO, with a warning,
 * for a value it does not know). */
swy_coll_ar_algo_t swy_coll_allreduce_setting(void);
const char *swy_coll_allreduce_algo_name(swy_coll_ar_algo_t algo);
/* The algorithm for this op: the kind's, and for allreduce the one
 * swy_coll_allreduce_choose() gives for args->allreduce_algo. The header
 * check makes the arguments equal on every rank. */
const swy_coll_algo_t *swy_coll_algo_for(const swy_coll_args_t *args,
                                         int nranks);
/* Resolve this rank's settings (SWY_ALLREDUCE_ALGO, SWY_ALLTOALLV_ALGO)
 * into args (allreduce_algo, alltoallv_algo: the op header carries them,
 * so ranks that chose differently fail rather than wait) and return the
 * algorithm the op runs (swy_coll_algo_for); NULL for an unknown kind.
 * args' shm, shm_a2a, mem and multi_host must be set. */
const swy_coll_algo_t *swy_coll_algo_choose(swy_coll_args_t *args,
                                            int nranks);
const char *swy_coll_kind_name(swy_coll_kind_t kind);

/* Header peers of an op: fills peers (capacity nranks), returns count. */
int swy_coll_header_peers(const swy_coll_args_t *args, int rank, int nranks,
                          int *peers);
/* Peers the op moves data of args->mem with (its own rank included when
 * it sends to itself): fills peers (capacity nranks), returns the count.
 * What the caller checks for a transport of that memory type before
 * posting; an allreduce of device buffers stages through host memory and
 * moves no device memory between ranks. */
int swy_coll_data_peers(const swy_coll_args_t *args, int rank, int nranks,
                        int *peers);
void swy_coll_header_make(const swy_coll_args_t *args, uint32_t seq, int peer,
                          swy_coll_header_t *hdr);
/* SWY_OK or SWY_ERR_MISMATCH with msg naming the op, the peer and both
 * values. */
swy_status_t swy_coll_header_check(const swy_coll_args_t *args, uint32_t seq,
                                   const char *op_name, int rank, int peer,
                                   const swy_coll_header_t *hdr, char *msg,
                                   size_t msg_len);

/* Device collectives the plugin runs (offload.c). An offloaded op is a
 * plan of groups: group g is calls[first[g] .. first[g + 1]), one launch
 * of swy_devcoll_v1 moving bytes[g] bytes of this rank's (what its sends
 * and reductions read), and the groups go in order on every rank. */
typedef struct {
    int ngroups, ncalls;
    int *first;   /* [ngroups + 1] */
    size_t *bytes; /* [ngroups] */
    swy_devcoll_call_v1_t *calls;
} swy_coll_offload_plan_t;
/* Can the plugin run this kind (allreduce, broadcast, allgather,
 * reduce_scatter, alltoallv)? */
int swy_coll_offloadable(swy_coll_kind_t kind);
/* The algorithm of an offloaded op: create() makes the plan (cut at the
 * op's partition size); it posts no transfer. */
extern const swy_coll_algo_t swy_coll_offload;
const swy_coll_offload_plan_t *
swy_coll_offload_plan(const swy_coll_state_t *state);

/* swy_dtype_size (element size, 0 if invalid) is public: switchyard.h. */
const char *swy_dtype_name(swy_dtype_t dtype);
const char *swy_redop_name(swy_redop_t op);
int swy_dtype_valid(int dtype);
int swy_redop_valid(int op);

/* dst[i] = a[i] op b[i] for count elements (AVG accumulates a sum); dst
 * may be a or b, but may not overlap either otherwise. */
void swy_coll_reduce(void *dst, const void *src_a, const void *src_b,
                     size_t count, swy_dtype_t dtype, swy_redop_t op);
/* dst[i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... op
 * srcs[nsrcs-1][i]: the same bits as that chain of swy_coll_reduce calls,
 * in one pass per block (one load per source and one store per element
 * for up to four sources, instead of two loads and a store per pair;
 * each further source adds a pass over the block while it is in L1).
 * dst may be any of the sources; it may not overlap one otherwise.
 * nsrcs = 1 copies, 0 does nothing. */
void swy_coll_reduce_n(void *dst, const void *const *srcs, int nsrcs,
                       size_t count, swy_dtype_t dtype, swy_redop_t op);
/* dst[i] /= divisor (the last step of AVG; integer division for ints). */
void swy_coll_scale_avg(void *dst, size_t count, swy_dtype_t dtype,
                        int divisor);

/* First element of segment seg when count elements are cut into nranks
 * near-equal segments (the first count % nranks one element longer);
 * seg = nranks gives count. The allreduce algorithms share this cut. */
static inline size_t swy_coll_seg_offset(size_t count, int nranks, int seg)
{
    size_t base = count / (size_t)nranks, extra = count % (size_t)nranks;
    return base * (size_t)seg + ((size_t)seg < extra ? (size_t)seg : extra);
}

/* Elements per chunk for a partition, at least 1, and large enough that
 * max_elems fits in max_chunks chunks. */
size_t swy_coll_chunk_elems(size_t partition_bytes, size_t dsize,
                            size_t max_elems, size_t max_chunks);

/* The largest chunk of an algorithm whose steps depend on each other
 * (allreduce, allgather, broadcast): a chunk moves on to its next step as
 * soon as it landed, so a partition-sized chunk (a user's setting, or the
 * automatic one across fast hosts: up to 32 MiB) would serialize the
 * steps, and a received chunk this size is still in cache when the
 * reduction reads it. 256 KiB chunks about halved the ring allreduce's
 * time against whole segments on one host (docs/performance.md, "coll",
 * points to the runs). */
#define SWY_COLL_PIPELINE_BYTES ((size_t)256 << 10)

/* Alltoallv's partition when every rank is on one host and the user left
 * SWY_PARTITION_BYTES to auto (the scheduler applies it). Its chunks have
 * no step to pipeline with, and above SWY_UCX_LOCAL_EAGER UCX moves them
 * by one copy (CMA rendezvous) instead of two through its shared-memory
 * FIFO: 4 MiB chunks beat 256 KiB ones, and Open MPI, where each rank
 * has a core (docs/performance.md, "coll", points to the runs). */
#define SWY_COLL_BULK_BYTES ((size_t)4 << 20)
/* The same for device memory, where every chunk costs a transport call
 * and a stream wait: fewer, larger chunks cut swy-train --device cuda's
 * all-to-all time per step many times over (docs/performance.md,
 * "gpu"). */
#define SWY_COLL_BULK_DEVICE_BYTES ((size_t)32 << 20)

/* swy_coll_chunk_elems() for such an algorithm: partition_bytes capped at
 * SWY_COLL_PIPELINE_BYTES. Ranks agree on partition_bytes (op header), so
 * they agree on the chunks. */
size_t swy_coll_pipeline_chunk_elems(size_t partition_bytes, size_t dsize,
                                     size_t max_elems, size_t max_chunks);

/* fp16/bf16 <-> float: util/half.h (lib/moe converts rows too). */

#endif
