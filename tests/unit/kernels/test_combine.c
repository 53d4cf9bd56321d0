/* Combine forward/backward, and one whole MoE layer on a single rank
 * (gate -> capacity -> sort -> pack -> expert FFN -> combine, plus the aux
 * loss) checked against a naive per-token double implementation that
 * never sorts, and its backward chain against central differences
 * (tolerances in ktest.h). */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

typedef struct {
    int S, k, H;
    const int *row;
    double *rows, *w;
    const float *g;
} comb_ctx;

static double comb_loss(void *vctx)
{
    comb_ctx *c = vctx;
    double L = 0;
    for (int t = 0; t < c->S; t++)
        for (int h = 0; h < c->H; h++) {
            double o = 0;
            for (int j = 0; j < c->k; j++) {
                int r = c->row[t * c->k + j];
                if (r >= 0)
                    o += c->w[t * c->k + j] * c->rows[r * c->H + h];
            }
            L += c->g[t * c->H + h] * o;
        }
    return L;
}

static void test_combine(int S, int k, int E, int H)
{
    size_t ns = (size_t)S * k;
    int *idx = kt_alloc(ns * 4 + 4), *row = kt_alloc(ns * 4 + 4);
    int counts[16], offsets[17];
    for (int t = 0; t < S; t++)
        for (int j = 0; j < k; j++)
            idx[t * k + j] = (t + j) % E; /* distinct for k <= E */
    for (size_t s = 0; s < ns; s += 5)
        idx[s] = -1; /* some dropped */
    int n = swy_k_sort_slots(idx, S, k, 1, E, counts, offsets, row);
    size_t nr = (size_t)(n + 1) * H; /* one extra row nobody maps to */
    float *rows = kt_alloc(nr * 4), *w = kt_alloc(ns * 4 + 4);
    float *out = kt_alloc((size_t)S * H * 4 + 4), *g = kt_alloc((size_t)S * H * 4 + 4);
    float *drows = kt_alloc(nr * 4), *dw = kt_alloc(ns * 4 + 4);
    kt_fill(rows, nr, -1, 1);
    kt_fill(w, ns, 0, 1);
    kt_fill(g, (size_t)S * H, -1, 1);
    swy_k_combine_fwd(rows, row, w, S, k, H, out);
    comb_ctx c = {S, k, H, row, kt_dup_d(rows, nr), kt_dup_d(w, ns), g};
    double *want = kt_alloc((size_t)S * H * 8 + 8);
    for (int t = 0; t < S; t++)
        for (int h = 0; h < H; h++) {
            double o = 0;
            for (int j = 0; j < k; j++)
                if (idx[t * k + j] >= 0)
                    o += c.w[t * k + j] * c.rows[row[t * k + j] * H + h];
            want[t * H + h] = o;
        }
    kt_check_fwd("combine", out, want, (size_t)S * H);

    for (size_t i = 0; i < nr; i++)
        drows[i] = 123.0f;
    swy_k_combine_bwd(rows, row, w, g, S, k, H, drows, dw);
    double *fd = kt_alloc((nr + ns) * 8);
    kt_fd(comb_loss, &c, c.rows, (size_t)n * H, fd);
    kt_check_grad("combine drows", drows, fd, (size_t)n * H);
    kt_fd(comb_loss, &c, c.w, ns, fd);
    kt_check_grad("combine dtopk_w", dw, fd, ns);
    for (size_t s = 0; s < ns; s++)
        if (idx[s] < 0)
            CHECK(dw[s] == 0.0f);
    for (int h = 0; h < H; h++)
        CHECK(drows[(size_t)n * H + h] == 123.0f); /* unmapped: untouched */
    free(fd);
    free(want);
    free(c.rows);
    free(c.w);
    free(idx);
    free(row);
    free(rows);
    free(w);
    free(out);
    free(g);
    free(drows);
    free(dw);
}

/* ---- One MoE layer on one rank ------------------------------------------ */

enum { L_S = 12, L_H = 5, L_F = 6, L_E = 4, L_K = 2 };
static const double aux_coef = 0.05;

typedef struct {
    double *x, *wg, *w1, *b1, *w2, *b2;
    int idx[L_S * L_K];  /* choices at the unperturbed point */
    int kept[L_S * L_K]; /* capacity survivors at that point */
    double f[L_E];
    const float *g;
} layer_ctx;

/* Per token: logits, softmax, fixed choices, renormalised weights, each
 * kept choice's FFN applied to the token directly, weighted sum. */
static double layer_loss(void *vctx)
{
    layer_ctx *c = vctx;
    double L = 0, m[L_E] = {0};
    for (int t = 0; t < L_S; t++) {
        double logit[L_E], p[L_E];
        for (int e = 0; e < L_E; e++) {
            logit[e] = 0;
            for (int h = 0; h < L_H; h++)
                logit[e] += c->x[t * L_H + h] * c->wg[h * L_E + e];
        }
        kt_softmax(logit, L_E, p);
        for (int e = 0; e < L_E; e++)
            m[e] += p[e] / L_S;
        double z = 0;
        for (int j = 0; j < L_K; j++)
            z += p[c->idx[t * L_K + j]];
        for (int j = 0; j < L_K; j++) {
            if (!c->kept[t * L_K + j])
                continue;
            int e = c->idx[t * L_K + j];
            double wt = p[e] / z, a[L_F];
            for (int f = 0; f < L_F; f++) {
                double acc = c->b1[e * L_F + f];
                for (int h = 0; h < L_H; h++)
                    acc += c->x[t * L_H + h] *
                           c->w1[(e * L_H + h) * L_F + f];
                a[f] = kt_gelu(acc);
            }
            for (int h = 0; h < L_H; h++) {
                double y = c->b2[e * L_H + h];
                for (int f = 0; f < L_F; f++)
                    y += a[f] * c->w2[(e * L_F + f) * L_H + h];
                L += c->g[t * L_H + h] * wt * y;
            }
        }
    }
    double aux = 0;
    for (int e = 0; e < L_E; e++)
        aux += c->f[e] * m[e];
    return L + aux_coef * L_E * aux;
}

static void test_layer(void)
{
    enum { S = L_S, H = L_H, F = L_F, E = L_E, K = L_K };
    float x[S * H], wg[H * E], w1[E * H * F], b1[E * F], w2[E * F * H],
        b2[E * H], g[S * H];
    kt_fill(x, S * H, -1, 1);
    kt_fill(wg, H * E, -1.5, 1.5);
    kt_fill(w1, E * H * F, -0.7, 0.7);
    kt_fill(b1, E * F, -0.2, 0.2);
    kt_fill(w2, E * F * H, -0.7, 0.7);
    kt_fill(b2, E * H, -0.2, 0.2);
    kt_fill(g, S * H, -1, 1);

    /* Forward, as swy-train will run it on one rank. */
    float logits[S * E], probs[S * E], tw[S * K], f[E];
    int idx[S * K], pre_idx[S * K], load[E];
    swy_k_gate_logits_fwd(x, wg, S, H, E, logits);
    swy_k_gate_topk(logits, S, E, K, 1, idx, tw, probs);
    memcpy(pre_idx, idx, sizeof(idx));
    float aux = swy_k_gate_aux_loss(probs, S, E, 1, f);
    int cap = swy_k_gate_capacity(0.75, S, K, E);
    int dropped = swy_k_gate_drop(idx, tw, S, K, E, cap,
                                  SWY_K_DROP_TOKEN_ORDER, load);
    CHECK(dropped > 0); /* the test should exercise dropping */
    int counts[E], offsets[E + 1], row[S * K];
    int n = swy_k_sort_slots(idx, S, K, 1, E, counts, offsets, row);
    float send[S * K * H], hp[S * K * F], ha[S * K * F], y[S * K * H],
        out[S * H];
    swy_k_pack(x, row, S, K, H, send);
    swy_k_ffn_fwd(send, counts, E, H, F, w1, b1, w2, b2, hp, ha, y);
    swy_k_combine_fwd(y, row, tw, S, K, H, out);

    layer_ctx c = {kt_dup_d(x, S * H), kt_dup_d(wg, H * E),
                   kt_dup_d(w1, E * H * F), kt_dup_d(b1, E * F),
                   kt_dup_d(w2, E * F * H), kt_dup_d(b2, E * H),
                   {0}, {0}, {0}, g};
    memcpy(c.idx, pre_idx, sizeof(c.idx));
    for (int s = 0; s < S * K; s++)
        c.kept[s] = idx[s] >= 0;
    for (int e = 0; e < E; e++)
        c.f[e] = f[e];
    double got = aux_coef * aux;
    for (int i = 0; i < S * H; i++)
        got += (double)g[i] * out[i];
    double want = layer_loss(&c);
    CHECK(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)));

    /* Backward. */
    float drows[S * K * H], dtw[S * K], dh[S * K * F], dsend[S * K * H];
    float dw1[E * H * F] = {0}, db1[E * F] = {0}, dw2[E * F * H] = {0},
          db2[E * H] = {0}, dwg[H * E] = {0};
    float dx[S * H], dx_gate[S * H], dprobs[S * E], dlogits[S * E];
    swy_k_combine_bwd(y, row, tw, g, S, K, H, drows, dtw);
    swy_k_ffn_bwd(send, hp, ha, drows, counts, E, H, F, w1, w2, dh, dsend,
                  dw1, db1, dw2, db2);
    swy_k_pack_bwd(dsend, row, S, K, H, dx);
    swy_k_gate_topk_bwd(probs, dtw, S, E, K, 1, dprobs);
    swy_k_gate_aux_loss_bwd(f, S, E, (float)aux_coef, dprobs);
    swy_k_softmax_bwd(probs, dprobs, S, E, dlogits);
    swy_k_gate_logits_bwd(x, wg, dlogits, S, H, E, dx_gate, dwg);
    swy_k_add(dx_gate, S * H, dx);

    double fd[E * H * F];
    kt_fd(layer_loss, &c, c.x, S * H, fd);
    kt_check_grad("layer dx", dx, fd, S * H);
    kt_fd(layer_loss, &c, c.wg, H * E, fd);
    kt_check_grad("layer dwg", dwg, fd, H * E);
    kt_fd(layer_loss, &c, c.w1, E * H * F, fd);
    kt_check_grad("layer dw1", dw1, fd, E * H * F);
    kt_fd(layer_loss, &c, c.b1, E * F, fd);
    kt_check_grad("layer db1", db1, fd, E * F);
    kt_fd(layer_loss, &c, c.w2, E * F * H, fd);
    kt_check_grad("layer dw2", dw2, fd, E * F * H);
    kt_fd(layer_loss, &c, c.b2, E * H, fd);
    kt_check_grad("layer db2", db2, fd, E * H);
    (void)n;
    free(c.x);
    free(c.wg);
    free(c.w1);
    free(c.b1);
    free(c.w2);
    free(c.b2);
}

int main(void)
{
    kt_seed(11);
    test_combine(10, 2, 4, 3);
    test_combine(7, 1, 3, 8);
    test_combine(9, 4, 5, 2);
    test_combine(0, 2, 2, 4);
    test_layer();
    return kt_finish("kernels_combine");
}
