#ifndef SWY_UTIL_CLOCK_H
#define SWY_UTIL_CLOCK_H

#include <stdint.h>

/* Monotonic time in seconds / nanoseconds. */
double swy_time_s(void);
uint64_t swy_time_ns(void);
/* Replace the clock (fn NULL: the monotonic clock again); see
 * swy_sim_clock_set. */
typedef uint64_t (*swy_clock_fn_t)(void *arg);
void swy_clock_set(swy_clock_fn_t fn, void *arg);
/* Sleep for the given number of microseconds. */
void swy_sleep_us(uint64_t us);

#endif
