/* Helpers shared by the CUDA kernel tests: device buffers, a seeded
 * generator, bf16 rounding, and comparisons that print one line per
 * checked output.
 *
 * Error measure (stated once here): for float outputs, the norm-wise
 * relative error max|got - want| / max|want| (0 when both are all zero;
 * infinite when got has a NaN that want lacks); fp32 kernels must be within
 * KCT_TOL_F32 of the CPU kernel on the same inputs, bf16 kernels within
 * KCT_TOL_BF16 of the CPU kernel run in fp32 on the bf16-rounded inputs.
 * Integer outputs must be equal. */
#ifndef SWY_KCTEST_H
#define SWY_KCTEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "swy_kernels.h"
#include "swy_kernels_cuda.h"

#define KCT_TOL_F32 1e-5
#define KCT_TOL_BF16 1e-2

static int kct_failures;
static int kct_checks;
static swy_kc_ctx_t *kct_ctx;
static void *kct_stream;

/* A CUDA-side failure ends the test at once: what follows would only
 * repeat it. */
#define KCT_OK(call)                                                          \
    CHECK_EXIT((call) == 0, "%s", swy_kc_error_string())

/* ---- Setup ------------------------------------------------------------- */

/* Exits 77 without a GPU; else makes the context on a fresh stream. */
static inline void kct_init(const char *name)
{
    int n = swy_kc_device_count();
    if (n <= 0) {
        printf("%s: skipped: no CUDA device (%s)\n", name,
               swy_kc_error_string()[0] ? swy_kc_error_string()
                                        : "cudaGetDeviceCount returned 0");
        exit(TEST_SKIP);
    }
    char dev[256];
    KCT_OK(swy_kc_set_device(0));
    KCT_OK(swy_kc_device_name(dev, sizeof(dev)));
    printf("%s: device 0 of %d: %s\n", name, n, dev);
    KCT_OK(swy_kc_stream_create(0, &kct_stream));
    KCT_OK(swy_kc_ctx_create(kct_stream, &kct_ctx));
}

static inline int kct_finish(const char *name)
{
    swy_kc_ctx_destroy(kct_ctx);
    KCT_OK(swy_kc_stream_destroy(kct_stream));
    if (kct_failures != 0) {
        printf("%s: FAILED: %d of %d checks\n", name, kct_failures,
               kct_checks);
        return 1;
    }
    printf("%s: ok (%d checks)\n", name, kct_checks);
    return 0;
}

/* ---- Memory ------------------------------------------------------------ */

static inline void *kct_host(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (p == NULL) {
        perror("calloc");
        exit(2);
    }
    return p;
}

/* Zeroed device memory (never NULL: 1 byte for an empty array, so that a
 * NULL argument always means "not requested"). */
static inline void *kct_dev(size_t bytes)
{
    void *p = NULL;
    KCT_OK(swy_kc_malloc(&p, bytes ? bytes : 1));
    KCT_OK(swy_kc_memset(p, 0, bytes ? bytes : 1, NULL));
    return p;
}

static inline void *kct_up(const void *host, size_t bytes)
{
    void *p = kct_dev(bytes);
    KCT_OK(swy_kc_memcpy_h2d(p, host, bytes, NULL));
    return p;
}

/* Waits for the test stream, then copies back. */
static inline void kct_down(void *host, const void *dev, size_t bytes)
{
    KCT_OK(swy_kc_stream_sync(kct_stream));
    KCT_OK(swy_kc_memcpy_d2h(host, dev, bytes, NULL));
}

static inline void kct_set(void *dev, const void *host, size_t bytes)
{
    KCT_OK(swy_kc_stream_sync(kct_stream));
    KCT_OK(swy_kc_memcpy_h2d(dev, host, bytes, NULL));
}

static inline void kct_dfree(void *p)
{
    KCT_OK(swy_kc_free(p));
}

/* ---- Random inputs (xorshift64*: the same on every machine) ------------ */

static uint64_t kct_rng = 0x9e3779b97f4a7c15ull;

static inline void kct_seed(uint64_t s)
{
    kct_rng = s ? s : 1;
}

static inline uint64_t kct_next(void)
{
    kct_rng ^= kct_rng >> 12;
    kct_rng ^= kct_rng << 25;
    kct_rng ^= kct_rng >> 27;
    return kct_rng * 0x2545f4914f6cdd1dull;
}

static inline double kct_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(kct_next() >> 11) / 9007199254740992.0;
}

static inline int kct_int(int n)
{
    return (int)(kct_next() % (uint64_t)n);
}

static inline float *kct_rand(size_t n, double lo, double hi)
{
    float *x = (float *)kct_host(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)kct_uniform(lo, hi);
    return x;
}

/* ---- bf16 -------------------------------------------------------------- */

/* Rounds x to bf16 in place (x then holds exactly representable values). */
static inline void kct_round_bf16(float *x, size_t n)
{
    uint16_t *h = (uint16_t *)kct_host(n * sizeof(uint16_t));
    swy_k_f32_to_bf16(x, n, h);
    swy_k_bf16_to_f32(h, n, x);
    free(h);
}

/* A device bf16 copy of x (x must already be bf16-exact for the CPU
 * reference to see the same values). */
static inline swy_kc_bf16_t *kct_up_bf16(const float *x, size_t n)
{
    uint16_t *h = (uint16_t *)kct_host(n * sizeof(uint16_t));
    swy_k_f32_to_bf16(x, n, h);
    swy_kc_bf16_t *d = (swy_kc_bf16_t *)kct_up(h, n * sizeof(uint16_t));
    free(h);
    return d;
}

/* Device bf16 array back to host floats. */
static inline void kct_down_bf16(float *x, const swy_kc_bf16_t *d, size_t n)
{
    uint16_t *h = (uint16_t *)kct_host(n * sizeof(uint16_t));
    kct_down(h, d, n * sizeof(uint16_t));
    swy_k_bf16_to_f32(h, n, x);
    free(h);
}

/* ---- Comparisons ------------------------------------------------------- */

static inline double kct_relerr(const float *got, const float *want, size_t n)
{
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i]))
            return INFINITY;
        if (isnan(want[i]))
            continue;
        scale = fmax(scale, fabs((double)want[i]));
        diff = fmax(diff, fabs((double)got[i] - (double)want[i]));
    }
    if (diff == 0.0)
        return 0.0;
    return scale > 0.0 ? diff / scale : INFINITY;
}

/* One line: "kernel [shape] what: err e (tol t) ok|FAIL". */
static inline int kct_cmp(const char *kernel, const char *shape,
                          const char *what, const float *got,
                          const float *want, size_t n, double tol)
{
    double e = kct_relerr(got, want, n);
    int ok = e <= tol;
    kct_checks++;
    printf("%-28s %-34s %-10s err %.3g (tol %.0e) %s\n", kernel, shape, what,
           e, tol, ok ? "ok" : "FAIL");
    if (!ok) {
        kct_failures++;
        int shown = 0;
        for (size_t i = 0; i < n && shown < 5; i++) {
            double d = fabs((double)got[i] - (double)want[i]);
            if (d > 0.0 || isnan(got[i]) != isnan(want[i])) {
                printf("    [%zu] gpu %.9g cpu %.9g\n", i, (double)got[i],
                       (double)want[i]);
                shown++;
            }
        }
    }
    return ok;
}

static inline int kct_cmp_int(const char *kernel, const char *shape,
                              const char *what, const int *got,
                              const int *want, size_t n)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ == 0)
            first = i;
    kct_checks++;
    printf("%-28s %-34s %-10s %s\n", kernel, shape, what,
           bad == 0 ? "exact ok" : "FAIL");
    if (bad != 0) {
        kct_failures++;
        printf("    %zu of %zu differ; first [%zu] gpu %d cpu %d\n", bad, n,
               first, got[first], want[first]);
    }
    return bad == 0;
}

/* Device fp32 array vs host reference. */
static inline int kct_cmp_dev(const char *kernel, const char *shape,
                              const char *what, const float *dev,
                              const float *want, size_t n, double tol)
{
    float *got = (float *)kct_host(n * sizeof(float));
    kct_down(got, dev, n * sizeof(float));
    int ok = kct_cmp(kernel, shape, what, got, want, n, tol);
    free(got);
    return ok;
}

static inline int kct_cmp_dev_bf16(const char *kernel, const char *shape,
                                   const char *what, const swy_kc_bf16_t *dev,
                                   const float *want, size_t n)
{
    float *got = (float *)kct_host(n * sizeof(float));
    kct_down_bf16(got, dev, n);
    int ok = kct_cmp(kernel, shape, what, got, want, n, KCT_TOL_BF16);
    free(got);
    return ok;
}

static inline int kct_cmp_dev_int(const char *kernel, const char *shape,
                                  const char *what, const int *dev,
                                  const int *want, size_t n)
{
    int *got = (int *)kct_host(n * sizeof(int));
    kct_down(got, dev, n * sizeof(int));
    int ok = kct_cmp_int(kernel, shape, what, got, want, n);
    free(got);
    return ok;
}

static inline float *kct_dup(const float *x, size_t n)
{
    float *y = (float *)kct_host(n * sizeof(float));
    if (n)
        memcpy(y, x, n * sizeof(float));
    return y;
}

#endif /* SWY_KCTEST_H */
