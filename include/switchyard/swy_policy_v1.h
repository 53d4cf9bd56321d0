/**
 * @file swy_policy_v1.h
 * @brief Scheduling policy plugin ABI, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_policy_v2.h) with a new symbol.
 *
 * A policy decides, per peer link, in which order ready send micro-ops
 * leave (compare) and whether the next one may leave now (admit). Built-in
 * policies (fifo, fair, lina, credit) use this same interface. A plugin is
 * `swy-policy-<name>.so` exporting `const swy_policy_v1_t
 * swy_policy_plugin_v1`, selected with SWY_POLICY=<name>. It does not link
 * libswitchyard.
 *
 * The rule every policy must keep (the scheduler relies on it to stay
 * free of deadlock, whatever the mix of ops): a micro-op of the oldest
 * incomplete op (op_seq == link->oldest_op_seq) at the head of its link's
 * queue gets SWY_POLICY_ISSUE when nothing is in flight on that link
 * (link->inflight_bytes == 0). compare() must be a strict weak order.
 *
 * Threading: called under the communicator's lock, never concurrently.
 */
#ifndef SWY_POLICY_V1_H
#define SWY_POLICY_V1_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard.h"
#include "swy_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_POLICY_ABI_V1 1u
#define SWY_POLICY_PLUGIN_SYMBOL_V1 "swy_policy_plugin_v1"

/** A ready send micro-op, written by the host for one call. */
typedef struct {
    uint32_t struct_size;     /**< the host's sizeof: a plugin reads a
                                   field past it as absent (zero) */
    int priority;             /**< of its op; higher first */
    int64_t order;            /**< tie-break within a priority, lower first */
    uint32_t op_seq;          /**< op sequence number (submission order) */
    uint64_t ready_index;     /**< order in which micro-ops became ready */
    uint64_t ready_ns;        /**< monotonic time it became ready */
    size_t bytes;             /**< payload */
    int peer;                 /**< destination rank */
    size_t op_inflight_bytes; /**< bytes of its op in flight on this link */
    uint64_t fair_key;        /**< start tag of start-time fair queueing
                                   among the ops sharing this link: order
                                   by it to give each op an equal share */
} swy_policy_uop_v1_t;

/** The link of a candidate micro-op, seen from that candidate, written
 *  by the host for one call. */
typedef struct {
    uint32_t struct_size;        /**< the host's sizeof, as above */
    int peer;
    size_t inflight_bytes;       /**< all priorities */
    size_t inflight_le_bytes;    /**< priority <= the candidate's */
    size_t inflight_ge_bytes;    /**< priority >= the candidate's */
    int higher_pending;          /**< an op of higher priority than the
                                      candidate's is incomplete on the comm */
    int phase;                   /**< last swy_phase_hint() */
    int max_priority_seen;       /**< highest priority ever posted on the
                                      comm: lower ones may be preempted */
    uint32_t oldest_op_seq;      /**< oldest incomplete op on the comm */
    size_t window_bytes;         /**< SWY_WINDOW_BYTES */
    size_t credit_bytes;         /**< SWY_CREDIT_BYTES */
    size_t partition_bytes;      /**< SWY_PARTITION_BYTES in effect */
    uint64_t now_ns;             /**< monotonic time of the decision */
    /** The links that share this one's way out of the rank: for a peer on
     *  another host, every link of this rank to another host (they leave
     *  through one network uplink, where a micro-op waits behind all the
     *  others queued there); for a peer on this host, this link alone. */
    size_t uplink_inflight_bytes;    /**< all priorities */
    size_t uplink_inflight_le_bytes; /**< priority <= the candidate's */
    /** About 4 ms of this link's own bandwidth (not its share of an
     *  uplink): enough in flight to keep the link busy while the
     *  receiver answers. (Added at the end of v1.) */
    size_t burst_bytes;
} swy_policy_link_v1_t;

/** admit() answers. */
enum {
    SWY_POLICY_STOP = -1, /**< issue nothing more on this link now */
    SWY_POLICY_SKIP = 0,  /**< not this one; consider the next in order */
    SWY_POLICY_ISSUE = 1  /**< issue it now */
};

/** What the host offers a policy. */
typedef struct {
    uint32_t abi_version; /**< SWY_POLICY_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_policy_host_v1_t) */
    void (*log)(swy_log_level_t level, const char *subsys, const char *fmt,
                ...) __attribute__((format(printf, 3, 4)));
    /** SWY_* configuration value (with default), NULL if unknown. */
    const char *(*config_get)(const char *name);
    int rank, nranks;
} swy_policy_host_v1_t;

typedef struct swy_policy_v1 {
    uint32_t abi_version; /**< SWY_POLICY_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_policy_v1_t) */
    const char *name;
    const char *description;
    swy_status_t (*init)(const swy_policy_host_v1_t *host, void **ctx_p);
    /** < 0: a leaves before b; > 0: after; 0: keep arrival order. */
    int (*compare)(void *ctx, const swy_policy_uop_v1_t *a,
                   const swy_policy_uop_v1_t *b);
    /** May this micro-op leave now? (see the rules above) */
    int (*admit)(void *ctx, const swy_policy_link_v1_t *link,
                 const swy_policy_uop_v1_t *uop);
    void (*finalize)(void *ctx);
} swy_policy_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_POLICY_V1_H */
