/* Counting sort of token slots into FastMoE's send layout on the GPU: an
 * atomic histogram (integers: exact in any order), a one-thread scan of the
 * E counts, then one block per expert that walks the slots in order and
 * numbers its own with a block-wide prefix count, which keeps the sort
 * stable by token exactly as sort.c. */
#include "kc_internal_cuda.h"

#define KC_SCAN_THREADS 256

__global__ void kc_sort_hist(const int *topk_idx, int n, int E, int *counts)
{
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < n;
         s += gridDim.x * blockDim.x) {
        int e = topk_idx[s];
        if (e >= 0 && e < E)
            atomicAdd(&counts[e], 1);
    }
}

/* E is at most a few thousand: one thread keeps the CPU's sequential sum. */
__global__ void kc_sort_offsets(const int *counts, int E, int *offsets,
                                int *n_rows)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    int acc = 0;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) {
        acc += counts[e];
        offsets[e + 1] = acc;
    }
    *n_rows = acc;
}

/* Block e numbers the slots that chose e, in slot order, from offsets[e];
 * block 0 also marks slots outside [0, E) (dropped) with -1. */
__global__ void kc_sort_assign(const int *topk_idx, int n, int E,
                               const int *offsets, int *row_of_slot)
{
    __shared__ int sh[32];
    int e = blockIdx.x;
    int next = offsets[e];
    for (int base = 0; base < n; base += blockDim.x) {
        int s = base + (int)threadIdx.x, v = -1;
        if (s < n)
            v = topk_idx[s];
        int total;
        int rank = kc_block_prefix(v == e, &total, sh);
        if (v == e)
            row_of_slot[s] = next + rank;
        else if (e == 0 && s < n && (v < 0 || v >= E))
            row_of_slot[s] = -1;
        next += total;
    }
}

int swy_kc_sort_slots(swy_kc_ctx_t *ctx, const int *topk_idx, int S, int k,
                      int n_ranks, int experts_per_rank, int *expert_counts,
                      int *expert_offsets, int *row_of_slot, int *n_rows_d)
{
    static const char fn[] = "swy_kc_sort_slots";
    KC_CTX(fn, ctx);
    if (S < 0 || k < 1 || n_ranks < 1 || experts_per_rank < 1 ||
        (size_t)n_ranks * experts_per_rank > INT32_MAX - 1 ||
        (size_t)S * k > INT32_MAX - 1024 || n_rows_d == NULL)
        return kc_fail(fn, "bad arguments S=%d k=%d n_ranks=%d epr=%d", S, k,
                       n_ranks, experts_per_rank);
    int E = n_ranks * experts_per_rank;
    int n = S * k;
    KC_CUDA(fn, cudaMemsetAsync(expert_counts, 0, (size_t)E * sizeof(int),
                                ctx->stream));
    if (n > 0) {
        kc_sort_hist<<<kc_blocks(ctx, (size_t)n, 256), 256, 0, ctx->stream>>>(
            topk_idx, n, E, expert_counts);
        KC_LAUNCHED(fn, "kc_sort_hist");
    }
    kc_sort_offsets<<<1, 32, 0, ctx->stream>>>(expert_counts, E,
                                               expert_offsets, n_rows_d);
    KC_LAUNCHED(fn, "kc_sort_offsets");
    if (n > 0) {
        kc_sort_assign<<<E, KC_SCAN_THREADS, 0, ctx->stream>>>(
            topk_idx, n, E, expert_offsets, row_of_slot);
        KC_LAUNCHED(fn, "kc_sort_assign");
    }
    return 0;
}

__global__ void kc_rank_counts(const int *expert_counts, int n_ranks,
                               int epr, int *rank_counts)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n_ranks;
         r += gridDim.x * blockDim.x) {
        int sum = 0;
        for (int i = 0; i < epr; i++)
            sum += expert_counts[r * epr + i];
        rank_counts[r] = sum;
    }
}

int swy_kc_sort_rank_counts(swy_kc_ctx_t *ctx, const int *expert_counts,
                            int n_ranks, int experts_per_rank,
                            int *rank_counts)
{
    static const char fn[] = "swy_kc_sort_rank_counts";
    KC_CTX(fn, ctx);
    if (n_ranks < 1 || experts_per_rank < 1 ||
        (size_t)n_ranks * experts_per_rank > INT32_MAX)
        return kc_fail(fn, "bad sizes n_ranks=%d epr=%d", n_ranks,
                       experts_per_rank);
    kc_rank_counts<<<kc_blocks(ctx, (size_t)n_ranks, 128), 128, 0,
                     ctx->stream>>>(expert_counts, n_ranks, experts_per_rank,
                                    rank_counts);
    KC_LAUNCHED(fn, "kc_rank_counts");
    return 0;
}

__global__ void kc_fill_int(int *p, int n, int v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void kc_invert(const int *row_of_slot, int n_slots, int n_rows,
                          int *slot_of_row)
{
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < n_slots;
         s += gridDim.x * blockDim.x) {
        int r = row_of_slot[s];
        if (r >= 0 && r < n_rows)
            slot_of_row[r] = s;
    }
}

int swy_kc_sort_invert(swy_kc_ctx_t *ctx, const int *row_of_slot, int n_slots,
                       int n_rows, int *slot_of_row)
{
    static const char fn[] = "swy_kc_sort_invert";
    KC_CTX(fn, ctx);
    if (n_slots < 0 || n_rows < 0)
        return kc_fail(fn, "bad sizes n_slots=%d n_rows=%d", n_slots, n_rows);
    if (n_rows > 0) {
        kc_fill_int<<<kc_blocks(ctx, (size_t)n_rows, 256), 256, 0,
                      ctx->stream>>>(slot_of_row, n_rows, -1);
        KC_LAUNCHED(fn, "kc_fill_int");
    }
    if (n_slots > 0 && n_rows > 0) {
        kc_invert<<<kc_blocks(ctx, (size_t)n_slots, 256), 256, 0,
                    ctx->stream>>>(row_of_slot, n_slots, n_rows, slot_of_row);
        KC_LAUNCHED(fn, "kc_invert");
    }
    return 0;
}
