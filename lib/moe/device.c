/* Plans with device rows (moe.h, "Device rows"): the checks of memory
 * kinds and streams, the route's row indices on the device, and the
 * reordering of a chunk's rows there. The row math itself is the nccl
 * plugin's (swy_devmoe_v1.h); lib/ includes no CUDA header. */
#include <stdint.h>
#include <stdio.h>

#include "moe/moe_impl.h"
#include "transport/device.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/status.h"

swy_status_t swy_moe_check_mem(const struct swy_moe_plan *plan,
                               const void *ptr, const char *what,
                               const char *fn)
{
    if (ptr == NULL)
        return SWY_OK;
    int on_device = swy_device_mem_type(ptr) == SWY_MEM_CUDA;
    if (plan->dev != NULL && !on_device)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s %p is host "
                           "memory, but the plan's rows are device memory",
                           fn, what, ptr);
    if (plan->dev == NULL && on_device)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s %p is device "
                           "memory, but the plan's rows are host memory "
                           "(make the plan with rows_mem = "
                           "SWY_MOE_ROWS_DEVICE)", fn, what, ptr);
    return SWY_OK;
}

swy_status_t swy_moe_check_attr(const struct swy_moe_plan *plan,
                                const swy_op_attr_t *attr, const char *fn)
{
    if (attr == NULL)
        return SWY_OK;
    swy_op_attr_t a;
    if (swy_struct_import(&a, sizeof(a), attr, attr->struct_size,
                          SWY_OP_ATTR_SIZE_V1) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: attr->struct_size "
                           "%zu is below the %zu bytes of swy_op_attr_t's "
                           "first release (initialize it with "
                           "SWY_OP_ATTR_INIT)", fn, attr->struct_size,
                           (size_t)SWY_OP_ATTR_SIZE_V1);
    /* With host rows a stream orders nothing, as with host buffers in
     * the collectives: it is ignored. */
    if (a.stream == NULL || a.stream == plan->stream || plan->dev == NULL)
        return SWY_OK;
    return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: attr->stream %p is "
                       "not the plan's stream %p (a plan's device work is "
                       "ordered on one stream: pass NULL)", fn, a.stream,
                       plan->stream);
}

swy_status_t swy_moe_dev_fail(const struct swy_moe_plan *plan,
                              swy_status_t status, const char *fn,
                              const char *what)
{
    if (status == SWY_OK)
        status = SWY_ERR_TRANSPORT;
    return swy_err_set(status, "moe", "%s: %s on stream %p failed: %s", fn,
                       what, plan->stream, plan->dev->error_string());
}

swy_status_t swy_moe_dev_topk(const struct swy_moe_plan *plan,
                              const int *topk_idx, int S, int **host_p)
{
    static const char fn[] = "swy_moe_route";
    size_t n = (size_t)S * (size_t)plan->cfg.top_k;
    int *host = swy_malloc((n ? n : 1) * sizeof(int));
    if (host == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory for "
                           "%zu top-k indices", fn, n);
    swy_status_t status = plan->dev->download(plan->stream, host, topk_idx,
                                              n * sizeof(int));
    if (status != SWY_OK) {
        swy_free(host);
        return swy_moe_dev_fail(plan, status, fn, "copying topk_idx to the "
                                "host");
    }
    *host_p = host;
    return SWY_OK;
}

swy_status_t swy_moe_dev_indices(swy_moe_route_t route)
{
    static const char fn[] = "swy_moe_route";
    struct swy_moe_plan *plan = route->plan;
    size_t slots = (size_t)route->S * route->k;
    size_t rows = route->nl > 1 ? (size_t)route->recv_rows : 0;
    if (slots > INT32_MAX || route->send_rows > INT32_MAX ||
        route->recv_rows > INT32_MAX || route->H > INT32_MAX)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %zu slots, "
                           "%lld sent or %lld received rows: device rows "
                           "take at most %d of each", fn, slots,
                           (long long)route->send_rows,
                           (long long)route->recv_rows, INT32_MAX);
    size_t n = slots + 2 * rows;
    int32_t *host = swy_malloc((n ? n : 1) * sizeof(int32_t));
    if (host == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory for "
                           "%zu row indices", fn, n);
    for (size_t i = 0; i < slots; i++)
        host[i] = (int32_t)route->slot_row[i];
    /* Staging row i of block (j, r, e) is expert-side row i - stg + exp of
     * the same block, and back. */
    int32_t *exp_from_stg = host + slots, *stg_from_exp = exp_from_stg + rows;
    int W = route->W, nl = route->nl, d = route->d;
    for (int j = 0; j < d && rows > 0; j++)
        for (int r = 0; r < W; r++)
            for (int e = 0; e < nl; e++) {
                size_t si = ((size_t)j * W + r) * nl + e;
                size_t ei = ((size_t)e * d + j) * W + r;
                int64_t s0 = route->stg_off[si], e0 = route->exp_off[ei];
                for (int64_t q = 0; q < route->stg_off[si + 1] - s0; q++) {
                    exp_from_stg[e0 + q] = (int32_t)(s0 + q);
                    stg_from_exp[s0 + q] = (int32_t)(e0 + q);
                }
            }
    swy_status_t status = SWY_ERR_NO_MEMORY;
    route->bufs[3] = swy_moe_buf_get(plan, n * sizeof(int32_t));
    if (route->bufs[3].ptr == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of device "
                             "memory for %zu row indices", fn, n);
        goto out;
    }
    int32_t *dev = (int32_t *)(void *)route->bufs[3].ptr;
    route->slot_row_d = dev;
    route->exp_from_stg_d = dev + slots;
    route->stg_from_exp_d = dev + slots + rows;
    status = plan->dev->upload(plan->stream, dev, host, n * sizeof(int32_t));
    if (status != SWY_OK)
        status = swy_moe_dev_fail(plan, status, fn, "uploading the row "
                                  "indices");
out:
    swy_free(host);
    return status;
}

swy_status_t swy_moe_dev_restage(swy_moe_route_t route, int j,
                                 char *expert_buf, int to_expert,
                                 const char *fn)
{
    const struct swy_moe_plan *plan = route->plan;
    int W = route->W, nl = route->nl, d = route->d, H = (int)route->H;
    size_t rb = route->rb;
    swy_status_t status;
    if (!to_expert) {
        /* Chunk j's staging rows are contiguous: one gather. */
        int64_t s0 = route->stg_off[(size_t)j * W * nl];
        int64_t n = route->stg_off[(size_t)(j + 1) * W * nl] - s0;
        status = plan->dev->gather_rows(plan->stream, route->dtype,
                                        expert_buf, route->stg_from_exp_d + s0,
                                        (int)n, H,
                                        route->stage_buf + (size_t)s0 * rb);
        return status == SWY_OK ? SWY_OK
                                : swy_moe_dev_fail(plan, status, fn,
                                                   "reordering rows");
    }
    /* Expert-side: one contiguous piece per local expert. */
    for (int e = 0; e < nl; e++) {
        size_t ei = ((size_t)e * d + j) * W;
        int64_t e0 = route->exp_off[ei], n = route->exp_off[ei + W] - e0;
        status = plan->dev->gather_rows(plan->stream, route->dtype,
                                        route->stage_buf,
                                        route->exp_from_stg_d + e0, (int)n, H,
                                        expert_buf + (size_t)e0 * rb);
        if (status != SWY_OK)
            return swy_moe_dev_fail(plan, status, fn, "reordering rows");
    }
    return SWY_OK;
}

swy_status_t swy_moe_dev_sync(swy_moe_route_t route, const char *fn)
{
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev->stream_sync(route->plan->stream) != SWY_OK)
        return swy_err_set(SWY_ERR_TRANSPORT, "moe", "%s: waiting for "
                           "stream %p failed: %s", fn, route->plan->stream,
                           dev->error_string());
    return SWY_OK;
}
