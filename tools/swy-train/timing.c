/* Per-step timers and statistics (see timing.h). */
#include "timing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const swt_timer_names[SWT_T_COUNT] = {
    "step", "a2a", "a2a_wait", "allreduce", "allreduce_wait", "expert",
    "moe_segment", "compute", "slept"};

double swt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void swt_timing_reset(swt_timing_t *tm)
{
    memset(tm->acc, 0, sizeof(tm->acc));
}

double swt_timing_compute_end(swt_timing_t *tm, double t0)
{
    double t = swt_now() - t0;
    tm->acc[SWT_T_COMPUTE] += t;
    if (tm->compute_scale <= 1.0)
        return t;
    double extra = (tm->compute_scale - 1.0) * t;
    struct timespec ts = {(time_t)extra,
                          (long)((extra - (double)(time_t)extra) * 1e9)};
    double s0 = swt_now();
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    double slept = swt_now() - s0;
    tm->acc[SWT_T_SLEPT] += slept;
    tm->acc[SWT_T_COMPUTE] += slept;
    return t + slept;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

swt_stats_t swt_stats(double *v, size_t n)
{
    swt_stats_t s = {0, 0, 0};
    if (n == 0)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}
