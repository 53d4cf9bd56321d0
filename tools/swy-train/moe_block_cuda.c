/* One MoE block on the GPU (see moe_block_cuda.h), the twin of
 * moe_block.c, with which it shares what is not device math: the shape,
 * the route and its counts, the statistics and the error reports
 * (swt_moe_block_core_t, moe_block.h).
 *
 * The exchange is lib/moe's, as on the CPU: the block's plan has device
 * rows (SWY_MOE_ROWS_DEVICE, on the block's stream), so swy_moe_dispatch,
 * swy_moe_combine and their backward take the device buffers here, pack,
 * reorder and sum the rows with the nccl plugin's kernels on that stream
 * and move them with device all-to-alls. swy_moe_route() takes the gate's
 * choices from the host (they come back once per step for the
 * statistics anyway) and gives the expert-major layout the FFN kernels
 * need (rows per local expert). */
#include "moe_block_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct swt_moe_block_cuda {
    swt_moe_block_core_t core; /* shape, route, counts, statistics; its p
                                  holds device pointers, its plan has
                                  device rows */
    swy_kc_ctx_t *ctx;
    void *stream;
    /* --dtype bf16: the expert weights' bf16 copies; activations and rows
     * are then bf16 (es = 2), else float (es = 4) */
    int bf16;
    swt_moe_block_bf16_t w16;
    size_t es;
    /* forward state, kept for the backward (device) */
    const float *xf;    /* the input as float: x itself, or xf32 */
    float *xf32;        /* [S][H] bf16 blocks: x converted for the gate */
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
    void *y;            /* [S][H]: MoE(x), es bytes each */
    float *dx_gate;     /* [S][H] */
    swy_kc_bf16_t *dx_gate16; /* [S][H] bf16 blocks: dx_gate rounded */
    /* host copies */
    int *topk_idx_h, *dropped_h;
    float *laux_h;
    int *rows_per_expert; /* [nl] */
    /* expert side, grown to the largest route (device) */
    size_t rows_cap;
    void *expert_in, *expert_out, *grad_expert_out,
        *grad_expert_in;  /* [rows][H] */
    void *h_pre, *h_act, *dh; /* [rows][F] */
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
                                       const swt_moe_block_bf16_t *w16,
                                       swt_moe_block_cuda_t **blk_p)
{
    swt_moe_block_cuda_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return SWY_ERR_NO_MEMORY;
    b->ctx = ctx;
    b->stream = swy_kc_ctx_stream(ctx);
    b->bf16 = w16 != NULL;
    if (w16 != NULL)
        b->w16 = *w16;
    b->es = b->bf16 ? sizeof(swy_kc_bf16_t) : sizeof(float);
    if (swt_moe_block_core_init(&b->core, plan, comm, params, "cuda") != 0) {
        free(b);
        return SWY_ERR_NO_MEMORY;
    }
    size_t S = (size_t)b->core.S, E = (size_t)b->core.E,
           k = (size_t)b->core.k, H = (size_t)b->core.H,
           G = (size_t)b->core.n_groups;
    b->topk_idx_h = host_alloc(S * k, sizeof(int));
    b->dropped_h = host_alloc(G, sizeof(int));
    b->laux_h = host_alloc(G, sizeof(float));
    b->rows_per_expert = host_alloc((size_t)b->core.nl, sizeof(int));
    if (!b->topk_idx_h || !b->dropped_h || !b->laux_h ||
        !b->rows_per_expert) {
        swt_moe_block_cuda_destroy(b);
        return SWY_ERR_NO_MEMORY;
    }

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
        {&b->y, S * H, b->es},
        {&b->dx_gate, S * H, sizeof(float)},
        {&b->xf32, b->bf16 ? S * H : 0, sizeof(float)},
        {&b->dx_gate16, b->bf16 ? S * H : 0, sizeof(swy_kc_bf16_t)},
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
    void *dev[] = {b->expert_in, b->expert_out, b->grad_expert_out,
                   b->grad_expert_in, b->h_pre, b->h_act, b->dh};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        (void)swy_kc_free(dev[i]);
    b->expert_in = b->expert_out = NULL;
    b->grad_expert_out = b->grad_expert_in = NULL;
    b->h_pre = b->h_act = b->dh = NULL;
    b->rows_cap = 0;
}

void swt_moe_block_cuda_destroy(swt_moe_block_cuda_t *b)
{
    if (b == NULL)
        return;
    /* Nothing of this block may still run when its memory goes. */
    (void)swy_kc_stream_sync(b->stream);
    free_rows(b);
    void *dev[] = {b->dx_gate16, b->xf32, b->dx_gate, b->y, b->dropped_d,
                   b->laux, b->load, b->f, b->grad_topk_w, b->topk_w,
                   b->topk_idx, b->dprobs, b->probs, b->logits};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        (void)swy_kc_free(dev[i]);
    free(b->rows_per_expert);
    free(b->laux_h);
    free(b->dropped_h);
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
    void **hbufs[] = {&b->expert_in, &b->expert_out, &b->grad_expert_out,
                      &b->grad_expert_in};
    void **fbufs[] = {&b->h_pre, &b->h_act, &b->dh};
    for (size_t i = 0; i < sizeof(hbufs) / sizeof(hbufs[0]); i++)
        SWT_KC(b->core.where, dev_alloc(hbufs[i], n * H, b->es));
    for (size_t i = 0; i < sizeof(fbufs) / sizeof(fbufs[0]); i++)
        SWT_KC(b->core.where, dev_alloc(fbufs[i], n * F, b->es));
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
    SWT_KC(b->core.where, swy_kc_gate_logits_fwd(b->ctx, b->xf, b->core.p.wg,
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

/* Rows per local expert, from the route's layout (the FFN kernels take
 * them on the host). */
static void count_rows(swt_moe_block_cuda_t *b)
{
    const swy_moe_layout_t *ly = &b->core.layout;
    for (int e = 0; e < b->core.nl; e++)
        b->rows_per_expert[e] =
            (int)(ly->expert_offset[e + 1] - ly->expert_offset[e]);
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

/* The expert FFN, fp32 or bf16, on rows [off, off + rows[0]) for
 * `n_experts` local experts from expert e0 on (rows[] holds each one's
 * row count; their rows are contiguous). */
static swy_status_t ffn_fwd_rows(swt_moe_block_cuda_t *b, int e0,
                                 int n_experts, const int *rows, size_t off)
{
    const swt_moe_block_params_t *p = &b->core.p;
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    size_t xo = off * H * b->es, ho = off * F * b->es, e = (size_t)e0;
    char *in = (char *)b->expert_in + xo, *out = (char *)b->expert_out + xo;
    char *hp = (char *)b->h_pre + ho, *ha = (char *)b->h_act + ho;
    if (b->bf16)
        SWT_KC(b->core.where,
               swy_kc_ffn_fwd_bf16(b->ctx, (void *)in, rows, n_experts,
                                   b->core.H, b->core.F,
                                   b->w16.w1 + e * H * F, b->w16.b1 + e * F,
                                   b->w16.w2 + e * F * H, b->w16.b2 + e * H,
                                   (void *)hp, (void *)ha, (void *)out));
    else
        SWT_KC(b->core.where,
               swy_kc_ffn_fwd(b->ctx, (void *)in, rows, n_experts, b->core.H,
                              b->core.F, p->w1 + e * H * F, p->b1 + e * F,
                              p->w2 + e * F * H, p->b2 + e * H, (void *)hp,
                              (void *)ha, (void *)out));
    return SWY_OK;
}

static swy_status_t ffn_bwd_rows(swt_moe_block_cuda_t *b, int e0,
                                 int n_experts, const int *rows, size_t off)
{
    const swt_moe_block_params_t *p = &b->core.p;
    size_t H = (size_t)b->core.H, F = (size_t)b->core.F;
    size_t xo = off * H * b->es, ho = off * F * b->es, e = (size_t)e0;
    char *x = (char *)b->expert_in + xo, *dy = (char *)b->grad_expert_out + xo;
    char *dx = (char *)b->grad_expert_in + xo, *hp = (char *)b->h_pre + ho;
    char *ha = (char *)b->h_act + ho, *dh = (char *)b->dh + ho;
    float *dw1 = p->dw1 + e * H * F, *db1 = p->db1 + e * F,
          *dw2 = p->dw2 + e * F * H, *db2 = p->db2 + e * H;
    if (b->bf16)
        SWT_KC(b->core.where,
               swy_kc_ffn_bwd_bf16(b->ctx, (void *)x, (void *)hp, (void *)ha,
                                   (void *)dy, rows, n_experts, b->core.H,
                                   b->core.F, b->w16.w1 + e * H * F,
                                   b->w16.w2 + e * F * H, (void *)dh,
                                   (void *)dx, dw1, db1, dw2, db2));
    else
        SWT_KC(b->core.where,
               swy_kc_ffn_bwd(b->ctx, (void *)x, (void *)hp, (void *)ha,
                              (void *)dy, rows, n_experts, b->core.H,
                              b->core.F, p->w1 + e * H * F, p->w2 + e * F * H,
                              (void *)dh, (void *)dx, dw1, db1, dw2, db2));
    return SWY_OK;
}

/* The experts on chunk j of the route's rows (forward or backward): with
 * one chunk, every local expert in one call; else each expert's piece of
 * chunk j (its rows of chunk j are contiguous, moe.h). */
static swy_status_t experts_chunk(swt_moe_block_cuda_t *b, int j,
                                  int backward)
{
    const swy_moe_layout_t *ly = &b->core.layout;
    int d = ly->pipeline_degree, nl = b->core.nl;
    if (d == 1)
        return backward ? ffn_bwd_rows(b, 0, nl, b->rows_per_expert, 0)
                        : ffn_fwd_rows(b, 0, nl, b->rows_per_expert, 0);
    for (int e = 0; e < nl; e++) {
        int64_t r0 = ly->chunk_offset[(size_t)e * (d + 1) + j];
        int rows = (int)(ly->chunk_offset[(size_t)e * (d + 1) + j + 1] - r0);
        if (rows == 0)
            continue;
        STEP(backward ? ffn_bwd_rows(b, e, 1, &rows, (size_t)r0)
                      : ffn_fwd_rows(b, e, 1, &rows, (size_t)r0));
    }
    return SWY_OK;
}

/* The GPU block's experts around its exchanges (swt_moe_chunk_ops_t):
 * chunk j's FFN, its time ending when the stream has run it. */
static swy_status_t gpu_experts_fwd(void *arg, int chunk, swt_timing_t *tm,
                                    double *dt_p)
{
    swt_moe_block_cuda_t *b = arg;
    double tc = swt_now();
    STEP(experts_chunk(b, chunk, 0));
    return compute_end(b, tm, tc, dt_p);
}

static swy_status_t gpu_experts_bwd(void *arg, int chunk, swt_timing_t *tm,
                                    double *dt_p)
{
    swt_moe_block_cuda_t *b = arg;
    double tc = swt_now();
    STEP(experts_chunk(b, chunk, 1));
    return compute_end(b, tm, tc, dt_p);
}

/* y += x over n elements of the block's type. */
static swy_status_t add_rows(swt_moe_block_cuda_t *b, const void *x,
                             size_t n, void *y)
{
    if (b->bf16)
        SWT_KC(b->core.where, swy_kc_add_bf16(b->ctx, x, n, y));
    else
        SWT_KC(b->core.where, swy_kc_add(b->ctx, x, n, y));
    return SWY_OK;
}

swy_status_t swt_moe_block_cuda_forward(swt_moe_block_cuda_t *b,
                                        const void *x, void *out,
                                        swt_timing_t *tm)
{
    size_t n = (size_t)b->core.S * b->core.H;
    b->xf = x;
    double t0 = swt_now();
    if (b->bf16) { /* the gate computes in fp32 */
        SWT_KC(b->core.where, swy_kc_bf16_to_f32(b->ctx, x, n, b->xf32));
        b->xf = b->xf32;
    }
    STEP(gate_forward(b));
    STEP(compute_end(b, tm, t0, NULL));

    STEP(swt_moe_block_core_route(&b->core, b->topk_idx_h, tm));
    STEP(reserve_rows(b, (size_t)b->core.layout.recv_rows));
    count_rows(b);

    /* Dispatch: tokens -> the experts' rows (packed on the stream, sent
     * once the stream has drained), chunk by chunk: the experts compute
     * on chunk j as it lands and its combine goes at once (Lina,
     * FasterMoE), the rows summed into y on the stream at the end (the
     * route keeps them for the backward). */
    swt_moe_chunk_ops_t ops = {gpu_experts_fwd, NULL, b};
    STEP(swt_moe_block_core_forward(&b->core, x, b->expert_in, b->expert_out,
                                    b->topk_w, b->y, &ops, tm));

    t0 = swt_now();
    SWT_KC(b->core.where, swy_kc_memcpy_d2d(out, x, n * b->es, b->stream));
    STEP(add_rows(b, b->y, n, out));
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
    SWT_KC(b->core.where, swy_kc_gate_logits_bwd(b->ctx, b->xf, b->core.p.wg,
                                                 b->logits, S, b->core.H, E,
                                                 b->dx_gate, b->core.p.dwg));
    return SWY_OK;
}

swy_status_t swt_moe_block_cuda_backward(swt_moe_block_cuda_t *b,
                                         const void *dout, void *dx,
                                         swt_timing_t *tm)
{
    if (b->core.route == NULL) {
        fprintf(stderr, "swy-train: %s: backward without a forward\n",
                b->core.where);
        return SWY_ERR_INTERNAL;
    }
    /* The combine backward (the gradient of each slot's row, weight x
     * dout, to its expert, and of the gate weights), chunk by chunk each
     * chunk's expert backward then its dispatch backward, dx = the sum of
     * each token's slot gradients at the end (queued on the stream). */
    swt_moe_chunk_ops_t ops = {gpu_experts_bwd, NULL, b};
    STEP(swt_moe_block_core_backward(&b->core, dout, b->topk_w,
                                     b->grad_expert_out, b->grad_topk_w,
                                     b->grad_expert_in, dx, &ops, tm));

    double t0 = swt_now();
    size_t n = (size_t)b->core.S * b->core.H;
    STEP(gate_backward(b));
    if (b->bf16) {
        SWT_KC(b->core.where, swy_kc_f32_to_bf16(b->ctx, b->dx_gate, n,
                                                 b->dx_gate16));
        STEP(add_rows(b, b->dx_gate16, n, dx));
    } else {
        STEP(add_rows(b, b->dx_gate, n, dx));
    }
    STEP(add_rows(b, dout, n, dx));
    STEP(compute_end(b, tm, t0, NULL));
    return SWY_OK;
}
