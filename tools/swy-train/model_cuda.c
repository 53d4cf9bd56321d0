/* The reference MoE model on the GPU (see model_cuda.h), the twin of
 * model.c: the parameter layout and initialization are layout.c's, which
 * model.c uses too; the same forward, backward, DDP buckets and Adam,
 * through the CUDA kernels.
 *
 * --dtype bf16 is mixed precision as frameworks train: the fp32
 * parameters are the masters (Adam updates them, DDP sums their fp32
 * gradients) and their bf16 copies (dense16, expert16, refreshed after
 * every update) are what the layers compute with; activations are bf16
 * (es = 2 bytes), every GEMM accumulates in fp32 and writes fp32 weight
 * gradients; the gate and the loss compute in fp32 from their bf16
 * inputs. */
#include "model_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "layout.h"
#include "moe_block_cuda.h"
#include "swy_kernels_cuda.h"
#include "switchyard/moe.h"

static const char where[] = "model (cuda)";

typedef struct {
    /* parameters and gradients in the flat buffers (device; layout.h) */
    swt_layer_tensors_t p, d;
    /* activations (device, es bytes each): x (block input), a_pre/a_act
     * [S][Fd], m (MoE input) */
    void *x, *a_pre, *a_act, *m;
    swt_moe_block_cuda_t *moe;
} layer_t;

struct swt_model_cuda {
    swt_model_config_t cfg;
    swy_comm_t comm;
    swt_layout_t lo;        /* W, rank, E, nl, the buffers, the plan */
    swy_moe_plan_t dplan;   /* the blocks' plan: device rows on stream */
    void *stream;
    swy_kc_ctx_t *ctx;
    int bf16;               /* --dtype bf16 */
    size_t es;              /* bytes of an activation: 2 or 4 */
    /* device */
    float *dense, *ddense, *m_dense, *v_dense;
    float *expert, *dexpert, *m_expert, *v_expert;
    swy_kc_bf16_t *dense16, *expert16; /* bf16: the masters' copies */
    swt_model_tensors_t p, d; /* embedding and output: parameters, grads */
    /* host: the initial values, and later the dense hash's copy */
    float *dense_h, *expert_h;
    layer_t *layers;
    void *x_final;          /* [S][H]: output of the last block */
    float *logits;          /* [S][V], fp32 for the loss */
    float *dlogits;         /* [S][V] */
    void *logits16, *dlogits16; /* [S][V] bf16: the output layer's */
    void *dx, *dm, *dtmp;   /* [S][H] backward scratch */
    float *dx32;            /* [S][H] bf16: dx for the embedding's fp32
                               gradient */
    void *dact;             /* [S][Fd] */
    int *ids, *labels;      /* [S] */
    float *loss;            /* [1] */
    swt_ddp_t *ddp;
};

int swt_cuda_device_select(int local_rank, int *device_p, char *name,
                           size_t name_len, char *why, size_t why_len)
{
    int n = swy_kc_device_count();
    if (n <= 0) {
        const char *e = swy_kc_error_string();
        snprintf(why, why_len, "%s", e[0] != '\0' ? e
                                                  : "the runtime reports 0 "
                                                    "devices");
        return -1;
    }
    int dev = (local_rank < 0 ? 0 : local_rank) % n;
    if (swy_kc_set_device(dev) != 0) {
        snprintf(why, why_len, "device %d of %d: %s", dev, n,
                 swy_kc_error_string());
        return -2;
    }
    if (swy_kc_device_name(name, name_len) != 0)
        snprintf(name, name_len, "device %d", dev);
    *device_p = dev;
    return 0;
}

/* A device buffer of n elements of elem bytes, zeroed; never NULL. */
static int dev_zalloc_es(void *p, size_t n, size_t elem)
{
    size_t bytes = (n ? n : 1) * elem;
    if (swy_kc_malloc((void **)p, bytes) != 0)
        return -1;
    return swy_kc_memset(*(void **)p, 0, bytes, NULL);
}

static swy_status_t create_device(swt_model_cuda_t *md)
{
    const swt_model_config_t *c = &md->cfg;
    /* F: the dense block's inner size (the experts' is their own). */
    size_t S = (size_t)c->tokens, H = (size_t)c->hidden,
           F = (size_t)c->dense_ffn, V = (size_t)c->vocab, es = md->es;
    size_t b16 = md->bf16 ? 1 : 0; /* the bf16-only buffers' factor */
    SWT_KC(where, swy_kc_stream_create(0, &md->stream));
    SWT_KC(where, swy_kc_ctx_create(md->stream, &md->ctx));
    struct {
        void *p;
        size_t n, elem;
    } bufs[] = {
        {&md->dense, md->lo.n_dense, 4},    {&md->ddense, md->lo.n_dense, 4},
        {&md->m_dense, md->lo.n_dense, 4},  {&md->v_dense, md->lo.n_dense, 4},
        {&md->expert, md->lo.n_expert, 4},  {&md->dexpert, md->lo.n_expert, 4},
        {&md->m_expert, md->lo.n_expert, 4},
        {&md->v_expert, md->lo.n_expert, 4},
        {&md->dense16, b16 * md->lo.n_dense, 2},
        {&md->expert16, b16 * md->lo.n_expert, 2},
        {&md->x_final, S * H, es},          {&md->logits, S * V, 4},
        {&md->dlogits, S * V, 4},
        {&md->logits16, b16 * S * V, 2},    {&md->dlogits16, b16 * S * V, 2},
        {&md->dx, S * H, es},               {&md->dx32, b16 * S * H, 4},
        {&md->dm, S * H, es},               {&md->dtmp, S * H, es},
        {&md->dact, S * F, es},             {&md->loss, 1, 4},
    };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        SWT_KC(where, dev_zalloc_es(bufs[i].p, bufs[i].n, bufs[i].elem));
    SWT_KC(where, swy_kc_malloc((void **)&md->ids, (S ? S : 1) * sizeof(int)));
    SWT_KC(where,
           swy_kc_malloc((void **)&md->labels, (S ? S : 1) * sizeof(int)));
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        SWT_KC(where, dev_zalloc_es(&ly->x, S * H, es));
        SWT_KC(where, dev_zalloc_es(&ly->m, S * H, es));
        SWT_KC(where, dev_zalloc_es(&ly->a_pre, S * F, es));
        SWT_KC(where, dev_zalloc_es(&ly->a_act, S * F, es));
    }
    return SWY_OK;
}

/* --dtype bf16: the bf16 copy of a master parameter (a pointer into
 * dense or expert). */
static const swy_kc_bf16_t *w16(const swt_model_cuda_t *md, const float *w)
{
    if (w == NULL)
        return NULL;
    if (w >= md->dense && w < md->dense + md->lo.n_dense)
        return md->dense16 + (w - md->dense);
    return md->expert16 + (w - md->expert);
}

/* --dtype bf16: round the masters into their bf16 copies. */
static swy_status_t refresh_bf16(swt_model_cuda_t *md)
{
    if (!md->bf16)
        return SWY_OK;
    SWT_KC(where, swy_kc_f32_to_bf16(md->ctx, md->dense, md->lo.n_dense,
                                     md->dense16));
    SWT_KC(where, swy_kc_f32_to_bf16(md->ctx, md->expert, md->lo.n_expert,
                                     md->expert16));
    return SWY_OK;
}

swy_status_t swt_model_cuda_create(swy_comm_t comm,
                                   const swt_model_config_t *cfg,
                                   swt_model_cuda_t **model_p)
{
    swt_model_cuda_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return SWY_ERR_NO_MEMORY;
    md->cfg = *cfg;
    md->comm = comm;
    md->bf16 = cfg->bf16;
    md->es = cfg->bf16 ? sizeof(swy_kc_bf16_t) : sizeof(float);
    swy_status_t status = swt_layout_init(&md->lo, comm, cfg);
    if (status != SWY_OK) {
        free(md);
        return status;
    }
    md->layers = calloc((size_t)cfg->layers, sizeof(layer_t));
    md->dense_h = calloc(md->lo.n_dense ? md->lo.n_dense : 1, sizeof(float));
    md->expert_h = calloc(md->lo.n_expert ? md->lo.n_expert : 1,
                          sizeof(float));
    if (md->layers == NULL || md->dense_h == NULL || md->expert_h == NULL) {
        fprintf(stderr, "swy-train: out of host memory for the model (%zu "
                "dense and %zu expert parameters)\n", md->lo.n_dense,
                md->lo.n_expert);
        status = SWY_ERR_NO_MEMORY;
        goto fail;
    }
    status = create_device(md);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-train: could not allocate the model on the GPU "
                "(%zu dense and %zu expert parameters, %d tokens)\n",
                md->lo.n_dense, md->lo.n_expert, cfg->tokens);
        goto fail;
    }
    status = swt_layout_plan_create(comm, cfg, SWY_MOE_ROWS_DEVICE,
                                    md->stream, &md->dplan);
    if (status != SWY_OK)
        goto fail;
    swt_layout_model_tensors(&md->lo, md->dense, &md->p);
    swt_layout_model_tensors(&md->lo, md->ddense, &md->d);
    /* The same initial values as the CPU model's, computed on the host. */
    swt_layout_init_params(&md->lo, md->dense_h, md->expert_h);
    if (swy_kc_memcpy_h2d(md->dense, md->dense_h,
                          md->lo.n_dense * sizeof(float), NULL) != 0 ||
        swy_kc_memcpy_h2d(md->expert, md->expert_h,
                          md->lo.n_expert * sizeof(float), NULL) != 0) {
        status = swt_cuda_fail(where, "copying the initial parameters");
        goto fail;
    }
    status = refresh_bf16(md);
    if (status != SWY_OK)
        goto fail;
    for (int l = 0; l < cfg->layers; l++) {
        layer_t *ly = &md->layers[l];
        swt_layout_layer_tensors(&md->lo, l, md->dense, md->expert, &ly->p);
        swt_layout_layer_tensors(&md->lo, l, md->ddense, md->dexpert,
                                 &ly->d);
        swt_moe_block_params_t bp;
        swt_layout_block_params(&md->lo, l, &ly->p, &ly->d, &bp);
        swt_moe_block_bf16_t bw = {w16(md, ly->p.w1), w16(md, ly->p.b1),
                                   w16(md, ly->p.w2), w16(md, ly->p.b2)};
        status = swt_moe_block_cuda_create(md->dplan, comm, md->ctx, &bp,
                                           md->bf16 ? &bw : NULL, &ly->moe);
        if (status != SWY_OK)
            goto fail;
    }
    if (swt_ddp_create(comm, md->ddense, md->lo.tensor_sizes,
                       md->lo.n_tensors, cfg->bucket_bytes, &md->ddp) != 0) {
        fprintf(stderr, "swy-train: out of memory for the DDP buckets\n");
        status = SWY_ERR_NO_MEMORY;
        goto fail;
    }
    swt_ddp_set_stream(md->ddp, md->stream);
    *model_p = md;
    return SWY_OK;
fail:
    swt_model_cuda_destroy(md);
    return status;
}

void swt_model_cuda_destroy(swt_model_cuda_t *md)
{
    if (md == NULL)
        return;
    /* Let queued kernels finish before their memory goes; then the
     * buckets (their allreduces read and write ddense). */
    if (md->stream != NULL)
        (void)swy_kc_stream_sync(md->stream);
    swt_ddp_destroy(md->ddp);
    if (md->layers != NULL)
        for (int l = 0; l < md->cfg.layers; l++) {
            layer_t *ly = &md->layers[l];
            swt_moe_block_cuda_destroy(ly->moe);
            (void)swy_kc_free(ly->a_act);
            (void)swy_kc_free(ly->a_pre);
            (void)swy_kc_free(ly->m);
            (void)swy_kc_free(ly->x);
        }
    /* After the blocks (their routes), before the stream it syncs. */
    swy_moe_plan_destroy(md->dplan);
    void *bufs[] = {md->loss, md->dact, md->dtmp, md->dm, md->dx32, md->dx,
                    md->dlogits16, md->logits16, md->dlogits, md->logits,
                    md->x_final, md->expert16, md->dense16, md->v_expert,
                    md->m_expert, md->dexpert, md->expert, md->v_dense,
                    md->m_dense, md->ddense, md->dense};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        (void)swy_kc_free(bufs[i]);
    (void)swy_kc_free(md->labels);
    (void)swy_kc_free(md->ids);
    swy_kc_ctx_destroy(md->ctx);
    (void)swy_kc_stream_destroy(md->stream);
    free(md->layers);
    free(md->expert_h);
    free(md->dense_h);
    swt_layout_finalize(&md->lo);
    free(md);
}

int swt_model_cuda_num_experts(const swt_model_cuda_t *md)
{
    return md->lo.E;
}

int swt_model_cuda_num_local_experts(const swt_model_cuda_t *md)
{
    return md->lo.nl;
}

size_t swt_model_cuda_dense_params(const swt_model_cuda_t *md)
{
    return md->lo.n_dense;
}

size_t swt_model_cuda_expert_params(const swt_model_cuda_t *md)
{
    return md->lo.n_expert;
}

int swt_model_cuda_num_buckets(const swt_model_cuda_t *md)
{
    return swt_ddp_num_buckets(md->ddp);
}

const int64_t *swt_model_cuda_layer_sent(const swt_model_cuda_t *md,
                                         int layer)
{
    return swt_moe_block_cuda_sent(md->layers[layer].moe);
}

swy_status_t swt_model_cuda_dense_hash(swt_model_cuda_t *md,
                                       uint64_t *hash_p)
{
    /* The host copy of the initial values is free again: reuse it. */
    SWT_KC(where, swy_kc_stream_sync(md->stream));
    SWT_KC(where, swy_kc_memcpy_d2h(md->dense_h, md->dense,
                                    md->lo.n_dense * sizeof(float), NULL));
    *hash_p = swt_layout_dense_hash(&md->lo, md->dense_h, 0);
    return SWY_OK;
}

#define STEP_CHECK(call)                                                     \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return st_;                                                      \
    } while (0)

void swt_model_cuda_epilogues(const swt_model_cuda_t *md, int *on,
                              unsigned long *fused, unsigned long *fell_back,
                              const char **why)
{
    if (swy_kc_ctx_epilogue_stats(md->ctx, on, fused, fell_back, why) !=
        0) {
        *on = 0;
        *fused = *fell_back = 0;
        *why = swy_kc_error_string();
    }
}

void swt_model_cuda_grouped(const swt_model_cuda_t *md, int *on,
                            unsigned long *calls, unsigned long *per_expert,
                            const char **why)
{
    if (swy_kc_ctx_grouped_stats(md->ctx, on, calls, per_expert, why) != 0) {
        *on = 0;
        *calls = *per_expert = 0;
        *why = swy_kc_error_string();
    }
}

/* Ends a timed compute block, GPU work included. */
static swy_status_t compute_end(swt_model_cuda_t *md, swt_timing_t *tm,
                                double t0)
{
    SWT_KC(where, swy_kc_stream_sync(md->stream));
    swt_timing_compute_end(tm, t0);
    return SWY_OK;
}

/* The layers' operations in the model's precision: x, y, dx, dy are
 * activations (es bytes each), w and b fp32 masters (their bf16 copies
 * compute with --dtype bf16), dw and db fp32 gradients. */
static swy_status_t linear_fwd(swt_model_cuda_t *md, const void *x,
                               const float *w, const float *b, int N, int in,
                               int out, void *y)
{
    if (md->bf16)
        SWT_KC(where, swy_kc_linear_fwd_bf16(md->ctx, x, w16(md, w),
                                             w16(md, b), N, in, out, y));
    else
        SWT_KC(where, swy_kc_linear_fwd(md->ctx, x, w, b, N, in, out, y));
    return SWY_OK;
}

static swy_status_t linear_bwd(swt_model_cuda_t *md, const void *x,
                               const float *w, const void *dy, int N, int in,
                               int out, void *dx, float *dw, float *db)
{
    if (md->bf16)
        SWT_KC(where, swy_kc_linear_bwd_bf16(md->ctx, x, w16(md, w), dy, N,
                                             in, out, dx, dw, db));
    else
        SWT_KC(where, swy_kc_linear_bwd(md->ctx, x, w, dy, N, in, out, dx,
                                        dw, db));
    return SWY_OK;
}

/* h_pre = x w + b, h_act = gelu(h_pre) (one GEMM in bf16). */
static swy_status_t linear_gelu_fwd(swt_model_cuda_t *md, const void *x,
                                    const float *w, const float *b, int N,
                                    int in, int out, void *h_pre, void *h_act)
{
    if (md->bf16)
        SWT_KC(where, swy_kc_linear_gelu_fwd_bf16(md->ctx, x, w16(md, w),
                                                  w16(md, b), N, in, out,
                                                  h_pre, h_act));
    else
        SWT_KC(where, swy_kc_linear_gelu_fwd(md->ctx, x, w, b, N, in, out,
                                             h_pre, h_act));
    return SWY_OK;
}

/* linear_bwd of a layer whose input x is gelu(x_pre): dx is x_pre's
 * gradient (gelu' fused into the GEMM in bf16). */
static swy_status_t linear_dgelu_bwd(swt_model_cuda_t *md, const void *x,
                                     const void *x_pre, const float *w,
                                     const void *dy, int N, int in, int out,
                                     void *dx, float *dw, float *db)
{
    if (md->bf16)
        SWT_KC(where, swy_kc_linear_dgelu_bwd_bf16(md->ctx, x, x_pre,
                                                   w16(md, w), dy, N, in,
                                                   out, dx, dw, db));
    else
        SWT_KC(where, swy_kc_linear_dgelu_bwd(md->ctx, x, x_pre, w, dy, N,
                                              in, out, dx, dw, db));
    return SWY_OK;
}

/* y += x */
static swy_status_t add(swt_model_cuda_t *md, const void *x, size_t n,
                        void *y)
{
    if (md->bf16)
        SWT_KC(where, swy_kc_add_bf16(md->ctx, x, n, y));
    else
        SWT_KC(where, swy_kc_add(md->ctx, x, n, y));
    return SWY_OK;
}

static swy_status_t dense_forward(swt_model_cuda_t *md, layer_t *ly)
{
    int S = md->cfg.tokens, H = md->cfg.hidden, F = md->cfg.dense_ffn;
    STEP_CHECK(linear_gelu_fwd(md, ly->x, ly->p.wa, ly->p.ba, S, H, F,
                               ly->a_pre, ly->a_act));
    STEP_CHECK(linear_fwd(md, ly->a_act, ly->p.wb, ly->p.bb, S, F, H,
                          ly->m));
    return add(md, ly->x, (size_t)S * H, ly->m);
}

/* Output layer and loss: logits in fp32 for the cross-entropy, and dx of
 * x_final. The loss is left in md->loss. */
static swy_status_t output_step(swt_model_cuda_t *md)
{
    const swt_model_config_t *c = &md->cfg;
    int S = c->tokens, H = c->hidden, V = c->vocab;
    size_t SV = (size_t)S * V;
    swy_kc_ctx_t *ctx = md->ctx;
    void *logits = md->bf16 ? md->logits16 : (void *)md->logits;
    void *dlogits = md->bf16 ? md->dlogits16 : (void *)md->dlogits;
    STEP_CHECK(linear_fwd(md, md->x_final, md->p.out_w, md->p.out_b, S, H, V,
                          logits));
    if (md->bf16)
        SWT_KC(where, swy_kc_bf16_to_f32(ctx, md->logits16, SV, md->logits));
    SWT_KC(where, swy_kc_xent_fwd(ctx, md->logits, md->labels, S, V, NULL,
                                  md->loss));
    /* backward: (1/W) x the local mean, see model.h */
    SWT_KC(where, swy_kc_xent_bwd(ctx, md->logits, md->labels, S, V,
                                  1.0f / (float)md->lo.W, md->dlogits));
    if (md->bf16)
        SWT_KC(where, swy_kc_f32_to_bf16(ctx, md->dlogits, SV,
                                         md->dlogits16));
    return linear_bwd(md, md->x_final, md->p.out_w, dlogits, S, H, V, md->dx,
                      md->d.out_w, md->d.out_b);
}

swy_status_t swt_model_cuda_step(swt_model_cuda_t *md, const int *ids,
                                 const int *labels, long step,
                                 swt_timing_t *tm,
                                 swt_step_result_t *result_p)
{
    const swt_model_config_t *c = &md->cfg;
    /* F: the dense block's inner size (the experts' is their own). */
    int S = c->tokens, H = c->hidden, F = c->dense_ffn;
    size_t SH = (size_t)S * H;
    swy_kc_ctx_t *ctx = md->ctx;
    void *st = md->stream;

    double t0 = swt_now();
    SWT_KC(where, swy_kc_memset(md->ddense, 0,
                                md->lo.n_dense * sizeof(float), st));
    SWT_KC(where, swy_kc_memset(md->dexpert, 0,
                                md->lo.n_expert * sizeof(float), st));
    SWT_KC(where, swy_kc_memcpy_h2d(md->ids, ids, (size_t)S * sizeof(int),
                                    st));
    SWT_KC(where, swy_kc_memcpy_h2d(md->labels, labels,
                                    (size_t)S * sizeof(int), st));

    /* ---- forward ---- */
    /* Each block writes its output straight into the next block's input
     * (kept for the backward). */
    if (md->bf16)
        SWT_KC(where, swy_kc_embed_fwd_bf16(ctx, w16(md, md->p.emb), md->ids,
                                            S, H, md->layers[0].x));
    else
        SWT_KC(where, swy_kc_embed_fwd(ctx, md->p.emb, md->ids, S, H,
                                       md->layers[0].x));
    STEP_CHECK(compute_end(md, tm, t0));
    double aux = 0;
    int dropped = 0;
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        t0 = swt_now();
        STEP_CHECK(dense_forward(md, ly));
        STEP_CHECK(compute_end(md, tm, t0));
        void *out = l + 1 < c->layers ? md->layers[l + 1].x : md->x_final;
        STEP_CHECK(swt_moe_block_cuda_forward(ly->moe, ly->m, out, tm));
        aux += swt_moe_block_cuda_aux(ly->moe);
        dropped += swt_moe_block_cuda_dropped(ly->moe);
    }
    t0 = swt_now();
    STEP_CHECK(output_step(md));
    STEP_CHECK(compute_end(md, tm, t0));
    STEP_CHECK(swt_ddp_ready(md->ddp, md->lo.ready_out, tm));
    for (int l = c->layers - 1; l >= 0; l--) {
        layer_t *ly = &md->layers[l];
        const swt_layer_layout_t *at = &md->lo.layer[l];
        STEP_CHECK(swt_moe_block_cuda_backward(ly->moe, md->dx, md->dm, tm));
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_gate, tm));
        t0 = swt_now();
        STEP_CHECK(linear_dgelu_bwd(md, ly->a_act, ly->a_pre, ly->p.wb,
                                    md->dm, S, F, H, md->dact, ly->d.wb,
                                    ly->d.bb));
        STEP_CHECK(compute_end(md, tm, t0));
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_wb, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
        t0 = swt_now();
        STEP_CHECK(linear_bwd(md, ly->x, ly->p.wa, md->dact, S, H, F,
                              md->dtmp, ly->d.wa, ly->d.ba));
        /* dx of the block input: residual plus the branch. */
        SWT_KC(where, swy_kc_memcpy_d2d(md->dx, md->dm, SH * md->es, st));
        STEP_CHECK(add(md, md->dtmp, SH, md->dx));
        STEP_CHECK(compute_end(md, tm, t0));
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_wa, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
    }
    t0 = swt_now();
    if (md->bf16) { /* the embedding's gradient is fp32 */
        SWT_KC(where, swy_kc_bf16_to_f32(ctx, md->dx, SH, md->dx32));
        SWT_KC(where, swy_kc_embed_bwd(ctx, md->dx32, md->ids, S, H,
                                       md->d.emb));
    } else {
        SWT_KC(where, swy_kc_embed_bwd(ctx, md->dx, md->ids, S, H,
                                       md->d.emb));
    }
    STEP_CHECK(compute_end(md, tm, t0));
    STEP_CHECK(swt_ddp_wait(md->ddp, tm));

    /* ---- Adam: dense replicas see the same summed gradients and stay
     * identical; experts are updated where they live. ---- */
    t0 = swt_now();
    swy_k_adam_params_t hp = {(float)c->lr, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
    SWT_KC(where, swy_kc_adam_step(ctx, md->dense, md->ddense, md->m_dense,
                                   md->v_dense, md->lo.n_dense, &hp, step));
    SWT_KC(where, swy_kc_adam_step(ctx, md->expert, md->dexpert,
                                   md->m_expert, md->v_expert, md->lo.n_expert,
                                   &hp, step));
    STEP_CHECK(refresh_bf16(md));
    float xent = 0;
    SWT_KC(where, swy_kc_memcpy_d2h(&xent, md->loss, sizeof(float), st));
    /* The loss is read below, and the caller reuses ids and labels. */
    STEP_CHECK(compute_end(md, tm, t0));

    result_p->xent = xent;
    result_p->aux = c->layers > 0 ? aux / c->layers : 0.0;
    result_p->dropped = dropped;
    return SWY_OK;
}
