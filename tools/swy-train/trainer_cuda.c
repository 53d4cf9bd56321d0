/* The GPU model's table (trainer.h): built with the CUDA kernels only. */
#include <stdio.h>

#include "model_cuda.h"
#include "trainer.h"

static swy_status_t cuda_create(swy_comm_t world, swy_comm_t comm,
                                swy_comm_t expert_dp,
                                const swt_model_config_t *cfg,
                                void **model_p)
{
    (void)world;
    (void)expert_dp;
    swt_model_cuda_t *model = NULL;
    swy_status_t st = swt_model_cuda_create(comm, cfg, &model);
    *model_p = model;
    return st;
}

static void cuda_destroy(void *model)
{
    swt_model_cuda_destroy(model);
}

static int cuda_num_buckets(const void *model)
{
    return swt_model_cuda_num_buckets(model);
}

static int cuda_num_experts(const void *model)
{
    return swt_model_cuda_num_experts(model);
}

static int cuda_num_local_experts(const void *model)
{
    return swt_model_cuda_num_local_experts(model);
}

static size_t cuda_dense_params(const void *model)
{
    return swt_model_cuda_dense_params(model);
}

static size_t cuda_expert_params(const void *model)
{
    return swt_model_cuda_expert_params(model);
}

static swy_status_t cuda_step(void *model, const int *ids, const int *labels,
                              long step, swt_timing_t *tm,
                              swt_step_result_t *result_p)
{
    return swt_model_cuda_step(model, ids, labels, step, tm, result_p);
}

/* The GPU model has no shadowed experts: the rows each expert computed are
 * the rows sent to it. */
static const int64_t *cuda_layer_sent(const void *model, int layer)
{
    return swt_model_cuda_layer_sent(model, layer);
}

static swy_status_t cuda_dense_hash(void *model, uint64_t *hash_p)
{
    return swt_model_cuda_dense_hash(model, hash_p);
}

/* Rank 0's GEMMs: whether bias and GELU ran inside them, and whether the
 * experts ran grouped. */
static void cuda_print_summary(const void *model)
{
    int on;
    unsigned long fused, fell_back;
    const char *why;
    swt_model_cuda_epilogues(model, &on, &fused, &fell_back, &why);
    printf("%-22s %s, %lu GEMMs fused, %lu in separate passes%s%s%s\n",
           "GEMM epilogues", on ? "on" : "off (SWY_KC_EPILOGUES=0)",
           fused, fell_back, why[0] ? " (last: " : "", why,
           why[0] ? ")" : "");
    swt_model_cuda_grouped(model, &on, &fused, &fell_back, &why);
    printf("%-22s %s, %lu grouped calls, %lu GEMMs per expert%s%s%s\n",
           "grouped expert GEMMs", on ? "on" : "off (SWY_KC_GROUPED)",
           fused, fell_back, why[0] ? " (last: " : "", why,
           why[0] ? ")" : "");
}

const swt_trainer_ops_t swt_trainer_cuda_ops = {
    .device = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .num_buckets = cuda_num_buckets,
    .num_experts = cuda_num_experts,
    .num_local_experts = cuda_num_local_experts,
    .dense_params = cuda_dense_params,
    .expert_params = cuda_expert_params,
    .step = cuda_step,
    .layer_sent = cuda_layer_sent,
    .layer_chosen = cuda_layer_sent,
    .dense_hash = cuda_dense_hash,
    .print_summary = cuda_print_summary,
};
