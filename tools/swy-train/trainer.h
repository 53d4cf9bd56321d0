/* The model of swy-train behind one table of operations, one instance per
 * device: the CPU model (model.h, trainer.c) and, where the CUDA kernels
 * are built, the GPU model (model_cuda.h, trainer_cuda.c). main() picks
 * the table once from --device and calls the model through it only; what
 * only the CPU model has (shadowed experts, the overlapped dense update,
 * the expert hash) main() calls on swt_trainer_t.cpu. */
#ifndef SWT_TRAINER_H
#define SWT_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "switchyard/switchyard.h"
#include "timing.h"

typedef struct swt_trainer_ops {
    const char *device; /* the --device value: "cpu", "cuda" */
    /* Collective. comm holds the experts; world the dense parameters'
     * replicas; expert_dp the replicas of this rank's experts (NULL: none;
     * the GPU model takes comm only, its callers check --ep). */
    swy_status_t (*create)(swy_comm_t world, swy_comm_t comm,
                           swy_comm_t expert_dp,
                           const swt_model_config_t *cfg, void **model_p);
    void (*destroy)(void *model); /* accepts NULL */
    int (*num_buckets)(const void *model);
    int (*num_experts)(const void *model);
    int (*num_local_experts)(const void *model);
    size_t (*dense_params)(const void *model);
    size_t (*expert_params)(const void *model);
    swy_status_t (*step)(void *model, const int *ids, const int *labels,
                         long step, swt_timing_t *tm,
                         swt_step_result_t *result_p);
    /* Rows sent to each expert of layer, and rows each expert computed
     * (the same on a model without shadowed experts). */
    const int64_t *(*layer_sent)(const void *model, int layer);
    const int64_t *(*layer_chosen)(const void *model, int layer);
    swy_status_t (*dense_hash)(void *model, uint64_t *hash_p);
    /* The summary's lines that only this device has; NULL: none. */
    void (*print_summary)(const void *model);
} swt_trainer_ops_t;

extern const swt_trainer_ops_t swt_trainer_cpu_ops;
#ifdef SWT_HAVE_CUDA
extern const swt_trainer_ops_t swt_trainer_cuda_ops;
#endif

/* The table for a --device value; NULL when this build has none. */
const swt_trainer_ops_t *swt_trainer_ops_find(const char *device);

typedef struct {
    const swt_trainer_ops_t *ops;
    void *model;
    swt_model_t *cpu; /* model when ops is the CPU table; else NULL */
} swt_trainer_t;

/* Create the model of ops (collective); on failure *tr is all NULL. */
swy_status_t swt_trainer_create(swt_trainer_t *tr,
                                const swt_trainer_ops_t *ops,
                                swy_comm_t world, swy_comm_t comm,
                                swy_comm_t expert_dp,
                                const swt_model_config_t *cfg);
void swt_trainer_destroy(swt_trainer_t *tr);

#endif /* SWT_TRAINER_H */
