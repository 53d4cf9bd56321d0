/* Array conversions between float and bf16 (rounding rule in elem.h). */
#include "elem.h"
#include "swy_kernels.h"

void swy_k_f32_to_bf16(const float *x, size_t n, uint16_t *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = swy_e_f32_to_bf16(x[i]);
}

void swy_k_bf16_to_f32(const uint16_t *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = swy_e_bf16_to_f32(x[i]);
}
