/* Adam / AdamW step over a flat parameter array (swy_e_adam per element). */
#include <math.h>
#include <stdint.h>

#include "kc_internal_cuda.h"

struct kc_adam_args {
    float lr, beta1, beta2, eps, wd, bc1, bc2;
    int decoupled;
};

__device__ __forceinline__ float kc_adam_one(float p, float g, float *m,
                                             float *v, const kc_adam_args &a)
{
    return swy_e_adam(p, g, m, v, a.lr, a.beta1, a.beta2, a.eps, a.wd,
                      a.decoupled, a.bc1, a.bc2);
}

/* vec4: all four arrays are 16-byte aligned; the first n / 4 * 4 elements
 * go four at a time. */
__global__ void kc_adam(float *param, const float *grad, float *m, float *v,
                        size_t n, kc_adam_args a, int vec4)
{
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec4) {
        size_t nv = n / 4;
        for (size_t i = tid; i < nv; i += stride) {
            float4 p = ((float4 *)param)[i];
            float4 g = ((const float4 *)grad)[i];
            float4 mm = ((float4 *)m)[i];
            float4 vv = ((float4 *)v)[i];
            p.x = kc_adam_one(p.x, g.x, &mm.x, &vv.x, a);
            p.y = kc_adam_one(p.y, g.y, &mm.y, &vv.y, a);
            p.z = kc_adam_one(p.z, g.z, &mm.z, &vv.z, a);
            p.w = kc_adam_one(p.w, g.w, &mm.w, &vv.w, a);
            ((float4 *)param)[i] = p;
            ((float4 *)m)[i] = mm;
            ((float4 *)v)[i] = vv;
        }
        done = nv * 4;
    }
    for (size_t i = done + tid; i < n; i += stride)
        param[i] = kc_adam_one(param[i], grad[i], &m[i], &v[i], a);
}

int swy_kc_adam_step(swy_kc_ctx_t *ctx, float *param, const float *grad,
                     float *m, float *v, size_t n,
                     const swy_k_adam_params_t *hp, long step)
{
    static const char fn[] = "swy_kc_adam_step";
    KC_CTX(fn, ctx);
    if (hp == NULL || step < 1)
        return kc_fail(fn, "bad arguments (hp %p, step %ld)", (const void *)hp,
                       step);
    if (n == 0)
        return 0;
    kc_adam_args a;
    a.lr = hp->lr;
    a.beta1 = hp->beta1;
    a.beta2 = hp->beta2;
    a.eps = hp->eps;
    a.wd = hp->weight_decay;
    a.decoupled = hp->decoupled;
    /* As the CPU: bias corrections in double on the host, then float. */
    a.bc1 = (float)(1.0 - pow((double)hp->beta1, (double)step));
    a.bc2 = (float)(1.0 - pow((double)hp->beta2, (double)step));
    int vec4 = (((uintptr_t)param | (uintptr_t)grad | (uintptr_t)m |
                 (uintptr_t)v) & 15u) == 0;
    size_t work = vec4 ? (n + 3) / 4 : n;
    kc_adam<<<kc_blocks(ctx, work, 256), 256, 0, ctx->stream>>>(
        param, grad, m, v, n, a, vec4);
    KC_LAUNCHED(fn, "kc_adam");
    return 0;
}
