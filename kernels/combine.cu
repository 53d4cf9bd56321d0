/* Weighted sum of each token's top-k expert outputs, and its backward: one
 * block per token, threads over the hidden dimension. */
#include "kc_internal_cuda.h"

#define KC_COMBINE_THREADS 256

/* Threads per block for rows of hv vectors: one vector per thread up to
 * KC_COMBINE_THREADS (a whole number of warps, as kc_block_sum needs), so
 * that a bf16 row of 1024 (128 vectors) does not leave half the block
 * idle. */
static unsigned combine_threads(int hv)
{
    unsigned t = ((unsigned)hv + 31u) / 32u * 32u;
    return t < 32u ? 32u : t > KC_COMBINE_THREADS ? KC_COMBINE_THREADS : t;
}

/* Rows are handled V elements at a time (Hv = H / V vectors per row); V is
 * 16 bytes' worth when H and the pointers allow, else 1.  Each element is
 * still summed in j order, so V does not change the result. */
template <typename T, int V>
__global__ void kc_combine_fwd(const T *rows, const int *row_of_slot,
                               const float *topk_w, int S, int k, int Hv,
                               T *out)
{
    typedef kc_vec<T, V> vec;
    const vec *rv = (const vec *)rows;
    vec *ov = (vec *)out;
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        const int *rs = row_of_slot + (size_t)t * k;
        const float *w = topk_w + (size_t)t * k;
        for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
            float acc[V];
#pragma unroll
            for (int i = 0; i < V; i++)
                acc[i] = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = rs[j];
                if (r < 0)
                    continue;
                vec y = rv[(size_t)r * Hv + h];
                float wj = w[j];
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[i] += wj * kc_ld(&y.v[i]);
            }
            vec o;
#pragma unroll
            for (int i = 0; i < V; i++)
                kc_st(&o.v[i], acc[i]);
            ov[(size_t)t * Hv + h] = o;
        }
    }
}

/* Every branch below depends on t, j and the arguments only, so all threads
 * of a block take it together, as kc_block_sum requires. */
template <typename T, int V>
__global__ void kc_combine_bwd(const T *rows, const int *row_of_slot,
                               const float *topk_w, const T *dout, int S,
                               int k, int Hv, T *drows, float *dtopk_w)
{
    typedef kc_vec<T, V> vec;
    __shared__ float sh[32];
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        const vec *d = (const vec *)dout + (size_t)t * Hv;
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)t * k + j;
            int r = row_of_slot[s];
            if (r < 0) {
                /* The dropped slot's weight is the constant 0. */
                if (dtopk_w != NULL && threadIdx.x == 0)
                    dtopk_w[s] = 0.0f;
                continue;
            }
            /* One pass over the row: the scaled copy and the dot product
             * read dout[t] once between them. */
            float w = topk_w[s], dot = 0.0f;
            vec *dr = drows != NULL ? (vec *)drows + (size_t)r * Hv : NULL;
            const vec *y = (const vec *)rows + (size_t)r * Hv;
            for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
                vec a = d[h];
                if (dr != NULL) {
                    vec o;
#pragma unroll
                    for (int i = 0; i < V; i++)
                        kc_st(&o.v[i], w * kc_ld(&a.v[i]));
                    dr[h] = o;
                }
                if (dtopk_w != NULL) {
                    vec b = y[h];
#pragma unroll
                    for (int i = 0; i < V; i++)
                        dot += kc_ld(&a.v[i]) * kc_ld(&b.v[i]);
                }
            }
            if (dtopk_w != NULL) {
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
    constexpr int V = 16 / sizeof(T);
    unsigned bl = kc_blocks(ctx, (size_t)S, 1);
    if (H % V == 0 && kc_aligned16(rows, out))
        kc_combine_fwd<T, V><<<bl, combine_threads(H / V), 0, ctx->stream>>>(
            rows, row_of_slot, topk_w, S, k, H / V, out);
    else
        kc_combine_fwd<T, 1><<<bl, combine_threads(H), 0, ctx->stream>>>(
            rows, row_of_slot, topk_w, S, k, H, out);
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
    constexpr int V = 16 / sizeof(T);
    unsigned bl = kc_blocks(ctx, (size_t)S, 1);
    if (H % V == 0 && kc_aligned16(rows, dout, drows))
        kc_combine_bwd<T, V><<<bl, combine_threads(H / V), 0, ctx->stream>>>(
            rows, row_of_slot, topk_w, dout, S, k, H / V, drows, dtopk_w);
    else
        kc_combine_bwd<T, 1><<<bl, combine_threads(H), 0, ctx->stream>>>(
            rows, row_of_slot, topk_w, dout, S, k, H, drows, dtopk_w);
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
