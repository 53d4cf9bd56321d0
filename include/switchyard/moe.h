/**
 * @file moe.h
 * @brief Switchyard expert-parallel exchange: routing, dispatch and combine
 *        of Mixture-of-Experts tokens over a communicator, with their
 *        backward passes, pipelining and per-expert load counts.
 *
 * The framework keeps its own gate and experts; Switchyard moves the rows.
 * Shape of one layer (forward):
 *
 *   swy_moe_route(plan, topk_idx, S, &route);        count exchange
 *   swy_moe_dispatch(route, tokens, expert_in, ...); tokens -> experts
 *   ... expert e computes on its rows of expert_in into expert_out ...
 *   swy_moe_combine(route, expert_out, topk_w, tokens_out, ...);
 *
 * and backward: swy_moe_combine_backward() (grad of tokens_out -> grad of
 * expert_out and of topk_w), the framework's expert backward, then
 * swy_moe_dispatch_backward() (grad of expert_in -> grad of tokens).
 *
 * **Experts and packing.** A plan with `experts_per_rank = E_loc` and
 * `packing_factor = p` places `n_local = E_loc * p` experts on every rank;
 * the model has `E = W * E_loc * p` experts in total (W = ranks) — Lina's
 * expert packing read as "the model is built with p times more, smaller
 * experts", so the number of experts per rank, and thus the compute per
 * pipelined chunk, grows with p while no expert is replicated. Global
 * expert g lives on rank `g / n_local` as local expert `g % n_local`;
 * topk_idx values are global expert ids in 0..E-1, or -1 (dropped).
 *
 * **Layouts** (all in rows of `hidden` elements):
 *  - token side: `tokens`, `tokens_out`, `grad_tokens` are [S][H];
 *    `topk_idx`, `topk_w`, `grad_topk_w` are [S][k].
 *  - expert side: `expert_in`, `expert_out`, `grad_expert_in`,
 *    `grad_expert_out` are [recv_rows][H], expert-major (FastMoE): local
 *    expert 0's rows, then expert 1's, ...; within an expert, the rows of
 *    pipeline chunk 0, then chunk 1, ...; within a chunk, by source rank;
 *    within a source rank, in the sender's (token, slot) order. With
 *    pipeline_degree 1 this is "expert, then source rank". So every
 *    expert's rows are contiguous, and so is every (expert, chunk) piece.
 *  - swy_moe_route_layout() gives the offsets.
 *
 * **Pipelining.** With pipeline_degree d > 1, every (source rank, expert)
 * block of rows is cut into d near-equal parts (part j holds rows
 * [n*j/d, n*(j+1)/d) of a block of n rows) and each exchange is posted as d
 * all-to-alls, chunk j with `order = attr->order + j`, so expert compute on
 * chunk 0 can start as soon as it lands while later chunks travel (Lina,
 * FasterMoE). Forward-direction exchanges (dispatch, combine backward)
 * return after posting with SWY_MOE_ASYNC and are completed chunk by chunk
 * with swy_moe_wait_chunk(); reverse-direction exchanges (combine, dispatch
 * backward) are posted chunk by chunk with the *_post_chunk() calls as the
 * expert finishes each chunk, and completed with the *_finish() calls.
 * One exchange per direction may be in flight on a route, so a combine's
 * chunk j may be posted once the dispatch's chunk j is complete while
 * later dispatch chunks still travel (likewise dispatch backward after
 * combine backward). Blocking calls need the route idle.
 *
 * **Priorities.** Every exchange, including route's count exchange, runs
 * at SWY_PRIO_HIGH unless @c attr sets a priority. Calling
 * swy_phase_hint(comm, SWY_PHASE_A2A_IMMINENT) before a layer's exchanges
 * is the framework's choice.
 *
 * **Collective calls.** swy_moe_plan_create(), swy_moe_route() and every
 * exchange are collective over the plan's communicator: all ranks call
 * them in the same order (one posted all-to-all per chunk). Data-dependent
 * errors (configs that differ, a top-k index out of range on one rank) are
 * exchanged, so every rank returns the error and none hangs. Local
 * argument errors of an exchange (a NULL buffer) are found before anything
 * is posted and are returned on that rank only; its peers then fail with
 * SWY_ERR_TIMEOUT after `SWY_TIMEOUT_S`.
 *
 * **Errors.** Every call returns a swy_status_t; the detail of a failure
 * is in swy_last_error(NULL) on the calling thread (it also holds the
 * detail of a failed underlying collective).
 *
 * **Threads and ownership.** A plan is read-only after creation and a
 * route is used by one thread at a time; calls that post collectives must
 * reach the communicator in the same order on every rank, so a framework
 * that routes from several threads serializes them. The plan must outlive
 * its routes and the communicator must outlive the plan. Buffers
 * passed to a posted exchange are borrowed until it completes (the last
 * swy_moe_wait_chunk() or the *_finish() call). Rows are of
 * SWY_FLOAT32, SWY_FLOAT16, SWY_BFLOAT16 or SWY_FLOAT64 (the plan's
 * dtype); the gate weights topk_w and their gradient grad_topk_w are
 * float arrays, double arrays with SWY_FLOAT64 rows.
 *
 * **Device rows.** A plan made with `rows_mem = SWY_MOE_ROWS_DEVICE` takes
 * device memory (CUDA) for every row buffer, topk_w and grad_topk_w, and
 * keeps its own rows there: packing, reordering and the weighted sums run
 * as kernels of the nccl plugin (swy_devmoe_v1.h), the all-to-alls move
 * device memory, and nothing is staged through the host. Its dtype is
 * SWY_FLOAT32 or SWY_BFLOAT16. topk_idx may be host or device memory; a
 * device one is copied to the host once per route (S*k ints), as FastMoE
 * brings its expert counts to the host. Ordering is the stream's
 * (`stream` of the config, NULL = the legacy default stream; an attr's
 * stream must be NULL or the same): a call reads its inputs after the
 * work queued on the stream before it, and its outputs (expert_in after
 * swy_moe_wait_chunk(), tokens_out, grad_topk_w, grad_expert_out,
 * grad_tokens) are written by work it queues on the stream, so kernels
 * the framework queues there afterwards see them without a host wait
 * (the host wait is the call itself: posting an exchange waits for the
 * stream to drain, and the *_finish() and swy_moe_wait_chunk() calls
 * for the all-to-all). A buffer in the other kind of memory than the
 * plan's rows is SWY_ERR_INVALID_ARG. Without the nccl plugin, a GPU or
 * the plugin's swy_devmoe_plugin_v1, creating a device plan is
 * SWY_ERR_UNSUPPORTED.
 */
#ifndef SWITCHYARD_MOE_H
#define SWITCHYARD_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct swy_moe_plan *swy_moe_plan_t;
typedef struct swy_moe_route *swy_moe_route_t;

/** Plan configuration; identical on every rank (checked). */
typedef struct {
    size_t struct_size;     /**< sizeof(swy_moe_config_t) */
    int experts_per_rank;   /**< E_loc >= 1, before packing */
    int hidden;             /**< H >= 1: elements per token row */
    swy_dtype_t dtype;      /**< row element type: SWY_FLOAT32,
                                 SWY_FLOAT16 or SWY_BFLOAT16 (combine and
                                 the backward sums run in fp32 and round
                                 once; topk_w and its gradient are float),
                                 or SWY_FLOAT64 (sums in fp64; topk_w and
                                 its gradient are double) */
    int top_k;              /**< k, 1..E: slots per token */
    double capacity_factor; /**< the gate's capacity factor; informational
                                 (>= 0, 0 = none); not checked across
                                 ranks */
    int pipeline_degree;    /**< d >= 1 chunks per exchange */
    int packing_factor;     /**< p >= 1: experts per rank = E_loc * p */
    int rows_mem;           /**< where every row, topk_w and grad_topk_w
                                 lie: SWY_MOE_ROWS_HOST (default) or
                                 SWY_MOE_ROWS_DEVICE (see "Device rows"
                                 above; checked across ranks) */
    void *stream;           /**< device plans: the cudaStream_t the plan's
                                 work is ordered on (NULL: the legacy
                                 default stream); host plans: NULL.
                                 Not checked across ranks. */
} swy_moe_config_t;

/** Values of swy_moe_config_t.rows_mem. */
enum { SWY_MOE_ROWS_HOST = 0, SWY_MOE_ROWS_DEVICE = 1 };

/** A config with every field at its default but hidden (set it). */
#define SWY_MOE_CONFIG_INIT                                                 \
    {sizeof(swy_moe_config_t), 1, 0, SWY_FLOAT32, 1, 0.0, 1, 1,             \
     SWY_MOE_ROWS_HOST, NULL}

/** Flags of swy_moe_dispatch() and swy_moe_combine_backward(). */
enum {
    SWY_MOE_BLOCKING = 0, /**< return when every chunk has landed */
    SWY_MOE_ASYNC = 1     /**< return once posted; complete each chunk with
                               swy_moe_wait_chunk() */
};

/**
 * Where the rows of a route lie. Pointers stay valid until the route is
 * destroyed. Offsets and counts are in rows.
 */
typedef struct {
    size_t struct_size;     /**< set by the caller to sizeof */
    int nranks;             /**< W */
    int num_local_experts;  /**< n_local = experts_per_rank*packing_factor */
    int num_experts;        /**< E = W * n_local */
    int first_expert;       /**< global id of local expert 0 */
    int pipeline_degree;    /**< d */
    int hidden;             /**< H */
    int num_tokens;         /**< S of this route */
    int top_k;              /**< k */
    int64_t send_rows;      /**< valid slots of this rank (rows sent) */
    int64_t recv_rows;      /**< rows of the expert-side buffers */
    /** [n_local + 1]: local expert e's rows are
     *  [expert_offset[e], expert_offset[e+1]). */
    const int64_t *expert_offset;
    /** [n_local * (d + 1)]: chunk j of local expert e is rows
     *  [chunk_offset[e*(d+1)+j], chunk_offset[e*(d+1)+j+1]). */
    const int64_t *chunk_offset;
    /** [n_local * d * W + 1]: rows from source rank r in chunk j of local
     *  expert e are [block_offset[i], block_offset[i+1]) with
     *  i = (e*d + j)*W + r. */
    const int64_t *block_offset;
    /** [S * k]: for slot (t, s), the index among this rank's sent rows
     *  (rank-major, then chunk, then expert, then token order), or -1 when
     *  dropped. Two slots never share a row. */
    const int64_t *slot_row;
} swy_moe_layout_t;

/**
 * @brief Create a plan for one MoE layer shape. Collective: allgathers the
 *        config and checks that every rank has the same experts_per_rank,
 *        hidden, dtype, top_k, pipeline_degree and packing_factor.
 * @param comm   The communicator; borrowed for the plan's lifetime.
 * @param cfg    The configuration; copied.
 * @param plan_p Output, set only on success.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL argument, struct_size below
 *         the first release's (swy_common.h's rule),
 *         a field out of range — on any rank, reported on every rank with
 *         the rank, field and value); SWY_ERR_UNSUPPORTED (dtype other
 *         than SWY_FLOAT32, SWY_FLOAT16, SWY_BFLOAT16, SWY_FLOAT64); SWY_ERR_MISMATCH (ranks disagree: the message
 *         names the field, rank 0's value and the other rank's value);
 *         SWY_ERR_NO_MEMORY; errors of swy_allgather().
 */
SWY_EXPORT swy_status_t swy_moe_plan_create(swy_comm_t comm,
                                            const swy_moe_config_t *cfg,
                                            swy_moe_plan_t *plan_p);

/** @brief Destroy a plan (after its routes, before its communicator:
 *         the plan frees the row buffers it kept). Local. Accepts NULL. */
SWY_EXPORT void swy_moe_plan_destroy(swy_moe_plan_t plan);

/**
 * @brief Route one batch: count rows per (destination rank, expert),
 *        exchange the counts at high priority (FastMoE's local and global
 *        expert counts), and build the send and receive layouts.
 *        Collective. A rank whose topk_idx is invalid still takes part in
 *        the count exchange and flags the error, so every rank fails.
 * @param plan     The plan.
 * @param topk_idx [S][k] global expert ids, -1 = dropped; copied as counts
 *                 and layout, not kept.
 * @param S        Tokens on this rank (>= 0; ranks may differ).
 * @param route_p  Output, set only on success.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (an index out of range on this or
 *         another rank: the message names the rank, token, slot and value;
 *         S < 0; topk_idx NULL with S > 0); SWY_ERR_NO_MEMORY; errors of
 *         swy_alltoallv() (SWY_ERR_MISMATCH, SWY_ERR_TIMEOUT, ...).
 */
SWY_EXPORT swy_status_t swy_moe_route(swy_moe_plan_t plan,
                                      const int *topk_idx, int S,
                                      swy_moe_route_t *route_p);

/** @brief Destroy a route. Local. Accepts NULL. An exchange still in
 *         flight is waited for first. */
SWY_EXPORT void swy_moe_route_destroy(swy_moe_route_t route);

/**
 * @brief Describe the route's layout (see swy_moe_layout_t). Local.
 * @param layout struct_size set to sizeof(swy_moe_layout_t); the fields
 *               it covers are written (swy_common.h's rule).
 * @return SWY_OK, SWY_ERR_INVALID_ARG.
 */
SWY_EXPORT swy_status_t swy_moe_route_layout(swy_moe_route_t route,
                                             swy_moe_layout_t *layout);

/**
 * @brief Per-expert load of this batch, from the exchanged counts. Local.
 * @param sent_per_expert NULL, or [E]: rows this rank sent to each global
 *                        expert (sum over ranks = the expert's load).
 * @param recv_per_local_expert NULL, or [n_local]: rows each local expert
 *                        received from all ranks.
 * @return SWY_OK, SWY_ERR_INVALID_ARG (route NULL).
 */
SWY_EXPORT swy_status_t swy_moe_route_counts(swy_moe_route_t route,
                                             int64_t *sent_per_expert,
                                             int64_t *recv_per_local_expert);

/**
 * @brief Dispatch: send every valid slot's token row to its expert.
 *        Row tokens[t] is copied once per valid slot. Collective.
 * @param tokens    [S][H] input rows; read during the call only.
 * @param expert_in [recv_rows][H] output, expert-major; borrowed until the
 *                  last chunk is complete.
 * @param attr      NULL or attributes (priority default high; chunk j is
 *                  posted with order attr->order + j).
 * @param flags     SWY_MOE_BLOCKING, or SWY_MOE_ASYNC: return once posted;
 *                  call swy_moe_wait_chunk(route, j) for each j before
 *                  reading chunk j of expert_in.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL buffer with rows to move, bad
 *         flags, an exchange still in flight on the route); errors of
 *         swy_alltoallv().
 */
SWY_EXPORT swy_status_t swy_moe_dispatch(swy_moe_route_t route,
                                         const void *tokens, void *expert_in,
                                         const swy_op_attr_t *attr,
                                         int flags);

/**
 * @brief Complete chunk @p chunk of the dispatch (or combine backward) in
 *        flight: wait for it and place its rows in the expert-side buffer.
 *        Chunks may be completed in any order; the exchange ends when all
 *        are. Completing a chunk twice is a no-op.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (no such exchange or chunk); the
 *         chunk's all-to-all failure (the exchange is then over: the other
 *         chunks are waited for and dropped).
 */
SWY_EXPORT swy_status_t swy_moe_wait_chunk(swy_moe_route_t route, int chunk);

/**
 * @brief Test whether chunk @p chunk has landed, without completing it
 *        (call swy_moe_wait_chunk() to place it; it will not block).
 * @param done_p Set to 1 when it has landed (or failed), else 0.
 */
SWY_EXPORT swy_status_t swy_moe_test_chunk(swy_moe_route_t route, int chunk,
                                           int *done_p);

/**
 * @brief Combine, blocking: send expert outputs back and form
 *        tokens_out[t] = sum over valid slots s of
 *        topk_w[t][s] * out_row(t, s); a token without valid slots gets 0.
 *        Equivalent to swy_moe_combine_post_chunk() for every chunk then
 *        swy_moe_combine_finish(). Keeps the returned rows in the route
 *        for swy_moe_combine_backward(). Collective.
 * @param expert_out [recv_rows][H], expert-major.
 * @param topk_w     [S][k] gate weights (dropped slots are ignored):
 *                   float, or double with SWY_FLOAT64 rows.
 * @param tokens_out [S][H] output.
 * @return As swy_moe_dispatch().
 */
SWY_EXPORT swy_status_t swy_moe_combine(swy_moe_route_t route,
                                        const void *expert_out,
                                        const void *topk_w, void *tokens_out,
                                        const swy_op_attr_t *attr);

/**
 * @brief Post chunk @p chunk of the combine: send the rows of chunk
 *        @p chunk of every local expert in @p expert_out back. Chunks must
 *        be posted in order 0..d-1 (all ranks post the same all-to-alls in
 *        the same order). @p expert_out is read during the call, except
 *        with a single local expert where it is sent from in place and is
 *        borrowed until swy_moe_combine_finish().
 * @return As swy_moe_dispatch(); SWY_ERR_INVALID_ARG when @p chunk is not
 *         the next one, or when a dispatch (or combine backward) is in
 *         flight and its chunk @p chunk is not complete yet.
 */
SWY_EXPORT swy_status_t swy_moe_combine_post_chunk(swy_moe_route_t route,
                                                   int chunk,
                                                   const void *expert_out,
                                                   const swy_op_attr_t *attr);

/**
 * @brief Finish the combine once every chunk is posted: wait for all and
 *        form tokens_out (see swy_moe_combine()).
 * @return SWY_OK; SWY_ERR_INVALID_ARG (not every chunk posted, NULL
 *         arguments — the exchange is then still in flight: call again);
 *         the first failure of a chunk's all-to-all.
 */
SWY_EXPORT swy_status_t swy_moe_combine_finish(swy_moe_route_t route,
                                               const void *topk_w,
                                               void *tokens_out);

/**
 * @brief Backward of the combine. Computes locally
 *        grad_topk_w[t][s] = dot(grad_tokens_out[t], out_row(t, s)) from
 *        the rows kept by the last combine on this route (0 for dropped
 *        slots), then sends topk_w[t][s] * grad_tokens_out[t] for each
 *        valid slot to its expert (the dispatch direction), landing in
 *        grad_expert_out. Collective.
 * @param grad_tokens_out [S][H].
 * @param topk_w          [S][k] the forward's gate weights (float, or
 *                        double with SWY_FLOAT64 rows).
 * @param grad_expert_out [recv_rows][H] output, expert-major; borrowed
 *                        until the last chunk is complete.
 * @param grad_topk_w     [S][k] output (as topk_w's type), or NULL if
 *                        not wanted.
 * @param flags           As swy_moe_dispatch().
 * @return As swy_moe_dispatch(); SWY_ERR_INVALID_ARG also when no combine
 *         has completed on this route.
 */
SWY_EXPORT swy_status_t swy_moe_combine_backward(
    swy_moe_route_t route, const void *grad_tokens_out, const void *topk_w,
    void *grad_expert_out, void *grad_topk_w, const swy_op_attr_t *attr,
    int flags);

/**
 * @brief Backward of the dispatch, blocking: send the gradients of the
 *        expert inputs back (the combine direction) and form
 *        grad_tokens[t] = sum over valid slots of grad_row(t, s); a token
 *        without valid slots gets 0. Equivalent to
 *        swy_moe_dispatch_backward_post_chunk() for every chunk then
 *        swy_moe_dispatch_backward_finish(). Collective.
 * @param grad_expert_in [recv_rows][H], expert-major.
 * @param grad_tokens    [S][H] output.
 * @return As swy_moe_dispatch().
 */
SWY_EXPORT swy_status_t swy_moe_dispatch_backward(swy_moe_route_t route,
                                                  const void *grad_expert_in,
                                                  void *grad_tokens,
                                                  const swy_op_attr_t *attr);

/** @brief Post chunk @p chunk of the dispatch backward; as
 *         swy_moe_combine_post_chunk(). */
SWY_EXPORT swy_status_t swy_moe_dispatch_backward_post_chunk(
    swy_moe_route_t route, int chunk, const void *grad_expert_in,
    const swy_op_attr_t *attr);

/** @brief Finish the dispatch backward; as swy_moe_combine_finish(). */
SWY_EXPORT swy_status_t swy_moe_dispatch_backward_finish(
    swy_moe_route_t route, void *grad_tokens);

/* ======================================================================
 * Topology-aware dispatch (TA-MoE) and the communication model
 * ====================================================================== */

/**
 * @brief TA-MoE's dispatch target for this rank, from the communicator's
 *        link matrix (defaults, SWY_TOPO_FILE or SWY_TOPO_PROBE).
 *
 * rank_share[j] = c^_j, the share of this rank's token slots that should go
 * to rank j: proportional to the bandwidth this rank can get to j, where a
 * cross-node link is capped at the node's uplink divided among the node's
 * ranks and the ranks off the node (they all share it); the shares sum to
 * 1. expert_weight[e] for the E = nranks * experts_per_rank global experts
 * (expert e on rank e / experts_per_rank) is w_e = 1 / (E * c^_e) with
 * c^_e = rank_share[rank(e)] / experts_per_rank, so that w_e = 1 for every
 * expert when the target is uniform. Used as per-expert weights of the
 * GShard balance loss, l = E * sum_e w_e f_e m_e, whose minimum over the
 * routed fractions f (with m = f) lies at f_e = c^_e: routing is steered
 * toward the target without being forced (swy-train --gate ta). Local.
 * @param rank_share     [nranks] out (may be NULL).
 * @param expert_weight  [nranks * experts_per_rank] out (may be NULL).
 * @return SWY_OK; SWY_ERR_INVALID_ARG (comm NULL, experts_per_rank < 1).
 */
SWY_EXPORT swy_status_t swy_moe_ta_target(swy_comm_t comm,
                                          int experts_per_rank,
                                          double *rank_share,
                                          double *expert_weight);

/**
 * @brief Node of every rank: ranks on one host (same hostname and boot id)
 *        share a node number; numbers run from 0 in order of each node's
 *        lowest rank. For topology gates that keep tokens on their node
 *        (swy-train --gate topo). Local.
 * @param node_of_rank [nranks] out.
 * @param nnodes_p     out, may be NULL: number of nodes.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL).
 */
SWY_EXPORT swy_status_t swy_moe_topo_nodes(swy_comm_t comm, int *node_of_rank,
                                           int *nnodes_p);

/**
 * @brief Modeled time of an all-to-all on this communicator (FasterMoE's
 *        toposim on two levels): the largest of every pair's bytes over
 *        its link bandwidth and every node uplink's egress and ingress
 *        bytes over the uplink rate (the node's fastest cross-node link),
 *        plus the largest latency of a pair that carries bytes. Local.
 * @param bytes       [nranks * nranks]: bytes[i * nranks + j] from i to j
 *                    (>= 0, finite).
 * @param seconds_p   out: modeled seconds.
 * @param bottleneck  out, may be NULL: the resource that bounds the time,
 *                    e.g. "uplink of node 0, egress" (bottleneck_len bytes).
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, negative or non-finite bytes).
 */
SWY_EXPORT swy_status_t swy_moe_model_alltoall(swy_comm_t comm,
                                               const double *bytes,
                                               double *seconds_p,
                                               char *bottleneck,
                                               size_t bottleneck_len);

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_MOE_H */
