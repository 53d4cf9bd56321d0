/* Error text and the row context: what the row kernels (pack.cu,
 * combine.cu) need and nothing of cuBLAS, so that a caller that must not
 * load cuBLAS (the nccl plugin, whose process may never train) links
 * swy_kernels_cuda_rows alone. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kc_internal_cuda.h"

static thread_local char kc_err[512];

const char *swy_kc_error_string(void)
{
    return kc_err;
}

int kc_fail(const char *fn, const char *fmt, ...)
{
    int n = snprintf(kc_err, sizeof(kc_err), "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof(kc_err))
        return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kc_err + n, sizeof(kc_err) - (size_t)n, fmt, ap);
    va_end(ap);
    return 1;
}

int kc_cuda_check(const char *fn, const char *what, cudaError_t err)
{
    if (err == cudaSuccess)
        return 0;
    return kc_fail(fn, "%s: %s: %s", what, cudaGetErrorName(err),
                   cudaGetErrorString(err));
}

/* ---- Row context ----------------------------------------------------- */

int kc_ctx_base(const char *fn, void *stream, swy_kc_ctx_t **ctx_p)
{
    int dev = 0;
    swy_kc_ctx_t *ctx = (swy_kc_ctx_t *)calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return kc_fail(fn, "out of host memory");
    ctx->stream = (cudaStream_t)stream;
    if (kc_cuda_check(fn, "cudaGetDevice", cudaGetDevice(&dev)) != 0 ||
        kc_cuda_check(fn, "cudaDeviceGetAttribute(MultiProcessorCount)",
                      cudaDeviceGetAttribute(&ctx->n_sm,
                                             cudaDevAttrMultiProcessorCount,
                                             dev)) != 0) {
        free(ctx);
        return 1;
    }
    *ctx_p = ctx;
    return 0;
}

int swy_kc_rows_ctx_create(void *stream, swy_kc_ctx_t **ctx_p)
{
    return kc_ctx_base("swy_kc_rows_ctx_create", stream, ctx_p);
}

int swy_kc_rows_ctx_set_stream(swy_kc_ctx_t *ctx, void *stream)
{
    static const char fn[] = "swy_kc_rows_ctx_set_stream";
    KC_CTX(fn, ctx);
    if (ctx->blas != NULL)
        return kc_fail(fn, "a context of swy_kc_ctx_create: its cuBLAS "
                       "handle is bound to its stream");
    ctx->stream = (cudaStream_t)stream;
    return 0;
}

void swy_kc_rows_ctx_destroy(swy_kc_ctx_t *ctx)
{
    free(ctx);
}
