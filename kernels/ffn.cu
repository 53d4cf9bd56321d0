/* Expert FFN, y = gelu(x W1 + b1) W2 + b2, one weight set per local expert,
 * over rows grouped by expert: per non-empty expert, the same GEMMs and
 * element-wise steps as ffn.c, enqueued on the context's stream.  The row
 * counts are on the host (swy_kernels_cuda.h), so the loop needs no sync.
 *
 * In bf16 the GELU rides in the GEMMs' cuBLASLt epilogues where the
 * context allows it (kc_linear_gelu_fwd, kc_linear_dgelu_bwd): the first
 * layer writes h_pre and h_act in one GEMM, and the backward's
 * dh = (dy W2^T) gelu'(h_pre) is one GEMM.  The biases are in the
 * epilogues in both dtypes (kc_linear_fwd).
 *
 * With grouped GEMMs on (swy_kc_ctx_set_grouped), each GEMM runs for all
 * experts in one call instead (grouped.cu). */
#include "kc_internal_cuda.h"

static int check_ffn(const char *fn, const int *rows, int n_experts, int H,
                     int F)
{
    if (rows == NULL || n_experts < 1 || H <= 0 || F <= 0)
        return kc_fail(fn, "bad arguments n_experts=%d H=%d F=%d rows=%p",
                       n_experts, H, F, (const void *)rows);
    for (int e = 0; e < n_experts; e++)
        if (rows[e] < 0)
            return kc_fail(fn, "rows_per_expert[%d] = %d", e, rows[e]);
    return 0;
}

/* Pointer p advanced by i elements of esize bytes (void * arithmetic). */
static inline const void *at(const void *p, size_t i, size_t esize)
{
    return (const char *)p + i * esize;
}
static inline void *at(void *p, size_t i, size_t esize)
{
    return (char *)p + i * esize;
}

static int kc_ffn_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                      const void *x, const int *rows, int n_experts, int H,
                      int F, const void *w1, const void *b1, const void *w2,
                      const void *b2, void *h_pre, void *h_act, void *y)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_ffn(fn, rows, n_experts, H, F));
    if (ctx->grouped)
        return kc_ffn_fwd_grouped(ctx, fn, dt, x, rows, n_experts, H, F, w1,
                                  b1, w2, b2, h_pre, h_act, y);
    size_t es = dt == CUDA_R_16BF ? 2 : 4;
    size_t off = 0, HF = (size_t)H * F;
    for (int e = 0; e < n_experts; e++) {
        int n = rows[e];
        if (n == 0)
            continue;
        KC_TRY(kc_linear_gelu_fwd(ctx, fn, dt, at(x, off * H, es),
                                  at(w1, e * HF, es),
                                  at(b1, (size_t)e * F, es), n, H, F,
                                  at(h_pre, off * F, es),
                                  at(h_act, off * F, es)));
        KC_TRY(kc_linear_fwd(ctx, fn, dt, at(h_act, off * F, es),
                             at(w2, e * HF, es), at(b2, (size_t)e * H, es), n,
                             F, H, at(y, off * H, es)));
        off += (size_t)n;
    }
    return 0;
}

static int kc_ffn_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                      const void *x, const void *h_pre, const void *h_act,
                      const void *dy, const int *rows, int n_experts, int H,
                      int F, const void *w1, const void *w2, void *dh,
                      void *dx, float *dw1, float *db1, float *dw2,
                      float *db2)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_ffn(fn, rows, n_experts, H, F));
    if (ctx->grouped)
        return kc_ffn_bwd_grouped(ctx, fn, dt, x, h_pre, h_act, dy, rows,
                                  n_experts, H, F, w1, w2, dh, dx, dw1, db1,
                                  dw2, db2);
    size_t es = dt == CUDA_R_16BF ? 2 : 4;
    size_t off = 0, HF = (size_t)H * F;
    for (int e = 0; e < n_experts; e++) {
        int n = rows[e];
        if (n == 0)
            continue;
        /* Second layer: dW2 += h_act^T dy, db2 += sum dy, and through the
         * activation dh = (dy W2^T) gelu'(h_pre). */
        KC_TRY(kc_linear_dgelu_bwd(ctx, fn, dt, at(h_act, off * F, es),
                                   at(h_pre, off * F, es), at(w2, e * HF, es),
                                   at(dy, off * H, es), n, F, H,
                                   at(dh, off * F, es), dw2 + e * HF,
                                   db2 + (size_t)e * H));
        /* First layer: dW1 += x^T dh, db1 += sum dh, dx = dh W1^T. */
        KC_TRY(kc_linear_bwd(ctx, fn, dt, at(x, off * H, es),
                             at(w1, e * HF, es), at(dh, off * F, es), n, H, F,
                             dx != NULL ? at(dx, off * H, es) : NULL,
                             dw1 + e * HF, db1 + (size_t)e * F));
        off += (size_t)n;
    }
    return 0;
}

int swy_kc_ffn_fwd(swy_kc_ctx_t *ctx, const float *x,
                   const int *rows_per_expert, int n_experts, int H, int F,
                   const float *w1, const float *b1, const float *w2,
                   const float *b2, float *h_pre, float *h_act, float *y)
{
    return kc_ffn_fwd(ctx, "swy_kc_ffn_fwd", CUDA_R_32F, x, rows_per_expert,
                      n_experts, H, F, w1, b1, w2, b2, h_pre, h_act, y);
}

int swy_kc_ffn_bwd(swy_kc_ctx_t *ctx, const float *x, const float *h_pre,
                   const float *h_act, const float *dy,
                   const int *rows_per_expert, int n_experts, int H, int F,
                   const float *w1, const float *w2, float *dh, float *dx,
                   float *dw1, float *db1, float *dw2, float *db2)
{
    return kc_ffn_bwd(ctx, "swy_kc_ffn_bwd", CUDA_R_32F, x, h_pre, h_act, dy,
                      rows_per_expert, n_experts, H, F, w1, w2, dh, dx, dw1,
                      db1, dw2, db2);
}

int swy_kc_ffn_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                        const int *rows_per_expert, int n_experts, int H,
                        int F, const swy_kc_bf16_t *w1,
                        const swy_kc_bf16_t *b1, const swy_kc_bf16_t *w2,
                        const swy_kc_bf16_t *b2, swy_kc_bf16_t *h_pre,
                        swy_kc_bf16_t *h_act, swy_kc_bf16_t *y)
{
    return kc_ffn_fwd(ctx, "swy_kc_ffn_fwd_bf16", CUDA_R_16BF, x,
                      rows_per_expert, n_experts, H, F, w1, b1, w2, b2, h_pre,
                      h_act, y);
}

int swy_kc_ffn_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                        const swy_kc_bf16_t *h_pre,
                        const swy_kc_bf16_t *h_act, const swy_kc_bf16_t *dy,
                        const int *rows_per_expert, int n_experts, int H,
                        int F, const swy_kc_bf16_t *w1,
                        const swy_kc_bf16_t *w2, swy_kc_bf16_t *dh,
                        swy_kc_bf16_t *dx, float *dw1, float *db1,
                        float *dw2, float *db2)
{
    return kc_ffn_bwd(ctx, "swy_kc_ffn_bwd_bf16", CUDA_R_16BF, x, h_pre,
                      h_act, dy, rows_per_expert, n_experts, H, F, w1, w2, dh,
                      dx, dw1, db1, dw2, db2);
}
