/* Routing one batch: count rows per (destination rank, local expert),
 * exchange the counts (FastMoE's local/global expert counts, lec/gec, in
 * fmoe/functions.py), and derive the three row layouts of moe_impl.h.
 *
 * The count exchange carries a small header per peer with this rank's
 * validation outcome, so a rank with a bad top-k index still takes part
 * and every rank learns of the fault: no rank goes on to a dispatch its
 * peer will never post. */
#include <stdio.h>
#include <string.h>

#include "moe/moe_impl.h"
#include "transport/device.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/status.h"

enum { HDR_STATUS, HDR_TOKEN, HDR_SLOT, HDR_VALUE, HDR_LEN };

static const char fn[] = "swy_moe_route";

/* Validates topk_idx and counts rows per (rank, local expert). */
static swy_status_t count_local(const struct swy_moe_plan *plan,
                                const int *topk_idx, int S, int64_t *hdr,
                                int64_t *send_count)
{
    int k = plan->cfg.top_k, nl = plan->n_local, E = plan->n_experts;
    hdr[HDR_STATUS] = SWY_ERR_INVALID_ARG;
    hdr[HDR_TOKEN] = hdr[HDR_SLOT] = hdr[HDR_VALUE] = -1;
    if (S < 0) {
        hdr[HDR_VALUE] = S;
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: S is %d, must "
                           "be >= 0", fn, S);
    }
    if (topk_idx == NULL && S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: topk_idx is "
                           "NULL with S = %d", fn, S);
    for (int t = 0; t < S; t++)
        for (int s = 0; s < k; s++) {
            int g = topk_idx[(size_t)t * k + s];
            if (g == -1)
                continue;
            if (g < -1 || g >= E) {
                hdr[HDR_TOKEN] = t;
                hdr[HDR_SLOT] = s;
                hdr[HDR_VALUE] = g;
                memset(send_count, 0,
                       (size_t)plan->nranks * nl * sizeof(int64_t));
                return swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                                   "%s: topk_idx[%d][%d] = %d is out of "
                                   "range (experts 0..%d, or -1 for "
                                   "dropped)", fn, t, s, g, E - 1);
            }
            send_count[g]++; /* g = r*nl + e */
        }
    hdr[HDR_STATUS] = SWY_OK;
    return SWY_OK;
}

/* Exchange headers and counts; fills route->recv_count. */
static swy_status_t exchange_counts(swy_moe_route_t route, int64_t *hdr,
                                    swy_status_t own)
{
    struct swy_moe_plan *plan = route->plan;
    int W = route->W, nl = route->nl;
    size_t per_peer = HDR_LEN + (size_t)nl;
    swy_status_t status = SWY_ERR_NO_MEMORY;
    int64_t *sendbuf = swy_calloc(per_peer * W, sizeof(int64_t));
    int64_t *recvbuf = swy_calloc(per_peer * W, sizeof(int64_t));
    size_t *counts = swy_calloc((size_t)W, sizeof(size_t));
    size_t *displs = swy_calloc((size_t)W, sizeof(size_t));
    if (sendbuf == NULL || recvbuf == NULL || counts == NULL ||
        displs == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory "
                             "for the count exchange", fn);
        goto out;
    }
    for (int r = 0; r < W; r++) {
        int64_t *rec = sendbuf + per_peer * r;
        memcpy(rec, hdr, HDR_LEN * sizeof(int64_t));
        memcpy(rec + HDR_LEN, route->send_count + (size_t)r * nl,
               (size_t)nl * sizeof(int64_t));
        counts[r] = per_peer;
        displs[r] = per_peer * r;
    }
    char own_msg[SWY_ERRMSG_MAX];
    snprintf(own_msg, sizeof(own_msg), "%s", swy_err_last());
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_HIGH;
    attr.name = "moe.route.counts";
    status = swy_alltoallv(sendbuf, counts, displs, recvbuf, counts, displs,
                           SWY_INT64, plan->comm, &attr, NULL);
    if (status != SWY_OK)
        goto out; /* the collective's message stays */
    if (own != SWY_OK) {
        swy_err_store(own_msg);
        status = own;
        goto out;
    }
    for (int r = 0; r < W; r++) {
        const int64_t *rec = recvbuf + per_peer * r;
        if (rec[HDR_STATUS] != SWY_OK) {
            status = swy_err_set((swy_status_t)rec[HDR_STATUS], "moe",
                                 "%s: rank %d passed invalid routing input "
                                 "(token %lld, slot %lld, value %lld; "
                                 "experts 0..%d)", fn, r,
                                 (long long)rec[HDR_TOKEN],
                                 (long long)rec[HDR_SLOT],
                                 (long long)rec[HDR_VALUE],
                                 plan->n_experts - 1);
            goto out;
        }
        for (int e = 0; e < nl; e++) {
            int64_t c = rec[HDR_LEN + e];
            if (c < 0) {
                status = swy_err_set(SWY_ERR_MISMATCH, "moe", "%s: rank %d "
                                     "announced %lld rows for local expert "
                                     "%d", fn, r, (long long)c, e);
                goto out;
            }
            route->recv_count[(size_t)r * nl + e] = c;
        }
    }
    status = SWY_OK;
out:
    swy_free(displs);
    swy_free(counts);
    swy_free(recvbuf);
    swy_free(sendbuf);
    return status;
}

/* Offsets of the three layouts, the per-slot rows and the buffers. */
static swy_status_t build_layouts(swy_moe_route_t route, const int *topk_idx)
{
    int W = route->W, nl = route->nl, d = route->d, k = route->k;
    int64_t acc = 0;
    for (int r = 0; r < W; r++)
        for (int j = 0; j < d; j++)
            for (int e = 0; e < nl; e++) {
                int64_t n = route->send_count[(size_t)r * nl + e];
                route->tok_off[((size_t)r * d + j) * nl + e] = acc;
                acc += swy_moe_part_begin(n, j + 1, d) -
                       swy_moe_part_begin(n, j, d);
            }
    route->tok_off[(size_t)W * d * nl] = route->send_rows = acc;

    acc = 0;
    for (int e = 0; e < nl; e++) {
        route->expert_offset[e] = acc;
        for (int j = 0; j < d; j++) {
            route->chunk_offset[(size_t)e * (d + 1) + j] = acc;
            for (int r = 0; r < W; r++) {
                int64_t n = route->recv_count[(size_t)r * nl + e];
                route->exp_off[((size_t)e * d + j) * W + r] = acc;
                acc += swy_moe_part_begin(n, j + 1, d) -
                       swy_moe_part_begin(n, j, d);
            }
        }
        route->chunk_offset[(size_t)e * (d + 1) + d] = acc;
    }
    route->expert_offset[nl] = acc;
    route->exp_off[(size_t)nl * d * W] = route->recv_rows = acc;

    acc = 0;
    for (int j = 0; j < d; j++)
        for (int r = 0; r < W; r++)
            for (int e = 0; e < nl; e++) {
                int64_t n = route->recv_count[(size_t)r * nl + e];
                route->stg_off[((size_t)j * W + r) * nl + e] = acc;
                acc += swy_moe_part_begin(n, j + 1, d) -
                       swy_moe_part_begin(n, j, d);
            }
    route->stg_off[(size_t)d * W * nl] = acc;

    /* Slot rows: the q-th row of block (r, e), in token order, is in the
     * chunk j whose part holds q. */
    size_t nblocks = (size_t)W * nl;
    int64_t *seen = swy_calloc(nblocks, sizeof(int64_t));
    int *chunk = swy_calloc(nblocks, sizeof(int));
    if (seen == NULL || chunk == NULL) {
        swy_free(chunk);
        swy_free(seen);
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory "
                           "for %zu blocks", fn, nblocks);
    }
    for (int t = 0; t < route->S; t++)
        for (int s = 0; s < k; s++) {
            size_t slot = (size_t)t * k + s;
            int g = topk_idx[slot];
            if (g < 0) {
                route->slot_row[slot] = -1;
                continue;
            }
            int64_t n = route->send_count[g], q = seen[g]++;
            int j = chunk[g];
            while (q >= swy_moe_part_begin(n, j + 1, d))
                j++;
            chunk[g] = j;
            int r = g / nl, e = g % nl;
            route->slot_row[slot] = route->tok_off[((size_t)r * d + j) * nl +
                                                   e] +
                                    (q - swy_moe_part_begin(n, j, d));
        }
    swy_free(chunk);
    swy_free(seen);

    size_t row_bytes = route->rb, tok_bytes, exp_bytes;
    if (swy_mul_overflow((size_t)route->send_rows, row_bytes, &tok_bytes) ||
        swy_mul_overflow((size_t)route->recv_rows, row_bytes, &exp_bytes))
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %lld sent or "
                           "%lld received rows of %zu bytes overflow",
                           fn, (long long)route->send_rows,
                           (long long)route->recv_rows, row_bytes);
    route->acc = swy_malloc((route->H ? route->H : 1) * sizeof(double));
    route->bufs[0] = swy_moe_buf_get(route->plan, tok_bytes);
    route->bufs[1] = swy_moe_buf_get(route->plan, tok_bytes);
    if (nl > 1)
        route->bufs[2] = swy_moe_buf_get(route->plan, exp_bytes);
    route->tok_buf = route->bufs[0].ptr;
    route->comb_buf = route->bufs[1].ptr;
    route->stage_buf = route->bufs[2].ptr;
    if (route->tok_buf == NULL || route->comb_buf == NULL ||
        route->acc == NULL ||
        (nl > 1 && route->stage_buf == NULL))
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory for "
                           "%lld sent and %lld received rows", fn,
                           (long long)route->send_rows,
                           (long long)route->recv_rows);
    return SWY_OK;
}

swy_status_t swy_moe_route(swy_moe_plan_t plan, const int *topk_idx, int S,
                           swy_moe_route_t *route_p)
{
    swy_err_clear();
    if (plan == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: plan is NULL",
                           fn);
    int W = plan->nranks, nl = plan->n_local, d = plan->cfg.pipeline_degree;
    int k = plan->cfg.top_k;
    int *idx_host = NULL; /* a device topk_idx, copied */
    struct swy_moe_route *route = swy_calloc(1, sizeof(*route));
    if (route == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory",
                           fn);
    route->plan = plan;
    route->S = S > 0 ? S : 0;
    route->k = k;
    route->W = W;
    route->nl = nl;
    route->d = d;
    route->H = (size_t)plan->cfg.hidden;
    route->dtype = plan->cfg.dtype;
    route->rb = route->H * swy_dtype_size(route->dtype);
    size_t blocks = (size_t)W * nl, slots = (size_t)route->S * k;
    route->send_count = swy_calloc(blocks, sizeof(int64_t));
    route->recv_count = swy_calloc(blocks, sizeof(int64_t));
    route->slot_row = swy_calloc(slots + 1, sizeof(int64_t));
    route->tok_off = swy_calloc(blocks * d + 1, sizeof(int64_t));
    route->exp_off = swy_calloc(blocks * d + 1, sizeof(int64_t));
    route->stg_off = swy_calloc(blocks * d + 1, sizeof(int64_t));
    route->expert_offset = swy_calloc((size_t)nl + 1, sizeof(int64_t));
    route->chunk_offset = swy_calloc((size_t)nl * (d + 1), sizeof(int64_t));
    route->scratch = swy_calloc(4 * (size_t)W * d, sizeof(size_t));
    route->fwd.reqs = swy_calloc((size_t)d, sizeof(swy_request_t));
    route->fwd.chunk_done = swy_calloc((size_t)d, 1);
    route->rev.reqs = swy_calloc((size_t)d, sizeof(swy_request_t));
    route->rev.chunk_done = swy_calloc((size_t)d, 1);
    swy_status_t status;
    if (!route->send_count || !route->recv_count || !route->slot_row ||
        !route->tok_off || !route->exp_off || !route->stg_off ||
        !route->expert_offset || !route->chunk_offset || !route->scratch ||
        !route->fwd.reqs || !route->fwd.chunk_done || !route->rev.reqs ||
        !route->rev.chunk_done) {
        /* Still join the count exchange would need the arrays: a rank out
         * of memory here fails alone (its peers time out). */
        status = swy_err_set(SWY_ERR_NO_MEMORY, "moe", "%s: out of memory "
                             "for %zu blocks and %zu slots", fn, blocks,
                             slots);
        goto err;
    }

    /* A device plan's topk_idx may lie on the device: its copy on the
     * host is counted. A failure here still joins the count exchange. */
    int64_t hdr[HDR_LEN] = {SWY_ERR_INVALID_ARG, -1, -1, -1};
    const int *idx = topk_idx;
    swy_status_t own = SWY_OK;
    if (plan->dev != NULL && S > 0 &&
        swy_device_mem_type(topk_idx) == SWY_MEM_CUDA)
        own = swy_moe_dev_topk(plan, topk_idx, S, &idx_host);
    else if (plan->dev == NULL)
        own = swy_moe_check_mem(plan, topk_idx, "topk_idx", fn);
    if (idx_host != NULL)
        idx = idx_host;
    if (own == SWY_OK)
        own = count_local(plan, idx, S, hdr, route->send_count);
    else
        hdr[HDR_STATUS] = own;
    if (own == SWY_OK && route_p == NULL) {
        hdr[HDR_STATUS] = SWY_ERR_INVALID_ARG;
        own = swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: route_p is NULL",
                          fn);
    }
    status = exchange_counts(route, hdr, own);
    if (status != SWY_OK)
        goto err;
    status = build_layouts(route, idx);
    if (status == SWY_OK && plan->dev != NULL)
        status = swy_moe_dev_indices(route);
    if (status != SWY_OK)
        goto err;
    swy_free(idx_host);
    *route_p = route;
    return SWY_OK;
err:
    swy_free(idx_host);
    swy_moe_route_destroy(route);
    return status;
}

void swy_moe_route_destroy(swy_moe_route_t route)
{
    if (route == NULL)
        return;
    swy_moe_xchg_drain(route, &route->rev);
    swy_moe_xchg_drain(route, &route->fwd);
    for (int i = 0; i < 4; i++)
        swy_moe_buf_put(route->plan, route->bufs[i]);
    swy_free(route->acc);
    swy_free(route->rev.chunk_done);
    swy_free(route->rev.reqs);
    swy_free(route->fwd.chunk_done);
    swy_free(route->fwd.reqs);
    swy_free(route->scratch);
    swy_free(route->chunk_offset);
    swy_free(route->expert_offset);
    swy_free(route->stg_off);
    swy_free(route->exp_off);
    swy_free(route->tok_off);
    swy_free(route->slot_row);
    swy_free(route->recv_count);
    swy_free(route->send_count);
    swy_free(route);
}

swy_status_t swy_moe_route_layout(swy_moe_route_t route,
                                  swy_moe_layout_t *layout)
{
    swy_err_clear();
    if (route == NULL || layout == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                           "swy_moe_route_layout: %s is NULL",
                           route == NULL ? "route" : "layout");
    const struct swy_moe_plan *plan = route->plan;
    const swy_moe_layout_t out = {
        .struct_size = layout->struct_size,
        .nranks = route->W,
        .num_local_experts = route->nl,
        .num_experts = plan->n_experts,
        .first_expert = plan->rank * route->nl,
        .pipeline_degree = route->d,
        .hidden = (int)route->H,
        .num_tokens = route->S,
        .top_k = route->k,
        .send_rows = route->send_rows,
        .recv_rows = route->recv_rows,
        .expert_offset = route->expert_offset,
        .chunk_offset = route->chunk_offset,
        .block_offset = route->exp_off,
        .slot_row = route->slot_row,
    };
    if (swy_struct_export(layout, layout->struct_size, &out, sizeof(out),
                          SWY_MOE_LAYOUT_SIZE_V1) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                           "swy_moe_route_layout: layout->struct_size %zu is "
                           "below the %zu bytes of swy_moe_layout_t's first "
                           "release (set it to sizeof)", layout->struct_size,
                           (size_t)SWY_MOE_LAYOUT_SIZE_V1);
    return SWY_OK;
}

swy_status_t swy_moe_route_counts(swy_moe_route_t route,
                                  int64_t *sent_per_expert,
                                  int64_t *recv_per_local_expert)
{
    swy_err_clear();
    if (route == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe",
                           "swy_moe_route_counts: route is NULL");
    int W = route->W, nl = route->nl;
    if (sent_per_expert != NULL)
        memcpy(sent_per_expert, route->send_count,
               (size_t)W * nl * sizeof(int64_t));
    if (recv_per_local_expert != NULL)
        for (int e = 0; e < nl; e++) {
            int64_t sum = 0;
            for (int r = 0; r < W; r++)
                sum += route->recv_count[(size_t)r * nl + e];
            recv_per_local_expert[e] = sum;
        }
    return SWY_OK;
}
