/* Expert FFN, y = gelu(x W1 + b1) W2 + b2, one weight set per local expert,
 * over rows grouped by expert (FastMoE's receive layout,
 * docs/architecture.md, so each expert is one pair of GEMMs). */
#include <assert.h>

#include "swy_kernels.h"

void swy_k_ffn_fwd(const float *x, const int *rows_per_expert, int n_experts,
                   int H, int F, const float *w1, const float *b1,
                   const float *w2, const float *b2, float *h_pre,
                   float *h_act, float *y)
{
    assert(n_experts >= 1 && H > 0 && F > 0);
    size_t off = 0;
    for (int e = 0; e < n_experts; e++) {
        int n = rows_per_expert[e];
        assert(n >= 0);
        swy_k_linear_fwd(x + off * H, w1 + (size_t)e * H * F,
                         b1 + (size_t)e * F, n, H, F, h_pre + off * F);
        swy_k_gelu_fwd(h_pre + off * F, (size_t)n * F, h_act + off * F);
        swy_k_linear_fwd(h_act + off * F, w2 + (size_t)e * F * H,
                         b2 + (size_t)e * H, n, F, H, y + off * H);
        off += (size_t)n;
    }
}

void swy_k_ffn_bwd(const float *x, const float *h_pre, const float *h_act,
                   const float *dy, const int *rows_per_expert, int n_experts,
                   int H, int F, const float *w1, const float *w2, float *dh,
                   float *dx, float *dw1, float *db1, float *dw2,
                   float *db2)
{
    assert(n_experts >= 1 && H > 0 && F > 0);
    size_t off = 0;
    for (int e = 0; e < n_experts; e++) {
        int n = rows_per_expert[e];
        assert(n >= 0);
        /* Second layer: dW2 += h_act^T dy, db2 += sum dy, dh = dy W2^T. */
        swy_k_linear_bwd(h_act + off * F, w2 + (size_t)e * F * H,
                         dy + off * H, n, F, H, dh + off * F,
                         dw2 + (size_t)e * F * H, db2 + (size_t)e * H);
        /* Through the activation, in place. */
        swy_k_gelu_bwd(h_pre + off * F, dh + off * F, (size_t)n * F,
                       dh + off * F);
        /* First layer: dW1 += x^T dh, db1 += sum dh, dx = dh W1^T. */
        swy_k_linear_bwd(x + off * H, w1 + (size_t)e * H * F, dh + off * F,
                         n, H, F, dx != NULL ? dx + off * H : NULL,
                         dw1 + (size_t)e * H * F, db1 + (size_t)e * F);
        off += (size_t)n;
    }
}
