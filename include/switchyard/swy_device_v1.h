/**
 * @file swy_device_v1.h
 * @brief Device-memory services a transport plugin may export, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_device_v2.h) with a new symbol.
 *
 * libswitchyard includes no CUDA header.  A plugin that moves device
 * memory (plugins/transport/nccl) also exports
 * `const swy_device_v1_t swy_device_plugin_v1`; the host finds it with
 * dlsym next to swy_transport_plugin_v1 and uses it to
 *  - tell the memory type of every user buffer (mem_type),
 *  - order a collective after the work queued on the caller's stream
 *    (stream_sync),
 *  - copy between host and device memory where a collective moves data
 *    inside one rank (copy), and stage device buffers through host memory
 *    where the host must compute on them (allreduce's reduction),
 *  - post sends with a priority, so the plugin can put them on its
 *    high- or low-priority stream and communicator (isend_prio);
 *  - (optional) order an op on the caller's stream without
 *    blocking the host: learn when the work queued before the post has
 *    finished (stream_notify), hold the work queued after it until the
 *    op completes (stream_gate, gate_open), and refuse a stream being
 *    captured into a CUDA graph (stream_capturing).
 *
 * The stream functions may be NULL: the host then falls back to
 * stream_sync, blocking the caller.
 *
 * Process-wide functions (mem_type, stream_sync, copy, host_alloc,
 * host_free, device_count, error_string and the stream functions) may be
 * called from any thread at any time after dlopen, with or without a
 * transport context, and must be thread-safe.  isend_prio follows the
 * threading rules of swy_transport_v1_t (called under the context's
 * lock).
 */
#ifndef SWY_DEVICE_V1_H
#define SWY_DEVICE_V1_H

#include <stddef.h>
#include <stdint.h>

#include "swy_transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_DEVICE_ABI_V1 1u
#define SWY_DEVICE_PLUGIN_SYMBOL_V1 "swy_device_plugin_v1"

typedef struct swy_device_v1 {
    uint32_t abi_version; /**< SWY_DEVICE_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_device_v1_t) */
    const char *name;     /**< e.g. "cuda" */

    /** Number of usable devices; 0 when there is no driver or no device
     *  (the host then treats every buffer as host memory and never calls
     *  the other functions). */
    int (*device_count)(void);

    /** SWY_MEM_CUDA for device (and managed) memory, SWY_MEM_HOST for
     *  anything else, including pointers the runtime does not know. */
    swy_mem_type_t (*mem_type)(const void *ptr);

    /** Block until all work queued on stream (a cudaStream_t; NULL = the
     *  legacy default stream) before this call has finished. */
    swy_status_t (*stream_sync)(void *stream);

    /** Copy bytes between any two pointers (host or device, any
     *  direction); returns when the copy is complete.  The regions must
     *  not overlap. */
    swy_status_t (*copy)(void *dst, const void *src, size_t bytes);

    /** Page-locked host memory for staging (NULL on failure); host_free
     *  accepts NULL. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *ptr);

    /** Text of the last failure of a function above on the calling
     *  thread (e.g. "cudaMemcpy: invalid argument"); never NULL. */
    const char *(*error_string)(void);

    /** As swy_transport_v1_t.isend on the context of the same plugin, with
     *  the op's priority (SWY_PRIO_*; 0..1000, higher first).  The
     *  receiver does not need to know the priority. */
    swy_status_t (*isend_prio)(void *ctx, int peer, uint64_t tag,
                               const void *buf, size_t len,
                               swy_mem_type_t mem, int priority,
                               swy_transport_complete_cb_v1_t cb,
                               void *cb_arg, void **handle_p);

    /* Optional (all four or none): ordering on the caller's stream. */

    /** Call done(arg) once, on a thread of the plugin's, when all work
     *  queued on stream before this call has finished (as
     *  cudaLaunchHostFunc). done must not call this table's functions or
     *  block for long: it only tells the host. */
    swy_status_t (*stream_notify)(void *stream, void (*done)(void *arg),
                                  void *arg);
    /** Hold the work queued on stream after this call until gate_open()
     *  of *gate_p (e.g. cuStreamWaitValue32 on a flag in mapped host
     *  memory). The host opens every gate it made, exactly once. */
    swy_status_t (*stream_gate)(void *stream, void **gate_p);
    /** Let the stream pass the gate; the gate is released by the plugin
     *  (once the stream has passed it). Called from any host thread, never
     *  from a done() callback. */
    void (*gate_open)(void *gate);
    /** 1 when stream is being captured into a CUDA graph, 0 when not, < 0
     *  on failure (error_string says why). */
    int (*stream_capturing)(void *stream);
} swy_device_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_DEVICE_V1_H */
