/* Helpers shared by the kernel tests: kt_finish (the end of a test that
 * counts its failures with check.h's CHECK), a seeded generator,
 * comparison against double references and central finite differences.
 *
 * Tolerances used throughout (stated once here, repeated at each use):
 * - forward, fp32 kernel vs double reference: max |got - want| <=
 *   KT_FWD_TOL * max(max |want|, 1);
 * - gradients, fp32 kernel vs central differences of a double reference:
 *   max |got - fd| <= KT_GRAD_TOL * max(max |fd|, 1e-3)  (relative 1e-3 of
 *   the gradient's scale; the double FD itself is accurate to ~1e-9). */
#ifndef SWY_KTEST_H
#define SWY_KTEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define KT_FWD_TOL 1e-5
#define KT_GRAD_TOL 1e-3

static inline int kt_finish(const char *name)
{
    if (check_failures != 0) {
        fprintf(stderr, "%s: %d failure(s)\n", name, check_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* xorshift64*: the same sequence on every machine for a given seed. */
static uint64_t kt_rng_state = 0x9e3779b97f4a7c15ull;

static inline void kt_seed(uint64_t seed)
{
    kt_rng_state = seed ? seed : 1;
}

static inline uint64_t kt_next(void)
{
    kt_rng_state ^= kt_rng_state >> 12;
    kt_rng_state ^= kt_rng_state << 25;
    kt_rng_state ^= kt_rng_state >> 27;
    return kt_rng_state * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi). */
static inline double kt_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(kt_next() >> 11) / 9007199254740992.0;
}

static inline int kt_int(int n)
{
    return (int)(kt_next() % (uint64_t)n);
}

static inline void kt_fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)kt_uniform(lo, hi);
}

static inline double *kt_dup_d(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof(*d));
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static inline void *kt_alloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (p == NULL) {
        perror("calloc");
        exit(2);
    }
    return p;
}

/* Normalised max error of got against want, as described at the top. */
static inline double kt_err(const float *got, const double *want, size_t n,
                            double floor_scale)
{
    double scale = floor_scale, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(want[i]));
        diff = fmax(diff, fabs((double)got[i] - want[i]));
    }
    return diff / scale;
}

static inline int kt_check_fwd(const char *what, const float *got,
                               const double *want, size_t n)
{
    double e = kt_err(got, want, n, 1.0);
    if (!(e <= KT_FWD_TOL)) {
        fprintf(stderr, "forward %s: error %.3g > %.1g\n", what, e,
                KT_FWD_TOL);
        check_failures++;
        return 0;
    }
    return 1;
}

static inline int kt_check_grad(const char *what, const float *got,
                                const double *fd, size_t n)
{
    double e = kt_err(got, fd, n, 1e-3);
    if (!(e <= KT_GRAD_TOL)) {
        fprintf(stderr, "gradient %s: error %.3g > %.1g\n", what, e,
                KT_GRAD_TOL);
        for (size_t i = 0; i < n && i < 8; i++)
            fprintf(stderr, "  [%zu] kernel %.7g  fd %.7g\n", i,
                    (double)got[i], fd[i]);
        check_failures++;
        return 0;
    }
    return 1;
}

/* Central differences of a double loss over every element of p. */
typedef double (*kt_loss_fn)(void *ctx);

static inline void kt_fd(kt_loss_fn loss, void *ctx, double *p, size_t n,
                         double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double save = p[i];
        double h = 1e-5 * fmax(1.0, fabs(save));
        p[i] = save + h;
        double lp = loss(ctx);
        p[i] = save - h;
        double lm = loss(ctx);
        p[i] = save;
        grad[i] = (lp - lm) / (2.0 * h);
    }
}

/* GELU, tanh form, in double: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))). */
static inline double kt_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static inline void kt_softmax(const double *x, int n, double *p)
{
    double m = x[0], s = 0.0;
    for (int i = 1; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (int i = 0; i < n; i++)
        s += exp(x[i] - m);
    for (int i = 0; i < n; i++)
        p[i] = exp(x[i] - m) / s;
}

#endif
