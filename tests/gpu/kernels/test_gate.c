/* CUDA gate kernels against the CPU ones on the same seeded inputs: gate
 * logits (forward, backward), softmax (forward, backward), top-k and its
 * backward, capacity dropping in both orders (exact), the auxiliary loss
 * and its backward.  Top-k runs on logits from a coarse grid, so that two
 * probabilities of a row are either exactly equal (a tie, which both sides
 * must break towards the lower expert) or far apart: a one-ulp difference
 * between the device's expf and the host's cannot reorder them, and the
 * chosen experts must match exactly.  Tolerances in kctest.h. */
#include "kctest.h"

static void check_gate(int S, int H, int E, int k, int renormalize)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "S=%d H=%d E=%d k=%d renorm=%d", S, H, E, k,
             renormalize);
    size_t nx = (size_t)S * H, nw = (size_t)H * E, nl = (size_t)S * E;
    size_t ns = (size_t)S * k;

    /* Logits: x wg, and its backward. */
    float *x = kct_rand(nx, -1, 1), *wg = kct_rand(nw, -0.5, 0.5);
    float *dl = kct_rand(nl, -1, 1), *dwg = kct_rand(nw, -0.1, 0.1);
    float *logits = kct_host(nl * 4), *dx = kct_host(nx * 4);
    float *x_d = kct_up(x, nx * 4), *wg_d = kct_up(wg, nw * 4);
    float *dl_d = kct_up(dl, nl * 4), *dwg_d = kct_up(dwg, nw * 4);
    float *logits_d = kct_dev(nl * 4), *dx_d = kct_dev(nx * 4);
    swy_k_gate_logits_fwd(x, wg, S, H, E, logits);
    swy_k_gate_logits_bwd(x, wg, dl, S, H, E, dx, dwg);
    KCT_OK(swy_kc_gate_logits_fwd(kct_ctx, x_d, wg_d, S, H, E, logits_d));
    KCT_OK(swy_kc_gate_logits_bwd(kct_ctx, x_d, wg_d, dl_d, S, H, E, dx_d,
                                  dwg_d));
    kct_cmp_dev("swy_kc_gate_logits_fwd", shape, "logits", logits_d, logits,
                nl, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_gate_logits_bwd", shape, "dx", dx_d, dx, nx,
                KCT_TOL_F32);
    kct_cmp_dev("swy_kc_gate_logits_bwd", shape, "dwg", dwg_d, dwg, nw,
                KCT_TOL_F32);

    /* Softmax on the real logits, in place on the device (aliasing). */
    float *probs = kct_host(nl * 4), *dlog = kct_host(nl * 4);
    swy_k_softmax_fwd(logits, S, E, probs);
    KCT_OK(swy_kc_softmax_fwd(kct_ctx, logits_d, S, E, logits_d));
    kct_cmp_dev("swy_kc_softmax_fwd", shape, "probs", logits_d, probs, nl,
                KCT_TOL_F32);
    float *p_d = kct_up(probs, nl * 4);
    swy_k_softmax_bwd(probs, dl, S, E, dlog);
    KCT_OK(swy_kc_softmax_bwd(kct_ctx, p_d, dl_d, S, E, dl_d));
    kct_cmp_dev("swy_kc_softmax_bwd", shape, "dlogits", dl_d, dlog, nl,
                KCT_TOL_F32);

    /* Top-k on grid logits (see the top of the file). */
    float *gl = kct_host(nl * 4);
    for (size_t i = 0; i < nl; i++)
        gl[i] = 0.25f * (float)kct_int(12);
    int *idx = kct_host(ns * sizeof(int));
    float *tw = kct_host(ns * 4);
    swy_k_gate_topk(gl, S, E, k, renormalize, idx, tw, probs);
    float *gl_d = kct_up(gl, nl * 4), *tw_d = kct_dev(ns * 4);
    int *idx_d = kct_dev(ns * sizeof(int));
    float *probs_d = kct_dev(nl * 4);
    KCT_OK(swy_kc_gate_topk(kct_ctx, gl_d, S, E, k, renormalize, idx_d, tw_d,
                            probs_d));
    kct_cmp_dev_int("swy_kc_gate_topk", shape, "topk_idx", idx_d, idx, ns);
    kct_cmp_dev("swy_kc_gate_topk", shape, "topk_w", tw_d, tw, ns,
                KCT_TOL_F32);
    kct_cmp_dev("swy_kc_gate_topk", shape, "probs", probs_d, probs, nl,
                KCT_TOL_F32);

    /* The backward and the aux loss read the CPU's probs on both sides, so
     * both recompute the same choice. */
    kct_set(probs_d, probs, nl * 4);
    float *dtw = kct_rand(ns, -1, 1);
    for (size_t s = 0; s < ns; s += 5)
        dtw[s] = 0.0f; /* as combine_bwd writes for dropped slots */
    float *dtw_d = kct_up(dtw, ns * 4), *dp_d = kct_dev(nl * 4);
    float *dp = kct_host(nl * 4);
    swy_k_gate_topk_bwd(probs, dtw, S, E, k, renormalize, dp);
    KCT_OK(swy_kc_gate_topk_bwd(kct_ctx, probs_d, dtw_d, S, E, k, renormalize,
                                dp_d));
    kct_cmp_dev("swy_kc_gate_topk_bwd", shape, "dprobs", dp_d, dp, nl,
                KCT_TOL_F32);

    /* Backward through given choices (random valid experts, repeats
     * allowed: both sides add them up). */
    int *cho = kct_host(ns * sizeof(int));
    for (size_t s = 0; s < ns; s++)
        cho[s] = kct_int(E);
    int *cho_d = kct_up(cho, ns * sizeof(int));
    float *dpi = kct_host(nl * 4), *dpi_d = kct_dev(nl * 4);
    swy_k_gate_topk_bwd_idx(probs, cho, dtw, S, E, k, renormalize, dpi);
    KCT_OK(swy_kc_gate_topk_bwd_idx(kct_ctx, probs_d, cho_d, dtw_d, S, E, k,
                                    renormalize, dpi_d));
    kct_cmp_dev("swy_kc_gate_topk_bwd_idx", shape, "dprobs", dpi_d, dpi, nl,
                KCT_TOL_F32);
    kct_dfree(cho_d);
    kct_dfree(dpi_d);
    free(cho);
    free(dpi);

    for (int f_slots = 1; f_slots <= k; f_slots += (k > 1 ? k - 1 : 1)) {
        char sh2[128];
        snprintf(sh2, sizeof(sh2), "%s f_slots=%d", shape, f_slots);
        float *f = kct_host((size_t)E * 4), *f_d = kct_dev((size_t)E * 4);
        float *laux_d = kct_dev(4);
        float laux = swy_k_gate_aux_loss(probs, S, E, f_slots, f);
        KCT_OK(swy_kc_gate_aux_loss(kct_ctx, probs_d, S, E, f_slots, f_d,
                                    laux_d));
        kct_cmp_dev("swy_kc_gate_aux_loss", sh2, "f", f_d, f, (size_t)E,
                    KCT_TOL_F32);
        kct_cmp_dev("swy_kc_gate_aux_loss", sh2, "l_aux", laux_d, &laux, 1,
                    KCT_TOL_F32);
        /* Accumulates onto the top-k backward's output. */
        swy_k_gate_aux_loss_bwd(f, S, E, 0.01f, dp);
        KCT_OK(swy_kc_gate_aux_loss_bwd(kct_ctx, f_d, S, E, 0.01f, dp_d));
        kct_cmp_dev("swy_kc_gate_aux_loss_bwd", sh2, "dprobs", dp_d, dp, nl,
                    KCT_TOL_F32);
        kct_dfree(f_d);
        kct_dfree(laux_d);
        free(f);
    }

    /* Capacity dropping, from the CPU's choice with some slots already
     * dropped, for several capacities and both orders. */
    int caps[] = {swy_k_gate_capacity(1.0, S, k, E),
                  swy_k_gate_capacity(0.5, S, k, E), 0, -1, S * k};
    int *load = kct_host((size_t)E * sizeof(int));
    int *load_d = kct_dev((size_t)E * sizeof(int)), *dropped_d = kct_dev(4);
    for (size_t ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++)
        for (int order = 0; order < 2; order++) {
            char sh2[128];
            snprintf(sh2, sizeof(sh2), "%s cap=%d %s", shape, caps[ci],
                     order ? "choice" : "token");
            int *di = kct_host(ns * sizeof(int));
            float *dw = kct_host(ns * 4);
            memcpy(di, idx, ns * sizeof(int));
            memcpy(dw, tw, ns * 4);
            for (size_t s = 3; s < ns; s += 7) {
                di[s] = -1;
                dw[s] = 0.0f;
            }
            kct_set(idx_d, di, ns * sizeof(int));
            kct_set(tw_d, dw, ns * 4);
            int dropped = swy_k_gate_drop(di, dw, S, k, E, caps[ci],
                                          (swy_k_drop_order_t)order, load);
            KCT_OK(swy_kc_gate_drop(kct_ctx, idx_d, tw_d, S, k, E, caps[ci],
                                    (swy_k_drop_order_t)order, load_d,
                                    dropped_d));
            kct_cmp_dev_int("swy_kc_gate_drop", sh2, "topk_idx", idx_d, di,
                            ns);
            kct_cmp_dev("swy_kc_gate_drop", sh2, "topk_w", tw_d, dw, ns, 0.0);
            kct_cmp_dev_int("swy_kc_gate_drop", sh2, "load", load_d, load,
                            (size_t)E);
            kct_cmp_dev_int("swy_kc_gate_drop", sh2, "dropped", dropped_d,
                            &dropped, 1);
            free(di);
            free(dw);
        }

    /* A capacity per expert (TA-MoE's shares: uneven), both orders. */
    int *cap_each = kct_host((size_t)E * sizeof(int));
    int *cap_each_d = kct_dev((size_t)E * sizeof(int));
    for (int e = 0; e < E; e++)
        cap_each[e] = e % 3 == 0 ? -1 : (e * 5) % (S * k / E + 2);
    kct_set(cap_each_d, cap_each, (size_t)E * sizeof(int));
    for (int order = 0; order < 2; order++) {
        char sh2[128];
        snprintf(sh2, sizeof(sh2), "%s cap per expert %s", shape,
                 order ? "choice" : "token");
        int *di = kct_host(ns * sizeof(int));
        float *dw = kct_host(ns * 4);
        memcpy(di, idx, ns * sizeof(int));
        memcpy(dw, tw, ns * 4);
        kct_set(idx_d, di, ns * sizeof(int));
        kct_set(tw_d, dw, ns * 4);
        int dropped = swy_k_gate_drop_each(di, dw, S, k, E, cap_each,
                                           (swy_k_drop_order_t)order, load);
        KCT_OK(swy_kc_gate_drop_each(kct_ctx, idx_d, tw_d, S, k, E,
                                     cap_each_d, (swy_k_drop_order_t)order,
                                     load_d, dropped_d));
        kct_cmp_dev_int("swy_kc_gate_drop_each", sh2, "topk_idx", idx_d, di,
                        ns);
        kct_cmp_dev("swy_kc_gate_drop_each", sh2, "topk_w", tw_d, dw, ns,
                    0.0);
        kct_cmp_dev_int("swy_kc_gate_drop_each", sh2, "load", load_d, load,
                        (size_t)E);
        kct_cmp_dev_int("swy_kc_gate_drop_each", sh2, "dropped", dropped_d,
                        &dropped, 1);
        free(di);
        free(dw);
    }
    free(cap_each);
    kct_dfree(cap_each_d);

    void *dev[] = {x_d, wg_d, dl_d, dwg_d, logits_d, dx_d, p_d, gl_d, tw_d,
                   idx_d, probs_d, dtw_d, dp_d, load_d, dropped_d};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    void *host[] = {x, wg, dl, dwg, logits, dx, probs, dlog, gl, idx, tw,
                    dtw, dp, load};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* Topology gate: the CPU's top-k on grid logits (many equal scores, so the
 * tie rule matters), experts spread over n_nodes, rerouted on both sides. */
static void check_topo(int S, int E, int k, int renormalize, int n_nodes,
                       int my_node, double frac)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "S=%d E=%d k=%d nodes=%d me=%d frac=%g",
             S, E, k, n_nodes, my_node, frac);
    size_t nl = (size_t)S * E, ns = (size_t)S * k;
    float *gl = kct_host(nl * 4), *probs = kct_host(nl * 4);
    for (size_t i = 0; i < nl; i++)
        gl[i] = 0.25f * (float)kct_int(8);
    int *idx = kct_host(ns * sizeof(int)), *node = kct_host((size_t)E * 4);
    float *w = kct_host(ns * 4);
    swy_k_gate_topk(gl, S, E, k, renormalize, idx, w, probs);
    for (int e = 0; e < E; e++)
        node[e] = e * n_nodes / E;
    float *probs_d = kct_up(probs, nl * 4), *w_d = kct_up(w, ns * 4);
    int *idx_d = kct_up(idx, ns * sizeof(int));
    int *node_d = kct_up(node, (size_t)E * sizeof(int));
    int *rr_d = kct_dev(sizeof(int));
    int rr = swy_k_gate_topo_reroute(probs, S, E, k, renormalize, node,
                                     my_node, frac, idx, w);
    KCT_OK(swy_kc_gate_topo_reroute(kct_ctx, probs_d, S, E, k, renormalize,
                                    node_d, my_node, frac, idx_d, w_d, rr_d));
    kct_cmp_dev_int("swy_kc_gate_topo_reroute", shape, "rerouted", rr_d, &rr,
                    1);
    kct_cmp_dev_int("swy_kc_gate_topo_reroute", shape, "topk_idx", idx_d, idx,
                    ns);
    kct_cmp_dev("swy_kc_gate_topo_reroute", shape, "topk_w", w_d, w, ns,
                KCT_TOL_F32);
    void *dev[] = {probs_d, w_d, idx_d, node_d, rr_d};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    void *host[] = {gl, probs, idx, node, w};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

int main(void)
{
    kct_init("test_kc_gate");
    kct_seed(20261127);
    check_gate(0, 16, 8, 2, 1);
    check_gate(1, 8, 4, 1, 1);
    check_gate(200, 64, 8, 2, 1);
    check_gate(333, 32, 16, 2, 0);
    check_gate(512, 48, 64, 4, 1);
    check_gate(1000, 96, 32, 1, 0);
    check_topo(0, 8, 2, 1, 2, 0, 0.1);
    check_topo(300, 16, 2, 1, 4, 0, 0.1);
    check_topo(300, 16, 2, 0, 4, 3, 0.25);
    check_topo(1000, 32, 4, 1, 2, 1, 0.3);
    check_topo(500, 8, 2, 1, 4, 0, 0.0);
    check_topo(200, 8, 4, 1, 4, 0, 0.5);  /* 2 local experts < k: no-op */
    check_topo(700, 16, 2, 1, 2, 0, -1.0); /* every cross token moves */
    check_topo(700, 16, 2, 1, 2, 0, 1.0);  /* none moves */
    return kct_finish("test_kc_gate");
}
