/* One MoE block over lib/moe and the kernels (see moe_block.h), and the
 * block core that the GPU block (moe_block_cuda.c) uses too. */
#include "moe_block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swy_kernels.h"

struct swt_moe_block {
    swt_moe_block_core_t core; /* shape, route, counts, statistics */
    /* forward state, kept for the backward */
    const float *x;
    const float *dout; /* the backward's, for the shadowed experts */
    float *probs;     /* [S][E] */
    float *logits;    /* [S][E]; reused as dlogits */
    int *topk_idx;    /* [S][k] */
    float *topk_w;    /* [S][k] */
    float *f;         /* [n_groups][E]: GShard's f_e per group */
    int *load;        /* [E] scratch of the capacity drop */
    int *choice_idx;  /* [S][k] choices before capacity (topo gate) */
    int rerouted;
    /* expert side, [rows][H] or [rows][F], grown to the largest route */
    size_t rows_cap;
    float *expert_in, *expert_out, *h_pre, *h_act;
    float *grad_expert_out, *grad_expert_in, *dh;
    /* token side backward scratch */
    float *grad_topk_w; /* [S][k] */
    float *dprobs;      /* [S][E] */
    float *dx_gate;     /* [S][H] */
    float *y;           /* [S][H]: MoE(x) */
    /* shadowing (see moe_block.h): n_shadow experts computed locally */
    int n_shadow;
    swt_shadow_expert_t *shadow; /* [n_shadow], by id */
    int *shadow_of;     /* [E]: index into shadow, or -1 */
    int *route_idx;     /* [S][k]: topk_idx without the shadowed slots,
                         * as global slots (slot_of) */
    int64_t *chosen;    /* [E] */
    /* the last forward's shadowed slots, grouped by shadow: slots
     * sh_slot[sh_off[i] .. sh_off[i+1]) (t*k + j, in slot order) went to
     * shadow i; row r of the sh_* buffers is slot sh_slot[r] */
    int *sh_slot;       /* [S*k] */
    int *sh_off;        /* [n_shadow + 1] */
    float *sh_in, *sh_out, *sh_gout, *sh_gin; /* [S*k][H] */
    float *sh_hpre, *sh_hact, *sh_dh;         /* [S*k][F] */
};

static void *alloc_floats(size_t n)
{
    return malloc((n ? n : 1) * sizeof(float));
}

int swt_moe_block_core_init(swt_moe_block_core_t *core, swy_moe_plan_t plan,
                            swy_comm_t comm,
                            const swt_moe_block_params_t *params,
                            const char *device)
{
    memset(core, 0, sizeof(*core));
    core->p = *params;
    core->plan = plan;
    core->comm = comm;
    core->S = params->tokens;
    core->H = params->hidden;
    core->F = params->ffn;
    core->E = params->n_experts;
    core->k = params->top_k;
    core->nl = params->n_local;
    core->n_groups = core->S / params->gate_group;
    core->capacity = params->capacity_factor > 0
                         ? swy_k_gate_capacity(params->capacity_factor,
                                               params->gate_group, core->k,
                                               core->E)
                         : -1;
    if (device != NULL)
        snprintf(core->where, sizeof(core->where), "layer %d (%s)",
                 params->layer, device);
    else
        snprintf(core->where, sizeof(core->where), "layer %d",
                 params->layer);
    snprintf(core->name_fwd, sizeof(core->name_fwd), "L%d.fwd",
             params->layer);
    snprintf(core->name_bwd, sizeof(core->name_bwd), "L%d.bwd",
             params->layer);
    core->sent = calloc((size_t)core->E, sizeof(int64_t));
    core->sent_slot = calloc((size_t)core->E, sizeof(int64_t));
    if (core->sent == NULL || core->sent_slot == NULL) {
        swt_moe_block_core_finalize(core);
        return -1;
    }
    /* TA-MoE sizes the dispatch to its target: an expert that gets twice
     * the uniform share of this rank's slots gets twice the capacity, the
     * total staying capacity_factor * G * k. Sized for 1/E instead, the
     * experts the gate is steered toward overflow and their rows are
     * dropped, not sent (see swt_ta_capacity_t). */
    if (params->gate == SWT_GATE_TA && params->capacity_factor > 0 &&
        params->ta_capacity != SWT_TA_CAP_UNIFORM) {
        core->capacity_each = malloc((size_t)core->E * sizeof(int));
        core->routed_share = calloc((size_t)core->E, sizeof(double));
        if (core->capacity_each == NULL || core->routed_share == NULL) {
            swt_moe_block_core_finalize(core);
            return -1;
        }
        for (int e = 0; e < core->E; e++)
            core->routed_share[e] = params->ta_capacity == SWT_TA_CAP_TARGET
                                        ? params->ta_share[e]
                                        : 1.0 / core->E;
    }
    return 0;
}

void swt_moe_block_core_capacity_begin(swt_moe_block_core_t *core)
{
    if (core->capacity_each != NULL)
        swy_k_gate_capacity_shares(core->p.capacity_factor,
                                   core->p.gate_group, core->k, core->E,
                                   core->routed_share, core->capacity_each);
}

/* Cong et al.'s EMA weight of the past (p = theta p + (1 - theta) x). */
#define SWT_ROUTED_SHARE_THETA 0.9

void swt_moe_block_core_capacity_end(swt_moe_block_core_t *core,
                                     const int *choice_idx)
{
    if (core->capacity_each == NULL || core->p.ta_capacity !=
                                           SWT_TA_CAP_ROUTED)
        return;
    size_t slots = (size_t)core->S * core->k;
    if (slots == 0)
        return;
    double theta = SWT_ROUTED_SHARE_THETA, per_slot = (1.0 - theta) / slots;
    for (int e = 0; e < core->E; e++)
        core->routed_share[e] *= theta;
    for (size_t s = 0; s < slots; s++)
        if (choice_idx[s] >= 0)
            core->routed_share[choice_idx[s]] += per_slot;
}

void swt_moe_block_core_finalize(swt_moe_block_core_t *core)
{
    swt_moe_block_core_route_end(core);
    free(core->routed_share);
    free(core->capacity_each);
    core->capacity_each = NULL;
    core->routed_share = NULL;
    free(core->sent_slot);
    free(core->sent);
    core->sent = core->sent_slot = NULL;
}

swy_status_t swt_moe_block_core_fail(const swt_moe_block_core_t *core,
                                     const char *what, swy_status_t status)
{
    fprintf(stderr, "swy-train: %s: %s failed: %s: %s\n", core->where, what,
            swy_status_string(status), swy_last_error(NULL));
    return status;
}

swy_status_t swt_moe_block_core_route(swt_moe_block_core_t *core,
                                      const int *slots, swt_timing_t *tm)
{
    swt_moe_block_core_route_end(core);
    double tr = swt_now();
    SWT_MOE_CHECK(core, swy_moe_route(core->plan, slots, core->S,
                                      &core->route), "route");
    double dt = swt_now() - tr;
    swt_timing_add(tm, SWT_T_A2A, dt);
    swt_timing_add(tm, SWT_T_A2A_WAIT, dt);
    core->layout.struct_size = sizeof(core->layout);
    SWT_MOE_CHECK(core, swy_moe_route_layout(core->route, &core->layout),
                  "route_layout");
    if (core->p.slot_of != NULL) {
        SWT_MOE_CHECK(core, swy_moe_route_counts(core->route,
                                                 core->sent_slot, NULL),
                      "route_counts");
        for (int e = 0; e < core->E; e++)
            core->sent[e] = core->sent_slot[core->p.slot_of[e]];
    } else {
        SWT_MOE_CHECK(core, swy_moe_route_counts(core->route, core->sent,
                                                 NULL),
                      "route_counts");
    }
    return SWY_OK;
}

void swt_moe_block_core_route_end(swt_moe_block_core_t *core)
{
    swy_moe_route_destroy(core->route);
    core->route = NULL;
}

void swt_moe_block_core_a2a_imminent(const swt_moe_block_core_t *core)
{
    if (core->p.phase_hints)
        (void)swy_phase_hint(core->comm, SWY_PHASE_A2A_IMMINENT);
}

void swt_moe_block_core_segment(swt_timing_t *tm, double seg0,
                                double first_end, double second0,
                                double end)
{
    swt_timing_add(tm, SWT_T_A2A, (first_end - seg0) + (end - second0));
    swt_timing_add(tm, SWT_T_MOE_SEG, end - seg0);
}

/* Return a failure of the block's own computation (already reported). */
#define CORE_STEP(call)                                                      \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return st_;                                                      \
    } while (0)

swy_status_t swt_moe_block_core_forward(swt_moe_block_core_t *core,
                                        const void *x, void *expert_in,
                                        const void *expert_out,
                                        const void *topk_w, void *y,
                                        const swt_moe_chunk_ops_t *ops,
                                        swt_timing_t *tm)
{
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = core->name_fwd;
    int d = core->layout.pipeline_degree;
    double seg0 = swt_now(), disp_end = seg0, comb0 = seg0, dt;
    SWT_MOE_CHECK(core, swy_moe_dispatch(core->route, x, expert_in, &attr,
                                         SWY_MOE_ASYNC),
                  "dispatch");
    if (ops->overlap != NULL) { /* while the dispatch travels */
        CORE_STEP(ops->overlap(ops->arg, tm, &dt));
        swt_timing_add(tm, SWT_T_EXPERT, dt);
    }
    for (int j = 0; j < d; j++) {
        double tw = swt_now();
        SWT_MOE_CHECK(core, swy_moe_wait_chunk(core->route, j),
                      "dispatch wait");
        disp_end = swt_now();
        swt_timing_add(tm, SWT_T_A2A_WAIT, disp_end - tw);
        CORE_STEP(ops->experts(ops->arg, j, tm, &dt));
        swt_timing_add(tm, SWT_T_EXPERT, dt);
        if (j == 0)
            comb0 = swt_now();
        SWT_MOE_CHECK(core, swy_moe_combine_post_chunk(core->route, j,
                                                       expert_out, &attr),
                      "combine post");
    }
    double tw = swt_now();
    SWT_MOE_CHECK(core, swy_moe_combine_finish(core->route, topk_w, y),
                  "combine finish");
    double end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, end - tw);
    swt_moe_block_core_segment(tm, seg0, disp_end, comb0, end);
    return SWY_OK;
}

swy_status_t swt_moe_block_core_backward(swt_moe_block_core_t *core,
                                         const void *dout,
                                         const void *topk_w,
                                         void *grad_expert_out,
                                         void *grad_topk_w,
                                         const void *grad_expert_in,
                                         void *dx,
                                         const swt_moe_chunk_ops_t *ops,
                                         swt_timing_t *tm)
{
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = core->name_bwd;
    int d = core->layout.pipeline_degree;
    /* Lina: stop issuing gradient micro-ops when backward enters the MoE
     * block, so the combine's all-to-all finds the links clear. */
    swt_moe_block_core_a2a_imminent(core);
    double seg0 = swt_now(), cb_end = seg0, db0 = seg0, dt;
    SWT_MOE_CHECK(core, swy_moe_combine_backward(core->route, dout, topk_w,
                                                 grad_expert_out, grad_topk_w,
                                                 &attr, SWY_MOE_ASYNC),
                  "combine backward");
    if (ops->overlap != NULL) { /* while the combine backward travels */
        CORE_STEP(ops->overlap(ops->arg, tm, &dt));
        swt_timing_add(tm, SWT_T_EXPERT, dt);
    }
    for (int j = 0; j < d; j++) {
        double tw = swt_now();
        SWT_MOE_CHECK(core, swy_moe_wait_chunk(core->route, j),
                      "combine backward wait");
        cb_end = swt_now();
        swt_timing_add(tm, SWT_T_A2A_WAIT, cb_end - tw);
        /* The dispatch backward follows this chunk's expert backward. */
        if (j == d - 1)
            swt_moe_block_core_a2a_imminent(core);
        CORE_STEP(ops->experts(ops->arg, j, tm, &dt));
        swt_timing_add(tm, SWT_T_EXPERT, dt);
        if (j == 0)
            db0 = swt_now();
        SWT_MOE_CHECK(core, swy_moe_dispatch_backward_post_chunk(
                                core->route, j, grad_expert_in, &attr),
                      "dispatch backward post");
    }
    double tw = swt_now();
    SWT_MOE_CHECK(core, swy_moe_dispatch_backward_finish(core->route, dx),
                  "dispatch backward finish");
    double end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, end - tw);
    swt_moe_block_core_segment(tm, seg0, cb_end, db0, end);
    swt_moe_block_core_route_end(core);
    return SWY_OK;
}

int swt_moe_block_create(swy_moe_plan_t plan, swy_comm_t comm,
                         const swt_moe_block_params_t *params,
                         swt_moe_block_t **blk_p)
{
    swt_moe_block_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -1;
    if (swt_moe_block_core_init(&b->core, plan, comm, params, NULL) != 0) {
        free(b);
        return -1;
    }
    size_t S = (size_t)b->core.S, E = (size_t)b->core.E,
           k = (size_t)b->core.k, H = (size_t)b->core.H;
    b->probs = alloc_floats(S * E);
    b->logits = alloc_floats(S * E);
    b->dprobs = alloc_floats(S * E);
    b->topk_idx = malloc((S * k > 0 ? S * k : 1) * sizeof(int));
    b->topk_w = alloc_floats(S * k);
    b->grad_topk_w = alloc_floats(S * k);
    b->f = alloc_floats((size_t)b->core.n_groups * E);
    b->load = malloc(E * sizeof(int));
    b->choice_idx = malloc((S * k > 0 ? S * k : 1) * sizeof(int));
    b->route_idx = malloc((S * k > 0 ? S * k : 1) * sizeof(int));
    b->chosen = calloc(E, sizeof(int64_t));
    b->dx_gate = alloc_floats(S * H);
    b->y = alloc_floats(S * H);
    if (!b->probs || !b->logits || !b->dprobs || !b->topk_idx ||
        !b->topk_w || !b->grad_topk_w || !b->f || !b->load ||
        !b->choice_idx || !b->chosen || !b->route_idx || !b->dx_gate ||
        !b->y) {
        swt_moe_block_destroy(b);
        return -1;
    }
    *blk_p = b;
    return 0;
}

void swt_moe_block_destroy(swt_moe_block_t *b)
{
    if (b == NULL)
        return;
    free(b->sh_dh);
    free(b->sh_hact);
    free(b->sh_hpre);
    free(b->sh_gin);
    free(b->sh_gout);
    free(b->sh_out);
    free(b->sh_in);
    free(b->sh_off);
    free(b->sh_slot);
    free(b->route_idx);
    free(b->shadow_of);
    free(b->shadow);
    free(b->chosen);
    free(b->dh);
    free(b->grad_expert_in);
    free(b->grad_expert_out);
    free(b->h_act);
    free(b->h_pre);
    free(b->expert_out);
    free(b->expert_in);
    free(b->y);
    free(b->dx_gate);
    free(b->choice_idx);
    free(b->load);
    free(b->f);
    free(b->grad_topk_w);
    free(b->topk_w);
    free(b->topk_idx);
    free(b->dprobs);
    free(b->logits);
    free(b->probs);
    swt_moe_block_core_finalize(&b->core);
    free(b);
}

double swt_moe_block_aux(const swt_moe_block_t *b)
{
    return b->core.aux;
}

int swt_moe_block_rerouted(const swt_moe_block_t *b)
{
    return b->rerouted;
}

int swt_moe_block_dropped(const swt_moe_block_t *b)
{
    return b->core.dropped;
}

const int64_t *swt_moe_block_sent(const swt_moe_block_t *b)
{
    return b->core.sent;
}

const int64_t *swt_moe_block_chosen(const swt_moe_block_t *b)
{
    return b->chosen;
}

/* The shadow buffers hold at most every slot of the rank, S*k rows; they
 * are allocated with the first shadow and kept. */
static int alloc_shadow_buffers(swt_moe_block_t *b)
{
    if (b->shadow_of != NULL)
        return 0;
    size_t S = (size_t)b->core.S, k = (size_t)b->core.k, E = (size_t)b->core.E;
    size_t rows = S * k, H = (size_t)b->core.H, F = (size_t)b->core.F;
    b->shadow_of = malloc(E * sizeof(int));
    b->sh_slot = malloc((rows ? rows : 1) * sizeof(int));
    b->sh_off = malloc((E + 1) * sizeof(int));
    b->sh_in = alloc_floats(rows * H);
    b->sh_out = alloc_floats(rows * H);
    b->sh_gout = alloc_floats(rows * H);
    b->sh_gin = alloc_floats(rows * H);
    b->sh_hpre = alloc_floats(rows * F);
    b->sh_hact = alloc_floats(rows * F);
    b->sh_dh = alloc_floats(rows * F);
    if (!b->shadow_of || !b->sh_slot || !b->sh_off ||
        !b->sh_in || !b->sh_out || !b->sh_gout || !b->sh_gin ||
        !b->sh_hpre || !b->sh_hact || !b->sh_dh) {
        void *bufs[] = {b->shadow_of, b->sh_slot, b->sh_off,
                        b->sh_in, b->sh_out, b->sh_gout, b->sh_gin,
                        b->sh_hpre, b->sh_hact, b->sh_dh};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            free(bufs[i]);
        b->shadow_of = NULL;
        b->sh_slot = b->sh_off = NULL;
        b->sh_in = b->sh_out = b->sh_gout = b->sh_gin = NULL;
        b->sh_hpre = b->sh_hact = b->sh_dh = NULL;
        return -1;
    }
    return 0;
}

int swt_moe_block_set_shadow(swt_moe_block_t *b, int n,
                             const swt_shadow_expert_t *experts)
{
    swt_shadow_expert_t *copy = NULL;
    if (n > 0) {
        copy = malloc((size_t)n * sizeof(*copy));
        if (copy == NULL || alloc_shadow_buffers(b) != 0) {
            free(copy);
            return -1;
        }
        memcpy(copy, experts, (size_t)n * sizeof(*copy));
    }
    free(b->shadow);
    b->shadow = copy;
    b->n_shadow = n;
    if (b->shadow_of != NULL) {
        for (int e = 0; e < b->core.E; e++)
            b->shadow_of[e] = -1;
        for (int i = 0; i < n; i++)
            b->shadow_of[experts[i].expert] = i;
    }
    return 0;
}

/* The expert-side buffers grow to the largest route seen; the number of
 * rows a rank receives changes every step with the gate's choices. */
static int reserve_rows(swt_moe_block_t *b, size_t rows)
{
    if (rows <= b->rows_cap)
        return 0;
    size_t n = rows + rows / 4;
    float **hbufs[] = {&b->expert_in, &b->expert_out, &b->grad_expert_out,
                       &b->grad_expert_in};
    float **fbufs[] = {&b->h_pre, &b->h_act, &b->dh};
    for (size_t i = 0; i < sizeof(hbufs) / sizeof(hbufs[0]); i++) {
        free(*hbufs[i]);
        *hbufs[i] = alloc_floats(n * (size_t)b->core.H);
        if (*hbufs[i] == NULL)
            return -1;
    }
    for (size_t i = 0; i < sizeof(fbufs) / sizeof(fbufs[0]); i++) {
        free(*fbufs[i]);
        *fbufs[i] = alloc_floats(n * (size_t)b->core.F);
        if (*fbufs[i] == NULL)
            return -1;
    }
    b->rows_cap = n;
    return 0;
}

/* Rows of local expert e in chunk j, as [*first, *first + return). */
static int64_t chunk_rows(const swt_moe_block_t *b, int e, int j,
                          int64_t *first)
{
    int d = b->core.layout.pipeline_degree;
    const int64_t *co = b->core.layout.chunk_offset + (size_t)e * (d + 1);
    *first = co[j];
    return co[j + 1] - co[j];
}

static void experts_fwd_chunk(swt_moe_block_t *b, int j)
{
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    for (int e = 0; e < b->core.nl; e++) {
        int64_t r0, n = chunk_rows(b, e, j, &r0);
        if (n == 0)
            continue;
        int rows = (int)n;
        swy_k_ffn_fwd(b->expert_in + r0 * H, &rows, 1, b->core.H, b->core.F,
                      b->core.p.w1 + e * H * F, b->core.p.b1 + e * F,
                      b->core.p.w2 + e * F * H, b->core.p.b2 + e * H,
                      b->h_pre + r0 * F, b->h_act + r0 * F,
                      b->expert_out + r0 * H);
    }
}

static void experts_bwd_chunk(swt_moe_block_t *b, int j)
{
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    for (int e = 0; e < b->core.nl; e++) {
        int64_t r0, n = chunk_rows(b, e, j, &r0);
        if (n == 0)
            continue;
        int rows = (int)n;
        swy_k_ffn_bwd(b->expert_in + r0 * H, b->h_pre + r0 * F,
                      b->h_act + r0 * F, b->grad_expert_out + r0 * H, &rows,
                      1, b->core.H, b->core.F, b->core.p.w1 + e * H * F,
                      b->core.p.w2 + e * F * H, b->dh + r0 * F,
                      b->grad_expert_in + r0 * H, b->core.p.dw1 + e * H * F,
                      b->core.p.db1 + e * F, b->core.p.dw2 + e * F * H,
                      b->core.p.db2 + e * H);
    }
}

/* Takes the shadowed slots out of the route (route_idx) and lists them by
 * shadow, in slot order, so that every shadow's rows are contiguous. */
static void shadow_split(swt_moe_block_t *b)
{
    size_t slots = (size_t)b->core.S * b->core.k;
    int n = b->n_shadow;
    memcpy(b->route_idx, b->topk_idx, slots * sizeof(int));
    for (int i = 0; i <= n; i++)
        b->sh_off[i] = 0;
    for (size_t s = 0; s < slots; s++) {
        int e = b->topk_idx[s];
        if (e >= 0 && b->shadow_of[e] >= 0)
            b->sh_off[b->shadow_of[e] + 1]++;
    }
    for (int i = 0; i < n; i++)
        b->sh_off[i + 1] += b->sh_off[i];
    int *fill = b->load; /* [E] scratch, free after the gate */
    for (int i = 0; i < n; i++)
        fill[i] = b->sh_off[i];
    for (size_t s = 0; s < slots; s++) {
        int e = b->topk_idx[s];
        if (e >= 0 && b->shadow_of[e] >= 0) {
            b->sh_slot[fill[b->shadow_of[e]]++] = (int)s;
            b->route_idx[s] = -1;
        }
    }
}

/* Forward of the shadowed experts on this rank's own rows. */
static void shadow_forward(swt_moe_block_t *b)
{
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    int rows_total = b->sh_off[b->n_shadow];
    for (int r = 0; r < rows_total; r++)
        memcpy(b->sh_in + (size_t)r * H,
               b->x + (size_t)(b->sh_slot[r] / b->core.k) * H,
               H * sizeof(float));
    for (int i = 0; i < b->n_shadow; i++) {
        const swt_shadow_expert_t *sx = &b->shadow[i];
        size_t r0 = (size_t)b->sh_off[i];
        int rows = b->sh_off[i + 1] - b->sh_off[i];
        if (rows == 0)
            continue;
        swy_k_ffn_fwd(b->sh_in + r0 * H, &rows, 1, b->core.H, b->core.F, sx->w1,
                      sx->b1, sx->w2, sx->b2, b->sh_hpre + r0 * F,
                      b->sh_hact + r0 * F, b->sh_out + r0 * H);
    }
}

/* y[t] += w(t, j) * out row of each shadowed slot (t, j). */
static void shadow_combine(swt_moe_block_t *b)
{
    size_t H = (size_t)b->core.H;
    int rows_total = b->sh_off[b->n_shadow];
    for (int r = 0; r < rows_total; r++) {
        int s = b->sh_slot[r];
        float w = b->topk_w[s], *y = b->y + (size_t)(s / b->core.k) * H;
        const float *o = b->sh_out + (size_t)r * H;
        for (size_t h = 0; h < H; h++)
            y[h] += w * o[h];
    }
}

/* Backward of the shadowed slots, as the combine backward and the
 * experts' backward do it for routed ones: grad_topk_w of the slot, the
 * expert's input gradient (sh_gin) and its weight gradients. */
static void shadow_backward(swt_moe_block_t *b, const float *dout)
{
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    int rows_total = b->sh_off[b->n_shadow];
    for (int r = 0; r < rows_total; r++) {
        int s = b->sh_slot[r];
        const float *g = dout + (size_t)(s / b->core.k) * H;
        const float *o = b->sh_out + (size_t)r * H;
        float *go = b->sh_gout + (size_t)r * H, w = b->topk_w[s];
        double dot = 0.0;
        for (size_t h = 0; h < H; h++) {
            dot += (double)g[h] * o[h];
            go[h] = w * g[h];
        }
        b->grad_topk_w[s] = (float)dot;
    }
    for (int i = 0; i < b->n_shadow; i++) {
        const swt_shadow_expert_t *sx = &b->shadow[i];
        size_t r0 = (size_t)b->sh_off[i];
        int rows = b->sh_off[i + 1] - b->sh_off[i];
        if (rows == 0)
            continue;
        swy_k_ffn_bwd(b->sh_in + r0 * H, b->sh_hpre + r0 * F,
                      b->sh_hact + r0 * F, b->sh_gout + r0 * H, &rows, 1,
                      b->core.H, b->core.F, sx->w1, sx->w2, b->sh_dh + r0 * F,
                      b->sh_gin + r0 * H, sx->dw1, sx->db1, sx->dw2,
                      sx->db2);
    }
}

/* dx[t] += input gradient of each shadowed slot of token t. */
static void shadow_add_dx(swt_moe_block_t *b, float *dx)
{
    size_t H = (size_t)b->core.H;
    int rows_total = b->sh_off[b->n_shadow];
    for (int r = 0; r < rows_total; r++)
        swy_k_add(b->sh_gin + (size_t)r * H, H,
                  dx + (size_t)(b->sh_slot[r] / b->core.k) * H);
}

/* Gate, per group of G tokens: softmax and top-k per token, the topology
 * gate's rerouting (--gate topo), then the GShard capacity drop (choice
 * order: a second choice never displaces a first) and the auxiliary loss
 * over the group. With --gate ta the loss is TA-MoE's: each expert's term
 * f_e m_e weighted by w_e (swy_moe_ta_target), whose minimum lies at the
 * bandwidth-proportional target; b->f then holds w_e f_e, which is all the
 * backward needs (d/dm_e of E sum w_e f_e m_e). */
static void gate_forward(swt_moe_block_t *b)
{
    int S = b->core.S, E = b->core.E, k = b->core.k, G = b->core.p.gate_group;
    int renorm = k > 1; /* GShard top-2; with k = 1 Switch's p_e weight */
    swy_k_gate_logits_fwd(b->x, b->core.p.wg, S, b->core.H, E, b->logits);
    swy_k_gate_topk(b->logits, S, E, k, renorm, b->topk_idx, b->topk_w,
                    b->probs);
    double aux = 0;
    b->core.dropped = 0;
    b->rerouted = 0;
    for (int g = 0; g < b->core.n_groups; g++) {
        size_t t0 = (size_t)g * G;
        float *f = b->f + (size_t)g * E;
        if (b->core.p.gate == SWT_GATE_TOPO)
            b->rerouted += swy_k_gate_topo_reroute(
                b->probs + t0 * E, G, E, k, renorm, b->core.p.node_of_expert,
                b->core.p.my_node, b->core.p.topo_cross_frac,
                b->topk_idx + t0 * k, b->topk_w + t0 * k);
        double a = swy_k_gate_aux_loss(b->probs + t0 * E, G, E, 1, f);
        if (b->core.p.gate == SWT_GATE_TA) {
            a = 0.0;
            for (int e = 0; e < E; e++) {
                double m = 0.0;
                for (int t = 0; t < G; t++)
                    m += b->probs[(t0 + (size_t)t) * E + (size_t)e];
                f[e] *= b->core.p.ta_weight[e];
                a += (double)f[e] * (m / G);
            }
            a *= E;
        }
        aux += a;
    }
    memcpy(b->choice_idx, b->topk_idx, (size_t)S * k * sizeof(int));
    swt_moe_block_core_capacity_begin(&b->core);
    for (int g = 0; g < b->core.n_groups; g++) {
        size_t t0 = (size_t)g * G;
        if (b->core.capacity_each != NULL)
            b->core.dropped += swy_k_gate_drop_each(
                b->topk_idx + t0 * k, b->topk_w + t0 * k, G, k, E,
                b->core.capacity_each, SWY_K_DROP_CHOICE_ORDER, b->load);
        else
            b->core.dropped += swy_k_gate_drop(
                b->topk_idx + t0 * k, b->topk_w + t0 * k, G, k, E,
                b->core.capacity, SWY_K_DROP_CHOICE_ORDER, b->load);
    }
    swt_moe_block_core_capacity_end(&b->core, b->choice_idx);
    b->core.aux = b->core.n_groups > 0 ? aux / b->core.n_groups : 0.0;
}

/* The routed choices as global slots: route_idx[s] = slot_of[e] of the
 * logical expert e in src[s] (which may be route_idx itself). */
static void map_slots(swt_moe_block_t *b, const int *src)
{
    size_t slots = (size_t)b->core.S * b->core.k;
    for (size_t s = 0; s < slots; s++)
        b->route_idx[s] = src[s] < 0 ? -1 : b->core.p.slot_of[src[s]];
}

/* The CPU block's computation around its exchanges
 * (swt_moe_chunk_ops_t). */
static swy_status_t cpu_experts_fwd(void *arg, int chunk, swt_timing_t *tm,
                                    double *dt_p)
{
    double tc = swt_now();
    experts_fwd_chunk(arg, chunk);
    *dt_p = swt_timing_compute_end(tm, tc);
    return SWY_OK;
}

static swy_status_t cpu_experts_bwd(void *arg, int chunk, swt_timing_t *tm,
                                    double *dt_p)
{
    double tc = swt_now();
    experts_bwd_chunk(arg, chunk);
    *dt_p = swt_timing_compute_end(tm, tc);
    return SWY_OK;
}

static swy_status_t cpu_shadow_fwd(void *arg, swt_timing_t *tm, double *dt_p)
{
    double tc = swt_now();
    shadow_forward(arg);
    *dt_p = swt_timing_compute_end(tm, tc);
    return SWY_OK;
}

static swy_status_t cpu_shadow_bwd(void *arg, swt_timing_t *tm, double *dt_p)
{
    swt_moe_block_t *b = arg;
    double tc = swt_now();
    shadow_backward(b, b->dout);
    *dt_p = swt_timing_compute_end(tm, tc);
    return SWY_OK;
}

swy_status_t swt_moe_block_forward(swt_moe_block_t *b, const float *x,
                                   float *out, swt_timing_t *tm)
{
    b->x = x;
    double t0 = swt_now();
    gate_forward(b);
    const int *routed = b->topk_idx;
    if (b->n_shadow > 0) {
        shadow_split(b);
        routed = b->route_idx;
    }
    if (b->core.p.slot_of != NULL) {
        map_slots(b, routed);
        routed = b->route_idx;
    }
    swt_timing_compute_end(tm, t0);

    swy_status_t status = swt_moe_block_core_route(&b->core, routed, tm);
    if (status != SWY_OK)
        return status;
    memcpy(b->chosen, b->core.sent, (size_t)b->core.E * sizeof(int64_t));
    for (int i = 0; i < b->n_shadow; i++)
        b->chosen[b->shadow[i].expert] += b->sh_off[i + 1] - b->sh_off[i];
    if (reserve_rows(b, (size_t)b->core.layout.recv_rows) != 0)
        return swt_moe_block_core_fail(&b->core, "allocating expert buffers",
                                       SWY_ERR_NO_MEMORY);

    swt_moe_chunk_ops_t ops = {cpu_experts_fwd,
                               b->n_shadow > 0 ? cpu_shadow_fwd : NULL, b};
    status = swt_moe_block_core_forward(&b->core, x, b->expert_in,
                                        b->expert_out, b->topk_w, b->y, &ops,
                                        tm);
    if (status != SWY_OK)
        return status;

    t0 = swt_now();
    if (b->n_shadow > 0)
        shadow_combine(b);
    size_t n = (size_t)b->core.S * b->core.H;
    memcpy(out, x, n * sizeof(float));
    swy_k_add(b->y, n, out);
    swt_timing_compute_end(tm, t0);
    return SWY_OK;
}

/* Gate backward: top-k weights and the auxiliary loss to the
 * probabilities, softmax, logits; dx_gate overwritten, dwg accumulated. */
static void gate_backward(swt_moe_block_t *b)
{
    int S = b->core.S, E = b->core.E, k = b->core.k, G = b->core.p.gate_group;
    if (b->core.p.gate == SWT_GATE_TOPO) /* choices may differ from top-k */
        swy_k_gate_topk_bwd_idx(b->probs, b->choice_idx, b->grad_topk_w, S,
                                E, k, k > 1, b->dprobs);
    else
        swy_k_gate_topk_bwd(b->probs, b->grad_topk_w, S, E, k, k > 1,
                            b->dprobs);
    for (int g = 0; g < b->core.n_groups; g++) {
        size_t t0 = (size_t)g * G;
        swy_k_gate_aux_loss_bwd(b->f + (size_t)g * E, G, E,
                                (float)b->core.p.aux_weight,
                                b->dprobs + t0 * E);
    }
    swy_k_softmax_bwd(b->probs, b->dprobs, S, E, b->logits);
    swy_k_gate_logits_bwd(b->x, b->core.p.wg, b->logits, S, b->core.H, E,
                          b->dx_gate, b->core.p.dwg);
}

swy_status_t swt_moe_block_backward(swt_moe_block_t *b, const float *dout,
                                    float *dx, swt_timing_t *tm)
{
    b->dout = dout;
    swt_moe_chunk_ops_t ops = {cpu_experts_bwd,
                               b->n_shadow > 0 ? cpu_shadow_bwd : NULL, b};
    swy_status_t status = swt_moe_block_core_backward(
        &b->core, dout, b->topk_w, b->grad_expert_out, b->grad_topk_w,
        b->grad_expert_in, dx, &ops, tm);
    if (status != SWY_OK)
        return status;

    double t0 = swt_now();
    if (b->n_shadow > 0)
        shadow_add_dx(b, dx);
    gate_backward(b);
    size_t n = (size_t)b->core.S * b->core.H;
    swy_k_add(b->dx_gate, n, dx);
    swy_k_add(dout, n, dx);
    swt_timing_compute_end(tm, t0);
    return SWY_OK;
}
