/* Runtime helpers (devices, streams, memory, events) and the kernel
 * context with its cuBLAS handle, so that C callers of swy_kernels_cuda.h
 * need no CUDA header. The error text and the row context are status.cu's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_internal_cuda.h"

static const char *blas_status_name(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_(unknown)";
    }
}

int kc_blas_check(const char *fn, const char *what, cublasStatus_t st)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    return kc_fail(fn, "%s: %s (%d)", what, blas_status_name(st), (int)st);
}

/* ---- Devices ------------------------------------------------------------ */

int swy_kc_device_count(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        kc_cuda_check("swy_kc_device_count", "cudaGetDeviceCount", err);
        /* Clear the error so it does not look like a later kernel's. */
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int swy_kc_set_device(int dev)
{
    KC_CUDA("swy_kc_set_device", cudaSetDevice(dev));
    return 0;
}

int swy_kc_device_name(char *name, size_t len)
{
    static const char fn[] = "swy_kc_device_name";
    if (name == NULL || len == 0)
        return kc_fail(fn, "no buffer");
    int dev = 0;
    cudaDeviceProp prop;
    KC_CUDA(fn, cudaGetDevice(&dev));
    KC_CUDA(fn, cudaGetDeviceProperties(&prop, dev));
    snprintf(name, len, "%s", prop.name);
    return 0;
}

/* ---- Streams, memory, events ------------------------------------------- */

int swy_kc_stream_create(int high_priority, void **stream_p)
{
    static const char fn[] = "swy_kc_stream_create";
    int least = 0, greatest = 0;
    KC_CUDA(fn, cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s;
    KC_CUDA(fn, cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking,
                                             high_priority ? greatest : 0));
    *stream_p = (void *)s;
    return 0;
}

int swy_kc_stream_destroy(void *stream)
{
    if (stream == NULL)
        return 0;
    KC_CUDA("swy_kc_stream_destroy", cudaStreamDestroy((cudaStream_t)stream));
    return 0;
}

int swy_kc_stream_sync(void *stream)
{
    KC_CUDA("swy_kc_stream_sync",
            cudaStreamSynchronize((cudaStream_t)stream));
    return 0;
}

int swy_kc_malloc(void **p, size_t bytes)
{
    if (bytes == 0) {
        *p = NULL;
        return 0;
    }
    void *q = NULL;
    cudaError_t err = cudaMalloc(&q, bytes);
    if (err != cudaSuccess)
        return kc_fail("swy_kc_malloc", "cudaMalloc(%zu bytes): %s: %s",
                       bytes, cudaGetErrorName(err), cudaGetErrorString(err));
    *p = q;
    return 0;
}

int swy_kc_free(void *p)
{
    if (p == NULL)
        return 0;
    KC_CUDA("swy_kc_free", cudaFree(p));
    return 0;
}

/* cudaMemset, and cudaMemcpy from pageable host memory or within the
 * device, may return before the device has done them, and the legacy
 * default stream they run on does not order work on the non-blocking
 * streams the kernels use (swy_kc_stream_create). A NULL-stream call
 * promises to be done on return: without this wait a kernel on another
 * stream could read its input before the upload landed, or have its
 * output zeroed afterwards (seen on an H200 with the gpu suite's tests
 * running side by side). */
static int kc_default_stream_wait(const char *fn)
{
    KC_CUDA(fn, cudaStreamSynchronize(0));
    return 0;
}

int swy_kc_memset(void *p, int v, size_t bytes, void *stream)
{
    static const char fn[] = "swy_kc_memset";
    if (bytes == 0)
        return 0;
    if (stream == NULL) {
        KC_CUDA(fn, cudaMemset(p, v, bytes));
        return kc_default_stream_wait(fn);
    }
    KC_CUDA(fn, cudaMemsetAsync(p, v, bytes, (cudaStream_t)stream));
    return 0;
}

static int kc_copy(const char *fn, void *dst, const void *src, size_t bytes,
                   cudaMemcpyKind kind, void *stream)
{
    if (bytes == 0)
        return 0;
    if (stream == NULL) {
        KC_CUDA(fn, cudaMemcpy(dst, src, bytes, kind));
        return kc_default_stream_wait(fn);
    }
    KC_CUDA(fn, cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream));
    return 0;
}

int swy_kc_memcpy_h2d(void *dst, const void *src, size_t bytes, void *stream)
{
    return kc_copy("swy_kc_memcpy_h2d", dst, src, bytes,
                   cudaMemcpyHostToDevice, stream);
}

int swy_kc_memcpy_d2h(void *dst, const void *src, size_t bytes, void *stream)
{
    return kc_copy("swy_kc_memcpy_d2h", dst, src, bytes,
                   cudaMemcpyDeviceToHost, stream);
}

int swy_kc_memcpy_d2d(void *dst, const void *src, size_t bytes, void *stream)
{
    return kc_copy("swy_kc_memcpy_d2d", dst, src, bytes,
                   cudaMemcpyDeviceToDevice, stream);
}

int swy_kc_event_create(void **event_p)
{
    cudaEvent_t ev;
    KC_CUDA("swy_kc_event_create", cudaEventCreate(&ev));
    *event_p = (void *)ev;
    return 0;
}

int swy_kc_event_record(void *event, void *stream)
{
    KC_CUDA("swy_kc_event_record",
            cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return 0;
}

int swy_kc_event_elapsed_ms(void *start, void *end, float *ms_p)
{
    static const char fn[] = "swy_kc_event_elapsed_ms";
    float ms = 0.0f;
    KC_CUDA(fn, cudaEventSynchronize((cudaEvent_t)end));
    KC_CUDA(fn, cudaEventElapsedTime(&ms, (cudaEvent_t)start,
                                     (cudaEvent_t)end));
    *ms_p = ms;
    return 0;
}

int swy_kc_event_destroy(void *event)
{
    if (event == NULL)
        return 0;
    KC_CUDA("swy_kc_event_destroy", cudaEventDestroy((cudaEvent_t)event));
    return 0;
}

/* ---- Context --------------------------------------------------------- */

int swy_kc_ctx_create(void *stream, swy_kc_ctx_t **ctx_p)
{
    static const char fn[] = "swy_kc_ctx_create";
    swy_kc_ctx_t *ctx;
    const char *grouped; /* SWY_KC_GROUPED (C++: declared before the gotos) */
    KC_TRY(kc_ctx_base(fn, stream, &ctx));
    if (kc_cuda_check(fn, "cudaMalloc(scratch)",
                      cudaMalloc(&ctx->scratch, KC_SCRATCH_BYTES)) != 0)
        goto fail_ctx;
    if (kc_cuda_check(fn, "cudaMalloc(cuBLAS workspace)",
                      cudaMalloc(&ctx->blas_workspace,
                                 KC_BLAS_WORKSPACE_BYTES)) != 0)
        goto fail_scratch;
    if (kc_blas_check(fn, "cublasCreate", cublasCreate(&ctx->blas)) != 0)
        goto fail_workspace;
    /* cublasSetStream resets the workspace, so the stream goes first.
     * Default math is pure fp32 for CUBLAS_COMPUTE_32F (no TF32); the flag
     * keeps split-K partial sums in fp32 when the output is bf16. */
    if (kc_blas_check(fn, "cublasSetStream",
                      cublasSetStream(ctx->blas, ctx->stream)) != 0 ||
        kc_blas_check(fn, "cublasSetWorkspace",
                      cublasSetWorkspace(ctx->blas, ctx->blas_workspace,
                                         KC_BLAS_WORKSPACE_BYTES)) != 0 ||
        kc_blas_check(fn, "cublasSetMathMode",
                      cublasSetMathMode(
                          ctx->blas,
                          (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))) != 0 ||
        kc_blas_check(fn, "cublasSetPointerMode",
                      cublasSetPointerMode(ctx->blas,
                                           CUBLAS_POINTER_MODE_HOST)) != 0)
        goto fail_blas;
    if (kc_blas_check(fn, "cublasLtCreate", cublasLtCreate(&ctx->lt)) != 0)
        goto fail_blas;
    if (kc_grouped_init(ctx, fn) != 0)
        goto fail_lt;
    ctx->epilogues = !(getenv("SWY_KC_EPILOGUES") != NULL &&
                       strcmp(getenv("SWY_KC_EPILOGUES"), "0") == 0);
    grouped = getenv("SWY_KC_GROUPED");
    if (grouped != NULL && strcmp(grouped, "0") != 0 &&
        strcmp(grouped, "1") != 0) {
        kc_fail(fn, "SWY_KC_GROUPED=%s: want 0 or 1", grouped);
        goto fail_gptrs;
    }
    if (grouped != NULL && strcmp(grouped, "1") == 0 &&
        swy_kc_ctx_set_grouped(ctx, 1) != 0)
        goto fail_gptrs;
    *ctx_p = ctx;
    return 0;

fail_gptrs:
    cudaFree(ctx->gptrs);
fail_lt:
    cublasLtDestroy(ctx->lt);
fail_blas:
    cublasDestroy(ctx->blas);
fail_workspace:
    cudaFree(ctx->blas_workspace);
fail_scratch:
    cudaFree(ctx->scratch);
fail_ctx:
    free(ctx);
    return 1;
}

int kc_ctx_work(swy_kc_ctx_t *ctx, const char *fn, size_t bytes, void **p)
{
    if (bytes > ctx->work_bytes) {
        KC_CUDA(fn, cudaStreamSynchronize(ctx->stream));
        KC_CUDA(fn, cudaFree(ctx->work));
        ctx->work = NULL;
        ctx->work_bytes = 0;
        cudaError_t err = cudaMalloc(&ctx->work, bytes);
        if (err != cudaSuccess)
            return kc_fail(fn, "cudaMalloc(%zu bytes of workspace): %s: %s",
                           bytes, cudaGetErrorName(err),
                           cudaGetErrorString(err));
        ctx->work_bytes = bytes;
    }
    *p = ctx->work;
    return 0;
}

void swy_kc_ctx_destroy(swy_kc_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    cudaFree(ctx->work);
    cudaFree(ctx->gptrs);
    cublasLtDestroy(ctx->lt);
    cublasDestroy(ctx->blas);
    cudaFree(ctx->blas_workspace);
    cudaFree(ctx->scratch);
    free(ctx);
}

void *swy_kc_ctx_stream(swy_kc_ctx_t *ctx)
{
    return ctx != NULL ? (void *)ctx->stream : NULL;
}

int swy_kc_ctx_set_epilogues(swy_kc_ctx_t *ctx, int on)
{
    static const char fn[] = "swy_kc_ctx_set_epilogues";
    KC_CTX(fn, ctx);
    if (ctx->lt == NULL)
        return kc_fail(fn, "a row context has no GEMMs");
    ctx->epilogues = on != 0;
    return 0;
}

int swy_kc_ctx_epilogue_stats(swy_kc_ctx_t *ctx, int *on,
                              unsigned long *fused, unsigned long *fell_back,
                              const char **why)
{
    static const char fn[] = "swy_kc_ctx_epilogue_stats";
    KC_CTX(fn, ctx);
    if (on == NULL || fused == NULL || fell_back == NULL || why == NULL)
        return kc_fail(fn, "NULL output");
    *on = ctx->epilogues;
    *fused = ctx->lt_fused;
    *fell_back = ctx->lt_fell_back;
    *why = ctx->lt_why;
    return 0;
}
