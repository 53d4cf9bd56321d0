/* Per-element definitions of the MoE math, shared by the CPU loops in
 * kernels/ (the .c files) and by future CUDA kernels, so that both compute
 * the same function down to the formula (GELU variant, tie rule of top-k,
 * Adam's bias correction, bf16 rounding).  Everything here is `static inline` and marked
 * SWY_HD, which nvcc reads as __host__ __device__.
 *
 * Only <math.h>, <stdint.h> and <string.h> functions are used; all of them
 * exist in CUDA device code.  Inputs are assumed finite unless a function
 * says otherwise. */
#ifndef SWY_KERNELS_ELEM_H
#define SWY_KERNELS_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SWY_HD __host__ __device__
#else
#define SWY_HD
#endif

/* ---- GELU -------------------------------------------------------------
 * The tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2; the one
 * GPT-2 and Megatron use, PyTorch's gelu(approximate='tanh')):
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
 * Chosen over the erf form because it has the same cost on CPU and GPU and
 * its derivative needs only the same tanh. */
#define SWY_E_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define SWY_E_GELU_A 0.044715f

/* gelu and its derivative given t = tanh(u): a GPU kernel may bring its
 * own tanh. */
SWY_HD static inline float swy_e_gelu_of_tanh(float x, float t)
{
    return 0.5f * x * (1.0f + t);
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 a x^2). */
SWY_HD static inline float swy_e_gelu_grad_of_tanh(float x, float t)
{
    float x2 = x * x;
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * SWY_E_GELU_C *
               (1.0f + 3.0f * SWY_E_GELU_A * x2);
}

SWY_HD static inline float swy_e_gelu(float x)
{
    float u = SWY_E_GELU_C * (x + SWY_E_GELU_A * x * x * x);
    return swy_e_gelu_of_tanh(x, tanhf(u));
}

SWY_HD static inline float swy_e_gelu_grad(float x)
{
    float x2 = x * x;
    return swy_e_gelu_grad_of_tanh(
        x, tanhf(SWY_E_GELU_C * (x + SWY_E_GELU_A * x2 * x)));
}

/* ---- Softmax ------------------------------------------------------------
 * exp is always taken of (x - max(row)) <= 0, so it never overflows and the
 * largest term is exactly 1, which keeps the denominator >= 1. */
SWY_HD static inline float swy_e_row_max(const float *x, int n)
{
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

SWY_HD static inline float swy_e_exp_shifted(float x, float row_max)
{
    return expf(x - row_max);
}

/* Sum of exp(x[i] - row_max) over the row. */
SWY_HD static inline float swy_e_row_expsum(const float *x, int n,
                                            float row_max)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += swy_e_exp_shifted(x[i], row_max);
    return s;
}

/* p = softmax(x) over one row of n > 0 entries. */
SWY_HD static inline void swy_e_softmax_row(const float *x, int n, float *p)
{
    float m = swy_e_row_max(x, n);
    float s = swy_e_row_expsum(x, n, m);
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++)
        p[i] = swy_e_exp_shifted(x[i], m) * inv;
}

/* Softmax backward for one element: dx_i = p_i (dp_i - sum_j dp_j p_j),
 * where dot = sum_j dp_j p_j over the row. */
SWY_HD static inline float swy_e_softmax_grad(float p, float dp, float dot)
{
    return p * (dp - dot);
}

/* ---- Top-k --------------------------------------------------------------
 * Indices of the k largest of p[0..n), largest first.  Ties go to the lower
 * index (a strict '>' comparison scanning upwards), so the choice is a pure
 * function of the values: the backward passes recompute it from the saved
 * probabilities instead of storing the pre-capacity choice.  O(n k^2); k is
 * small (1, 2, 4) in every MoE gate. */
SWY_HD static inline void swy_e_topk_row(const float *p, int n, int k,
                                         int *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int l = 0; l < j; l++)
                taken |= idx[l] == e;
            if (taken)
                continue;
            if (best < 0 || p[e] > p[best])
                best = e;
        }
        idx[j] = best;
    }
}

/* Gradient of one token's top-k weights to its probabilities, with the
 * choices idx[0..k) given: w_j = p_j (renormalize 0) or p_j / z with
 * z = sum_l p_l over the chosen, so dL/dp_j = dw_j or (dw_j - sum_l dw_l
 * w_l) / z.  Adds into dp (zeroed by the caller). */
SWY_HD static inline void swy_e_topk_bwd_row(const float *p, const int *idx,
                                             const float *dw, int k,
                                             int renormalize, float *dp)
{
    if (!renormalize) {
        for (int j = 0; j < k; j++)
            dp[idx[j]] += dw[j];
        return;
    }
    float z = 0.0f, dot = 0.0f;
    for (int j = 0; j < k; j++)
        z += p[idx[j]];
    for (int j = 0; j < k; j++)
        dot += dw[j] * (p[idx[j]] / z);
    for (int j = 0; j < k; j++)
        dp[idx[j]] += (dw[j] - dot) / z;
}

/* ---- Topology gate (FasterMoE) -------------------------------------------
 * A token's score: its best probability among choices off my_node (0 when
 * every choice is on the node). */
SWY_HD static inline float swy_e_topo_cross_score(const float *p,
                                                  const int *idx, int k,
                                                  const int *node_of_expert,
                                                  int my_node)
{
    float best = 0.0f;
    for (int j = 0; j < k; j++)
        if (node_of_expert[idx[j]] != my_node && p[idx[j]] > best)
            best = p[idx[j]];
    return best;
}

/* Reroute one token: its top-k among the experts on my_node (largest
 * first, lower id on ties, as swy_e_topk_row) and their weights. */
SWY_HD static inline void swy_e_topo_local_topk(const float *p, int E, int k,
                                                int renormalize,
                                                const int *node_of_expert,
                                                int my_node, int *idx,
                                                float *w)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (node_of_expert[e] != my_node)
                continue;
            int taken = 0;
            for (int l = 0; l < j; l++)
                taken |= idx[l] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        idx[j] = best;
    }
    float z = 0.0f;
    for (int j = 0; j < k; j++)
        z += p[idx[j]];
    for (int j = 0; j < k; j++)
        w[j] = renormalize ? p[idx[j]] / z : p[idx[j]];
}

/* ---- Cross-entropy ------------------------------------------------------
 * Loss of one row given its max and expsum (see above) and the logit of the
 * true class: -log softmax(x)_y = log(sum exp(x - m)) + m - x_y. */
SWY_HD static inline float swy_e_xent_loss(float logit_label, float row_max,
                                           float row_expsum)
{
    return logf(row_expsum) + row_max - logit_label;
}

/* d loss / d logit_i = scale * (p_i - [i == y]). */
SWY_HD static inline float swy_e_xent_grad(float p, int is_label, float scale)
{
    return scale * (p - (is_label ? 1.0f : 0.0f));
}

/* ---- Adam ---------------------------------------------------------------
 * One element of Adam (Kingma & Ba 2015, Algorithm 1) with bias correction,
 * written as PyTorch's torch.optim.Adam/AdamW compute it:
 *   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2,
 *   p -= lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc_i = 1 - b_i^step.
 * Weight decay wd: decoupled != 0 is AdamW (p -= lr wd p before the step,
 * Loshchilov & Hutter 2019); decoupled == 0 adds wd p to the gradient (L2,
 * torch.optim.Adam's weight_decay).  bc1 and bc2 are computed once per step
 * by the caller. */
SWY_HD static inline float swy_e_adam(float p, float g, float *m, float *v,
                                      float lr, float beta1, float beta2,
                                      float eps, float wd, int decoupled,
                                      float bc1, float bc2)
{
    if (wd != 0.0f) {
        if (decoupled)
            p -= lr * wd * p;
        else
            g += wd * p;
    }
    float mn = beta1 * *m + (1.0f - beta1) * g;
    float vn = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mn;
    *v = vn;
    return p - lr * (mn / bc1) / (sqrtf(vn / bc2) + eps);
}

/* ---- bfloat16 -----------------------------------------------------------
 * bf16 is the top 16 bits of an IEEE binary32.  float -> bf16 rounds to
 * nearest, ties to even (add 0x7fff plus the lowest kept bit, then
 * truncate); values that round past the largest bf16 become infinity, as
 * IEEE rounding requires.  NaN stays NaN: its payload is truncated and the
 * quiet bit forced, because truncating a signalling NaN whose payload sits
 * in the low 16 bits would otherwise produce infinity. */
SWY_HD static inline uint16_t swy_e_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

SWY_HD static inline float swy_e_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

#endif /* SWY_KERNELS_ELEM_H */
