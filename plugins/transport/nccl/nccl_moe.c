/* swy-transport-nccl: swy_devmoe_plugin_v1, the row kernels of the MoE
 * exchange on device memory (swy_devmoe_v1.h).
 *
 * The math is that of the CUDA kernels of kernels/ (swy_kernels_cuda.h:
 * pack.cu, combine.cu), called here, never copied, from the static
 * library swy_kernels_cuda_rows, which needs no cuBLAS (loading this
 * plugin loads neither cuBLAS nor the C++ runtime). They enqueue on the
 * stream of a context; the process has one row context
 * (swy_kc_rows_ctx_create: a stream and an SM count, no device memory),
 * made by the first call that has work to enqueue and kept until the
 * process ends. A context serves one thread at a time, so each call
 * takes moe_lock, binds the context to its stream
 * (swy_kc_rows_ctx_set_stream), enqueues and unlocks: the lock covers the
 * launch, never the kernel's run.
 *
 * Devices: as the device services of swy_device_plugin_v1 (nccl_device.c),
 * everything here works on the calling thread's current device, which must
 * be that of `stream` and of the arrays. One context serves every device:
 * the SM count only caps the grid of a grid-stride loop, so any device's
 * count is correct.
 *
 * Errors: the text is the device services' per-thread one
 * (nccl_device_set_errorf), and error_string() is theirs. A failure of the
 * kernel library is SWY_ERR_TRANSPORT with swy_kc_error_string()'s text,
 * which it also keeps per thread. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "nccl_plugin.h"
#include "swy_kernels_cuda.h"
#include "switchyard/swy_devmoe_v1.h"

/* The ABI's row indices (int32_t) go to the kernels (int) as they are. */
_Static_assert(sizeof(int32_t) == sizeof(int),
               "int32_t row indices are passed as int");

static pthread_mutex_t moe_lock = PTHREAD_MUTEX_INITIALIZER;
static swy_kc_ctx_t *moe_ctx; /* under moe_lock; made on first use */

/* ---- errors ----------------------------------------------------------- */

static swy_status_t moe_kc_fail(const char *fn)
{
    nccl_device_set_errorf("%s: %s", fn, swy_kc_error_string());
    return SWY_ERR_TRANSPORT;
}

static swy_status_t moe_cuda_fail(const char *fn, const char *call,
                                  cudaError_t err)
{
    nccl_device_set_errorf("%s: %s: %s (%s)", fn, call,
                           cudaGetErrorString(err), cudaGetErrorName(err));
    /* A failed call leaves its error as the thread's last one, which the
     * next kernel launch would report as its own: clear it (a sticky
     * error stays, and every later call reports it). */
    (void)cudaGetLastError();
    swy_status_t status = nccl_status_from_cuda(err);
    return status == SWY_OK ? SWY_ERR_INTERNAL : status;
}

static swy_status_t moe_null(const char *fn, const char *array)
{
    nccl_device_set_errorf("%s: %s is NULL, with rows to touch", fn, array);
    return SWY_ERR_INVALID_ARG;
}

/* ---- arguments -------------------------------------------------------- */

static const char *moe_dtype_name(swy_dtype_t dtype)
{
    switch (dtype) {
    case SWY_INT8: return "SWY_INT8";
    case SWY_UINT8: return "SWY_UINT8";
    case SWY_INT32: return "SWY_INT32";
    case SWY_INT64: return "SWY_INT64";
    case SWY_FLOAT16: return "SWY_FLOAT16";
    case SWY_BFLOAT16: return "SWY_BFLOAT16";
    case SWY_FLOAT32: return "SWY_FLOAT32";
    case SWY_FLOAT64: return "SWY_FLOAT64";
    }
    return "unknown";
}

/* The fp32 kernels serve SWY_FLOAT32, the _bf16 ones SWY_BFLOAT16;
 * *esize_p (may be NULL) is the size of a row element. */
static swy_status_t moe_check_dtype(const char *fn, swy_dtype_t dtype,
                                    size_t *esize_p)
{
    size_t esize;
    switch (dtype) {
    case SWY_FLOAT32:
        esize = sizeof(float);
        break;
    case SWY_BFLOAT16:
        esize = sizeof(swy_kc_bf16_t);
        break;
    default:
        nccl_device_set_errorf("%s: dtype %s (%d) is not supported: rows "
                               "are SWY_FLOAT32 or SWY_BFLOAT16",
                               fn, moe_dtype_name(dtype), (int)dtype);
        return SWY_ERR_UNSUPPORTED;
    }
    if (esize_p != NULL)
        *esize_p = esize;
    return SWY_OK;
}

/* A slot map of S tokens by k over rows of H elements: each size >= 0 and
 * S * k an int (as the kernels count slots); then the dtype. */
static swy_status_t moe_check(const char *fn, swy_dtype_t dtype, int S,
                              int k, int H, size_t *esize_p)
{
    if (S < 0 || k < 0 || H < 0 || (k > 0 && S > INT_MAX / k)) {
        nccl_device_set_errorf("%s: bad sizes S=%d k=%d H=%d (each >= 0, "
                               "S*k at most INT_MAX)",
                               fn, S, k, H);
        return SWY_ERR_INVALID_ARG;
    }
    return moe_check_dtype(fn, dtype, esize_p);
}

/* ---- the shared context ----------------------------------------------- */

/* Locks the context (made here at the first call) and binds it to stream.
 * On SWY_OK the caller enqueues, then calls moe_release. */
static swy_status_t moe_acquire(const char *fn, void *stream,
                                swy_kc_ctx_t **ctx_p)
{
    pthread_mutex_lock(&moe_lock);
    if ((moe_ctx == NULL && swy_kc_rows_ctx_create(stream, &moe_ctx) != 0) ||
        swy_kc_rows_ctx_set_stream(moe_ctx, stream) != 0) {
        pthread_mutex_unlock(&moe_lock);
        return moe_kc_fail(fn);
    }
    *ctx_p = moe_ctx;
    return SWY_OK;
}

/* rc: the kernel library's status of what was enqueued. */
static swy_status_t moe_release(const char *fn, int rc)
{
    pthread_mutex_unlock(&moe_lock);
    return rc == 0 ? SWY_OK : moe_kc_fail(fn);
}

/* Zeros on stream: the outputs that the kernels leave alone when there is
 * no slot (k = 0) or nothing to sum (H = 0). */
static swy_status_t moe_zero(const char *fn, void *stream, void *ptr,
                             size_t bytes)
{
    cudaError_t err = cudaMemsetAsync(ptr, 0, bytes, (cudaStream_t)stream);
    if (err != cudaSuccess)
        return moe_cuda_fail(fn, "cudaMemsetAsync", err);
    return SWY_OK;
}

/* ---- memory and copies ------------------------------------------------ */

static void *moe_alloc(size_t bytes)
{
    void *ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        nccl_device_set_errorf("alloc: cudaMalloc(%zu bytes): %s (%s)", bytes,
                               cudaGetErrorString(err),
                               cudaGetErrorName(err));
        (void)cudaGetLastError();
        return NULL;
    }
    return ptr;
}

static void moe_free_mem(void *ptr)
{
    if (ptr == NULL)
        return;
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess)
        (void)moe_cuda_fail("free_mem", "cudaFree", err);
}

static swy_status_t moe_upload(void *stream, void *dst, const void *src,
                               size_t bytes)
{
    static const char fn[] = "upload";
    if (bytes == 0)
        return SWY_OK;
    if (dst == NULL || src == NULL)
        return moe_null(fn, dst == NULL ? "dst" : "src");
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                      (cudaStream_t)stream);
    if (err != cudaSuccess)
        return moe_cuda_fail(fn, "cudaMemcpyAsync (host to device)", err);
    /* src may be reused once upload returns (swy_devmoe_v1.h). From
     * pageable memory CUDA copies src to a staging buffer of its own
     * before cudaMemcpyAsync returns ("API synchronization behavior" in
     * the CUDA runtime API), but from pinned memory (a framework's pinned
     * tensor, swy_device_plugin_v1's host_alloc) the device reads src
     * when the stream reaches the copy, after upload has returned. Waiting
     * for the stream is right for both. A pinned bounce buffer of the
     * plugin's would spare the wait, but it must live until its copy is
     * done (an event and a pool) and costs a host copy besides; the wait
     * costs the caller's thread the work queued on the stream before. */
    err = cudaStreamSynchronize((cudaStream_t)stream);
    if (err != cudaSuccess)
        return moe_cuda_fail(fn, "cudaStreamSynchronize", err);
    return SWY_OK;
}

static swy_status_t moe_download(void *stream, void *dst, const void *src,
                                 size_t bytes)
{
    static const char fn[] = "download";
    if (bytes == 0)
        return SWY_OK;
    if (dst == NULL || src == NULL)
        return moe_null(fn, dst == NULL ? "dst" : "src");
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                      (cudaStream_t)stream);
    if (err != cudaSuccess)
        return moe_cuda_fail(fn, "cudaMemcpyAsync (device to host)", err);
    err = cudaStreamSynchronize((cudaStream_t)stream);
    if (err != cudaSuccess)
        return moe_cuda_fail(fn, "cudaStreamSynchronize", err);
    return SWY_OK;
}

/* ---- the row kernels -------------------------------------------------- */

static swy_status_t moe_pack(void *stream, swy_dtype_t dtype, const void *x,
                             const int32_t *row_of_slot, int S, int k, int H,
                             void *send)
{
    static const char fn[] = "pack";
    swy_status_t status = moe_check(fn, dtype, S, k, H, NULL);
    if (status != SWY_OK || S == 0 || k == 0 || H == 0)
        return status;
    if (x == NULL || row_of_slot == NULL || send == NULL)
        return moe_null(fn, x == NULL             ? "x"
                            : row_of_slot == NULL ? "row_of_slot"
                                                  : "send");
    swy_kc_ctx_t *ctx;
    status = moe_acquire(fn, stream, &ctx);
    if (status != SWY_OK)
        return status;
    int rc = dtype == SWY_FLOAT32
                 ? swy_kc_pack(ctx, x, row_of_slot, S, k, H, send)
                 : swy_kc_pack_bf16(ctx, x, row_of_slot, S, k, H, send);
    return moe_release(fn, rc);
}

static swy_status_t moe_pack_bwd(void *stream, swy_dtype_t dtype,
                                 const void *dsend,
                                 const int32_t *row_of_slot, int S, int k,
                                 int H, void *dx)
{
    static const char fn[] = "pack_bwd";
    size_t esize;
    swy_status_t status = moe_check(fn, dtype, S, k, H, &esize);
    if (status != SWY_OK || S == 0 || H == 0)
        return status;
    if (dx == NULL)
        return moe_null(fn, "dx");
    if (k == 0) /* no token has a row */
        return moe_zero(fn, stream, dx, (size_t)S * (size_t)H * esize);
    if (dsend == NULL || row_of_slot == NULL)
        return moe_null(fn, dsend == NULL ? "dsend" : "row_of_slot");
    swy_kc_ctx_t *ctx;
    status = moe_acquire(fn, stream, &ctx);
    if (status != SWY_OK)
        return status;
    int rc = dtype == SWY_FLOAT32
                 ? swy_kc_pack_bwd(ctx, dsend, row_of_slot, S, k, H, dx)
                 : swy_kc_pack_bwd_bf16(ctx, dsend, row_of_slot, S, k, H,
                                        dx);
    return moe_release(fn, rc);
}

static swy_status_t moe_gather_rows(void *stream, swy_dtype_t dtype,
                                    const void *src, const int32_t *src_row,
                                    int n, int H, void *dst)
{
    static const char fn[] = "gather_rows";
    if (n < 0 || H < 0) {
        nccl_device_set_errorf("%s: bad sizes n=%d H=%d (each >= 0)", fn, n,
                               H);
        return SWY_ERR_INVALID_ARG;
    }
    swy_status_t status = moe_check_dtype(fn, dtype, NULL);
    if (status != SWY_OK || n == 0 || H == 0)
        return status;
    if (src == NULL || src_row == NULL || dst == NULL)
        return moe_null(fn, src == NULL       ? "src"
                            : src_row == NULL ? "src_row"
                                              : "dst");
    swy_kc_ctx_t *ctx;
    status = moe_acquire(fn, stream, &ctx);
    if (status != SWY_OK)
        return status;
    int rc = dtype == SWY_FLOAT32
                 ? swy_kc_gather_rows(ctx, src, src_row, n, H, dst)
                 : swy_kc_gather_rows_bf16(ctx, src, src_row, n, H, dst);
    return moe_release(fn, rc);
}

static swy_status_t moe_combine_fwd(void *stream, swy_dtype_t dtype,
                                    const void *rows,
                                    const int32_t *row_of_slot,
                                    const float *topk_w, int S, int k, int H,
                                    void *out)
{
    static const char fn[] = "combine_fwd";
    size_t esize;
    swy_status_t status = moe_check(fn, dtype, S, k, H, &esize);
    if (status != SWY_OK || S == 0 || H == 0)
        return status;
    if (out == NULL)
        return moe_null(fn, "out");
    if (k == 0) /* no token has a row */
        return moe_zero(fn, stream, out, (size_t)S * (size_t)H * esize);
    if (rows == NULL || row_of_slot == NULL || topk_w == NULL)
        return moe_null(fn, rows == NULL          ? "rows"
                            : row_of_slot == NULL ? "row_of_slot"
                                                  : "topk_w");
    swy_kc_ctx_t *ctx;
    status = moe_acquire(fn, stream, &ctx);
    if (status != SWY_OK)
        return status;
    int rc = dtype == SWY_FLOAT32
                 ? swy_kc_combine_fwd(ctx, rows, row_of_slot, topk_w, S, k,
                                      H, out)
                 : swy_kc_combine_fwd_bf16(ctx, rows, row_of_slot, topk_w, S,
                                           k, H, out);
    return moe_release(fn, rc);
}

static swy_status_t moe_combine_bwd(void *stream, swy_dtype_t dtype,
                                    const void *rows,
                                    const int32_t *row_of_slot,
                                    const float *topk_w, const void *dout,
                                    int S, int k, int H, void *drows,
                                    float *dtopk_w)
{
    static const char fn[] = "combine_bwd";
    swy_status_t status = moe_check(fn, dtype, S, k, H, NULL);
    if (status != SWY_OK || S == 0 || k == 0 ||
        (drows == NULL && dtopk_w == NULL))
        return status;
    if (row_of_slot == NULL)
        return moe_null(fn, "row_of_slot");
    if (H == 0) /* rows of no element: every dot product is 0 */
        return dtopk_w == NULL ? SWY_OK
                               : moe_zero(fn, stream, dtopk_w,
                                          (size_t)S * (size_t)k *
                                              sizeof(float));
    if (dout == NULL)
        return moe_null(fn, "dout");
    if (drows != NULL && topk_w == NULL)
        return moe_null(fn, "topk_w (drows wanted)");
    if (dtopk_w != NULL && rows == NULL)
        return moe_null(fn, "rows (dtopk_w wanted)");
    swy_kc_ctx_t *ctx;
    status = moe_acquire(fn, stream, &ctx);
    if (status != SWY_OK)
        return status;
    int rc = dtype == SWY_FLOAT32
                 ? swy_kc_combine_bwd(ctx, rows, row_of_slot, topk_w, dout, S,
                                      k, H, drows, dtopk_w)
                 : swy_kc_combine_bwd_bf16(ctx, rows, row_of_slot, topk_w,
                                           dout, S, k, H, drows, dtopk_w);
    return moe_release(fn, rc);
}

__attribute__((visibility("default"))) const swy_devmoe_v1_t
    swy_devmoe_plugin_v1 = {
        .abi_version = SWY_DEVMOE_ABI_V1,
        .struct_size = sizeof(swy_devmoe_v1_t),
        .name = "cuda",
        .alloc = moe_alloc,
        .free_mem = moe_free_mem,
        .upload = moe_upload,
        .download = moe_download,
        .pack = moe_pack,
        .pack_bwd = moe_pack_bwd,
        .gather_rows = moe_gather_rows,
        .combine_fwd = moe_combine_fwd,
        .combine_bwd = moe_combine_bwd,
        .error_string = nccl_device_error_string,
};
