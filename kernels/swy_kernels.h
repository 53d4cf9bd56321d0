/* Switchyard reference MoE kernels (CPU, fp32).
 *
 * The math of one MoE layer and of the reference training workload
 * (swy-train), with no knowledge of communication: lib/moe moves the rows
 * that these functions pack and unpack.  Per-element formulas live in
 * elem.h and are shared with future CUDA kernels.
 *
 * Conventions, for every function below:
 * - Arrays are dense and row-major; "x[S][H]" means S rows of H floats.
 * - Sizes are explicit.  They are checked with assert() only (these are
 *   internal kernels; a release build does not check).
 * - "Overwritten" outputs are fully written; "accumulated" outputs get +=,
 *   so the caller zeroes them once per step.  As a rule, parameter
 *   gradients (dW, db, dtable) are accumulated and activation gradients
 *   (dx, dlogits, ...) are overwritten; swy_k_add() sums two of the latter.
 * - No function allocates memory; scratch buffers are the caller's.
 * - Thread safety: functions keep no state; calls on disjoint outputs may
 *   run concurrently.  GEMMs go through CBLAS (OpenBLAS), which may use its
 *   own threads.
 *
 * Shapes of the MoE layer: S tokens on this rank, H hidden size, F expert
 * FFN inner size, E = n_ranks * experts_per_rank experts in all (global
 * expert e lives on rank e / experts_per_rank as its local expert
 * e % experts_per_rank), k experts per token.  A "slot" is one (token t,
 * choice j) pair, numbered t*k + j.
 */
#ifndef SWY_KERNELS_H
#define SWY_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Gate (gate.c)
 * ====================================================================== */

/** Gate logits: logits[S][E] = x[S][H] wg[H][E] (no bias; GShard's gate has
 *  none).  logits is overwritten. */
void swy_k_gate_logits_fwd(const float *x, const float *wg, int S, int H,
                           int E, float *logits);

/** Backward of swy_k_gate_logits_fwd.  dx[S][H] = dlogits wg^T is
 *  overwritten (skipped when dx is NULL); dwg[H][E] += x^T dlogits is
 *  accumulated. */
void swy_k_gate_logits_bwd(const float *x, const float *wg,
                           const float *dlogits, int S, int H, int E,
                           float *dx, float *dwg);

/** Row softmax: probs[S][E] = softmax(logits[S][E]) per row, computed with
 *  the row max subtracted.  probs is overwritten; it may alias logits. */
void swy_k_softmax_fwd(const float *logits, int S, int E, float *probs);

/** Softmax backward: dlogits[t][e] = p[t][e] (dp[t][e] - sum_e' dp p).
 *  dlogits is overwritten; it may alias dprobs. */
void swy_k_softmax_bwd(const float *probs, const float *dprobs, int S, int E,
                       float *dlogits);

/** Softmax, then top-k per token.
 *  @param logits     [S][E] gate logits.
 *  @param k          1 <= k <= E.
 *  @param renormalize  nonzero: topk_w[t][j] = p[t][i_j] / sum_l p[t][i_l]
 *                    (GShard top-2, FastMoE; with k = 1 every weight is 1
 *                    and the gate learns only through the auxiliary loss);
 *                    zero: topk_w[t][j] = p[t][i_j] (Switch Transformer).
 *  @param topk_idx   [S][k] overwritten: expert ids, largest probability
 *                    first; ties go to the lower expert id.
 *  @param topk_w     [S][k] overwritten: weights as above.
 *  @param probs      [S][E] overwritten: the full softmax; the backward
 *                    passes and the auxiliary loss need only this.
 */
void swy_k_gate_topk(const float *logits, int S, int E, int k,
                     int renormalize, int *topk_idx, float *topk_w,
                     float *probs);

/** Backward of the top-k weights to the probabilities.  The choice of
 *  experts is recomputed from probs with the same rule as the forward, so
 *  the pre-capacity topk_idx need not be kept.  Slots dropped by capacity
 *  must carry dtopk_w = 0 (swy_k_combine_bwd writes exactly that), which
 *  makes this the exact gradient of the dropped-then-weighted gate.
 *  dprobs[S][E] is overwritten (zero off the chosen experts). */
void swy_k_gate_topk_bwd(const float *probs, const float *dtopk_w, int S,
                         int E, int k, int renormalize, float *dprobs);

/** As swy_k_gate_topk_bwd, but with the choices given (choice_idx [S][k],
 *  every entry a valid expert, e.g. after swy_k_gate_topo_reroute changed
 *  them) instead of recomputed from probs.  dprobs overwritten. */
void swy_k_gate_topk_bwd_idx(const float *probs, const int *choice_idx,
                             const float *dtopk_w, int S, int E, int k,
                             int renormalize, float *dprobs);

/** FasterMoE's topology gate: at most floor(max_cross_frac * S) of the S
 *  tokens keep a choice on an expert off this rank's node (those whose
 *  best such probability is highest); every other token with such a
 *  choice is rerouted to its top-k among the experts on my_node, with
 *  weights recomputed as swy_k_gate_topk does.  Before capacity dropping;
 *  topk_idx/topk_w [S][k] in place.  Nothing changes when my_node has
 *  fewer than k experts.  @return tokens rerouted. */
int swy_k_gate_topo_reroute(const float *probs, int S, int E, int k,
                            int renormalize, const int *node_of_expert,
                            int my_node, double max_cross_frac,
                            int *topk_idx, float *topk_w);

/** Expert capacity per rank-local batch: ceil(capacity_factor * S * k / E),
 *  the number of slots each expert accepts from this rank's S tokens
 *  (FastMoE/GShard use 1.2 for training, 2.4 for evaluation).  The product
 *  is computed in double and a relative 1e-9 is taken off before ceil so
 *  that a factor like 1.2, not exact in binary, gives ceil(12) = 12 and not
 *  13 for S*k/E = 10.  capacity_factor <= 0 means no limit and returns
 *  S * k. */
int swy_k_gate_capacity(double capacity_factor, int S, int k, int E);

/** Expert capacity per rank-local batch when this rank's dispatch has a
 *  target share per expert (TA-MoE, Chen et al. 2022: rank i sends the
 *  share c_ij of its S*k slots to rank j, so each of rank j's experts is
 *  sized for c_ij / experts_per_rank of them instead of the uniform 1/E):
 *  capacity[e] = ceil(capacity_factor * S * k * expert_share[e]), rounded
 *  as swy_k_gate_capacity.  With expert_share[e] = 1/E for every e it
 *  gives swy_k_gate_capacity's value; shares that sum to 1 keep the total
 *  capacity of the uniform sizing (up to the rounding up).
 *  capacity_factor <= 0 means no limit (every capacity[e] = -1).
 *  @param expert_share  [E] >= 0, finite.
 *  @param capacity      [E] out. */
void swy_k_gate_capacity_shares(double capacity_factor, int S, int k, int E,
                                const double *expert_share, int *capacity);

/** Order in which slots claim capacity; the later ones are dropped. */
typedef enum {
    /** Token order: token 0's k slots, then token 1's, ... (FastMoE's
     *  prune_gate_by_capacity over the flattened [S][k] index, made
     *  deterministic). */
    SWY_K_DROP_TOKEN_ORDER = 0,
    /** Choice order: every token's first choice, then every second choice
     *  (GShard: a top-2 assignment never displaces a top-1). */
    SWY_K_DROP_CHOICE_ORDER = 1,
} swy_k_drop_order_t;

/** Capacity dropping, in place: each expert keeps its first `capacity`
 *  slots in `order`; every later slot gets topk_idx = -1 and topk_w = 0
 *  (the remaining weights are not renormalized).  Slots already -1 are
 *  left alone.  capacity < 0 means no limit.
 *  @param expert_load  [E] overwritten with the kept slots per expert
 *                      (required: it is the counter).
 *  @return the number of slots dropped by this call. */
int swy_k_gate_drop(int *topk_idx, float *topk_w, int S, int k, int E,
                    int capacity, swy_k_drop_order_t order, int *expert_load);

/** As swy_k_gate_drop with a capacity per expert: expert e keeps its
 *  first capacity[e] slots (capacity[e] < 0: no limit), for instance
 *  from swy_k_gate_capacity_shares.
 *  @param capacity  [E]. */
int swy_k_gate_drop_each(int *topk_idx, float *topk_w, int S, int k, int E,
                         const int *capacity, swy_k_drop_order_t order,
                         int *expert_load);

/** GShard auxiliary load-balancing loss (Lepikhin et al. 2020, alg. 1;
 *  FastMoE fmoe/gates/gshard_gate.py):
 *    l_aux = E * sum_e f_e * m_e,
 *    m_e = (1/S) sum_t probs[t][e]   (mean gate probability),
 *    f_e = (1/(S*f_slots)) * #{(t, j < f_slots) : choice j of token t is e},
 *  choices recomputed from probs before capacity.  f_slots = 1 is GShard's
 *  definition (top-1 only); f_slots = k counts every choice.  l_aux = 1 for
 *  a perfectly uniform gate.  f is not differentiable and is returned for
 *  the backward pass.
 *  @param f   [E] overwritten with f_e.
 *  @return l_aux (0 when S == 0). */
float swy_k_gate_aux_loss(const float *probs, int S, int E, int f_slots,
                          float *f);

/** Backward of l_aux through m_e only:
 *  dprobs[t][e] += dloss * E * f[e] / S  (accumulated, so that it adds to
 *  the output of swy_k_gate_topk_bwd).  dloss is the weight of l_aux in the
 *  total loss (e.g. 0.01). */
void swy_k_gate_aux_loss_bwd(const float *f, int S, int E, float dloss,
                             float *dprobs);

/* ======================================================================
 * Counting sort of slots by destination (sort.c)
 * ====================================================================== */

/** FastMoE's layout of the send buffer: rows grouped by destination rank,
 *  within a rank by local expert, which is ascending global expert id;
 *  within one (rank, expert) group by slot number (token order; stable).
 *  @param topk_idx        [S][k] global expert ids, -1 = dropped.
 *  @param expert_counts   [E] overwritten: rows for global expert e, i.e.
 *                         FastMoE's lec[j*experts_per_rank + i] for local
 *                         expert i on rank j.
 *  @param expert_offsets  [E+1] overwritten: exclusive prefix sum of
 *                         expert_counts; [E] is the total.  Rank j's rows
 *                         are [expert_offsets[j*epr], expert_offsets[(j+1)*epr]).
 *  @param row_of_slot     [S*k] overwritten: the send-buffer row of each
 *                         slot, -1 for dropped slots.
 *  @return the number of rows (kept slots). */
int swy_k_sort_slots(const int *topk_idx, int S, int k, int n_ranks,
                     int experts_per_rank, int *expert_counts,
                     int *expert_offsets, int *row_of_slot);

/** Per-rank row counts from per-expert counts: rank_counts[j] = sum of
 *  expert_counts[j*epr .. (j+1)*epr).  rank_counts[n_ranks] overwritten. */
void swy_k_sort_rank_counts(const int *expert_counts, int n_ranks,
                            int experts_per_rank, int *rank_counts);

/** The inverse permutation: slot_of_row[row_of_slot[s]] = s for kept slots.
 *  slot_of_row[n_rows] is overwritten; a row no slot maps to gets -1. */
void swy_k_sort_invert(const int *row_of_slot, int n_slots, int n_rows,
                       int *slot_of_row);

/* ======================================================================
 * Pack / unpack rows (pack.c)
 * ====================================================================== */

/** send[row_of_slot[t*k+j]][H] = x[t][H] for every kept slot.  Rows no slot
 *  maps to are not written. */
void swy_k_pack(const float *x, const int *row_of_slot, int S, int k, int H,
                float *send);

/** Backward of swy_k_pack: dx[t] = sum over kept j of dsend[row_of_slot]
 *  (overwritten; 0 for a token with every slot dropped). */
void swy_k_pack_bwd(const float *dsend, const int *row_of_slot, int S, int k,
                    int H, float *dx);

/** slots[t*k+j][H] = recv[row_of_slot[t*k+j]], or zeros for a dropped
 *  slot.  slots[S*k][H] overwritten.  (swy_k_combine_fwd reads through
 *  row_of_slot directly; this is for callers that want the slots.) */
void swy_k_unpack(const float *recv, const int *row_of_slot, int S, int k,
                  int H, float *slots);

/** dst[i][H] = src[src_row[i]][H] for i < n; a row with src_row -1 is set
 *  to zeros.  For any reordering of rows, e.g. from source-rank-major to
 *  expert-major receive layout.  dst must not overlap src. */
void swy_k_gather_rows(const float *src, const int *src_row, int n, int H,
                       float *dst);

/* ======================================================================
 * Expert FFN (ffn.c)
 * ====================================================================== */

/** Expert FFN over rows grouped by local expert:
 *    h_pre = x W1_e + b1_e,  h_act = gelu(h_pre),  y = h_act W2_e + b2_e,
 *  GELU = tanh approximation (elem.h).  Rows [off_e, off_e + rows[e]) use
 *  expert e, off_e = sum of rows[<e]; N = sum of rows (may be 0, and any
 *  rows[e] may be 0).
 *  @param x                [N][H]
 *  @param rows_per_expert  [n_experts]
 *  @param w1 [n_experts][H][F]   @param b1 [n_experts][F]
 *  @param w2 [n_experts][F][H]   @param b2 [n_experts][H]
 *  @param h_pre, h_act     [N][F] overwritten; kept for the backward.
 *  @param y                [N][H] overwritten. */
void swy_k_ffn_fwd(const float *x, const int *rows_per_expert, int n_experts,
                   int H, int F, const float *w1, const float *b1,
                   const float *w2, const float *b2, float *h_pre,
                   float *h_act, float *y);

/** Backward of swy_k_ffn_fwd.
 *  @param dh   [N][F] scratch, overwritten.
 *  @param dx   [N][H] overwritten (NULL: not computed).
 *  @param dw1, db1, dw2, db2  same shapes as the weights; accumulated. */
void swy_k_ffn_bwd(const float *x, const float *h_pre, const float *h_act,
                   const float *dy, const int *rows_per_expert, int n_experts,
                   int H, int F, const float *w1, const float *w2, float *dh,
                   float *dx, float *dw1, float *db1, float *dw2,
                   float *db2);

/* ======================================================================
 * Combine (combine.c)
 * ====================================================================== */

/** out[t][H] = sum over kept j of topk_w[t][j] * rows[row_of_slot[t*k+j]].
 *  rows is the expert output in the send-buffer layout (after the combine
 *  exchange returned it).  out is overwritten (zeros for a token whose
 *  slots were all dropped). */
void swy_k_combine_fwd(const float *rows, const int *row_of_slot,
                       const float *topk_w, int S, int k, int H, float *out);

/** Backward of swy_k_combine_fwd.
 *  drows[row_of_slot[t*k+j]] = topk_w[t][j] * dout[t]: overwritten for every
 *  row a kept slot maps to, other rows untouched.
 *  dtopk_w[t][j] = <dout[t], rows[row_of_slot[t*k+j]]>, or 0 for a dropped
 *  slot: [S][k] overwritten.  Either output may be NULL. */
void swy_k_combine_bwd(const float *rows, const int *row_of_slot,
                       const float *topk_w, const float *dout, int S, int k,
                       int H, float *drows, float *dtopk_w);

/* ======================================================================
 * Dense layers (linear.c, act.c, embed.c)
 * ====================================================================== */

/** y[N][out] = x[N][in] w[in][out] + b[out]; b may be NULL.  Overwritten. */
void swy_k_linear_fwd(const float *x, const float *w, const float *b, int N,
                      int in, int out, float *y);

/** Cap the threads OpenBLAS uses for the GEMMs of this process (n >= 1).
 *  Several ranks on one node each start one thread per core by default and
 *  oversubscribe the cores; the caller decides (this library reads no
 *  environment).  Process-wide; call before the first GEMM. */
void swy_k_blas_set_threads(int n);

/** The name of the kernels OpenBLAS chose for this CPU (its
 *  openblas_get_corename(), e.g. "SkylakeX"), or "unknown". */
const char *swy_k_blas_core(void);

/** Backward of swy_k_linear_fwd: dx[N][in] = dy w^T overwritten (NULL:
 *  skipped); dw[in][out] += x^T dy; db[out] += column sums of dy (NULL:
 *  skipped). */
void swy_k_linear_bwd(const float *x, const float *w, const float *dy, int N,
                      int in, int out, float *dx, float *dw, float *db);

/** y[i] = gelu(x[i]) (tanh approximation); y may alias x. */
void swy_k_gelu_fwd(const float *x, size_t n, float *y);

/** dx[i] = dy[i] * gelu'(x[i]); overwritten, may alias dy. */
void swy_k_gelu_bwd(const float *x, const float *dy, size_t n, float *dx);

/** y[i] += x[i] (residual connections, summing two activation gradients). */
void swy_k_add(const float *x, size_t n, float *y);

/** Embedding lookup: out[t][H] = table[ids[t]][H].  Overwritten. */
void swy_k_embed_fwd(const float *table, const int *ids, int S, int H,
                     float *out);

/** Embedding backward: dtable[ids[t]] += dout[t] (scatter-add; repeated ids
 *  add up). */
void swy_k_embed_bwd(const float *dout, const int *ids, int S, int H,
                     float *dtable);

/* ======================================================================
 * Loss (loss.c)
 * ====================================================================== */

/** Softmax cross-entropy, mean over the tokens with labels[t] >= 0 (a
 *  negative label marks a token to ignore).
 *  @param logits [S][C]; labels [S] in [0, C) or negative.
 *  @param probs  [S][C] overwritten with softmax(logits); may be NULL.
 *  @return the mean loss; 0 when no token counts. */
float swy_k_xent_fwd(const float *logits, const int *labels, int S, int C,
                     float *probs);

/** Gradient of dloss * swy_k_xent_fwd: dlogits[t][c] = dloss *
 *  (softmax(logits[t])[c] - [c == labels[t]]) / n_counted; rows of ignored
 *  tokens are zero.  Overwritten. */
void swy_k_xent_bwd(const float *logits, const int *labels, int S, int C,
                    float dloss, float *dlogits);

/* ======================================================================
 * Optimizer (adam.c)
 * ====================================================================== */

/** Adam hyper-parameters (defaults of torch.optim.Adam: lr 1e-3, betas
 *  0.9/0.999, eps 1e-8, weight_decay 0). */
typedef struct {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay; /**< 0 disables weight decay. */
    int decoupled;      /**< nonzero: AdamW's decoupled decay; zero: L2. */
} swy_k_adam_params_t;

/** One Adam step with bias correction on n parameters; see swy_e_adam in
 *  elem.h for the formula.  param, m, v are updated in place; m and v start
 *  at zero; step counts from 1. */
void swy_k_adam_step(float *param, const float *grad, float *m, float *v,
                     size_t n, const swy_k_adam_params_t *hp, long step);

/* ======================================================================
 * Conversion (convert.c)
 * ====================================================================== */

/** float -> bf16 with round-to-nearest-even (NaN stays NaN). */
void swy_k_f32_to_bf16(const float *x, size_t n, uint16_t *y);

/** bf16 -> float (exact). */
void swy_k_bf16_to_f32(const uint16_t *x, size_t n, float *y);

#ifdef __cplusplus
}
#endif

#endif /* SWY_KERNELS_H */
