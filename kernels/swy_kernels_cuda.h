/* Switchyard reference MoE kernels, CUDA twin of swy_kernels.h.
 *
 * Every CPU function swy_k_<name> of swy_kernels.h has a twin
 * swy_kc_<name> here that computes the same thing on the GPU (the same
 * per-element formulas, from elem.h), except swy_k_gate_capacity and
 * swy_k_gate_capacity_shares (pure host arithmetic: call them) and
 * swy_k_blas_set_threads (nothing to cap).
 *
 * Conventions, beyond those of swy_kernels.h:
 * - This is a C header with no CUDA include: C callers (swy-train, tests,
 *   benchmarks) link swy_kernels_cuda_dep and need nothing else.  A CUDA
 *   stream travels as `void *` (a cudaStream_t; NULL = the default stream).
 * - First argument: a context (a cuBLAS handle bound to one stream, and a
 *   little device scratch).  Every kernel is enqueued on the context's
 *   stream and returns without waiting for it: results are ready once the
 *   stream is synchronized (swy_kc_stream_sync).  One context must not be
 *   used by two host threads at once; give each thread its own.
 * - Array arguments are DEVICE pointers, with the shapes and the
 *   overwritten/accumulated rules of the CPU function named in each
 *   comment ("as swy_k_ffn_fwd"), with one exception: the
 *   rows_per_expert arguments of the FFN kernels are HOST arrays
 *   [n_experts], since the GEMM launches need the row counts (the layout
 *   is known on the host after routing; copy expert_counts back first).
 * - CPU functions that return a value get an extra last argument: a device
 *   pointer where that value is written (nothing synchronizes).
 * - Status: every function returns 0 on success and nonzero on failure;
 *   swy_kc_error_string() then says what failed (function, CUDA or cuBLAS
 *   call, its error name).  Bad sizes (negative, k > E, ...) fail with
 *   nonzero instead of asserting.  A failure inside an already enqueued
 *   kernel (e.g. an illegal address) is reported by a later call, usually
 *   swy_kc_stream_sync, as CUDA reports it.
 * - fp32 kernels compute in fp32 (cuBLAS with CUBLAS_COMPUTE_32F, no TF32)
 *   and match the CPU ones to rounding (GEMM summation order, fused
 *   multiply-adds and the device's expf/tanhf differ).  Integer outputs
 *   (top-k choices, dropping, sorting) are exactly the CPU ones, same
 *   stable order.  Column sums (bias gradients) are deterministic; the
 *   scatter-adds of swy_kc_embed_bwd use atomics and are not.
 * - bf16 variants (suffix _bf16): every tensor is bf16 (swy_kc_bf16_t,
 *   the top 16 bits of a binary32) EXCEPT accumulated parameter gradients
 *   (dw, db, dw1, db1, dw2, db2), which are fp32, and topk_w / dtopk_w,
 *   which stay fp32.  Arithmetic accumulates in fp32 (cuBLAS
 *   CUBLAS_COMPUTE_32F on bf16 inputs) and rounds each bf16 output once,
 *   to nearest even (swy_e_f32_to_bf16).
 */
#ifndef SWY_KERNELS_CUDA_H
#define SWY_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* For swy_k_drop_order_t and swy_k_adam_params_t only (declarations; the
 * CUDA library does not link the CPU one). */
#include "swy_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/** bf16 storage: the top 16 bits of an IEEE binary32 (as uint16_t in
 *  swy_k_f32_to_bf16). */
typedef uint16_t swy_kc_bf16_t;

/* ======================================================================
 * Errors, runtime helpers (status.cu, runtime.cu)
 * ====================================================================== */

/** The text of this thread's last failure, e.g. "swy_kc_ffn_fwd:
 *  cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE"; "" before any.  Never
 *  NULL.  Valid until the thread's next failing call. */
const char *swy_kc_error_string(void);

/** Number of CUDA devices; 0 when there is no driver, no GPU, or any other
 *  error (never fails; the reason is left in swy_kc_error_string). */
int swy_kc_device_count(void);

/** cudaSetDevice(dev) for the calling thread. */
int swy_kc_set_device(int dev);

/** The current device's name (cudaDeviceProp.name), NUL-terminated and
 *  truncated to len - 1 characters. */
int swy_kc_device_name(char *name, size_t len);

/** A non-blocking stream (cudaStreamNonBlocking) on the current device,
 *  with the greatest priority when high_priority != 0, else the default
 *  priority.  *stream_p is set on success only. */
int swy_kc_stream_create(int high_priority, void **stream_p);

/** Destroys a stream from swy_kc_stream_create; NULL is a no-op. */
int swy_kc_stream_destroy(void *stream);

/** Waits for everything enqueued on the stream (NULL: the default stream)
 *  and reports any asynchronous failure of it. */
int swy_kc_stream_sync(void *stream);

/** cudaMalloc; bytes == 0 gives *p = NULL and success. */
int swy_kc_malloc(void **p, size_t bytes);

/** cudaFree; NULL is a no-op. */
int swy_kc_free(void *p);

/** Device memset.  stream NULL: synchronous (returns when done); else
 *  enqueued on the stream.  The same holds for the copies below. */
int swy_kc_memset(void *p, int v, size_t bytes, void *stream);

/** Copies host to device, device to host, device to device.  With a stream
 *  they are asynchronous (for a host buffer that is not pinned CUDA may
 *  return early only after staging it); with NULL they are synchronous. */
int swy_kc_memcpy_h2d(void *dst, const void *src, size_t bytes,
                      void *stream);
int swy_kc_memcpy_d2h(void *dst, const void *src, size_t bytes,
                      void *stream);
int swy_kc_memcpy_d2d(void *dst, const void *src, size_t bytes,
                      void *stream);

/** CUDA events for timing (benchmarks).  create: a timing event; record:
 *  enqueue it on a stream (NULL: default); elapsed: waits for `end` and
 *  sets *ms to the time between the two records; destroy: NULL ok. */
int swy_kc_event_create(void **event_p);
int swy_kc_event_record(void *event, void *stream);
int swy_kc_event_elapsed_ms(void *start, void *end, float *ms_p);
int swy_kc_event_destroy(void *event);

/* ======================================================================
 * Context (runtime.cu)
 * ====================================================================== */

typedef struct swy_kc_ctx swy_kc_ctx_t;

/** A context on the current device: a cuBLAS handle bound to `stream`
 *  (NULL = the default stream; not owned), pure fp32 math mode, and a
 *  small device scratch.  *ctx_p is set on success only. */
int swy_kc_ctx_create(void *stream, swy_kc_ctx_t **ctx_p);

/** Destroys a context (waits for nothing; the caller synchronizes first if
 *  kernels may still run).  NULL is a no-op. */
void swy_kc_ctx_destroy(swy_kc_ctx_t *ctx);

/** The stream the context enqueues on (NULL = default stream). */
void *swy_kc_ctx_stream(swy_kc_ctx_t *ctx);

/** Fused GEMM epilogues (cuBLASLt): the linear and expert-FFN kernels add
 *  their biases, and in bf16 apply GELU and its gradient, inside the GEMM
 *  instead of in separate passes over memory.  On by default; off when
 *  SWY_KC_EPILOGUES=0 at context creation, or with on = 0 here.  Where
 *  cuBLASLt offers no algorithm for a GEMM, that GEMM takes the separate
 *  passes (same results within rounding; counted below).  Not for a row
 *  context. */
int swy_kc_ctx_set_epilogues(swy_kc_ctx_t *ctx, int on);

/** *on: whether epilogues are on now; GEMMs run with a fused epilogue,
 *  and those that fell back to separate passes, since the context was
 *  made; *why is the last fallback's reason ("" if none; valid until the
 *  next kernel call on ctx). */
int swy_kc_ctx_epilogue_stats(swy_kc_ctx_t *ctx, int *on,
                              unsigned long *fused, unsigned long *fell_back,
                              const char **why);

/** Grouped expert GEMMs (cublasGemmGroupedBatchedEx, cuBLAS 12.5 or
 *  later): swy_kc_ffn_fwd/_bwd and their _bf16 twins run each GEMM of the
 *  layer for all its non-empty experts in one call (up to 128 experts a
 *  call) instead of one call per expert; the biases seed the outputs, GELU
 *  and its gradient and the bias gradients are one pass over all rows.
 *  For the expert FFN this replaces the fused epilogues.  bf16 weight
 *  gradients (bf16 inputs, fp32 output) stay one call per expert: the
 *  grouped call has no such pair of types.  bf16 GEMMs whose matrices do
 *  not all start 16-byte aligned (e.g. H or F not a multiple of 8), and
 *  a grouped call that cuBLAS refuses as not supported, run per expert
 *  (counted below).  Off by default: not yet run on a GPU.  On when
 *  SWY_KC_GROUPED=1 at context creation, or with on = 1 here; an error
 *  where cuBLAS is older than 12.5.  Not for a row context. */
int swy_kc_ctx_set_grouped(swy_kc_ctx_t *ctx, int on);

/** *on: whether grouped GEMMs are on; grouped calls made, and GEMMs
 *  that could have been grouped but ran per expert (unaligned bf16, or
 *  refused by cuBLAS), since the context was made; *why the last such
 *  reason ("" if none; valid until the next kernel call on ctx). */
int swy_kc_ctx_grouped_stats(swy_kc_ctx_t *ctx, int *on, unsigned long *calls,
                             unsigned long *fell_back, const char **why);

/** A row context (status.cu; the static library swy_kernels_cuda_rows
 *  holds it with the row kernels, and needs no cuBLAS): the stream and
 *  the current device's SM count, nothing else, for the row kernels alone
 *  (pack, pack_bwd, unpack, gather_rows, combine_fwd, combine_bwd and
 *  their _bf16 twins); any other kernel must not be given it.  It holds
 *  no device memory, so swy_kc_rows_ctx_set_stream may rebind it to any
 *  stream at any time (also one of another device, made current: the SM
 *  count only caps a grid-stride loop).  Not thread-safe (as every use of
 *  one context).  Destroy it with swy_kc_rows_ctx_destroy. */
int swy_kc_rows_ctx_create(void *stream, swy_kc_ctx_t **ctx_p);
int swy_kc_rows_ctx_set_stream(swy_kc_ctx_t *ctx, void *stream);
void swy_kc_rows_ctx_destroy(swy_kc_ctx_t *ctx);

/* ======================================================================
 * Gate (gate.cu)
 * ====================================================================== */

/** As swy_k_gate_logits_fwd. */
int swy_kc_gate_logits_fwd(swy_kc_ctx_t *ctx, const float *x, const float *wg,
                           int S, int H, int E, float *logits);

/** As swy_k_gate_logits_bwd (dx may be NULL). */
int swy_kc_gate_logits_bwd(swy_kc_ctx_t *ctx, const float *x,
                           const float *wg, const float *dlogits, int S,
                           int H, int E, float *dx, float *dwg);

/** As swy_k_softmax_fwd (probs may alias logits). */
int swy_kc_softmax_fwd(swy_kc_ctx_t *ctx, const float *logits, int S, int E,
                       float *probs);

/** As swy_k_softmax_bwd (dlogits may alias dprobs). */
int swy_kc_softmax_bwd(swy_kc_ctx_t *ctx, const float *probs,
                       const float *dprobs, int S, int E, float *dlogits);

/** As swy_k_gate_topk (k <= 64, as the CPU's bound). */
int swy_kc_gate_topk(swy_kc_ctx_t *ctx, const float *logits, int S, int E,
                     int k, int renormalize, int *topk_idx, float *topk_w,
                     float *probs);

/** As swy_k_gate_topk_bwd. */
int swy_kc_gate_topk_bwd(swy_kc_ctx_t *ctx, const float *probs,
                         const float *dtopk_w, int S, int E, int k,
                         int renormalize, float *dprobs);

/** As swy_k_gate_topk_bwd_idx (choice_idx [S][k] device, valid experts). */
int swy_kc_gate_topk_bwd_idx(swy_kc_ctx_t *ctx, const float *probs,
                             const int *choice_idx, const float *dtopk_w,
                             int S, int E, int k, int renormalize,
                             float *dprobs);

/** As swy_k_gate_topo_reroute (node_of_expert [E] is a device array); the
 *  number of rerouted tokens is written to *rerouted_d (device int).  The
 *  same tokens are rerouted as on the CPU (ties included).  Needs S floats
 *  of context workspace: the first call with a larger S than before
 *  synchronizes the context's stream to grow it. */
int swy_kc_gate_topo_reroute(swy_kc_ctx_t *ctx, const float *probs, int S,
                             int E, int k, int renormalize,
                             const int *node_of_expert, int my_node,
                             double max_cross_frac, int *topk_idx,
                             float *topk_w, int *rerouted_d);

/** As swy_k_gate_drop; the number of dropped slots is written to
 *  *dropped_d (device int). */
int swy_kc_gate_drop(swy_kc_ctx_t *ctx, int *topk_idx, float *topk_w, int S,
                     int k, int E, int capacity, swy_k_drop_order_t order,
                     int *expert_load, int *dropped_d);

/** As swy_k_gate_drop_each (capacity [E] a DEVICE array, e.g. from
 *  swy_k_gate_capacity_shares copied over); the number of dropped slots is
 *  written to *dropped_d (device int). */
int swy_kc_gate_drop_each(swy_kc_ctx_t *ctx, int *topk_idx, float *topk_w,
                          int S, int k, int E, const int *capacity,
                          swy_k_drop_order_t order, int *expert_load,
                          int *dropped_d);

/** As swy_k_gate_aux_loss; l_aux is written to *laux_d (device float). */
int swy_kc_gate_aux_loss(swy_kc_ctx_t *ctx, const float *probs, int S, int E,
                         int f_slots, float *f, float *laux_d);

/** As swy_k_gate_aux_loss_bwd (dprobs accumulated). */
int swy_kc_gate_aux_loss_bwd(swy_kc_ctx_t *ctx, const float *f, int S, int E,
                             float dloss, float *dprobs);

/* ======================================================================
 * Counting sort (sort.cu)
 * ====================================================================== */

/** As swy_k_sort_slots; the number of rows (kept slots) is written to
 *  *n_rows_d (device int), and is also expert_offsets[E]. */
int swy_kc_sort_slots(swy_kc_ctx_t *ctx, const int *topk_idx, int S, int k,
                      int n_ranks, int experts_per_rank, int *expert_counts,
                      int *expert_offsets, int *row_of_slot, int *n_rows_d);

/** As swy_k_sort_rank_counts. */
int swy_kc_sort_rank_counts(swy_kc_ctx_t *ctx, const int *expert_counts,
                            int n_ranks, int experts_per_rank,
                            int *rank_counts);

/** As swy_k_sort_invert. */
int swy_kc_sort_invert(swy_kc_ctx_t *ctx, const int *row_of_slot, int n_slots,
                       int n_rows, int *slot_of_row);

/* ======================================================================
 * Pack / unpack rows (pack.cu)
 * ====================================================================== */

/** As swy_k_pack. */
int swy_kc_pack(swy_kc_ctx_t *ctx, const float *x, const int *row_of_slot,
                int S, int k, int H, float *send);

/** As swy_k_pack_bwd. */
int swy_kc_pack_bwd(swy_kc_ctx_t *ctx, const float *dsend,
                    const int *row_of_slot, int S, int k, int H, float *dx);

/** As swy_k_unpack. */
int swy_kc_unpack(swy_kc_ctx_t *ctx, const float *recv,
                  const int *row_of_slot, int S, int k, int H, float *slots);

/** As swy_k_gather_rows. */
int swy_kc_gather_rows(swy_kc_ctx_t *ctx, const float *src,
                       const int *src_row, int n, int H, float *dst);

int swy_kc_pack_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                     const int *row_of_slot, int S, int k, int H,
                     swy_kc_bf16_t *send);
/** dx = the fp32 sum of the kept rows, rounded once. */
int swy_kc_pack_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *dsend,
                         const int *row_of_slot, int S, int k, int H,
                         swy_kc_bf16_t *dx);
int swy_kc_unpack_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *recv,
                       const int *row_of_slot, int S, int k, int H,
                       swy_kc_bf16_t *slots);
int swy_kc_gather_rows_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *src,
                            const int *src_row, int n, int H,
                            swy_kc_bf16_t *dst);

/* ======================================================================
 * Expert FFN (ffn.cu).  rows_per_expert is a HOST array [n_experts].
 * ====================================================================== */

/** As swy_k_ffn_fwd. */
int swy_kc_ffn_fwd(swy_kc_ctx_t *ctx, const float *x,
                   const int *rows_per_expert, int n_experts, int H, int F,
                   const float *w1, const float *b1, const float *w2,
                   const float *b2, float *h_pre, float *h_act, float *y);

/** As swy_k_ffn_bwd (dx may be NULL). */
int swy_kc_ffn_bwd(swy_kc_ctx_t *ctx, const float *x, const float *h_pre,
                   const float *h_act, const float *dy,
                   const int *rows_per_expert, int n_experts, int H, int F,
                   const float *w1, const float *w2, float *dh, float *dx,
                   float *dw1, float *db1, float *dw2, float *db2);

/** bf16: x, weights, biases, h_pre, h_act, y are bf16.  h_act is gelu of
 *  the pre-activation: of the stored (rounded) h_pre in separate passes,
 *  of its fp32 value when fused in the GEMM (swy_kc_ctx_set_epilogues);
 *  the two differ within bf16 rounding. */
int swy_kc_ffn_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                        const int *rows_per_expert, int n_experts, int H,
                        int F, const swy_kc_bf16_t *w1,
                        const swy_kc_bf16_t *b1, const swy_kc_bf16_t *w2,
                        const swy_kc_bf16_t *b2, swy_kc_bf16_t *h_pre,
                        swy_kc_bf16_t *h_act, swy_kc_bf16_t *y);

/** bf16: the scratch dh and dx are bf16; dw1, db1, dw2, db2 are fp32 and
 *  accumulated. */
int swy_kc_ffn_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                        const swy_kc_bf16_t *h_pre,
                        const swy_kc_bf16_t *h_act, const swy_kc_bf16_t *dy,
                        const int *rows_per_expert, int n_experts, int H,
                        int F, const swy_kc_bf16_t *w1,
                        const swy_kc_bf16_t *w2, swy_kc_bf16_t *dh,
                        swy_kc_bf16_t *dx, float *dw1, float *db1,
                        float *dw2, float *db2);

/* ======================================================================
 * Combine (combine.cu)
 * ====================================================================== */

/** As swy_k_combine_fwd. */
int swy_kc_combine_fwd(swy_kc_ctx_t *ctx, const float *rows,
                       const int *row_of_slot, const float *topk_w, int S,
                       int k, int H, float *out);

/** As swy_k_combine_bwd (drows or dtopk_w may be NULL). */
int swy_kc_combine_bwd(swy_kc_ctx_t *ctx, const float *rows,
                       const int *row_of_slot, const float *topk_w,
                       const float *dout, int S, int k, int H, float *drows,
                       float *dtopk_w);

/** bf16 rows and out; topk_w fp32. */
int swy_kc_combine_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *rows,
                            const int *row_of_slot, const float *topk_w,
                            int S, int k, int H, swy_kc_bf16_t *out);

/** bf16 rows, dout, drows; topk_w and dtopk_w fp32. */
int swy_kc_combine_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *rows,
                            const int *row_of_slot, const float *topk_w,
                            const swy_kc_bf16_t *dout, int S, int k, int H,
                            swy_kc_bf16_t *drows, float *dtopk_w);

/* ======================================================================
 * Dense layers (linear.cu, act.cu, embed.cu)
 * ====================================================================== */

/** As swy_k_linear_fwd (b may be NULL). */
int swy_kc_linear_fwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                      const float *b, int N, int in, int out, float *y);

/** As swy_k_linear_bwd (dx, db may be NULL). */
int swy_kc_linear_bwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                      const float *dy, int N, int in, int out, float *dx,
                      float *dw, float *db);

/** bf16 x, w, b (may be NULL), y. */
int swy_kc_linear_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                           const swy_kc_bf16_t *w, const swy_kc_bf16_t *b,
                           int N, int in, int out, swy_kc_bf16_t *y);

/** bf16 x, w, dy, dx (may be NULL); fp32 dw, db (may be NULL),
 *  accumulated. */
int swy_kc_linear_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                           const swy_kc_bf16_t *w, const swy_kc_bf16_t *dy,
                           int N, int in, int out, swy_kc_bf16_t *dx,
                           float *dw, float *db);

/** h_pre = x w + b (b may be NULL) and h_act = gelu(h_pre), as
 *  swy_k_linear_fwd then swy_k_gelu_fwd: one GEMM in bf16 with fused
 *  epilogues (swy_kc_ctx_set_epilogues), where h_act is gelu of the fp32
 *  pre-activation, as in swy_kc_ffn_fwd_bf16. */
int swy_kc_linear_gelu_fwd(swy_kc_ctx_t *ctx, const float *x, const float *w,
                           const float *b, int N, int in, int out,
                           float *h_pre, float *h_act);
int swy_kc_linear_gelu_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                                const swy_kc_bf16_t *w,
                                const swy_kc_bf16_t *b, int N, int in,
                                int out, swy_kc_bf16_t *h_pre,
                                swy_kc_bf16_t *h_act);

/** The backward of y = x w + b where x = gelu(x_pre): dw += x^T dy and
 *  db += the column sums of dy (fp32; db may be NULL), and dx = (dy w^T)
 *  gelu'(x_pre), the gradient of x_pre (dx [N][in], not NULL, aliasing
 *  neither x nor x_pre): swy_k_linear_bwd then swy_k_gelu_bwd, the
 *  second fused into the GEMM in bf16. */
int swy_kc_linear_dgelu_bwd(swy_kc_ctx_t *ctx, const float *x,
                            const float *x_pre, const float *w,
                            const float *dy, int N, int in, int out,
                            float *dx, float *dw, float *db);
int swy_kc_linear_dgelu_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                                 const swy_kc_bf16_t *x_pre,
                                 const swy_kc_bf16_t *w,
                                 const swy_kc_bf16_t *dy, int N, int in,
                                 int out, swy_kc_bf16_t *dx, float *dw,
                                 float *db);

/** As swy_k_gelu_fwd (y may alias x). */
int swy_kc_gelu_fwd(swy_kc_ctx_t *ctx, const float *x, size_t n, float *y);

/** As swy_k_gelu_bwd (dx may alias dy). */
int swy_kc_gelu_bwd(swy_kc_ctx_t *ctx, const float *x, const float *dy,
                    size_t n, float *dx);

/** As swy_k_add. */
int swy_kc_add(swy_kc_ctx_t *ctx, const float *x, size_t n, float *y);

int swy_kc_gelu_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                         swy_kc_bf16_t *y);
int swy_kc_gelu_bwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x,
                         const swy_kc_bf16_t *dy, size_t n,
                         swy_kc_bf16_t *dx);
int swy_kc_add_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                    swy_kc_bf16_t *y);

/** As swy_k_embed_fwd (ids in [0, vocab); not checked). */
int swy_kc_embed_fwd(swy_kc_ctx_t *ctx, const float *table, const int *ids,
                     int S, int H, float *out);

/** As swy_k_embed_bwd (atomic scatter-add: not bitwise deterministic). */
int swy_kc_embed_bwd(swy_kc_ctx_t *ctx, const float *dout, const int *ids,
                     int S, int H, float *dtable);

int swy_kc_embed_fwd_bf16(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *table,
                          const int *ids, int S, int H, swy_kc_bf16_t *out);

/* ======================================================================
 * Loss (loss.cu)
 * ====================================================================== */

/** As swy_k_xent_fwd (probs may be NULL); the mean loss is written to
 *  *loss_d (device float). */
int swy_kc_xent_fwd(swy_kc_ctx_t *ctx, const float *logits, const int *labels,
                    int S, int C, float *probs, float *loss_d);

/** As swy_k_xent_bwd. */
int swy_kc_xent_bwd(swy_kc_ctx_t *ctx, const float *logits, const int *labels,
                    int S, int C, float dloss, float *dlogits);

/* ======================================================================
 * Optimizer (adam.cu)
 * ====================================================================== */

/** As swy_k_adam_step; hp is a host pointer, read before returning. */
int swy_kc_adam_step(swy_kc_ctx_t *ctx, float *param, const float *grad,
                     float *m, float *v, size_t n,
                     const swy_k_adam_params_t *hp, long step);

/* ======================================================================
 * Conversion (convert.cu)
 * ====================================================================== */

/** As swy_k_f32_to_bf16. */
int swy_kc_f32_to_bf16(swy_kc_ctx_t *ctx, const float *x, size_t n,
                       swy_kc_bf16_t *y);

/** As swy_k_bf16_to_f32. */
int swy_kc_bf16_to_f32(swy_kc_ctx_t *ctx, const swy_kc_bf16_t *x, size_t n,
                       float *y);

#ifdef __cplusplus
}
#endif

#endif /* SWY_KERNELS_CUDA_H */
