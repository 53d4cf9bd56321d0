/* What the CPU model (model.c) and the GPU model (model_cuda.c) of
 * swy-train share, so that both hold the same model and talk to DDP and
 * lib/moe the same way: the parameter layout (which tensors, their sizes
 * and offsets in the two flat buffers, the tensor sizes DDP buckets), the
 * seeded initialization (on host buffers; the GPU model copies them to
 * the device), lib/moe's plan of the experts over the ranks, the blocks'
 * parameters, and the hash of the dense parameters. No device math here.
 *
 * Dense buffer, in the order backward produces the gradients, so that DDP
 * buckets are contiguous (ddp.h):
 *   out_w [H][V], out_b [V],
 *   for l = L-1 .. 0: wg [H][E], wb [Fd][H], bb [H], wa [H][Fd], ba [Fd],
 *   emb [V][H].
 * Expert buffer, this rank's nl experts, for l = 0 .. L-1:
 *   w1 [nl][H][F], b1 [nl][F], w2 [nl][F][H], b2 [nl][H].
 *
 * Initialization depends on the seed only, never on the rank (model.h). */
#ifndef SWT_LAYOUT_H
#define SWT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "moe_block.h"
#include "switchyard/moe.h"
#include "switchyard/switchyard.h"

/** Offsets (in floats) of one layer's tensors in the flat buffers. */
typedef struct {
    size_t wa, ba, wb, bb, wg;  /* dense buffer */
    size_t w1, b1, w2, b2;      /* expert buffer */
    /* backward has produced the dense gradients below these offsets */
    size_t ready_gate, ready_wb, ready_wa;
} swt_layer_layout_t;

typedef struct {
    swt_model_config_t cfg;
    swy_moe_plan_t plan;     /* lib/moe's, of this config */
    int W, rank;
    int nl;                  /* experts on this rank: per rank x packing */
    int E;                   /* experts in all: W x nl */
    size_t n_dense, n_expert;
    size_t expert_elems;     /* parameters of one expert: 2HF + F + H */
    size_t out_w, out_b, emb; /* dense offsets */
    size_t ready_out;        /* the output layer's gradients are below */
    swt_layer_layout_t *layer;  /* [layers] */
    size_t *tensor_sizes;    /* [n_tensors]: dense tensors in buffer order,
                                what DDP buckets (swt_ddp_create) */
    int n_tensors;
} swt_layout_t;

/** The tensors outside the blocks in one dense buffer (parameters or
 *  gradients, host or device memory). */
typedef struct {
    float *emb, *out_w, *out_b;
} swt_model_tensors_t;

/** One layer's tensors in one pair of flat buffers (parameters or
 *  gradients, host or device memory). */
typedef struct {
    float *wa, *ba, *wb, *bb, *wg;  /* dense */
    float *w1, *b1, *w2, *b2;       /* this rank's experts, [nl] each */
} swt_layer_tensors_t;

/**
 * Lay out the model of @p cfg on this rank of @p comm. Collective (creates
 * the MoE plan, which borrows comm). Prints the cause on failure, and
 * then leaves @p lo zeroed.
 * @return SWY_OK, the plan's error, SWY_ERR_NO_MEMORY, or
 *         SWY_ERR_INTERNAL when the tensors do not add up to the buffers'
 *         sizes.
 */
swy_status_t swt_layout_init(swt_layout_t *lo, swy_comm_t comm,
                             const swt_model_config_t *cfg);
/** lib/moe's plan of cfg's MoE layers on comm, with rows in rows_mem
 *  (SWY_MOE_ROWS_HOST, or SWY_MOE_ROWS_DEVICE ordered on stream). Prints
 *  the cause on failure. Collective over comm. */
swy_status_t swt_layout_plan_create(swy_comm_t comm,
                                    const swt_model_config_t *cfg,
                                    int rows_mem, void *stream,
                                    swy_moe_plan_t *plan_p);

/** Frees what swt_layout_init made (the plan too); accepts a zeroed
 *  layout. */
void swt_layout_finalize(swt_layout_t *lo);

/** Points @p t_p at the tensors outside the blocks in @p dense. */
void swt_layout_model_tensors(const swt_layout_t *lo, float *dense,
                              swt_model_tensors_t *t_p);

/** Points @p t_p at layer @p layer's tensors in @p dense and @p expert. */
void swt_layout_layer_tensors(const swt_layout_t *lo, int layer,
                              float *dense, float *expert,
                              swt_layer_tensors_t *t_p);

/**
 * The initial parameters, into host buffers of n_dense and n_expert
 * floats (every element is written): linear weights U(-b, b) with b =
 * 1/sqrt(fan_in) as torch.nn.Linear's default, the embedding U(-1, 1),
 * biases zero. A dense tensor's values come from (seed, tensor, layer),
 * global expert g's from (seed, tensor, layer, g).
 */
void swt_layout_init_params(const swt_layout_t *lo, float *dense,
                            float *expert);

/**
 * Parameters of layer @p layer's MoE block: the shape, the loss scaling
 * and the tensors @p param and @p grad (whatever memory they are in); the
 * GShard gate, no slot map. A caller that wants another gate or packing
 * sets those fields after.
 */
void swt_layout_block_params(const swt_layout_t *lo, int layer,
                             const swt_layer_tensors_t *param,
                             const swt_layer_tensors_t *grad,
                             swt_moe_block_params_t *bp_p);

/** FNV-1a's offset basis, the start of swt_layout_hash_floats. */
#define SWT_LAYOUT_HASH_INIT 0xcbf29ce484222325ull

/** FNV-1a over the bytes of x[0 .. n), continuing from @p h. */
uint64_t swt_layout_hash_floats(uint64_t h, const float *x, size_t n);

/** A hash of the dense parameters' bytes in @p dense (host memory),
 *  without the layers' gates when @p skip_gates (--gate ta: each rank's
 *  gate is its own). */
uint64_t swt_layout_dense_hash(const swt_layout_t *lo, const float *dense,
                               int skip_gates);

#endif /* SWT_LAYOUT_H */
