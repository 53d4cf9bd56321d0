/* The expert FFN's GEMMs as grouped GEMMs: each GEMM of the layer for all
 * its experts in one cublasGemmGroupedBatchedEx call (cuBLAS >= 12.5), one
 * group per non-empty expert (the experts' row counts differ), instead of
 * one call per expert (ffn.cu).  Biases seed the outputs (beta = 1), GELU
 * and its gradient are one pass over all rows, the bias gradients one
 * segmented column sum.
 *
 * The grouped call takes its matrices as device arrays of pointers.  One
 * small kernel per pass computes them on the device from the base
 * pointers and the experts' row offsets, which travel as the kernel's
 * arguments: nothing is staged through host memory and nothing waits for
 * the stream.  The same formula (kc_gmat_at) gives the host's pointers
 * where a GEMM runs per expert: bf16 weight gradients (bf16 inputs, fp32
 * output; the grouped call's table of types has no such pair), bf16
 * matrices not all 16-byte aligned, and any grouped call that cuBLAS
 * refuses as not supported (both counted). */
#include <stdio.h>

#include "kc_internal_cuda.h"

/* Groups (non-empty experts) per pass; more experts take several passes.
 * Keeps the kernels' arguments well under CUDA's 4 KiB. */
#define KC_GROUP_MAX 128

/* A pass's experts: group g is expert e[g], rows off[g] .. off[g + 1] - 1
 * of the layer's row-major activations (absolute rows). */
typedef struct {
    int G;
    int e[KC_GROUP_MAX];
    int off[KC_GROUP_MAX + 1];
} kc_seg_t;

/* One operand of a grouped GEMM: group g's matrix is at base + e_stride *
 * expert + r_stride * first row (bytes).  Weights step by expert,
 * activations by row. */
typedef struct {
    const void *base;
    size_t e_stride, r_stride;
} kc_gmat_t;

__host__ __device__ static inline void *kc_gmat_at(const kc_gmat_t *m,
                                                   int e, int row)
{
    return (char *)m->base + m->e_stride * (size_t)e +
           m->r_stride * (size_t)row;
}

/* Operands of up to KC_GPTR_GEMMS GEMMs (A, B, C each), for the pointer
 * kernel. */
#define KC_GPTR_GEMMS 4
typedef struct {
    int n; /* operands used: 3 per GEMM */
    kc_gmat_t m[3 * KC_GPTR_GEMMS];
} kc_gops_t;

/* out[j * KC_GROUP_MAX + g] = operand j's matrix of group g. */
__global__ void kc_group_ptrs(kc_seg_t s, kc_gops_t ops, void **out)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ops.n * s.G;
         i += gridDim.x * blockDim.x) {
        int j = i / s.G, g = i % s.G;
        out[j * KC_GROUP_MAX + g] = kc_gmat_at(&ops.m[j], s.e[g], s.off[g]);
    }
}

/* The group of row r (off[0] <= r < off[G]). */
__device__ static inline int kc_seg_find(const kc_seg_t *s, int r)
{
    int lo = 0, hi = s->G - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->off[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* y[r][c] = b[expert of r][c] over the pass's rows: the seed the GEMM adds
 * onto with beta = 1. */
template <typename T>
__global__ void kc_bias_fill_seg(kc_seg_t s, const T *b, int out, T *y)
{
    for (int r = s.off[0] + blockIdx.x; r < s.off[s.G]; r += gridDim.x) {
        const T *be = b + (size_t)s.e[kc_seg_find(&s, r)] * out;
        for (int c = threadIdx.x; c < out; c += blockDim.x)
            y[(size_t)r * out + c] = be[c];
    }
}

/* db[e[g]][c] += sum over group g's rows of dy[r][c].  Grid (columns / 32,
 * G), block (32, KC_COLSUM_ROWS). */
template <typename T>
__global__ void kc_colsum_seg(kc_seg_t s, const T *dy, int cols, float *db)
{
    int g = blockIdx.y;
    kc_colsum_block(dy, s.off[g], s.off[g + 1], cols,
                    db + (size_t)s.e[g] * cols);
}

/* One GEMM of the layer, on column-major views as cublasGemmEx takes them
 * (see linear.cu), for every group: m, n or k is KC_ROWS where it is the
 * group's row count. */
#define KC_ROWS (-1)
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    int lda, ldb, ldc;
    cudaDataType_t ab, c; /* types of A and B, of C */
    float beta;
    int slot; /* its operands' first index in the pass's kc_gops_t / 3 */
} kc_ggemm_t;

static int dim_of(int d, int rows) { return d == KC_ROWS ? rows : d; }

/* g's GEMM as one cublasGemmEx per group, with host pointers. */
static int ggemm_per_expert(swy_kc_ctx_t *ctx, const char *fn,
                            const kc_seg_t *s, const kc_gops_t *ops,
                            const kc_ggemm_t *g)
{
    const kc_gmat_t *a = &ops->m[3 * g->slot], *b = a + 1, *c = a + 2;
    for (int i = 0; i < s->G; i++) {
        int rows = s->off[i + 1] - s->off[i];
        KC_TRY(kc_gemm(ctx, fn, g->ta, g->tb, dim_of(g->m, rows),
                       dim_of(g->n, rows), dim_of(g->k, rows),
                       kc_gmat_at(a, s->e[i], s->off[i]), g->ab, g->lda,
                       kc_gmat_at(b, s->e[i], s->off[i]), g->ab, g->ldb,
                       g->beta, kc_gmat_at(c, s->e[i], s->off[i]), g->c,
                       g->ldc));
    }
    return 0;
}

/* Whether every matrix of g's groups starts 16-byte aligned.  For bf16 the
 * grouped call asks for that "ideally", and for less only under rules on
 * k that a misread would turn into a misaligned access (a sticky CUDA
 * error); so bf16 groups only when all are aligned. */
static int ggemm_aligned(const kc_seg_t *s, const kc_gops_t *ops,
                         const kc_ggemm_t *g)
{
    const kc_gmat_t *a = &ops->m[3 * g->slot];
    for (int i = 0; i < s->G; i++)
        for (int j = 0; j < 3; j++)
            if (!kc_aligned16(kc_gmat_at(&a[j], s->e[i], s->off[i])))
                return 0;
    return 1;
}

static int ggemm(swy_kc_ctx_t *ctx, const char *fn, const kc_seg_t *s,
                 const kc_gops_t *ops, const kc_ggemm_t *g)
{
    if (g->ab != g->c)
        return ggemm_per_expert(ctx, fn, s, ops, g);
    int rows0 = s->off[1] - s->off[0];
    if (g->ab == CUDA_R_16BF && !ggemm_aligned(s, ops, g)) {
        ctx->g_fell_back++;
        snprintf(ctx->g_why, sizeof(ctx->g_why),
                 "bf16 matrices not all 16-byte aligned (first group m=%d "
                 "n=%d k=%d)",
                 dim_of(g->m, rows0), dim_of(g->n, rows0),
                 dim_of(g->k, rows0));
        return ggemm_per_expert(ctx, fn, s, ops, g);
    }
#if CUBLAS_VERSION >= 120500
    cublasOperation_t ta[KC_GROUP_MAX], tb[KC_GROUP_MAX];
    int m[KC_GROUP_MAX], n[KC_GROUP_MAX], k[KC_GROUP_MAX];
    int lda[KC_GROUP_MAX], ldb[KC_GROUP_MAX], ldc[KC_GROUP_MAX];
    int size[KC_GROUP_MAX];
    float alpha[KC_GROUP_MAX], beta[KC_GROUP_MAX];
    for (int i = 0; i < s->G; i++) {
        int rows = s->off[i + 1] - s->off[i];
        ta[i] = g->ta;
        tb[i] = g->tb;
        m[i] = dim_of(g->m, rows);
        n[i] = dim_of(g->n, rows);
        k[i] = dim_of(g->k, rows);
        lda[i] = g->lda;
        ldb[i] = g->ldb;
        ldc[i] = g->ldc;
        size[i] = 1;
        alpha[i] = 1.0f;
        beta[i] = g->beta;
    }
    void **p = ctx->gptrs + (size_t)3 * g->slot * KC_GROUP_MAX;
    cublasStatus_t st = cublasGemmGroupedBatchedEx(
        ctx->blas, ta, tb, m, n, k, alpha, (const void *const *)p, g->ab,
        lda, (const void *const *)(p + KC_GROUP_MAX), g->ab, ldb, beta,
        p + 2 * KC_GROUP_MAX, g->c, ldc, s->G, size, CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_SUCCESS) {
        ctx->g_calls++;
        return 0;
    }
    if (st != CUBLAS_STATUS_NOT_SUPPORTED)
        return kc_blas_check(fn, "cublasGemmGroupedBatchedEx", st);
    ctx->g_fell_back++;
    snprintf(ctx->g_why, sizeof(ctx->g_why),
             "cublasGemmGroupedBatchedEx: not supported (first group m=%d "
             "n=%d k=%d)",
             m[0], n[0], k[0]);
#endif
    return ggemm_per_expert(ctx, fn, s, ops, g);
}

/* Fills s with up to KC_GROUP_MAX non-empty experts from *e_p on, their
 * rows from *row_p on; advances both.  Returns the groups (0: no rows
 * left). */
static int seg_next(kc_seg_t *s, const int *rows, int n_experts, int *e_p,
                    int *row_p)
{
    s->G = 0;
    s->off[0] = *row_p;
    for (; *e_p < n_experts && s->G < KC_GROUP_MAX; (*e_p)++) {
        if (rows[*e_p] == 0)
            continue;
        s->e[s->G] = *e_p;
        *row_p += rows[*e_p];
        s->off[++s->G] = *row_p;
    }
    return s->G;
}

static int group_ptrs(swy_kc_ctx_t *ctx, const char *fn, const kc_seg_t *s,
                      const kc_gops_t *ops)
{
    unsigned th = 128;
    unsigned bl = (unsigned)((ops->n * s->G + th - 1) / th);
    kc_group_ptrs<<<bl, th, 0, ctx->stream>>>(*s, *ops, ctx->gptrs);
    KC_LAUNCHED(fn, "kc_group_ptrs");
    return 0;
}

static int bias_fill(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                     const kc_seg_t *s, const void *b, int out, void *y)
{
    unsigned bl = kc_blocks(ctx, (size_t)(s->off[s->G] - s->off[0]), 1);
    if (dt == CUDA_R_16BF)
        kc_bias_fill_seg<<<bl, 256, 0, ctx->stream>>>(
            *s, (const swy_kc_bf16_t *)b, out, (swy_kc_bf16_t *)y);
    else
        kc_bias_fill_seg<<<bl, 256, 0, ctx->stream>>>(*s, (const float *)b,
                                                       out, (float *)y);
    KC_LAUNCHED(fn, "kc_bias_fill_seg");
    return 0;
}

static int colsum(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                  const kc_seg_t *s, const void *dy, int cols, float *db)
{
    dim3 th(32, KC_COLSUM_ROWS), bl((unsigned)((cols + 31) / 32),
                                 (unsigned)s->G);
    if (dt == CUDA_R_16BF)
        kc_colsum_seg<<<bl, th, 0, ctx->stream>>>(
            *s, (const swy_kc_bf16_t *)dy, cols, db);
    else
        kc_colsum_seg<<<bl, th, 0, ctx->stream>>>(*s, (const float *)dy,
                                                   cols, db);
    KC_LAUNCHED(fn, "kc_colsum_seg");
    return 0;
}

static kc_gmat_t weights(const void *w, size_t per_expert)
{
    kc_gmat_t m = {w, per_expert, 0};
    return m;
}

static kc_gmat_t acts(const void *a, size_t per_row)
{
    kc_gmat_t m = {a, 0, per_row};
    return m;
}

int kc_ffn_fwd_grouped(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const int *rows, int n_experts, int H,
                       int F, const void *w1, const void *b1, const void *w2,
                       const void *b2, void *h_pre, void *h_act, void *y)
{
    size_t es = dt == CUDA_R_16BF ? 2 : 4, HF = (size_t)H * F * es;
    kc_gops_t ops = {6,
                     {weights(w1, HF), acts(x, H * es), acts(h_pre, F * es),
                      weights(w2, HF), acts(h_act, F * es),
                      acts(y, H * es)}};
    /* h_pre^T = W1^T x^T (+ b1), y^T = W2^T h_act^T (+ b2). */
    kc_ggemm_t l1 = {CUBLAS_OP_N, CUBLAS_OP_N, F, KC_ROWS, H, F, H, F,
                     dt, dt, b1 != NULL ? 1.0f : 0.0f, 0};
    kc_ggemm_t l2 = {CUBLAS_OP_N, CUBLAS_OP_N, H, KC_ROWS, F, H, F, H,
                     dt, dt, b2 != NULL ? 1.0f : 0.0f, 1};
    kc_seg_t s;
    int e = 0, row = 0;
    while (seg_next(&s, rows, n_experts, &e, &row) > 0) {
        size_t r0 = (size_t)s.off[0], nr = (size_t)(s.off[s.G] - s.off[0]);
        KC_TRY(group_ptrs(ctx, fn, &s, &ops));
        if (b1 != NULL)
            KC_TRY(bias_fill(ctx, fn, dt, &s, b1, F, h_pre));
        KC_TRY(ggemm(ctx, fn, &s, &ops, &l1));
        KC_TRY(kc_gelu_fwd(ctx, fn, dt, (const char *)h_pre + r0 * F * es,
                           nr * F, (char *)h_act + r0 * F * es));
        if (b2 != NULL)
            KC_TRY(bias_fill(ctx, fn, dt, &s, b2, H, y));
        KC_TRY(ggemm(ctx, fn, &s, &ops, &l2));
    }
    return 0;
}

int kc_ffn_bwd_grouped(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const void *h_pre, const void *h_act,
                       const void *dy, const int *rows, int n_experts, int H,
                       int F, const void *w1, const void *w2, void *dh,
                       void *dx, float *dw1, float *db1, float *dw2,
                       float *db2)
{
    size_t es = dt == CUDA_R_16BF ? 2 : 4, HF = (size_t)H * F;
    kc_gops_t ops = {12,
                     {/* dh^T = W2 dy^T */
                      weights(w2, HF * es), acts(dy, H * es),
                      acts(dh, F * es),
                      /* dW2^T += dy^T h_act */
                      acts(dy, H * es), acts(h_act, F * es),
                      weights(dw2, HF * 4),
                      /* dW1^T += dh^T x */
                      acts(dh, F * es), acts(x, H * es),
                      weights(dw1, HF * 4),
                      /* dx^T = W1 dh^T */
                      weights(w1, HF * es), acts(dh, F * es),
                      acts(dx, H * es)}};
    kc_ggemm_t g_dh = {CUBLAS_OP_T, CUBLAS_OP_N, F, KC_ROWS, H, H, H, F,
                       dt, dt, 0.0f, 0};
    kc_ggemm_t g_dw2 = {CUBLAS_OP_N, CUBLAS_OP_T, H, F, KC_ROWS, H, F, H,
                        dt, CUDA_R_32F, 1.0f, 1};
    kc_ggemm_t g_dw1 = {CUBLAS_OP_N, CUBLAS_OP_T, F, H, KC_ROWS, F, H, F,
                        dt, CUDA_R_32F, 1.0f, 2};
    kc_ggemm_t g_dx = {CUBLAS_OP_T, CUBLAS_OP_N, H, KC_ROWS, F, F, F, H,
                       dt, dt, 0.0f, 3};
    if (dx == NULL)
        ops.n = 9;
    kc_seg_t s;
    int e = 0, row = 0;
    while (seg_next(&s, rows, n_experts, &e, &row) > 0) {
        size_t r0 = (size_t)s.off[0], nr = (size_t)(s.off[s.G] - s.off[0]);
        char *dh_r = (char *)dh + r0 * F * es;
        KC_TRY(group_ptrs(ctx, fn, &s, &ops));
        /* Second layer, and through the activation dh = (dy W2^T)
         * gelu'(h_pre). */
        KC_TRY(ggemm(ctx, fn, &s, &ops, &g_dh));
        KC_TRY(kc_gelu_bwd(ctx, fn, dt, (const char *)h_pre + r0 * F * es,
                           dh_r, nr * F, dh_r));
        KC_TRY(ggemm(ctx, fn, &s, &ops, &g_dw2));
        KC_TRY(colsum(ctx, fn, dt, &s, dy, H, db2));
        /* First layer. */
        KC_TRY(ggemm(ctx, fn, &s, &ops, &g_dw1));
        KC_TRY(colsum(ctx, fn, dt, &s, dh, F, db1));
        if (dx != NULL)
            KC_TRY(ggemm(ctx, fn, &s, &ops, &g_dx));
    }
    return 0;
}

int kc_grouped_init(swy_kc_ctx_t *ctx, const char *fn)
{
    size_t bytes = sizeof(void *) * 3 * KC_GPTR_GEMMS * KC_GROUP_MAX;
    return kc_cuda_check(fn, "cudaMalloc(grouped GEMM pointers)",
                         cudaMalloc((void **)&ctx->gptrs, bytes));
}

int swy_kc_ctx_set_grouped(swy_kc_ctx_t *ctx, int on)
{
    static const char fn[] = "swy_kc_ctx_set_grouped";
    KC_CTX(fn, ctx);
    if (ctx->lt == NULL)
        return kc_fail(fn, "a row context has no GEMMs");
#if CUBLAS_VERSION < 120500
    if (on)
        return kc_fail(fn, "grouped GEMMs need cuBLAS 12.5 or later "
                           "(built with %d)", CUBLAS_VERSION);
#endif
    ctx->grouped = on != 0;
    return 0;
}

int swy_kc_ctx_grouped_stats(swy_kc_ctx_t *ctx, int *on, unsigned long *calls,
                             unsigned long *fell_back, const char **why)
{
    static const char fn[] = "swy_kc_ctx_grouped_stats";
    KC_CTX(fn, ctx);
    if (on == NULL || calls == NULL || fell_back == NULL || why == NULL)
        return kc_fail(fn, "NULL output");
    *on = ctx->grouped;
    *calls = ctx->g_calls;
    *fell_back = ctx->g_fell_back;
    *why = ctx->g_why;
    return 0;
}
