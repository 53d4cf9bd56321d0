/* Dense-model kernels: linear, GELU, add, embedding, cross-entropy and
 * Adam, against double references, central differences (tolerances in
 * ktest.h) and a two-step Adam example computed by hand. */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

typedef struct {
    int N, in, out;
    double *x, *w, *b;
    const float *g;
} lin_ctx;

static void ref_linear(const lin_ctx *c, double *y)
{
    for (int r = 0; r < c->N; r++)
        for (int o = 0; o < c->out; o++) {
            double acc = c->b != NULL ? c->b[o] : 0.0;
            for (int i = 0; i < c->in; i++)
                acc += c->x[r * c->in + i] * c->w[i * c->out + o];
            y[r * c->out + o] = acc;
        }
}

static double lin_loss(void *vctx)
{
    lin_ctx *c = vctx;
    size_t n = (size_t)c->N * c->out;
    double *y = kt_alloc(n * 8), L = 0;
    ref_linear(c, y);
    for (size_t i = 0; i < n; i++)
        L += c->g[i] * y[i];
    free(y);
    return L;
}

static void check_linear(int N, int in, int out, int with_bias)
{
    size_t nx = (size_t)N * in, nw = (size_t)in * out, ny = (size_t)N * out;
    float *x = kt_alloc(nx * 4), *w = kt_alloc(nw * 4), *b = kt_alloc(out * 4);
    float *y = kt_alloc(ny * 4), *g = kt_alloc(ny * 4);
    float *dx = kt_alloc(nx * 4), *dw = kt_alloc(nw * 4);
    float *db = kt_alloc(out * 4);
    kt_fill(x, nx, -1, 1);
    kt_fill(w, nw, -1, 1);
    kt_fill(b, out, -1, 1);
    kt_fill(g, ny, -1, 1);
    swy_k_linear_fwd(x, w, with_bias ? b : NULL, N, in, out, y);
    lin_ctx c = {N, in, out, kt_dup_d(x, nx), kt_dup_d(w, nw),
                 with_bias ? kt_dup_d(b, out) : NULL, g};
    double *want = kt_alloc(ny * 8), *fd = kt_alloc((nx + nw + out) * 8);
    ref_linear(&c, want);
    kt_check_fwd("linear", y, want, ny);

    for (size_t i = 0; i < nw; i++)
        dw[i] = 1.0f; /* accumulated onto */
    swy_k_linear_bwd(x, w, g, N, in, out, dx, dw, with_bias ? db : NULL);
    for (size_t i = 0; i < nw; i++)
        dw[i] -= 1.0f;
    kt_fd(lin_loss, &c, c.x, nx, fd);
    kt_check_grad("linear dx", dx, fd, nx);
    kt_fd(lin_loss, &c, c.w, nw, fd);
    kt_check_grad("linear dw", dw, fd, nw);
    if (with_bias) {
        kt_fd(lin_loss, &c, c.b, out, fd);
        kt_check_grad("linear db", db, fd, out);
    }
    /* dx may be skipped; dw still accumulates. */
    float *dw2 = kt_alloc(nw * 4);
    swy_k_linear_bwd(x, w, g, N, in, out, NULL, dw2, NULL);
    for (size_t i = 0; i < nw; i++)
        CHECK(fabs(dw2[i] - dw[i]) <= 1e-5 * fmax(1, fabs(dw[i])));
    free(dw2);
    free(c.x);
    free(c.w);
    free(c.b);
    free(want);
    free(fd);
    float *bufs[] = {x, w, b, y, g, dx, dw, db};
    for (size_t i = 0; i < 8; i++)
        free(bufs[i]);
}

static void test_linear_zero_rows(void)
{
    float w[6] = {1, 2, 3, 4, 5, 6}, b[3] = {1, 1, 1}, dw[6] = {7}, db[3] = {7};
    float y[1] = {42}, x[1] = {0}, dx[1] = {42};
    swy_k_linear_fwd(x, w, b, 0, 2, 3, y);
    CHECK(y[0] == 42); /* nothing written */
    swy_k_linear_bwd(x, w, y, 0, 2, 3, dx, dw, db);
    CHECK(dx[0] == 42 && dw[0] == 7 && dw[1] == 0 && db[0] == 7);
}

static double gelu_at;
static double gelu_loss(void *vctx)
{
    (void)vctx;
    return kt_gelu(gelu_at);
}

static void test_gelu_add(void)
{
    enum { N = 41 };
    float x[N], y[N], dy[N], dx[N];
    double want[N], fd[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(-10.0 + 0.5 * i) + 0.013f;
    swy_k_gelu_fwd(x, N, y);
    for (int i = 0; i < N; i++)
        want[i] = kt_gelu(x[i]);
    kt_check_fwd("gelu", y, want, N);
    for (int i = 0; i < N; i++)
        dy[i] = 1.0f;
    swy_k_gelu_bwd(x, dy, N, dx);
    for (int i = 0; i < N; i++) {
        gelu_at = x[i];
        kt_fd(gelu_loss, NULL, &gelu_at, 1, &fd[i]);
    }
    kt_check_grad("gelu'", dx, fd, N);
    /* Known values of the tanh form: gelu(0) = 0, gelu(1) = 0.841192. */
    float z = 0.0f, one = 1.0f, g0, g1;
    swy_k_gelu_fwd(&z, 1, &g0);
    swy_k_gelu_fwd(&one, 1, &g1);
    CHECK(g0 == 0.0f && fabs(g1 - 0.8411920) < 1e-6);

    float a[3] = {1, 2, 3}, s[3] = {10, 20, 30};
    swy_k_add(a, 3, s);
    CHECK(s[0] == 11 && s[1] == 22 && s[2] == 33);
}

static void test_embed(void)
{
    enum { V = 6, H = 4, S = 9 };
    const int ids[S] = {3, 0, 3, 5, 1, 3, 0, 2, 5};
    float table[V * H], out[S * H], dout[S * H], dtab[V * H];
    kt_fill(table, V * H, -1, 1);
    kt_fill(dout, S * H, -1, 1);
    swy_k_embed_fwd(table, ids, S, H, out);
    for (int t = 0; t < S; t++)
        CHECK(memcmp(out + t * H, table + ids[t] * H, H * 4) == 0);
    for (int i = 0; i < V * H; i++)
        dtab[i] = 0.5f;
    swy_k_embed_bwd(dout, ids, S, H, dtab);
    for (int v = 0; v < V; v++)
        for (int h = 0; h < H; h++) {
            double want = 0.5;
            for (int t = 0; t < S; t++)
                if (ids[t] == v)
                    want += dout[t * H + h];
            CHECK(fabs(dtab[v * H + h] - want) < 1e-6);
        }
    /* Row 4 is never looked up: untouched. */
    CHECK(dtab[4 * H] == 0.5f);
}

typedef struct {
    int S, C;
    double *logits;
    const int *labels;
} xent_ctx;

static double ref_xent(void *vctx)
{
    xent_ctx *c = vctx;
    double L = 0;
    int n = 0;
    for (int t = 0; t < c->S; t++) {
        if (c->labels[t] < 0)
            continue;
        const double *x = c->logits + t * c->C;
        double m = x[0], s = 0;
        for (int i = 1; i < c->C; i++)
            m = x[i] > m ? x[i] : m;
        for (int i = 0; i < c->C; i++)
            s += exp(x[i] - m);
        L += -(x[c->labels[t]] - m - log(s));
        n++;
    }
    return n ? L / n : 0.0;
}

static void test_xent(void)
{
    enum { S = 6, C = 5 };
    const int labels[S] = {2, 0, -1, 4, 4, 1};
    float x[S * C], p[S * C], dl[S * C];
    kt_fill(x, S * C, -4, 4);
    x[7] = 70.0f; /* large logits must not overflow */
    float loss = swy_k_xent_fwd(x, labels, S, C, p);
    xent_ctx c = {S, C, kt_dup_d(x, S * C), labels};
    double want = ref_xent(&c);
    CHECK(fabs(loss - want) < 1e-5 * fmax(1, want));
    double pd[S * C];
    for (int t = 0; t < S; t++)
        kt_softmax(c.logits + t * C, C, pd + t * C);
    kt_check_fwd("xent probs", p, pd, S * C);
    CHECK(swy_k_xent_fwd(x, labels, S, C, NULL) == loss);

    const float dloss = 1.7f;
    swy_k_xent_bwd(x, labels, S, C, dloss, dl);
    double fd[S * C];
    kt_fd(ref_xent, &c, c.logits, S * C, fd);
    for (int i = 0; i < S * C; i++)
        fd[i] *= dloss;
    kt_check_grad("xent", dl, fd, S * C);
    for (int i = 0; i < C; i++)
        CHECK(dl[2 * C + i] == 0.0f); /* ignored token */

    /* Uniform logits over C classes: loss log C. */
    float u[C] = {0};
    int lab = 3;
    CHECK(fabs(swy_k_xent_fwd(u, &lab, 1, C, NULL) - log(C)) < 1e-6);
    /* Nothing counted: loss and gradient 0. */
    const int none[2] = {-1, -1};
    CHECK(swy_k_xent_fwd(x, none, 2, C, NULL) == 0.0f);
    swy_k_xent_bwd(x, none, 2, C, 1.0f, dl);
    for (int i = 0; i < 2 * C; i++)
        CHECK(dl[i] == 0.0f);
    free(c.logits);
}

/* Two Adam steps on p = 1 with g = 0.5 then -0.25, lr 0.1, betas 0.9 and
 * 0.999, eps 1e-8, worked by hand:
 *  step 1: m = 0.05, v = 0.00025; m^ = 0.05/0.1 = 0.5, v^ = 0.00025/0.001
 *          = 0.25; p = 1 - 0.1 * 0.5/0.5 = 0.9.
 *  step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 =
 *          0.00031225; m^ = 0.02/0.19 = 0.1052632, v^ = 0.00031225/0.001999
 *          = 0.1562031, sqrt = 0.3952254; p = 0.9 - 0.1 * 0.1052632 /
 *          0.3952254 = 0.9 - 0.0266337 = 0.8733663.
 * AdamW, wd 0.1: step 1 p = 1 - 0.01 = 0.99, then - 0.1 = 0.89; step 2
 *          p = 0.89 - 0.0089 = 0.8811, then - 0.0266337 = 0.8544663 (same
 *          m, v as above).
 * L2, wd 0.1: step 1 g = 0.6: m = 0.06, v = 0.00036, m^ = 0.6, v^ = 0.36,
 *          p = 0.9; step 2 g = -0.25 + 0.09 = -0.16: m = 0.054 - 0.016 =
 *          0.038, v = 0.00035964 + 0.0000256 = 0.00038524; m^ = 0.2,
 *          v^ = 0.1927164, sqrt = 0.4389947; p = 0.9 - 0.0455587 =
 *          0.8544413.
 * Element 4 has g = 0 then 1 from p = -2: step 1 leaves it (m = v = 0);
 *          step 2: m = 0.1, v = 0.001, m^ = 0.1/0.19 = 0.5263158, v^ =
 *          0.001/0.001999 = 0.5002501, sqrt = 0.7072836; p = -2 - 0.0744137
 *          = -2.0744137. */
static void test_adam(void)
{
    float p[2], m[2], v[2];
    const float g1[2] = {0.5f, 0.0f}, g2[2] = {-0.25f, 1.0f};
    swy_k_adam_params_t hp = {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0};

    p[0] = 1.0f, p[1] = -2.0f;
    memset(m, 0, sizeof(m));
    memset(v, 0, sizeof(v));
    swy_k_adam_step(p, g1, m, v, 2, &hp, 1);
    /* v to 1e-4 relative: 0.999f is 0.99900001, so 1 - beta2 in fp32 is
     * 1.3e-5 off; bias correction cancels it in p. */
    CHECK(fabs(p[0] - 0.9) < 1e-6 && fabs(m[0] - 0.05) < 1e-7 &&
          fabs(v[0] - 0.00025) < 1e-4 * 0.00025);
    CHECK(p[1] == -2.0f && m[1] == 0.0f && v[1] == 0.0f);
    swy_k_adam_step(p, g2, m, v, 2, &hp, 2);
    CHECK(fabs(p[0] - 0.8733663) < 1e-6);
    CHECK(fabs(m[0] - 0.02) < 1e-7 &&
          fabs(v[0] - 0.00031225) < 1e-4 * 0.00031225);
    CHECK(fabs(p[1] - -2.0744137) < 1e-6);

    hp.weight_decay = 0.1f;
    hp.decoupled = 1;
    p[0] = 1.0f;
    m[0] = v[0] = 0.0f;
    swy_k_adam_step(p, g1, m, v, 1, &hp, 1);
    CHECK(fabs(p[0] - 0.89) < 1e-6);
    swy_k_adam_step(p, g2, m, v, 1, &hp, 2);
    CHECK(fabs(p[0] - 0.8544663) < 1e-6);

    hp.decoupled = 0;
    p[0] = 1.0f;
    m[0] = v[0] = 0.0f;
    swy_k_adam_step(p, g1, m, v, 1, &hp, 1);
    CHECK(fabs(p[0] - 0.9) < 1e-6 && fabs(m[0] - 0.06) < 1e-7);
    swy_k_adam_step(p, g2, m, v, 1, &hp, 2);
    CHECK(fabs(p[0] - 0.8544413) < 1e-6 && fabs(m[0] - 0.038) < 1e-7);
}

int main(void)
{
    kt_seed(3);
    check_linear(5, 7, 3, 1);
    check_linear(1, 1, 1, 0);
    check_linear(13, 4, 9, 1);
    swy_k_blas_set_threads(1); /* same results on one BLAS thread */
    check_linear(32, 24, 20, 1);
    test_linear_zero_rows();
    test_gelu_add();
    test_embed();
    test_xent();
    test_adam();
    return kt_finish("kernels_dense");
}
