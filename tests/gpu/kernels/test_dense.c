/* CUDA dense kernels against the CPU ones on the same seeded inputs:
 * linear and expert FFN (forward, backward; fp32 and bf16, including
 * experts with no rows), GELU, add, embedding, cross-entropy, Adam, and the
 * bf16 conversions (bitwise).  The linear (also with GELU) and FFN checks
 * run with the GEMMs' fused epilogues and without
 * (swy_kc_ctx_set_epilogues), and count the GEMMs that fused; the FFN
 * checks run once more with grouped GEMMs (swy_kc_ctx_set_grouped), also
 * over more experts than one grouped call takes, and count the grouped
 * calls.  Tolerances in kctest.h. */
#include "kctest.h"

/* ---- linear ------------------------------------------------------------ */

static void check_linear(int N, int in, int out, int with_bias)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "N=%d in=%d out=%d%s", N, in, out,
             with_bias ? "" : " nobias");
    size_t nx = (size_t)N * in, nw = (size_t)in * out, ny = (size_t)N * out;
    float *x = kct_rand(nx, -1, 1), *w = kct_rand(nw, -0.5, 0.5);
    float *b = kct_rand(out, -0.5, 0.5), *dy = kct_rand(ny, -1, 1);
    float *dw = kct_rand(nw, -0.1, 0.1), *db = kct_rand(out, -0.1, 0.1);
    float *y = kct_host(ny * 4), *dx = kct_host(nx * 4);

    /* fp32 */
    float *dw_c = kct_dup(dw, nw), *db_c = kct_dup(db, out);
    swy_k_linear_fwd(x, w, with_bias ? b : NULL, N, in, out, y);
    swy_k_linear_bwd(x, w, dy, N, in, out, dx, dw_c, with_bias ? db_c : NULL);
    float *x_d = kct_up(x, nx * 4), *w_d = kct_up(w, nw * 4);
    float *b_d = kct_up(b, out * 4), *dy_d = kct_up(dy, ny * 4);
    float *dw_d = kct_up(dw, nw * 4), *db_d = kct_up(db, out * 4);
    float *y_d = kct_dev(ny * 4), *dx_d = kct_dev(nx * 4);
    KCT_OK(swy_kc_linear_fwd(kct_ctx, x_d, w_d, with_bias ? b_d : NULL, N,
                             in, out, y_d));
    KCT_OK(swy_kc_linear_bwd(kct_ctx, x_d, w_d, dy_d, N, in, out, dx_d, dw_d,
                             with_bias ? db_d : NULL));
    kct_cmp_dev("swy_kc_linear_fwd", shape, "y", y_d, y, ny, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_linear_bwd", shape, "dx", dx_d, dx, nx, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_linear_bwd", shape, "dw", dw_d, dw_c, nw, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_linear_bwd", shape, "db", db_d, db_c, out,
                KCT_TOL_F32);
    /* dx NULL: only the parameter gradients. */
    float *dw2_d = kct_up(dw, nw * 4);
    float *dw2_c = kct_dup(dw, nw);
    swy_k_linear_bwd(x, w, dy, N, in, out, NULL, dw2_c, NULL);
    KCT_OK(swy_kc_linear_bwd(kct_ctx, x_d, w_d, dy_d, N, in, out, NULL, dw2_d,
                             NULL));
    kct_cmp_dev("swy_kc_linear_bwd", shape, "dw(nodx)", dw2_d, dw2_c, nw,
                KCT_TOL_F32);

    /* bf16: the CPU runs on the rounded inputs. */
    kct_round_bf16(x, nx);
    kct_round_bf16(w, nw);
    kct_round_bf16(b, out);
    kct_round_bf16(dy, ny);
    memcpy(dw_c, dw, nw * 4);
    memcpy(db_c, db, out * 4);
    swy_k_linear_fwd(x, w, with_bias ? b : NULL, N, in, out, y);
    swy_k_linear_bwd(x, w, dy, N, in, out, dx, dw_c, with_bias ? db_c : NULL);
    swy_kc_bf16_t *xh = kct_up_bf16(x, nx), *wh = kct_up_bf16(w, nw);
    swy_kc_bf16_t *bh = kct_up_bf16(b, out), *dyh = kct_up_bf16(dy, ny);
    swy_kc_bf16_t *yh = kct_dev(ny * 2), *dxh = kct_dev(nx * 2);
    kct_set(dw_d, dw, nw * 4);
    kct_set(db_d, db, out * 4);
    KCT_OK(swy_kc_linear_fwd_bf16(kct_ctx, xh, wh, with_bias ? bh : NULL, N,
                                  in, out, yh));
    KCT_OK(swy_kc_linear_bwd_bf16(kct_ctx, xh, wh, dyh, N, in, out, dxh,
                                  dw_d, with_bias ? db_d : NULL));
    kct_cmp_dev_bf16("swy_kc_linear_fwd_bf16", shape, "y", yh, y, ny);
    kct_cmp_dev_bf16("swy_kc_linear_bwd_bf16", shape, "dx", dxh, dx, nx);
    kct_cmp_dev("swy_kc_linear_bwd_bf16", shape, "dw", dw_d, dw_c, nw,
                KCT_TOL_BF16);
    kct_cmp_dev("swy_kc_linear_bwd_bf16", shape, "db", db_d, db_c, out,
                KCT_TOL_BF16);

    void *dev[] = {x_d, w_d, b_d, dy_d, dw_d, db_d, y_d, dx_d, dw2_d,
                   xh, wh, bh, dyh, yh, dxh};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    void *host[] = {x, w, b, dy, dw, db, y, dx, dw_c, db_c, dw2_c};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* ---- linear with GELU -------------------------------------------------- */

/* swy_kc_linear_gelu_fwd and swy_kc_linear_dgelu_bwd against the CPU's
 * linear then GELU; bf16 on the rounded inputs. x_pre and x (the layer
 * input, gelu(x_pre) in a model) are independent random arrays here: the
 * kernel must take each from where it is told. */
static void check_linear_gelu(int N, int in, int out, int with_bias)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "N=%d in=%d out=%d%s", N, in, out,
             with_bias ? "" : " nobias");
    size_t nx = (size_t)N * in, nw = (size_t)in * out, ny = (size_t)N * out;
    float *x = kct_rand(nx, -1.5, 1.5), *xp = kct_rand(nx, -3, 3);
    float *w = kct_rand(nw, -0.5, 0.5), *b = kct_rand(out, -0.5, 0.5);
    float *dy = kct_rand(ny, -1, 1), *dw = kct_rand(nw, -0.1, 0.1);
    float *db = kct_rand(out, -0.1, 0.1);
    float *hp = kct_host(ny * 4), *ha = kct_host(ny * 4);
    float *dx = kct_host(nx * 4), *dw_c = kct_host(nw * 4);
    float *db_c = kct_host(out * 4);

    for (int bf = 0; bf < 2; bf++) {
        const char *f_fwd = bf ? "swy_kc_linear_gelu_fwd_bf16"
                               : "swy_kc_linear_gelu_fwd";
        const char *f_bwd = bf ? "swy_kc_linear_dgelu_bwd_bf16"
                               : "swy_kc_linear_dgelu_bwd";
        if (bf) {
            float *all[] = {x, xp, w, b, dy};
            size_t ns[] = {nx, nx, nw, out, ny};
            for (int i = 0; i < 5; i++)
                kct_round_bf16(all[i], ns[i]);
        }
        const float *bias = with_bias ? b : NULL;
        swy_k_linear_fwd(x, w, bias, N, in, out, hp);
        swy_k_gelu_fwd(hp, ny, ha);
        memcpy(dw_c, dw, nw * 4);
        memcpy(db_c, db, out * 4);
        swy_k_linear_bwd(x, w, dy, N, in, out, dx, dw_c,
                         with_bias ? db_c : NULL);
        swy_k_gelu_bwd(xp, dx, nx, dx);
        float *dw_d = kct_up(dw, nw * 4), *db_d = kct_up(db, out * 4);
        if (!bf) {
            float *x_d = kct_up(x, nx * 4), *xp_d = kct_up(xp, nx * 4);
            float *w_d = kct_up(w, nw * 4), *b_d = kct_up(b, out * 4);
            float *dy_d = kct_up(dy, ny * 4);
            float *hp_d = kct_dev(ny * 4), *ha_d = kct_dev(ny * 4);
            float *dx_d = kct_dev(nx * 4);
            KCT_OK(swy_kc_linear_gelu_fwd(kct_ctx, x_d, w_d,
                                          with_bias ? b_d : NULL, N, in, out,
                                          hp_d, ha_d));
            KCT_OK(swy_kc_linear_dgelu_bwd(kct_ctx, x_d, xp_d, w_d, dy_d, N,
                                           in, out, dx_d, dw_d,
                                           with_bias ? db_d : NULL));
            kct_cmp_dev(f_fwd, shape, "h_pre", hp_d, hp, ny, KCT_TOL_F32);
            kct_cmp_dev(f_fwd, shape, "h_act", ha_d, ha, ny, KCT_TOL_F32);
            kct_cmp_dev(f_bwd, shape, "dx", dx_d, dx, nx, KCT_TOL_F32);
            void *dev[] = {x_d, xp_d, w_d, b_d, dy_d, hp_d, ha_d, dx_d};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
        } else {
            swy_kc_bf16_t *x_d = kct_up_bf16(x, nx), *xp_d = kct_up_bf16(xp, nx);
            swy_kc_bf16_t *w_d = kct_up_bf16(w, nw), *b_d = kct_up_bf16(b, out);
            swy_kc_bf16_t *dy_d = kct_up_bf16(dy, ny);
            swy_kc_bf16_t *hp_d = kct_dev(ny * 2), *ha_d = kct_dev(ny * 2);
            swy_kc_bf16_t *dx_d = kct_dev(nx * 2);
            KCT_OK(swy_kc_linear_gelu_fwd_bf16(kct_ctx, x_d, w_d,
                                               with_bias ? b_d : NULL, N, in,
                                               out, hp_d, ha_d));
            KCT_OK(swy_kc_linear_dgelu_bwd_bf16(kct_ctx, x_d, xp_d, w_d,
                                                dy_d, N, in, out, dx_d, dw_d,
                                                with_bias ? db_d : NULL));
            kct_cmp_dev_bf16(f_fwd, shape, "h_pre", hp_d, hp, ny);
            kct_cmp_dev_bf16(f_fwd, shape, "h_act", ha_d, ha, ny);
            kct_cmp_dev_bf16(f_bwd, shape, "dx", dx_d, dx, nx);
            void *dev[] = {x_d, xp_d, w_d, b_d, dy_d, hp_d, ha_d, dx_d};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
        }
        double tol = bf ? KCT_TOL_BF16 : KCT_TOL_F32;
        kct_cmp_dev(f_bwd, shape, "dw", dw_d, dw_c, nw, tol);
        if (with_bias)
            kct_cmp_dev(f_bwd, shape, "db", db_d, db_c, out, tol);
        kct_dfree(dw_d);
        kct_dfree(db_d);
    }
    /* dx is required: it is the layer's whole point. */
    kct_checks++;
    if (swy_kc_linear_dgelu_bwd(kct_ctx, NULL, NULL, NULL, NULL, N, in, out,
                                NULL, NULL, NULL) == 0) {
        kct_failures++;
        fprintf(stderr, "FAIL swy_kc_linear_dgelu_bwd [%s]: dx NULL "
                "accepted\n", shape);
    }
    void *host[] = {x, xp, w, b, dy, dw, db, hp, ha, dx, dw_c, db_c};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* ---- expert FFN -------------------------------------------------------- */

static void check_ffn(int n_experts, const int *rows, int H, int F)
{
    char shape[96];
    int N = 0, len = snprintf(shape, sizeof(shape), "H=%d F=%d rows=", H, F);
    for (int e = 0; e < n_experts; e++)
        N += rows[e];
    for (int e = 0; e < n_experts && e < 8; e++)
        len += snprintf(shape + len, sizeof(shape) - (size_t)len, "%s%d",
                        e ? "," : "", rows[e]);
    if (n_experts > 8)
        snprintf(shape + len, sizeof(shape) - (size_t)len,
                 ",... (%d experts, %d rows)", n_experts, N);
    size_t nx = (size_t)N * H, nh = (size_t)N * F;
    size_t nw = (size_t)n_experts * H * F, nb1 = (size_t)n_experts * F;
    size_t nb2 = (size_t)n_experts * H;
    float *x = kct_rand(nx, -1.5, 1.5), *dy = kct_rand(nx, -1, 1);
    float *w1 = kct_rand(nw, -0.3, 0.3), *b1 = kct_rand(nb1, -0.3, 0.3);
    float *w2 = kct_rand(nw, -0.3, 0.3), *b2 = kct_rand(nb2, -0.3, 0.3);
    float *dw1 = kct_rand(nw, -0.1, 0.1), *db1 = kct_rand(nb1, -0.1, 0.1);
    float *dw2 = kct_rand(nw, -0.1, 0.1), *db2 = kct_rand(nb2, -0.1, 0.1);
    float *hp = kct_host(nh * 4), *ha = kct_host(nh * 4), *y = kct_host(nx * 4);
    float *dh = kct_host(nh * 4), *dx = kct_host(nx * 4);
    float *g1 = kct_dup(dw1, nw), *gb1 = kct_dup(db1, nb1);
    float *g2 = kct_dup(dw2, nw), *gb2 = kct_dup(db2, nb2);

    for (int bf = 0; bf < 2; bf++) {
        const char *f_fwd = bf ? "swy_kc_ffn_fwd_bf16" : "swy_kc_ffn_fwd";
        const char *f_bwd = bf ? "swy_kc_ffn_bwd_bf16" : "swy_kc_ffn_bwd";
        if (bf) {
            float *all[] = {x, dy, w1, b1, w2, b2};
            size_t ns[] = {nx, nx, nw, nb1, nw, nb2};
            for (int i = 0; i < 6; i++)
                kct_round_bf16(all[i], ns[i]);
        }
        memcpy(g1, dw1, nw * 4);
        memcpy(gb1, db1, nb1 * 4);
        memcpy(g2, dw2, nw * 4);
        memcpy(gb2, db2, nb2 * 4);
        swy_k_ffn_fwd(x, rows, n_experts, H, F, w1, b1, w2, b2, hp, ha, y);
        swy_k_ffn_bwd(x, hp, ha, dy, rows, n_experts, H, F, w1, w2, dh, dx,
                      g1, gb1, g2, gb2);

        float *dw1_d = kct_up(dw1, nw * 4), *db1_d = kct_up(db1, nb1 * 4);
        float *dw2_d = kct_up(dw2, nw * 4), *db2_d = kct_up(db2, nb2 * 4);
        if (!bf) {
            float *x_d = kct_up(x, nx * 4), *dy_d = kct_up(dy, nx * 4);
            float *w1_d = kct_up(w1, nw * 4), *b1_d = kct_up(b1, nb1 * 4);
            float *w2_d = kct_up(w2, nw * 4), *b2_d = kct_up(b2, nb2 * 4);
            float *hp_d = kct_dev(nh * 4), *ha_d = kct_dev(nh * 4);
            float *y_d = kct_dev(nx * 4), *dh_d = kct_dev(nh * 4);
            float *dx_d = kct_dev(nx * 4);
            KCT_OK(swy_kc_ffn_fwd(kct_ctx, x_d, rows, n_experts, H, F, w1_d,
                                  b1_d, w2_d, b2_d, hp_d, ha_d, y_d));
            KCT_OK(swy_kc_ffn_bwd(kct_ctx, x_d, hp_d, ha_d, dy_d, rows,
                                  n_experts, H, F, w1_d, w2_d, dh_d, dx_d,
                                  dw1_d, db1_d, dw2_d, db2_d));
            kct_cmp_dev(f_fwd, shape, "h_pre", hp_d, hp, nh, KCT_TOL_F32);
            kct_cmp_dev(f_fwd, shape, "h_act", ha_d, ha, nh, KCT_TOL_F32);
            kct_cmp_dev(f_fwd, shape, "y", y_d, y, nx, KCT_TOL_F32);
            kct_cmp_dev(f_bwd, shape, "dh", dh_d, dh, nh, KCT_TOL_F32);
            kct_cmp_dev(f_bwd, shape, "dx", dx_d, dx, nx, KCT_TOL_F32);
            void *dev[] = {x_d, dy_d, w1_d, b1_d, w2_d, b2_d, hp_d, ha_d,
                           y_d, dh_d, dx_d};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
        } else {
            swy_kc_bf16_t *x_d = kct_up_bf16(x, nx), *dy_d = kct_up_bf16(dy, nx);
            swy_kc_bf16_t *w1_d = kct_up_bf16(w1, nw), *b1_d = kct_up_bf16(b1, nb1);
            swy_kc_bf16_t *w2_d = kct_up_bf16(w2, nw), *b2_d = kct_up_bf16(b2, nb2);
            swy_kc_bf16_t *hp_d = kct_dev(nh * 2), *ha_d = kct_dev(nh * 2);
            swy_kc_bf16_t *y_d = kct_dev(nx * 2), *dh_d = kct_dev(nh * 2);
            swy_kc_bf16_t *dx_d = kct_dev(nx * 2);
            KCT_OK(swy_kc_ffn_fwd_bf16(kct_ctx, x_d, rows, n_experts, H, F,
                                       w1_d, b1_d, w2_d, b2_d, hp_d, ha_d,
                                       y_d));
            /* The backward reads the CPU's activations (rounded), so its
             * error is its own, not the forward's. */
            float *hp_r = kct_dup(hp, nh), *ha_r = kct_dup(ha, nh);
            kct_round_bf16(hp_r, nh);
            kct_round_bf16(ha_r, nh);
            swy_kc_bf16_t *hp_in = kct_up_bf16(hp_r, nh);
            swy_kc_bf16_t *ha_in = kct_up_bf16(ha_r, nh);
            memcpy(g1, dw1, nw * 4);
            memcpy(gb1, db1, nb1 * 4);
            memcpy(g2, dw2, nw * 4);
            memcpy(gb2, db2, nb2 * 4);
            swy_k_ffn_bwd(x, hp_r, ha_r, dy, rows, n_experts, H, F, w1, w2,
                          dh, dx, g1, gb1, g2, gb2);
            KCT_OK(swy_kc_ffn_bwd_bf16(kct_ctx, x_d, hp_in, ha_in, dy_d, rows,
                                       n_experts, H, F, w1_d, w2_d, dh_d,
                                       dx_d, dw1_d, db1_d, dw2_d, db2_d));
            kct_cmp_dev_bf16(f_fwd, shape, "h_pre", hp_d, hp, nh);
            kct_cmp_dev_bf16(f_fwd, shape, "h_act", ha_d, ha, nh);
            kct_cmp_dev_bf16(f_fwd, shape, "y", y_d, y, nx);
            kct_cmp_dev_bf16(f_bwd, shape, "dh", dh_d, dh, nh);
            kct_cmp_dev_bf16(f_bwd, shape, "dx", dx_d, dx, nx);
            void *dev[] = {x_d, dy_d, w1_d, b1_d, w2_d, b2_d, hp_d, ha_d,
                           y_d, dh_d, dx_d, hp_in, ha_in};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
            free(hp_r);
            free(ha_r);
        }
        double tol = bf ? KCT_TOL_BF16 : KCT_TOL_F32;
        kct_cmp_dev(f_bwd, shape, "dw1", dw1_d, g1, nw, tol);
        kct_cmp_dev(f_bwd, shape, "db1", db1_d, gb1, nb1, tol);
        kct_cmp_dev(f_bwd, shape, "dw2", dw2_d, g2, nw, tol);
        kct_cmp_dev(f_bwd, shape, "db2", db2_d, gb2, nb2, tol);
        kct_dfree(dw1_d);
        kct_dfree(db1_d);
        kct_dfree(dw2_d);
        kct_dfree(db2_d);
    }
    void *host[] = {x, dy, w1, b1, w2, b2, dw1, db1, dw2, db2, hp, ha, y,
                    dh, dx, g1, gb1, g2, gb2};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* ---- element-wise ------------------------------------------------------ */

/* off: elements by which the arrays are shifted from an allocation's start,
 * to take the unaligned path. */
static void check_elementwise(size_t n, size_t off)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "n=%zu offset=%zu", n, off);
    size_t m = n + off;
    float *x = kct_rand(m, -4, 4), *dy = kct_rand(m, -1, 1);
    float *y = kct_rand(m, -1, 1), *want = kct_host(m * 4);

    float *x_d = kct_up(x, m * 4), *dy_d = kct_up(dy, m * 4);
    float *y_d = kct_up(y, m * 4), *o_d = kct_dev(m * 4);
    swy_k_gelu_fwd(x + off, n, want);
    KCT_OK(swy_kc_gelu_fwd(kct_ctx, x_d + off, n, o_d + off));
    kct_cmp_dev("swy_kc_gelu_fwd", shape, "y", o_d + off, want, n,
                KCT_TOL_F32);
    swy_k_gelu_bwd(x + off, dy + off, n, want);
    KCT_OK(swy_kc_gelu_bwd(kct_ctx, x_d + off, dy_d + off, n, o_d + off));
    kct_cmp_dev("swy_kc_gelu_bwd", shape, "dx", o_d + off, want, n,
                KCT_TOL_F32);
    memcpy(want, y + off, n * 4);
    swy_k_add(x + off, n, want);
    KCT_OK(swy_kc_add(kct_ctx, x_d + off, n, y_d + off));
    kct_cmp_dev("swy_kc_add", shape, "y", y_d + off, want, n, KCT_TOL_F32);

    kct_round_bf16(x, m);
    kct_round_bf16(dy, m);
    kct_round_bf16(y, m);
    swy_kc_bf16_t *xh = kct_up_bf16(x, m), *dyh = kct_up_bf16(dy, m);
    swy_kc_bf16_t *yh = kct_up_bf16(y, m), *oh = kct_dev(m * 2);
    swy_k_gelu_fwd(x + off, n, want);
    KCT_OK(swy_kc_gelu_fwd_bf16(kct_ctx, xh + off, n, oh + off));
    kct_cmp_dev_bf16("swy_kc_gelu_fwd_bf16", shape, "y", oh + off, want, n);
    swy_k_gelu_bwd(x + off, dy + off, n, want);
    KCT_OK(swy_kc_gelu_bwd_bf16(kct_ctx, xh + off, dyh + off, n, oh + off));
    kct_cmp_dev_bf16("swy_kc_gelu_bwd_bf16", shape, "dx", oh + off, want, n);
    memcpy(want, y + off, n * 4);
    swy_k_add(x + off, n, want);
    KCT_OK(swy_kc_add_bf16(kct_ctx, xh + off, n, yh + off));
    kct_cmp_dev_bf16("swy_kc_add_bf16", shape, "y", yh + off, want, n);

    void *dev[] = {x_d, dy_d, y_d, o_d, xh, dyh, yh, oh};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    free(x);
    free(dy);
    free(y);
    free(want);
}

/* ---- embedding ----------------------------------------------------------- */

static void check_embed(int vocab, int S, int H)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "vocab=%d S=%d H=%d", vocab, S, H);
    size_t nt = (size_t)vocab * H, no = (size_t)S * H;
    float *table = kct_rand(nt, -1, 1), *dout = kct_rand(no, -1, 1);
    float *dtable = kct_rand(nt, -0.1, 0.1), *out = kct_host(no * 4);
    int *ids = kct_host((size_t)(S ? S : 1) * sizeof(int));
    for (int t = 0; t < S; t++)
        ids[t] = kct_int(vocab < 4 ? vocab : vocab / 4); /* repeats */
    float *want_dt = kct_dup(dtable, nt);
    swy_k_embed_fwd(table, ids, S, H, out);
    swy_k_embed_bwd(dout, ids, S, H, want_dt);
    float *table_d = kct_up(table, nt * 4), *dout_d = kct_up(dout, no * 4);
    float *dtable_d = kct_up(dtable, nt * 4), *out_d = kct_dev(no * 4);
    int *ids_d = kct_up(ids, (size_t)S * sizeof(int));
    KCT_OK(swy_kc_embed_fwd(kct_ctx, table_d, ids_d, S, H, out_d));
    KCT_OK(swy_kc_embed_bwd(kct_ctx, dout_d, ids_d, S, H, dtable_d));
    kct_cmp_dev("swy_kc_embed_fwd", shape, "out", out_d, out, no,
                KCT_TOL_F32);
    kct_cmp_dev("swy_kc_embed_bwd", shape, "dtable", dtable_d, want_dt, nt,
                KCT_TOL_F32);

    kct_round_bf16(table, nt);
    swy_k_embed_fwd(table, ids, S, H, out);
    swy_kc_bf16_t *th = kct_up_bf16(table, nt), *oh = kct_dev(no * 2);
    KCT_OK(swy_kc_embed_fwd_bf16(kct_ctx, th, ids_d, S, H, oh));
    kct_cmp_dev_bf16("swy_kc_embed_fwd_bf16", shape, "out", oh, out, no);

    void *dev[] = {table_d, dout_d, dtable_d, out_d, ids_d, th, oh};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    void *host[] = {table, dout, dtable, out, ids, want_dt};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* ---- cross-entropy ------------------------------------------------------- */

static void check_xent(int S, int C, int with_probs)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "S=%d C=%d%s", S, C,
             with_probs ? "" : " noprobs");
    size_t n = (size_t)S * C;
    float *logits = kct_rand(n, -6, 6), *probs = kct_host(n * 4);
    float *dl = kct_host(n * 4);
    int *labels = kct_host((size_t)(S ? S : 1) * sizeof(int));
    for (int t = 0; t < S; t++)
        labels[t] = kct_int(C + 1) - 1; /* -1 = ignored */
    float loss = swy_k_xent_fwd(logits, labels, S, C, probs);
    swy_k_xent_bwd(logits, labels, S, C, 0.7f, dl);
    float *logits_d = kct_up(logits, n * 4), *probs_d = kct_dev(n * 4);
    float *dl_d = kct_dev(n * 4), *loss_d = kct_dev(4);
    int *labels_d = kct_up(labels, (size_t)S * sizeof(int));
    KCT_OK(swy_kc_xent_fwd(kct_ctx, logits_d, labels_d, S, C,
                           with_probs ? probs_d : NULL, loss_d));
    KCT_OK(swy_kc_xent_bwd(kct_ctx, logits_d, labels_d, S, C, 0.7f, dl_d));
    kct_cmp_dev("swy_kc_xent_fwd", shape, "loss", loss_d, &loss, 1,
                KCT_TOL_F32);
    if (with_probs)
        kct_cmp_dev("swy_kc_xent_fwd", shape, "probs", probs_d, probs, n,
                    KCT_TOL_F32);
    kct_cmp_dev("swy_kc_xent_bwd", shape, "dlogits", dl_d, dl, n,
                KCT_TOL_F32);
    void *dev[] = {logits_d, probs_d, dl_d, loss_d, labels_d};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    free(logits);
    free(probs);
    free(dl);
    free(labels);
}

/* ---- Adam ---------------------------------------------------------------- */

static void check_adam(size_t n, int decoupled, float wd)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "n=%zu %s wd=%g", n,
             decoupled ? "adamw" : "l2", (double)wd);
    swy_k_adam_params_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f, wd, decoupled};
    float *p = kct_rand(n, -1, 1), *m = kct_host(n * 4), *v = kct_host(n * 4);
    float *p_d = kct_up(p, n * 4), *m_d = kct_dev(n * 4), *v_d = kct_dev(n * 4);
    float *g_d = kct_dev(n * 4);
    for (long step = 1; step <= 5; step++) {
        float *g = kct_rand(n, -2, 2);
        kct_set(g_d, g, n * 4);
        swy_k_adam_step(p, g, m, v, n, &hp, step);
        KCT_OK(swy_kc_adam_step(kct_ctx, p_d, g_d, m_d, v_d, n, &hp, step));
        free(g);
    }
    kct_cmp_dev("swy_kc_adam_step", shape, "param", p_d, p, n, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_adam_step", shape, "m", m_d, m, n, KCT_TOL_F32);
    kct_cmp_dev("swy_kc_adam_step", shape, "v", v_d, v, n, KCT_TOL_F32);
    kct_dfree(p_d);
    kct_dfree(m_d);
    kct_dfree(v_d);
    kct_dfree(g_d);
    free(p);
    free(m);
    free(v);
}

/* ---- conversions (bitwise) ----------------------------------------------- */

/* off: elements by which the device arrays are shifted (unaligned path). */
static void check_convert(size_t n, size_t off)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "n=%zu +specials offset=%zu", n, off);
    float *x = kct_rand(n + 16, -1e3, 1e3);
    /* Rounding ties, overflow to infinity, infinities, NaNs (quiet and
     * signalling with a low payload), zeros, denormals. */
    uint32_t sp[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u,
                     0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc00001u,
                     0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
                     0x3f80ffffu, 0xbf808001u, 0x7f7f8000u, 0x00008000u};
    memcpy(x + n, sp, sizeof(sp));
    size_t m = n + 16;
    uint16_t *h = kct_host(m * 2), *h_got = kct_host(m * 2);
    float *back = kct_host(m * 4), *back_got = kct_host(m * 4);
    swy_k_f32_to_bf16(x, m, h);
    swy_k_bf16_to_f32(h, m, back);
    float *x_d = kct_dev((m + off) * 4), *back_d = kct_dev((m + off) * 4);
    swy_kc_bf16_t *h_d = kct_dev((m + off) * 2);
    kct_set(x_d + off, x, m * 4);
    KCT_OK(swy_kc_f32_to_bf16(kct_ctx, x_d + off, m, h_d + off));
    KCT_OK(swy_kc_bf16_to_f32(kct_ctx, h_d + off, m, back_d + off));
    kct_down(h_got, h_d + off, m * 2);
    kct_down(back_got, back_d + off, m * 4);
    int *a = kct_host(m * sizeof(int)), *b = kct_host(m * sizeof(int));
    for (size_t i = 0; i < m; i++) {
        a[i] = h_got[i];
        b[i] = h[i];
    }
    kct_cmp_int("swy_kc_f32_to_bf16", shape, "bits", a, b, m);
    for (size_t i = 0; i < m; i++) {
        uint32_t u, w;
        memcpy(&u, &back_got[i], 4);
        memcpy(&w, &back[i], 4);
        a[i] = (int)u;
        b[i] = (int)w;
    }
    kct_cmp_int("swy_kc_bf16_to_f32", shape, "bits", a, b, m);
    kct_dfree(x_d);
    kct_dfree(back_d);
    kct_dfree(h_d);
    void *host[] = {x, h, h_got, back, back_got, a, b};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

/* ---- fused epilogues ------------------------------------------------------
 * The context's GEMM epilogue counters over one call of `run`: the test
 * asserts how many GEMMs ran fused and how many fell back, so a cuBLASLt
 * path that silently never engages fails here. */

typedef struct {
    unsigned long fused_min, fused_max, back_min, back_max;
} want_epi_t;

static void check_epilogues(const char *what, void (*run)(void),
                            want_epi_t w)
{
    unsigned long f0, b0, f1, b1;
    const char *why;
    int on;
    KCT_OK(swy_kc_ctx_epilogue_stats(kct_ctx, &on, &f0, &b0, &why));
    run();
    KCT_OK(swy_kc_ctx_epilogue_stats(kct_ctx, &on, &f1, &b1, &why));
    unsigned long f = f1 - f0, b = b1 - b0;
    kct_checks++;
    if (f < w.fused_min || f > w.fused_max || b < w.back_min ||
        b > w.back_max) {
        kct_failures++;
        fprintf(stderr,
                "FAIL epilogues %s: %lu fused, %lu fell back; want "
                "[%lu, %lu] fused, [%lu, %lu] fell back (last reason: "
                "%s)\n",
                what, f, b, w.fused_min, w.fused_max, w.back_min,
                w.back_max, why[0] != '\0' ? why : "none");
    }
}

static const int r1[] = {0, 5, 0, 17, 3, 0};
static const int r2[] = {64, 0, 128, 31};
static const int r3[] = {0, 0};
static const int r4[] = {1};

/* The FFN shapes: experts without rows, odd sizes, one expert. */
static void run_ffn_all(void)
{
    check_ffn(6, r1, 32, 64);
    check_ffn(4, r2, 64, 256);
    check_ffn(2, r3, 16, 24);
    check_ffn(1, r4, 33, 70);
}

static void run_dense(void)
{
    check_linear(0, 8, 8, 1);
    check_linear(1, 1, 1, 1);
    check_linear(37, 64, 48, 1);
    check_linear(129, 33, 65, 0);
    check_linear(300, 256, 128, 1);
    check_linear_gelu(1, 1, 1, 1);
    check_linear_gelu(37, 64, 48, 1);
    check_linear_gelu(129, 33, 65, 0);
    run_ffn_all();
}

/* One of each: fp32 fuses its bias; bf16 fuses GELU+bias and dGELU. */
static void run_linear_gelu(void) { check_linear_gelu(200, 64, 256, 1); }

/* 3 experts with rows; per expert the fp32 FFN fuses its two biases, the
 * bf16 one GELU+bias, bias, and dGELU. */
static void run_ffn_aligned(void) { check_ffn(4, r2, 64, 256); }

/* F = 70: GELU's auxiliary matrix needs ld % 8 == 0, so both bf16 GELU
 * GEMMs take the separate passes.  Whether cuBLASLt fuses a bias into a
 * GEMM of odd leading dimensions is its choice: 0 to 4 fused (two per
 * dtype), up to 2 more fallbacks. */
static void run_ffn_odd(void) { check_ffn(1, r4, 33, 70); }

/* ---- grouped GEMMs --------------------------------------------------------
 * The grouped calls over one call of `run`, as check_epilogues counts the
 * fused ones: a grouped path that silently never engages fails here. */

static void check_grouped(const char *what, void (*run)(void),
                          unsigned long calls, unsigned long fell_back)
{
    unsigned long c0, b0, c1, b1;
    const char *why;
    int on;
    KCT_OK(swy_kc_ctx_grouped_stats(kct_ctx, &on, &c0, &b0, &why));
    run();
    KCT_OK(swy_kc_ctx_grouped_stats(kct_ctx, &on, &c1, &b1, &why));
    kct_checks++;
    if (c1 - c0 != calls || b1 - b0 != fell_back) {
        kct_failures++;
        fprintf(stderr,
                "FAIL grouped %s: %lu grouped calls, %lu per expert; want "
                "%lu and %lu (last reason: %s)\n",
                what, c1 - c0, b1 - b0, calls, fell_back,
                why[0] != '\0' ? why : "none");
    }
}

/* 200 experts, 150 of them with 1 to 3 rows: two grouped passes (128
 * experts a call). */
static void run_ffn_many(void)
{
    int rows[200];
    for (int e = 0; e < 200; e++)
        rows[e] = e % 4 == 0 ? 0 : 1 + e % 3;
    check_ffn(200, rows, 8, 16);
}

static const int r5[] = {3, 5};
static void run_ffn_unaligned(void) { check_ffn(2, r5, 33, 70); }

int main(void)
{
    kct_init("test_kc_dense");
    kct_seed(20261126);

    /* Every dense check with the GEMM epilogues fused, then with the
     * separate passes: both must match the CPU. */
    KCT_OK(swy_kc_ctx_set_epilogues(kct_ctx, 1));
    run_dense();
    check_epilogues("ffn F=256", run_ffn_aligned,
                    (want_epi_t){3 * 2 + 3 * 3, 3 * 2 + 3 * 3, 0, 0});
    check_epilogues("ffn F=70", run_ffn_odd, (want_epi_t){0, 4, 2, 6});
    check_epilogues("linear_gelu", run_linear_gelu, (want_epi_t){3, 3, 0, 0});
    KCT_OK(swy_kc_ctx_set_epilogues(kct_ctx, 0));
    check_epilogues("off", run_dense, (want_epi_t){0, 0, 0, 0});
    KCT_OK(swy_kc_ctx_set_epilogues(kct_ctx, 1));

    /* The FFN with grouped GEMMs (they replace its epilogues: none fuse).
     * Per pass, fp32 makes 2 grouped calls forward and 4 backward; bf16 2
     * and 2 (its weight gradients go per expert).  Each check_ffn runs
     * both dtypes. */
    KCT_OK(swy_kc_ctx_set_grouped(kct_ctx, 1));
    check_grouped("ffn", run_ffn_all, 3 * 10, 0);
    check_grouped("ffn F=256", run_ffn_aligned, 10, 0);
    check_epilogues("ffn grouped", run_ffn_aligned, (want_epi_t){0, 0, 0, 0});
    check_grouped("ffn 200 experts", run_ffn_many, 2 * 10, 0);
    /* H=33, F=70: the second expert's bf16 rows start 2- or 4-byte
     * aligned, so bf16's 4 grouped calls go per expert (counted); fp32
     * groups all 6. */
    check_grouped("ffn unaligned", run_ffn_unaligned, 6, 4);
    KCT_OK(swy_kc_ctx_set_grouped(kct_ctx, 0));
    check_grouped("off", run_ffn_many, 0, 0);

    check_elementwise(0, 0);
    check_elementwise(1, 0);
    check_elementwise(1000003, 0);
    check_elementwise(4099, 1);

    check_embed(50, 0, 8);
    check_embed(50, 300, 64);
    check_embed(3, 200, 33);

    check_xent(0, 5, 1);
    check_xent(1, 1, 1);
    check_xent(300, 10, 1);
    check_xent(64, 1000, 0);
    check_xent(64, 1000, 1);

    check_adam(1000003, 0, 0.0f);
    check_adam(4097, 1, 0.01f);
    check_adam(333, 0, 0.01f);

    check_convert(100003, 0);
    check_convert(1001, 1);

    return kct_finish("test_kc_dense");
}
