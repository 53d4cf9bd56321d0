/* The serial reference of the collective tests: seeded inputs of every
 * dtype and the reduction of every rank's input, computed here without
 * the library. */
#include <math.h>
#include <string.h>

#include "coll_ref.h"
#include "harness.h"

const swy_dtype_t dtypes[NDTYPES] = {
    SWY_INT8, SWY_UINT8, SWY_INT32, SWY_INT64,
    SWY_FLOAT16, SWY_BFLOAT16, SWY_FLOAT32, SWY_FLOAT64};
const size_t dsizes[NDTYPES] = {1, 1, 4, 8, 2, 2, 4, 8};
uint64_t base_seed = 12345;

/* Reference conversions written independently of the library's: exact
 * for every half/bfloat value (they are subsets of float). */
static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(mant | 0x400, exp - 25);
    return sign ? -v : v;
}
static uint16_t double_to_half(double v) /* exact normal values only */
{
    if (v == 0)
        return 0;
    int e;
    double m = frexp(fabs(v), &e); /* v = m * 2^e, m in [0.5, 1) */
    uint16_t bits = (uint16_t)(((e - 1 + 15) << 10) |
                               (uint16_t)((m * 2 - 1) * 1024));
    return (uint16_t)(bits | (v < 0 ? 0x8000 : 0));
}
static double bf16_to_double(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Value of element i of rank r's input for op number `iter`. Chosen so
 * that sums are exact in every float type (small integers / 4) and
 * products stay near 1. */
void gen_value(int di, int iter, int r, size_t i, int for_prod,
                      void *out)
{
    uint64_t st = base_seed ^ ((uint64_t)iter << 40) ^ ((uint64_t)r << 20) ^ i;
    uint64_t x = swy_test_rand(&st);
    int small = (int)(x % 17) - 8; /* -8..8 */
    double fv = for_prod ? (x % 2 ? 1.0 : (x % 4 == 0 ? 0.5 : 2.0))
                         : small / 4.0;
    switch (dtypes[di]) {
    case SWY_INT8: *(int8_t *)out = (int8_t)(for_prod ? (int)(x % 3) - 1 : small * 5); break;
    case SWY_UINT8: *(uint8_t *)out = (uint8_t)(x % 256); break;
    case SWY_INT32: *(int32_t *)out = (int32_t)(x % 2000001) - 1000000; break;
    case SWY_INT64: *(int64_t *)out = (int64_t)(x >> 3) - (INT64_C(1) << 59); break;
    case SWY_FLOAT16: *(uint16_t *)out = double_to_half(fv); break;
    case SWY_BFLOAT16: {
        float f = (float)fv;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        *(uint16_t *)out = (uint16_t)(bits >> 16);
        break;
    }
    case SWY_FLOAT32: *(float *)out = (float)fv; break;
    case SWY_FLOAT64: *(double *)out = fv; break;
    }
}

double as_double(int di, const void *p)
{
    switch (dtypes[di]) {
    case SWY_FLOAT16: return half_to_double(*(const uint16_t *)p);
    case SWY_BFLOAT16: return bf16_to_double(*(const uint16_t *)p);
    case SWY_FLOAT32: return *(const float *)p;
    case SWY_FLOAT64: return *(const double *)p;
    default: return 0;
    }
}

/* Serial reference of element i: reduce rank 0..W-1 inputs. Integer ops
 * wrap in the element type; AVG divides the wrapped sum. */
int check_allreduce_elem(int di, swy_redop_t op, int iter, int w,
                                size_t i, const void *got)
{
    unsigned char v[8];
    if (dtypes[di] >= SWY_FLOAT16) {
        double acc = 0;
        for (int r = 0; r < w; r++) {
            gen_value(di, iter, r, i, op == SWY_PROD, v);
            double x = as_double(di, v);
            if (r == 0) acc = x;
            else if (op == SWY_SUM || op == SWY_AVG) acc += x;
            else if (op == SWY_PROD) acc *= x;
            else if (op == SWY_MAX) acc = x > acc ? x : acc;
            else acc = x < acc ? x : acc;
        }
        if (op == SWY_AVG)
            acc /= w;
        double g = as_double(di, got);
        double tol = dtypes[di] == SWY_FLOAT16 ? 2e-3 : dtypes[di] == SWY_BFLOAT16 ? 1e-2 : 1e-6;
        return fabs(g - acc) <= tol * (1 + fabs(acc));
    }
#define INT_REF(T, UT)                                                        \
    do {                                                                      \
        T acc = 0;                                                            \
        for (int r = 0; r < w; r++) {                                         \
            gen_value(di, iter, r, i, op == SWY_PROD, v);                     \
            T x;                                                              \
            memcpy(&x, v, sizeof(T));                                         \
            if (r == 0) acc = x;                                              \
            else if (op == SWY_SUM || op == SWY_AVG) acc = (T)((UT)acc + (UT)x); \
            else if (op == SWY_PROD) acc = (T)((UT)acc * (UT)x);              \
            else if (op == SWY_MAX) acc = x > acc ? x : acc;                  \
            else acc = x < acc ? x : acc;                                     \
        }                                                                     \
        if (op == SWY_AVG) acc = (T)(acc / w);                                \
        T g;                                                                  \
        memcpy(&g, got, sizeof(T));                                           \
        return g == acc;                                                      \
    } while (0)
    switch (dtypes[di]) {
    case SWY_INT8: INT_REF(int8_t, uint8_t);
    case SWY_UINT8: INT_REF(uint8_t, uint8_t);
    case SWY_INT32: INT_REF(int32_t, uint32_t);
    case SWY_INT64: INT_REF(int64_t, uint64_t);
    default: return 0;
    }
}
