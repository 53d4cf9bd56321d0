/* Dense linear layer, y = x W + b, through cuBLAS (fp32 compute on fp32 or
 * bf16 storage), and the bias-gradient column sums; the GEMMs with a
 * fused epilogue (bias, GELU) through cuBLASLt.
 *
 * Row-major X[N][in] is, to column-major cuBLAS, X^T with leading dimension
 * in; so y = x W is computed as y^T = W^T x^T with W^T the column-major
 * view of W (ld out), which needs no transposes. */
#include <stdio.h>

#include "kc_internal_cuda.h"

/* Seeds every row of y[N][out] with b[out], so the GEMM adds onto it with
 * beta = 1 (as the CPU kernel does). */
template <typename T>
__global__ void kc_bias_fill(const T *b, int N, int out, T *y)
{
    for (int r = blockIdx.x; r < N; r += gridDim.x)
        for (int c = threadIdx.x; c < out; c += blockDim.x)
            y[(size_t)r * out + c] = b[c];
}

/* db[c] += sum over r of dy[r][c]. */
template <typename T>
__global__ void kc_colsum(const T *dy, int N, int cols, float *db)
{
    kc_colsum_block(dy, 0, N, cols, db);
}

/* The arguments every linear kernel checks first: the context, the dtype
 * and the sizes (N may be 0: nothing to do). */
static int check_linear(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t t,
                        int N, int in, int out)
{
    KC_CTX(fn, ctx);
    if (t != CUDA_R_32F && t != CUDA_R_16BF)
        return kc_fail(fn, "internal: dtype %d", (int)t);
    if (N < 0 || in <= 0 || out <= 0)
        return kc_fail(fn, "bad sizes N=%d in=%d out=%d", N, in, out);
    return 0;
}

int kc_gemm(swy_kc_ctx_t *ctx, const char *fn, cublasOperation_t ta,
            cublasOperation_t tb, int m, int n, int k, const void *A,
            cudaDataType_t at, int lda, const void *B, cudaDataType_t bt,
            int ldb, float beta, void *C, cudaDataType_t ct, int ldc)
{
    const float alpha = 1.0f;
    return kc_blas_check(fn, "cublasGemmEx",
                         cublasGemmEx(ctx->blas, ta, tb, m, n, k, &alpha, A,
                                      at, lda, B, bt, ldb, &beta, C, ct, ldc,
                                      CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
}

/* ---- cuBLASLt with fused epilogues -------------------------------------- */

/* Largest power of two, at most 256, that divides p's address: the
 * alignment cuBLASLt may assume (its default is 256). */
static uint32_t align_of(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1)) != 0)
        a >>= 1;
    return a;
}

/* Records why a GEMM took the separate passes; returns 0 (not an error). */
static int lt_fall_back(swy_kc_ctx_t *ctx, const char *what,
                        cublasStatus_t st)
{
    ctx->lt_fell_back++;
    snprintf(ctx->lt_why, sizeof(ctx->lt_why), "%s: status %d", what,
             (int)st);
    return 0;
}

#define LT_SET(what, call)                                                   \
    do {                                                                     \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                        \
            rc = lt_fall_back(ctx, what, st);                                \
            goto out;                                                        \
        }                                                                    \
    } while (0)

int kc_lt_gemm(swy_kc_ctx_t *ctx, const char *fn, const kc_lt_gemm_t *g,
               int *fused)
{
    *fused = 0;
    if (!ctx->epilogues || ctx->lt == NULL)
        return 0;
    /* cuBLASLt's GELU auxiliary matrix needs ld % 8 == 0 (cublasLt.h) and
     * its own alignment; do not ask for what it cannot take. */
    if (g->aux != NULL && (g->aux_ld % 8 != 0 || !kc_aligned16(g->aux)))
        return lt_fall_back(ctx, "GELU aux ld or alignment",
                            CUBLAS_STATUS_NOT_SUPPORTED);
    int rc = 0;
    cublasStatus_t st;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    uint32_t epi = (uint32_t)g->epi;
    int64_t aux_ld = g->aux_ld;
    uint64_t ws = KC_BLAS_WORKSPACE_BYTES;
    /* As the cuBLAS handle's DISALLOW_REDUCED_PRECISION_REDUCTION: split-K
     * partial sums stay in fp32, never in a bf16 output. */
    uint32_t reduce = g->dtype == CUDA_R_16BF
                          ? (uint32_t)(CUBLASLT_REDUCTION_SCHEME_NONE |
                                       CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                          : (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK;
    uint32_t al_a = align_of(g->A), al_b = align_of(g->B),
             al_d = align_of(g->D);
    const float alpha = 1.0f, beta = 0.0f;

    LT_SET("cublasLtMatmulDescCreate",
           cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_SET("TRANSA", cublasLtMatmulDescSetAttribute(
                         op, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta,
                         sizeof(g->ta)));
    LT_SET("TRANSB", cublasLtMatmulDescSetAttribute(
                         op, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb,
                         sizeof(g->tb)));
    LT_SET("EPILOGUE", cublasLtMatmulDescSetAttribute(
                           op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                           sizeof(epi)));
    if (g->bias != NULL)
        LT_SET("BIAS_POINTER", cublasLtMatmulDescSetAttribute(
                                   op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                   &g->bias, sizeof(g->bias)));
    if (g->aux != NULL) {
        LT_SET("EPILOGUE_AUX_POINTER",
               cublasLtMatmulDescSetAttribute(
                   op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                   sizeof(g->aux)));
        LT_SET("EPILOGUE_AUX_LD",
               cublasLtMatmulDescSetAttribute(
                   op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                   sizeof(aux_ld)));
    }
    /* Layouts of the stored matrices, before op(). */
    LT_SET("layout A", cublasLtMatrixLayoutCreate(
                           &la, g->dtype,
                           (uint64_t)(g->ta == CUBLAS_OP_N ? g->m : g->k),
                           (uint64_t)(g->ta == CUBLAS_OP_N ? g->k : g->m),
                           g->lda));
    LT_SET("layout B", cublasLtMatrixLayoutCreate(
                           &lb, g->dtype,
                           (uint64_t)(g->tb == CUBLAS_OP_N ? g->k : g->n),
                           (uint64_t)(g->tb == CUBLAS_OP_N ? g->n : g->k),
                           g->ldb));
    LT_SET("layout D", cublasLtMatrixLayoutCreate(&ld, g->dtype,
                                                  (uint64_t)g->m,
                                                  (uint64_t)g->n, g->ldd));
    LT_SET("cublasLtMatmulPreferenceCreate",
           cublasLtMatmulPreferenceCreate(&pref));
    LT_SET("MAX_WORKSPACE_BYTES",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
               sizeof(ws)));
    LT_SET("REDUCTION_SCHEME_MASK",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduce,
               sizeof(reduce)));
    LT_SET("MIN_ALIGNMENT_A_BYTES",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
               sizeof(al_a)));
    LT_SET("MIN_ALIGNMENT_B_BYTES",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
               sizeof(al_b)));
    LT_SET("MIN_ALIGNMENT_C_BYTES",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
               sizeof(al_d)));
    LT_SET("MIN_ALIGNMENT_D_BYTES",
           cublasLtMatmulPreferenceSetAttribute(
               pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
               sizeof(al_d)));
    /* cuBLASLt caches its heuristics per problem, so asking per call is
     * cheap once the shapes repeat. */
    LT_SET("cublasLtMatmulAlgoGetHeuristic",
           cublasLtMatmulAlgoGetHeuristic(ctx->lt, op, la, lb, ld, ld, pref,
                                          1, &res, &n_res));
    if (n_res < 1) {
        rc = lt_fall_back(ctx, "no cuBLASLt algorithm",
                          CUBLAS_STATUS_NOT_SUPPORTED);
        goto out;
    }
    /* From here a failure is the GEMM's, not a missing feature. */
    rc = kc_blas_check(fn, "cublasLtMatmul",
                       cublasLtMatmul(ctx->lt, op, &alpha, g->A, la, g->B,
                                      lb, &beta, g->D, ld, g->D, ld,
                                      &res.algo, ctx->blas_workspace,
                                      KC_BLAS_WORKSPACE_BYTES, ctx->stream));
    if (rc == 0) {
        ctx->lt_fused++;
        *fused = 1;
    }
out:
    if (pref != NULL)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ld != NULL)
        cublasLtMatrixLayoutDestroy(ld);
    if (lb != NULL)
        cublasLtMatrixLayoutDestroy(lb);
    if (la != NULL)
        cublasLtMatrixLayoutDestroy(la);
    if (op != NULL)
        cublasLtMatmulDescDestroy(op);
    return rc;
}

#undef LT_SET

/* ---- Linear ------------------------------------------------------------ */

int kc_linear_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *b, int N, int in,
                  int out, void *y)
{
    KC_TRY(check_linear(ctx, fn, dtype, N, in, out));
    if (N == 0)
        return 0;
    if (b != NULL) {
        /* y^T = W^T x^T + b, the bias in the GEMM's epilogue. */
        kc_lt_gemm_t g = {CUBLAS_OP_N, CUBLAS_OP_N, out, N, in, w, out, x,
                          in, y, out, dtype, CUBLASLT_EPILOGUE_BIAS, b, NULL,
                          0};
        int fused;
        KC_TRY(kc_lt_gemm(ctx, fn, &g, &fused));
        if (fused)
            return 0;
    }
    float beta = 0.0f;
    if (b != NULL) {
        unsigned th = 256;
        unsigned bl = kc_blocks(ctx, (size_t)N, 1); /* a row per block */
        if (dtype == CUDA_R_16BF)
            kc_bias_fill<<<bl, th, 0, ctx->stream>>>(
                (const swy_kc_bf16_t *)b, N, out, (swy_kc_bf16_t *)y);
        else
            kc_bias_fill<<<bl, th, 0, ctx->stream>>>(
                (const float *)b, N, out, (float *)y);
        KC_LAUNCHED(fn, "kc_bias_fill");
        beta = 1.0f;
    }
    return kc_gemm(ctx, fn, CUBLAS_OP_N, CUBLAS_OP_N, out, N, in, w, dtype,
                   out, x, dtype, in, beta, y, dtype, out);
}

int kc_linear_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *dy, int N, int in,
                  int out, void *dx, float *dw, float *db)
{
    KC_TRY(check_linear(ctx, fn, dtype, N, in, out));
    if (N == 0)
        return 0;
    /* dx^T[in][N] = W[in][out] dy^T: W is the transpose of its column-major
     * view. */
    if (dx != NULL)
        KC_TRY(kc_gemm(ctx, fn, CUBLAS_OP_T, CUBLAS_OP_N, in, N, out, w,
                       dtype, out, dy, dtype, out, 0.0f, dx, dtype, in));
    /* dW^T[out][in] += dy^T x: x (N x in) is the transpose of its
     * column-major view. */
    if (dw != NULL)
        KC_TRY(kc_gemm(ctx, fn, CUBLAS_OP_N, CUBLAS_OP_T, out, in, N, dy,
                       dtype, out, x, dtype, in, 1.0f, dw, CUDA_R_32F, out));
    if (db != NULL) {
        dim3 th(32, KC_COLSUM_ROWS);
        unsigned bl = (unsigned)((out + 31) / 32);
        if (dtype == CUDA_R_16BF)
            kc_colsum<<<bl, th, 0, ctx->stream>>>((const swy_kc_bf16_t *)dy,
                                                  N, out, db);
        else
            kc_colsum<<<bl, th, 0, ctx->stream>>>((const float *)dy, N, out,
                                                  db);
        KC_LAUNCHED(fn, "kc_colsum");
    }
    return 0;
}

/* ---- Linear with GELU --------------------------------------------------
 * The two GEMMs of an FFN that touch its activation: in bf16 the GELU (and
 * its gradient) rides in the GEMM's epilogue where cuBLASLt offers it; in
 * fp32, or where it does not, separate passes (the fp32 GELU matches the
 * CPU's to 1e-5, which the epilogue's need not). */

int kc_linear_gelu_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const void *w, const void *b, int N,
                       int in, int out, void *h_pre, void *h_act)
{
    KC_TRY(check_linear(ctx, fn, dt, N, in, out));
    if (N == 0)
        return 0;
    if (dt == CUDA_R_16BF) {
        /* h_act^T = gelu(W^T x^T + b), h_pre^T its aux output. */
        kc_lt_gemm_t g = {CUBLAS_OP_N, CUBLAS_OP_N, out, N, in, w, out, x,
                          in, h_act, out, dt,
                          b != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                    : CUBLASLT_EPILOGUE_GELU_AUX,
                          b, h_pre, out};
        int fused;
        KC_TRY(kc_lt_gemm(ctx, fn, &g, &fused));
        if (fused)
            return 0;
    }
    KC_TRY(kc_linear_fwd(ctx, fn, dt, x, w, b, N, in, out, h_pre));
    return kc_gelu_fwd(ctx, fn, dt, h_pre, (size_t)N * out, h_act);
}

int kc_linear_dgelu_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                        const void *x, const void *x_pre, const void *w,
                        const void *dy, int N, int in, int out, void *dx,
                        float *dw, float *db)
{
    KC_TRY(check_linear(ctx, fn, dt, N, in, out));
    if (dx == NULL)
        return kc_fail(fn, "dx is NULL");
    if (N == 0)
        return 0;
    int fused = 0;
    if (dt == CUDA_R_16BF) {
        /* dx^T = W dy^T as in kc_linear_bwd, times gelu'(x_pre). */
        kc_lt_gemm_t g = {CUBLAS_OP_T, CUBLAS_OP_N, in, N, out, w, out, dy,
                          out, dx, in, dt, CUBLASLT_EPILOGUE_DGELU, NULL,
                          (void *)x_pre, in};
        KC_TRY(kc_lt_gemm(ctx, fn, &g, &fused));
    }
    KC_TRY(kc_linear_bwd(ctx, fn, dt, x, w, dy, N, in, out,
                         fused ? NULL : dx, dw, db));
    if (fused)
        return 0;
    return kc_gelu_bwd(ctx, fn, dt, x_pre, dx, (size_t)N * in, dx);
}

int swy_kc_linear_gelu_fwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                           const float *b, int N, int in, int out,
                           float *h_pre, float *h_act)
{
    return kc_linear_gelu_fwd(ctx, "swy_kc_linear_gelu_fwd", CUDA_R_32F, x,
                              w, b, N, in, out, h_pre, h_act);
}

int swy_kc_linear_dgelu_bwd(swy_kc_ctx_t *ctx, const float *x,
                            const float *x_pre, const float *w,
                            const float *dy, int N, int in, int out,
                            float *dx, float *dw, float *db)
{
    return kc_linear_dgelu_bwd(ctx, "swy_kc_linear_dgelu_bwd", CUDA_R_32F, x,
                               x_pre, w, dy, N, in, out, dx, dw, db);
}

int swy_kc_linear_gelu_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                                const swy_kc_bf16_t *w,
                                const swy_kc_bf16_t *b, int N, int in,
                                int out, swy_kc_bf16_t *h_pre,
                                swy_kc_bf16_t *h_act)
{
    return kc_linear_gelu_fwd(ctx, "swy_kc_linear_gelu_fwd_bf16", CUDA_R_16BF,
                              x, w, b, N, in, out, h_pre, h_act);
}

int swy_kc_linear_dgelu_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                                 const swy_kc_bf16_t *x_pre,
                                 const swy_kc_bf16_t *w,
                                 const swy_kc_bf16_t *dy, int N, int in,
                                 int out, swy_kc_bf16_t *dx, float *dw,
                                 float *db)
{
    return kc_linear_dgelu_bwd(ctx, "swy_kc_linear_dgelu_bwd_bf16",
                               CUDA_R_16BF, x, x_pre, w, dy, N, in, out, dx,
                               dw, db);
}

int swy_kc_linear_fwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                      const float *b, int N, int in, int out, float *y)
{
    return kc_linear_fwd(ctx, "swy_kc_linear_fwd", CUDA_R_32F, x, w, b, N, in,
                         out, y);
}

int swy_kc_linear_bwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                      const float *dy, int N, int in, int out, float *dx,
                      float *dw, float *db)
{
    return kc_linear_bwd(ctx, "swy_kc_linear_bwd", CUDA_R_32F, x, w, dy, N,
                         in, out, dx, dw, db);
}

int swy_kc_linear_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                           const swy_kc_bf16_t *w, const swy_kc_bf16_t *b,
                           int N, int in, int out, swy_kc_bf16_t *y)
{
    return kc_linear_fwd(ctx, "swy_kc_linear_fwd_bf16", CUDA_R_16BF, x, w, b,
                         N, in, out, y);
}

int swy_kc_linear_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                           const swy_kc_bf16_t *w, const swy_kc_bf16_t *dy,
                           int N, int in, int out, swy_kc_bf16_t *dx,
                           float *dw, float *db)
{
    return kc_linear_bwd(ctx, "swy_kc_linear_bwd_bf16", CUDA_R_16BF, x, w,
                         dy, N, in, out, dx, dw, db);
}
