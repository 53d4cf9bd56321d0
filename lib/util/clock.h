#ifndef SWY_UTIL_CLOCK_H
#define SWY_UTIL_CLOCK_H

#include <stdint.h>

/* Monotonic time in seconds / nanoseconds. */
double swy_time_s(void);
uint64_t swy_time_ns(void);
/* Sleep for the given number of microseconds. */
void swy_sleep_us(uint64_t us);

#endif
