/* Element-wise GELU (forward, backward) and sums over whole arrays, on fp32
 * or bf16 storage with fp32 arithmetic, the formulas of elem.h (in bf16
 * with the hardware's approximate tanh). */
#include <stdint.h>

#include "kc_internal_cuda.h"

struct kc_op_gelu {
    __device__ float operator()(float x, float) const { return swy_e_gelu(x); }
};
struct kc_op_gelu_bwd { /* a = x, b = dy */
    __device__ float operator()(float x, float dy) const
    {
        return dy * swy_e_gelu_grad(x);
    }
};

/* tanh by the special-function unit (sm_75 and later): relative error about
 * 2^-11 (PTX ISA, tanh.approx.f32), an eighth of bf16's 2^-8 step.
 * The accurate tanhf costs a few dozen instructions, enough to make the
 * bf16 GELU (4 bytes of traffic per element) compute-bound. */
__device__ __forceinline__ float kc_tanh_approx(float x)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return tanhf(x);
#endif
}

/* The formulas of elem.h with that tanh: for bf16 storage only, where the
 * result is rounded to 8 bits of mantissa anyway; fp32 keeps tanhf. */
struct kc_op_gelu_bf16 {
    __device__ float operator()(float x, float) const
    {
        return swy_e_gelu_of_tanh(
            x, kc_tanh_approx(SWY_E_GELU_C *
                              (x + SWY_E_GELU_A * x * x * x)));
    }
};
struct kc_op_gelu_bwd_bf16 {
    __device__ float operator()(float x, float dy) const
    {
        return dy * swy_e_gelu_grad_of_tanh(
                        x, kc_tanh_approx(SWY_E_GELU_C *
                                          (x + SWY_E_GELU_A * x * x * x)));
    }
};
struct kc_op_add { /* a = x, b = y */
    __device__ float operator()(float x, float y) const { return y + x; }
};

/* out[i] = op(a[i], b[i]) (b may be NULL: op gets 0).  The first n / V * V
 * elements go V at a time, the rest one at a time.  out may alias a or b:
 * each element is read and written by the same thread, read first. */
template <typename T, int V, typename Op>
__global__ void kc_ew(size_t n, Op op, const T *a, const T *b, T *out)
{
    size_t nv = n / V;
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    const kc_vec<T, V> *av = (const kc_vec<T, V> *)a;
    const kc_vec<T, V> *bv = (const kc_vec<T, V> *)b;
    kc_vec<T, V> *ov = (kc_vec<T, V> *)out;
    for (size_t i = tid; i < nv; i += stride) {
        kc_vec<T, V> x = av[i], y = x, r;
        if (b != NULL)
            y = bv[i];
#pragma unroll
        for (int j = 0; j < V; j++)
            kc_st(&r.v[j], op(kc_ld(&x.v[j]), b != NULL ? kc_ld(&y.v[j]) : 0.0f));
        ov[i] = r;
    }
    for (size_t i = nv * V + tid; i < n; i += stride)
        kc_st(&out[i], op(kc_ld(&a[i]), b != NULL ? kc_ld(&b[i]) : 0.0f));
}

template <typename T, typename Op>
static int kc_ew_launch(swy_kc_ctx_t *ctx, const char *fn, size_t n, Op op,
                        const T *a, const T *b, T *out)
{
    KC_CTX(fn, ctx);
    if (n == 0)
        return 0;
    constexpr int V = 16 / sizeof(T);
    unsigned th = 256;
    if (kc_aligned16(a, b, out))
        kc_ew<T, V, Op><<<kc_blocks(ctx, (n + V - 1) / V, th), th, 0,
                          ctx->stream>>>(n, op, a, b, out);
    else
        kc_ew<T, 1, Op><<<kc_blocks(ctx, n, th), th, 0, ctx->stream>>>(
            n, op, a, b, out);
    KC_LAUNCHED(fn, "kc_ew");
    return 0;
}

int kc_gelu_fwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                const void *x, size_t n, void *y)
{
    if (dtype == CUDA_R_16BF)
        return kc_ew_launch(ctx, fn, n, kc_op_gelu_bf16(),
                            (const swy_kc_bf16_t *)x,
                            (const swy_kc_bf16_t *)NULL, (swy_kc_bf16_t *)y);
    return kc_ew_launch(ctx, fn, n, kc_op_gelu(), (const float *)x,
                        (const float *)NULL, (float *)y);
}

int kc_gelu_bwd(swy_kc_ctx_t *ctx, const char *fn, cudaDataType_t dtype,
                const void *x, const void *dy, size_t n, void *dx)
{
    if (dtype == CUDA_R_16BF)
        return kc_ew_launch(ctx, fn, n, kc_op_gelu_bwd_bf16(),
                            (const swy_kc_bf16_t *)x,
                            (const swy_kc_bf16_t *)dy, (swy_kc_bf16_t *)dx);
    return kc_ew_launch(ctx, fn, n, kc_op_gelu_bwd(), (const float *)x,
                        (const float *)dy, (float *)dx);
}

int swy_kc_gelu_fwd(swy_kc_ctx_t *ctx, const float *x, size_t n, float *y)
{
    return kc_gelu_fwd(ctx, "swy_kc_gelu_fwd", CUDA_R_32F, x, n, y);
}

int swy_kc_gelu_bwd(swy_kc_ctx_t *ctx, const float *x, const float *dy,
                    size_t n, float *dx)
{
    return kc_gelu_bwd(ctx, "swy_kc_gelu_bwd", CUDA_R_32F, x, dy, n, dx);
}

int swy_kc_add(swy_kc_ctx_t *ctx, const float *x, size_t n, float *y)
{
    return kc_ew_launch(ctx, "swy_kc_add", n, kc_op_add(), x,
                        (const float *)y, y);
}

int swy_kc_gelu_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                         swy_kc_bf16_t *y)
{
    return kc_gelu_fwd(ctx, "swy_kc_gelu_fwd_bf16", CUDA_R_16BF, x, n, y);
}

int swy_kc_gelu_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                         const swy_kc_bf16_t *dy, size_t n, swy_kc_bf16_t *dx)
{
    return kc_gelu_bwd(ctx, "swy_kc_gelu_bwd_bf16", CUDA_R_16BF, x, dy, n,
                       dx);
}

int swy_kc_add_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                    swy_kc_bf16_t *y)
{
    return kc_ew_launch(ctx, "swy_kc_add_bf16", n, kc_op_add(), x,
                        (const swy_kc_bf16_t *)y, y);
}
