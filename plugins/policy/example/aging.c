/* Example scheduling policy plugin "aging": Lina's strict priority, plus a
 * guard against starving lower priority — a micro-op that has waited
 * longer than SWY_POLICY_AGING_MS (default 50) is admitted as if it were of
 * the highest priority. Shows the swy_policy_v1 ABI: a plugin includes
 * only the public header and is selected with SWY_POLICY=aging. */
#include <stdlib.h>

#include "switchyard/swy_policy_v1.h"

typedef struct {
    uint64_t max_wait_ns;
} aging_t;

static swy_status_t aging_init(const swy_policy_host_v1_t *host, void **ctx_p)
{
    aging_t *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL)
        return SWY_ERR_NO_MEMORY;
    const char *ms = host->config_get("SWY_POLICY_AGING_MS");
    double value = ms != NULL ? strtod(ms, NULL) : 50.0;
    if (value <= 0)
        value = 50.0;
    ctx->max_wait_ns = (uint64_t)(value * 1e6);
    host->log(SWY_LOG_INFO, "policy", "aging: lower priority admitted after "
              "%.1f ms", value);
    *ctx_p = ctx;
    return SWY_OK;
}

static int aging_compare(void *ctx, const swy_policy_uop_v1_t *a,
                         const swy_policy_uop_v1_t *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->order != b->order)
        return a->order < b->order ? -1 : 1;
    return a->ready_index < b->ready_index ? -1 : a->ready_index > b->ready_index;
}

static int aging_admit(void *vctx, const swy_policy_link_v1_t *link,
                       const swy_policy_uop_v1_t *uop)
{
    const aging_t *ctx = vctx;
    if (link->inflight_bytes == 0)
        return SWY_POLICY_ISSUE;
    int starving = link->now_ns - uop->ready_ns > ctx->max_wait_ns;
    if (link->higher_pending && !starving)
        return link->inflight_le_bytes + uop->bytes <= link->credit_bytes
                   ? SWY_POLICY_ISSUE
                   : SWY_POLICY_SKIP; /* an aged one further back may go */
    return link->inflight_ge_bytes + uop->bytes <= link->window_bytes
               ? SWY_POLICY_ISSUE
               : SWY_POLICY_STOP;
}

static void aging_finalize(void *ctx)
{
    free(ctx);
}

__attribute__((visibility("default"))) const swy_policy_v1_t
    swy_policy_plugin_v1 = {
        .abi_version = SWY_POLICY_ABI_V1,
        .struct_size = sizeof(swy_policy_v1_t),
        .name = "aging",
        .description = "strict priority with a starvation guard",
        .init = aging_init,
        .compare = aging_compare,
        .admit = aging_admit,
        .finalize = aging_finalize,
};
