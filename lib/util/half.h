#ifndef SWY_UTIL_HALF_H
#define SWY_UTIL_HALF_H

#include <stdint.h>

/* IEEE binary16 and bfloat16 <-> float. To float is exact; from float
 * rounds to nearest even, keeps infinities and quiets NaNs. */
float swy_half_to_float(uint16_t h);
uint16_t swy_float_to_half(float f);
float swy_bf16_to_float(uint16_t b);
uint16_t swy_float_to_bf16(float f);

#endif
