/**
 * @file swy_devmoe_v1.h
 * @brief Row kernels of the MoE exchange on device memory that a transport
 *        plugin may export, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_devmoe_v2.h) with a new symbol.
 *
 * lib/moe (moe.h) moves rows between a framework's token-side and
 * expert-side buffers and the all-to-all buffers: it copies each token
 * into its slots' rows (pack), reorders rows between the rank-major wire
 * order and the expert-major order (gather_rows), sums a token's slots
 * weighted by the gate (combine_fwd) and forms the backward of both. On
 * host memory it does so itself; for a plan whose rows are device memory
 * (swy_moe_config_t.mem = SWY_MEM_CUDA) it calls this table, which a
 * plugin that moves device memory (plugins/transport/nccl) exports as
 * `const swy_devmoe_v1_t swy_devmoe_plugin_v1` next to
 * swy_device_plugin_v1. libswitchyard includes no CUDA header.
 *
 * Every kernel function is stream-ordered: it enqueues its work on
 * `stream` (a cudaStream_t; NULL = the legacy default stream) after the
 * work queued there before, and returns without waiting for it. Arrays are
 * device memory unless said otherwise. Row elements are of `dtype`,
 * SWY_FLOAT32 or SWY_BFLOAT16 (another dtype is SWY_ERR_UNSUPPORTED);
 * gate weights (topk_w, dtopk_w) are float. Sums run in fp32 and round
 * once. Row indices are int32; -1 marks a dropped slot (or a row no
 * source maps to). Sizes are >= 0; an empty call enqueues nothing.
 *
 * Status: SWY_OK once enqueued; SWY_ERR_INVALID_ARG (a negative size, a
 * NULL array with rows to touch), SWY_ERR_UNSUPPORTED (dtype),
 * SWY_ERR_NO_MEMORY, SWY_ERR_TRANSPORT (the launch failed);
 * error_string() says what. A fault inside an enqueued kernel is reported
 * by a later call, as CUDA reports it.
 *
 * Threading: every function may be called from any thread at any time
 * after dlopen and must be thread-safe.
 */
#ifndef SWY_DEVMOE_V1_H
#define SWY_DEVMOE_V1_H

#include <stddef.h>
#include <stdint.h>

#include "swy_transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_DEVMOE_ABI_V1 1u
#define SWY_DEVMOE_PLUGIN_SYMBOL_V1 "swy_devmoe_plugin_v1"

typedef struct swy_devmoe_v1 {
    uint32_t abi_version; /**< SWY_DEVMOE_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_devmoe_v1_t) */
    const char *name;     /**< e.g. "cuda" */

    /** Device memory of at least bytes (bytes 0: a valid pointer to no
     *  bytes); NULL on failure. free_mem accepts NULL; the caller frees
     *  only memory no queued work still uses (it synchronizes first). */
    void *(*alloc)(size_t bytes);
    void (*free_mem)(void *ptr);

    /** Copy bytes of host memory src to device memory dst on stream,
     *  after the work queued there; src may be reused once this returns. */
    swy_status_t (*upload)(void *stream, void *dst, const void *src,
                           size_t bytes);
    /** Copy bytes of device memory src to host memory dst after the work
     *  queued on stream; returns when dst holds them. */
    swy_status_t (*download)(void *stream, void *dst, const void *src,
                             size_t bytes);

    /** send[row_of_slot[t*k + j]] = x[t] for every slot with a row >= 0
     *  (x [S][H], row_of_slot [S*k]); other rows of send untouched. */
    swy_status_t (*pack)(void *stream, swy_dtype_t dtype, const void *x,
                         const int32_t *row_of_slot, int S, int k, int H,
                         void *send);
    /** dx[t] = sum over slots with a row >= 0 of dsend[row_of_slot[t*k+j]]
     *  ([S][H] overwritten; zeros for a token with no row). */
    swy_status_t (*pack_bwd)(void *stream, swy_dtype_t dtype,
                             const void *dsend, const int32_t *row_of_slot,
                             int S, int k, int H, void *dx);
    /** dst[i] = src[src_row[i]] for i < n (zeros where src_row[i] is -1);
     *  dst must not overlap src. */
    swy_status_t (*gather_rows)(void *stream, swy_dtype_t dtype,
                                const void *src, const int32_t *src_row,
                                int n, int H, void *dst);
    /** out[t] = sum over slots with a row >= 0 of
     *  topk_w[t*k + j] * rows[row_of_slot[t*k + j]] ([S][H] overwritten;
     *  zeros for a token with no row). */
    swy_status_t (*combine_fwd)(void *stream, swy_dtype_t dtype,
                                const void *rows, const int32_t *row_of_slot,
                                const float *topk_w, int S, int k, int H,
                                void *out);
    /** Backward of combine_fwd: drows[row_of_slot[t*k+j]] =
     *  topk_w[t*k+j] * dout[t] for every slot with a row (other rows
     *  untouched), and dtopk_w[t*k+j] = dot(dout[t], rows[row]) or 0 for
     *  a slot without a row. drows or dtopk_w may be NULL. */
    swy_status_t (*combine_bwd)(void *stream, swy_dtype_t dtype,
                                const void *rows, const int32_t *row_of_slot,
                                const float *topk_w, const void *dout, int S,
                                int k, int H, void *drows, float *dtopk_w);

    /** Text of the last failure of a function above on the calling
     *  thread; never NULL. */
    const char *(*error_string)(void);
} swy_devmoe_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_DEVMOE_V1_H */
