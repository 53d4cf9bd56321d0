/* The host reduction kernels (swy_coll_reduce, swy_coll_reduce_n) against
 * a plain element by element reference written here: every dtype and op,
 * counts around the kernel's block size, and every aliasing a caller may
 * use (dst disjoint, dst == a, dst == b, a == b; for n sources, dst
 * disjoint or any one of them, and a source given twice), bit for bit;
 * n sources must give what the chain of pairs gives. The data include zeros of
 * both signs, infinities and NaNs, whose handling by max/min a vectorized
 * loop must keep. Usage: test_reduce */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t next_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double special_or_random(void)
{
    static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,
                                      1.0, -1.0};
    uint64_t r = next_random();
    if (r % 16 == 0)
        return specials[(r >> 8) % (sizeof(specials) / sizeof(specials[0]))];
    return ((double)(int64_t)(r >> 11) / (double)(1ull << 50)) * 1000.0;
}

static void fill(void *buf, size_t count, swy_dtype_t dtype)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = next_random();
        double v = special_or_random();
        switch (dtype) {
        case SWY_INT8: ((int8_t *)buf)[i] = (int8_t)r; break;
        case SWY_UINT8: ((uint8_t *)buf)[i] = (uint8_t)r; break;
        case SWY_INT32: ((int32_t *)buf)[i] = (int32_t)r; break;
        case SWY_INT64: ((int64_t *)buf)[i] = (int64_t)r; break;
        case SWY_FLOAT16:
            ((uint16_t *)buf)[i] = swy_float_to_half((float)(v / 64));
            break;
        case SWY_BFLOAT16:
            ((uint16_t *)buf)[i] = swy_float_to_bf16((float)v);
            break;
        case SWY_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case SWY_FLOAT64: ((double *)buf)[i] = v; break;
        }
    }
}

static double combine(double a, double b, swy_redop_t op)
{
    switch (op) {
    case SWY_SUM: case SWY_AVG: return a + b;
    case SWY_PROD: return a * b;
    case SWY_MAX: return a > b ? a : b;
    case SWY_MIN: return a < b ? a : b;
    }
    return NAN;
}

/* Integers in unsigned arithmetic (wrapping), max/min signed. */
#define INT_REF(T, UT)                                                        \
    do {                                                                      \
        T a = ((const T *)x)[i], b = ((const T *)y)[i];                       \
        T *out = &((T *)d)[i];                                                \
        switch (op) {                                                         \
        case SWY_SUM: case SWY_AVG: *out = (T)(UT)((UT)a + (UT)b); break;     \
        case SWY_PROD: *out = (T)(UT)((UT)a * (UT)b); break;                  \
        case SWY_MAX: *out = a > b ? a : b; break;                            \
        case SWY_MIN: *out = a < b ? a : b; break;                            \
        }                                                                     \
    } while (0)

static void reference(void *d, const void *x, const void *y, size_t count,
                      swy_dtype_t dtype, swy_redop_t op)
{
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case SWY_INT8: INT_REF(int8_t, uint8_t); break;
        case SWY_UINT8: INT_REF(uint8_t, uint8_t); break;
        case SWY_INT32: INT_REF(int32_t, uint32_t); break;
        case SWY_INT64: INT_REF(int64_t, uint64_t); break;
        case SWY_FLOAT16:
            ((uint16_t *)d)[i] = swy_float_to_half((float)combine(
                swy_half_to_float(((const uint16_t *)x)[i]),
                swy_half_to_float(((const uint16_t *)y)[i]), op));
            break;
        case SWY_BFLOAT16:
            ((uint16_t *)d)[i] = swy_float_to_bf16((float)combine(
                swy_bf16_to_float(((const uint16_t *)x)[i]),
                swy_bf16_to_float(((const uint16_t *)y)[i]), op));
            break;
        case SWY_FLOAT32: {
            float a = ((const float *)x)[i], b = ((const float *)y)[i];
            float r = op == SWY_SUM || op == SWY_AVG ? a + b
                      : op == SWY_PROD              ? a * b
                      : op == SWY_MAX               ? (a > b ? a : b)
                                                    : (a < b ? a : b);
            ((float *)d)[i] = r;
            break;
        }
        case SWY_FLOAT64:
            ((double *)d)[i] = combine(((const double *)x)[i],
                                       ((const double *)y)[i], op);
            break;
        }
    }
}

static int is_nan(const void *buf, size_t i, swy_dtype_t dtype)
{
    switch (dtype) {
    case SWY_FLOAT16: return isnan(swy_half_to_float(((const uint16_t *)buf)[i]));
    case SWY_BFLOAT16: return isnan(swy_bf16_to_float(((const uint16_t *)buf)[i]));
    case SWY_FLOAT32: return isnan(((const float *)buf)[i]);
    case SWY_FLOAT64: return isnan(((const double *)buf)[i]);
    default: return 0;
    }
}

/* Bit for bit, except that any NaN matches any NaN (payloads are not
 * part of the contract). */
static int same(const void *got, const void *want, size_t count,
                swy_dtype_t dtype, size_t *where)
{
    size_t size = swy_dtype_size(dtype);
    for (size_t i = 0; i < count; i++) {
        if (memcmp((const char *)got + i * size, (const char *)want + i * size,
                   size) == 0)
            continue;
        if (is_nan(got, i, dtype) && is_nan(want, i, dtype))
            continue;
        *where = i;
        return 0;
    }
    return 1;
}

enum { DISJOINT, DST_IS_A, DST_IS_B, A_IS_B, ALL_ONE, NALIAS };
static const char *alias_names[] = {"disjoint", "dst==a", "dst==b", "a==b",
                                    "dst==a==b"};

static void check(swy_dtype_t dtype, swy_redop_t op, size_t count, int alias)
{
    size_t size = swy_dtype_size(dtype), bytes = count * size + 1;
    char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
    char *want = malloc(bytes);
    if (a == NULL || b == NULL || d == NULL || want == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    fill(a, count, dtype);
    fill(b, count, dtype);
    fill(d, count, dtype);
    const void *x = a, *y = b;
    void *dst = d;
    switch (alias) {
    case DST_IS_A: dst = a; break;
    case DST_IS_B: dst = b; break;
    case A_IS_B: y = a; break;
    case ALL_ONE: dst = a; y = a; break;
    }
    reference(want, x, y, count, dtype, op);
    swy_coll_reduce(dst, x, y, count, dtype, op);
    size_t where = 0;
    CHECK(same(dst, want, count, dtype, &where),
          "%s %s count %zu %s: element %zu differs from the reference",
          swy_dtype_name(dtype), swy_redop_name(op), count,
          alias_names[alias], where);
    free(a);
    free(b);
    free(d);
    free(want);
}

/* dst = ((s0 op s1) op s2) ... by swy_coll_reduce_n, against the chain
 * of pairs by the reference. alias: -1 dst disjoint, j: dst is source j;
 * twice: source 1 is source 0 again (n >= 2). */
static void check_n(swy_dtype_t dtype, swy_redop_t op, size_t count, int n,
                    int alias, int twice)
{
    size_t size = swy_dtype_size(dtype), bytes = count * size + 1;
    char *buf[10], *d = malloc(bytes), *want = malloc(bytes);
    const void *srcs[10];
    int ok = d != NULL && want != NULL;
    for (int k = 0; k < n; k++) {
        ok = (buf[k] = malloc(bytes)) != NULL && ok;
        if (buf[k] != NULL)
            fill(buf[k], count, dtype);
        srcs[k] = buf[k];
    }
    if (!ok) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    fill(d, count, dtype);
    if (twice)
        srcs[1] = srcs[0];
    memcpy(want, srcs[0], count * size);
    for (int k = 1; k < n; k++)
        reference(want, want, srcs[k], count, dtype, op);
    void *dst = alias >= 0 ? (void *)srcs[alias] : d;
    swy_coll_reduce_n(dst, srcs, n, count, dtype, op);
    size_t where = 0;
    CHECK(same(dst, want, count, dtype, &where),
          "%s %s count %zu, %d sources, dst %s%d%s: element %zu differs "
          "from the chain of pairs", swy_dtype_name(dtype),
          swy_redop_name(op), count, n, alias >= 0 ? "is source " : "disjoint",
          alias >= 0 ? alias : 0, twice ? ", source 1 is source 0" : "", where);
    for (int k = 0; k < n; k++)
        free(buf[k]);
    free(d);
    free(want);
}

int main(void)
{
    int checks = 0;
    for (int dtype = SWY_INT8; dtype <= SWY_FLOAT64; dtype++) {
        size_t size = swy_dtype_size((swy_dtype_t)dtype);
        /* Around the kernel's block (4 KiB) and a few blocks with a tail. */
        size_t block = 4096 / size;
        size_t counts[] = {0, 1, 3, 17, block - 1, block, block + 1,
                           3 * block + 7, 64 * 1024 + 5};
        for (int op = SWY_SUM; op <= SWY_AVG; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int alias = 0; alias < NALIAS; alias++) {
                    check((swy_dtype_t)dtype, (swy_redop_t)op, counts[c],
                          alias);
                    checks++;
                }
    }
    /* n sources: 1 to 9 (one pass of four, then passes of up to three). */
    for (int dtype = SWY_INT8; dtype <= SWY_FLOAT64; dtype++) {
        size_t block = 4096 / swy_dtype_size((swy_dtype_t)dtype);
        size_t counts[] = {0, 5, block, 2 * block + 3};
        for (int op = SWY_SUM; op <= SWY_AVG; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int n = 1; n <= 9; n++) {
                    int aliases[] = {-1, 0, n / 2, n - 1};
                    for (int a = 0; a < 4; a++) {
                        check_n((swy_dtype_t)dtype, (swy_redop_t)op,
                                counts[c], n, aliases[a], 0);
                        checks++;
                    }
                    if (n >= 2) {
                        check_n((swy_dtype_t)dtype, (swy_redop_t)op,
                                counts[c], n, -1, 1);
                        check_n((swy_dtype_t)dtype, (swy_redop_t)op,
                                counts[c], n, n - 1, 1);
                        checks += 2;
                    }
                }
    }
    if (check_failures > 0) {
        fprintf(stderr, "%d of %d checks failed\n", check_failures, checks);
        return 1;
    }
    printf("%d checks passed\n", checks);
    return 0;
}
