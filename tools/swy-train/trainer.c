/* The CPU model's table (trainer.h) and the choice of a table by
 * --device. */
#include <string.h>

#include "trainer.h"

static swy_status_t cpu_create(swy_comm_t world, swy_comm_t comm,
                               swy_comm_t expert_dp,
                               const swt_model_config_t *cfg, void **model_p)
{
    swt_model_t *model = NULL;
    swy_status_t st =
        swt_model_create_groups(world, comm, expert_dp, cfg, &model);
    *model_p = model;
    return st;
}

static void cpu_destroy(void *model)
{
    swt_model_destroy(model);
}

static int cpu_num_buckets(const void *model)
{
    return swt_model_num_buckets(model);
}

static int cpu_num_experts(const void *model)
{
    return swt_model_num_experts(model);
}

static int cpu_num_local_experts(const void *model)
{
    return swt_model_num_local_experts(model);
}

static size_t cpu_dense_params(const void *model)
{
    return swt_model_dense_params(model);
}

static size_t cpu_expert_params(const void *model)
{
    return swt_model_expert_params(model);
}

static swy_status_t cpu_step(void *model, const int *ids, const int *labels,
                             long step, swt_timing_t *tm,
                             swt_step_result_t *result_p)
{
    return swt_model_step(model, ids, labels, step, tm, result_p);
}

static const int64_t *cpu_layer_sent(const void *model, int layer)
{
    return swt_model_layer_sent(model, layer);
}

static const int64_t *cpu_layer_chosen(const void *model, int layer)
{
    return swt_model_layer_chosen(model, layer);
}

static swy_status_t cpu_dense_hash(void *model, uint64_t *hash_p)
{
    *hash_p = swt_model_dense_hash(model);
    return SWY_OK;
}

const swt_trainer_ops_t swt_trainer_cpu_ops = {
    .device = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .num_buckets = cpu_num_buckets,
    .num_experts = cpu_num_experts,
    .num_local_experts = cpu_num_local_experts,
    .dense_params = cpu_dense_params,
    .expert_params = cpu_expert_params,
    .step = cpu_step,
    .layer_sent = cpu_layer_sent,
    .layer_chosen = cpu_layer_chosen,
    .dense_hash = cpu_dense_hash,
    .print_summary = NULL,
};

const swt_trainer_ops_t *swt_trainer_ops_find(const char *device)
{
    static const swt_trainer_ops_t *const tables[] = {
        &swt_trainer_cpu_ops,
#ifdef SWT_HAVE_CUDA
        &swt_trainer_cuda_ops,
#endif
    };
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        if (device != NULL && strcmp(device, tables[i]->device) == 0)
            return tables[i];
    return NULL;
}

swy_status_t swt_trainer_create(swt_trainer_t *tr,
                                const swt_trainer_ops_t *ops,
                                swy_comm_t world, swy_comm_t comm,
                                swy_comm_t expert_dp,
                                const swt_model_config_t *cfg)
{
    memset(tr, 0, sizeof(*tr));
    void *model = NULL;
    swy_status_t st = ops->create(world, comm, expert_dp, cfg, &model);
    if (st != SWY_OK)
        return st;
    tr->ops = ops;
    tr->model = model;
    tr->cpu = ops == &swt_trainer_cpu_ops ? model : NULL;
    return SWY_OK;
}

void swt_trainer_destroy(swt_trainer_t *tr)
{
    if (tr->ops != NULL)
        tr->ops->destroy(tr->model);
    memset(tr, 0, sizeof(*tr));
}
