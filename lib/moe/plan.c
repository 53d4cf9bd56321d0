/* MoE plans: validate a layer's config on every rank and check, with one
 * allgather, that all ranks agree on it. A rank whose own config is bad
 * still joins the allgather and publishes the fault, so every rank fails
 * with the same status instead of the good ones waiting on the bad one. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "moe/moe_impl.h"
#include "transport/device.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/status.h"

/* Allgathered record; fields compared across ranks come after the
 * fault description. */
enum {
    REC_STATUS,      /* SWY_OK or this rank's local failure */
    REC_BAD_FIELD,   /* index into field_names of the faulty field */
    REC_BAD_VALUE,   /* its value */
    REC_FIRST_FIELD, /* from here: field_names[i - REC_FIRST_FIELD] */
    REC_LEN = REC_FIRST_FIELD + 7
};

static const char *const field_names[] = {
    "experts_per_rank", "hidden", "dtype", "top_k", "pipeline_degree",
    "packing_factor", "rows_mem",
    /* fault-only pseudo fields */
    "struct_size", "cfg", "plan_p", "capacity_factor", "experts in total",
    "stream",
};
enum { F_DTYPE = 2, F_TOP_K = 3, F_ROWS_MEM = 6 };
enum { F_STRUCT_SIZE = 7, F_CFG, F_PLAN_P, F_CAPACITY, F_TOTAL, F_STREAM };

static const char fn[] = "swy_moe_plan_create";

/* Local validation; fills the record's fault fields on failure. */
static swy_status_t check_local(const swy_moe_config_t *given,
                                swy_moe_plan_t *plan_p, int nranks,
                                swy_moe_config_t *cfg, int64_t *rec)
{
#define FAULT(status, field, value, ...)                                      \
    do {                                                                      \
        rec[REC_STATUS] = (status);                                           \
        rec[REC_BAD_FIELD] = (field);                                         \
        rec[REC_BAD_VALUE] = (int64_t)(value);                                \
        return swy_err_set((status), "moe", __VA_ARGS__);                     \
    } while (0)
    if (given == NULL)
        FAULT(SWY_ERR_INVALID_ARG, F_CFG, 0, "%s: cfg is NULL", fn);
    if (plan_p == NULL)
        FAULT(SWY_ERR_INVALID_ARG, F_PLAN_P, 0, "%s: plan_p is NULL", fn);
    if (swy_struct_import(cfg, sizeof(*cfg), given, given->struct_size,
                          SWY_MOE_CONFIG_SIZE_V1) != 0)
        FAULT(SWY_ERR_INVALID_ARG, F_STRUCT_SIZE, given->struct_size,
              "%s: cfg->struct_size %zu is below the %zu bytes of "
              "swy_moe_config_t's first release (start from "
              "SWY_MOE_CONFIG_INIT)", fn, given->struct_size,
              (size_t)SWY_MOE_CONFIG_SIZE_V1);
    cfg->struct_size = sizeof(*cfg);
    const int values[7] = {cfg->experts_per_rank, cfg->hidden,
                           (int)cfg->dtype, cfg->top_k, cfg->pipeline_degree,
                           cfg->packing_factor, cfg->rows_mem};
    for (int i = 0; i < 7; i++) {
        rec[REC_FIRST_FIELD + i] = values[i];
        if (i != F_DTYPE && i != F_ROWS_MEM && values[i] < 1)
            FAULT(SWY_ERR_INVALID_ARG, i, values[i],
                  "%s: cfg->%s is %d, must be >= 1", fn, field_names[i],
                  values[i]);
    }
    if (cfg->dtype != SWY_FLOAT32 && cfg->dtype != SWY_FLOAT16 &&
        cfg->dtype != SWY_BFLOAT16 && cfg->dtype != SWY_FLOAT64)
        FAULT(SWY_ERR_UNSUPPORTED, F_DTYPE, cfg->dtype,
              "%s: cfg->dtype %d is not supported (rows are SWY_FLOAT32, "
              "SWY_FLOAT16, SWY_BFLOAT16 or SWY_FLOAT64)", fn,
              (int)cfg->dtype);
    if (!(cfg->capacity_factor >= 0)) /* also rejects NaN */
        FAULT(SWY_ERR_INVALID_ARG, F_CAPACITY, -1,
              "%s: cfg->capacity_factor %g must be >= 0", fn,
              cfg->capacity_factor);
    int64_t total = (int64_t)cfg->experts_per_rank * cfg->packing_factor *
                    nranks;
    if (total > INT_MAX)
        FAULT(SWY_ERR_INVALID_ARG, F_TOTAL, total,
              "%s: experts_per_rank %d * packing_factor %d * %d ranks = "
              "%lld experts, more than %d", fn, cfg->experts_per_rank,
              cfg->packing_factor, nranks, (long long)total, INT_MAX);
    if (cfg->top_k > total)
        FAULT(SWY_ERR_INVALID_ARG, F_TOP_K, cfg->top_k,
              "%s: cfg->top_k %d exceeds the %lld experts of the model", fn,
              cfg->top_k, (long long)total);
    if (cfg->rows_mem != SWY_MOE_ROWS_HOST &&
        cfg->rows_mem != SWY_MOE_ROWS_DEVICE)
        FAULT(SWY_ERR_INVALID_ARG, F_ROWS_MEM, cfg->rows_mem,
              "%s: cfg->rows_mem %d is neither SWY_MOE_ROWS_HOST nor "
              "SWY_MOE_ROWS_DEVICE", fn, cfg->rows_mem);
    if (cfg->rows_mem == SWY_MOE_ROWS_HOST && cfg->stream != NULL)
        FAULT(SWY_ERR_INVALID_ARG, F_STREAM, 1,
              "%s: cfg->stream %p given for a plan with host rows (set "
              "rows_mem = SWY_MOE_ROWS_DEVICE, or pass NULL)", fn,
              cfg->stream);
    if (cfg->rows_mem == SWY_MOE_ROWS_DEVICE) {
        if (swy_device_ops() == NULL)
            FAULT(SWY_ERR_UNSUPPORTED, F_ROWS_MEM, cfg->rows_mem,
                  "%s: device rows, but there are no device services (the "
                  "nccl plugin, swy-transport-nccl.so, is not built or sees "
                  "no GPU)", fn);
        if (swy_devmoe_ops() == NULL)
            FAULT(SWY_ERR_UNSUPPORTED, F_ROWS_MEM, cfg->rows_mem,
                  "%s: device rows, but the nccl plugin exports no %s (an "
                  "older plugin?)", fn, SWY_DEVMOE_PLUGIN_SYMBOL_V1);
        if (cfg->dtype != SWY_FLOAT32 && cfg->dtype != SWY_BFLOAT16)
            FAULT(SWY_ERR_UNSUPPORTED, F_DTYPE, cfg->dtype,
                  "%s: device rows are SWY_FLOAT32 or SWY_BFLOAT16, not "
                  "dtype %d", fn, (int)cfg->dtype);
    }
    return SWY_OK;
#undef FAULT
}

/* After the allgather: a fault on any rank, then any disagreement. */
static swy_status_t check_all(const int64_t *all, int nranks, int rank,
                              swy_status_t own)
{
    if (own != SWY_OK)
        return own; /* this thread's message already names the cause */
    for (int r = 0; r < nranks; r++) {
        const int64_t *rec = all + (size_t)r * REC_LEN;
        if (rec[REC_STATUS] != SWY_OK) {
            int64_t field = rec[REC_BAD_FIELD];
            const char *name =
                field >= 0 && field < (int64_t)SWY_ARRAY_SIZE(field_names)
                    ? field_names[field] : "?";
            return swy_err_set((swy_status_t)rec[REC_STATUS], "moe",
                               "%s: rank %d has an invalid config: %s = "
                               "%lld", fn, r, name,
                               (long long)rec[REC_BAD_VALUE]);
        }
    }
    for (int r = 1; r < nranks; r++)
        for (int i = REC_FIRST_FIELD; i < REC_LEN; i++)
            if (all[(size_t)r * REC_LEN + i] != all[i])
                return swy_err_set(SWY_ERR_MISMATCH, "moe",
                                   "%s: ranks disagree on %s: rank 0 has "
                                   "%lld, rank %d has %lld (seen by rank %d)",
                                   fn, field_names[i - REC_FIRST_FIELD],
                                   (long long)all[i], r,
                                   (long long)all[(size_t)r * REC_LEN + i],
                                   rank);
    return SWY_OK;
}

swy_status_t swy_moe_plan_create(swy_comm_t comm, const swy_moe_config_t *cfg,
                                 swy_moe_plan_t *plan_p)
{
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: comm is NULL",
                           fn);
    int nranks = swy_comm_size(comm), rank = swy_comm_rank(comm);
    int64_t rec[REC_LEN] = {0};
    swy_moe_config_t full;
    swy_status_t own = check_local(cfg, plan_p, nranks, &full, rec);
    char own_msg[SWY_ERRMSG_MAX];
    snprintf(own_msg, sizeof(own_msg), "%s", swy_err_last());

    int64_t *all = swy_calloc((size_t)nranks * REC_LEN, sizeof(int64_t));
    if (all == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory for "
                           "%d config records", fn, nranks);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_HIGH;
    attr.name = "moe.plan_create";
    swy_status_t status = swy_allgather(rec, all, REC_LEN, SWY_INT64, comm,
                                        &attr, NULL);
    if (status != SWY_OK) {
        swy_free(all);
        return status; /* the collective's message stays */
    }
    if (own != SWY_OK)
        swy_err_store(own_msg); /* the allgather cleared it */
    status = check_all(all, nranks, rank, own);
    swy_free(all);
    if (status != SWY_OK)
        return status;

    struct swy_moe_plan *plan = swy_calloc(1, sizeof(*plan));
    if (plan == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory",
                           fn);
    plan->comm = comm;
    plan->rank = rank;
    plan->nranks = nranks;
    plan->cfg = full;
    plan->dev = full.rows_mem == SWY_MOE_ROWS_DEVICE ? swy_devmoe_ops() : NULL;
    plan->stream = full.stream;
    plan->n_local = cfg->experts_per_rank * cfg->packing_factor;
    plan->n_experts = plan->n_local * nranks;
    pthread_mutex_init(&plan->pool_lock, NULL);
    *plan_p = plan;
    return SWY_OK;
}

swy_moe_buf_t swy_moe_buf_get(struct swy_moe_plan *plan, size_t bytes)
{
    swy_moe_buf_t buf = {NULL, 0};
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&plan->pool_lock);
    int best = -1;
    for (int i = 0; i < plan->npool; i++)
        if (plan->pool[i].bytes >= bytes &&
            (best < 0 || plan->pool[i].bytes < plan->pool[best].bytes))
            best = i;
    if (best >= 0) {
        buf = plan->pool[best];
        plan->pool[best] = plan->pool[--plan->npool];
    }
    pthread_mutex_unlock(&plan->pool_lock);
    if (buf.ptr != NULL)
        return buf;
    size_t want = bytes > SIZE_MAX / 5 * 4 ? bytes : bytes / 4 * 5 + 4096;
    void *ptr = NULL;
    if (plan->dev != NULL)
        ptr = plan->dev->alloc(want);
    else if (swy_mem_alloc(plan->comm, want, &ptr) != SWY_OK)
        ptr = NULL;
    if (ptr != NULL) {
        buf.ptr = ptr;
        buf.bytes = want;
    }
    return buf;
}

/* Free a buffer of the plan's kind of memory. Device memory is freed once
 * the plan's stream has drained: kernels queued there may still use it. */
static void buf_free(struct swy_moe_plan *plan, void *ptr)
{
    if (plan->dev == NULL) {
        (void)swy_mem_free(plan->comm, ptr);
        return;
    }
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev->stream_sync(plan->stream) != SWY_OK)
        swy_warn("moe", "freeing device rows: waiting for stream %p failed: "
                 "%s", plan->stream, dev->error_string());
    plan->dev->free_mem(ptr);
}

void swy_moe_buf_put(struct swy_moe_plan *plan, swy_moe_buf_t buf)
{
    if (buf.ptr == NULL)
        return;
    swy_moe_buf_t drop = buf;
    pthread_mutex_lock(&plan->pool_lock);
    if (plan->npool < SWY_MOE_POOL_MAX) {
        plan->pool[plan->npool++] = buf;
        drop.ptr = NULL;
    } else {
        /* Full: keep the larger one. */
        int small = 0;
        for (int i = 1; i < plan->npool; i++)
            if (plan->pool[i].bytes < plan->pool[small].bytes)
                small = i;
        if (plan->pool[small].bytes < buf.bytes) {
            drop = plan->pool[small];
            plan->pool[small] = buf;
        }
    }
    pthread_mutex_unlock(&plan->pool_lock);
    if (drop.ptr != NULL)
        buf_free(plan, drop.ptr);
}

void swy_moe_plan_destroy(swy_moe_plan_t plan)
{
    if (plan == NULL)
        return;
    for (int i = 0; i < plan->npool; i++)
        buf_free(plan, plan->pool[i].ptr);
    pthread_mutex_destroy(&plan->pool_lock);
    swy_free(plan);
}
