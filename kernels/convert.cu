/* Array conversions between float and bf16 (rounding rule in elem.h). */
#include <stdint.h>

#include "kc_internal_cuda.h"

/* vec4: x is 16-byte and y 8-byte aligned; the first n / 4 * 4 elements
 * go four at a time. */
__global__ void kc_f32_to_bf16(const float *x, size_t n, swy_kc_bf16_t *y,
                               int vec4)
{
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec4) {
        size_t nv = n / 4;
        for (size_t i = tid; i < nv; i += stride) {
            float4 a = ((const float4 *)x)[i];
            kc_vec<swy_kc_bf16_t, 4> o;
            o.v[0] = swy_e_f32_to_bf16(a.x);
            o.v[1] = swy_e_f32_to_bf16(a.y);
            o.v[2] = swy_e_f32_to_bf16(a.z);
            o.v[3] = swy_e_f32_to_bf16(a.w);
            ((kc_vec<swy_kc_bf16_t, 4> *)y)[i] = o;
        }
        done = nv * 4;
    }
    for (size_t i = done + tid; i < n; i += stride)
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
    int vec4 = kc_aligned16(x) && ((uintptr_t)y & 7u) == 0;
    kc_f32_to_bf16<<<kc_blocks(ctx, vec4 ? (n + 3) / 4 : n, 256), 256, 0,
                     ctx->stream>>>(x, n, y, vec4);
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
