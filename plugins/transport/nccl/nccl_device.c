/* swy-transport-nccl: the device services of swy_device_plugin_v1, which
 * give libswitchyard (it includes no CUDA header) what it needs to know and
 * do about device memory.
 *
 * They are process-wide and thread-safe (the CUDA runtime
 * is); a failure is kept per thread for error_string(), a text that the
 * row kernels of swy_devmoe_plugin_v1 (nccl_moe.c) share. Compiled on the
 * project's machines, which have no GPU: the stream functions at the end
 * have not run on one yet (README, "Verified on GPUs"). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h> /* types of the driver entry point only: no libcuda */

#include "nccl_plugin.h"

static __thread char nccl_device_error[256] = "no error";

void nccl_device_set_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nccl_device_error, sizeof(nccl_device_error), fmt, ap);
    va_end(ap);
}

void nccl_device_set_error(const char *call, cudaError_t err)
{
    nccl_device_set_errorf("%s: %s (%s)", call, cudaGetErrorString(err),
                           cudaGetErrorName(err));
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

/* ---- what must never wait behind a gate ----
 *
 * While a gate holds a caller's stream (stream_gate below), whatever waits
 * for that stream waits for the op the gate belongs to. The op's own copies
 * therefore go on a stream of the plugin's that is non-blocking (the
 * legacy default stream waits for every blocking stream, and a gate on it,
 * where the caller passed NULL, would hold the copy), and pinned memory is
 * not freed while a gate is closed (cudaFreeHost may wait for the whole
 * device): the free waits for a moment when none is. */

#define NCCL_COPY_MAX_DEVICES 64
static pthread_mutex_t copy_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t copy_streams[NCCL_COPY_MAX_DEVICES];

static int gates_closed; /* atomic: gates made whose stream has not passed */

typedef struct nccl_deferred_free {
    struct nccl_deferred_free *next;
    void *ptr;
} nccl_deferred_free_t;
static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_deferred_free_t *deferred_frees;

/* The calling thread's device's copy stream, made on first use. */
static cudaError_t nccl_copy_stream(cudaStream_t *stream_p)
{
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess)
        return err;
    if (dev < 0 || dev >= NCCL_COPY_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock(&copy_lock);
    if (copy_streams[dev] == NULL) {
        err = cudaStreamCreateWithFlags(&copy_streams[dev],
                                        cudaStreamNonBlocking);
        if (err != cudaSuccess)
            copy_streams[dev] = NULL;
    }
    *stream_p = copy_streams[dev];
    pthread_mutex_unlock(&copy_lock);
    return err;
}

cudaError_t nccl_copy_sync(void *dst, const void *src, size_t bytes)
{
    cudaStream_t stream = NULL;
    cudaError_t err = nccl_copy_stream(&stream);
    /* Threads that copy at once share the stream; each waits for its own
     * copy and for those queued before it. */
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(stream);
    return err;
}

swy_status_t nccl_device_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return SWY_OK;
    cudaError_t err = nccl_copy_sync(dst, src, bytes);
    if (err != cudaSuccess) {
        nccl_device_set_error("copy (cudaMemcpyAsync on the plugin's "
                              "stream)", err);
        return nccl_status_from_cuda(err);
    }
    return SWY_OK;
}

/* Frees the pinned buffers put off, when no gate is closed. */
static void nccl_deferred_sweep(void)
{
    if (__atomic_load_n(&gates_closed, __ATOMIC_ACQUIRE) != 0)
        return;
    pthread_mutex_lock(&deferred_lock);
    nccl_deferred_free_t *list = deferred_frees;
    deferred_frees = NULL;
    pthread_mutex_unlock(&deferred_lock);
    while (list != NULL) {
        nccl_deferred_free_t *d = list;
        list = d->next;
        cudaError_t err = cudaFreeHost(d->ptr);
        if (err != cudaSuccess)
            nccl_device_set_error("cudaFreeHost", err);
        free(d);
    }
}

void *nccl_device_host_alloc(size_t bytes)
{
    nccl_deferred_sweep();
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
    nccl_deferred_free_t *d = malloc(sizeof(*d));
    if (d != NULL) {
        d->ptr = ptr;
        pthread_mutex_lock(&deferred_lock);
        d->next = deferred_frees;
        deferred_frees = d;
        pthread_mutex_unlock(&deferred_lock);
        nccl_deferred_sweep();
        return;
    }
    /* No memory to remember it: kept (leaked) rather than freed under a
     * closed gate. */
    if (__atomic_load_n(&gates_closed, __ATOMIC_ACQUIRE) == 0) {
        cudaError_t err = cudaFreeHost(ptr);
        if (err != cudaSuccess)
            nccl_device_set_error("cudaFreeHost", err);
    }
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
 * it. The flags come from blocks of pinned memory that are never freed:
 * a gate whose stream passed it and that was opened goes back to the
 * free list (no cudaHostAlloc or cudaFreeHost, which may wait for the
 * device, on the post path). */

typedef CUresult (*nccl_wait_value32_fn)(CUstream, CUdeviceptr, cuuint32_t,
                                         unsigned int);

typedef struct nccl_gate {
    struct nccl_gate *next;
    volatile uint32_t *flag; /* mapped, pinned */
    void *dptr;              /* the flag's device address */
    int passed;              /* atomic: the stream is past the wait */
} nccl_gate_t;

#define NCCL_GATE_BLOCK 1024 /* flags per pinned block */

typedef CUresult (*nccl_loading_mode_fn)(CUmoduleLoadingMode *);

static pthread_once_t wait_value_once = PTHREAD_ONCE_INIT;
static nccl_wait_value32_fn wait_value32;
static int lazy_loading; /* CUDA loads kernels at their first launch */
static pthread_mutex_t gates_lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_gate_t *gates_opened; /* opened, reusable once passed */
static nccl_gate_t *gates_free;   /* reusable */

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
    /* Loading a kernel may wait for the whole device ("lazy loading" in
     * the CUDA programming guide). A gate holds a caller's stream until an
     * op completes, so an op whose NCCL call loads a kernel can wait for
     * itself. Seen on an H200: with the legacy stream at a
     * gate, a one-rank fp16 ncclAvg allreduce never completed, after
     * every op before it had (their kernels were loaded when the
     * communicator was made and connected, or NCCL copied without a
     * kernel); its kernel, NCCL's oneRankReduce, is loaded at its first
     * use. With lazy loading the host is told that no gate can be made,
     * and waits for its ops instead. */
    fn = NULL;
    CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
    if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 11070,
                                         cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess &&
        ((nccl_loading_mode_fn)fn)(&mode) == CUDA_SUCCESS)
        lazy_loading = mode == CU_MODULE_LAZY_LOADING;
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
    __atomic_sub_fetch(&gates_closed, 1, __ATOMIC_ACQ_REL);
}

/* Under gates_lock: move the opened gates that their streams passed to
 * the free list; if it is empty, add a block of flags. */
static swy_status_t nccl_gates_refill(void)
{
    nccl_gate_t **pp = &gates_opened;
    while (*pp != NULL) {
        nccl_gate_t *g = *pp;
        if (!__atomic_load_n(&g->passed, __ATOMIC_ACQUIRE)) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        g->next = gates_free;
        gates_free = g;
    }
    if (gates_free != NULL)
        return SWY_OK;
    nccl_gate_t *gs = calloc(NCCL_GATE_BLOCK, sizeof(*gs));
    void *flags = NULL, *dflags = NULL;
    if (gs == NULL) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "stream_gate: out of host memory");
        return SWY_ERR_NO_MEMORY;
    }
    cudaError_t err = cudaHostAlloc(&flags, NCCL_GATE_BLOCK * sizeof(uint32_t),
                                    cudaHostAllocMapped |
                                        cudaHostAllocPortable);
    if (err == cudaSuccess)
        err = cudaHostGetDevicePointer(&dflags, flags, 0);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaHostAlloc (gates)", err);
        if (flags != NULL)
            (void)cudaFreeHost(flags);
        free(gs);
        return nccl_status_from_cuda(err);
    }
    for (int i = 0; i < NCCL_GATE_BLOCK; i++) {
        gs[i].flag = (volatile uint32_t *)flags + i;
        gs[i].dptr = (char *)dflags + (size_t)i * sizeof(uint32_t);
        gs[i].next = gates_free;
        gates_free = &gs[i];
    }
    return SWY_OK;
}

swy_status_t nccl_device_stream_gate(void *stream, void **gate_p)
{
    pthread_once(&wait_value_once, wait_value_find);
    if (wait_value32 == NULL) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "cuStreamWaitValue32 is not available from this driver");
        return SWY_ERR_UNSUPPORTED;
    }
    if (lazy_loading) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY, the "
                 "default), and a kernel loaded while a stream is held can "
                 "wait for that stream; set CUDA_MODULE_LOADING=EAGER "
                 "before CUDA starts to post device ops without waiting");
        return SWY_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&gates_lock);
    swy_status_t status = nccl_gates_refill();
    nccl_gate_t *g = NULL;
    if (status == SWY_OK) {
        g = gates_free;
        gates_free = g->next;
    }
    pthread_mutex_unlock(&gates_lock);
    if (status != SWY_OK)
        return status;
    *g->flag = 0;
    g->passed = 0;
    g->next = NULL;
    __atomic_add_fetch(&gates_closed, 1, __ATOMIC_ACQ_REL);
    CUresult res = wait_value32((CUstream)stream, (CUdeviceptr)g->dptr, 1,
                                CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS) {
        snprintf(nccl_device_error, sizeof(nccl_device_error),
                 "cuStreamWaitValue32 failed (CUresult %d)", (int)res);
        __atomic_sub_fetch(&gates_closed, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_lock(&gates_lock);
        g->next = gates_free;
        gates_free = g;
        pthread_mutex_unlock(&gates_lock);
        return SWY_ERR_UNSUPPORTED;
    }
    /* From here the gate must be opened, whatever happens: the stream
     * waits on it. */
    cudaError_t err =
        cudaLaunchHostFunc((cudaStream_t)stream, nccl_gate_passed, g);
    if (err != cudaSuccess) {
        nccl_device_set_error("cudaLaunchHostFunc (gate)", err);
        /* Never known to be passed: the flag is not reused, and the
         * count of closed gates drops when it is opened. */
        g->passed = -1;
    }
    *gate_p = g;
    return SWY_OK;
}

void nccl_device_gate_open(void *gate)
{
    nccl_gate_t *g = gate;
    __atomic_store_n(g->flag, 1, __ATOMIC_RELEASE);
    if (g->passed == -1) {
        __atomic_sub_fetch(&gates_closed, 1, __ATOMIC_ACQ_REL);
        return; /* its stream may still read the flag: not reused */
    }
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
