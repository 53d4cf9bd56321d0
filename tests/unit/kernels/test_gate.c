/* Gate kernels: softmax, top-k with ties and renormalisation, capacity and
 * dropping, the GShard auxiliary loss, and every backward against central
 * differences of an independent double implementation (tolerances in
 * ktest.h: forward 1e-5, gradients relative 1e-3). */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

/* Logits with no near-ties: a shuffled ladder 0.37 apart plus noise well
 * under the spacing, so a 1e-5 perturbation never changes a choice. */
static void distinct_logits(float *x, int S, int E)
{
    for (int t = 0; t < S; t++) {
        float *row = x + (size_t)t * E;
        for (int e = 0; e < E; e++)
            row[e] = (float)(0.37 * e - 0.1 * E + kt_uniform(-0.05, 0.05));
        for (int e = E - 1; e > 0; e--) {
            int o = kt_int(e + 1);
            float tmp = row[e];
            row[e] = row[o];
            row[o] = tmp;
        }
    }
}

/* Reference top-k: indices sorted by (probability descending, index
 * ascending) with an insertion sort, first k taken. */
static void ref_topk(const double *p, int E, int k, int *idx)
{
    int order[256];
    for (int e = 0; e < E; e++) {
        int i = e;
        while (i > 0 && p[order[i - 1]] < p[e])
            i--;
        memmove(order + i + 1, order + i, (size_t)(e - i) * sizeof(int));
        order[i] = e;
    }
    memcpy(idx, order, (size_t)k * sizeof(int));
}

static void test_softmax(void)
{
    enum { S = 7, E = 5 };
    float x[S * E], p[S * E], dp[S * E], dl[S * E];
    kt_fill(x, S * E, -3, 3);
    x[3] = 80.0f; /* exp(80) overflows float: the shift must be there */
    x[4] = -80.0f;
    x[10] = 88.5f;
    x[11] = 88.5f;
    swy_k_softmax_fwd(x, S, E, p);
    double ref[S * E], xd[E];
    for (int t = 0; t < S; t++) {
        for (int e = 0; e < E; e++)
            xd[e] = x[t * E + e];
        kt_softmax(xd, E, ref + t * E);
        double sum = 0;
        for (int e = 0; e < E; e++)
            sum += p[t * E + e];
        CHECK(fabs(sum - 1.0) < 1e-6);
    }
    kt_check_fwd("softmax", p, ref, S * E);

    /* In place (probs aliasing logits) gives the same. */
    float y[S * E];
    memcpy(y, x, sizeof(y));
    swy_k_softmax_fwd(y, S, E, y);
    CHECK(memcmp(y, p, sizeof(y)) == 0);

    /* Backward: dlogits = J^T dp, with J from the double softmax. */
    kt_fill(dp, S * E, -1, 1);
    swy_k_softmax_bwd(p, dp, S, E, dl);
    double want[S * E];
    for (int t = 0; t < S; t++)
        for (int i = 0; i < E; i++) {
            double g = 0;
            for (int j = 0; j < E; j++) {
                double pi = ref[t * E + i], pj = ref[t * E + j];
                g += dp[t * E + j] * pj * ((i == j) - pi);
            }
            want[t * E + i] = g;
        }
    kt_check_grad("softmax", dl, want, S * E);
}

static void test_topk_values(void)
{
    enum { S = 9, E = 7 };
    float x[S * E], p[S * E], w[S * 4];
    int idx[S * 4], ref_idx[4];
    double pd[E];
    distinct_logits(x, S, E);
    for (int k = 1; k <= 4; k++)
        for (int renorm = 0; renorm <= 1; renorm++) {
            swy_k_gate_topk(x, S, E, k, renorm, idx, w, p);
            for (int t = 0; t < S; t++) {
                double xd[E];
                for (int e = 0; e < E; e++)
                    xd[e] = x[t * E + e];
                kt_softmax(xd, E, pd);
                ref_topk(pd, E, k, ref_idx);
                double z = 0;
                for (int j = 0; j < k; j++)
                    z += pd[ref_idx[j]];
                for (int j = 0; j < k; j++) {
                    CHECK(idx[t * k + j] == ref_idx[j]);
                    double want = pd[ref_idx[j]] / (renorm ? z : 1.0);
                    CHECK(fabs(w[t * k + j] - want) < 1e-6);
                }
                double wsum = 0;
                for (int j = 0; j < k; j++)
                    wsum += w[t * k + j];
                if (renorm)
                    CHECK(fabs(wsum - 1.0) < 1e-6);
            }
        }
}

static void test_topk_ties(void)
{
    /* Equal logits give bit-equal probabilities; the lower id must win. */
    const float x[3 * 5] = {1, 3, 3, 0, 3,   /* three-way tie at the top */
                            2, 2, 2, 2, 2,   /* all equal */
                            0, 5, 1, 5, 1};  /* tie at top, tie below */
    float p[15], w[15];
    int idx[15];
    swy_k_gate_topk(x, 3, 5, 2, 1, idx, w, p);
    CHECK(idx[0] == 1 && idx[1] == 2);
    CHECK(idx[2] == 0 && idx[3] == 1);
    CHECK(idx[4] == 1 && idx[5] == 3);
    CHECK(w[0] == 0.5f && w[1] == 0.5f && w[2] == 0.5f);
    swy_k_gate_topk(x, 3, 5, 3, 0, idx, w, p);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 4);
    CHECK(idx[3] == 0 && idx[4] == 1 && idx[5] == 2);
    CHECK(idx[6] == 1 && idx[7] == 3 && idx[8] == 2);
    CHECK(w[3] == 0.2f && w[5] == p[7]);
    /* k = E takes everything, in the tie order. */
    swy_k_gate_topk(x, 3, 5, 5, 1, idx, w, p);
    CHECK(idx[5] == 0 && idx[6] == 1 && idx[7] == 2 && idx[8] == 3 &&
          idx[9] == 4);
    CHECK(idx[10] == 1 && idx[11] == 3 && idx[12] == 2 && idx[13] == 4 &&
          idx[14] == 0);
}

/* Double reference of the gate loss used for the FD checks:
 *   L = sum_{t,j} g_w[t][j] * w[t][j](logits) [+ aux_coef * l_aux],
 * with the choices and f fixed at the unperturbed point (they are
 * piecewise constant, and the logits keep clear of ties). */
typedef struct {
    int S, E, k, renorm, with_drop;
    double *logits;
    const int *idx;      /* [S][k] choices, pre-capacity */
    const int *kept;     /* [S][k] 1 if the slot survived capacity */
    const float *g_w;    /* [S][k] */
    double aux_coef;
    const double *f;     /* [E] */
} gate_ctx;

static double gate_loss(void *vctx)
{
    gate_ctx *c = vctx;
    double L = 0, p[64], m[64] = {0};
    for (int t = 0; t < c->S; t++) {
        kt_softmax(c->logits + t * c->E, c->E, p);
        for (int e = 0; e < c->E; e++)
            m[e] += p[e] / c->S;
        double z = 0;
        for (int j = 0; j < c->k; j++)
            z += p[c->idx[t * c->k + j]];
        for (int j = 0; j < c->k; j++) {
            if (!c->kept[t * c->k + j])
                continue;
            double w = p[c->idx[t * c->k + j]] / (c->renorm ? z : 1.0);
            L += c->g_w[t * c->k + j] * w;
        }
    }
    if (c->aux_coef != 0) {
        double aux = 0;
        for (int e = 0; e < c->E; e++)
            aux += c->f[e] * m[e];
        L += c->aux_coef * c->E * aux;
    }
    return L;
}

static void test_gate_bwd(void)
{
    enum { S = 6, E = 5 };
    float x[S * E], p[S * E], w[S * 3], gw[S * 3], dp[S * E], dl[S * E];
    int idx[S * 3], kept[S * 3];
    double fd[S * E];
    for (int k = 1; k <= 3; k++)
        for (int renorm = 0; renorm <= 1; renorm++)
            for (int drop = 0; drop <= 1; drop++) {
                distinct_logits(x, S, E);
                swy_k_gate_topk(x, S, E, k, renorm, idx, w, p);
                kt_fill(gw, S * k, -1, 1);
                for (int s = 0; s < S * k; s++) {
                    /* Dropping is modelled as combine_bwd reports it: a
                     * zero gradient on the slot's weight. */
                    kept[s] = !(drop && s % 3 == 1);
                    if (!kept[s])
                        gw[s] = 0.0f;
                }
                swy_k_gate_topk_bwd(p, gw, S, E, k, renorm, dp);
                swy_k_softmax_bwd(p, dp, S, E, dl);
                gate_ctx c = {S, E, k, renorm, drop, kt_dup_d(x, S * E),
                              idx, kept, gw, 0.0, NULL};
                kt_fd(gate_loss, &c, c.logits, S * E, fd);
                char name[64];
                snprintf(name, sizeof(name), "topk k=%d renorm=%d drop=%d",
                         k, renorm, drop);
                kt_check_grad(name, dl, fd, S * E);
                free(c.logits);
            }
}

/* FasterMoE's topology gate: experts 0..E/2-1 on node 0 (ours), the rest
 * on node 1. At most floor(frac * S) tokens keep a cross-node choice, and
 * they are the ones with the highest cross-node probability; the others
 * get their top-k among local experts; the gradient through the rerouted
 * choices (swy_k_gate_topk_bwd_idx) matches finite differences. */
static void test_topo_reroute(void)
{
    enum { S = 10, E = 6 };
    float x[S * E], p[S * E], w[S * 3], gw[S * 3], dp[S * E], dl[S * E];
    int idx[S * 3], orig[S * 3], kept[S * 3], node[E];
    double fd[S * E];
    for (int e = 0; e < E; e++)
        node[e] = e < E / 2 ? 0 : 1;
    for (int k = 1; k <= 2; k++)
        for (int renorm = 0; renorm <= 1; renorm++) {
            distinct_logits(x, S, E);
            swy_k_gate_topk(x, S, E, k, renorm, idx, w, p);
            memcpy(orig, idx, sizeof(int) * S * k);
            double score[S];
            int n_cross = 0;
            for (int t = 0; t < S; t++) {
                score[t] = 0;
                for (int j = 0; j < k; j++)
                    if (node[orig[t * k + j]] != 0 &&
                        p[t * E + orig[t * k + j]] > score[t])
                        score[t] = p[t * E + orig[t * k + j]];
                n_cross += score[t] > 0;
            }
            int budget = 3; /* floor(0.3 * 10) */
            int rr = swy_k_gate_topo_reroute(p, S, E, k, renorm, node, 0, 0.3,
                                             idx, w);
            CHECK(rr == (n_cross > budget ? n_cross - budget : 0));
            int still = 0;
            for (int t = 0; t < S; t++) {
                int cross = 0, changed = 0;
                for (int j = 0; j < k; j++) {
                    cross |= node[idx[t * k + j]] != 0;
                    changed |= idx[t * k + j] != orig[t * k + j];
                }
                still += cross;
                if (!changed)
                    continue;
                /* Rerouted: every cross token that kept its choice has a
                 * score at least as high as this one's was. */
                for (int u = 0; u < S; u++) {
                    int ucross = 0;
                    for (int j = 0; j < k; j++)
                        ucross |= node[idx[u * k + j]] != 0;
                    if (ucross)
                        CHECK(score[u] >= score[t]);
                }
                /* The new choices: the top-k local experts, in order. */
                double lp[E];
                int lidx[3];
                for (int e = 0; e < E; e++)
                    lp[e] = e < E / 2 ? p[t * E + e] : -1.0;
                ref_topk(lp, E, k, lidx);
                double z = 0;
                for (int j = 0; j < k; j++)
                    z += p[t * E + lidx[j]];
                for (int j = 0; j < k; j++) {
                    CHECK(idx[t * k + j] == lidx[j]);
                    double want = p[t * E + lidx[j]] / (renorm ? z : 1.0);
                    CHECK(fabs(w[t * k + j] - want) <= 1e-6);
                }
            }
            CHECK(still == (n_cross < budget ? n_cross : budget));

            kt_fill(gw, S * k, -1, 1);
            for (int s = 0; s < S * k; s++)
                kept[s] = 1;
            swy_k_gate_topk_bwd_idx(p, idx, gw, S, E, k, renorm, dp);
            swy_k_softmax_bwd(p, dp, S, E, dl);
            gate_ctx c = {S, E, k, renorm, 0, kt_dup_d(x, S * E), idx, kept,
                          gw, 0.0, NULL};
            kt_fd(gate_loss, &c, c.logits, S * E, fd);
            char name[64];
            snprintf(name, sizeof(name), "topo reroute k=%d renorm=%d", k,
                     renorm);
            kt_check_grad(name, dl, fd, S * E);
            free(c.logits);
        }
    /* Fewer local experts than k: nothing changes. */
    int few[E] = {0, 1, 1, 1, 1, 1};
    distinct_logits(x, S, E);
    swy_k_gate_topk(x, S, E, 2, 1, idx, w, p);
    memcpy(orig, idx, sizeof(int) * S * 2);
    CHECK(swy_k_gate_topo_reroute(p, S, E, 2, 1, few, 0, 0.0, idx, w) == 0);
    CHECK(memcmp(orig, idx, sizeof(int) * S * 2) == 0);
}

static void test_capacity(void)
{
    CHECK(swy_k_gate_capacity(1.2, 50, 2, 12) == 10);  /* 1.2*100/12 = 10 */
    CHECK(swy_k_gate_capacity(1.2, 10, 1, 1) == 12);
    CHECK(swy_k_gate_capacity(1.0, 10, 1, 3) == 4);    /* 3.33 -> 4 */
    CHECK(swy_k_gate_capacity(2.4, 5, 1, 1) == 12);
    CHECK(swy_k_gate_capacity(1.25, 8, 2, 4) == 5);
    CHECK(swy_k_gate_capacity(1.1, 100, 1, 10) == 11); /* 1.1*10 */
    CHECK(swy_k_gate_capacity(1.0, 0, 2, 4) == 0);
    CHECK(swy_k_gate_capacity(0.0, 7, 2, 4) == 14);    /* no limit */

    /* Per-expert shares: uniform shares give the uniform capacity. */
    double uniform[12], ta[4] = {0.45, 0.45, 0.05, 0.05};
    int cap[12];
    for (int e = 0; e < 12; e++)
        uniform[e] = 1.0 / 12;
    swy_k_gate_capacity_shares(1.2, 50, 2, 12, uniform, cap);
    for (int e = 0; e < 12; e++)
        CHECK(cap[e] == swy_k_gate_capacity(1.2, 50, 2, 12));
    /* TA-MoE's shares: 1.25 * 64 * 2 * 0.45 = 72, 0.05 -> 8. */
    swy_k_gate_capacity_shares(1.25, 64, 2, 4, ta, cap);
    CHECK(cap[0] == 72 && cap[1] == 72 && cap[2] == 8 && cap[3] == 8);
    swy_k_gate_capacity_shares(0.0, 64, 2, 4, ta, cap);
    CHECK(cap[0] == -1 && cap[3] == -1);                /* no limit */
}

static void test_drop_by_hand(void)
{
    /* S=4, k=2, E=2, capacity 2. */
    const int idx0[8] = {0, 1, 0, 1, 1, 0, 0, 1};
    int idx[8], load[2];
    float w[8];
    for (int i = 0; i < 8; i++)
        w[i] = 0.1f * (float)(i + 1);

    memcpy(idx, idx0, sizeof(idx));
    int d = swy_k_gate_drop(idx, w, 4, 2, 2, 2, SWY_K_DROP_TOKEN_ORDER, load);
    const int want_tok[8] = {0, 1, 0, 1, -1, -1, -1, -1};
    CHECK(d == 4 && load[0] == 2 && load[1] == 2);
    for (int i = 0; i < 8; i++) {
        CHECK(idx[i] == want_tok[i]);
        CHECK(w[i] == (want_tok[i] < 0 ? 0.0f : 0.1f * (float)(i + 1)));
    }

    /* Choice order: first choices t0 e0, t1 e0, t2 e1 kept, t3 e0 dropped
     * (e0 full); then second choices t0 e1 kept (e1 now full), t1 e1,
     * t2 e0, t3 e1 dropped. */
    memcpy(idx, idx0, sizeof(idx));
    for (int i = 0; i < 8; i++)
        w[i] = 0.1f * (float)(i + 1);
    d = swy_k_gate_drop(idx, w, 4, 2, 2, 2, SWY_K_DROP_CHOICE_ORDER, load);
    const int want_choice[8] = {0, 1, 0, -1, 1, -1, -1, -1};
    CHECK(d == 4 && load[0] == 2 && load[1] == 2);
    for (int i = 0; i < 8; i++)
        CHECK(idx[i] == want_choice[i]);

    /* No limit, and slots already dropped stay dropped and uncounted. */
    int idx2[4] = {1, -1, 1, 0};
    float w2[4] = {1, 0, 1, 1};
    d = swy_k_gate_drop(idx2, w2, 2, 2, 2, -1, SWY_K_DROP_TOKEN_ORDER, load);
    CHECK(d == 0 && load[0] == 1 && load[1] == 2 && idx2[1] == -1);
    /* Capacity 0 drops everything. */
    d = swy_k_gate_drop(idx2, w2, 2, 2, 2, 0, SWY_K_DROP_TOKEN_ORDER, load);
    CHECK(d == 3 && load[0] == 0 && load[1] == 0);

    /* A capacity per expert: e0 keeps 3, e1 keeps 1 (token order). */
    const int cap_each[2] = {3, 1};
    memcpy(idx, idx0, sizeof(idx));
    for (int i = 0; i < 8; i++)
        w[i] = 0.1f * (float)(i + 1);
    d = swy_k_gate_drop_each(idx, w, 4, 2, 2, cap_each,
                             SWY_K_DROP_TOKEN_ORDER, load);
    const int want_each[8] = {0, 1, 0, -1, -1, 0, -1, -1};
    CHECK(d == 4 && load[0] == 3 && load[1] == 1);
    for (int i = 0; i < 8; i++)
        CHECK(idx[i] == want_each[i]);
    /* Equal capacities give swy_k_gate_drop's result. */
    const int cap_same[2] = {2, 2};
    memcpy(idx, idx0, sizeof(idx));
    d = swy_k_gate_drop_each(idx, w, 4, 2, 2, cap_same,
                             SWY_K_DROP_CHOICE_ORDER, load);
    CHECK(d == 4);
    for (int i = 0; i < 8; i++)
        CHECK(idx[i] == want_choice[i]);
}

static void test_drop_random(void)
{
    enum { S = 60, E = 6, K = 2 };
    float x[S * E], p[S * E], w[S * K], w0[S * K];
    int idx[S * K], idx0[S * K], load[E];
    kt_fill(x, S * E, -1, 1);
    for (int t = 0; t < S; t++)
        x[t * E + 2] += 1.5f; /* make expert 2 popular so it overflows */
    swy_k_gate_topk(x, S, E, K, 1, idx0, w0, p);
    int cap = swy_k_gate_capacity(1.2, S, K, E);
    for (int order = 0; order <= 1; order++) {
        memcpy(idx, idx0, sizeof(idx));
        memcpy(w, w0, sizeof(w));
        int d = swy_k_gate_drop(idx, w, S, K, E, cap,
                                (swy_k_drop_order_t)order, load);
        /* Reference: list each expert's slots in claim order, keep the
         * first cap. */
        int keep[S * K], dropped = 0;
        for (int e = 0; e < E; e++) {
            int seen = 0;
            for (int a = 0; a < S * K; a++) {
                int s = order == 0 ? a : (a % S) * K + a / S;
                if (idx0[s] != e)
                    continue;
                keep[s] = seen++ < cap;
                dropped += !keep[s];
            }
            CHECK(load[e] == (seen < cap ? seen : cap));
        }
        CHECK(d == dropped && dropped > 0);
        for (int s = 0; s < S * K; s++) {
            CHECK(idx[s] == (keep[s] ? idx0[s] : -1));
            CHECK(w[s] == (keep[s] ? w0[s] : 0.0f));
        }
    }
}

static void test_aux_loss(void)
{
    enum { S = 8, E = 4 };
    float x[S * E], p[S * E], f[E], w[S * 2], dp[S * E], dl[S * E];
    int idx[S * 2];

    /* A uniform gate scores exactly 1 (f from ties: all to expert 0 with
     * k = 1, so f = (1,0,0,0) and m = 1/4: E * 1 * 1/4 = 1). */
    for (int i = 0; i < S * E; i++)
        x[i] = 0.5f;
    swy_k_softmax_fwd(x, S, E, p);
    CHECK(fabs(swy_k_gate_aux_loss(p, S, E, 1, f) - 1.0) < 1e-6);
    CHECK(f[0] == 1.0f && f[1] == 0.0f);
    CHECK(swy_k_gate_aux_loss(p, 0, E, 1, f) == 0.0f);

    for (int f_slots = 1; f_slots <= 2; f_slots++) {
        distinct_logits(x, S, E);
        swy_k_softmax_fwd(x, S, E, p);
        float l = swy_k_gate_aux_loss(p, S, E, f_slots, f);
        /* Reference in double, choices by the reference top-k. */
        double fd_f[E] = {0}, m[E] = {0}, pd[E], xd[E];
        int ri[2];
        for (int t = 0; t < S; t++) {
            for (int e = 0; e < E; e++)
                xd[e] = x[t * E + e];
            kt_softmax(xd, E, pd);
            ref_topk(pd, E, f_slots, ri);
            for (int j = 0; j < f_slots; j++)
                fd_f[ri[j]] += 1.0 / (S * f_slots);
            for (int e = 0; e < E; e++)
                m[e] += pd[e] / S;
        }
        double want = 0;
        for (int e = 0; e < E; e++)
            want += E * fd_f[e] * m[e];
        CHECK(fabs(l - want) < 1e-6 * fmax(1, want));
        kt_check_fwd("aux f", f, fd_f, E);

        /* Gradient through m only, by FD with f frozen; and together with
         * the top-k weights, which checks that aux_bwd accumulates. */
        const float coef = 0.37f;
        int kept[S * 2];
        float gw[S * 2];
        swy_k_gate_topk(x, S, E, 2, 1, idx, w, p);
        kt_fill(gw, S * 2, -1, 1);
        for (int s = 0; s < S * 2; s++)
            kept[s] = 1;
        swy_k_gate_topk_bwd(p, gw, S, E, 2, 1, dp);
        swy_k_gate_aux_loss_bwd(f, S, E, coef, dp);
        swy_k_softmax_bwd(p, dp, S, E, dl);
        gate_ctx c = {S, E, 2, 1, 0, kt_dup_d(x, S * E), idx, kept, gw,
                      coef, fd_f};
        double g[S * E];
        kt_fd(gate_loss, &c, c.logits, S * E, g);
        kt_check_grad(f_slots == 1 ? "aux+topk f_slots=1"
                                   : "aux+topk f_slots=2", dl, g, S * E);

        /* Aux alone. */
        memset(dp, 0, sizeof(dp));
        swy_k_gate_aux_loss_bwd(f, S, E, 1.0f, dp);
        swy_k_softmax_bwd(p, dp, S, E, dl);
        memset(gw, 0, sizeof(gw));
        c.aux_coef = 1.0;
        kt_fd(gate_loss, &c, c.logits, S * E, g);
        kt_check_grad("aux alone", dl, g, S * E);
        free(c.logits);
    }
}

/* Gate logits: x wg, the same GEMM as linear without bias. */
typedef struct {
    int S, H, E;
    double *x, *wg;
    const float *g;
} logits_ctx;

static double logits_loss(void *vctx)
{
    logits_ctx *c = vctx;
    double L = 0;
    for (int t = 0; t < c->S; t++)
        for (int e = 0; e < c->E; e++) {
            double acc = 0;
            for (int h = 0; h < c->H; h++)
                acc += c->x[t * c->H + h] * c->wg[h * c->E + e];
            L += c->g[t * c->E + e] * acc;
        }
    return L;
}

static void test_gate_logits(void)
{
    enum { S = 5, H = 7, E = 4 };
    float x[S * H], wg[H * E], l[S * E], g[S * E], dx[S * H], dwg[H * E];
    kt_fill(x, S * H, -1, 1);
    kt_fill(wg, H * E, -1, 1);
    kt_fill(g, S * E, -1, 1);
    swy_k_gate_logits_fwd(x, wg, S, H, E, l);
    double want[S * E];
    for (int t = 0; t < S; t++)
        for (int e = 0; e < E; e++) {
            double acc = 0;
            for (int h = 0; h < H; h++)
                acc += (double)x[t * H + h] * wg[h * E + e];
            want[t * E + e] = acc;
        }
    kt_check_fwd("gate logits", l, want, S * E);
    memset(dwg, 0, sizeof(dwg));
    swy_k_gate_logits_bwd(x, wg, g, S, H, E, dx, dwg);
    logits_ctx c = {S, H, E, kt_dup_d(x, S * H), kt_dup_d(wg, H * E), g};
    double fdx[S * H], fdw[H * E];
    kt_fd(logits_loss, &c, c.x, S * H, fdx);
    kt_fd(logits_loss, &c, c.wg, H * E, fdw);
    kt_check_grad("gate logits dx", dx, fdx, S * H);
    kt_check_grad("gate logits dwg", dwg, fdw, H * E);
    free(c.x);
    free(c.wg);
}

int main(void)
{
    kt_seed(20240601);
    test_softmax();
    test_topk_values();
    test_topk_ties();
    test_gate_bwd();
    test_topo_reroute();
    test_capacity();
    test_drop_by_hand();
    test_drop_random();
    test_aux_loss();
    test_gate_logits();
    return kt_finish("kernels_gate");
}
