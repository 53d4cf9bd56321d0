/* One MoE block of swy-train on the GPU (--device cuda): the same block as
 * moe_block.h, out = x + MoE(x), with every tensor in device memory and
 * the math in the CUDA kernels (kernels/swy_kernels_cuda.h).
 *
 * Per forward: the gate runs on the GPU; topk_idx (after the capacity
 * drop) is copied to the host, where swy_moe_route() exchanges the counts
 * and lays the rows out exactly as on the CPU path; lib/moe's dispatch
 * and combine, on a plan with device rows (SWY_MOE_ROWS_DEVICE, on the
 * block's stream), pack the rows on the GPU, move them by device
 * all-to-alls at high priority and form the gate-weighted sum on the
 * GPU; the local experts run on the received rows in between. Backward
 * mirrors it with lib/moe's backward calls: the same library path as the
 * CPU block's (see moe_block_cuda.c).
 *
 * Pipelining (degree d > 1) as on the CPU: the experts compute on each
 * chunk as it lands (one FFN call per local expert's piece of the chunk)
 * and the chunk's combine goes at once; backward likewise.
 * Packing needs nothing special: it only sets the number of local experts.
 *
 * The parameters (swt_moe_block_params_t, moe_block.h) are DEVICE
 * pointers, borrowed from the model. One training thread uses a block. */
#ifndef SWT_MOE_BLOCK_CUDA_H
#define SWT_MOE_BLOCK_CUDA_H

#include <stdint.h>

#include "moe_block.h"
#include "swy_kernels_cuda.h"
#include "switchyard/moe.h"
#include "switchyard/switchyard.h"
#include "timing.h"

typedef struct swt_moe_block_cuda swt_moe_block_cuda_t;

/** --dtype bf16: the bf16 copies of the block's expert weights (device,
 *  refreshed from the fp32 masters by the model after each update), which
 *  the expert FFN computes with. */
typedef struct {
    const swy_kc_bf16_t *w1, *b1, *w2, *b2;
} swt_moe_block_bf16_t;

/** @param plan a plan with device rows (SWY_MOE_ROWS_DEVICE) on ctx's
 *              stream, of SWY_BFLOAT16 rows with @p w16, else SWY_FLOAT32.
 *  @param w16  NULL: fp32 activations. Else bf16 activations (x, out,
 *              dout, dx and every row are bf16) and expert weights; the
 *              gate computes in fp32 (from x converted) with the fp32
 *              gate weights, and every gradient is fp32.
 *  @param ctx  the model's kernel context (its stream carries every
 *              kernel of the block); borrowed, as are plan and comm.
 *  @return SWY_OK, SWY_ERR_NO_MEMORY (host), SWY_ERR_SYSTEM (a device
 *          allocation; the cause is printed). */
swy_status_t swt_moe_block_cuda_create(swy_moe_plan_t plan, swy_comm_t comm,
                                       swy_kc_ctx_t *ctx,
                                       const swt_moe_block_params_t *params,
                                       const swt_moe_block_bf16_t *w16,
                                       swt_moe_block_cuda_t **blk_p);
void swt_moe_block_cuda_destroy(swt_moe_block_cuda_t *blk);

/** Forward: out[S][H] = x + MoE(x), device pointers (float, or bf16 for
 *  a bf16 block). x must stay unchanged until the backward. Sets the
 *  block's auxiliary loss and drop count. */
swy_status_t swt_moe_block_cuda_forward(swt_moe_block_cuda_t *blk,
                                        const void *x, void *out,
                                        swt_timing_t *tm);

/** Backward: dx[S][H] = dout + d MoE(x)/dx (overwritten; device
 *  pointers); accumulates the gate and expert gradients. */
swy_status_t swt_moe_block_cuda_backward(swt_moe_block_cuda_t *blk,
                                         const void *dout, void *dx,
                                         swt_timing_t *tm);

/** The last forward's auxiliary loss, mean over gate groups. */
double swt_moe_block_cuda_aux(const swt_moe_block_cuda_t *blk);

/** Slots dropped by capacity in the last forward. */
int swt_moe_block_cuda_dropped(const swt_moe_block_cuda_t *blk);

/** Rows this rank sent to each global expert in the last forward, [E]
 *  (host memory). */
const int64_t *swt_moe_block_cuda_sent(const swt_moe_block_cuda_t *blk);

/** Print "swy-train: <where>: <call> failed: <kernel error>" and return
 *  SWY_ERR_SYSTEM. For the CUDA files of swy-train. */
swy_status_t swt_cuda_fail(const char *where, const char *call);

/* Run a swy_kc_* call; on failure report it (with the text of the call)
 * and return SWY_ERR_SYSTEM from the enclosing function. */
#define SWT_KC(where, call)                                                  \
    do {                                                                     \
        if ((call) != 0)                                                     \
            return swt_cuda_fail((where), #call);                            \
    } while (0)

#endif /* SWT_MOE_BLOCK_CUDA_H */
