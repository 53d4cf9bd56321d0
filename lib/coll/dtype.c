/* Element types and reduction kernels. Integer sums wrap (computed in
 * unsigned arithmetic, as two's complement hardware does, without C's
 * undefined signed overflow); fp16/bf16 are reduced in float and rounded
 * back to nearest even, as NCCL does for half types on the host side. */
#include <math.h>
#include <string.h>

#include "coll/coll.h"
#include "util/status.h"

/* Public (switchyard.h), and what every algorithm sizes its elements
 * with: a valid dtype must not touch the thread's last error, which may
 * hold an earlier failure of the same call. */
size_t swy_dtype_size(swy_dtype_t dtype)
{
    switch (dtype) {
    case SWY_INT8: case SWY_UINT8: return 1;
    case SWY_FLOAT16: case SWY_BFLOAT16: return 2;
    case SWY_INT32: case SWY_FLOAT32: return 4;
    case SWY_INT64: case SWY_FLOAT64: return 8;
    }
    swy_err_set(SWY_ERR_INVALID_ARG, "coll", "swy_dtype_size: dtype %d is "
                "not a swy_dtype_t (%d..%d)", (int)dtype, SWY_INT8,
                SWY_FLOAT64);
    return 0;
}

int swy_dtype_valid(int dtype)
{
    return dtype >= SWY_INT8 && dtype <= SWY_FLOAT64;
}

int swy_redop_valid(int op)
{
    return op >= SWY_SUM && op <= SWY_AVG;
}

const char *swy_dtype_name(swy_dtype_t dtype)
{
    static const char *names[] = {"int8",    "uint8",    "int32",  "int64",
                                  "float16", "bfloat16", "float32", "float64"};
    return swy_dtype_valid(dtype) ? names[dtype] : "invalid-dtype";
}

const char *swy_redop_name(swy_redop_t op)
{
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};
    return swy_redop_valid(op) ? names[op] : "invalid-op";
}

/* The reductions run in blocks of REDUCE_BLOCK_BYTES through helpers
 * with a constant trip count whose pointers are restrict-qualified (dst
 * is either one of the sources, passed once, or disjoint from both, as
 * the caller picks the helper), so the compiler vectorizes them without
 * run-time alias checks: at -O2, the build's default, too, where the
 * plain loop stayed scalar. Out of line, so that -O3 does not transform
 * them further. The blocks are several times faster than the plain loop
 * at -O2 and ahead of it at -O3 (docs/performance.md, "coll", points to
 * the runs).
 *
 * Where the CPU has AVX2 (x86-64 with GCC's target_clones and an ifunc
 * loader), each helper also exists in an AVX2 build, chosen when the
 * library loads: the baseline x86-64 build uses 16-byte vectors. The
 * elements are computed by the same operations in the same order either
 * way (no reassociation, no fused multiply-add in a sum or a product of
 * two), so the bits do not depend on the CPU. AVX2, and summing all the
 * partials in one pass (swy_coll_reduce_n) instead of pairwise passes,
 * each shortened the direct allreduce's reduction (docs/performance.md,
 * "coll", points to the runs). Not under ThreadSanitizer: the ifunc
 * resolver runs while the loader relocates, before TSAN's runtime is up,
 * and its instrumented entry crashed every program at start. */
#define REDUCE_BLOCK_BYTES 4096

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&      \
    defined(__linux__) && !defined(SWY_NO_TARGET_CLONES) &&                 \
    !defined(__SANITIZE_THREAD__)
#define REDUCE_KERNEL                                                         \
    __attribute__((noinline, target_clones("avx2", "default")))
#else
#define REDUCE_KERNEL __attribute__((noinline))
#endif

/* NAME##_to: d = x op y, all three disjoint; NAME##_into_x: x = x op y;
 * NAME##_into_y: y = x op y (x and y distinct). For the sums of several
 * sources (swy_coll_reduce_n), in one pass over the block: NAME##_to3:
 * d = (x op y) op z and NAME##_to4: d = ((x op y) op z) op w, all
 * disjoint. */
#define DEFINE_REDUCE(NAME, T, EXPR)                                          \
    enum { NAME##_BLOCK = REDUCE_BLOCK_BYTES / sizeof(T) };                   \
    REDUCE_KERNEL static void NAME##_to(T *restrict d, const T *restrict x,   \
                                        const T *restrict y)                  \
    {                                                                         \
        for (size_t i = 0; i < NAME##_BLOCK; i++) {                           \
            T a = x[i], b = y[i];                                             \
            d[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    REDUCE_KERNEL static void NAME##_into_x(T *x, const T *restrict y)        \
    {                                                                         \
        for (size_t i = 0; i < NAME##_BLOCK; i++) {                           \
            T a = x[i], b = y[i];                                             \
            x[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    REDUCE_KERNEL static void NAME##_into_y(const T *restrict x, T *y)        \
    {                                                                         \
        for (size_t i = 0; i < NAME##_BLOCK; i++) {                           \
            T a = x[i], b = y[i];                                             \
            y[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    REDUCE_KERNEL static void NAME##_to3(T *restrict d, const T *restrict x,  \
                                         const T *restrict y,                 \
                                         const T *restrict z)                 \
    {                                                                         \
        for (size_t i = 0; i < NAME##_BLOCK; i++) {                           \
            T a = x[i], b = y[i];                                             \
            a = (EXPR);                                                       \
            b = z[i];                                                         \
            d[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    REDUCE_KERNEL static void NAME##_to4(T *restrict d, const T *restrict x,  \
                                         const T *restrict y,                 \
                                         const T *restrict z,                 \
                                         const T *restrict w)                 \
    {                                                                         \
        for (size_t i = 0; i < NAME##_BLOCK; i++) {                           \
            T a = x[i], b = y[i];                                             \
            a = (EXPR);                                                       \
            b = z[i];                                                         \
            a = (EXPR);                                                       \
            b = w[i];                                                         \
            d[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    static void NAME(void *dst, const void *src_a, const void *src_b,         \
                     size_t count)                                            \
    {                                                                         \
        T *d = dst;                                                           \
        const T *x = src_a, *y = src_b;                                       \
        size_t i = 0;                                                         \
        /* x == y (a buffer with itself) takes the plain loop. */             \
        for (; x != y && i + NAME##_BLOCK <= count; i += NAME##_BLOCK) {      \
            if (d == x)                                                       \
                NAME##_into_x(d + i, y + i);                                  \
            else if (d == y)                                                  \
                NAME##_into_y(x + i, d + i);                                  \
            else                                                              \
                NAME##_to(d + i, x + i, y + i);                               \
        }                                                                     \
        for (; i < count; i++) { /* the tail */                               \
            T a = x[i], b = y[i];                                             \
            d[i] = (EXPR);                                                    \
        }                                                                     \
    }                                                                         \
    /* A block of n >= 2 sources into out, disjoint from every source: up  \
     * to four in one pass, then one more per pass over the block, which  \
     * stays in L1 meanwhile. */                                              \
    static void NAME##_block_n(T *restrict out, const T *const *s, int n,     \
                               size_t i)                                      \
    {                                                                         \
        int k;                                                                \
        if (n >= 4) {                                                         \
            NAME##_to4(out, s[0] + i, s[1] + i, s[2] + i, s[3] + i);          \
            k = 4;                                                            \
        } else if (n == 3) {                                                  \
            NAME##_to3(out, s[0] + i, s[1] + i, s[2] + i);                    \
            k = 3;                                                            \
        } else {                                                              \
            NAME##_to(out, s[0] + i, s[1] + i);                               \
            k = 2;                                                            \
        }                                                                     \
        for (; k < n; k++)                                                    \
            NAME##_into_x(out, s[k] + i);                                     \
    }                                                                         \
    static void NAME##_n(void *dst, const void *const *srcs, int n,           \
                         size_t count)                                        \
    {                                                                         \
        T *d = dst;                                                           \
        const T *const *s = (const T *const *)srcs;                           \
        int aliased = 0;                                                      \
        for (int k = 0; k < n; k++)                                           \
            aliased |= (const void *)s[k] == dst;                             \
        /* dst is one of the sources: each block is reduced aside, then      \
         * copied over it. */                                                 \
        T tmp[NAME##_BLOCK] __attribute__((aligned(64)));                     \
        size_t i = 0;                                                         \
        for (; i + NAME##_BLOCK <= count; i += NAME##_BLOCK) {                \
            NAME##_block_n(aliased ? tmp : d + i, s, n, i);                   \
            if (aliased)                                                      \
                memcpy(d + i, tmp, sizeof(tmp));                              \
        }                                                                     \
        for (; i < count; i++) { /* the tail */                               \
            T a = s[0][i];                                                    \
            for (int k = 1; k < n; k++) {                                     \
                T b = s[k][i];                                                \
                a = (EXPR);                                                   \
            }                                                                 \
            d[i] = a;                                                         \
        }                                                                     \
    }

/* Sums and products are computed in UT: unsigned for the integers, so
 * that they wrap; the type itself for floating point. */
#define DEFINE_REDUCE_OPS(PREFIX, T, UT)                                      \
    DEFINE_REDUCE(PREFIX##_sum, T, (T)((UT)a + (UT)b))                        \
    DEFINE_REDUCE(PREFIX##_prod, T, (T)((UT)a * (UT)b))                       \
    DEFINE_REDUCE(PREFIX##_max, T, a > b ? a : b)                             \
    DEFINE_REDUCE(PREFIX##_min, T, a < b ? a : b)

DEFINE_REDUCE_OPS(reduce_i8, int8_t, uint8_t)
DEFINE_REDUCE_OPS(reduce_u8, uint8_t, uint8_t)
DEFINE_REDUCE_OPS(reduce_i32, int32_t, uint32_t)
DEFINE_REDUCE_OPS(reduce_i64, int64_t, uint64_t)
DEFINE_REDUCE_OPS(reduce_f32, float, float)
DEFINE_REDUCE_OPS(reduce_f64, double, double)

/* The kernel for op of family PREFIX (SUFFIX: empty for two sources,
 * _n for several), called with the remaining arguments. */
#define REDUCE_BY_OP(PREFIX, SUFFIX, ...)                                     \
    do {                                                                      \
        switch (op) {                                                         \
        case SWY_SUM: case SWY_AVG: PREFIX##_sum##SUFFIX(__VA_ARGS__); break; \
        case SWY_PROD: PREFIX##_prod##SUFFIX(__VA_ARGS__); break;             \
        case SWY_MAX: PREFIX##_max##SUFFIX(__VA_ARGS__); break;               \
        case SWY_MIN: PREFIX##_min##SUFFIX(__VA_ARGS__); break;               \
        }                                                                     \
    } while (0)

static float apply_float(float a, float b, swy_redop_t op)
{
    switch (op) {
    case SWY_SUM: case SWY_AVG: return a + b;
    case SWY_PROD: return a * b;
    case SWY_MAX: return a > b ? a : b;
    case SWY_MIN: return a < b ? a : b;
    }
    return a;
}

/* The integer and floating point kernel for dtype and op (SUFFIX: empty
 * for two sources, _n for several), called with the remaining arguments,
 * then return; fp16 and bf16 go on past it. */
#define REDUCE_BY_DTYPE(SUFFIX, ...)                                          \
    switch (dtype) {                                                          \
    case SWY_INT8: REDUCE_BY_OP(reduce_i8, SUFFIX, __VA_ARGS__); return;      \
    case SWY_UINT8: REDUCE_BY_OP(reduce_u8, SUFFIX, __VA_ARGS__); return;     \
    case SWY_INT32: REDUCE_BY_OP(reduce_i32, SUFFIX, __VA_ARGS__); return;    \
    case SWY_INT64: REDUCE_BY_OP(reduce_i64, SUFFIX, __VA_ARGS__); return;    \
    case SWY_FLOAT32: REDUCE_BY_OP(reduce_f32, SUFFIX, __VA_ARGS__); return;  \
    case SWY_FLOAT64: REDUCE_BY_OP(reduce_f64, SUFFIX, __VA_ARGS__); return;  \
    case SWY_FLOAT16: case SWY_BFLOAT16: break;                               \
    default: return;                                                          \
    }

/* fp16 and bf16 in float, rounded back to the type after each operation
 * (so n sources give what the chain of pairs gives). */
static void reduce_half_n(void *dst, const void *const *srcs, int nsrcs,
                          size_t count, swy_dtype_t dtype, swy_redop_t op)
{
    int half = dtype == SWY_FLOAT16;
    uint16_t *d = dst;
    for (size_t i = 0; i < count; i++) {
        const uint16_t *s0 = srcs[0];
        uint16_t acc = s0[i];
        for (int k = 1; k < nsrcs; k++) {
            const uint16_t *sk = srcs[k];
            float a = half ? swy_half_to_float(acc) : swy_bf16_to_float(acc);
            float b = half ? swy_half_to_float(sk[i])
                           : swy_bf16_to_float(sk[i]);
            float r = apply_float(a, b, op);
            acc = half ? swy_float_to_half(r) : swy_float_to_bf16(r);
        }
        d[i] = acc;
    }
}

void swy_coll_reduce(void *dst, const void *src_a, const void *src_b,
                     size_t count, swy_dtype_t dtype, swy_redop_t op)
{
    REDUCE_BY_DTYPE(, dst, src_a, src_b, count)
    const void *srcs[2] = {src_a, src_b};
    reduce_half_n(dst, srcs, 2, count, dtype, op);
}

void swy_coll_reduce_n(void *dst, const void *const *srcs, int nsrcs,
                       size_t count, swy_dtype_t dtype, swy_redop_t op)
{
    if (nsrcs < 2) {
        if (nsrcs == 1 && dst != srcs[0])
            memcpy(dst, srcs[0], count * swy_dtype_size(dtype));
        return;
    }
    REDUCE_BY_DTYPE(_n, dst, srcs, nsrcs, count)
    reduce_half_n(dst, srcs, nsrcs, count, dtype, op);
}

void swy_coll_scale_avg(void *dst, size_t count, swy_dtype_t dtype,
                        int divisor)
{
    if (divisor == 1)
        return;
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case SWY_INT8: ((int8_t *)dst)[i] /= divisor; break;
        case SWY_UINT8: ((uint8_t *)dst)[i] /= divisor; break;
        case SWY_INT32: ((int32_t *)dst)[i] /= divisor; break;
        case SWY_INT64: ((int64_t *)dst)[i] /= divisor; break;
        case SWY_FLOAT32: ((float *)dst)[i] /= (float)divisor; break;
        case SWY_FLOAT64: ((double *)dst)[i] /= (double)divisor; break;
        case SWY_FLOAT16: {
            uint16_t *d = dst;
            d[i] = swy_float_to_half(swy_half_to_float(d[i]) / (float)divisor);
            break;
        }
        case SWY_BFLOAT16: {
            uint16_t *d = dst;
            d[i] = swy_float_to_bf16(swy_bf16_to_float(d[i]) / (float)divisor);
            break;
        }
        }
    }
}

size_t swy_coll_chunk_elems(size_t partition_bytes, size_t dsize,
                            size_t max_elems, size_t max_chunks)
{
    size_t elems = partition_bytes / dsize;
    if (elems == 0)
        elems = 1;
    /* Too many chunks would overflow the tag space: grow them. */
    if (max_chunks > 0 && max_elems / elems >= max_chunks)
        elems = max_elems / max_chunks + 1;
    return elems;
}

size_t swy_coll_pipeline_chunk_elems(size_t partition_bytes, size_t dsize,
                                     size_t max_elems, size_t max_chunks)
{
    size_t bytes = partition_bytes < SWY_COLL_PIPELINE_BYTES
                       ? partition_bytes : SWY_COLL_PIPELINE_BYTES;
    return swy_coll_chunk_elems(bytes, dsize, max_elems, max_chunks);
}
