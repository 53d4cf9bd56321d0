#include "util/clock.h"

#include <errno.h>
#include <time.h>

/* The clock every part of the library reads (swy_sim.h): CLOCK_MONOTONIC
 * unless a simulator replaced it, so that the engines it drives measure
 * deadlines, trace stamps and pacing in simulated time. */
static swy_clock_fn_t clock_fn;
static void *clock_arg;

void swy_clock_set(swy_clock_fn_t fn, void *arg)
{
    __atomic_store_n(&clock_arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&clock_fn, fn, __ATOMIC_RELEASE);
}

uint64_t swy_time_ns(void)
{
    swy_clock_fn_t fn = __atomic_load_n(&clock_fn, __ATOMIC_ACQUIRE);
    if (fn != NULL)
        return fn(__atomic_load_n(&clock_arg, __ATOMIC_RELAXED));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double swy_time_s(void)
{
    return (double)swy_time_ns() * 1e-9;
}

void swy_sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
