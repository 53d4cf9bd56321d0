/* The reference MoE model: parameters, init, forward, backward, Adam
 * (see model.h). */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "layout.h"
#include "moe_block.h"
#include "swy_kernels.h"
#include "switchyard/moe.h"

typedef struct {
    /* parameters and gradients in the flat buffers (layout.h) */
    swt_layer_tensors_t p, d;
    /* activations: x (block input), a_pre/a_act [S][Fd], m (MoE input) */
    float *x, *a_pre, *a_act, *m;
    swt_moe_block_t *moe;
    float *dwg_local;  /* --gate ta: this rank's own gate gradient [H][E] */
    /* shadowing (--placement): shadowed[E] flags; a replica of each
     * shadowed expert this rank does not own, [params | m | v | grad] of
     * expert_elems each (w1, b1, w2, b2 back to back); the gradients of
     * the shadowed experts packed by id for their allreduce */
    int *shadowed;
    int n_shadowed;
    float **replica;   /* [E], NULL unless shadowed here and not owned */
    float *sh_grad;    /* [n_shadowed][expert_elems] */
    swy_request_t sh_req;
    /* packing (--placement): slot_of[g] = the global slot of logical
     * expert g, a permutation; slot s lives on rank s / nl at local index
     * s % nl (lib/moe's fixed slots) */
    int *slot_of;
} layer_t;

struct swt_model {
    swt_model_config_t cfg;
    swy_comm_t comm;        /* the experts' (expert-parallel) group */
    swy_comm_t world;       /* the dense parameters' (DDP) */
    swy_comm_t expert_dp;   /* replicas of this rank's experts, or NULL */
    swy_request_t *ex_req;  /* [layers]: expert gradients' allreduces */
    swt_layout_t lo;        /* W, rank, E, nl, the buffers, the plan */
    float *dense, *ddense, *m_dense, *v_dense;
    float *expert, *dexpert, *m_expert, *v_expert;
    swt_model_tensors_t p, d; /* embedding and output: parameters, grads */
    layer_t *layers;
    float *x_final;         /* [S][H]: output of the last block */
    float *logits;          /* [S][V]; reused as dlogits */
    float *dx, *dm, *dtmp;  /* [S][H] backward scratch */
    float *dact;            /* [S][Fd] */
    swt_ddp_t *ddp;
    float *ta_weight;       /* [E], --gate ta */
    double *ta_share;       /* [E], --gate ta: target share per expert */
    int *node_of_expert;    /* [E], --gate topo */
    int my_node;
    long applied_step;      /* --overlap: Adam step of the pending grads */
};

static float *zalloc(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* What the topology-aware gates need from the communicator: TA-MoE's
 * per-expert loss weights, or the node of every expert. */
static swy_status_t gate_setup(swt_model_t *md)
{
    swy_status_t st = SWY_OK;
    if (md->cfg.gate == SWT_GATE_TA) {
        double *w = calloc((size_t)md->lo.E, sizeof(double));
        double *rank_share = calloc((size_t)md->lo.W, sizeof(double));
        md->ta_weight = calloc((size_t)md->lo.E, sizeof(float));
        md->ta_share = calloc((size_t)md->lo.E, sizeof(double));
        if (w == NULL || rank_share == NULL || md->ta_weight == NULL ||
            md->ta_share == NULL) {
            free(w);
            free(rank_share);
            return SWY_ERR_NO_MEMORY;
        }
        st = swy_moe_ta_target(md->comm, md->lo.nl, rank_share, w);
        for (int e = 0; e < md->lo.E; e++) {
            md->ta_weight[e] = (float)w[e];
            md->ta_share[e] = rank_share[e / md->lo.nl] / md->lo.nl;
        }
        free(rank_share);
        free(w);
    } else if (md->cfg.gate == SWT_GATE_TOPO) {
        int *node = calloc((size_t)md->lo.W, sizeof(int));
        md->node_of_expert = calloc((size_t)md->lo.E, sizeof(int));
        if (node == NULL || md->node_of_expert == NULL) {
            free(node);
            return SWY_ERR_NO_MEMORY;
        }
        st = swy_moe_topo_nodes(md->comm, node, NULL);
        for (int e = 0; e < md->lo.E; e++)
            md->node_of_expert[e] = node[e / md->lo.nl];
        md->my_node = node[md->lo.rank];
        free(node);
    }
    if (st != SWY_OK)
        fprintf(stderr, "swy-train: gate setup: %s: %s\n",
                swy_status_string(st), swy_last_error(md->comm));
    return st;
}

swy_status_t swt_model_create(swy_comm_t comm, const swt_model_config_t *cfg,
                              swt_model_t **model_p)
{
    return swt_model_create_groups(comm, comm, NULL, cfg, model_p);
}

swy_status_t swt_model_create_groups(swy_comm_t world, swy_comm_t comm,
                                     swy_comm_t expert_dp,
                                     const swt_model_config_t *cfg,
                                     swt_model_t **model_p)
{
    swt_model_t *md = calloc(1, sizeof(*md));
    if (md == NULL)
        return SWY_ERR_NO_MEMORY;
    md->cfg = *cfg;
    md->comm = comm;
    md->world = world;
    md->expert_dp = expert_dp;
    md->ex_req = calloc((size_t)(cfg->layers > 0 ? cfg->layers : 1),
                        sizeof(swy_request_t));
    if (md->ex_req == NULL) {
        free(md);
        return SWY_ERR_NO_MEMORY;
    }
    swy_status_t status = swt_layout_init(&md->lo, comm, cfg);
    if (status != SWY_OK) {
        free(md->ex_req);
        free(md);
        return status;
    }
    size_t L = (size_t)cfg->layers, H = (size_t)cfg->hidden,
           V = (size_t)cfg->vocab, S = (size_t)cfg->tokens;
    size_t Fd = (size_t)cfg->dense_ffn;

    md->dense = zalloc(md->lo.n_dense);
    /* The DDP buckets' allreduces run in place on the dense gradient:
     * in swy_mem_alloc memory the local peers reduce straight from it
     * and write the sums straight into it (no staging copies, which on
     * a host whose ranks share cores take CPU from the compute). */
    if (swy_mem_alloc(world, (md->lo.n_dense ? md->lo.n_dense : 1) *
                                sizeof(float),
                      (void **)&md->ddense) != SWY_OK)
        md->ddense = NULL;
    md->m_dense = zalloc(md->lo.n_dense);
    md->v_dense = zalloc(md->lo.n_dense);
    md->expert = zalloc(md->lo.n_expert);
    md->dexpert = zalloc(md->lo.n_expert);
    md->m_expert = zalloc(md->lo.n_expert);
    md->v_expert = zalloc(md->lo.n_expert);
    md->layers = calloc(L, sizeof(layer_t));
    md->x_final = zalloc(S * H);
    md->logits = zalloc(S * V);
    md->dx = zalloc(S * H);
    md->dm = zalloc(S * H);
    md->dtmp = zalloc(S * H);
    md->dact = zalloc(S * Fd);
    if (!md->dense || !md->ddense || !md->m_dense || !md->v_dense ||
        !md->expert || !md->dexpert || !md->m_expert || !md->v_expert ||
        !md->layers || !md->x_final || !md->logits ||
        !md->dx || !md->dm || !md->dtmp || !md->dact)
        goto nomem;
    swt_layout_model_tensors(&md->lo, md->dense, &md->p);
    swt_layout_model_tensors(&md->lo, md->ddense, &md->d);
    for (size_t l = 0; l < L; l++) {
        layer_t *ly = &md->layers[l];
        ly->x = zalloc(S * H);
        ly->m = zalloc(S * H);
        ly->a_pre = zalloc(S * Fd);
        ly->a_act = zalloc(S * Fd);
        ly->shadowed = calloc((size_t)md->lo.E, sizeof(int));
        ly->replica = calloc((size_t)md->lo.E, sizeof(float *));
        ly->slot_of = malloc((size_t)md->lo.E * sizeof(int));
        swt_layout_layer_tensors(&md->lo, (int)l, md->dense, md->expert,
                                 &ly->p);
        swt_layout_layer_tensors(&md->lo, (int)l, md->ddense, md->dexpert,
                                 &ly->d);
        if (!ly->x || !ly->m || !ly->a_pre || !ly->a_act || !ly->shadowed ||
            !ly->replica || !ly->slot_of)
            goto nomem;
        for (int g = 0; g < md->lo.E; g++)
            ly->slot_of[g] = g;
    }
    swt_layout_init_params(&md->lo, md->dense, md->expert);
    if (gate_setup(md) != SWY_OK) {
        swt_model_destroy(md);
        return SWY_ERR_INTERNAL;
    }
    for (int l = 0; l < cfg->layers; l++) {
        layer_t *ly = &md->layers[l];
        swt_moe_block_params_t bp;
        swt_layout_block_params(&md->lo, l, &ly->p, &ly->d, &bp);
        bp.gate = cfg->gate;
        bp.ta_weight = md->ta_weight;
        bp.ta_capacity = cfg->ta_capacity;
        bp.ta_share = md->ta_share;
        bp.node_of_expert = md->node_of_expert;
        bp.my_node = md->my_node;
        bp.topo_cross_frac = cfg->topo_cross_frac;
        bp.slot_of = ly->slot_of;
        if (swt_moe_block_create(md->lo.plan, comm, &bp, &ly->moe) != 0)
            goto nomem;
        if (cfg->gate == SWT_GATE_TA &&
            (ly->dwg_local = zalloc(H * (size_t)md->lo.E)) == NULL)
            goto nomem;
    }
    if (swt_ddp_create(world, md->ddense, md->lo.tensor_sizes,
                       md->lo.n_tensors, cfg->bucket_bytes, &md->ddp) != 0)
        goto nomem;
    swt_ddp_set_overlap(md->ddp, cfg->overlap);
    *model_p = md;
    return SWY_OK;
nomem:
    fprintf(stderr, "swy-train: out of memory for the model (%zu dense and "
            "%zu expert parameters)\n", md->lo.n_dense, md->lo.n_expert);
    swt_model_destroy(md);
    return SWY_ERR_NO_MEMORY;
}

void swt_model_destroy(swt_model_t *md)
{
    if (md == NULL)
        return;
    swt_ddp_destroy(md->ddp);
    free(md->ta_share);
    free(md->ta_weight);
    free(md->node_of_expert);
    if (md->layers != NULL)
        for (int l = 0; l < md->cfg.layers; l++) {
            layer_t *ly = &md->layers[l];
            swt_moe_block_destroy(ly->moe);
            if (ly->sh_req != NULL) /* a failed step left it posted */
                (void)swy_wait(ly->sh_req);
            swy_request_free(ly->sh_req);
            free(ly->sh_grad);
            if (ly->replica != NULL)
                for (int e = 0; e < md->lo.E; e++)
                    free(ly->replica[e]);
            free(ly->replica);
            free(ly->slot_of);
            free(ly->shadowed);
            free(ly->dwg_local);
            free(ly->a_act);
            free(ly->a_pre);
            free(ly->m);
            free(ly->x);
        }
    free(md->layers);
    free(md->dact);
    free(md->dtmp);
    free(md->dm);
    free(md->dx);
    free(md->logits);
    free(md->x_final);
    free(md->v_expert);
    free(md->m_expert);
    free(md->dexpert);
    free(md->expert);
    free(md->v_dense);
    free(md->m_dense);
    (void)swy_mem_free(md->world, md->ddense);
    free(md->ex_req);
    free(md->dense);
    swt_layout_finalize(&md->lo);
    free(md);
}

int swt_model_num_experts(const swt_model_t *md)
{
    return md->lo.E;
}

int swt_model_num_local_experts(const swt_model_t *md)
{
    return md->lo.nl;
}

size_t swt_model_dense_params(const swt_model_t *md)
{
    return md->lo.n_dense;
}

size_t swt_model_expert_params(const swt_model_t *md)
{
    return md->lo.n_expert;
}

int swt_model_num_buckets(const swt_model_t *md)
{
    return swt_ddp_num_buckets(md->ddp);
}

const int64_t *swt_model_layer_sent(const swt_model_t *md, int layer)
{
    return swt_moe_block_sent(md->layers[layer].moe);
}

const int64_t *swt_model_layer_chosen(const swt_model_t *md, int layer)
{
    return swt_moe_block_chosen(md->layers[layer].moe);
}

int swt_model_num_shadowed(const swt_model_t *md, int layer)
{
    return md->layers[layer].n_shadowed;
}

/* ---- shadowing ----
 * An owned expert's tensors are strided over the layer's local experts;
 * a replica keeps them back to back. These copy one expert between the
 * two layouts, for any of the parallel buffers (parameters, gradients,
 * Adam's m and v share the offsets of md->expert). */
static void owned_pieces(const swt_model_t *md, const layer_t *ly, int local,
                         size_t off[4], size_t len[4])
{
    size_t H = (size_t)md->cfg.hidden, F = (size_t)md->cfg.ffn;
    size_t e = (size_t)local;
    off[0] = (size_t)(ly->p.w1 - md->expert) + e * H * F;
    off[1] = (size_t)(ly->p.b1 - md->expert) + e * F;
    off[2] = (size_t)(ly->p.w2 - md->expert) + e * F * H;
    off[3] = (size_t)(ly->p.b2 - md->expert) + e * H;
    len[0] = H * F;
    len[1] = F;
    len[2] = F * H;
    len[3] = H;
}

static void owned_pack(const swt_model_t *md, const layer_t *ly, int local,
                       const float *base, float *dst)
{
    size_t off[4], len[4];
    owned_pieces(md, ly, local, off, len);
    for (int i = 0; i < 4; i++) {
        memcpy(dst, base + off[i], len[i] * sizeof(float));
        dst += len[i];
    }
}

static void owned_unpack(const swt_model_t *md, const layer_t *ly, int local,
                         const float *src, float *base)
{
    size_t off[4], len[4];
    owned_pieces(md, ly, local, off, len);
    for (int i = 0; i < 4; i++) {
        memcpy(base + off[i], src, len[i] * sizeof(float));
        src += len[i];
    }
}

/* The rank that owns logical expert g now, and its index there. */
static int owner_of(const swt_model_t *md, const layer_t *ly, int g)
{
    return ly->slot_of[g] / md->lo.nl;
}

static int local_of(const swt_model_t *md, const layer_t *ly, int g)
{
    return ly->slot_of[g] % md->lo.nl;
}

/* The block's view of shadowed expert g: the owner's slot here, or the
 * replica. */
static swt_shadow_expert_t shadow_view(const swt_model_t *md,
                                       const layer_t *ly, int g)
{
    size_t H = (size_t)md->cfg.hidden, F = (size_t)md->cfg.ffn;
    swt_shadow_expert_t v = {.expert = g};
    if (owner_of(md, ly, g) == md->lo.rank) {
        size_t e = (size_t)local_of(md, ly, g);
        v.w1 = ly->p.w1 + e * H * F;
        v.b1 = ly->p.b1 + e * F;
        v.w2 = ly->p.w2 + e * F * H;
        v.b2 = ly->p.b2 + e * H;
        v.dw1 = ly->d.w1 + e * H * F;
        v.db1 = ly->d.b1 + e * F;
        v.dw2 = ly->d.w2 + e * F * H;
        v.db2 = ly->d.b2 + e * H;
    } else {
        float *p = ly->replica[g], *d = p + 3 * md->lo.expert_elems;
        v.w1 = p;
        v.b1 = p + H * F;
        v.w2 = p + H * F + F;
        v.b2 = p + 2 * H * F + F;
        v.dw1 = d;
        v.db1 = d + H * F;
        v.dw2 = d + H * F + F;
        v.db2 = d + 2 * H * F + F;
    }
    return v;
}

static swy_status_t shadow_fail(const char *what, int layer, int g,
                                swy_status_t st, swy_comm_t comm)
{
    fprintf(stderr, "swy-train: layer %d, expert %d: %s: %s: %s\n", layer,
            g, what, swy_status_string(st), swy_last_error(comm));
    return st;
}

swy_status_t swt_model_set_shadow(swt_model_t *md, int layer,
                                  const int *shadow)
{
    layer_t *ly = &md->layers[layer];
    size_t P = md->lo.expert_elems;
    int E = md->lo.E, n_new = 0, n = 0;
    for (int g = 0; g < E; g++) {
        n += shadow[g] != 0;
        n_new += shadow[g] && !ly->shadowed[g];
    }
    /* Newly shadowed experts: the owner broadcasts parameters, m and v
     * (one buffer of 3P each) at low priority; the replicas keep them. */
    float **buf = calloc((size_t)(n_new ? n_new : 1), sizeof(float *));
    swy_request_t *req = calloc((size_t)(n_new ? n_new : 1),
                                sizeof(swy_request_t));
    float *grad = n > 0 ? malloc((size_t)n * P * sizeof(float)) : NULL;
    swt_shadow_expert_t *view = calloc((size_t)(n ? n : 1), sizeof(*view));
    swy_status_t st = SWY_OK;
    int posted = 0;
    if (buf == NULL || req == NULL || view == NULL || (n > 0 && !grad)) {
        st = SWY_ERR_NO_MEMORY;
        goto out;
    }
    /* A failure stops the posts; what is posted is still waited for
     * before its buffer goes. */
    for (int g = 0; g < E && st == SWY_OK; g++) {
        if (!shadow[g] || ly->shadowed[g])
            continue;
        int owner = owner_of(md, ly, g), i = posted;
        buf[i] = calloc(4 * P, sizeof(float)); /* a replica's layout */
        if (buf[i] == NULL) {
            st = SWY_ERR_NO_MEMORY;
            break;
        }
        if (owner == md->lo.rank) {
            owned_pack(md, ly, local_of(md, ly, g), md->expert, buf[i]);
            owned_pack(md, ly, local_of(md, ly, g), md->m_expert, buf[i] + P);
            owned_pack(md, ly, local_of(md, ly, g), md->v_expert, buf[i] + 2 * P);
        }
        char name[48];
        snprintf(name, sizeof(name), "shadow L%d e%d", layer, g);
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.priority = SWY_PRIO_LOW;
        attr.order = layer;
        attr.name = name;
        st = swy_broadcast(buf[i], 3 * P, SWY_FLOAT32, owner, md->comm,
                           &attr, &req[i]);
        if (st != SWY_OK)
            shadow_fail("broadcast of the parameters", layer, g, st,
                        md->comm);
        else
            posted++;
    }
    for (int i = 0; i < posted; i++) {
        swy_status_t w = swy_wait(req[i]);
        swy_request_free(req[i]);
        if (w != SWY_OK && st == SWY_OK)
            st = shadow_fail("broadcast of the parameters", layer, -1, w,
                             md->comm);
    }
    if (st != SWY_OK)
        goto out;
    /* Commit: replicas in, stale ones out (an expert no longer shadowed
     * lives on in its owner's copy, identical to the replicas). */
    for (int g = 0, i = 0; g < E; g++) {
        if (shadow[g] && !ly->shadowed[g]) {
            if (owner_of(md, ly, g) != md->lo.rank) {
                ly->replica[g] = buf[i];
                buf[i] = NULL;
            }
            i++;
        } else if (!shadow[g] && ly->replica[g] != NULL) {
            free(ly->replica[g]);
            ly->replica[g] = NULL;
        }
        ly->shadowed[g] = shadow[g] != 0;
    }
    for (int g = 0, i = 0; g < E; g++)
        if (ly->shadowed[g])
            view[i++] = shadow_view(md, ly, g);
    if (swt_moe_block_set_shadow(ly->moe, n, view) != 0) {
        st = SWY_ERR_NO_MEMORY;
        goto out;
    }
    free(ly->sh_grad);
    ly->sh_grad = grad;
    grad = NULL;
    ly->n_shadowed = n;
    st = SWY_OK;
out:
    if (st == SWY_ERR_NO_MEMORY)
        fprintf(stderr, "swy-train: layer %d: out of memory for %d shadowed "
                "experts\n", layer, n);
    for (int i = 0; buf != NULL && i < n_new; i++)
        free(buf[i]);
    free(view);
    free(grad);
    free(req);
    free(buf);
    return st;
}

/* ---- packing ----
 * Whether slot_of is a permutation of 0..E-1; a bad plan must never lose
 * or duplicate an expert. seen is scratch [E]. */
static int is_permutation(const int *slot_of, int E, char *seen)
{
    memset(seen, 0, (size_t)E);
    for (int g = 0; g < E; g++) {
        if (slot_of[g] < 0 || slot_of[g] >= E || seen[slot_of[g]])
            return 0;
        seen[slot_of[g]] = 1;
    }
    return 1;
}

swy_status_t swt_model_set_slots(swt_model_t *md, int layer,
                                 const int *slot_new, int *moved_p)
{
    layer_t *ly = &md->layers[layer];
    int E = md->lo.E, W = md->lo.W, nl = md->lo.nl, me = md->lo.rank;
    size_t P = md->lo.expert_elems, X = 3 * P; /* parameters, m, v */
    char *seen = malloc((size_t)E);
    size_t *cnt = calloc(4 * (size_t)W, sizeof(size_t));
    float *sendbuf = NULL, *recvbuf = NULL;
    swy_status_t st = SWY_OK;
    if (seen == NULL || cnt == NULL) {
        st = SWY_ERR_NO_MEMORY;
        goto out;
    }
    if (!is_permutation(slot_new, E, seen)) {
        fprintf(stderr, "swy-train: layer %d: packing plan is not a "
                "permutation of the %d slots; not applied\n", layer, E);
        st = SWY_ERR_INTERNAL;
        goto out;
    }
    size_t *scount = cnt, *sdispl = cnt + W, *rcount = cnt + 2 * W,
           *rdispl = cnt + 3 * W;
    int moved = 0;
    for (int g = 0; g < E; g++) {
        if (slot_new[g] == ly->slot_of[g])
            continue;
        if (ly->shadowed[g]) { /* its replicas point at this slot */
            fprintf(stderr, "swy-train: layer %d: packing would move "
                    "shadowed expert %d; not applied\n", layer, g);
            st = SWY_ERR_INTERNAL;
            goto out;
        }
        int from = ly->slot_of[g] / nl, to = slot_new[g] / nl;
        moved++;
        if (from == me)
            scount[to] += X;
        if (to == me)
            rcount[from] += X;
    }
    if (moved == 0) {
        *moved_p = 0;
        goto out;
    }
    size_t sn = 0, rn = 0;
    for (int r = 0; r < W; r++) {
        sdispl[r] = sn;
        rdispl[r] = rn;
        sn += scount[r];
        rn += rcount[r];
    }
    /* Every moving expert leaves its old slot into a staging copy before
     * any slot is overwritten: a slot may be both source and target. The
     * order inside each (from, to) pair is by logical id on both sides. */
    sendbuf = malloc((sn ? sn : 1) * sizeof(float));
    recvbuf = malloc((rn ? rn : 1) * sizeof(float));
    if (sendbuf == NULL || recvbuf == NULL) {
        st = SWY_ERR_NO_MEMORY;
        goto out;
    }
    const float *bases[3] = {md->expert, md->m_expert, md->v_expert};
    for (int g = 0; g < E; g++) {
        int to = slot_new[g] / nl;
        if (slot_new[g] == ly->slot_of[g] || owner_of(md, ly, g) != me)
            continue;
        for (int i = 0; i < 3; i++)
            owned_pack(md, ly, local_of(md, ly, g), bases[i],
                       sendbuf + sdispl[to] + (size_t)i * P);
        sdispl[to] += X;
    }
    for (int r = 0; r < W; r++) /* back to the starts */
        sdispl[r] -= scount[r];
    char name[32];
    snprintf(name, sizeof(name), "pack L%d", layer);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_LOW;
    attr.order = layer;
    attr.name = name;
    swy_request_t req = NULL;
    st = swy_alltoallv(sendbuf, scount, sdispl, recvbuf, rcount, rdispl,
                       SWY_FLOAT32, md->comm, &attr, &req);
    if (st == SWY_OK) {
        st = swy_wait(req);
        swy_request_free(req);
    }
    if (st != SWY_OK) {
        shadow_fail("alltoallv of the packed experts", layer, -1, st,
                    md->comm);
        goto out;
    }
    float *dst_bases[3] = {md->expert, md->m_expert, md->v_expert};
    for (int g = 0; g < E; g++) {
        int from = ly->slot_of[g] / nl;
        if (slot_new[g] == ly->slot_of[g] || slot_new[g] / nl != me)
            continue;
        for (int i = 0; i < 3; i++)
            owned_unpack(md, ly, slot_new[g] % nl,
                         recvbuf + rdispl[from] + (size_t)i * P,
                         dst_bases[i]);
        rdispl[from] += X;
    }
    memcpy(ly->slot_of, slot_new, (size_t)E * sizeof(int));
    /* Debug check: the installed map is still a permutation. */
    if (!is_permutation(ly->slot_of, E, seen)) {
        fprintf(stderr, "swy-train: layer %d: internal error: slots are "
                "no longer a permutation\n", layer);
        abort();
    }
    *moved_p = moved;
out:
    if (st == SWY_ERR_NO_MEMORY)
        fprintf(stderr, "swy-train: layer %d: out of memory for packing\n",
                layer);
    free(recvbuf);
    free(sendbuf);
    free(cnt);
    free(seen);
    return st;
}

const int *swt_model_slot_of(const swt_model_t *md, int layer)
{
    return md->layers[layer].slot_of;
}

uint64_t swt_model_shadow_hash(const swt_model_t *md, int layer, int g)
{
    const layer_t *ly = &md->layers[layer];
    size_t P = md->lo.expert_elems;
    uint64_t h = SWT_LAYOUT_HASH_INIT;
    if (!ly->shadowed[g])
        return 0;
    if (owner_of(md, ly, g) != md->lo.rank)
        return swt_layout_hash_floats(h, ly->replica[g], 3 * P);
    float *tmp = malloc(P * sizeof(float));
    if (tmp == NULL)
        return 0;
    const float *bases[3] = {md->expert, md->m_expert, md->v_expert};
    for (int i = 0; i < 3; i++) {
        owned_pack(md, ly, local_of(md, ly, g), bases[i], tmp);
        h = swt_layout_hash_floats(h, tmp, P);
    }
    free(tmp);
    return h;
}

/* After layer l's backward: sum the shadowed experts' gradients over
 * ranks, at low priority, while backward goes on. */
static swy_status_t shadow_grad_post(swt_model_t *md, int layer)
{
    layer_t *ly = &md->layers[layer];
    size_t P = md->lo.expert_elems;
    float *dst = ly->sh_grad;
    for (int g = 0; g < md->lo.E; g++) {
        if (!ly->shadowed[g])
            continue;
        if (owner_of(md, ly, g) == md->lo.rank)
            owned_pack(md, ly, local_of(md, ly, g), md->dexpert, dst);
        else
            memcpy(dst, ly->replica[g] + 3 * P, P * sizeof(float));
        dst += P;
    }
    char name[32];
    snprintf(name, sizeof(name), "shadow L%d grad", layer);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_LOW;
    attr.order = layer;
    attr.name = name;
    swy_status_t st = swy_allreduce(ly->sh_grad, ly->sh_grad,
                                    (size_t)ly->n_shadowed * P, SWY_FLOAT32,
                                    SWY_SUM, md->comm, &attr, &ly->sh_req);
    if (st != SWY_OK)
        return shadow_fail("allreduce of the gradients", layer, -1, st,
                           md->comm);
    return SWY_OK;
}

/* Before Adam: wait for the sum and give it to every copy, so the owner
 * and every replica take the same step from the same state. */
/* --ep: layer's expert gradients are final once its MoE backward ran;
 * the replicas of these experts (the same expert-parallel rank in the
 * other groups) sum them at low priority while backward goes on, as a
 * framework's expert-data-parallel allreduce does. */
static swy_status_t expert_grad_post(swt_model_t *md, int layer)
{
    layer_t *ly = &md->layers[layer];
    size_t n = (size_t)md->lo.nl * md->lo.expert_elems;
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = SWY_PRIO_LOW;
    attr.order = layer;
    attr.name = "expert grads";
    swy_status_t st = swy_allreduce(ly->d.w1, ly->d.w1, n, SWY_FLOAT32,
                                    SWY_SUM, md->expert_dp, &attr,
                                    &md->ex_req[layer]);
    if (st != SWY_OK)
        fprintf(stderr, "swy-train: layer %d: expert gradient allreduce: "
                "%s: %s\n", layer, swy_status_string(st),
                swy_last_error(md->expert_dp));
    return st;
}

static swy_status_t expert_grad_finish(swt_model_t *md, swt_timing_t *tm)
{
    swy_status_t first = SWY_OK;
    double t0 = swt_now();
    for (int l = 0; l < md->cfg.layers; l++) {
        if (md->ex_req[l] == NULL)
            continue;
        swy_status_t st = swy_wait(md->ex_req[l]);
        swy_request_free(md->ex_req[l]);
        md->ex_req[l] = NULL;
        if (st != SWY_OK && first == SWY_OK) {
            fprintf(stderr, "swy-train: layer %d: expert gradient allreduce: "
                    "%s: %s\n", l, swy_status_string(st),
                    swy_last_error(md->expert_dp));
            first = st;
        }
    }
    swt_timing_add(tm, SWT_T_AR_WAIT, swt_now() - t0);
    return first;
}

static swy_status_t shadow_grad_finish(swt_model_t *md, int layer,
                                       swt_timing_t *tm)
{
    layer_t *ly = &md->layers[layer];
    size_t P = md->lo.expert_elems;
    double t0 = swt_now();
    swy_status_t st = swy_wait(ly->sh_req);
    swy_request_free(ly->sh_req);
    ly->sh_req = NULL;
    swt_timing_add(tm, SWT_T_AR_WAIT, swt_now() - t0);
    if (st != SWY_OK)
        return shadow_fail("allreduce of the gradients", layer, -1, st,
                           md->comm);
    const float *src = ly->sh_grad;
    for (int g = 0; g < md->lo.E; g++) {
        if (!ly->shadowed[g])
            continue;
        if (owner_of(md, ly, g) == md->lo.rank)
            owned_unpack(md, ly, local_of(md, ly, g), src, md->dexpert);
        else
            memcpy(ly->replica[g] + 3 * P, src, P * sizeof(float));
        src += P;
    }
    return SWY_OK;
}

uint64_t swt_model_expert_hash(const swt_model_t *md)
{
    uint64_t h = swt_layout_hash_floats(SWT_LAYOUT_HASH_INIT, md->expert,
                                        md->lo.n_expert);
    h = swt_layout_hash_floats(h, md->m_expert, md->lo.n_expert);
    return swt_layout_hash_floats(h, md->v_expert, md->lo.n_expert);
}

uint64_t swt_model_dense_hash(const swt_model_t *md)
{
    /* Not the rank-local gates of --gate ta: only what is replicated. */
    return swt_layout_dense_hash(&md->lo, md->dense,
                                 md->cfg.gate == SWT_GATE_TA);
}

#define STEP_CHECK(call)                                                     \
    do {                                                                     \
        swy_status_t st_ = (call);                                           \
        if (st_ != SWY_OK)                                                   \
            return st_;                                                      \
    } while (0)

static void dense_forward(swt_model_t *md, layer_t *ly)
{
    int S = md->cfg.tokens, H = md->cfg.hidden, F = md->cfg.dense_ffn;
    swy_k_linear_fwd(ly->x, ly->p.wa, ly->p.ba, S, H, F, ly->a_pre);
    swy_k_gelu_fwd(ly->a_pre, (size_t)S * F, ly->a_act);
    swy_k_linear_fwd(ly->a_act, ly->p.wb, ly->p.bb, S, F, H, ly->m);
    swy_k_add(ly->x, (size_t)S * H, ly->m);
}

/* The summed gradients of dense[begin, end) are in: the rank-local gates
 * of --gate ta take this rank's own gradient back, then Adam. Elementwise,
 * so applying it bucket by bucket is the same arithmetic as one call. */
static void dense_apply(void *arg, size_t begin, size_t end,
                        swt_timing_t *tm)
{
    swt_model_t *md = arg;
    const swt_model_config_t *c = &md->cfg;
    double t0 = swt_now();
    /* --gate ta: each rank's gate is its own. A replicated gate cannot
     * route rank-dependently: the ranks' topology weights differ (each
     * favours its own node) and their summed gradients cancel. So the
     * gate learns from this rank's gradient alone, scaled by W like the
     * summed ones (the local loss carries 1/W). Buckets hold whole
     * tensors, so a gate lies wholly inside or outside [begin, end). */
    size_t n_gate = (size_t)c->hidden * md->lo.E;
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        size_t g = (size_t)(ly->p.wg - md->dense);
        if (ly->dwg_local == NULL || g < begin || g >= end)
            continue;
        for (size_t i = 0; i < n_gate; i++)
            ly->d.wg[i] = (float)swy_comm_size(md->world) * ly->dwg_local[i];
    }
    swy_k_adam_params_t hp = {(float)c->lr, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
    swy_k_adam_step(md->dense + begin, md->ddense + begin,
                    md->m_dense + begin, md->v_dense + begin, end - begin,
                    &hp, md->applied_step);
    if (c->overlap) /* the next backward adds into it */
        memset(md->ddense + begin, 0, (end - begin) * sizeof(float));
    swt_timing_compute_end(tm, t0);
}

/* --overlap: the parameters [begin, end) are about to be read. */
static swy_status_t dense_need(swt_model_t *md, const float *begin,
                               const float *end, swt_timing_t *tm)
{
    if (!md->cfg.overlap)
        return SWY_OK;
    return swt_ddp_finish(md->ddp, (size_t)(begin - md->dense),
                          (size_t)(end - md->dense), dense_apply, md, tm);
}

swy_status_t swt_model_flush(swt_model_t *md, swt_timing_t *tm)
{
    return dense_need(md, md->dense, md->dense + md->lo.n_dense, tm);
}

swy_status_t swt_model_step(swt_model_t *md, const int *ids,
                            const int *labels, long step, swt_timing_t *tm,
                            swt_step_result_t *result_p)
{
    const swt_model_config_t *c = &md->cfg;
    /* F: the dense block's inner size (the experts' is their own). */
    int S = c->tokens, H = c->hidden, F = c->dense_ffn, V = c->vocab;
    size_t SH = (size_t)S * H, SF = (size_t)S * F;
    /* --overlap: the last step's buckets are zeroed as they are applied
     * in this forward. */
    if (!swt_ddp_pending(md->ddp))
        memset(md->ddense, 0, md->lo.n_dense * sizeof(float));
    memset(md->dexpert, 0, md->lo.n_expert * sizeof(float));
    for (int l = 0; l < c->layers; l++)
        for (int g = 0; g < md->lo.E; g++)
            if (md->layers[l].replica[g] != NULL)
                memset(md->layers[l].replica[g] + 3 * md->lo.expert_elems, 0,
                       md->lo.expert_elems * sizeof(float));

    /* ---- forward ---- */
    /* Each block writes its output straight into the next block's input
     * (kept for the backward). */
    STEP_CHECK(dense_need(md, md->p.emb, md->p.emb + (size_t)V * H, tm));
    double t0 = swt_now();
    swy_k_embed_fwd(md->p.emb, ids, S, H, md->layers[0].x);
    swt_timing_compute_end(tm, t0);
    double aux = 0;
    int dropped = 0;
    for (int l = 0; l < c->layers; l++) {
        layer_t *ly = &md->layers[l];
        /* This layer's gate, W_b, b_b, W_a, b_a (layout.h). */
        STEP_CHECK(dense_need(md, ly->p.wg,
                              md->dense + md->lo.layer[l].ready_wa, tm));
        t0 = swt_now();
        dense_forward(md, ly);
        swt_timing_compute_end(tm, t0);
        float *out = l + 1 < c->layers ? md->layers[l + 1].x : md->x_final;
        STEP_CHECK(swt_moe_block_forward(ly->moe, ly->m, out, tm));
        aux += swt_moe_block_aux(ly->moe);
        dropped += swt_moe_block_dropped(ly->moe);
    }
    STEP_CHECK(dense_need(md, md->p.out_w, md->dense + md->lo.ready_out, tm));
    /* Every dense tensor was read: nothing of the last step is left. */
    STEP_CHECK(swt_model_flush(md, tm));
    t0 = swt_now();
    swy_k_linear_fwd(md->x_final, md->p.out_w, md->p.out_b, S, H, V,
                     md->logits);
    double xent = swy_k_xent_fwd(md->logits, labels, S, V, NULL);

    /* ---- backward: (1/W) x the local mean, see model.h ---- */
    swy_k_xent_bwd(md->logits, labels, S, V,
                   1.0f / (float)swy_comm_size(md->world), md->logits);
    swy_k_linear_bwd(md->x_final, md->p.out_w, md->logits, S, H, V, md->dx,
                     md->d.out_w, md->d.out_b);
    swt_timing_compute_end(tm, t0);
    STEP_CHECK(swt_ddp_ready(md->ddp, md->lo.ready_out, tm));
    for (int l = c->layers - 1; l >= 0; l--) {
        layer_t *ly = &md->layers[l];
        const swt_layer_layout_t *at = &md->lo.layer[l];
        STEP_CHECK(swt_moe_block_backward(ly->moe, md->dx, md->dm, tm));
        if (md->expert_dp != NULL)
            STEP_CHECK(expert_grad_post(md, l));
        if (ly->n_shadowed > 0)
            STEP_CHECK(shadow_grad_post(md, l));
        if (ly->dwg_local != NULL) /* before DDP sums it over ranks */
            memcpy(ly->dwg_local, ly->d.wg,
                   (size_t)H * md->lo.E * sizeof(float));
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_gate, tm));
        t0 = swt_now();
        swy_k_linear_bwd(ly->a_act, ly->p.wb, md->dm, S, F, H, md->dact,
                         ly->d.wb, ly->d.bb);
        swt_timing_compute_end(tm, t0);
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_wb, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
        t0 = swt_now();
        swy_k_gelu_bwd(ly->a_pre, md->dact, SF, md->dact);
        swy_k_linear_bwd(ly->x, ly->p.wa, md->dact, S, H, F, md->dtmp,
                         ly->d.wa, ly->d.ba);
        /* dx of the block input: residual plus the branch. */
        memcpy(md->dx, md->dm, SH * sizeof(float));
        swy_k_add(md->dtmp, SH, md->dx);
        swt_timing_compute_end(tm, t0);
        STEP_CHECK(swt_ddp_ready(md->ddp, at->ready_wa, tm));
        STEP_CHECK(swt_ddp_poll(md->ddp));
    }
    t0 = swt_now();
    swy_k_embed_bwd(md->dx, ids, S, H, md->d.emb);
    swt_timing_compute_end(tm, t0);
    md->applied_step = step;
    if (c->overlap)
        STEP_CHECK(swt_ddp_post_rest(md->ddp, tm));
    else
        STEP_CHECK(swt_ddp_wait(md->ddp, tm));
    for (int l = 0; l < c->layers; l++)
        if (md->layers[l].n_shadowed > 0)
            STEP_CHECK(shadow_grad_finish(md, l, tm));
    if (md->expert_dp != NULL)
        STEP_CHECK(expert_grad_finish(md, tm));

    /* ---- Adam: dense replicas see the same summed gradients and stay
     * identical (now, or in the next forward with --overlap); experts are
     * updated where they live. ---- */
    if (!c->overlap) {
        dense_apply(md, 0, md->lo.n_dense, tm);
    }
    t0 = swt_now();
    swy_k_adam_params_t hp = {(float)c->lr, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
    swy_k_adam_step(md->expert, md->dexpert, md->m_expert, md->v_expert,
                    md->lo.n_expert, &hp, step);
    size_t P = md->lo.expert_elems;
    for (int l = 0; l < c->layers; l++)
        for (int g = 0; g < md->lo.E; g++) {
            float *r = md->layers[l].replica[g];
            if (r != NULL)
                swy_k_adam_step(r, r + 3 * P, r + P, r + 2 * P, P, &hp,
                                step);
        }
    swt_timing_compute_end(tm, t0);

    result_p->xent = xent;
    result_p->aux = c->layers > 0 ? aux / c->layers : 0.0;
    result_p->dropped = dropped;
    return SWY_OK;
}
