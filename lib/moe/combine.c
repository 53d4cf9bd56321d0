/* Combine (expert outputs back to their tokens, weighted by the gate) and
 * its backward (gradients of the expert outputs and of the gate weights).
 * The combined-back rows stay in the route: the weight gradient
 * dL/dw[t][s] = dot(dL/dy[t], out_row(t, s)) needs them. */
#include <string.h>

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
                                    const float *topk_w, void *tokens_out)
{
    static const char fn[] = "swy_moe_combine_finish";
    swy_err_clear();
    SWY_CHECK(swy_moe_rev_check_posted(route, SWY_MOE_XCHG_COMBINE, fn));
    if ((topk_w == NULL || tokens_out == NULL) && route->S > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %s is NULL with "
                           "%d tokens", fn,
                           topk_w == NULL ? "topk_w" : "tokens_out",
                           route->S);
    SWY_CHECK(swy_moe_rev_wait_all(route));
    route->combined = 1;
    size_t H = route->H, rb = route->rb;
    int k = route->k;
    char *out = tokens_out;
    float *acc = route->acc;
    for (int t = 0; t < route->S; t++) {
        memset(acc, 0, H * sizeof(float));
        for (int s = 0; s < k; s++) {
            int64_t row = route->slot_row[(size_t)t * k + s];
            if (row < 0)
                continue; /* dropped: contributes nothing */
            float w = topk_w[(size_t)t * k + s];
            const char *src = route->comb_buf + (size_t)row * rb;
            for (size_t h = 0; h < H; h++)
                acc[h] += w * swy_moe_get(route, src, h);
        }
        for (size_t h = 0; h < H; h++)
            swy_moe_put(route, out + (size_t)t * rb, h, acc[h]);
    }
    return SWY_OK;
}

swy_status_t swy_moe_combine(swy_moe_route_t route, const void *expert_out,
                             const float *topk_w, void *tokens_out,
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
    for (int j = 0; j < route->d; j++)
        SWY_CHECK(swy_moe_rev_post_chunk(route, SWY_MOE_XCHG_COMBINE, j,
                                         expert_out, attr, fn));
    return swy_moe_combine_finish(route, topk_w, tokens_out);
}

swy_status_t swy_moe_combine_backward(swy_moe_route_t route,
                                      const void *grad_tokens_out,
                                      const float *topk_w,
                                      void *grad_expert_out,
                                      float *grad_topk_w,
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
    size_t H = route->H, rb = route->rb;
    int k = route->k;
    const char *grad = grad_tokens_out;
    for (int t = 0; t < route->S; t++) {
        const char *g = grad + (size_t)t * rb;
        for (int s = 0; s < k; s++) {
            size_t slot = (size_t)t * k + s;
            int64_t row = route->slot_row[slot];
            if (row < 0) {
                if (grad_topk_w != NULL)
                    grad_topk_w[slot] = 0.0f;
                continue;
            }
            const char *y = route->comb_buf + (size_t)row * rb;
            char *dst = route->tok_buf + (size_t)row * rb;
            float w = topk_w[slot];
            double dot = 0;
            for (size_t h = 0; h < H; h++) {
                float gh = swy_moe_get(route, g, h);
                dot += (double)gh * swy_moe_get(route, y, h);
                swy_moe_put(route, dst, h, w * gh);
            }
            if (grad_topk_w != NULL)
                grad_topk_w[slot] = (float)dot;
        }
    }
    SWY_CHECK(swy_moe_fwd_post(route, SWY_MOE_XCHG_COMBINE_BWD,
                               grad_expert_out, attr, fn));
    return flags == SWY_MOE_ASYNC ? SWY_OK : swy_moe_fwd_wait_all(route);
}
