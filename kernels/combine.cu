/* Weighted sum of each token's top-k expert outputs, and its backward: one
 * block per token, threads over the hidden dimension. */
#include "kc_internal_cuda.h"

#define KC_COMBINE_THREADS 256

template <typename T>
__global__ void kc_combine_fwd(const T *rows, const int *row_of_slot,
                               const float *topk_w, int S, int k, int H,
                               T *out)
{
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        const int *rs = row_of_slot + (size_t)t * k;
        const float *w = topk_w + (size_t)t * k;
        for (int h = threadIdx.x; h < H; h += blockDim.x) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = rs[j];
                if (r >= 0)
                    acc += w[j] * kc_ld(rows + (size_t)r * H + h);
            }
            kc_st(out + (size_t)t * H + h, acc);
        }
    }
}

/* Every branch below depends on t, j and the arguments only, so all threads
 * of a block take it together, as kc_block_sum requires. */
template <typename T>
__global__ void kc_combine_bwd(const T *rows, const int *row_of_slot,
                               const float *topk_w, const T *dout, int S,
                               int k, int H, T *drows, float *dtopk_w)
{
    __shared__ float sh[32];
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        const T *d = dout + (size_t)t * H;
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)t * k + j;
            int r = row_of_slot[s];
            if (r < 0) {
                /* The dropped slot's weight is the constant 0. */
                if (dtopk_w != NULL && threadIdx.x == 0)
                    dtopk_w[s] = 0.0f;
                continue;
            }
            if (drows != NULL) {
                float w = topk_w[s];
                for (int h = threadIdx.x; h < H; h += blockDim.x)
                    kc_st(drows + (size_t)r * H + h, w * kc_ld(d + h));
            }
            if (dtopk_w != NULL) {
                const T *y = rows + (size_t)r * H;
                float dot = 0.0f;
                for (int h = threadIdx.x; h < H; h += blockDim.x)
                    dot += kc_ld(d + h) * kc_ld(y + h);
                dot = kc_block_sum(dot, sh);
                if (threadIdx.x == 0)
                    dtopk_w[s] = dot;
            }
        }
    }
}

static int check_combine(const char *fn, int S, int k, int H)
{
    if (S < 0 || k < 1 || H <= 0)
        return kc_fail(fn, "bad sizes S=%d k=%d H=%d", S, k, H);
    return 0;
}

template <typename T>
static int kc_combine_fwd_launch(swy_kc_ctx_t *ctx, const char *fn,
                                 const T *rows, const int *row_of_slot,
                                 const float *topk_w, int S, int k, int H,
                                 T *out)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_combine(fn, S, k, H));
    if (S == 0)
        return 0;
    kc_combine_fwd<<<kc_blocks(ctx, (size_t)S, 1), KC_COMBINE_THREADS, 0,
                     ctx->stream>>>(rows, row_of_slot, topk_w, S, k, H, out);
    KC_LAUNCHED(fn, "kc_combine_fwd");
    return 0;
}

template <typename T>
static int kc_combine_bwd_launch(swy_kc_ctx_t *ctx, const char *fn,
                                 const T *rows, const int *row_of_slot,
                                 const float *topk_w, const T *dout, int S,
                                 int k, int H, T *drows, float *dtopk_w)
{
    KC_CTX(fn, ctx);
    KC_TRY(check_combine(fn, S, k, H));
    if (S == 0 || (drows == NULL && dtopk_w == NULL))
        return 0;
    kc_combine_bwd<<<kc_blocks(ctx, (size_t)S, 1), KC_COMBINE_THREADS, 0,
                     ctx->stream>>>(rows, row_of_slot, topk_w, dout, S, k, H,
                                    drows, dtopk_w);
    KC_LAUNCHED(fn, "kc_combine_bwd");
    return 0;
}

int swy_kc_combine_fwd(swy_kc_ctx_t *ctx, const float *rows,
                       const int *row_of_slot, const float *topk_w, int S,
                       int k, int H, float *out)
{
    return kc_combine_fwd_launch(ctx, "swy_kc_combine_fwd", rows, row_of_slot,
                                 topk_w, S, k, H, out);
}

int swy_kc_combine_bwd(swy_kc_ctx_t *ctx, const float *rows,
                       const int *row_of_slot, const float *topk_w,
                       const float *dout, int S, int k, int H, float *drows,
                       float *dtopk_w)
{
    return kc_combine_bwd_launch(ctx, "swy_kc_combine_bwd", rows, row_of_slot,
                                 topk_w, dout, S, k, H, drows, dtopk_w);
}

int swy_kc_combine_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *rows,
                            const int *row_of_slot, const float *topk_w,
                            int S, int k, int H, swy_kc_bf16_t *out)
{
    return kc_combine_fwd_launch(ctx, "swy_kc_combine_fwd_bf16", rows,
                                 row_of_slot, topk_w, S, k, H, out);
}

int swy_kc_combine_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *rows,
                            const int *row_of_slot, const float *topk_w,
                            const swy_kc_bf16_t *dout, int S, int k, int H,
                            swy_kc_bf16_t *drows, float *dtopk_w)
{
    return kc_combine_bwd_launch(ctx, "swy_kc_combine_bwd_bf16", rows,
                                 row_of_slot, topk_w, dout, S, k, H, drows,
                                 dtopk_w);
}
