/* swy-transport-nccl: the device services of swy_device_plugin_v1, which
 * give libswitchyard (it includes no CUDA header) what it needs to know and
 * do about device memory.
 *
 * They are process-wide and thread-safe (the CUDA runtime
 * is); a failure is kept per thread for error_string(). */
#include <stdio.h>

#include "nccl_plugin.h"

static __thread char nccl_device_error[256] = "no error";

static void nccl_device_set_error(const char *call, cudaError_t err)
{
    snprintf(nccl_device_error, sizeof(nccl_device_error), "%s: %s (%s)",
             call, cudaGetErrorString(err), cudaGetErrorName(err));
}

int nccl_device_count(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaGetDeviceCount", err);
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

swy_mem_type_t nccl_device_mem_type(const void *ptr)
{
    if (ptr == NULL)
        return SWY_MEM_HOST;
    struct cudaPointerAttributes attr;
    cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) {
        /* Older runtimes fail for memory they never saw; clear the error
         * so that it does not surface in the caller's next CUDA call. */
        nccl_device_set_error("cudaPointerGetAttributes", err);
        (void)cudaGetLastError();
        return SWY_MEM_HOST;
    }
    if (attr.type == cudaMemoryTypeDevice ||
        attr.type == cudaMemoryTypeManaged)
        return SWY_MEM_CUDA;
    return SWY_MEM_HOST;
}

swy_status_t nccl_device_stream_sync(void *stream)
{
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaStreamSynchronize", err);
        return nccl_status_from_cuda(err);
    }
    return SWY_OK;
}

swy_status_t nccl_device_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return SWY_OK;
    cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaMemcpy", err);
        return nccl_status_from_cuda(err);
    }
    /* cudaMemcpy may return before a copy within the device (or from
     * pageable memory) has landed; the ABI promises it has. */
    err = cudaStreamSynchronize(0);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaStreamSynchronize (copy)", err);
        return nccl_status_from_cuda(err);
    }
    return SWY_OK;
}

void *nccl_device_host_alloc(size_t bytes)
{
    void *ptr = NULL;
    /* Portable: pinned for every device and context of the process. */
    cudaError_t err = cudaHostAlloc(&ptr, bytes > 0 ? bytes : 1,
                                    cudaHostAllocPortable);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaHostAlloc", err);
        return NULL;
    }
    return ptr;
}

void nccl_device_host_free(void *ptr)
{
    if (ptr == NULL)
        return;
    cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess)
        nccl_device_set_error("cudaFreeHost", err);
}

const char *nccl_device_error_string(void)
{
    return nccl_device_error;
}

swy_status_t nccl_device_isend_prio(void *ctx, int peer, uint64_t tag,
                                    const void *buf, size_t len,
                                    swy_mem_type_t mem, int priority,
                                    swy_transport_complete_cb_v1_t cb,
                                    void *cb_arg, void **handle_p)
{
    return nccl_isend_class(ctx, peer, tag, buf, len, mem,
                            nccl_class_of_priority(priority), cb, cb_arg,
                            handle_p);
}
