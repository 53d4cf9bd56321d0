/* Private to the kernels/ .cu files: the context, error reporting, launch checks,
 * bf16/fp32 element access and the block reductions shared by the CUDA
 * kernels.  C++ (nvcc) only. */
#ifndef SWY_KC_INTERNAL_CUDA_H
#define SWY_KC_INTERNAL_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "elem.h"
#include "swy_kernels_cuda.h"

/* Bytes of device scratch per context: the counters and sums that the
 * loss kernels pass between launches (see loss.cu). */
#define KC_SCRATCH_BYTES 256

/* cuBLAS workspace per context; NVIDIA recommends 32 MiB on Hopper. */
#define KC_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* Same bound as the CPU gate (SWY_K_GATE_MAX_K in gate.c). */
#define KC_MAX_K 64

struct swy_kc_ctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_workspace;
    void *scratch; /* KC_SCRATCH_BYTES, 16-byte aligned (cudaMalloc) */
    int n_sm;      /* multiprocessors of the context's device */
    void *work;    /* grown on demand by kc_ctx_work */
    size_t work_bytes;
    /* cuBLASLt for the GEMMs with fused epilogues (linear.cu); shares the
     * cuBLAS workspace, as both run in stream order. */
    cublasLtHandle_t lt;
    int epilogues;               /* fuse where cuBLASLt can (default 1) */
    unsigned long lt_fused;      /* GEMMs run with a fused epilogue */
    unsigned long lt_fell_back;  /* ... that took the separate passes */
    char lt_why[160];            /* the last fallback's reason */
    /* Grouped expert GEMMs (grouped.cu): the device arrays of pointers the
     * grouped calls read, and what ran. */
    int grouped;                 /* on (SWY_KC_GROUPED=1; default 0) */
    void **gptrs;
    unsigned long g_calls;       /* cublasGemmGroupedBatchedEx calls */
    unsigned long g_fell_back;   /* grouped GEMMs run per expert instead */
    char g_why[160];             /* the last one's reason */
};

/* Scratch offsets (bytes) of the kernels that use ctx->scratch. */
#define KC_SCRATCH_LOSS 0   /* loss.cu: struct kc_loss_scratch */
#define KC_SCRATCH_TOPO 64  /* gate.cu: int, tokens to reroute */

/* *p = at least `bytes` of device workspace owned by the context.  Growing
 * it synchronizes the stream first (kernels may still use the old one). */
int kc_ctx_work(swy_kc_ctx_t *ctx, const char *fn, size_t bytes, void **p);

/* Records "fn: <formatted>" as this thread's error; returns 1. */
int kc_fail(const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Returns 0 on cudaSuccess, else records "fn: what: <error name>: <text>". */
int kc_cuda_check(const char *fn, const char *what, cudaError_t err);

/* A context with its stream and the current device's SM count and
 * nothing else (status.cu): the row context, and the start of a full one.
 * Failures are reported under fn's name. */
int kc_ctx_base(const char *fn, void *stream, swy_kc_ctx_t **ctx_p);

/* Returns 0 on CUBLAS_STATUS_SUCCESS, else records "fn: what: <status>". */
int kc_blas_check(const char *fn, const char *what, cublasStatus_t st);

/* After a kernel launch: launch-configuration errors (and any sticky error
 * of an earlier kernel) become this call's failure. */
#define KC_LAUNCHED(fn, name)                                                 \
    do {                                                                      \
        if (kc_cuda_check((fn), "launch " name, cudaGetLastError()) != 0)     \
            return 1;                                                         \
    } while (0)

#define KC_CUDA(fn, call)                                                     \
    do {                                                                      \
        if (kc_cuda_check((fn), #call, (call)) != 0)                          \
            return 1;                                                         \
    } while (0)

#define KC_TRY(call)                                                          \
    do {                                                                      \
        if ((call) != 0)                                                      \
            return 1;                                                         \
    } while (0)

/* Rejects a NULL context (every kernel entry point starts with this). */
#define KC_CTX(fn, ctx)                                                       \
    do {                                                                      \
        if ((ctx) == NULL)                                                    \
            return kc_fail((fn), "NULL context");                             \
    } while (0)

/* Blocks for a grid-stride loop over n work items, at most enough to fill
 * the device a few times over (every kernel loops, so any cap is correct). */
static inline unsigned kc_blocks(const swy_kc_ctx_t *ctx, size_t n,
                                 unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    size_t cap = (size_t)(ctx->n_sm > 0 ? ctx->n_sm : 1) * 32;
    if (b > cap)
        b = cap;
    return (unsigned)(b > 0 ? b : 1);
}

/* ---- Element access: fp32 arithmetic on fp32 or bf16 storage -------- */

__device__ __forceinline__ float kc_ld(const float *p) { return *p; }
__device__ __forceinline__ float kc_ld(const swy_kc_bf16_t *p)
{
    return swy_e_bf16_to_f32(*p);
}
__device__ __forceinline__ void kc_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void kc_st(swy_kc_bf16_t *p, float v)
{
    *p = swy_e_f32_to_bf16(v);
}

/* V elements moved as one aligned load/store (V * sizeof(T) = 16 bytes in
 * the vector paths; V = 1 is the scalar fallback). */
template <typename T, int V>
struct alignas(sizeof(T) * V) kc_vec {
    T v[V];
};

/* True when every pointer is 16-byte aligned (NULL counts as aligned). */
static inline bool kc_aligned16(const void *a, const void *b = NULL,
                                const void *c = NULL, const void *d = NULL)
{
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) &
            15u) == 0;
}

/* ---- Block reductions ---------------------------------------------------
 * For blockDim.x a multiple of 32, at most 1024, 1-D blocks.  Every thread
 * of the block must call them (they synchronize); the result is valid in
 * every thread.  `sh` is __shared__ storage of 32 elements. */

template <typename T>
__device__ __forceinline__ T kc_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kc_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

template <typename T>
__device__ __forceinline__ T kc_block_sum(T v, T *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int n_warps = (int)(blockDim.x >> 5);
    v = kc_warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    T t = lane < n_warps ? sh[lane] : (T)0;
    return kc_warp_sum(t);
}

/* Exclusive prefix count of `flag` over the block in thread order, and the
 * block total in *total.  `sh` is __shared__ int[32]. */
__device__ __forceinline__ int kc_block_prefix(int flag, int *total, int *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int n_warps = (int)(blockDim.x >> 5);
    unsigned ballot = __ballot_sync(0xffffffffu, flag != 0);
    int in_warp = __popc(ballot & ((1u << lane) - 1u));
    __syncthreads();
    if (lane == 0)
        sh[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < n_warps; w++) {
        before += w < warp ? sh[w] : 0;
        all += sh[w];
    }
    *total = all;
    return before + in_warp;
}

/* db[c] += sum over rows r0 .. r1 - 1 of dy[r][c], for the 32 columns of
 * blockIdx.x.  Block (32, KC_COLSUM_ROWS): threadIdx.x picks the column
 * (coalesced), threadIdx.y strides over rows; the partial sums are added
 * in a fixed order, so the result is deterministic. */
#define KC_COLSUM_ROWS 32
template <typename T>
__device__ __forceinline__ void kc_colsum_block(const T *dy, int r0, int r1,
                                                int cols, float *db)
{
    __shared__ float part[KC_COLSUM_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += KC_COLSUM_ROWS)
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

/* ---- Shared dense pieces (linear.cu, act.cu), used by gate and ffn ------
 * dtype is CUDA_R_32F or CUDA_R_16BF for x, w, b, y, dy, dx; dw and db are
 * always fp32.  fn names the public function for error messages. */
int kc_linear_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *b, int N, int in,
                  int out, void *y);
int kc_linear_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                  const void *x, const void *w, const void *dy, int N, int in,
                  int out, void *dx, float *dw, float *db);
int kc_gelu_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                const void *x, size_t n, void *y);
int kc_gelu_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                const void *x, const void *dy, size_t n, void *dx);
/* h_pre = x w + b (b may be NULL), h_act = gelu(h_pre). */
int kc_linear_gelu_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const void *w, const void *b, int N,
                       int in, int out, void *h_pre, void *h_act);
/* kc_linear_bwd of y = x w + b where x = gelu(x_pre): dw += x^T dy,
 * db += sum dy (db may be NULL), and dx = (dy w^T) gelu'(x_pre), the
 * gradient of x_pre (dx may not be NULL). */
int kc_linear_dgelu_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                        const void *x, const void *x_pre, const void *w,
                        const void *dy, int N, int in, int out, void *dx,
                        float *dw, float *db);

/* cublasGemmEx with alpha 1 and fp32 compute on the context's handle. */
int kc_gemm(swy_kc_ctx_t *ctx, const char *fn, cublasOperation_t ta,
            cublasOperation_t tb, int m, int n, int k, const void *A,
            cudaDataType_t at, int lda, const void *B, cudaDataType_t bt,
            int ldb, float beta, void *C, cudaDataType_t ct, int ldc);

/* The expert FFN with grouped GEMMs (grouped.cu), for ffn.cu once its
 * arguments are checked; the same contract as swy_kc_ffn_fwd/_bwd with
 * dt CUDA_R_32F or CUDA_R_16BF. */
int kc_ffn_fwd_grouped(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const int *rows, int n_experts, int H,
                       int F, const void *w1, const void *b1, const void *w2,
                       const void *b2, void *h_pre, void *h_act, void *y);
int kc_ffn_bwd_grouped(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dt,
                       const void *x, const void *h_pre, const void *h_act,
                       const void *dy, const int *rows, int n_experts, int H,
                       int F, const void *w1, const void *w2, void *dh,
                       void *dx, float *dw1, float *db1, float *dw2,
                       float *db2);
/* Allocates ctx->gptrs (at context creation). */
int kc_grouped_init(swy_kc_ctx_t *ctx, const char *fn);

/* One GEMM through cuBLASLt with a fused epilogue, on column-major views
 * as cublasGemmEx takes them: D[m][n] (ld ldd) = epi(op(A) op(B)), A, B
 * and D of `dtype`, fp32 compute, beta 0.  epi is one of
 * CUBLASLT_EPILOGUE_BIAS (bias[m] of dtype added to every column),
 * _GELU_AUX_BIAS or _GELU_AUX (GELU, with or without the bias, also
 * writing the pre-activation to aux, ld aux_ld) and _DGELU (multiplies
 * by gelu'(aux)).  Sets *fused to 1 when it ran; 0
 * when epilogues are off or cuBLASLt offers no algorithm, and then the
 * caller does the same work in separate passes.  Returns 1 on a failure
 * of the GEMM itself. */
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    void *D;
    int ldd;
    cudaDataType_t dtype;
    cublasLtEpilogue_t epi;
    const void *bias;
    void *aux;
    int aux_ld;
} kc_lt_gemm_t;
int kc_lt_gemm(swy_kc_ctx_t *ctx, const char *fn, const kc_lt_gemm_t *g,
               int *fused);

/* dst[i][H] = src[map[i]][H], zeros where map[i] < 0, elements of esize
 * bytes (pack.cu; also the embedding lookup). */
int kc_gather_rows(swy_kc_ctx_t *ctx, const char *fn, size_t esize,
                   const void *src, const int *map, int n, int H, void *dst);

#endif /* SWY_KC_INTERNAL_CUDA_H */
