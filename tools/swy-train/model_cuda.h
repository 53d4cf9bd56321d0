/* The reference MoE model of swy-train on the GPU (--device cuda): the
 * model of model.h, with parameters, gradients, Adam's moments and
 * activations in device memory and every computation in the CUDA kernels
 * (kernels/swy_kernels_cuda.h; fp32, or with --dtype bf16 bf16 weight
 * copies and activations over fp32 masters, model_cuda.c). The same
 * layout of the dense and expert buffers and the same initialization as
 * the CPU model, by the same code (layout.h; the initial values are
 * computed on the host and copied over), same loss scaling and the same
 * DDP buckets, posted on device memory with the model's stream (ddp.h).
 * The MoE blocks are moe_block_cuda.h.
 *
 * Functions that read device results (the step's loss, the dense hash)
 * synchronize the model's stream. Not thread-safe: one training thread. */
#ifndef SWT_MODEL_CUDA_H
#define SWT_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "switchyard/switchyard.h"
#include "timing.h"

/**
 * Choose this process's GPU, before swy_comm_init_env (so that whatever
 * the communicator sets up on the device is on the right one): device
 * local_rank modulo the number of devices.
 * @param name    receives the device's name.
 * @param why     receives the reason on failure.
 * @return 0; -1 when there is no CUDA device (why says what the runtime
 *         said); -2 when selecting it failed.
 */
int swt_cuda_device_select(int local_rank, int *device_p, char *name,
                           size_t name_len, char *why, size_t why_len);

typedef struct swt_model_cuda swt_model_cuda_t;

/** Collective (creates the MoE plans). Prints the cause on failure.
 *  @return SWY_OK, SWY_ERR_NO_MEMORY, SWY_ERR_SYSTEM (a CUDA failure), or
 *          the plans' error. */
swy_status_t swt_model_cuda_create(swy_comm_t comm,
                                   const swt_model_config_t *cfg,
                                   swt_model_cuda_t **model_p);
void swt_model_cuda_destroy(swt_model_cuda_t *model);

int swt_model_cuda_num_experts(const swt_model_cuda_t *model);
int swt_model_cuda_num_local_experts(const swt_model_cuda_t *model);
size_t swt_model_cuda_dense_params(const swt_model_cuda_t *model);
size_t swt_model_cuda_expert_params(const swt_model_cuda_t *model);
int swt_model_cuda_num_buckets(const swt_model_cuda_t *model);

/** As swt_model_step; ids and labels are host arrays [S] (copied to the
 *  device). Returns after the step's work on the GPU is complete. */
swy_status_t swt_model_cuda_step(swt_model_cuda_t *model, const int *ids,
                                 const int *labels, long step,
                                 swt_timing_t *tm,
                                 swt_step_result_t *result_p);

/** As swt_model_layer_sent (host memory). */
const int64_t *swt_model_cuda_layer_sent(const swt_model_cuda_t *model,
                                         int layer);

/** As swt_model_dense_hash: copies the dense parameters to the host and
 *  hashes their bytes. @return SWY_OK or SWY_ERR_SYSTEM (printed). */
swy_status_t swt_model_cuda_dense_hash(swt_model_cuda_t *model,
                                       uint64_t *hash_p);

/** Whether the model's GEMMs fuse cuBLASLt epilogues (SWY_KC_EPILOGUES),
 *  how many did and how many took separate passes instead, and the last
 *  reason (swy_kc_ctx_epilogue_stats of the model's kernel context). */
void swt_model_cuda_epilogues(const swt_model_cuda_t *model, int *on,
                              unsigned long *fused, unsigned long *fell_back,
                              const char **why);

/** Whether the expert FFN runs grouped GEMMs (SWY_KC_GROUPED), the grouped
 *  calls made and the GEMMs run per expert instead, and the last reason
 *  (swy_kc_ctx_grouped_stats of the model's kernel context). */
void swt_model_cuda_grouped(const swt_model_cuda_t *model, int *on,
                            unsigned long *calls, unsigned long *per_expert,
                            const char **why);

#endif /* SWT_MODEL_CUDA_H */
