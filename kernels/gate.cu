/* The MoE gate on the GPU: logits, softmax, top-k with weights, capacity
 * dropping and the GShard auxiliary loss, with their backward passes.
 * One thread per token for the per-row math (E is small: tens to a few
 * hundred experts), running elem.h's row functions exactly as gate.c does,
 * so the choices are the CPU's. */
#include <math.h>

#include "kc_internal_cuda.h"

#define KC_GATE_THREADS 128

int swy_kc_gate_logits_fwd(swy_kc_ctx_t *ctx, const float *x, const float *wg,
                           int S, int H, int E, float *logits)
{
    return kc_linear_fwd(ctx, "swy_kc_gate_logits_fwd", CUDA_R_32F, x, wg,
                         NULL, S, H, E, logits);
}

int swy_kc_gate_logits_bwd(swy_kc_ctx_t *ctx, const float *x,
                           const float *wg, const float *dlogits, int S,
                           int H, int E, float *dx, float *dwg)
{
    return kc_linear_bwd(ctx, "swy_kc_gate_logits_bwd", CUDA_R_32F, x, wg,
                         dlogits, S, H, E, dx, dwg, NULL);
}

/* Max and sum are taken before the row is overwritten, so probs may alias
 * logits (as swy_k_softmax_fwd). */
__device__ void kc_softmax_row(const float *row, int E, float *p)
{
    float m = swy_e_row_max(row, E);
    float inv = 1.0f / swy_e_row_expsum(row, E, m);
    for (int e = 0; e < E; e++)
        p[e] = swy_e_exp_shifted(row[e], m) * inv;
}

__global__ void kc_softmax_fwd(const float *logits, int S, int E,
                               float *probs)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x)
        kc_softmax_row(logits + (size_t)t * E, E, probs + (size_t)t * E);
}

__global__ void kc_softmax_bwd(const float *probs, const float *dprobs, int S,
                               int E, float *dlogits)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x) {
        const float *p = probs + (size_t)t * E;
        const float *dp = dprobs + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        float dot = 0.0f;
        for (int e = 0; e < E; e++)
            dot += dp[e] * p[e];
        for (int e = 0; e < E; e++)
            dl[e] = swy_e_softmax_grad(p[e], dp[e], dot);
    }
}

__global__ void kc_topk(const float *logits, int S, int E, int k,
                        int renormalize, int *topk_idx, float *topk_w,
                        float *probs)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x) {
        float *p = probs + (size_t)t * E;
        int *idx = topk_idx + (size_t)t * k;
        float *w = topk_w + (size_t)t * k;
        kc_softmax_row(logits + (size_t)t * E, E, p);
        /* Written straight into topk_idx (it reads back its own row). */
        swy_e_topk_row(p, E, k, idx);
        float z = 0.0f;
        for (int j = 0; j < k; j++) {
            w[j] = p[idx[j]];
            z += w[j];
        }
        if (renormalize)
            for (int j = 0; j < k; j++)
                w[j] /= z;
    }
}

__global__ void kc_topk_bwd(const float *probs, const float *dtopk_w, int S,
                            int E, int k, int renormalize, float *dprobs)
{
    int idx[KC_MAX_K];
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x) {
        const float *p = probs + (size_t)t * E;
        const float *dw = dtopk_w + (size_t)t * k;
        float *dp = dprobs + (size_t)t * E;
        for (int e = 0; e < E; e++)
            dp[e] = 0.0f;
        swy_e_topk_row(p, E, k, idx);
        swy_e_topk_bwd_row(p, idx, dw, k, renormalize, dp);
    }
}

static int check_gate(const char *fn, int S, int E, int k)
{
    if (S < 0 || E <= 0 || k < 1 || k > E || k > KC_MAX_K ||
        (size_t)S * E > INT32_MAX || (size_t)S * k > INT32_MAX)
        return kc_fail(fn, "bad sizes S=%d E=%d k=%d (k <= min(E, %d))", S,
                       E, k, KC_MAX_K);
    return 0;
}

int swy_kc_softmax_fwd(swy_kc_ctx_t *ctx, const float *logits, int S, int E,
                       float *probs)
{
    static const char fn[] = "swy_kc_softmax_fwd";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, 1));
    if (S == 0)
        return 0;
    kc_softmax_fwd<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS),
                     KC_GATE_THREADS, 0, ctx->stream>>>(logits, S, E, probs);
    KC_LAUNCHED(fn, "kc_softmax_fwd");
    return 0;
}

int swy_kc_softmax_bwd(swy_kc_ctx_t *ctx, const float *probs,
                       const float *dprobs, int S, int E, float *dlogits)
{
    static const char fn[] = "swy_kc_softmax_bwd";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, 1));
    if (S == 0)
        return 0;
    kc_softmax_bwd<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS),
                     KC_GATE_THREADS, 0, ctx->stream>>>(probs, dprobs, S, E,
                                                        dlogits);
    KC_LAUNCHED(fn, "kc_softmax_bwd");
    return 0;
}

int swy_kc_gate_topk(swy_kc_ctx_t *ctx, const float *logits, int S, int E,
                     int k, int renormalize, int *topk_idx, float *topk_w,
                     float *probs)
{
    static const char fn[] = "swy_kc_gate_topk";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, k));
    if (S == 0)
        return 0;
    kc_topk<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS), KC_GATE_THREADS, 0,
              ctx->stream>>>(logits, S, E, k, renormalize, topk_idx, topk_w,
                             probs);
    KC_LAUNCHED(fn, "kc_topk");
    return 0;
}

int swy_kc_gate_topk_bwd(swy_kc_ctx_t *ctx, const float *probs,
                         const float *dtopk_w, int S, int E, int k,
                         int renormalize, float *dprobs)
{
    static const char fn[] = "swy_kc_gate_topk_bwd";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, k));
    if (S == 0)
        return 0;
    kc_topk_bwd<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS), KC_GATE_THREADS,
                  0, ctx->stream>>>(probs, dtopk_w, S, E, k, renormalize,
                                    dprobs);
    KC_LAUNCHED(fn, "kc_topk_bwd");
    return 0;
}

/* As kc_topk_bwd with the choices given; += as gate.c, so a repeated
 * expert adds up. */
__global__ void kc_topk_bwd_idx(const float *probs, const int *choice_idx,
                                const float *dtopk_w, int S, int E, int k,
                                int renormalize, float *dprobs)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x) {
        const float *p = probs + (size_t)t * E;
        const int *idx = choice_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k;
        float *dp = dprobs + (size_t)t * E;
        for (int e = 0; e < E; e++)
            dp[e] = 0.0f;
        swy_e_topk_bwd_row(p, idx, dw, k, renormalize, dp);
    }
}

int swy_kc_gate_topk_bwd_idx(swy_kc_ctx_t *ctx, const float *probs,
                             const int *choice_idx, const float *dtopk_w,
                             int S, int E, int k, int renormalize,
                             float *dprobs)
{
    static const char fn[] = "swy_kc_gate_topk_bwd_idx";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, k));
    if (S == 0)
        return 0;
    kc_topk_bwd_idx<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS),
                      KC_GATE_THREADS, 0, ctx->stream>>>(
        probs, choice_idx, dtopk_w, S, E, k, renormalize, dprobs);
    KC_LAUNCHED(fn, "kc_topk_bwd_idx");
    return 0;
}

/* ---- Topology gate (FasterMoE) -------------------------------------------
 * gate.c reroutes, one at a time, the cross-node token of lowest score
 * (best probability among its off-node choices), ties to the highest token
 * index, while more than `budget` cross-node tokens remain; a rerouted
 * token has score 0 and drops out.  So exactly n = clamp(n_cross - budget,
 * 0, n_cross) tokens move: those first in the order (score ascending,
 * token descending).  Here: scores, then the count, then each cross token
 * finds its rank in that order (an O(S^2) count through shared-memory
 * tiles; S is one rank's tokens) and reroutes itself when rank < n.
 * Scores live in a separate array, so a token rewriting its choices never
 * races with another reading them. */
#define KC_TOPO_THREADS 256

__global__ void kc_topo_scores(const float *probs, const int *topk_idx,
                               int S, int E, int k, const int *node_of_expert,
                               int my_node, float *score)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x)
        score[t] = swy_e_topo_cross_score(probs + (size_t)t * E,
                                 topk_idx + (size_t)t * k, k, node_of_expert,
                                 my_node);
}

/* One block: local experts, cross tokens, and how many to reroute. */
__global__ void kc_topo_count(const float *score, int S, int E, int k,
                              const int *node_of_expert, int my_node,
                              int budget, int *n_reroute, int *rerouted)
{
    __shared__ int sh[32];
    int local = 0, cross = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        local += node_of_expert[e] == my_node;
    for (int t = threadIdx.x; t < S; t += blockDim.x)
        cross += score[t] > 0.0f;
    local = kc_block_sum(local, sh);
    cross = kc_block_sum(cross, sh);
    if (threadIdx.x == 0) {
        int n = 0;
        if (local >= k && cross > budget)
            n = budget < 0 ? cross : cross - budget;
        *n_reroute = n;
        *rerouted = n;
    }
}

__global__ void kc_topo_apply(const float *probs, const float *score, int S,
                              int E, int k, int renormalize,
                              const int *node_of_expert, int my_node,
                              const int *n_reroute, int *topk_idx,
                              float *topk_w)
{
    __shared__ float tile[KC_TOPO_THREADS];
    int n = *n_reroute;
    if (n == 0)
        return; /* uniform across the grid */
    /* Every thread walks the tiles (they synchronize), whether or not its
     * own token is a candidate; the grid covers S exactly once. */
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float st = t < S ? score[t] : 0.0f;
    int rank = 0;
    for (int base = 0; base < S; base += blockDim.x) {
        __syncthreads();
        int u = base + (int)threadIdx.x;
        tile[threadIdx.x] = u < S ? score[u] : 0.0f;
        __syncthreads();
        int m = S - base < (int)blockDim.x ? S - base : (int)blockDim.x;
        for (int i = 0; i < m; i++) {
            float su = tile[i];
            rank += su > 0.0f && (su < st || (su == st && base + i > t));
        }
    }
    if (t >= S || !(st > 0.0f) || rank >= n)
        return;
    /* Top-k among this node's experts, gate.c's rule. */
    swy_e_topo_local_topk(probs + (size_t)t * E, E, k, renormalize,
                          node_of_expert, my_node, topk_idx + (size_t)t * k,
                          topk_w + (size_t)t * k);
}

int swy_kc_gate_topo_reroute(swy_kc_ctx_t *ctx, const float *probs, int S,
                             int E, int k, int renormalize,
                             const int *node_of_expert, int my_node,
                             double max_cross_frac, int *topk_idx,
                             float *topk_w, int *rerouted_d)
{
    static const char fn[] = "swy_kc_gate_topo_reroute";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, k));
    if (node_of_expert == NULL || rerouted_d == NULL)
        return kc_fail(fn, "node_of_expert and rerouted_d are required");
    if (S == 0) {
        KC_CUDA(fn, cudaMemsetAsync(rerouted_d, 0, sizeof(int), ctx->stream));
        return 0;
    }
    /* As gate.c, on the host in double. */
    double b = floor(max_cross_frac * S + 1e-9);
    int budget = b < -1.0 ? -1 : b > (double)S ? S : (int)b;
    void *work = NULL;
    KC_TRY(kc_ctx_work(ctx, fn, (size_t)S * sizeof(float), &work));
    float *score = (float *)work;
    int *n_reroute = (int *)((char *)ctx->scratch + KC_SCRATCH_TOPO);
    kc_topo_scores<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS),
                     KC_GATE_THREADS, 0, ctx->stream>>>(
        probs, topk_idx, S, E, k, node_of_expert, my_node, score);
    KC_LAUNCHED(fn, "kc_topo_scores");
    kc_topo_count<<<1, 1024, 0, ctx->stream>>>(score, S, E, k, node_of_expert,
                                               my_node, budget, n_reroute,
                                               rerouted_d);
    KC_LAUNCHED(fn, "kc_topo_count");
    unsigned blocks = (unsigned)((S + KC_TOPO_THREADS - 1) / KC_TOPO_THREADS);
    kc_topo_apply<<<blocks, KC_TOPO_THREADS, 0, ctx->stream>>>(
        probs, score, S, E, k, renormalize, node_of_expert, my_node,
        n_reroute, topk_idx, topk_w);
    KC_LAUNCHED(fn, "kc_topo_apply");
    return 0;
}

/* ---- Capacity dropping ---------------------------------------------------
 * One block per expert e walks all slots in claim order, a block-width
 * chunk at a time; a block-wide prefix count of the slots that chose e
 * gives each its claim rank, and ranks >= capacity are dropped.  That is
 * gate.c's sequential rule exactly.  Block e writes only slots whose value
 * is e (to -1); other blocks read those slots concurrently but see either
 * e or -1, both different from their own expert, so the race cannot change
 * a result. */
#define KC_SCAN_THREADS 256

__global__ void kc_drop(int *topk_idx, float *topk_w, int S, int k,
                        int uniform_capacity, const int *capacities,
                        int choice_order, int *expert_load, int *dropped)
{
    __shared__ int sh[32];
    int e = blockIdx.x;
    /* capacities [E] (swy_kc_gate_drop_each), else one for all. */
    int capacity = capacities != NULL ? capacities[e] : uniform_capacity;
    int n = S * k;
    int count = 0; /* slots that chose e so far; the same in every thread */
    for (int base = 0; base < n; base += blockDim.x) {
        int p = base + (int)threadIdx.x, s = 0, match = 0;
        if (p < n) {
            s = choice_order ? (p % S) * k + p / S : p;
            match = topk_idx[s] == e;
        }
        int total;
        int rank = count + kc_block_prefix(match, &total, sh);
        if (match && capacity >= 0 && rank >= capacity) {
            topk_idx[s] = -1;
            topk_w[s] = 0.0f;
        }
        count += total;
    }
    if (threadIdx.x == 0) {
        int kept = capacity >= 0 && count > capacity ? capacity : count;
        expert_load[e] = kept;
        atomicAdd(dropped, count - kept);
    }
}

int swy_kc_gate_drop(swy_kc_ctx_t *ctx, int *topk_idx, float *topk_w, int S,
                     int k, int E, int capacity, swy_k_drop_order_t order,
                     int *expert_load, int *dropped_d)
{
    static const char fn[] = "swy_kc_gate_drop";
    KC_CTX(fn, ctx);
    if (S < 0 || k < 1 || E <= 0 || (size_t)S * k > INT32_MAX - 1024 ||
        expert_load == NULL || dropped_d == NULL)
        return kc_fail(fn, "bad arguments S=%d k=%d E=%d (expert_load and "
                       "dropped_d are required)", S, k, E);
    KC_CUDA(fn, cudaMemsetAsync(dropped_d, 0, sizeof(int), ctx->stream));
    kc_drop<<<E, KC_SCAN_THREADS, 0, ctx->stream>>>(
        topk_idx, topk_w, S, k, capacity, NULL,
        order == SWY_K_DROP_CHOICE_ORDER, expert_load, dropped_d);
    KC_LAUNCHED(fn, "kc_drop");
    return 0;
}

int swy_kc_gate_drop_each(swy_kc_ctx_t *ctx, int *topk_idx, float *topk_w,
                          int S, int k, int E, const int *capacity,
                          swy_k_drop_order_t order, int *expert_load,
                          int *dropped_d)
{
    static const char fn[] = "swy_kc_gate_drop_each";
    KC_CTX(fn, ctx);
    if (S < 0 || k < 1 || E <= 0 || (size_t)S * k > INT32_MAX - 1024 ||
        capacity == NULL || expert_load == NULL || dropped_d == NULL)
        return kc_fail(fn, "bad arguments S=%d k=%d E=%d (capacity, "
                       "expert_load and dropped_d are required)", S, k, E);
    KC_CUDA(fn, cudaMemsetAsync(dropped_d, 0, sizeof(int), ctx->stream));
    kc_drop<<<E, KC_SCAN_THREADS, 0, ctx->stream>>>(
        topk_idx, topk_w, S, k, -1, capacity,
        order == SWY_K_DROP_CHOICE_ORDER, expert_load, dropped_d);
    KC_LAUNCHED(fn, "kc_drop");
    return 0;
}

/* ---- Auxiliary loss ------------------------------------------------------ */

/* f[e] += 1 for each of a token's first f_slots choices (integers, exact in
 * any order). */
__global__ void kc_aux_count(const float *probs, int S, int E, int f_slots,
                             float *f)
{
    int idx[KC_MAX_K];
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x) {
        swy_e_topk_row(probs + (size_t)t * E, E, f_slots, idx);
        for (int j = 0; j < f_slots; j++)
            atomicAdd(&f[idx[j]], 1.0f);
    }
}

/* One block of KC_AUX_TILE x KC_AUX_TILE threads: threadIdx.x picks an
 * expert of a tile of experts (coalesced reads of a row), threadIdx.y
 * strides over tokens; m_e is summed in double in a fixed order, f_e is
 * scaled, and thread (0, 0) adds the loss up in expert order (as gate.c;
 * deterministic). */
#define KC_AUX_TILE 32
__global__ void kc_aux_finish(const float *probs, int S, int E, int f_slots,
                              float *f, float *laux)
{
    __shared__ double part[KC_AUX_TILE][KC_AUX_TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    double loss = 0.0; /* kept by thread (0, 0) */
    for (int e0 = 0; e0 < E; e0 += KC_AUX_TILE) {
        int e = e0 + tx;
        double m = 0.0;
        if (e < E)
            for (int t = ty; t < S; t += KC_AUX_TILE)
                m += probs[(size_t)t * E + e];
        part[ty][tx] = m;
        __syncthreads();
        /* Column tx is read and rewritten by thread (tx, 0) only. */
        if (ty == 0) {
            double me = 0.0;
            for (int i = 0; i < KC_AUX_TILE; i++)
                me += part[i][tx];
            part[0][tx] = me;
        }
        __syncthreads();
        if (tx == 0 && ty == 0)
            for (int i = 0; i < KC_AUX_TILE && e0 + i < E; i++) {
                float fe = f[e0 + i] / ((float)S * (float)f_slots);
                f[e0 + i] = fe;
                loss += (double)fe * (part[0][i] / S);
            }
        __syncthreads(); /* before the next tile overwrites part */
    }
    if (tx == 0 && ty == 0)
        *laux = (float)(E * loss);
}

int swy_kc_gate_aux_loss(swy_kc_ctx_t *ctx, const float *probs, int S, int E,
                         int f_slots, float *f, float *laux_d)
{
    static const char fn[] = "swy_kc_gate_aux_loss";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, f_slots));
    KC_CUDA(fn, cudaMemsetAsync(f, 0, (size_t)E * sizeof(float),
                                ctx->stream));
    if (S == 0) {
        /* All-zero bits are 0.0f. */
        KC_CUDA(fn, cudaMemsetAsync(laux_d, 0, sizeof(float), ctx->stream));
        return 0;
    }
    kc_aux_count<<<kc_blocks(ctx, (size_t)S, KC_GATE_THREADS),
                   KC_GATE_THREADS, 0, ctx->stream>>>(probs, S, E, f_slots,
                                                      f);
    KC_LAUNCHED(fn, "kc_aux_count");
    kc_aux_finish<<<1, dim3(KC_AUX_TILE, KC_AUX_TILE), 0, ctx->stream>>>(
        probs, S, E, f_slots, f, laux_d);
    KC_LAUNCHED(fn, "kc_aux_finish");
    return 0;
}

__global__ void kc_aux_bwd(const float *f, int S, int E, float scale,
                           float *dprobs)
{
    for (int t = blockIdx.x; t < S; t += gridDim.x)
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            dprobs[(size_t)t * E + e] += scale * f[e];
}

int swy_kc_gate_aux_loss_bwd(swy_kc_ctx_t *ctx, const float *f, int S, int E,
                             float dloss, float *dprobs)
{
    static const char fn[] = "swy_kc_gate_aux_loss_bwd";
    KC_CTX(fn, ctx);
    KC_TRY(check_gate(fn, S, E, 1));
    if (S == 0)
        return 0;
    float scale = dloss * (float)E / (float)S; /* as gate.c */
    kc_aux_bwd<<<kc_blocks(ctx, (size_t)S, 1), 64, 0, ctx->stream>>>(
        f, S, E, scale, dprobs);
    KC_LAUNCHED(fn, "kc_aux_bwd");
    return 0;
}
