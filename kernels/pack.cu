/* Moving token rows into and out of the send-buffer layout.  Row copies move
 * the widest unit (16, 4 or 2 bytes) that the row size and the pointers'
 * alignment allow, so fp32 and bf16 rows share one kernel. */
#include <stdint.h>

#include "kc_internal_cuda.h"

#define KC_ROW_THREADS 128

/* dst[i] = src[map[i]], or zeros where map[i] < 0; rows of `units` U. */
template <typename U>
__global__ void kc_gather(const U *src, const int *map, int n, size_t units,
                          U *dst)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        int r = map[i];
        U *d = dst + (size_t)i * units;
        if (r < 0) {
            for (size_t u = threadIdx.x; u < units; u += blockDim.x)
                d[u] = U();
        } else {
            const U *s = src + (size_t)r * units;
            for (size_t u = threadIdx.x; u < units; u += blockDim.x)
                d[u] = s[u];
        }
    }
}

/* dst[row_of_slot[s]] = src[s / k] for every kept slot s < n_slots. */
template <typename U>
__global__ void kc_scatter(const U *src, const int *row_of_slot, int n_slots,
                           int k, size_t units, U *dst)
{
    for (int s = blockIdx.x; s < n_slots; s += gridDim.x) {
        int r = row_of_slot[s];
        if (r < 0)
            continue;
        const U *a = src + (size_t)(s / k) * units;
        U *d = dst + (size_t)r * units;
        for (size_t u = threadIdx.x; u < units; u += blockDim.x)
            d[u] = a[u];
    }
}

/* The unit for rows of row_bytes at src and dst: 16, 4 or 2. */
static int row_unit(size_t row_bytes, const void *src, const void *dst)
{
    uintptr_t a = (uintptr_t)src | (uintptr_t)dst;
    if (row_bytes % 16 == 0 && (a & 15u) == 0)
        return 16;
    if (row_bytes % 4 == 0 && (a & 3u) == 0)
        return 4;
    return 2;
}

int kc_gather_rows(swy_kc_ctx_t *ctx, const char *fn, size_t esize,
                   const void *src, const int *map, int n, int H, void *dst)
{
    KC_CTX(fn, ctx);
    if (n < 0 || H <= 0)
        return kc_fail(fn, "bad sizes n=%d H=%d", n, H);
    if (n == 0)
        return 0;
    size_t row_bytes = (size_t)H * esize;
    int unit = row_unit(row_bytes, src, dst);
    size_t units = row_bytes / (size_t)unit;
    unsigned bl = kc_blocks(ctx, (size_t)n, 1);
    if (unit == 16)
        kc_gather<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint4 *)src, map, n, units, (uint4 *)dst);
    else if (unit == 4)
        kc_gather<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint32_t *)src, map, n, units, (uint32_t *)dst);
    else
        kc_gather<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint16_t *)src, map, n, units, (uint16_t *)dst);
    KC_LAUNCHED(fn, "kc_gather");
    return 0;
}

static int kc_pack(swy_kc_ctx_t *ctx, const char *fn, size_t esize,
                   const void *x, const int *row_of_slot, int S, int k, int H,
                   void *send)
{
    KC_CTX(fn, ctx);
    if (S < 0 || k < 1 || H <= 0 || (size_t)S * k > INT32_MAX)
        return kc_fail(fn, "bad sizes S=%d k=%d H=%d", S, k, H);
    int n_slots = S * k;
    if (n_slots == 0)
        return 0;
    size_t row_bytes = (size_t)H * esize;
    int unit = row_unit(row_bytes, x, send);
    size_t units = row_bytes / (size_t)unit;
    unsigned bl = kc_blocks(ctx, (size_t)n_slots, 1);
    if (unit == 16)
        kc_scatter<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint4 *)x, row_of_slot, n_slots, k, units, (uint4 *)send);
    else if (unit == 4)
        kc_scatter<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint32_t *)x, row_of_slot, n_slots, k, units,
            (uint32_t *)send);
    else
        kc_scatter<<<bl, KC_ROW_THREADS, 0, ctx->stream>>>(
            (const uint16_t *)x, row_of_slot, n_slots, k, units,
            (uint16_t *)send);
    KC_LAUNCHED(fn, "kc_scatter");
    return 0;
}

/* dx[t] = sum over kept j of dsend[row_of_slot[t*k+j]], in j order from 0
 * as the CPU (fp32 results are the CPU's exactly), V elements at a time
 * (Hv = H / V). */
template <typename T, int V>
__global__ void kc_pack_bwd(const T *dsend, const int *row_of_slot, int S,
                            int k, int Hv, T *dx)
{
    typedef kc_vec<T, V> vec;
    const vec *dv = (const vec *)dsend;
    vec *xv = (vec *)dx;
    for (int t = blockIdx.x; t < S; t += gridDim.x) {
        const int *rs = row_of_slot + (size_t)t * k;
        for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
            float acc[V];
#pragma unroll
            for (int i = 0; i < V; i++)
                acc[i] = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = rs[j];
                if (r < 0)
                    continue;
                vec a = dv[(size_t)r * Hv + h];
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[i] += kc_ld(&a.v[i]);
            }
            vec o;
#pragma unroll
            for (int i = 0; i < V; i++)
                kc_st(&o.v[i], acc[i]);
            xv[(size_t)t * Hv + h] = o;
        }
    }
}

template <typename T>
static int kc_pack_bwd_launch(swy_kc_ctx_t *ctx, const char *fn,
                              const T *dsend, const int *row_of_slot, int S,
                              int k, int H, T *dx)
{
    KC_CTX(fn, ctx);
    if (S < 0 || k < 1 || H <= 0)
        return kc_fail(fn, "bad sizes S=%d k=%d H=%d", S, k, H);
    if (S == 0)
        return 0;
    constexpr int V = 16 / sizeof(T);
    unsigned bl = kc_blocks(ctx, (size_t)S, 1);
    if (H % V == 0 && kc_aligned16(dsend, dx))
        kc_pack_bwd<T, V><<<bl, 256, 0, ctx->stream>>>(dsend, row_of_slot, S,
                                                       k, H / V, dx);
    else
        kc_pack_bwd<T, 1><<<bl, 256, 0, ctx->stream>>>(dsend, row_of_slot, S,
                                                       k, H, dx);
    KC_LAUNCHED(fn, "kc_pack_bwd");
    return 0;
}

static int kc_unpack(swy_kc_ctx_t *ctx, const char *fn, size_t esize,
                     const void *recv, const int *row_of_slot, int S, int k,
                     int H, void *slots)
{
    if (S < 0 || k < 1 || (size_t)S * k > INT32_MAX)
        return kc_fail(fn, "bad sizes S=%d k=%d", S, k);
    return kc_gather_rows(ctx, fn, esize, recv, row_of_slot, S * k, H, slots);
}

int swy_kc_pack(swy_kc_ctx_t *ctx, const float *x, const int *row_of_slot,
                int S, int k, int H, float *send)
{
    return kc_pack(ctx, "swy_kc_pack", 4, x, row_of_slot, S, k, H, send);
}

int swy_kc_pack_bwd(swy_kc_ctx_t *ctx, const float *dsend,
                    const int *row_of_slot, int S, int k, int H, float *dx)
{
    return kc_pack_bwd_launch(ctx, "swy_kc_pack_bwd", dsend, row_of_slot, S,
                              k, H, dx);
}

int swy_kc_unpack(swy_kc_ctx_t *ctx, const float *recv,
                  const int *row_of_slot, int S, int k, int H, float *slots)
{
    return kc_unpack(ctx, "swy_kc_unpack", 4, recv, row_of_slot, S, k, H,
                     slots);
}

int swy_kc_gather_rows(swy_kc_ctx_t *ctx, const float *src,
                       const int *src_row, int n, int H, float *dst)
{
    return kc_gather_rows(ctx, "swy_kc_gather_rows", 4, src, src_row, n, H,
                          dst);
}

int swy_kc_pack_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                     const int *row_of_slot, int S, int k, int H,
                     swy_kc_bf16_t *send)
{
    return kc_pack(ctx, "swy_kc_pack_bf16", 2, x, row_of_slot, S, k, H, send);
}

int swy_kc_pack_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *dsend,
                         const int *row_of_slot, int S, int k, int H,
                         swy_kc_bf16_t *dx)
{
    return kc_pack_bwd_launch(ctx, "swy_kc_pack_bwd_bf16", dsend, row_of_slot,
                              S, k, H, dx);
}

int swy_kc_unpack_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *recv,
                       const int *row_of_slot, int S, int k, int H,
                       swy_kc_bf16_t *slots)
{
    return kc_unpack(ctx, "swy_kc_unpack_bf16", 2, recv, row_of_slot, S, k, H,
                     slots);
}

int swy_kc_gather_rows_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *src,
                            const int *src_row, int n, int H,
                            swy_kc_bf16_t *dst)
{
    return kc_gather_rows(ctx, "swy_kc_gather_rows_bf16", 2, src, src_row, n,
                          H, dst);
}
