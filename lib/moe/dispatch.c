/* Dispatch (token rows to their experts) and its backward (gradient rows
 * back to the tokens, summed over each token's slots). */
#include "moe/moe_impl.h"
#include "util/copy.h"
#include "util/status.h"

/* Copy token t's row once per valid slot into the token-side send rows. */
static void pack_tokens(swy_moe_route_t route, const char *tokens)
{
    size_t rb = route->rb;
    for (int t = 0; t < route->S; t++)
        for (int s = 0; s < route->k; s++) {
            int64_t row = route->slot_row[(size_t)t * route->k + s];
            if (row >= 0)
                swy_copy(route->tok_buf + (size_t)row * rb,
                         tokens + (size_t)t * rb, rb);
        }
}

swy_status_t swy_moe_dispatch(swy_moe_route_t route, const void *tokens,
                              void *expert_in, const swy_op_attr_t *attr,
                              int flags)
{
    static const char fn[] = "swy_moe_dispatch";
    swy_err_clear();
    SWY_CHECK(swy_moe_check_idle(route, fn));
    if (flags != SWY_MOE_BLOCKING && flags != SWY_MOE_ASYNC)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: flags %d are "
                           "neither SWY_MOE_BLOCKING nor SWY_MOE_ASYNC", fn,
                           flags);
    if (tokens == NULL && route->send_rows > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: tokens is NULL "
                           "with %lld rows to send", fn,
                           (long long)route->send_rows);
    if (expert_in == NULL && route->recv_rows > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: expert_in is "
                           "NULL with %lld rows to receive", fn,
                           (long long)route->recv_rows);
    const struct swy_moe_plan *plan = route->plan;
    SWY_CHECK(swy_moe_check_mem(plan, tokens, "tokens", fn));
    SWY_CHECK(swy_moe_check_mem(plan, expert_in, "expert_in", fn));
    SWY_CHECK(swy_moe_check_attr(plan, attr, fn));
    if (plan->dev == NULL) {
        pack_tokens(route, tokens);
    } else if (route->send_rows > 0) {
        swy_status_t status = plan->dev->pack(
            plan->stream, route->dtype, tokens, route->slot_row_d, route->S,
            route->k, (int)route->H, route->tok_buf);
        if (status != SWY_OK)
            return swy_moe_dev_fail(plan, status, fn, "packing the tokens");
    }
    SWY_CHECK(swy_moe_fwd_post(route, SWY_MOE_XCHG_DISPATCH, expert_in, attr,
                               fn));
    return flags == SWY_MOE_ASYNC ? SWY_OK : swy_moe_fwd_wait_all(route);
}

swy_status_t swy_moe_dispatch_backward_post_chunk(swy_moe_route_t route,
                                                  int chunk,
                                                  const void *grad_expert_in,
                                                  const swy_op_attr_t *attr)
{
    swy_err_clear();
    return swy_moe_rev_post_chunk(route, SWY_MOE_XCHG_DISPATCH_BWD, chunk,
                                  grad_expert_in, attr,
                                  "swy_moe_dispatch_backward_post_chunk");
}

swy_status_t swy_moe_dispatch_backward_finish(swy_moe_route_t route,
                                              void *grad_tokens)
{
    static const char fn[] = "swy_moe_dispatch_backward_finish";
    swy_err_clear();
    SWY_CHECK(swy_moe_rev_check_posted(route, SWY_MOE_XCHG_DISPATCH_BWD, fn));
    if (grad_tokens == NULL && route->S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: grad_tokens is "
                           "NULL with %d tokens", fn, route->S);
    const struct swy_moe_plan *plan = route->plan;
    SWY_CHECK(swy_moe_check_mem(plan, grad_tokens, "grad_tokens", fn));
    SWY_CHECK(swy_moe_rev_wait_all(route));
    if (plan->dev != NULL) {
        swy_status_t status = route->S == 0 ? SWY_OK : plan->dev->pack_bwd(
            plan->stream, route->dtype, route->tok_buf, route->slot_row_d,
            route->S, route->k, (int)route->H, grad_tokens);
        return status == SWY_OK ? SWY_OK
                                : swy_moe_dev_fail(plan, status, fn,
                                                   "summing the slots");
    }
    /* The gradient of a token copied to several slots is the sum of the
     * slots' gradients. */
    size_t rb = route->rb;
    char *out = grad_tokens;
    for (int t = 0; t < route->S; t++) {
        swy_moe_acc_zero(route);
        for (int s = 0; s < route->k; s++) {
            int64_t row = route->slot_row[(size_t)t * route->k + s];
            if (row >= 0)
                swy_moe_acc_add(route, 1.0, route->tok_buf + (size_t)row * rb);
        }
        swy_moe_acc_store(route, out + (size_t)t * rb);
    }
    return SWY_OK;
}

swy_status_t swy_moe_dispatch_backward(swy_moe_route_t route,
                                       const void *grad_expert_in,
                                       void *grad_tokens,
                                       const swy_op_attr_t *attr)
{
    static const char fn[] = "swy_moe_dispatch_backward";
    swy_err_clear();
    SWY_CHECK(swy_moe_check_idle(route, fn));
    if (grad_tokens == NULL && route->S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: grad_tokens is "
                           "NULL with %d tokens", fn, route->S);
    SWY_CHECK(swy_moe_check_mem(route->plan, grad_tokens, "grad_tokens",
                                fn));
    for (int j = 0; j < route->d; j++)
        SWY_CHECK(swy_moe_rev_post_chunk(route, SWY_MOE_XCHG_DISPATCH_BWD, j,
                                         grad_expert_in, attr, fn));
    return swy_moe_dispatch_backward_finish(route, grad_tokens);
}
