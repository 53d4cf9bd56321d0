/* One MoE block on the GPU (see moe_block_cuda.h), the twin of
 * moe_block.c, with which it shares what is not device math: the shape,
 * the route and its counts, the statistics and the error reports
 * (swt_moe_block_core_t, moe_block.h).
 *
 * Why this block calls swy_alltoallv() itself instead of lib/moe's
 * dispatch and combine: those take host memory only (moe.h) and copy rows
 * on the CPU. Here the rows stay on the GPU: swy_moe_route() still does
 * the count exchange and the layout on the host (it needs only topk_idx),
 * and this file turns the layout into per-peer counts and displacements
 * and moves device buffers with swy_alltoallv(), which libswitchyard
 * hands to its device transport.
 *
 * Row layouts (moe.h, lib/moe/moe_impl.h), with pipeline degree 1:
 *  - token side ("tok"): the rows this rank sends, grouped by destination
 *    rank, then local expert, then token order; slot_row of the layout
 *    gives each slot's row. One contiguous block per peer.
 *  - staging ("stg"): what arrives, grouped by source rank, then local
 *    expert: one contiguous block per peer.
 *  - expert side: grouped by local expert, then source rank, so every
 *    expert's rows are contiguous for the FFN (block_offset of the
 *    layout).
 * Staging and expert order coincide with one rank or one local expert;
 * otherwise rows are moved between them with swy_kc_gather_rows and an
 * index built on the host from the layout. */
#include "moe_block_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct swt_moe_block_cuda {
    swt_moe_block_core_t core; /* shape, route, counts, statistics; its p
                                  holds device pointers */
    swy_kc_ctx_t *ctx;
    void *stream;
    int W;
    /* forward state, kept for the backward (device) */
    const float *x;
    float *logits;      /* [S][E]; reused as dlogits */
    float *probs;       /* [S][E] */
    float *dprobs;      /* [S][E] */
    int *topk_idx;      /* [S][k] */
    float *topk_w;      /* [S][k] */
    float *grad_topk_w; /* [S][k] */
    float *f;           /* [n_groups][E]: GShard's f_e per group */
    int *load;          /* [E] scratch of the capacity drop */
    float *laux;        /* [n_groups] */
    int *dropped_d;     /* [n_groups] */
    int *row_of_slot;   /* [S*k] send row of each slot, -1 dropped */
    float *y;           /* [S][H]: MoE(x) */
    float *dx_gate;     /* [S][H] */
    float *tok;         /* [S*k][H] token-side send rows; also receives the
                           dispatch backward */
    float *comb;        /* [S*k][H] the combine's rows, kept for backward */
    /* host copies */
    int *topk_idx_h, *row_of_slot_h, *dropped_h;
    float *laux_h;
    int *rows_per_expert; /* [nl] */
    size_t *tok_counts, *tok_displs, *stg_counts, *stg_displs; /* [W] */
    int restage;        /* staging order differs from expert order */
    /* expert side, grown to the largest route (device, and the two
     * row indices also on the host) */
    size_t rows_cap;
    float *stage, *expert_in, *expert_out, *grad_expert_out,
        *grad_expert_in;  /* [rows][H] */
    float *h_pre, *h_act, *dh; /* [rows][F] */
    int *exp_from_stg, *stg_from_exp; /* [rows] */
    int *exp_from_stg_h, *stg_from_exp_h;
};

swy_status_t swt_cuda_fail(const char *where, const char *call)
{
    fprintf(stderr, "swy-train: %s: %s failed: %s\n", where, call,
            swy_kc_error_string());
    return SWY_ERR_SYSTEM;
}

/* Device buffer of n elements of elem bytes; never NULL on success (an
 * empty tensor gets one element, so no exchange sees a NULL buffer). */
static int dev_alloc(void *p, size_t n, size_t elem)
{
    return swy_kc_malloc((void **)p, (n ? n : 1) * elem);
}

static void *host_alloc(size_t n, size_t elem)
{
    return calloc(n ? n : 1, elem);
}

swy_status_t swt_moe_block_cuda_create(swy_moe_plan_t plan, swy_comm_t comm,
                                       swy_kc_ctx_t *ctx,
                                       const swt_moe_block_params_t *params,
                                       swt_moe_block_cuda_t **blk_p)
{
    swt_moe_block_cuda_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return SWY_ERR_NO_MEMORY;
    b->ctx = ctx;
    b->stream = swy_kc_ctx_stream(ctx);
    if (swt_moe_block_core_init(&b->core, plan, comm, params, "cuda") != 0) {
        free(b);
        return SWY_ERR_NO_MEMORY;
    }
    b->W = swy_comm_size(comm);
    /* With one rank or one local expert the staging order is the expert
     * order (lib/moe lands in the user's buffer in place likewise). */
    b->restage = b->core.nl > 1 && b->W > 1;

    size_t S = (size_t)b->core.S, E = (size_t)b->core.E,
           k = (size_t)b->core.k, H = (size_t)b->core.H,
           G = (size_t)b->core.n_groups, W = (size_t)b->W;
    b->topk_idx_h = host_alloc(S * k, sizeof(int));
    b->row_of_slot_h = host_alloc(S * k, sizeof(int));
    b->dropped_h = host_alloc(G, sizeof(int));
    b->laux_h = host_alloc(G, sizeof(float));
    b->rows_per_expert = host_alloc((size_t)b->core.nl, sizeof(int));
    b->tok_counts = host_alloc(4 * W, sizeof(size_t));
    if (!b->topk_idx_h || !b->row_of_slot_h || !b->dropped_h ||
        !b->laux_h || !b->rows_per_expert || !b->tok_counts) {
        swt_moe_block_cuda_destroy(b);
        return SWY_ERR_NO_MEMORY;
    }
    b->tok_displs = b->tok_counts + W;
    b->stg_counts = b->tok_displs + W;
    b->stg_displs = b->stg_counts + W;

    struct {
        void *p;
        size_t n, elem;
    } dev[] = {
        {&b->logits, S * E, sizeof(float)},
        {&b->probs, S * E, sizeof(float)},
        {&b->dprobs, S * E, sizeof(float)},
        {&b->topk_idx, S * k, sizeof(int)},
        {&b->topk_w, S * k, sizeof(float)},
        {&b->grad_topk_w, S * k, sizeof(float)},
        {&b->f, G * E, sizeof(float)},
        {&b->load, E, sizeof(int)},
        {&b->laux, G, sizeof(float)},
        {&b->dropped_d, G, sizeof(int)},
        {&b->row_of_slot, S * k, sizeof(int)},
        {&b->y, S * H, sizeof(float)},
        {&b->dx_gate, S * H, sizeof(float)},
        {&b->tok, S * k * H, sizeof(float)},
        {&b->comb, S * k * H, sizeof(float)},
    };
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        if (dev_alloc(dev[i].p, dev[i].n, dev[i].elem) != 0) {
            swt_cuda_fail(b->core.where,
                          "swy_kc_malloc of the block's buffers");
            swt_moe_block_cuda_destroy(b);
            return SWY_ERR_SYSTEM;
        }
    *blk_p = b;
    return SWY_OK;
}

static void free_rows(swt_moe_block_cuda_t *b)
{
    void *dev[] = {b->stage, b->expert_in, b->expert_out,
                   b->grad_expert_out, b->grad_expert_in, b->h_pre,
                   b->h_act, b->dh, b->exp_from_stg, b->stg_from_exp};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        (void)swy_kc_free(dev[i]);
    b->stage = b->expert_in = b->expert_out = NULL;
    b->grad_expert_out = b->grad_expert_in = NULL;
    b->h_pre = b->h_act = b->dh = NULL;
    b->exp_from_stg = b->stg_from_exp = NULL;
    free(b->exp_from_stg_h);
    free(b->stg_from_exp_h);
    b->exp_from_stg_h = b->stg_from_exp_h = NULL;
    b->rows_cap = 0;
}

void swt_moe_block_cuda_destroy(swt_moe_block_cuda_t *b)
{
    if (b == NULL)
        return;
    /* Nothing of this block may still run when its memory goes. */
    (void)swy_kc_stream_sync(b->stream);
    free_rows(b);
    void *dev[] = {b->comb, b->tok, b->dx_gate, b->y, b->row_of_slot,
                   b->dropped_d, b->laux, b->load, b->f, b->grad_topk_w,
                   b->topk_w, b->topk_idx, b->dprobs, b->probs, b->logits};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        (void)swy_kc_free(dev[i]);
    free(b->tok_counts);
    free(b->rows_per_expert);
    free(b->laux_h);
    free(b->dropped_h);
    free(b->row_of_slot_h);
    free(b->topk_idx_h);
    swt_moe_block_core_finalize(&b->core);
    free(b);
}

double swt_moe_block_cuda_aux(const swt_moe_block_cuda_t *b)
{
    return b->core.aux;
}

int swt_moe_block_cuda_dropped(const swt_moe_block_cuda_t *b)
{
    return b->core.dropped;
}

const int64_t *swt_moe_block_cuda_sent(const swt_moe_block_cuda_t *b)
{
    return b->core.sent;
}

/* The expert-side buffers grow to the largest route seen; the number of
 * rows a rank receives changes every step with the gate's choices. */
static swy_status_t reserve_rows(swt_moe_block_cuda_t *b, size_t rows)
{
    if (rows <= b->rows_cap && b->expert_in != NULL)
        return SWY_OK;
    /* The old buffers may still be read by queued kernels. */
    SWT_KC(b->core.where, swy_kc_stream_sync(b->stream));
    free_rows(b);
    size_t n = rows + rows / 4, H = (size_t)b->core.H, F = (size_t)b->core.F;
    float **hbufs[] = {&b->stage, &b->expert_in, &b->expert_out,
                       &b->grad_expert_out, &b->grad_expert_in};
    float **fbufs[] = {&b->h_pre, &b->h_act, &b->dh};
    for (size_t i = 0; i < sizeof(hbufs) / sizeof(hbufs[0]); i++)
        SWT_KC(b->core.where, dev_alloc(hbufs[i], n * H, sizeof(float)));
    for (size_t i = 0; i < sizeof(fbufs) / sizeof(fbufs[0]); i++)
        SWT_KC(b->core.where, dev_alloc(fbufs[i], n * F, sizeof(float)));
    SWT_KC(b->core.where, dev_alloc(&b->exp_from_stg, n, sizeof(int)));
    SWT_KC(b->core.where, dev_alloc(&b->stg_from_exp, n, sizeof(int)));
    b->exp_from_stg_h = host_alloc(n, sizeof(int));
    b->stg_from_exp_h = host_alloc(n, sizeof(int));
    if (b->exp_from_stg_h == NULL || b->stg_from_exp_h == NULL) {
        fprintf(stderr, "swy-train: %s: out of memory for %zu row indices\n",
                b->core.where, n);
        return SWY_ERR_NO_MEMORY;
    }
    b->rows_cap = n;
    return SWY_OK;
}

/* Gate on the GPU, per group of G tokens, as moe_block.c's gate_forward:
 * logits, softmax and top-k, then the GShard capacity drop (choice order)
 * and auxiliary loss of each group, their per-group results into device
 * arrays that come back with topk_idx. */
static swy_status_t gate_forward(swt_moe_block_cuda_t *b)
{
    int S = b->core.S, E = b->core.E, k = b->core.k, G = b->core.p.gate_group;
    int renorm = k > 1; /* GShard top-2; with k = 1 Switch's p_e weight */
    SWT_KC(b->core.where, swy_kc_gate_logits_fwd(b->ctx, b->x, b->core.p.wg,
                                                 S, b->core.H, E,
                                                 b->logits));
    SWT_KC(b->core.where, swy_kc_gate_topk(b->ctx, b->logits, S, E, k, renorm,
                                           b->topk_idx, b->topk_w, b->probs));
    for (int g = 0; g < b->core.n_groups; g++) {
        size_t t0 = (size_t)g * G;
        SWT_KC(b->core.where, swy_kc_gate_aux_loss(b->ctx, b->probs + t0 * E, G,
                                                   E, 1, b->f + (size_t)g * E,
                                                   b->laux + g));
        SWT_KC(b->core.where, swy_kc_gate_drop(b->ctx, b->topk_idx + t0 * k,
                                               b->topk_w + t0 * k, G, k, E,
                                               b->core.capacity,
                                               SWY_K_DROP_CHOICE_ORDER, b->load,
                                               b->dropped_d + g));
    }
    size_t slots = (size_t)S * k, G_n = (size_t)b->core.n_groups;
    SWT_KC(b->core.where, swy_kc_memcpy_d2h(b->topk_idx_h, b->topk_idx,
                                            slots * sizeof(int), b->stream));
    SWT_KC(b->core.where, swy_kc_memcpy_d2h(b->laux_h, b->laux,
                                            G_n * sizeof(float), b->stream));
    SWT_KC(b->core.where, swy_kc_memcpy_d2h(b->dropped_h, b->dropped_d,
                                            G_n * sizeof(int), b->stream));
    /* The host reads all three next (routing, the step's statistics). */
    SWT_KC(b->core.where, swy_kc_stream_sync(b->stream));
    double aux = 0;
    b->core.dropped = 0;
    for (int g = 0; g < b->core.n_groups; g++) {
        aux += b->laux_h[g];
        b->core.dropped += b->dropped_h[g];
    }
    b->core.aux = b->core.n_groups > 0 ? aux / b->core.n_groups : 0.0;
    return SWY_OK;
}

/* From the route's layout: each slot's send row, the per-peer counts and
 * displacements (elements) of the token side and of the staging side,
 * rows per local expert, and, when staging and expert order differ, the
 * row indices between them; the indices go to the device. */
static swy_status_t build_exchange(swt_moe_block_cuda_t *b)
{
    const swy_moe_layout_t *ly = &b->core.layout;
    int W = b->W, nl = b->core.nl;
    size_t H = (size_t)b->core.H, slots = (size_t)b->core.S * b->core.k;
    if (ly->pipeline_degree != 1 || ly->nranks != W ||
        ly->num_local_experts != nl) {
        fprintf(stderr, "swy-train: %s: the route's layout (pipeline %d, %d "
                "ranks, %d local experts) is not the one this block "
                "handles (pipeline 1, %d ranks, %d local experts)\n",
                b->core.where, ly->pipeline_degree, ly->nranks,
                ly->num_local_experts, W, nl);
        return SWY_ERR_INTERNAL;
    }
    for (size_t s = 0; s < slots; s++) {
        int64_t row = ly->slot_row[s];
        if (row < -1 || row >= ly->send_rows) {
            fprintf(stderr, "swy-train: %s: slot %zu has send row %lld of "
                    "%lld\n", b->core.where, s, (long long)row,
                    (long long)ly->send_rows);
            return SWY_ERR_INTERNAL;
        }
        b->row_of_slot_h[s] = (int)row;
    }
    /* Token side: rank r's rows are its experts' counts, rank-major. */
    size_t tok_rows = 0, stg_rows = 0;
    for (int r = 0; r < W; r++) {
        size_t n = 0;
        for (int e = 0; e < nl; e++)
            n += (size_t)b->core.sent[(size_t)r * nl + e];
        b->tok_displs[r] = tok_rows * H;
        b->tok_counts[r] = n * H;
        tok_rows += n;
        /* Staging: from rank r, local expert 0's rows, then 1's, ... */
        n = 0;
        for (int e = 0; e < nl; e++) {
            size_t i = (size_t)e * W + r;
            n += (size_t)(ly->block_offset[i + 1] - ly->block_offset[i]);
        }
        b->stg_displs[r] = stg_rows * H;
        b->stg_counts[r] = n * H;
        stg_rows += n;
    }
    if ((int64_t)tok_rows != ly->send_rows ||
        (int64_t)stg_rows != ly->recv_rows) {
        fprintf(stderr, "swy-train: %s: counted %zu sent and %zu received "
                "rows, the layout says %lld and %lld\n", b->core.where,
                tok_rows, stg_rows, (long long)ly->send_rows,
                (long long)ly->recv_rows);
        return SWY_ERR_INTERNAL;
    }
    for (int e = 0; e < nl; e++)
        b->rows_per_expert[e] =
            (int)(ly->expert_offset[e + 1] - ly->expert_offset[e]);
    SWT_KC(b->core.where, swy_kc_memcpy_h2d(b->row_of_slot, b->row_of_slot_h,
                                            slots * sizeof(int), b->stream));
    if (!b->restage || stg_rows == 0)
        return SWY_OK;
    size_t stg = 0;
    for (int r = 0; r < W; r++)
        for (int e = 0; e < nl; e++) {
            size_t i = (size_t)e * W + r;
            size_t exp = (size_t)ly->block_offset[i];
            size_t n = (size_t)(ly->block_offset[i + 1] - exp);
            for (size_t q = 0; q < n; q++) {
                b->exp_from_stg_h[exp + q] = (int)(stg + q);
                b->stg_from_exp_h[stg + q] = (int)(exp + q);
            }
            stg += n;
        }
    SWT_KC(b->core.where, swy_kc_memcpy_h2d(b->exp_from_stg, b->exp_from_stg_h,
                                            stg_rows * sizeof(int), b->stream));
    SWT_KC(b->core.where, swy_kc_memcpy_h2d(b->stg_from_exp, b->stg_from_exp_h,
                                            stg_rows * sizeof(int), b->stream));
    return SWY_OK;
}

/* One all-to-all of device rows at high priority, blocking: the library
 * orders it after the work queued on our stream (attr.stream) and returns
 * once the rows are in recvbuf. */
static swy_status_t exchange(swt_moe_block_cuda_t *b, const float *sendbuf,
                             const size_t *scounts, const size_t *sdispls,
                             float *recvbuf, const size_t *rcounts,
                             const size_t *rdispls, const char *name,
                             const char *what)
{
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_HIGH;
    attr.stream = b->stream;
    attr.name = name;
    swy_request_t req = NULL;
    SWT_MOE_CHECK(&b->core,
                  swy_alltoallv(sendbuf, scounts, sdispls, recvbuf, rcounts,
                                rdispls, SWY_FLOAT32, b->core.comm, &attr,
                                &req),
                  what);
    swy_status_t status = swy_wait(req);
    swy_request_free(req);
    if (status != SWY_OK)
        return swt_moe_block_core_fail(&b->core, what, status);
    return SWY_OK;
}

/* Moves rows between the staging and the expert order (n rows). */
static swy_status_t restage(swt_moe_block_cuda_t *b, const float *src,
                            const int *src_row, float *dst)
{
    if (b->core.layout.recv_rows == 0)
        return SWY_OK;
    SWT_KC(b->core.where,
           swy_kc_gather_rows(b->ctx, src, src_row,
                              (int)b->core.layout.recv_rows, b->core.H,
                              dst));
    return SWY_OK;
}

/* Ends a timed compute block: the GPU work queued in it is part of it. */
static swy_status_t compute_end(swt_moe_block_cuda_t *b, swt_timing_t *tm,
                                double t0, double *dt_p)
{
    SWT_KC(b->core.where, swy_kc_stream_sync(b->stream));
    double dt = swt_timing_compute_end(tm, t0);
    if (dt_p != NULL)
        *dt_p = dt;
    return SWY_OK;
}

#define STEP(call)                                                           \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return st_;                                                      \
    } while (0)

swy_status_t swt_moe_block_cuda_forward(swt_moe_block_cuda_t *b,
                                        const float *x, float *out,
                                        swt_timing_t *tm)
{
    b->x = x;
    double t0 = swt_now();
    STEP(gate_forward(b));
    STEP(compute_end(b, tm, t0, NULL));

    STEP(swt_moe_block_core_route(&b->core, b->topk_idx_h, tm));
    STEP(reserve_rows(b, (size_t)b->core.layout.recv_rows));

    t0 = swt_now();
    STEP(build_exchange(b));
    SWT_KC(b->core.where, swy_kc_pack(b->ctx, x, b->row_of_slot, b->core.S,
                                      b->core.k, b->core.H, b->tok));
    STEP(compute_end(b, tm, t0, NULL));

    /* Dispatch: token side -> staging (or straight to the experts). */
    double seg0 = swt_now();
    float *landing = b->restage ? b->stage : b->expert_in;
    STEP(exchange(b, b->tok, b->tok_counts, b->tok_displs, landing,
                  b->stg_counts, b->stg_displs, b->core.name_fwd, "dispatch"));
    double disp_end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, disp_end - seg0);

    double tc = swt_now();
    if (b->restage)
        STEP(restage(b, b->stage, b->exp_from_stg, b->expert_in));
    SWT_KC(b->core.where,
           swy_kc_ffn_fwd(b->ctx, b->expert_in, b->rows_per_expert,
                          b->core.nl, b->core.H, b->core.F, b->core.p.w1,
                          b->core.p.b1, b->core.p.w2, b->core.p.b2, b->h_pre,
                          b->h_act, b->expert_out));
    const float *back = b->expert_out;
    if (b->restage) {
        STEP(restage(b, b->expert_out, b->stg_from_exp, b->stage));
        back = b->stage;
    }
    double dt;
    STEP(compute_end(b, tm, tc, &dt));
    swt_timing_add(tm, SWT_T_EXPERT, dt);

    /* Combine: staging -> token side, kept in comb for the backward. */
    double comb0 = swt_now();
    STEP(exchange(b, back, b->stg_counts, b->stg_displs, b->comb,
                  b->tok_counts, b->tok_displs, b->core.name_fwd, "combine"));
    double end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, end - comb0);
    swt_moe_block_core_segment(tm, seg0, disp_end, comb0, end);

    t0 = swt_now();
    size_t n = (size_t)b->core.S * b->core.H;
    SWT_KC(b->core.where, swy_kc_combine_fwd(b->ctx, b->comb, b->row_of_slot,
                                             b->topk_w, b->core.S, b->core.k,
                                             b->core.H, b->y));
    SWT_KC(b->core.where, swy_kc_memcpy_d2d(out, x, n * sizeof(float),
                                            b->stream));
    SWT_KC(b->core.where, swy_kc_add(b->ctx, b->y, n, out));
    STEP(compute_end(b, tm, t0, NULL));
    return SWY_OK;
}

/* Gate backward, as moe_block.c's: top-k weights and the auxiliary loss
 * to the probabilities, softmax, logits; dx_gate overwritten, dwg
 * accumulated. */
static swy_status_t gate_backward(swt_moe_block_cuda_t *b)
{
    int S = b->core.S, E = b->core.E, k = b->core.k, G = b->core.p.gate_group;
    SWT_KC(b->core.where, swy_kc_gate_topk_bwd(b->ctx, b->probs, b->grad_topk_w,
                                               S, E, k, k > 1, b->dprobs));
    for (int g = 0; g < b->core.n_groups; g++) {
        size_t t0 = (size_t)g * G;
        SWT_KC(b->core.where, swy_kc_gate_aux_loss_bwd(
                                  b->ctx, b->f + (size_t)g * E, G, E,
                                  (float)b->core.p.aux_weight,
                                  b->dprobs + t0 * E));
    }
    SWT_KC(b->core.where, swy_kc_softmax_bwd(b->ctx, b->probs, b->dprobs, S, E,
                                             b->logits));
    SWT_KC(b->core.where, swy_kc_gate_logits_bwd(b->ctx, b->x, b->core.p.wg,
                                                 b->logits, S, b->core.H, E,
                                                 b->dx_gate, b->core.p.dwg));
    return SWY_OK;
}

swy_status_t swt_moe_block_cuda_backward(swt_moe_block_cuda_t *b,
                                         const float *dout, float *dx,
                                         swt_timing_t *tm)
{
    if (b->core.route == NULL) {
        fprintf(stderr, "swy-train: %s: backward without a forward\n",
                b->core.where);
        return SWY_ERR_INTERNAL;
    }
    /* Lina: stop issuing gradient micro-ops when backward enters the MoE
     * block, so the combine's all-to-all finds the links clear. */
    swt_moe_block_core_a2a_imminent(&b->core);
    /* Combine backward, local part: the gradient of each slot's row
     * (weight x dout) into the token side, and of the gate weights. */
    double t0 = swt_now();
    SWT_KC(b->core.where, swy_kc_combine_bwd(b->ctx, b->comb, b->row_of_slot,
                                             b->topk_w, dout, b->core.S,
                                             b->core.k, b->core.H, b->tok,
                                             b->grad_topk_w));
    STEP(compute_end(b, tm, t0, NULL));

    double seg0 = swt_now();
    float *landing = b->restage ? b->stage : b->grad_expert_out;
    STEP(exchange(b, b->tok, b->tok_counts, b->tok_displs, landing,
                  b->stg_counts, b->stg_displs, b->core.name_bwd,
                  "combine backward"));
    double cb_end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, cb_end - seg0);
    /* The dispatch backward follows the expert backward. */
    swt_moe_block_core_a2a_imminent(&b->core);

    double tc = swt_now();
    if (b->restage)
        STEP(restage(b, b->stage, b->exp_from_stg, b->grad_expert_out));
    SWT_KC(b->core.where,
           swy_kc_ffn_bwd(b->ctx, b->expert_in, b->h_pre, b->h_act,
                          b->grad_expert_out, b->rows_per_expert, b->core.nl,
                          b->core.H, b->core.F, b->core.p.w1, b->core.p.w2,
                          b->dh, b->grad_expert_in, b->core.p.dw1,
                          b->core.p.db1, b->core.p.dw2, b->core.p.db2));
    const float *back = b->grad_expert_in;
    if (b->restage) {
        STEP(restage(b, b->grad_expert_in, b->stg_from_exp, b->stage));
        back = b->stage;
    }
    double dt;
    STEP(compute_end(b, tm, tc, &dt));
    swt_timing_add(tm, SWT_T_EXPERT, dt);

    /* Dispatch backward: staging -> token side (tok is free again: the
     * combine backward that read it has completed). */
    double db0 = swt_now();
    STEP(exchange(b, back, b->stg_counts, b->stg_displs, b->tok,
                  b->tok_counts, b->tok_displs, b->core.name_bwd,
                  "dispatch backward"));
    double end = swt_now();
    swt_timing_add(tm, SWT_T_A2A_WAIT, end - db0);
    swt_moe_block_core_segment(tm, seg0, cb_end, db0, end);
    swt_moe_block_core_route_end(&b->core);

    t0 = swt_now();
    size_t n = (size_t)b->core.S * b->core.H;
    SWT_KC(b->core.where, swy_kc_pack_bwd(b->ctx, b->tok, b->row_of_slot,
                                          b->core.S, b->core.k, b->core.H,
                                          dx));
    STEP(gate_backward(b));
    SWT_KC(b->core.where, swy_kc_add(b->ctx, b->dx_gate, n, dx));
    SWT_KC(b->core.where, swy_kc_add(b->ctx, dout, n, dx));
    STEP(compute_end(b, tm, t0, NULL));
    return SWY_OK;
}
