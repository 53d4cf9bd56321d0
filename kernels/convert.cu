/* Array conversions between float and bf16 (rounding rule in elem.h). */
#include "kc_internal_cuda.h"

__global__ void kc_f32_to_bf16(const float *x, size_t n, swy_kc_bf16_t *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = swy_e_f32_to_bf16(x[i]);
}

__global__ void kc_bf16_to_f32(const swy_kc_bf16_t *x, size_t n, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = swy_e_bf16_to_f32(x[i]);
}

int swy_kc_f32_to_bf16(swy_kc_ctx_t *ctx, const float *x, size_t n,
                       swy_kc_bf16_t *y)
{
    static const char fn[] = "swy_kc_f32_to_bf16";
    KC_CTX(fn, ctx);
    if (n == 0)
        return 0;
    kc_f32_to_bf16<<<kc_blocks(ctx, n, 256), 256, 0, ctx->stream>>>(x, n, y);
    KC_LAUNCHED(fn, "kc_f32_to_bf16");
    return 0;
}

int swy_kc_bf16_to_f32(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                       float *y)
{
    static const char fn[] = "swy_kc_bf16_to_f32";
    KC_CTX(fn, ctx);
    if (n == 0)
        return 0;
    kc_bf16_to_f32<<<kc_blocks(ctx, n, 256), 256, 0, ctx->stream>>>(x, n, y);
    KC_LAUNCHED(fn, "kc_bf16_to_f32");
    return 0;
}
