/* The MoE gate: logits, softmax, top-k with weights, capacity dropping and
 * the GShard auxiliary loss, with their backward passes. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "elem.h"
#include "swy_kernels.h"

/* k is small (GShard 2, FastMoE up to a handful); the per-token index
 * buffers below live on the stack. */
#define SWY_K_GATE_MAX_K 64

void swy_k_gate_logits_fwd(const float *x, const float *wg, int S, int H,
                           int E, float *logits)
{
    swy_k_linear_fwd(x, wg, NULL, S, H, E, logits);
}

void swy_k_gate_logits_bwd(const float *x, const float *wg,
                           const float *dlogits, int S, int H, int E,
                           float *dx, float *dwg)
{
    swy_k_linear_bwd(x, wg, dlogits, S, H, E, dx, dwg, NULL);
}

void swy_k_softmax_fwd(const float *logits, int S, int E, float *probs)
{
    assert(S >= 0 && E > 0);
    for (int t = 0; t < S; t++) {
        const float *row = logits + (size_t)t * E;
        float *p = probs + (size_t)t * E;
        /* Written out instead of swy_e_softmax_row so probs may alias
         * logits: max and sum are taken before the row is overwritten. */
        float m = swy_e_row_max(row, E);
        float inv = 1.0f / swy_e_row_expsum(row, E, m);
        for (int e = 0; e < E; e++)
            p[e] = swy_e_exp_shifted(row[e], m) * inv;
    }
}

void swy_k_softmax_bwd(const float *probs, const float *dprobs, int S, int E,
                       float *dlogits)
{
    assert(S >= 0 && E > 0);
    for (int t = 0; t < S; t++) {
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

void swy_k_gate_topk(const float *logits, int S, int E, int k,
                     int renormalize, int *topk_idx, float *topk_w,
                     float *probs)
{
    assert(S >= 0 && E > 0 && k >= 1 && k <= E && k <= SWY_K_GATE_MAX_K);
    swy_k_softmax_fwd(logits, S, E, probs);
    for (int t = 0; t < S; t++) {
        const float *p = probs + (size_t)t * E;
        int *idx = topk_idx + (size_t)t * k;
        float *w = topk_w + (size_t)t * k;
        swy_e_topk_row(p, E, k, idx);
        float z = 0.0f;
        for (int j = 0; j < k; j++) {
            w[j] = p[idx[j]];
            z += w[j];
        }
        /* z >= p of the top choice >= 1/E > 0. */
        if (renormalize)
            for (int j = 0; j < k; j++)
                w[j] /= z;
    }
}

void swy_k_gate_topk_bwd(const float *probs, const float *dtopk_w, int S,
                         int E, int k, int renormalize, float *dprobs)
{
    assert(S >= 0 && E > 0 && k >= 1 && k <= E && k <= SWY_K_GATE_MAX_K);
    int idx[SWY_K_GATE_MAX_K];
    memset(dprobs, 0, (size_t)S * E * sizeof(*dprobs));
    for (int t = 0; t < S; t++) {
        const float *p = probs + (size_t)t * E;
        const float *dw = dtopk_w + (size_t)t * k;
        float *dp = dprobs + (size_t)t * E;
        swy_e_topk_row(p, E, k, idx);
        swy_e_topk_bwd_row(p, idx, dw, k, renormalize, dp);
    }
}

int swy_k_gate_capacity(double capacity_factor, int S, int k, int E)
{
    assert(S >= 0 && k >= 1 && E > 0);
    if (capacity_factor <= 0.0)
        return S * k;
    double c = capacity_factor * (double)S * (double)k / (double)E;
    return (int)ceil(c * (1.0 - 1e-9));
}

void swy_k_gate_capacity_shares(double capacity_factor, int S, int k, int E,
                                const double *expert_share, int *capacity)
{
    assert(S >= 0 && k >= 1 && E > 0 && expert_share != NULL);
    for (int e = 0; e < E; e++) {
        assert(expert_share[e] >= 0.0 && isfinite(expert_share[e]));
        double c = capacity_factor * (double)S * (double)k * expert_share[e];
        capacity[e] = capacity_factor <= 0.0 ? -1
                                             : (int)ceil(c * (1.0 - 1e-9));
    }
}

/* Let slot (t, j) claim a place at its expert, or drop it; capacity[e]
 * when capacity is non-NULL, else the same uniform_capacity for all. */
static int claim_or_drop(int *topk_idx, float *topk_w, size_t slot,
                         int uniform_capacity, const int *capacity,
                         int *load)
{
    int e = topk_idx[slot];
    if (e < 0)
        return 0;
    int cap = capacity != NULL ? capacity[e] : uniform_capacity;
    if (cap < 0 || load[e] < cap) {
        load[e]++;
        return 0;
    }
    topk_idx[slot] = -1;
    topk_w[slot] = 0.0f;
    return 1;
}

static int gate_drop(int *topk_idx, float *topk_w, int S, int k, int E,
                     int uniform_capacity, const int *capacity,
                     swy_k_drop_order_t order, int *expert_load)
{
    assert(S >= 0 && k >= 1 && E > 0 && expert_load != NULL);
    int dropped = 0;
    memset(expert_load, 0, (size_t)E * sizeof(*expert_load));
    if (order == SWY_K_DROP_CHOICE_ORDER) {
        for (int j = 0; j < k; j++)
            for (int t = 0; t < S; t++)
                dropped += claim_or_drop(topk_idx, topk_w,
                                         (size_t)t * k + j, uniform_capacity,
                                         capacity, expert_load);
    } else {
        for (size_t s = 0; s < (size_t)S * k; s++)
            dropped += claim_or_drop(topk_idx, topk_w, s, uniform_capacity,
                                     capacity, expert_load);
    }
    return dropped;
}

int swy_k_gate_drop(int *topk_idx, float *topk_w, int S, int k, int E,
                    int capacity, swy_k_drop_order_t order, int *expert_load)
{
    return gate_drop(topk_idx, topk_w, S, k, E, capacity, NULL, order,
                     expert_load);
}

int swy_k_gate_drop_each(int *topk_idx, float *topk_w, int S, int k, int E,
                         const int *capacity, swy_k_drop_order_t order,
                         int *expert_load)
{
    assert(capacity != NULL);
    return gate_drop(topk_idx, topk_w, S, k, E, -1, capacity, order,
                     expert_load);
}

float swy_k_gate_aux_loss(const float *probs, int S, int E, int f_slots,
                          float *f)
{
    assert(S >= 0 && E > 0 && f_slots >= 1 && f_slots <= E &&
           f_slots <= SWY_K_GATE_MAX_K);
    int idx[SWY_K_GATE_MAX_K];
    memset(f, 0, (size_t)E * sizeof(*f));
    if (S == 0)
        return 0.0f;
    /* Counts are integers: accumulate them exactly, then scale. */
    for (int t = 0; t < S; t++) {
        swy_e_topk_row(probs + (size_t)t * E, E, f_slots, idx);
        for (int j = 0; j < f_slots; j++)
            f[idx[j]] += 1.0f;
    }
    double loss = 0.0;
    for (int e = 0; e < E; e++) {
        double m = 0.0;
        for (int t = 0; t < S; t++)
            m += probs[(size_t)t * E + e];
        f[e] /= (float)S * (float)f_slots;
        loss += (double)f[e] * (m / S);
    }
    return (float)(E * loss);
}

void swy_k_gate_aux_loss_bwd(const float *f, int S, int E, float dloss,
                             float *dprobs)
{
    assert(S >= 0 && E > 0);
    if (S == 0)
        return;
    float scale = dloss * (float)E / (float)S;
    for (int t = 0; t < S; t++)
        for (int e = 0; e < E; e++)
            dprobs[(size_t)t * E + e] += scale * f[e];
}

void swy_k_gate_topk_bwd_idx(const float *probs, const int *choice_idx,
                             const float *dtopk_w, int S, int E, int k,
                             int renormalize, float *dprobs)
{
    assert(S >= 0 && E > 0 && k >= 1 && k <= E);
    memset(dprobs, 0, (size_t)S * E * sizeof(*dprobs));
    for (int t = 0; t < S; t++)
        swy_e_topk_bwd_row(probs + (size_t)t * E, choice_idx + (size_t)t * k,
                           dtopk_w + (size_t)t * k, k, renormalize,
                           dprobs + (size_t)t * E);
}

int swy_k_gate_topo_reroute(const float *probs, int S, int E, int k,
                            int renormalize, const int *node_of_expert,
                            int my_node, double max_cross_frac,
                            int *topk_idx, float *topk_w)
{
    assert(S >= 0 && E > 0 && k >= 1 && k <= E && k <= SWY_K_GATE_MAX_K);
    int local = 0;
    for (int e = 0; e < E; e++)
        local += node_of_expert[e] == my_node;
    if (local < k)
        return 0; /* not enough experts on this node to reroute to */
    int budget = (int)floor(max_cross_frac * S + 1e-9);
    int rerouted = 0;
    /* Tokens with a cross-node choice, best cross probability first; ties
     * by token order (stable), so the result is deterministic. */
    int n_cross = 0;
    for (int t = 0; t < S; t++)
        if (swy_e_topo_cross_score(probs + (size_t)t * E,
                                   topk_idx + (size_t)t * k, k,
                                   node_of_expert, my_node) > 0.0f)
            n_cross++;
    while (n_cross > budget) {
        /* Reroute the weakest remaining cross token: O(S) per token,
         * small S per gate group. */
        int worst = -1;
        float worst_score = 0.0f;
        for (int t = S - 1; t >= 0; t--) {
            float sc = swy_e_topo_cross_score(probs + (size_t)t * E,
                                              topk_idx + (size_t)t * k, k,
                                              node_of_expert, my_node);
            if (sc > 0.0f && (worst < 0 || sc < worst_score)) {
                worst = t;
                worst_score = sc;
            }
        }
        if (worst < 0)
            break;
        swy_e_topo_local_topk(probs + (size_t)worst * E, E, k, renormalize,
                              node_of_expert, my_node,
                              topk_idx + (size_t)worst * k,
                              topk_w + (size_t)worst * k);
        rerouted++;
        n_cross--;
    }
    return rerouted;
}
