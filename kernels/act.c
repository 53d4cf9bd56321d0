/* Element-wise activations and sums over whole arrays. */
#include "elem.h"
#include "swy_kernels.h"

void swy_k_gelu_fwd(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = swy_e_gelu(x[i]);
}

void swy_k_gelu_bwd(const float *x, const float *dy, size_t n, float *dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * swy_e_gelu_grad(x[i]);
}

void swy_k_add(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}
