/* Softmax cross-entropy, mean over the counted tokens: one warp per row
 * (C can be a vocabulary), with elem.h's per-element formulas.  The
 * context's scratch carries the loss sum and the token count between the
 * launches of one call (calls on one context are ordered by its stream).
 * A label must be < C, as the CPU asserts; here a label >= C is treated
 * like a negative one (ignored and not counted) instead of read out of
 * bounds. */
#include <math.h>

#include "kc_internal_cuda.h"

#define KC_LOSS_THREADS 256 /* 8 rows per block at a time */

struct kc_loss_scratch {
    double total;
    int count;
};

static_assert(KC_SCRATCH_LOSS + sizeof(kc_loss_scratch) <= KC_SCRATCH_TOPO,
              "loss scratch overlaps the next user's");

__device__ __forceinline__ bool kc_counted(int label, int C)
{
    return label >= 0 && label < C;
}

/* Row max and sum of exp(x - max) over one row, by one warp; the result is
 * valid in every lane. */
__device__ void kc_warp_row_stats(const float *row, int C, float *m_p,
                                  float *s_p)
{
    int lane = threadIdx.x & 31;
    float m = -INFINITY;
    for (int c = lane; c < C; c += 32)
        m = row[c] > m ? row[c] : m;
    m = kc_warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += swy_e_exp_shifted(row[c], m);
    *m_p = m;
    *s_p = kc_warp_sum(s);
}

__global__ void kc_xent_fwd_rows(const float *logits, const int *labels,
                                 int S, int C, float *probs,
                                 kc_loss_scratch *acc)
{
    int lane = threadIdx.x & 31;
    int warps = (int)(gridDim.x * (blockDim.x >> 5));
    for (int t = (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
         t < S; t += warps) {
        const float *row = logits + (size_t)t * C;
        float m, s;
        kc_warp_row_stats(row, C, &m, &s);
        if (probs != NULL) {
            float inv = 1.0f / s;
            float *p = probs + (size_t)t * C;
            for (int c = lane; c < C; c += 32)
                p[c] = swy_e_exp_shifted(row[c], m) * inv;
        }
        int y = labels[t];
        if (lane == 0 && kc_counted(y, C)) {
            atomicAdd(&acc->total, (double)swy_e_xent_loss(row[y], m, s));
            atomicAdd(&acc->count, 1);
        }
    }
}

__global__ void kc_xent_fwd_finish(const kc_loss_scratch *acc, float *loss)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *loss = acc->count > 0 ? (float)(acc->total / acc->count) : 0.0f;
}

int swy_kc_xent_fwd(swy_kc_ctx_t *ctx, const float *logits, const int *labels,
                    int S, int C, float *probs, float *loss_d)
{
    static const char fn[] = "swy_kc_xent_fwd";
    KC_CTX(fn, ctx);
    if (S < 0 || C <= 0 || loss_d == NULL)
        return kc_fail(fn, "bad arguments S=%d C=%d loss_d=%p", S, C,
                       (void *)loss_d);
    kc_loss_scratch *acc =
        (kc_loss_scratch *)((char *)ctx->scratch + KC_SCRATCH_LOSS);
    KC_CUDA(fn, cudaMemsetAsync(acc, 0, sizeof(*acc), ctx->stream));
    if (S > 0) {
        unsigned rows_per_block = KC_LOSS_THREADS / 32;
        kc_xent_fwd_rows<<<kc_blocks(ctx, (size_t)S, rows_per_block),
                           KC_LOSS_THREADS, 0, ctx->stream>>>(
            logits, labels, S, C, probs, acc);
        KC_LAUNCHED(fn, "kc_xent_fwd_rows");
    }
    kc_xent_fwd_finish<<<1, 32, 0, ctx->stream>>>(acc, loss_d);
    KC_LAUNCHED(fn, "kc_xent_fwd_finish");
    return 0;
}

__global__ void kc_count_labels(const int *labels, int S, int C, int *count)
{
    __shared__ int sh[32];
    int n = 0;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < S;
         t += gridDim.x * blockDim.x)
        n += kc_counted(labels[t], C);
    n = kc_block_sum(n, sh);
    if (threadIdx.x == 0 && n != 0)
        atomicAdd(count, n);
}

__global__ void kc_xent_bwd_rows(const float *logits, const int *labels,
                                 int S, int C, float dloss, const int *count,
                                 float *dlogits)
{
    int lane = threadIdx.x & 31;
    int warps = (int)(gridDim.x * (blockDim.x >> 5));
    int n = *count;
    float scale = n > 0 ? dloss / (float)n : 0.0f; /* as loss.c */
    for (int t = (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
         t < S; t += warps) {
        float *drow = dlogits + (size_t)t * C;
        int y = labels[t];
        if (!kc_counted(y, C)) {
            for (int c = lane; c < C; c += 32)
                drow[c] = 0.0f;
            continue;
        }
        const float *row = logits + (size_t)t * C;
        float m, s;
        kc_warp_row_stats(row, C, &m, &s);
        float inv = 1.0f / s;
        for (int c = lane; c < C; c += 32)
            drow[c] = swy_e_xent_grad(swy_e_exp_shifted(row[c], m) * inv,
                                      c == y, scale);
    }
}

int swy_kc_xent_bwd(swy_kc_ctx_t *ctx, const float *logits, const int *labels,
                    int S, int C, float dloss, float *dlogits)
{
    static const char fn[] = "swy_kc_xent_bwd";
    KC_CTX(fn, ctx);
    if (S < 0 || C <= 0)
        return kc_fail(fn, "bad sizes S=%d C=%d", S, C);
    if (S == 0)
        return 0;
    int *count = &((kc_loss_scratch *)((char *)ctx->scratch +
                                       KC_SCRATCH_LOSS))->count;
    KC_CUDA(fn, cudaMemsetAsync(count, 0, sizeof(*count), ctx->stream));
    kc_count_labels<<<kc_blocks(ctx, (size_t)S, 256), 256, 0, ctx->stream>>>(
        labels, S, C, count);
    KC_LAUNCHED(fn, "kc_count_labels");
    unsigned rows_per_block = KC_LOSS_THREADS / 32;
    kc_xent_bwd_rows<<<kc_blocks(ctx, (size_t)S, rows_per_block),
                       KC_LOSS_THREADS, 0, ctx->stream>>>(
        logits, labels, S, C, dloss, count, dlogits);
    KC_LAUNCHED(fn, "kc_xent_bwd_rows");
    return 0;
}
