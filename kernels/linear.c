/* Dense linear layer, y = x W + b, forward and backward through CBLAS. */
#include <assert.h>
#include <string.h>

#include <cblas.h>

#include "swy_kernels.h"

/* OpenBLAS's own entry points; declared here too because a cblas.h from
 * another BLAS (the find_library fallback in meson.build) lacks them. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

void swy_k_blas_set_threads(int n)
{
    assert(n >= 1);
    openblas_set_num_threads(n);
}

const char *swy_k_blas_core(void)
{
    const char *name = openblas_get_corename();
    return name != NULL ? name : "unknown";
}

void swy_k_linear_fwd(const float *x, const float *w, const float *b, int N,
                      int in, int out, float *y)
{
    assert(N >= 0 && in > 0 && out > 0);
    if (N == 0)
        return; /* BLAS rejects ld < 1 with a zero dimension on some builds */
    float beta = 0.0f;
    if (b != NULL) {
        /* Seed y with the bias so the GEMM adds onto it (beta = 1). */
        for (int r = 0; r < N; r++)
            memcpy(y + (size_t)r * out, b, (size_t)out * sizeof(*y));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, out, in, 1.0f,
                x, in, w, out, beta, y, out);
}

void swy_k_linear_bwd(const float *x, const float *w, const float *dy, int N,
                      int in, int out, float *dx, float *dw, float *db)
{
    assert(N >= 0 && in > 0 && out > 0);
    if (N == 0)
        return;
    if (dx != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, in, out, 1.0f,
                    dy, out, w, out, 0.0f, dx, in);
    if (dw != NULL)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, N, 1.0f,
                    x, in, dy, out, 1.0f, dw, out);
    if (db != NULL) {
        for (int r = 0; r < N; r++) {
            const float *row = dy + (size_t)r * out;
            for (int c = 0; c < out; c++)
                db[c] += row[c];
        }
    }
}
