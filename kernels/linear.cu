/* Dense linear layer, y = x W + b, through cuBLAS (fp32 compute on fp32 or
 * bf16 storage), and the bias-gradient column sums.
 *
 * Row-major X[N][in] is, to column-major cuBLAS, X^T with leading dimension
 * in; so y = x W is computed as y^T = W^T x^T with W^T the column-major
 * view of W (ld out), which needs no transposes. */
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

/* db[c] += sum over r of dy[r][c].  Block (32, KC_COLSUM_ROWS): threadIdx.x
 * picks the column (coalesced), threadIdx.y strides over rows; the
 * partial sums are added in a fixed order, so the result is
 * deterministic. */
#define KC_COLSUM_ROWS 32
template <typename T>
__global__ void kc_colsum(const T *dy, int N, int cols, float *db)
{
    __shared__ float part[KC_COLSUM_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < N; r += KC_COLSUM_ROWS)
            s += kc_ld(dy + (size_t)r * cols + c);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int i = 0; i < KC_COLSUM_ROWS; i++)
            t += part[i][threadIdx.x];
        db[c] += t;
    }
}

static int check_dtype(const char *fn, cudaDataType_t t)
{
    if (t != CUDA_R_32F && t != CUDA_R_16BF)
        return kc_fail(fn, "internal: dtype %d", (int)t);
    return 0;
}

static int gemm(swy_kc_ctx_t *ctx, const char *fn, cublasOperation_t ta,
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

int kc_linear_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *b, int N, int in,
                  int out, void *y)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_dtype(fn, dtype));
    if (N < 0 || in <= 0 || out <= 0)
        return kc_fail(fn, "bad sizes N=%d in=%d out=%d", N, in, out);
    if (N == 0)
        return 0;
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
    return gemm(ctx, fn, CUBLAS_OP_N, CUBLAS_OP_N, out, N, in, w, dtype, out,
                x, dtype, in, beta, y, dtype, out);
}

int kc_linear_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *dy, int N, int in,
                  int out, void *dx, float *dw, float *db)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_dtype(fn, dtype));
    if (N < 0 || in <= 0 || out <= 0)
        return kc_fail(fn, "bad sizes N=%d in=%d out=%d", N, in, out);
    if (N == 0)
        return 0;
    /* dx^T[in][N] = W[in][out] dy^T: W is the transpose of its column-major
     * view. */
    if (dx != NULL)
        KC_TRY(gemm(ctx, fn, CUBLAS_OP_T, CUBLAS_OP_N, in, N, out, w, dtype,
                    out, dy, dtype, out, 0.0f, dx, dtype, in));
    /* dW^T[out][in] += dy^T x: x (N x in) is the transpose of its
     * column-major view. */
    if (dw != NULL)
        KC_TRY(gemm(ctx, fn, CUBLAS_OP_N, CUBLAS_OP_T, out, in, N, dy, dtype,
                    out, x, dtype, in, 1.0f, dw, CUDA_R_32F, out));
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
