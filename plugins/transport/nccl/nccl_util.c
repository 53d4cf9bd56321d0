/* swy-transport-nccl: error conversion, the current device, the wake-up
 * object, and the pools of events and header slots. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nccl_plugin.h"

swy_status_t nccl_status_from_cuda(cudaError_t err)
{
    switch (err) {
    case cudaSuccess:
        return SWY_OK;
    case cudaErrorMemoryAllocation:
        return SWY_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
        return SWY_ERR_INVALID_ARG;
    default:
        return SWY_ERR_TRANSPORT;
    }
}

swy_status_t nccl_status_from_nccl(ncclResult_t res)
{
    switch (res) {
    case ncclSuccess:
        return SWY_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return SWY_ERR_INVALID_ARG;
    default:
        /* NCCL has no code of its own for memory; cudaMalloc failures
         * come as ncclUnhandledCudaError, with the cause in the log. */
        return SWY_ERR_TRANSPORT;
    }
}

swy_status_t nccl_cuda_fail(nccl_ctx_t *ctx, const char *call,
                            cudaError_t err)
{
    nccl_log(ctx, SWY_LOG_WARN, "%s: %s (%s)", call, cudaGetErrorString(err),
             cudaGetErrorName(err));
    swy_status_t status = nccl_status_from_cuda(err);
    return status == SWY_OK ? SWY_ERR_INTERNAL : status;
}

swy_status_t nccl_nccl_fail(nccl_ctx_t *ctx, const char *call,
                            ncclResult_t res, ncclComm_t comm)
{
    const char *last = ncclGetLastError(comm);
    nccl_log(ctx, SWY_LOG_WARN, "%s: %s (%s)", call, ncclGetErrorString(res),
             last != NULL && last[0] != '\0' ? last : "no further detail");
    swy_status_t status = nccl_status_from_nccl(res);
    return status == SWY_OK ? SWY_ERR_INTERNAL : status;
}

swy_status_t nccl_device_enter(nccl_ctx_t *ctx, int *prev_p)
{
    int prev = -1;
    /* A thread that never used CUDA reports device 0; an error only means
     * that there is nothing to give back. */
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        prev = -1;
    }
    if (prev != ctx->device) {
        cudaError_t err = cudaSetDevice(ctx->device);
        if (err != cudaSuccess)
            return nccl_cuda_fail(ctx, "cudaSetDevice", err);
    }
    *prev_p = prev;
    return SWY_OK;
}

void nccl_device_leave(nccl_ctx_t *ctx, int prev)
{
    /* The caller's thread keeps its own device (a framework's thread may
     * drive another GPU). */
    if (prev >= 0 && prev != ctx->device)
        (void)cudaSetDevice(prev);
}

nccl_waker_t *nccl_waker_create(void)
{
    /* malloc, not the host's allocator: it may outlive finalize(). */
    nccl_waker_t *waker = malloc(sizeof(*waker));
    if (waker == NULL)
        return NULL;
    waker->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (waker->fd < 0) {
        int saved = errno;
        free(waker);
        errno = saved;
        return NULL;
    }
    atomic_init(&waker->fired, 0);
    atomic_init(&waker->refs, 1);
    return waker;
}

void nccl_waker_put(nccl_waker_t *waker)
{
    if (waker != NULL && atomic_fetch_sub(&waker->refs, 1) == 1) {
        close(waker->fd);
        free(waker);
    }
}

/* Runs on CUDA's host-function thread after an operation's event: it may
 * not call CUDA, so it only counts and writes. */
static void CUDART_CB nccl_waker_fire(void *arg)
{
    nccl_waker_t *waker = arg;
    atomic_fetch_add(&waker->fired, 1);
    uint64_t one = 1;
    /* Fails only when the counter would overflow: it is readable then. */
    ssize_t written = write(waker->fd, &one, sizeof(one));
    (void)written;
    nccl_waker_put(waker);
}

swy_status_t nccl_op_record(nccl_ctx_t *ctx, nccl_op_t *op,
                            cudaStream_t stream)
{
    swy_status_t status = SWY_OK;
    if (op->event == NULL) {
        status = nccl_event_get(ctx, &op->event);
        if (status != SWY_OK)
            return status;
    }
    cudaError_t err = cudaEventRecord(op->event, stream);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaEventRecord", err);
    atomic_fetch_add(&ctx->waker->refs, 1);
    err = cudaLaunchHostFunc(stream, nccl_waker_fire, ctx->waker);
    if (err != cudaSuccess) {
        atomic_fetch_sub(&ctx->waker->refs, 1);
        return nccl_cuda_fail(ctx, "cudaLaunchHostFunc", err);
    }
    op->state = NCCL_OP_INFLIGHT;
    swy_list_push_back(&ctx->inflight, &op->link);
    return SWY_OK;
}

swy_status_t nccl_event_get(nccl_ctx_t *ctx, cudaEvent_t *event_p)
{
    if (ctx->n_free_events > 0) {
        *event_p = ctx->free_events[--ctx->n_free_events];
        return SWY_OK;
    }
    cudaEvent_t event;
    cudaError_t err = cudaEventCreateWithFlags(&event,
                                               cudaEventDisableTiming);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaEventCreateWithFlags", err);
    *event_p = event;
    return SWY_OK;
}

void nccl_event_put(nccl_ctx_t *ctx, cudaEvent_t event)
{
    if (event == NULL)
        return;
    if (ctx->n_free_events == ctx->cap_free_events) {
        size_t cap = ctx->cap_free_events ? ctx->cap_free_events * 2 : 64;
        cudaEvent_t *grown = ctx->host->alloc(cap * sizeof(*grown));
        if (grown == NULL) {
            /* Not worth failing for: the event is simply not kept. */
            (void)cudaEventDestroy(event);
            return;
        }
        if (ctx->n_free_events > 0)
            memcpy(grown, ctx->free_events,
                   ctx->n_free_events * sizeof(*grown));
        ctx->host->free(ctx->free_events);
        ctx->free_events = grown;
        ctx->cap_free_events = cap;
    }
    ctx->free_events[ctx->n_free_events++] = event;
}

void nccl_events_destroy(nccl_ctx_t *ctx)
{
    /* cudaEventDestroy of a pending event returns at once; CUDA releases
     * it when the device reaches it. */
    for (size_t i = 0; i < ctx->n_free_events; i++)
        (void)cudaEventDestroy(ctx->free_events[i]);
    ctx->n_free_events = 0;
    ctx->host->free(ctx->free_events);
    ctx->free_events = NULL;
    ctx->cap_free_events = 0;
}

/* Slots come in chunks that live until finalize: cudaFree would wait for
 * the whole device, header receives included, which may never finish. */
static swy_status_t nccl_slot_chunk_add(nccl_ctx_t *ctx)
{
    nccl_slot_chunk_t *chunk = ctx->host->alloc(sizeof(*chunk));
    if (chunk == NULL) {
        nccl_log(ctx, SWY_LOG_WARN, "header slots: out of host memory");
        return SWY_ERR_NO_MEMORY;
    }
    memset(chunk, 0, sizeof(*chunk));
    size_t bytes = sizeof(nccl_header_t) * NCCL_SLOTS_PER_CHUNK;
    cudaError_t err = cudaHostAlloc((void **)&chunk->host, bytes,
                                    cudaHostAllocPortable);
    if (err != cudaSuccess) {
        ctx->host->free(chunk);
        return nccl_cuda_fail(ctx, "cudaHostAlloc (header slots)", err);
    }
    err = cudaMalloc((void **)&chunk->dev, bytes);
    if (err != cudaSuccess) {
        (void)cudaFreeHost(chunk->host);
        ctx->host->free(chunk);
        return nccl_cuda_fail(ctx, "cudaMalloc (header slots)", err);
    }
    for (int i = 0; i < NCCL_SLOTS_PER_CHUNK; i++) {
        nccl_slot_t *slot = &chunk->slots[i];
        slot->host = &chunk->host[i];
        slot->dev = &chunk->dev[i];
        slot->next_free = ctx->free_slots;
        ctx->free_slots = slot;
    }
    chunk->next = ctx->chunks;
    ctx->chunks = chunk;
    return SWY_OK;
}

swy_status_t nccl_slot_get(nccl_ctx_t *ctx, nccl_slot_t **slot_p)
{
    if (ctx->free_slots == NULL) {
        swy_status_t status = nccl_slot_chunk_add(ctx);
        if (status != SWY_OK)
            return status;
    }
    nccl_slot_t *slot = ctx->free_slots;
    ctx->free_slots = slot->next_free;
    slot->next_free = NULL;
    *slot_p = slot;
    return SWY_OK;
}

void nccl_slot_put(nccl_ctx_t *ctx, nccl_slot_t *slot)
{
    if (slot == NULL)
        return;
    slot->next_free = ctx->free_slots;
    ctx->free_slots = slot;
}

void nccl_slots_destroy(nccl_ctx_t *ctx)
{
    while (ctx->chunks != NULL) {
        nccl_slot_chunk_t *chunk = ctx->chunks;
        ctx->chunks = chunk->next;
        (void)cudaFree(chunk->dev);
        (void)cudaFreeHost(chunk->host);
        ctx->host->free(chunk);
    }
    ctx->free_slots = NULL;
}
