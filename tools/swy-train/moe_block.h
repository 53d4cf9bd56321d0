/* One MoE block of swy-train: out = x + MoE(x).
 *
 * The gate (logits, softmax, top-k, capacity, GShard auxiliary loss) and
 * the expert FFNs are the kernels' (kernels/swy_kernels.h); the rows move
 * over lib/moe (switchyard/moe.h): route (count exchange), dispatch,
 * combine and their backward, all at high priority. With pipeline degree
 * d > 1 the expert FFN of each landed chunk runs while later chunks travel,
 * and each finished chunk goes back at once.
 *
 * Gate groups (GShard): the S tokens of a rank are cut into groups of G
 * tokens; capacity and the auxiliary loss are per group, and the block's
 * auxiliary loss is the mean over its groups. So one rank with 4T tokens
 * and G = T makes exactly the choices four ranks with T tokens make.
 *
 * Parameters are borrowed from the model: the gate weight is dense
 * (data-parallel, its gradient goes to DDP), the experts are this rank's
 * n_local = experts_per_rank * packing experts (expert-parallel, their
 * gradients stay local). One training thread uses a block. */
#ifndef SWT_MOE_BLOCK_H
#define SWT_MOE_BLOCK_H

#include <stdint.h>

#include "switchyard/moe.h"
#include "switchyard/switchyard.h"
#include "timing.h"

typedef struct {
    int layer;
    int tokens;           /* S on this rank */
    int gate_group;       /* G, divides S */
    int hidden, ffn, top_k;
    int n_local;          /* experts on this rank (experts_per_rank * p) */
    int n_experts;        /* E = ranks * n_local */
    double capacity_factor;
    double aux_weight;    /* d(loss)/d(aux of one group) on this rank */
    int phase_hints;      /* call swy_phase_hint before backward a2as */
    /* gate kind (swt_gate_kind_t) and what it needs: */
    int gate;
    const float *ta_weight;     /* [E] TA-MoE per-expert aux weights */
    /* --gate ta's capacity (swt_ta_capacity_t) and TA-MoE's target share
     * of this rank's slots per expert ([E], sums to 1) */
    int ta_capacity;
    const double *ta_share;
    const int *node_of_expert;  /* [E] node of each expert (topo) */
    int my_node;                /* this rank's node (topo) */
    double topo_cross_frac;     /* tokens that may keep a cross-node choice */
    /* gate: dense */
    const float *wg;      /* [H][E] */
    float *dwg;           /* accumulated */
    /* local experts, [n_local] each: those of global slots
     * rank * n_local .. + n_local - 1 */
    const float *w1, *b1, *w2, *b2;
    float *dw1, *db1, *dw2, *db2;
    /* packing (--placement): slot_of[e] = the global slot of logical
     * expert e ([E], a permutation, borrowed; the owner may change it
     * between steps), or NULL: slot e. The gate, the shadows and the
     * counts speak of logical experts; only the route sees slots. */
    const int *slot_of;
} swt_moe_block_params_t;

/** Gates: GShard's balance loss (the default); TA-MoE's loss weighted
 *  toward the bandwidth-proportional target (swy_moe_ta_target); FasterMoE's
 *  topology gate, which reroutes all but a fraction of the tokens with a
 *  cross-node choice to experts on their own node. */
typedef enum { SWT_GATE_GSHARD = 0, SWT_GATE_TA = 1, SWT_GATE_TOPO = 2 }
    swt_gate_kind_t;

/** How --gate ta sizes each expert's capacity per gate group; the total
 *  is capacity_factor * G * k in all three, as GShard's.
 *  - ROUTED (default): from this rank's share of slots that chose each
 *    expert (before capacity) in the earlier steps, an EMA (theta 0.9,
 *    Cong et al.'s EMA) that starts at the uniform 1/E the fresh gate
 *    routes. It follows the dispatch as TA-MoE's loss moves it from
 *    uniform to the target, and is the target's sizing once there.
 *  - TARGET: TA-MoE's target share from the first step. The gate starts
 *    uniform and reaches the target over hundreds of steps; until then the
 *    experts the target starves drop what the gate still sends them.
 *  - UNIFORM: 1/E, GShard's sizing; the experts the gate is steered
 *    toward overflow. */
typedef enum {
    SWT_TA_CAP_ROUTED = 0,
    SWT_TA_CAP_TARGET = 1,
    SWT_TA_CAP_UNIFORM = 2
} swt_ta_capacity_t;

typedef struct swt_moe_block swt_moe_block_t;

/** One shadowed expert as a block sees it: its weights and gradient
 *  accumulators ([H][F], [F], [F][H], [H] each), borrowed. */
typedef struct {
    int expert; /* global id */
    const float *w1, *b1, *w2, *b2;
    float *dw1, *db1, *dw2, *db2;
} swt_shadow_expert_t;

/** @return 0, or -1 when out of memory. The plan (and its comm) are
 *  borrowed. */
int swt_moe_block_create(swy_moe_plan_t plan, swy_comm_t comm,
                         const swt_moe_block_params_t *params,
                         swt_moe_block_t **blk_p);
void swt_moe_block_destroy(swt_moe_block_t *blk);

/** Forward: out[S][H] = x + MoE(x). x must stay unchanged until the
 *  backward. Sets the block's auxiliary loss. */
swy_status_t swt_moe_block_forward(swt_moe_block_t *blk, const float *x,
                                   float *out, swt_timing_t *tm);

/** Backward: dx[S][H] = dout + d MoE(x)/dx (overwritten); accumulates the
 *  gate and expert gradients. Ends the step's route. */
swy_status_t swt_moe_block_backward(swt_moe_block_t *blk, const float *dout,
                                    float *dx, swt_timing_t *tm);

/** Compute @p n experts (sorted by id, copied) locally as shadows from
 *  the next forward on; n = 0: none. Between steps only.
 *  @return 0, or -1 when out of memory (the block keeps its old set). */
int swt_moe_block_set_shadow(swt_moe_block_t *blk, int n,
                             const swt_shadow_expert_t *experts);

/** The last forward's auxiliary loss, mean over gate groups. */
double swt_moe_block_aux(const swt_moe_block_t *blk);

/** Tokens the topology gate rerouted to their node in the last forward. */
int swt_moe_block_rerouted(const swt_moe_block_t *blk);

/** Slots dropped by capacity in the last forward. */
int swt_moe_block_dropped(const swt_moe_block_t *blk);

/** Rows this rank sent to each logical expert in the last forward, [E]
 *  (a shadowed expert's rows are not sent). */
const int64_t *swt_moe_block_sent(const swt_moe_block_t *blk);

/** Rows of this rank that each global expert computed in the last
 *  forward, after capacity: the rows sent plus those computed locally by
 *  shadows, [E]. Without shadows it equals swt_moe_block_sent(). */
const int64_t *swt_moe_block_chosen(const swt_moe_block_t *blk);

/* ---- What a block keeps on the host whatever its device, and the
 * bookkeeping around lib/moe's route that the CPU block (moe_block.c) and
 * the GPU block (moe_block_cuda.c) share; their math is their own. ---- */

typedef struct {
    swt_moe_block_params_t p;
    swy_moe_plan_t plan;        /* borrowed, as is comm */
    swy_comm_t comm;
    int S, H, F, E, k, nl, n_groups;
    int capacity;               /* slots per expert and gate group, -1: no
                                   limit (capacity_factor <= 0) */
    int *capacity_each;         /* [E] per expert instead (--gate ta), or
                                   NULL: capacity for every expert */
    double *routed_share;       /* [E] SWT_TA_CAP_ROUTED's EMA, or NULL */
    char where[32];             /* "layer 3" or "layer 3 (cuda)" */
    char name_fwd[32], name_bwd[32]; /* the exchanges' op names */
    /* the step's route, from the forward to the end of the backward */
    swy_moe_route_t route;
    swy_moe_layout_t layout;
    int64_t *sent;              /* [E], by logical expert */
    int64_t *sent_slot;         /* [E], by slot (slot_of) */
    double aux;                 /* the last forward's, mean over groups */
    int dropped;                /* slots the last forward dropped */
} swt_moe_block_core_t;

/** The capacity of each expert for this step's gate groups
 *  (core->capacity_each), before the drop. */
void swt_moe_block_core_capacity_begin(swt_moe_block_core_t *core);

/** After the gate: fold this step's choices before capacity
 *  (choice_idx [S][k], host) into SWT_TA_CAP_ROUTED's shares. */
void swt_moe_block_core_capacity_end(swt_moe_block_core_t *core,
                                     const int *choice_idx);

/** Fills @p core from @p params; @p device (NULL for the CPU) goes into
 *  the messages' prefix. @return 0, or -1 when out of memory (nothing
 *  left to finalize). */
int swt_moe_block_core_init(swt_moe_block_core_t *core, swy_moe_plan_t plan,
                            swy_comm_t comm,
                            const swt_moe_block_params_t *params,
                            const char *device);
/** Ends the route if any and frees the counts; accepts a zeroed core. */
void swt_moe_block_core_finalize(swt_moe_block_core_t *core);

/** Prints "swy-train: <where>: <what> failed: <status>: <last error>";
 *  @return status. */
swy_status_t swt_moe_block_core_fail(const swt_moe_block_core_t *core,
                                     const char *what, swy_status_t status);

/* Run a lib/moe or collective call; on failure report it as @p what and
 * return its status from the enclosing function. */
#define SWT_MOE_CHECK(core, call, what)                                      \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return swt_moe_block_core_fail((core), (what), st_);             \
    } while (0)

/** The step's route (count exchange, timed as all-to-all wait) of the
 *  choices @p slots ([S][k] global slots, -1 dropped), its layout, and
 *  the rows sent to each logical expert (through slot_of, if set).
 *  Ends the last step's route first. Prints the cause on failure. */
swy_status_t swt_moe_block_core_route(swt_moe_block_core_t *core,
                                      const int *slots, swt_timing_t *tm);

/** Ends the step's route (after the backward's last exchange). */
void swt_moe_block_core_route_end(swt_moe_block_core_t *core);

/** --phase-hints: tell the scheduler an all-to-all is imminent (Lina:
 *  stop issuing gradient micro-ops so the links are clear). */
void swt_moe_block_core_a2a_imminent(const swt_moe_block_core_t *core);

/** Timers of one MoE segment of two exchanges around the experts: the
 *  first from @p seg0 to @p first_end, the second from @p second0 to
 *  @p end (all-to-all time), the whole segment seg0 to end. The waits
 *  are the caller's. */
void swt_moe_block_core_segment(swt_timing_t *tm, double seg0,
                                double first_end, double second0,
                                double end);

/** What a block computes around its exchanges (CPU or GPU). Each function
 *  returns the compute time it spent (timed as expert time) in *dt_p,
 *  and SWY_OK or a failure it has reported. */
typedef struct {
    /** The local experts on pipeline chunk @p chunk of the rows. */
    swy_status_t (*experts)(void *arg, int chunk, swt_timing_t *tm,
                            double *dt_p);
    /** NULL, or work done while the first exchange travels (shadowed
     *  experts). */
    swy_status_t (*overlap)(void *arg, swt_timing_t *tm, double *dt_p);
    void *arg;
} swt_moe_chunk_ops_t;

/** The forward's exchanges on the step's route, as lib/moe pipelines
 *  them: the dispatch of @p x into @p expert_in posted at once, then per
 *  chunk its wait, ops->experts (into @p expert_out) and its combine
 *  post, and the combine's finish into @p y (gate weights @p topk_w).
 *  Timed as all-to-all waits, expert time and one MoE segment. */
swy_status_t swt_moe_block_core_forward(swt_moe_block_core_t *core,
                                        const void *x, void *expert_in,
                                        const void *expert_out,
                                        const void *topk_w, void *y,
                                        const swt_moe_chunk_ops_t *ops,
                                        swt_timing_t *tm);

/** The backward's: the combine backward of @p dout (into
 *  @p grad_expert_out and @p grad_topk_w), then per chunk its wait,
 *  ops->experts (into @p grad_expert_in) and its dispatch-backward post,
 *  and the finish into @p dx; ends the route. Phase hints as Lina's. */
swy_status_t swt_moe_block_core_backward(swt_moe_block_core_t *core,
                                         const void *dout,
                                         const void *topk_w,
                                         void *grad_expert_out,
                                         void *grad_topk_w,
                                         const void *grad_expert_in,
                                         void *dx,
                                         const swt_moe_chunk_ops_t *ops,
                                         swt_timing_t *tm);

#endif /* SWT_MOE_BLOCK_H */
