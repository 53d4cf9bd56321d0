/* A small LSTM over the proportions of all experts at once (Cong et al.
 * train one LSTM on the whole expert-load vector). Plain C: one layer,
 * a linear read-out, backpropagation through time, Adam, mini-batches of
 * MINIBATCH windows, global gradient-norm clipping. The series is
 * averaged in blocks of cfg.lstm_block steps first: per-step sampling
 * noise carries no information about the load hundreds of steps ahead,
 * and blocks let a forecast of h steps feed itself back h/block times
 * instead of h times. */
#include <math.h>
#include <string.h>

#include "load/load_impl.h"
#include "util/alloc.h"
#include "util/status.h"

enum { MINIBATCH = 8 };
#define CLIP_NORM 1.0
#define MIN_SCALE 1e-4 /* proportion units: a constant series stays 0 */

struct swy_load_lstm {
    int E, H, L, block;
    double *mu;    /* [E] per-expert mean of the fit series' blocks */
    double scale;  /* one global standard deviation */
    double *theta; /* W [4H][E+H], b [4H], Wy [E][H], by [E] */
    size_t n_theta;
};

static const char subsys[] = "load";

static size_t off_b(const struct swy_load_lstm *m)
{
    return (size_t)4 * m->H * (m->E + m->H);
}
static size_t off_wy(const struct swy_load_lstm *m)
{
    return off_b(m) + (size_t)4 * m->H;
}
static size_t off_by(const struct swy_load_lstm *m)
{
    return off_wy(m) + (size_t)m->E * m->H;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}
static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

/* Per-timestep activations kept for backprop. */
typedef struct {
    double *xh;   /* [L][E+H] */
    double *gate; /* [L][4H]: i, f, g, o after their nonlinearities */
    double *c;    /* [L+1][H]: c[0] = initial 0 */
    double *h;    /* [L+1][H] */
} trace_t;

/* One cell step: from x (E) and the state h, c (H) to h_out, c_out;
 * gate (4H) and xh (E+H) record the activations when not NULL. */
static void cell(const struct swy_load_lstm *m, const double *x,
                 const double *h, const double *c, double *h_out,
                 double *c_out, double *gate, double *xh)
{
    int E = m->E, H = m->H, K = E + H;
    const double *W = m->theta, *b = m->theta + off_b(m);
    double a[4 * 256];
    double xh_local[512 + 256];
    double *v = xh != NULL ? xh : xh_local;
    memcpy(v, x, (size_t)E * sizeof(double));
    memcpy(v + E, h, (size_t)H * sizeof(double));
    for (int r = 0; r < 4 * H; r++) {
        const double *w = W + (size_t)r * K;
        double s = b[r];
        for (int k = 0; k < K; k++)
            s += w[k] * v[k];
        a[r] = s;
    }
    for (int j = 0; j < H; j++) {
        double gi = sigmoid(a[j]), gf = sigmoid(a[H + j]);
        double gg = tanh(a[2 * H + j]), go = sigmoid(a[3 * H + j]);
        double cn = gf * c[j] + gi * gg;
        c_out[j] = cn;
        h_out[j] = go * tanh(cn);
        if (gate != NULL) {
            gate[j] = gi;
            gate[H + j] = gf;
            gate[2 * H + j] = gg;
            gate[3 * H + j] = go;
        }
    }
}

static void readout(const struct swy_load_lstm *m, const double *h, double *y)
{
    const double *Wy = m->theta + off_wy(m), *by = m->theta + off_by(m);
    for (int e = 0; e < m->E; e++) {
        double s = by[e];
        for (int j = 0; j < m->H; j++)
            s += Wy[(size_t)e * m->H + j] * h[j];
        y[e] = s;
    }
}

/* Forward over L inputs z[L][E], loss against target[E], and accumulate
 * the gradient into g. Returns the loss. */
static double forward_backward(const struct swy_load_lstm *m,
                               const double *z, const double *target,
                               trace_t *tr, double *g)
{
    int E = m->E, H = m->H, L = m->L, K = E + H;
    memset(tr->c, 0, (size_t)H * sizeof(double));
    memset(tr->h, 0, (size_t)H * sizeof(double));
    for (int t = 0; t < L; t++)
        cell(m, z + (size_t)t * E, tr->h + (size_t)t * H,
             tr->c + (size_t)t * H, tr->h + (size_t)(t + 1) * H,
             tr->c + (size_t)(t + 1) * H, tr->gate + (size_t)t * 4 * H,
             tr->xh + (size_t)t * K);
    const double *hL = tr->h + (size_t)L * H;
    double y[512], dy[512], dh[256], dc[256], da[4 * 256];
    readout(m, hL, y);
    double loss = 0.0;
    for (int e = 0; e < E; e++) {
        double diff = y[e] - target[e];
        loss += diff * diff / E;
        dy[e] = 2.0 * diff / E;
    }
    const double *W = m->theta, *Wy = m->theta + off_wy(m);
    double *gW = g, *gb = g + off_b(m), *gWy = g + off_wy(m),
           *gby = g + off_by(m);
    memset(dh, 0, (size_t)H * sizeof(double));
    memset(dc, 0, (size_t)H * sizeof(double));
    for (int e = 0; e < E; e++) {
        gby[e] += dy[e];
        for (int j = 0; j < H; j++) {
            gWy[(size_t)e * H + j] += dy[e] * hL[j];
            dh[j] += Wy[(size_t)e * H + j] * dy[e];
        }
    }
    for (int t = L - 1; t >= 0; t--) {
        const double *gate = tr->gate + (size_t)t * 4 * H;
        const double *cp = tr->c + (size_t)t * H;
        const double *cn = tr->c + (size_t)(t + 1) * H;
        const double *xh = tr->xh + (size_t)t * K;
        for (int j = 0; j < H; j++) {
            double gi = gate[j], gf = gate[H + j], gg = gate[2 * H + j],
                   go = gate[3 * H + j];
            double tc = tanh(cn[j]);
            double d_o = dh[j] * tc;
            double dcj = dc[j] + dh[j] * go * (1.0 - tc * tc);
            da[j] = dcj * gg * gi * (1.0 - gi);
            da[H + j] = dcj * cp[j] * gf * (1.0 - gf);
            da[2 * H + j] = dcj * gi * (1.0 - gg * gg);
            da[3 * H + j] = d_o * go * (1.0 - go);
            dc[j] = dcj * gf;
        }
        memset(dh, 0, (size_t)H * sizeof(double));
        for (int r = 0; r < 4 * H; r++) {
            const double *w = W + (size_t)r * K;
            double *gw = gW + (size_t)r * K;
            double d = da[r];
            gb[r] += d;
            for (int k = 0; k < K; k++)
                gw[k] += d * xh[k];
            for (int j = 0; j < H; j++)
                dh[j] += w[E + j] * d;
        }
    }
    return loss;
}

/* Block means of the last nb*block steps of series [n][E] into B[nb][E]
 * (blocks aligned so that the last one ends at the last step). */
static void block_means(const double *series, int n, int E, int block,
                        int nb, double *B)
{
    int first = n - nb * block;
    for (int i = 0; i < nb; i++)
        for (int e = 0; e < E; e++) {
            double s = 0.0;
            for (int k = 0; k < block; k++)
                s += series[(size_t)(first + i * block + k) * E + e];
            B[(size_t)i * E + e] = s / block;
        }
}

void swy_load_lstm_destroy(swy_load_lstm_t *m)
{
    if (m == NULL)
        return;
    swy_free(m->theta);
    swy_free(m->mu);
    swy_free(m);
}

swy_status_t swy_load_lstm_fit(const swy_load_predictor_config_t *cfg,
                               int n_experts, const double *series,
                               int n_steps, swy_load_lstm_t **lstm_p)
{
    int E = n_experts, H = cfg->lstm_hidden, L = cfg->lstm_lookback;
    int block = cfg->lstm_block, nb = n_steps / block;
    int n_samples = nb - L;
    swy_status_t st = SWY_ERR_NO_MEMORY;
    struct swy_load_lstm *m = swy_calloc(1, sizeof(*m));
    double *B = NULL, *g = NULL, *am = NULL, *av = NULL;
    int *order = NULL;
    trace_t tr = {0};
    if (m == NULL)
        goto out;
    m->E = E;
    m->H = H;
    m->L = L;
    m->block = block;
    m->n_theta = off_by(m) + (size_t)E;
    m->mu = swy_calloc((size_t)E, sizeof(double));
    m->theta = swy_calloc(m->n_theta, sizeof(double));
    B = swy_calloc((size_t)nb * E, sizeof(double));
    g = swy_calloc(m->n_theta, sizeof(double));
    am = swy_calloc(m->n_theta, sizeof(double));
    av = swy_calloc(m->n_theta, sizeof(double));
    order = swy_calloc((size_t)n_samples, sizeof(int));
    tr.xh = swy_calloc((size_t)L * (E + H), sizeof(double));
    tr.gate = swy_calloc((size_t)L * 4 * H, sizeof(double));
    tr.c = swy_calloc((size_t)(L + 1) * H, sizeof(double));
    tr.h = swy_calloc((size_t)(L + 1) * H, sizeof(double));
    if (!m->mu || !m->theta || !B || !g || !am || !av || !order || !tr.xh ||
        !tr.gate || !tr.c || !tr.h)
        goto out;

    /* Standardize: per-expert mean, one global scale. */
    block_means(series, n_steps, E, block, nb, B);
    double ss = 0.0;
    for (int e = 0; e < E; e++) {
        double s = 0.0;
        for (int i = 0; i < nb; i++)
            s += B[(size_t)i * E + e];
        m->mu[e] = s / nb;
        for (int i = 0; i < nb; i++) {
            double dv = B[(size_t)i * E + e] - m->mu[e];
            ss += dv * dv;
        }
    }
    m->scale = sqrt(ss / ((double)nb * E));
    if (m->scale < MIN_SCALE)
        m->scale = MIN_SCALE;
    for (size_t i = 0; i < (size_t)nb * E; i++)
        B[i] = (B[i] - m->mu[i % E]) / m->scale;

    uint64_t rng = cfg->lstm_seed;
    double bound = 1.0 / sqrt((double)H);
    for (size_t i = 0; i < m->n_theta; i++)
        m->theta[i] = (2.0 * uniform01(&rng) - 1.0) * bound;
    for (int j = 0; j < H; j++) /* forget-gate bias 1: remember at first */
        m->theta[off_b(m) + H + j] = 1.0;
    memset(m->theta + off_by(m), 0, (size_t)E * sizeof(double));

    const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double lr = cfg->lstm_learning_rate;
    long adam_t = 0;
    for (int i = 0; i < n_samples; i++)
        order[i] = i;
    for (int epoch = 0; epoch < cfg->lstm_epochs; epoch++) {
        for (int i = n_samples - 1; i > 0; i--) { /* Fisher–Yates */
            int j = (int)(splitmix(&rng) % (uint64_t)(i + 1));
            int tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        for (int s0 = 0; s0 < n_samples; s0 += MINIBATCH) {
            int s1 = s0 + MINIBATCH < n_samples ? s0 + MINIBATCH : n_samples;
            memset(g, 0, m->n_theta * sizeof(double));
            for (int s = s0; s < s1; s++) {
                const double *z = B + (size_t)order[s] * E;
                forward_backward(m, z, z + (size_t)L * E, &tr, g);
            }
            double norm = 0.0;
            for (size_t i = 0; i < m->n_theta; i++) {
                g[i] /= (s1 - s0);
                norm += g[i] * g[i];
            }
            norm = sqrt(norm);
            double clip = norm > CLIP_NORM ? CLIP_NORM / norm : 1.0;
            adam_t++;
            double c1 = 1.0 - pow(beta1, (double)adam_t);
            double c2 = 1.0 - pow(beta2, (double)adam_t);
            for (size_t i = 0; i < m->n_theta; i++) {
                double gi = g[i] * clip;
                am[i] = beta1 * am[i] + (1.0 - beta1) * gi;
                av[i] = beta2 * av[i] + (1.0 - beta2) * gi * gi;
                m->theta[i] -= lr * (am[i] / c1) / (sqrt(av[i] / c2) + eps);
            }
        }
    }
    *lstm_p = m;
    m = NULL;
    st = SWY_OK;
out:
    swy_free(tr.h);
    swy_free(tr.c);
    swy_free(tr.gate);
    swy_free(tr.xh);
    swy_free(order);
    swy_free(av);
    swy_free(am);
    swy_free(g);
    swy_free(B);
    swy_load_lstm_destroy(m);
    if (st != SWY_OK)
        return swy_err_set(st, subsys, "swy_load_predictor_fit: no memory "
                           "for an LSTM of %d units over %d steps", H,
                           n_steps);
    return st;
}

swy_status_t swy_load_lstm_predict(const swy_load_lstm_t *m,
                                   const double *history, int n_steps,
                                   int horizon, double *out)
{
    int E = m->E, H = m->H, L = m->L, block = m->block;
    int nb = n_steps / block;
    if (nb > L)
        nb = L;
    if (nb < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_predictor_predict: the LSTM needs at "
                           "least one block of %d steps of history, got %d",
                           block, n_steps);
    /* The block holding step now+horizon is ceil(horizon/block) blocks
     * ahead. Each predicted block joins the input window, and the network
     * re-reads the last nb blocks from a zero state, as in training:
     * carrying the state on past L inputs leaves what it was trained on. */
    int ahead = (horizon + block - 1) / block;
    double *Z = swy_calloc((size_t)(nb + ahead) * E, sizeof(double));
    if (Z == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                           "swy_load_predictor_predict: no memory");
    block_means(history, n_steps, E, block, nb, Z);
    for (size_t i = 0; i < (size_t)nb * E; i++)
        Z[i] = (Z[i] - m->mu[i % E]) / m->scale;
    double h[256], c[256], hn[256], cn[256];
    for (int k = 0; k < ahead; k++) {
        memset(h, 0, (size_t)H * sizeof(double));
        memset(c, 0, (size_t)H * sizeof(double));
        for (int i = k; i < k + nb; i++) {
            cell(m, Z + (size_t)i * E, h, c, hn, cn, NULL, NULL);
            memcpy(h, hn, (size_t)H * sizeof(double));
            memcpy(c, cn, (size_t)H * sizeof(double));
        }
        readout(m, h, Z + (size_t)(k + nb) * E);
    }
    const double *z = Z + (size_t)(nb + ahead - 1) * E;
    for (int e = 0; e < E; e++)
        out[e] = m->mu[e] + m->scale * z[e];
    swy_free(Z);
    return SWY_OK;
}
