/* The reference MoE model on the GPU (see model_cuda.h), the twin of
 * model.c: same parameter layout and initialization, same forward,
 * backward, DDP buckets and Adam, through the CUDA kernels. */
#include "model_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "moe_block_cuda.h"
#include "rng.h"
#include "swy_kernels_cuda.h"
#include "switchyard/moe.h"

/* Init stream tags: one per kind of tensor. They must stay those of
 * model.c, or the two devices would not start from the same model (the
 * gpu test compares their first losses). */
enum { P_EMB = 1, P_OUT_W, P_WA, P_WB, P_WG, P_W1, P_W2 };

static const char where[] = "model (cuda)";

typedef struct {
    /* dense, in the flat buffers (device); d* are the gradients */
    float *wa, *ba, *wb, *bb, *wg;
    float *dwa, *dba, *dwb, *dbb, *dwg;
    /* experts on this rank, [n_local] each (device) */
    float *w1, *b1, *w2, *b2;
    float *dw1, *db1, *dw2, *db2;
    /* the same tensors in the host copies used for the initialization */
    float *h_wa, *h_wb, *h_wg, *h_w1, *h_w2;
    /* backward has produced the dense gradients below these offsets */
    size_t ready_gate, ready_wb, ready_wa;
    /* activations (device): x (block input), a_pre/a_act [S][F], m (MoE
     * input) */
    float *x, *a_pre, *a_act, *m;
    swt_moe_block_cuda_t *moe;
} layer_t;

struct swt_model_cuda {
    swt_model_config_t cfg;
    swy_comm_t comm;
    int W, rank, E, nl;
    swy_moe_plan_t plan;
    void *stream;
    swy_kc_ctx_t *ctx;
    size_t n_dense, n_expert;
    /* device */
    float *dense, *ddense, *m_dense, *v_dense;
    float *expert, *dexpert, *m_expert, *v_expert;
    float *emb, *out_w, *out_b, *demb, *dout_w, *dout_b;
    /* host: the initial values, and later the dense hash's copy */
    float *dense_h, *expert_h;
    float *h_emb, *h_out_w;
    size_t ready_out;
    layer_t *layers;
    float *x_final;         /* [S][H]: output of the last block */
    float *logits;          /* [S][V] */
    float *dlogits;         /* [S][V] */
    float *dx, *dm, *dtmp;  /* [S][H] backward scratch */
    float *dact;            /* [S][F] */
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

static void fill_uniform(float *w, size_t n, uint64_t key, double bound)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((2.0 * swt_rng_unit(key, i) - 1.0) * bound);
}

/* model.c's init_params, on the host copies (biases stay zero). */
static void init_params(swt_model_cuda_t *md)
{
    const swt_model_config_t *c = &md->cfg;
    size_t H = (size_t)c->hidden, F = (size_t)c->ffn, V = (size_t)c->vocab;
    uint64_t s = c->seed;
    /* Bounds as torch.nn.Linear's default, 1/sqrt(fan_in); biases zero.
     * The embedding is U(-1, 1). */
    fill_uniform(md->h_emb, V * H, swt_rng_key(s, P_EMB, 0, 0), 1.0);
    fill_uniform(md->h_out_w, H * V, swt_rng_key(s, P_OUT_W, 0, 0),
                 1.0 / sqrt((double)H));
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        fill_uniform(ly->h_wa, H * F, swt_rng_key(s, P_WA, (uint64_t)l, 0),
                     1.0 / sqrt((double)H));
        fill_uniform(ly->h_wb, F * H, swt_rng_key(s, P_WB, (uint64_t)l, 0),
                     1.0 / sqrt((double)F));
        fill_uniform(ly->h_wg, H * (size_t)md->E,
                     swt_rng_key(s, P_WG, (uint64_t)l, 0),
                     1.0 / sqrt((double)H));
        for (int e = 0; e < md->nl; e++) {
            uint64_t g = (uint64_t)(md->rank * md->nl + e);
            fill_uniform(ly->h_w1 + e * H * F, H * F,
                         swt_rng_key(s, P_W1, (uint64_t)l, g),
                         1.0 / sqrt((double)H));
            fill_uniform(ly->h_w2 + e * F * H, F * H,
                         swt_rng_key(s, P_W2, (uint64_t)l, g),
                         1.0 / sqrt((double)F));
        }
    }
}

/* model.c's layout_params: carves the flat buffers (device, and the host
 * copies) into tensors, dense in the order backward produces gradients;
 * each dense tensor's size goes to sizes[] for DDP. */
static int layout_params(swt_model_cuda_t *md, size_t *sizes, int *n_sizes)
{
    const swt_model_config_t *c = &md->cfg;
    size_t H = (size_t)c->hidden, F = (size_t)c->ffn, V = (size_t)c->vocab;
    size_t E = (size_t)md->E, nl = (size_t)md->nl;
    size_t pos = 0;
    int nt = 0;
    float *unused_h = NULL;
#define DENSE(ptr, gptr, hptr, n)                                            \
    do {                                                                     \
        (ptr) = md->dense + pos;                                             \
        (gptr) = md->ddense + pos;                                           \
        (hptr) = md->dense_h + pos;                                          \
        pos += (n);                                                          \
        sizes[nt++] = (n);                                                   \
    } while (0)
    DENSE(md->out_w, md->dout_w, md->h_out_w, H * V);
    DENSE(md->out_b, md->dout_b, unused_h, V);
    md->ready_out = pos;
    for (int l = c->layers - 1; l >= 0; l--) {
        layer_t *ly = &md->layers[l];
        DENSE(ly->wg, ly->dwg, ly->h_wg, H * E);
        ly->ready_gate = pos;
        DENSE(ly->wb, ly->dwb, ly->h_wb, F * H);
        DENSE(ly->bb, ly->dbb, unused_h, H);
        ly->ready_wb = pos;
        DENSE(ly->wa, ly->dwa, ly->h_wa, H * F);
        DENSE(ly->ba, ly->dba, unused_h, F);
        ly->ready_wa = pos;
    }
    DENSE(md->emb, md->demb, md->h_emb, V * H);
#undef DENSE
    (void)unused_h;
    *n_sizes = nt;
    if (pos != md->n_dense)
        return -1;
    pos = 0;
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        ly->w1 = md->expert + pos;
        ly->dw1 = md->dexpert + pos;
        ly->h_w1 = md->expert_h + pos;
        pos += nl * H * F;
        ly->b1 = md->expert + pos;
        ly->db1 = md->dexpert + pos;
        pos += nl * F;
        ly->w2 = md->expert + pos;
        ly->dw2 = md->dexpert + pos;
        ly->h_w2 = md->expert_h + pos;
        pos += nl * F * H;
        ly->b2 = md->expert + pos;
        ly->db2 = md->dexpert + pos;
        pos += nl * H;
    }
    return pos == md->n_expert ? 0 : -1;
}

/* A device buffer of n floats, zeroed (gradients, Adam's moments and
 * activations all start at zero); never NULL on success. */
static int dev_zalloc(float **p, size_t n)
{
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (swy_kc_malloc((void **)p, bytes) != 0)
        return -1;
    return swy_kc_memset(*p, 0, bytes, NULL);
}

static swy_status_t create_device(swt_model_cuda_t *md)
{
    const swt_model_config_t *c = &md->cfg;
    size_t S = (size_t)c->tokens, H = (size_t)c->hidden,
           F = (size_t)c->ffn, V = (size_t)c->vocab;
    SWT_KC(where, swy_kc_stream_create(0, &md->stream));
    SWT_KC(where, swy_kc_ctx_create(md->stream, &md->ctx));
    struct {
        float **p;
        size_t n;
    } bufs[] = {
        {&md->dense, md->n_dense},    {&md->ddense, md->n_dense},
        {&md->m_dense, md->n_dense},  {&md->v_dense, md->n_dense},
        {&md->expert, md->n_expert},  {&md->dexpert, md->n_expert},
        {&md->m_expert, md->n_expert}, {&md->v_expert, md->n_expert},
        {&md->x_final, S * H},        {&md->logits, S * V},
        {&md->dlogits, S * V},        {&md->dx, S * H},
        {&md->dm, S * H},             {&md->dtmp, S * H},
        {&md->dact, S * F},           {&md->loss, 1},
    };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        SWT_KC(where, dev_zalloc(bufs[i].p, bufs[i].n));
    SWT_KC(where, swy_kc_malloc((void **)&md->ids, (S ? S : 1) * sizeof(int)));
    SWT_KC(where,
           swy_kc_malloc((void **)&md->labels, (S ? S : 1) * sizeof(int)));
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        SWT_KC(where, dev_zalloc(&ly->x, S * H));
        SWT_KC(where, dev_zalloc(&ly->m, S * H));
        SWT_KC(where, dev_zalloc(&ly->a_pre, S * F));
        SWT_KC(where, dev_zalloc(&ly->a_act, S * F));
    }
    return SWY_OK;
}

swy_status_t swt_model_cuda_create(swy_comm_t comm,
                                   const swt_model_config_t *cfg,
                                   swt_model_cuda_t **model_p)
{
    if (cfg->pipeline != 1) {
        fprintf(stderr, "swy-train: --device cuda: --pipeline %d is not "
                "implemented on the GPU path (use --pipeline 1)\n",
                cfg->pipeline);
        return SWY_ERR_UNSUPPORTED;
    }
    swt_model_cuda_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return SWY_ERR_NO_MEMORY;
    md->cfg = *cfg;
    md->comm = comm;
    md->W = swy_comm_size(comm);
    md->rank = swy_comm_rank(comm);
    md->nl = cfg->experts_per_rank * cfg->packing;
    md->E = md->W * md->nl;
    size_t L = (size_t)cfg->layers, H = (size_t)cfg->hidden,
           F = (size_t)cfg->ffn, V = (size_t)cfg->vocab;
    md->n_dense = 2 * H * V + V + L * (H * (size_t)md->E + 2 * H * F + H + F);
    md->n_expert = L * (size_t)md->nl * (2 * H * F + H + F);

    swy_moe_config_t mc = SWY_MOE_CONFIG_INIT;
    mc.experts_per_rank = cfg->experts_per_rank;
    mc.hidden = cfg->hidden;
    mc.top_k = cfg->top_k;
    mc.capacity_factor = cfg->capacity_factor;
    mc.pipeline_degree = cfg->pipeline;
    mc.packing_factor = cfg->packing;
    swy_status_t status = swy_moe_plan_create(comm, &mc, &md->plan);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-train: swy_moe_plan_create: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
        free(md);
        return status;
    }

    size_t *sizes = calloc(4 + 5 * L, sizeof(size_t));
    md->layers = calloc(L, sizeof(layer_t));
    md->dense_h = calloc(md->n_dense ? md->n_dense : 1, sizeof(float));
    md->expert_h = calloc(md->n_expert ? md->n_expert : 1, sizeof(float));
    if (sizes == NULL || md->layers == NULL || md->dense_h == NULL ||
        md->expert_h == NULL) {
        fprintf(stderr, "swy-train: out of host memory for the model (%zu "
                "dense and %zu expert parameters)\n", md->n_dense,
                md->n_expert);
        status = SWY_ERR_NO_MEMORY;
        goto fail;
    }
    status = create_device(md);
    if (status != SWY_OK) {
        fprintf(stderr, "swy-train: could not allocate the model on the GPU "
                "(%zu dense and %zu expert parameters, %d tokens)\n",
                md->n_dense, md->n_expert, cfg->tokens);
        goto fail;
    }
    int n_sizes = 0;
    if (layout_params(md, sizes, &n_sizes) != 0) {
        fprintf(stderr, "swy-train: internal error: parameter layout\n");
        status = SWY_ERR_INTERNAL;
        goto fail;
    }
    init_params(md);
    if (swy_kc_memcpy_h2d(md->dense, md->dense_h,
                          md->n_dense * sizeof(float), NULL) != 0 ||
        swy_kc_memcpy_h2d(md->expert, md->expert_h,
                          md->n_expert * sizeof(float), NULL) != 0) {
        status = swt_cuda_fail(where, "copying the initial parameters");
        goto fail;
    }
    for (int l = 0; l < cfg->layers; l++) {
        layer_t *ly = &md->layers[l];
        swt_moe_block_params_t bp = {
            .layer = l, .tokens = cfg->tokens, .gate_group = cfg->gate_group,
            .hidden = cfg->hidden, .ffn = cfg->ffn, .top_k = cfg->top_k,
            .n_local = md->nl, .n_experts = md->E,
            .capacity_factor = cfg->capacity_factor,
            /* as model.c: aux_coef, mean over groups, times 1/W */
            .aux_weight = cfg->aux_coef /
                          ((double)md->W * (cfg->tokens / cfg->gate_group)),
            .phase_hints = cfg->phase_hints,
            .wg = ly->wg, .dwg = ly->dwg,
            .w1 = ly->w1, .b1 = ly->b1, .w2 = ly->w2, .b2 = ly->b2,
            .dw1 = ly->dw1, .db1 = ly->db1, .dw2 = ly->dw2, .db2 = ly->db2};
        status = swt_moe_block_cuda_create(md->plan, comm, md->ctx, &bp,
                                           &ly->moe);
        if (status != SWY_OK)
            goto fail;
    }
    if (swt_ddp_create(comm, md->ddense, sizes, n_sizes, cfg->bucket_bytes,
                       &md->ddp) != 0) {
        fprintf(stderr, "swy-train: out of memory for the DDP buckets\n");
        status = SWY_ERR_NO_MEMORY;
        goto fail;
    }
    swt_ddp_set_stream(md->ddp, md->stream);
    free(sizes);
    *model_p = md;
    return SWY_OK;
fail:
    free(sizes);
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
    float *bufs[] = {md->loss, md->dact, md->dtmp, md->dm, md->dx,
                     md->dlogits, md->logits, md->x_final, md->v_expert,
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
    swy_moe_plan_destroy(md->plan);
    free(md);
}

int swt_model_cuda_num_experts(const swt_model_cuda_t *md)
{
    return md->E;
}

int swt_model_cuda_num_local_experts(const swt_model_cuda_t *md)
{
    return md->nl;
}

size_t swt_model_cuda_dense_params(const swt_model_cuda_t *md)
{
    return md->n_dense;
}

size_t swt_model_cuda_expert_params(const swt_model_cuda_t *md)
{
    return md->n_expert;
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
                                    md->n_dense * sizeof(float), NULL));
    /* FNV-1a over the bytes, as model.c. */
    const unsigned char *p = (const unsigned char *)md->dense_h;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < md->n_dense * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    *hash_p = h;
    return SWY_OK;
}

#define STEP_CHECK(call)                                                     \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return st_;                                                      \
    } while (0)

/* Ends a timed compute block, GPU work included. */
static swy_status_t compute_end(swt_model_cuda_t *md, swt_timing_t *tm,
                                double t0)
{
    SWT_KC(where, swy_kc_stream_sync(md->stream));
    swt_timing_compute_end(tm, t0);
    return SWY_OK;
}

static swy_status_t dense_forward(swt_model_cuda_t *md, layer_t *ly)
{
    int S = md->cfg.tokens, H = md->cfg.hidden, F = md->cfg.ffn;
    swy_kc_ctx_t *ctx = md->ctx;
    SWT_KC(where, swy_kc_linear_fwd(ctx, ly->x, ly->wa, ly->ba, S, H, F,
                                    ly->a_pre));
    SWT_KC(where, swy_kc_gelu_fwd(ctx, ly->a_pre, (size_t)S * F, ly->a_act));
    SWT_KC(where, swy_kc_linear_fwd(ctx, ly->a_act, ly->wb, ly->bb, S, F, H,
                                    ly->m));
    SWT_KC(where, swy_kc_add(ctx, ly->x, (size_t)S * H, ly->m));
    return SWY_OK;
}

swy_status_t swt_model_cuda_step(swt_model_cuda_t *md, const int *ids,
                                 const int *labels, long step,
                                 swt_timing_t *tm,
                                 swt_step_result_t *result_p)
{
    const swt_model_config_t *c = &md->cfg;
    int S = c->tokens, H = c->hidden, F = c->ffn, V = c->vocab;
    size_t SH = (size_t)S * H, SF = (size_t)S * F;
    swy_kc_ctx_t *ctx = md->ctx;
    void *st = md->stream;

    double t0 = swt_now();
    SWT_KC(where, swy_kc_memset(md->ddense, 0, md->n_dense * sizeof(float),
                                st));
    SWT_KC(where, swy_kc_memset(md->dexpert, 0,
                                md->n_expert * sizeof(float), st));
    SWT_KC(where, swy_kc_memcpy_h2d(md->ids, ids, (size_t)S * sizeof(int),
                                    st));
    SWT_KC(where, swy_kc_memcpy_h2d(md->labels, labels,
                                    (size_t)S * sizeof(int), st));

    /* ---- forward ---- */
    /* Each block writes its output straight into the next block's input
     * (kept for the backward). */
    SWT_KC(where, swy_kc_embed_fwd(ctx, md->emb, md->ids, S, H,
                                   md->layers[0].x));
    STEP_CHECK(compute_end(md, tm, t0));
    double aux = 0;
    int dropped = 0;
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        t0 = swt_now();
        STEP_CHECK(dense_forward(md, ly));
        STEP_CHECK(compute_end(md, tm, t0));
        float *out = l + 1 < c->layers ? md->layers[l + 1].x : md->x_final;
        STEP_CHECK(swt_moe_block_cuda_forward(ly->moe, ly->m, out, tm));
        aux += swt_moe_block_cuda_aux(ly->moe);
        dropped += swt_moe_block_cuda_dropped(ly->moe);
    }
    t0 = swt_now();
    SWT_KC(where, swy_kc_linear_fwd(ctx, md->x_final, md->out_w, md->out_b,
                                    S, H, V, md->logits));
    SWT_KC(where, swy_kc_xent_fwd(ctx, md->logits, md->labels, S, V, NULL,
                                  md->loss));

    /* ---- backward: (1/W) x the local mean, see model.h ---- */
    SWT_KC(where, swy_kc_xent_bwd(ctx, md->logits, md->labels, S, V,
                                  1.0f / (float)md->W, md->dlogits));
    SWT_KC(where, swy_kc_linear_bwd(ctx, md->x_final, md->out_w,
                                    md->dlogits, S, H, V, md->dx,
                                    md->dout_w, md->dout_b));
    STEP_CHECK(compute_end(md, tm, t0));
    STEP_CHECK(swt_ddp_ready(md->ddp, md->ready_out, tm));
    for (int l = c->layers - 1; l >= 0; l--) {
        layer_t *ly = &md->layers[l];
        STEP_CHECK(swt_moe_block_cuda_backward(ly->moe, md->dx, md->dm, tm));
        STEP_CHECK(swt_ddp_ready(md->ddp, ly->ready_gate, tm));
        t0 = swt_now();
        SWT_KC(where, swy_kc_linear_bwd(ctx, ly->a_act, ly->wb, md->dm, S, F,
                                        H, md->dact, ly->dwb, ly->dbb));
        STEP_CHECK(compute_end(md, tm, t0));
        STEP_CHECK(swt_ddp_ready(md->ddp, ly->ready_wb, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
        t0 = swt_now();
        SWT_KC(where, swy_kc_gelu_bwd(ctx, ly->a_pre, md->dact, SF,
                                      md->dact));
        SWT_KC(where, swy_kc_linear_bwd(ctx, ly->x, ly->wa, md->dact, S, H,
                                        F, md->dtmp, ly->dwa, ly->dba));
        /* dx of the block input: residual plus the branch. */
        SWT_KC(where, swy_kc_memcpy_d2d(md->dx, md->dm, SH * sizeof(float),
                                        st));
        SWT_KC(where, swy_kc_add(ctx, md->dtmp, SH, md->dx));
        STEP_CHECK(compute_end(md, tm, t0));
        STEP_CHECK(swt_ddp_ready(md->ddp, ly->ready_wa, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
    }
    t0 = swt_now();
    SWT_KC(where, swy_kc_embed_bwd(ctx, md->dx, md->ids, S, H, md->demb));
    STEP_CHECK(compute_end(md, tm, t0));
    STEP_CHECK(swt_ddp_wait(md->ddp, tm));

    /* ---- Adam: dense replicas see the same summed gradients and stay
     * identical; experts are updated where they live. ---- */
    t0 = swt_now();
    swy_k_adam_params_t hp = {(float)c->lr, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
    SWT_KC(where, swy_kc_adam_step(ctx, md->dense, md->ddense, md->m_dense,
                                   md->v_dense, md->n_dense, &hp, step));
    SWT_KC(where, swy_kc_adam_step(ctx, md->expert, md->dexpert,
                                   md->m_expert, md->v_expert, md->n_expert,
                                   &hp, step));
    float xent = 0;
    SWT_KC(where, swy_kc_memcpy_d2h(&xent, md->loss, sizeof(float), st));
    /* The loss is read below, and the caller reuses ids and labels. */
    STEP_CHECK(compute_end(md, tm, t0));

    result_p->xent = xent;
    result_p->aux = c->layers > 0 ? aux / c->layers : 0.0;
    result_p->dropped = dropped;
    return SWY_OK;
}
