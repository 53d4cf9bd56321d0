/* The parameter layout and initialization both models use (see
 * layout.h). */
#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* Init stream tags: one per kind of tensor. */
enum { P_EMB = 1, P_OUT_W, P_WA, P_WB, P_WG, P_W1, P_W2 };

/* Carves the dense buffer (in the order backward produces gradients,
 * each tensor's size to tensor_sizes for DDP) and the expert buffer. */
static int carve(swt_layout_t *lo)
{
    const swt_model_config_t *c = &lo->cfg;
    size_t H = (size_t)c->hidden, F = (size_t)c->ffn, V = (size_t)c->vocab;
    size_t Fd = (size_t)c->dense_ffn;
    size_t E = (size_t)lo->E, nl = (size_t)lo->nl;
    size_t pos = 0;
    int nt = 0;
#define DENSE(off, n)                                                        \
    do {                                                                     \
        (off) = pos;                                                         \
        pos += (n);                                                          \
        lo->tensor_sizes[nt++] = (n);                                        \
    } while (0)
    DENSE(lo->out_w, H * V);
    DENSE(lo->out_b, V);
    lo->ready_out = pos;
    for (int l = c->layers - 1; l >= 0; l--) {
        swt_layer_layout_t *ly = &lo->layer[l];
        DENSE(ly->wg, H * E);
        ly->ready_gate = pos;
        DENSE(ly->wb, Fd * H);
        DENSE(ly->bb, H);
        ly->ready_wb = pos;
        DENSE(ly->wa, H * Fd);
        DENSE(ly->ba, Fd);
        ly->ready_wa = pos;
    }
    DENSE(lo->emb, V * H);
#undef DENSE
    lo->n_tensors = nt;
    if (pos != lo->n_dense)
        return -1;
    pos = 0;
    for (int l = 0; l < c->layers; l++) {
        swt_layer_layout_t *ly = &lo->layer[l];
        ly->w1 = pos;
        pos += nl * H * F;
        ly->b1 = pos;
        pos += nl * F;
        ly->w2 = pos;
        pos += nl * F * H;
        ly->b2 = pos;
        pos += nl * H;
    }
    return pos == lo->n_expert ? 0 : -1;
}

swy_status_t swt_layout_plan_create(swy_comm_t comm,
                                    const swt_model_config_t *cfg,
                                    int rows_mem, void *stream,
                                    swy_moe_plan_t *plan_p)
{
    swy_moe_config_t mc = SWY_MOE_CONFIG_INIT;
    mc.rows_mem = rows_mem;
    mc.stream = stream;
    mc.dtype = cfg->bf16 ? SWY_BFLOAT16 : SWY_FLOAT32;
    mc.experts_per_rank = cfg->experts_per_rank;
    mc.hidden = cfg->hidden;
    mc.top_k = cfg->top_k;
    mc.capacity_factor = cfg->capacity_factor;
    mc.pipeline_degree = cfg->pipeline;
    mc.packing_factor = cfg->packing;
    swy_status_t status = swy_moe_plan_create(comm, &mc, plan_p);
    if (status != SWY_OK)
        fprintf(stderr, "swy-train: swy_moe_plan_create: %s: %s\n",
                swy_status_string(status), swy_last_error(NULL));
    return status;
}

swy_status_t swt_layout_init(swt_layout_t *lo, swy_comm_t comm,
                             const swt_model_config_t *cfg)
{
    memset(lo, 0, sizeof(*lo));
    swy_status_t status = swt_layout_plan_create(comm, cfg,
                                                 SWY_MOE_ROWS_HOST, NULL,
                                                 &lo->plan);
    if (status != SWY_OK)
        return status;
    lo->cfg = *cfg;
    lo->W = swy_comm_size(comm);
    lo->rank = swy_comm_rank(comm);
    lo->nl = cfg->experts_per_rank * cfg->packing;
    lo->E = lo->W * lo->nl;
    size_t L = (size_t)cfg->layers, H = (size_t)cfg->hidden,
           F = (size_t)cfg->ffn, V = (size_t)cfg->vocab;
    size_t Fd = (size_t)cfg->dense_ffn;
    lo->n_dense = 2 * H * V + V + L * (H * (size_t)lo->E + 2 * H * Fd + H + Fd);
    lo->expert_elems = 2 * H * F + H + F;
    lo->n_expert = L * (size_t)lo->nl * lo->expert_elems;
    lo->layer = calloc(L ? L : 1, sizeof(*lo->layer));
    lo->tensor_sizes = calloc(3 + 5 * L, sizeof(size_t));
    if (lo->layer == NULL || lo->tensor_sizes == NULL) {
        fprintf(stderr, "swy-train: out of memory for the parameter layout "
                "(%zu layers)\n", L);
        swt_layout_finalize(lo);
        return SWY_ERR_NO_MEMORY;
    }
    if (carve(lo) != 0) {
        fprintf(stderr, "swy-train: internal error: parameter layout\n");
        swt_layout_finalize(lo);
        return SWY_ERR_INTERNAL;
    }
    return SWY_OK;
}

void swt_layout_finalize(swt_layout_t *lo)
{
    free(lo->tensor_sizes);
    free(lo->layer);
    swy_moe_plan_destroy(lo->plan);
    memset(lo, 0, sizeof(*lo));
}

void swt_layout_model_tensors(const swt_layout_t *lo, float *dense,
                              swt_model_tensors_t *t_p)
{
    t_p->emb = dense + lo->emb;
    t_p->out_w = dense + lo->out_w;
    t_p->out_b = dense + lo->out_b;
}

void swt_layout_layer_tensors(const swt_layout_t *lo, int layer,
                              float *dense, float *expert,
                              swt_layer_tensors_t *t_p)
{
    const swt_layer_layout_t *ly = &lo->layer[layer];
    t_p->wa = dense + ly->wa;
    t_p->ba = dense + ly->ba;
    t_p->wb = dense + ly->wb;
    t_p->bb = dense + ly->bb;
    t_p->wg = dense + ly->wg;
    t_p->w1 = expert + ly->w1;
    t_p->b1 = expert + ly->b1;
    t_p->w2 = expert + ly->w2;
    t_p->b2 = expert + ly->b2;
}

static void fill_uniform(float *w, size_t n, uint64_t key, double bound)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((2.0 * swt_rng_unit(key, i) - 1.0) * bound);
}

void swt_layout_init_params(const swt_layout_t *lo, float *dense,
                            float *expert)
{
    const swt_model_config_t *c = &lo->cfg;
    size_t H = (size_t)c->hidden, F = (size_t)c->ffn, V = (size_t)c->vocab;
    size_t Fd = (size_t)c->dense_ffn;
    uint64_t s = c->seed;
    swt_model_tensors_t t;
    swt_layout_model_tensors(lo, dense, &t);
    fill_uniform(t.emb, V * H, swt_rng_key(s, P_EMB, 0, 0), 1.0);
    fill_uniform(t.out_w, H * V, swt_rng_key(s, P_OUT_W, 0, 0),
                 1.0 / sqrt((double)H));
    memset(t.out_b, 0, V * sizeof(float));
    for (int l = 0; l < c->layers; l++) {
        swt_layer_tensors_t ly;
        swt_layout_layer_tensors(lo, l, dense, expert, &ly);
        fill_uniform(ly.wa, H * Fd, swt_rng_key(s, P_WA, (uint64_t)l, 0),
                     1.0 / sqrt((double)H));
        fill_uniform(ly.wb, Fd * H, swt_rng_key(s, P_WB, (uint64_t)l, 0),
                     1.0 / sqrt((double)Fd));
        fill_uniform(ly.wg, H * (size_t)lo->E,
                     swt_rng_key(s, P_WG, (uint64_t)l, 0),
                     1.0 / sqrt((double)H));
        memset(ly.ba, 0, Fd * sizeof(float));
        memset(ly.bb, 0, H * sizeof(float));
        for (int e = 0; e < lo->nl; e++) {
            uint64_t g = (uint64_t)(lo->rank * lo->nl + e);
            fill_uniform(ly.w1 + e * H * F, H * F,
                         swt_rng_key(s, P_W1, (uint64_t)l, g),
                         1.0 / sqrt((double)H));
            fill_uniform(ly.w2 + e * F * H, F * H,
                         swt_rng_key(s, P_W2, (uint64_t)l, g),
                         1.0 / sqrt((double)F));
        }
        memset(ly.b1, 0, (size_t)lo->nl * F * sizeof(float));
        memset(ly.b2, 0, (size_t)lo->nl * H * sizeof(float));
    }
}

void swt_layout_block_params(const swt_layout_t *lo, int layer,
                             const swt_layer_tensors_t *param,
                             const swt_layer_tensors_t *grad,
                             swt_moe_block_params_t *bp_p)
{
    const swt_model_config_t *c = &lo->cfg;
    swt_moe_block_params_t bp = {
        .layer = layer, .tokens = c->tokens, .gate_group = c->gate_group,
        .hidden = c->hidden, .ffn = c->ffn, .top_k = c->top_k,
        .n_local = lo->nl, .n_experts = lo->E,
        .capacity_factor = c->capacity_factor,
        /* d(loss)/d(aux of a group): aux_coef, mean over groups, scaled
         * by 1/W like the rest of the local loss (model.h). */
        .aux_weight = c->aux_coef /
                      ((double)lo->W * (c->tokens / c->gate_group)),
        .phase_hints = c->phase_hints,
        .gate = SWT_GATE_GSHARD,
        .wg = param->wg, .dwg = grad->wg,
        .w1 = param->w1, .b1 = param->b1, .w2 = param->w2, .b2 = param->b2,
        .dw1 = grad->w1, .db1 = grad->b1, .dw2 = grad->w2, .db2 = grad->b2};
    *bp_p = bp;
}

uint64_t swt_layout_hash_floats(uint64_t h, const float *x, size_t n)
{
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int is_gate(const swt_layout_t *lo, size_t offset)
{
    for (int l = 0; l < lo->cfg.layers; l++)
        if (lo->layer[l].wg == offset)
            return 1;
    return 0;
}

uint64_t swt_layout_dense_hash(const swt_layout_t *lo, const float *dense,
                               int skip_gates)
{
    /* Tensor by tensor in buffer order: the same bytes in the same order
     * as one pass over the buffer, less the skipped gates. */
    uint64_t h = SWT_LAYOUT_HASH_INIT;
    size_t pos = 0;
    for (int t = 0; t < lo->n_tensors; t++) {
        size_t n = lo->tensor_sizes[t];
        if (!(skip_gates && is_gate(lo, pos)))
            h = swt_layout_hash_floats(h, dense + pos, n);
        pos += n;
    }
    return h;
}
