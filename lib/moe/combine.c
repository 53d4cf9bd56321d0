/* Combine (expert outputs back to their tokens, weighted by the gate) and
 * its backward (gradients of the expert outputs and of the gate weights).
 * The combined-back rows stay in the route: the weight gradient
 * dL/dw[t][s] = dot(dL/dy[t], out_row(t, s)) needs them. */
#include "moe/moe_impl.h"
#include "util/status.h"

swy_status_t swy_moe_combine_post_chunk(swy_moe_route_t route, int chunk,
                                        const void *expert_out,
                                        const swy_op_attr_t *attr)
{
    swy_err_clear();
    return swy_moe_rev_post_chunk(route, SWY_MOE_XCHG_COMBINE, chunk,
                                  expert_out, attr,
                                  "swy_moe_combine_post_chunk");
}

swy_status_t swy_moe_combine_finish(swy_moe_route_t route,
                                    const void *topk_w, void *tokens_out)
{
    static const char fn[] = "swy_moe_combine_finish";
    swy_err_clear();
    SWY_CHECK(swy_moe_rev_check_posted(route, SWY_MOE_XCHG_COMBINE, fn));
    if ((topk_w == NULL || tokens_out == NULL) && route->S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s is NULL with "
                           "%d tokens", fn,
                           topk_w == NULL ? "topk_w" : "tokens_out",
                           route->S);
    const struct swy_moe_plan *plan = route->plan;
    SWY_CHECK(swy_moe_check_mem(plan, topk_w, "topk_w", fn));
    SWY_CHECK(swy_moe_check_mem(plan, tokens_out, "tokens_out", fn));
    SWY_CHECK(swy_moe_rev_wait_all(route));
    route->combined = 1;
    if (plan->dev != NULL) {
        swy_status_t status = route->S == 0 ? SWY_OK : plan->dev->combine_fwd(
            plan->stream, route->dtype, route->comb_buf, route->slot_row_d,
            topk_w, route->S, route->k, (int)route->H, tokens_out);
        return status == SWY_OK ? SWY_OK
                                : swy_moe_dev_fail(plan, status, fn,
                                                   "the weighted sum");
    }
    size_t rb = route->rb;
    int k = route->k;
    char *out = tokens_out;
    for (int t = 0; t < route->S; t++) {
        swy_moe_acc_zero(route);
        for (int s = 0; s < k; s++) {
            size_t slot = (size_t)t * k + s;
            int64_t row = route->slot_row[slot];
            if (row < 0)
                continue; /* dropped: contributes nothing */
            swy_moe_acc_add(route, swy_moe_weight(route, topk_w, slot),
                            route->comb_buf + (size_t)row * rb);
        }
        swy_moe_acc_store(route, out + (size_t)t * rb);
    }
    return SWY_OK;
}

swy_status_t swy_moe_combine(swy_moe_route_t route, const void *expert_out,
                             const void *topk_w, void *tokens_out,
                             const swy_op_attr_t *attr)
{
    static const char fn[] = "swy_moe_combine";
    swy_err_clear();
    SWY_CHECK(swy_moe_check_idle(route, fn));
    if ((topk_w == NULL || tokens_out == NULL) && route->S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s is NULL with "
                           "%d tokens", fn,
                           topk_w == NULL ? "topk_w" : "tokens_out",
                           route->S);
    SWY_CHECK(swy_moe_check_mem(route->plan, topk_w, "topk_w", fn));
    SWY_CHECK(swy_moe_check_mem(route->plan, tokens_out, "tokens_out", fn));
    for (int j = 0; j < route->d; j++)
        SWY_CHECK(swy_moe_rev_post_chunk(route, SWY_MOE_XCHG_COMBINE, j,
                                         expert_out, attr, fn));
    return swy_moe_combine_finish(route, topk_w, tokens_out);
}

swy_status_t swy_moe_combine_backward(swy_moe_route_t route,
                                      const void *grad_tokens_out,
                                      const void *topk_w,
                                      void *grad_expert_out,
                                      void *grad_topk_w,
                                      const swy_op_attr_t *attr, int flags)
{
    static const char fn[] = "swy_moe_combine_backward";
    swy_err_clear();
    SWY_CHECK(swy_moe_check_idle(route, fn));
    if (flags != SWY_MOE_BLOCKING && flags != SWY_MOE_ASYNC)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: flags %d are "
                           "neither SWY_MOE_BLOCKING nor SWY_MOE_ASYNC", fn,
                           flags);
    if (!route->combined)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: no combine has "
                           "completed on this route: the weight gradient "
                           "needs its rows", fn);
    if ((grad_tokens_out == NULL || topk_w == NULL) && route->send_rows > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s is NULL with "
                           "%lld rows to send", fn,
                           grad_tokens_out == NULL ? "grad_tokens_out"
                                                   : "topk_w",
                           (long long)route->send_rows);
    if (grad_expert_out == NULL && route->recv_rows > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: grad_expert_out "
                           "is NULL with %lld rows to receive", fn,
                           (long long)route->recv_rows);
    const struct swy_moe_plan *plan = route->plan;
    SWY_CHECK(swy_moe_check_mem(plan, grad_tokens_out, "grad_tokens_out",
                                fn));
    SWY_CHECK(swy_moe_check_mem(plan, topk_w, "topk_w", fn));
    SWY_CHECK(swy_moe_check_mem(plan, grad_expert_out, "grad_expert_out",
                                fn));
    SWY_CHECK(swy_moe_check_mem(plan, grad_topk_w, "grad_topk_w", fn));
    SWY_CHECK(swy_moe_check_attr(plan, attr, fn));
    if (plan->dev != NULL) {
        swy_status_t status = route->S == 0 ? SWY_OK : plan->dev->combine_bwd(
            plan->stream, route->dtype, route->comb_buf, route->slot_row_d,
            topk_w, grad_tokens_out, route->S, route->k, (int)route->H,
            route->tok_buf, grad_topk_w);
        if (status != SWY_OK)
            return swy_moe_dev_fail(plan, status, fn, "the weighted rows");
        SWY_CHECK(swy_moe_fwd_post(route, SWY_MOE_XCHG_COMBINE_BWD,
                                   grad_expert_out, attr, fn));
        return flags == SWY_MOE_ASYNC ? SWY_OK : swy_moe_fwd_wait_all(route);
    }
    size_t rb = route->rb;
    int k = route->k;
    const char *grad = grad_tokens_out;
    for (int t = 0; t < route->S; t++) {
        const char *g = grad + (size_t)t * rb;
        for (int s = 0; s < k; s++) {
            size_t slot = (size_t)t * k + s;
            int64_t row = route->slot_row[slot];
            double dot = 0;
            if (row >= 0) /* else dropped: its weight has no gradient */
                dot = swy_moe_scale_row(
                    route, g, route->comb_buf + (size_t)row * rb,
                    swy_moe_weight(route, topk_w, slot),
                    route->tok_buf + (size_t)row * rb);
            if (grad_topk_w != NULL)
                swy_moe_set_weight(route, grad_topk_w, slot, dot);
        }
    }
    SWY_CHECK(swy_moe_fwd_post(route, SWY_MOE_XCHG_COMBINE_BWD,
                               grad_expert_out, attr, fn));
    return flags == SWY_MOE_ASYNC ? SWY_OK : swy_moe_fwd_wait_all(route);
}
