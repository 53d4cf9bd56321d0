/* Expert FFN forward against a double loop implementation, and its
 * backward (dx, dW1, db1, dW2, db2) against central differences, over
 * several shapes including experts with zero rows (tolerances in ktest.h). */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

typedef struct {
    int n_experts, H, F, N;
    const int *rows;
    double *x, *w1, *b1, *w2, *b2;
    const float *g; /* [N][H] weights of the scalar loss sum g * y */
} ffn_ctx;

/* y = gelu(x W1 + b1) W2 + b2 per expert, plain loops in double. */
static void ref_ffn(const ffn_ctx *c, double *y)
{
    int H = c->H, F = c->F;
    double *a = malloc((size_t)F * sizeof(double));
    int r = 0;
    for (int e = 0; e < c->n_experts; e++)
        for (int i = 0; i < c->rows[e]; i++, r++) {
            const double *W1 = c->w1 + (size_t)e * H * F;
            const double *W2 = c->w2 + (size_t)e * F * H;
            for (int f = 0; f < F; f++) {
                double acc = c->b1[e * F + f];
                for (int h = 0; h < H; h++)
                    acc += c->x[(size_t)r * H + h] * W1[h * F + f];
                a[f] = kt_gelu(acc);
            }
            for (int h = 0; h < H; h++) {
                double acc = c->b2[e * H + h];
                for (int f = 0; f < F; f++)
                    acc += a[f] * W2[f * H + h];
                y[(size_t)r * H + h] = acc;
            }
        }
    free(a);
}

static double ffn_loss(void *vctx)
{
    ffn_ctx *c = vctx;
    size_t n = (size_t)c->N * c->H;
    double *y = malloc((n ? n : 1) * sizeof(double)), L = 0;
    ref_ffn(c, y);
    for (size_t i = 0; i < n; i++)
        L += c->g[i] * y[i];
    free(y);
    return L;
}

static void check_ffn(int n_experts, const int *rows, int H, int F)
{
    int N = 0;
    for (int e = 0; e < n_experts; e++)
        N += rows[e];
    size_t nw1 = (size_t)n_experts * H * F, nb1 = (size_t)n_experts * F;
    size_t nw2 = nw1, nb2 = (size_t)n_experts * H;
    size_t nx = (size_t)N * H, nh = (size_t)N * F;
    float *x = kt_alloc(nx * 4 + 4), *y = kt_alloc(nx * 4 + 4);
    float *w1 = kt_alloc(nw1 * 4), *b1 = kt_alloc(nb1 * 4);
    float *w2 = kt_alloc(nw2 * 4), *b2 = kt_alloc(nb2 * 4);
    float *hp = kt_alloc(nh * 4 + 4), *ha = kt_alloc(nh * 4 + 4);
    float *dh = kt_alloc(nh * 4 + 4), *g = kt_alloc(nx * 4 + 4);
    float *dx = kt_alloc(nx * 4 + 4);
    float *dw1 = kt_alloc(nw1 * 4), *db1 = kt_alloc(nb1 * 4);
    float *dw2 = kt_alloc(nw2 * 4), *db2 = kt_alloc(nb2 * 4);
    kt_fill(x, nx, -1.5, 1.5);
    kt_fill(w1, nw1, -0.6, 0.6);
    kt_fill(b1, nb1, -0.3, 0.3);
    kt_fill(w2, nw2, -0.6, 0.6);
    kt_fill(b2, nb2, -0.3, 0.3);
    kt_fill(g, nx, -1, 1);

    swy_k_ffn_fwd(x, rows, n_experts, H, F, w1, b1, w2, b2, hp, ha, y);
    ffn_ctx c = {n_experts, H, F, N, rows, kt_dup_d(x, nx),
                 kt_dup_d(w1, nw1), kt_dup_d(b1, nb1), kt_dup_d(w2, nw2),
                 kt_dup_d(b2, nb2), g};
    double *want = kt_alloc(nx * 8 + 8);
    ref_ffn(&c, want);
    char name[96];
    snprintf(name, sizeof(name), "ffn E=%d N=%d H=%d F=%d", n_experts, N, H,
             F);
    kt_check_fwd(name, y, want, nx);
    /* h_act is gelu(h_pre), element for element. */
    for (size_t i = 0; i < nh; i++)
        CHECK(fabs(ha[i] - kt_gelu(hp[i])) <= 1e-6 * fmax(1, fabs(ha[i])));

    /* Parameter gradients accumulate: start them at a known value. */
    const float seed = 0.25f;
    for (size_t i = 0; i < nw1; i++)
        dw1[i] = dw2[i] = seed;
    for (size_t i = 0; i < nb1; i++)
        db1[i] = seed;
    for (size_t i = 0; i < nb2; i++)
        db2[i] = seed;
    swy_k_ffn_bwd(x, hp, ha, g, rows, n_experts, H, F, w1, w2, dh, dx, dw1,
                  db1, dw2, db2);
    for (size_t i = 0; i < nw1; i++) {
        dw1[i] -= seed;
        dw2[i] -= seed;
    }
    for (size_t i = 0; i < nb1; i++)
        db1[i] -= seed;
    for (size_t i = 0; i < nb2; i++)
        db2[i] -= seed;

    double *fd = kt_alloc((nw1 > nx ? nw1 : nx) * 8 + 8);
    kt_fd(ffn_loss, &c, c.x, nx, fd);
    kt_check_grad("ffn dx", dx, fd, nx);
    kt_fd(ffn_loss, &c, c.w1, nw1, fd);
    kt_check_grad("ffn dw1", dw1, fd, nw1);
    kt_fd(ffn_loss, &c, c.b1, nb1, fd);
    kt_check_grad("ffn db1", db1, fd, nb1);
    kt_fd(ffn_loss, &c, c.w2, nw2, fd);
    kt_check_grad("ffn dw2", dw2, fd, nw2);
    kt_fd(ffn_loss, &c, c.b2, nb2, fd);
    kt_check_grad("ffn db2", db2, fd, nb2);
    /* An expert with no rows gets exactly no gradient. */
    for (int e = 0; e < n_experts; e++)
        if (rows[e] == 0) {
            for (int i = 0; i < H * F; i++)
                CHECK(dw1[(size_t)e * H * F + i] == 0.0f &&
                      dw2[(size_t)e * H * F + i] == 0.0f);
            for (int i = 0; i < F; i++)
                CHECK(db1[e * F + i] == 0.0f);
        }

    free(fd);
    free(want);
    free(c.x);
    free(c.w1);
    free(c.b1);
    free(c.w2);
    free(c.b2);
    float *bufs[] = {x, y, w1, b1, w2, b2, hp, ha, dh, g, dx, dw1, db1, dw2,
                     db2};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
}

int main(void)
{
    kt_seed(42);
    const int r1[] = {4, 0, 5};
    const int r2[] = {0};
    const int r3[] = {1, 7};
    const int r4[] = {0, 0, 0, 3};
    const int r5[] = {6};
    check_ffn(3, r1, 6, 10);
    check_ffn(1, r2, 3, 2); /* zero rows in all */
    check_ffn(2, r3, 16, 33);
    check_ffn(4, r4, 5, 4);
    check_ffn(1, r5, 1, 1);
    return kt_finish("kernels_ffn");
}
