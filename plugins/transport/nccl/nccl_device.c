/* swy-transport-nccl: the device services of swy_device_plugin_v1, which
 * give libswitchyard (it includes no CUDA header) what it needs to know and
 * do about device memory.
 *
 * They are process-wide and thread-safe (the CUDA runtime
 * is); a failure is kept per thread for error_string(). Compiled on the
 * project's machines, which have no GPU: the stream functions at the end
 * have not run on one yet (README, "Verified on GPUs"). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h> /* types of the driver entry point only: no libcuda */

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

/* ---- ordering on the caller's stream without blocking the host ----
 *
 * stream_notify is cudaLaunchHostFunc. A gate is a 32-bit flag in
 * mapped, pinned host memory that the stream waits on
 * (cuStreamWaitValue32, found through the runtime's driver entry points
 * so that the plugin links no libcuda) until gate_open writes 1; a host
 * function queued right after the wait says when the stream has passed
 * it, and the next stream_gate call frees the gates that were passed and
 * opened (cudaFreeHost may not run inside a host function). */

typedef CUresult (*nccl_wait_value32_fn)(CUstream, CUdeviceptr, cuuint32_t,
                                         unsigned int);

typedef struct nccl_gate {
    struct nccl_gate *next;
    volatile uint32_t *flag; /* mapped, pinned */
    int passed;              /* atomic: the stream is past the wait */
} nccl_gate_t;

static pthread_once_t wait_value_once = PTHREAD_ONCE_INIT;
static nccl_wait_value32_fn wait_value32;
static pthread_mutex_t gates_lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_gate_t *gates_opened; /* opened, freed once passed */

static void wait_value_find(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000,
                                         cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        wait_value32 = (nccl_wait_value32_fn)fn;
    else
        (void)cudaGetLastError();
}

typedef struct {
    void (*done)(void *);
    void *arg;
} nccl_notify_t;

static void CUDART_CB nccl_notify_run(void *arg)
{
    nccl_notify_t n = *(nccl_notify_t *)arg;
    free(arg);
    n.done(n.arg);
}

swy_status_t nccl_device_stream_notify(void *stream, void (*done)(void *),
                                       void *arg)
{
    nccl_notify_t *n = malloc(sizeof(*n));
    if (n == NULL)
        return SWY_ERR_NO_MEMORY;
    *n = (nccl_notify_t){done, arg};
    cudaError_t err =
        cudaLaunchHostFunc((cudaStream_t)stream, nccl_notify_run, n);
    if (err != cudaSuccess) {
        free(n);
        nccl_device_set_error("cudaLaunchHostFunc", err);
        return nccl_status_from_cuda(err);
    }
    return SWY_OK;
}

static void CUDART_CB nccl_gate_passed(void *arg)
{
    nccl_gate_t *g = arg;
    __atomic_store_n(&g->passed, 1, __ATOMIC_RELEASE);
}

/* Free the gates that were opened and that their streams passed. */
static void nccl_gates_sweep(void)
{
    pthread_mutex_lock(&gates_lock);
    nccl_gate_t **pp = &gates_opened;
    while (*pp != NULL) {
        nccl_gate_t *g = *pp;
        if (!__atomic_load_n(&g->passed, __ATOMIC_ACQUIRE)) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        (void)cudaFreeHost((void *)g->flag);
        free(g);
    }
    pthread_mutex_unlock(&gates_lock);
}

swy_status_t nccl_device_stream_gate(void *stream, void **gate_p)
{
    pthread_once(&wait_value_once, wait_value_find);
    if (wait_value32 == NULL) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "cuStreamWaitValue32 is not available from this driver");
        return SWY_ERR_UNSUPPORTED;
    }
    nccl_gates_sweep();
    nccl_gate_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return SWY_ERR_NO_MEMORY;
    void *flag = NULL, *dptr = NULL;
    cudaError_t err = cudaHostAlloc(&flag, sizeof(uint32_t),
                                    cudaHostAllocMapped |
                                        cudaHostAllocPortable);
    if (err == cudaSuccess) {
        *(volatile uint32_t *)flag = 0;
        err = cudaHostGetDevicePointer(&dptr, flag, 0);
    }
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaHostAlloc (gate)", err);
        if (flag != NULL)
            (void)cudaFreeHost(flag);
        free(g);
        return nccl_status_from_cuda(err);
    }
    g->flag = flag;
    CUresult res = wait_value32((CUstream)stream, (CUdeviceptr)dptr, 1,
                                CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "cuStreamWaitValue32 failed (CUresult %d)", (int)res);
        (void)cudaFreeHost(flag);
        free(g);
        return SWY_ERR_UNSUPPORTED;
    }
    /* From here the gate must be opened, whatever happens: the stream
     * waits on it. */
    err = cudaLaunchHostFunc((cudaStream_t)stream, nccl_gate_passed, g);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaLaunchHostFunc (gate)", err);
        /* never known to be passed: kept (a few bytes) rather than freed
         * under the stream */
        g->passed = 0;
    }
    *gate_p = g;
    return SWY_OK;
}

void nccl_device_gate_open(void *gate)
{
    nccl_gate_t *g = gate;
    __atomic_store_n(g->flag, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&gates_lock);
    g->next = gates_opened;
    gates_opened = g;
    pthread_mutex_unlock(&gates_lock);
}

int nccl_device_stream_capturing(void *stream)
{
    enum cudaStreamCaptureStatus status;
    cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &status);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaStreamIsCapturing", err);
        (void)cudaGetLastError();
        return -1;
    }
    return status != cudaStreamCaptureStatusNone;
}
