/* The built-in policies and the policy plugin loader.
 *
 *   fifo    whole ops in submission order, as one NCCL stream: a micro-op
 *           leaves only when every earlier op on this rank has completed
 *           (receives aside: swy_sched_oldest_op).
 *   fair    every op issues as soon as its own steps allow, with no
 *           priority between ops: two NCCL streams sharing a link, what
 *           users have today. Two streams get two connections, which the
 *           kernel shares fairly; over one connection per peer the same
 *           share comes from start-time fair queueing of micro-ops, each
 *           op keeping two partitions in flight (a stream's double
 *           buffering, or about 4 ms of the link where that is more,
 *           the allowance of lina's top priority), so the wire sees the
 *           ops interleaved.
 *   lina    strict priority (Lina, ATC'23): the queue is ordered by
 *           priority; a priority below the highest the comm has used (it
 *           may be preempted), and anything below an incomplete higher
 *           priority op or an all-to-all announced by swy_phase_hint, has
 *           at most SWY_CREDIT_BYTES in flight per link, and none starts
 *           while higher priority is in flight on its link or, for a peer
 *           on another host, on any link through the same uplink.
 *   credit  ByteScheduler's credit queue (SOSP'19, BytePS
 *           scheduled_queue.cc): ordered by priority, and a micro-op leaves
 *           only if it fits the link's remaining credit, whatever its
 *           priority.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "sched/policy.h"
#include "transport/transport.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

static swy_status_t nop_init(const swy_policy_host_v1_t *host, void **ctx_p)
{
    *ctx_p = NULL;
    return SWY_OK;
}

static void nop_finalize(void *ctx)
{
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

/* Sequence numbers wrap at 2^24: compare them on the circle. */
static int cmp_seq(uint32_t a, uint32_t b)
{
    uint32_t d = (a - b) & 0xFFFFFFu;
    return d == 0 ? 0 : d < 0x800000u ? 1 : -1;
}

static int cmp_submission(void *ctx, const swy_policy_uop_v1_t *a,
                          const swy_policy_uop_v1_t *b)
{
    int c = cmp_seq(a->op_seq, b->op_seq);
    return c ? c : cmp_u64(a->ready_index, b->ready_index);
}

static int cmp_priority(void *ctx, const swy_policy_uop_v1_t *a,
                        const swy_policy_uop_v1_t *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->order != b->order)
        return a->order < b->order ? -1 : 1;
    return cmp_submission(ctx, a, b);
}

static int fits(size_t inflight, size_t bytes, size_t limit)
{
    return inflight == 0 || inflight + bytes <= limit;
}

static int fifo_admit(void *ctx, const swy_policy_link_v1_t *link,
                      const swy_policy_uop_v1_t *uop)
{
    if (uop->op_seq != link->oldest_op_seq)
        return SWY_POLICY_STOP; /* a later op waits for the stream */
    return fits(link->inflight_bytes, uop->bytes, link->window_bytes)
               ? SWY_POLICY_ISSUE
               : SWY_POLICY_STOP;
}

static int cmp_fair(void *ctx, const swy_policy_uop_v1_t *a,
                    const swy_policy_uop_v1_t *b)
{
    int c = cmp_u64(a->fair_key, b->fair_key);
    return c ? c : cmp_submission(ctx, a, b);
}

/* The bytes one op may keep in flight on a link: about 4 ms of the link
 * (at least two partitions: double buffering), capped by the window. The
 * top priority of lina has it, and so has every op under fair, so that
 * the baseline gets the same allowance as the policy it is compared with
 * (docs/measuring.md, "Fair baselines"). */
static size_t op_allowance(const swy_policy_link_v1_t *link)
{
    return SWY_MIN(link->window_bytes,
                   SWY_MAX(2 * link->partition_bytes, link->burst_bytes));
}

static int fair_admit(void *ctx, const swy_policy_link_v1_t *link,
                      const swy_policy_uop_v1_t *uop)
{
    if (link->inflight_bytes == 0)
        return SWY_POLICY_ISSUE;
    return fits(uop->op_inflight_bytes, uop->bytes, op_allowance(link))
               ? SWY_POLICY_ISSUE
               : SWY_POLICY_SKIP;
}

static int lina_admit(void *ctx, const swy_policy_link_v1_t *link,
                      const swy_policy_uop_v1_t *uop)
{
    /* Bytes handed to a transport cannot be recalled: a high-priority op
     * arriving later waits for all of them. So a priority that can be
     * preempted (one below the highest this comm has used) never has more
     * than the credit in flight per link, and while a higher-priority op
     * is actually incomplete, or announced by swy_phase_hint, everything
     * of lower priority is held to it — Lina's "at most one micro-op
     * ahead" worst case. The top priority uses the whole window. */
    int preemptible = uop->priority < link->max_priority_seen;
    int held = preemptible || link->higher_pending ||
               (link->phase == SWY_PHASE_A2A_IMMINENT &&
                uop->priority < SWY_PRIO_HIGH);
    if (held) {
        /* While higher priority is on this link, nothing lower starts
         * (Lina: allreduce micro-ops go only when no all-to-all is
         * pending). A higher op that has nothing on this link yet (its
         * peer has not posted it) does not stop lower ones, within the
         * credit: that peer may be waiting for exactly them. Links to
         * other hosts share one uplink and the queue in front of it: a
         * micro-op to one peer there waits behind what went to the
         * others, so higher priority on any of them holds this one. */
        int higher_on_link =
            link->uplink_inflight_bytes > link->uplink_inflight_le_bytes;
        if (link->higher_pending && higher_on_link)
            return SWY_POLICY_STOP;
        return fits(link->inflight_le_bytes, uop->bytes, link->credit_bytes)
                   ? SWY_POLICY_ISSUE
                   : SWY_POLICY_STOP;
    }
    /* Lower priority in flight never holds higher priority back: it is
     * bounded by the credit already. The top priority keeps about 4 ms of
     * its link in flight (at least two partitions: double buffering)
     * rather than the whole window: a burst of the window into a shaped
     * or congested link overflows its queue and slows the all-to-all,
     * while partitions cut small for an uplink shared by many flows left
     * it waiting for the receiver between micro-ops, with a spread of
     * several times its time alone (docs/performance.md,
     * "interference"). */
    return fits(link->inflight_ge_bytes, uop->bytes, op_allowance(link))
               ? SWY_POLICY_ISSUE
               : SWY_POLICY_STOP;
}

static int credit_admit(void *ctx, const swy_policy_link_v1_t *link,
                        const swy_policy_uop_v1_t *uop)
{
    return fits(link->inflight_bytes, uop->bytes, link->credit_bytes)
               ? SWY_POLICY_ISSUE
               : SWY_POLICY_STOP;
}

#define BUILTIN(var, nm, desc, cmp, adm)                                      \
    static const swy_policy_v1_t var = {                                      \
        SWY_POLICY_ABI_V1, sizeof(swy_policy_v1_t), nm, desc, nop_init, cmp,  \
        adm, nop_finalize}

BUILTIN(policy_fifo, "fifo", "whole ops in submission order (one stream)",
        cmp_submission, fifo_admit);
BUILTIN(policy_fair, "fair", "ops share links fairly, without priority "
        "(concurrent streams)", cmp_fair, fair_admit);
BUILTIN(policy_lina, "lina", "strict priority with a credit for lower "
        "priority while higher waits (Lina)", cmp_priority, lina_admit);
BUILTIN(policy_credit, "credit", "priority queue bounded by a credit per "
        "link (ByteScheduler)", cmp_priority, credit_admit);

const swy_policy_v1_t *const swy_policy_builtins[] = {
    &policy_fifo, &policy_fair, &policy_lina, &policy_credit, NULL};

swy_status_t swy_policy_plugin_open(const char *path, swy_policy_v1_t *table,
                                    const swy_policy_v1_t **ops_p,
                                    void **dl_handle_p, char *why,
                                    size_t why_len)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        snprintf(why, why_len, "cannot load %s: %s", path, dlerror());
        return SWY_ERR_INVALID_ARG;
    }
    /* Newest ABI first; version 1 is the only one so far. */
    int found = swy_plugin_table(handle, path, SWY_POLICY_PLUGIN_SYMBOL_V1,
                                 SWY_POLICY_ABI_V1, table, sizeof(*table),
                                 SWY_POLICY_V1_SIZE_V1, why, why_len);
    if (found == 0) {
        snprintf(why, why_len, "%s has no symbol %s", path,
                 SWY_POLICY_PLUGIN_SYMBOL_V1);
    } else if (found > 0 &&
               (table->init == NULL || table->compare == NULL ||
                table->admit == NULL || table->finalize == NULL ||
                table->name == NULL)) {
        snprintf(why, why_len, "%s: a required entry point is NULL", path);
    } else if (found > 0) {
        *ops_p = table;
        *dl_handle_p = handle;
        return SWY_OK;
    }
    dlclose(handle);
    return SWY_ERR_INVALID_ARG;
}

static const swy_policy_host_v1_t *policy_host(int rank, int nranks)
{
    static _Thread_local swy_policy_host_v1_t host;
    host = (swy_policy_host_v1_t){SWY_POLICY_ABI_V1, sizeof(host), swy_log,
                                  swy_config_get, rank, nranks};
    return &host;
}

swy_status_t swy_policy_load(const char *name, int rank, int nranks,
                             swy_policy_t *policy)
{
    char path[4096], why[4096];
    memset(policy, 0, sizeof(*policy));
    for (int i = 0; swy_policy_builtins[i] != NULL; i++)
        if (strcmp(swy_policy_builtins[i]->name, name) == 0)
            policy->ops = swy_policy_builtins[i];
    if (policy->ops == NULL) {
        swy_status_t status = swy_plugin_find("policy", name, path,
                                              sizeof(path), why, sizeof(why));
        if (status == SWY_OK)
            status = swy_policy_plugin_open(path, &policy->table,
                                            &policy->ops,
                                            &policy->dl_handle, why,
                                            sizeof(why));
        if (status != SWY_OK)
            return swy_err_set(SWY_ERR_INVALID_ARG, "sched",
                               "SWY_POLICY=%s is neither a built-in policy "
                               "(fifo, fair, lina, credit) nor a usable "
                               "plugin: %s", name, why);
        swy_info("sched", "policy '%s' loaded from %s", name, path);
    }
    policy->by_priority = strcmp(policy->ops->name, "fifo") != 0 &&
                          strcmp(policy->ops->name, "fair") != 0;
    swy_status_t status = policy->ops->init(policy_host(rank, nranks),
                                            &policy->ctx);
    if (status != SWY_OK) {
        if (policy->dl_handle != NULL)
            dlclose(policy->dl_handle);
        return swy_err_set(status, "sched", "policy '%s' failed to "
                           "initialize", name);
    }
    return SWY_OK;
}

void swy_policy_unload(swy_policy_t *policy)
{
    if (policy == NULL || policy->ops == NULL)
        return;
    policy->ops->finalize(policy->ctx);
    if (policy->dl_handle != NULL)
        dlclose(policy->dl_handle);
    policy->ops = NULL;
}
