/* The reference MoE model of swy-train, its parameters, forward and
 * backward:
 *
 *   embedding [V][H]
 *   -> L x [ dense block: x + W_b gelu(W_a x + b_a) + b_b   (H -> F -> H)
 *            MoE block:   x + sum_k w_k FFN_e(x)          (moe_block.h) ]
 *   -> output linear H -> V -> cross-entropy (+ aux_coef x GShard aux
 *      loss of each MoE block)
 *
 * Dense parameters (embedding, dense blocks, gates, output) are replicated
 * on every rank and live in one flat buffer in the order backward produces
 * their gradients (output, then layer L-1's gate, W_b, W_a, ..., then the
 * embedding), so DDP buckets are contiguous (ddp.h). Expert parameters
 * live in a second flat buffer, this rank's experts only. The layout and
 * the initialization are layout.h's, shared with the GPU model.
 *
 * Initialization depends on the seed only, never on the rank: a dense
 * tensor from (seed, tensor, layer), global expert g from (seed, tensor,
 * layer, g), so placement does not change an expert.
 *
 * Loss scaling: rank r backpropagates (1/W) x its local mean loss, so the
 * gradients add up (SWY_SUM over ranks for dense parameters; through the
 * exchange for experts) to the gradient of the global-batch mean. */
#ifndef SWT_MODEL_H
#define SWT_MODEL_H

#include <stdint.h>

#include "switchyard/switchyard.h"
#include "timing.h"

typedef struct {
    int layers, hidden, ffn, vocab;
    int dense_ffn;         /* the dense block's inner size (ffn: the
                              experts'); set, not 0 */
    int experts_per_rank, packing, top_k, pipeline;
    int tokens;            /* S per rank */
    int gate_group;        /* G, divides S */
    double capacity_factor;
    double aux_coef;
    double lr;
    uint64_t seed;
    size_t bucket_bytes;
    int phase_hints;
    int gate;                  /* swt_gate_kind_t (moe_block.h) */
    double topo_cross_frac;    /* --gate topo: share kept cross-node */
    int ta_capacity;           /* --ta-capacity: swt_ta_capacity_t */
    int overlap;               /* --overlap: dense optimizer step of each
                                  tensor in the next forward (ddp.h) */
    int bf16;                  /* --dtype bf16 (GPU model only): bf16
                                  weights' copies and activations, fp32
                                  masters, gradients and Adam */
} swt_model_config_t;

typedef struct swt_model swt_model_t;

/** Collective (creates the MoE plan). Prints the cause on failure.
 *  @return SWY_OK, SWY_ERR_NO_MEMORY, or the plan's error. */
swy_status_t swt_model_create(swy_comm_t comm, const swt_model_config_t *cfg,
                              swt_model_t **model_p);
/** --ep: the experts on @p comm (the expert-parallel group), the dense
 *  parameters' DDP on @p world, and the experts' gradients summed over
 *  @p expert_dp (the ranks holding replicas of this rank's experts; NULL
 *  when there are none). swt_model_create(comm) is (comm, comm, NULL). */
swy_status_t swt_model_create_groups(swy_comm_t world, swy_comm_t comm,
                                     swy_comm_t expert_dp,
                                     const swt_model_config_t *cfg,
                                     swt_model_t **model_p);
void swt_model_destroy(swt_model_t *model);

/** Total experts E and experts on this rank. */
int swt_model_num_experts(const swt_model_t *model);
int swt_model_num_local_experts(const swt_model_t *model);
/** Parameter counts: dense (replicated), experts on this rank. */
size_t swt_model_dense_params(const swt_model_t *model);
size_t swt_model_expert_params(const swt_model_t *model);
int swt_model_num_buckets(const swt_model_t *model);

/** Results of one step on this rank. */
typedef struct {
    double xent;    /* mean cross-entropy of this rank's tokens */
    double aux;     /* mean over layers of the blocks' auxiliary loss */
    int dropped;    /* slots dropped by capacity, all layers */
} swt_step_result_t;

/**
 * One training step: forward, backward with DDP buckets, wait, Adam.
 * With cfg.overlap the dense parameters' wait and Adam step move into the
 * next step's forward, each tensor's right before its first use (the
 * same arithmetic, so the same loss curve); swt_model_flush() finishes
 * the last step's.
 * @param ids, labels  [S] this rank's tokens.
 * @param step         1, 2, ... (Adam's bias correction).
 */
swy_status_t swt_model_step(swt_model_t *model, const int *ids,
                            const int *labels, long step, swt_timing_t *tm,
                            swt_step_result_t *result_p);

/** --overlap: wait for the last step's dense gradients and apply them
 *  (before reading the parameters outside a step). No-op otherwise. */
swy_status_t swt_model_flush(swt_model_t *model, swt_timing_t *tm);

/** Rows sent to each logical expert by this rank in layer l's last
 *  forward, [E]. */
const int64_t *swt_model_layer_sent(const swt_model_t *model, int layer);

/** Rows of this rank that each global expert computed in layer l's last
 *  forward (sent plus computed locally by shadows), [E]. */
const int64_t *swt_model_layer_chosen(const swt_model_t *model, int layer);

/**
 * Shadowing (FasterMoE; --placement): from the next step on, replicate
 * the experts of layer @p layer with shadow[g] != 0 on every rank.
 * Collective: every rank must pass the same flags. An expert that becomes
 * shadowed gets its owner's parameters and Adam state by swy_broadcast at
 * SWY_PRIO_LOW; each step its gradients are summed over ranks by
 * swy_allreduce at SWY_PRIO_LOW after the layer's backward, and every copy
 * takes the same Adam step, so the copies stay identical. An expert that
 * stops being shadowed keeps its owner's copy. Between steps only.
 * Prints the cause on failure.
 * @return SWY_OK, SWY_ERR_NO_MEMORY or the collective's error.
 */
swy_status_t swt_model_set_shadow(swt_model_t *model, int layer,
                                  const int *shadow);

/**
 * Packing (--placement): from the next step on, logical expert g of layer
 * @p layer lives in global slot slot_new[g] (rank slot / n_local, local
 * index slot % n_local; lib/moe's slots do not change). Every expert
 * whose slot changes moves its parameters and Adam state (m, v) from its
 * old rank to its new one in one swy_alltoallv at SWY_PRIO_LOW, through
 * a staging copy, then is installed. Collective: every rank must pass the
 * same map. Refused (SWY_ERR_INTERNAL, nothing changes) when slot_new is
 * not a permutation or would move a shadowed expert. Between steps only.
 * Prints the cause on failure.
 * @param moved_p  experts moved.
 * @return SWY_OK, SWY_ERR_INTERNAL, SWY_ERR_NO_MEMORY or the
 *         collective's error.
 */
swy_status_t swt_model_set_slots(swt_model_t *model, int layer,
                                 const int *slot_new, int *moved_p);

/** The slot of every logical expert of layer l, [E]. */
const int *swt_model_slot_of(const swt_model_t *model, int layer);

/** Experts of layer l shadowed now. */
int swt_model_num_shadowed(const swt_model_t *model, int layer);

/** A hash of the parameters and Adam state of shadowed expert g of layer
 *  l in this rank's copy (equal on every rank while shadowing keeps the
 *  copies identical); 0 when g is not shadowed (or out of memory). */
uint64_t swt_model_shadow_hash(const swt_model_t *model, int layer, int g);

/** A hash of the dense parameters' bytes (equal on every rank when data
 *  parallelism keeps the replicas identical). */
uint64_t swt_model_dense_hash(const swt_model_t *model);
/** A hash of this rank's experts' parameters and Adam state (equal on the
 *  ranks that hold replicas of the same experts, --ep). */
uint64_t swt_model_expert_hash(const swt_model_t *model);

#endif /* SWT_MODEL_H */
