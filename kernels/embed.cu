/* Embedding lookup (a row gather) and its scatter-add backward. */
#include "kc_internal_cuda.h"

int swy_kc_embed_fwd(swy_kc_ctx_t *ctx, const float *table, const int *ids,
                     int S, int H, float *out)
{
    return kc_gather_rows(ctx, "swy_kc_embed_fwd", 4, table, ids, S, H, out);
}

int swy_kc_embed_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *table,
                          const int *ids, int S, int H, swy_kc_bf16_t *out)
{
    return kc_gather_rows(ctx, "swy_kc_embed_fwd_bf16", 2, table, ids, S, H,
                          out);
}

/* Repeated ids add up through atomics: the sum is order-dependent in its
 * last bits (embed.c adds in token order). */
__global__ void kc_embed_bwd(const float *dout, const int *ids, int S, int H,
                             float *dtable)
{
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        int id = ids[t];
        if (id < 0)
            continue;
        float *dst = dtable + (size_t)id * H;
        const float *src = dout + (size_t)t * H;
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            atomicAdd(dst + h, src[h]);
    }
}

int swy_kc_embed_bwd(swy_kc_ctx_t *ctx, const float *dout, const int *ids,
                     int S, int H, float *dtable)
{
    static const char fn[] = "swy_kc_embed_bwd";
    KC_CTX(fn, ctx);
    if (S < 0 || H <= 0)
        return kc_fail(fn, "bad sizes S=%d H=%d", S, H);
    if (S == 0)
        return 0;
    kc_embed_bwd<<<kc_blocks(ctx, (size_t)S, 1), 256, 0, ctx->stream>>>(
        dout, ids, S, H, dtable);
    KC_LAUNCHED(fn, "kc_embed_bwd");
    return 0;
}
