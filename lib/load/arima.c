/* ARIMA(p,d,q) per expert, fitted by Hannan–Rissanen least squares:
 * (1) difference d times; (2) a long AR(m) by least squares gives
 * innovation estimates e_t; (3) one regression of w_t on its p lags and
 * q lagged innovations gives the AR and MA coefficients. Cong et al.
 * report ARIMA(5,1,5) among the good predictors of expert loads. The
 * constant is fitted only for d = 0: with d >= 1 it is a drift whose
 * forecast grows linearly with the horizon, which a proportion cannot. */
#include <math.h>
#include <string.h>

#include "load/load_impl.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_load_arima {
    int p, d, q, n_experts;
    double *coef; /* [n_experts][1 + p + q]: c, ar_1..ar_p, ma_1..ma_q */
};

static const char subsys[] = "load";

int swy_load_arima_min_fit_steps(const swy_load_predictor_config_t *cfg)
{
    return cfg->d + 3 * (cfg->p + cfg->q) + 20;
}

/* Difference x[n] d times into w (length n - d). */
static void difference(const double *x, int n, int d, double *w)
{
    memcpy(w, x, (size_t)n * sizeof(double));
    for (int j = 0; j < d; j++)
        for (int t = 0; t < n - j - 1; t++)
            w[t] = w[t + 1] - w[t];
}

static int long_ar_order(int p, int q, int n)
{
    int m = (int)ceil(10.0 * log10((double)n));
    if (m < p + q + 1)
        m = p + q + 1;
    if (m > n / 3)
        m = n / 3;
    return m < 1 ? 1 : m;
}

/* Fit one differenced series w[n] into coef[1+p+q]. */
static int fit_one(int p, int q, int with_const, const double *w, int n,
                   double *coef)
{
    int status = -1;
    int kc = with_const ? 1 : 0;
    double *e = swy_calloc((size_t)n, sizeof(double));
    int m = long_ar_order(p, q, n);
    int kmax = 1 + (m > p + q ? m : p + q);
    double *X = swy_calloc((size_t)n * kmax, sizeof(double));
    double *b = swy_calloc((size_t)kmax, sizeof(double));
    if (e == NULL || X == NULL || b == NULL)
        goto out;
    int start = 0;
    if (q > 0) {
        /* Long AR with a constant (always: it only estimates e). */
        int rows = n - m, k = 1 + m;
        for (int t = m; t < n; t++) {
            double *x = X + (size_t)(t - m) * k;
            x[0] = 1.0;
            for (int i = 1; i <= m; i++)
                x[i] = w[t - i];
        }
        if (swy_load_lstsq(X, w + m, rows, k, b) != 0)
            goto out;
        for (int t = m; t < n; t++) {
            double f = b[0];
            for (int i = 1; i <= m; i++)
                f += b[i] * w[t - i];
            e[t] = w[t] - f;
        }
        start = m;
    }
    int lag = p > q ? p : q;
    start += lag;
    int rows = n - start, k = kc + p + q;
    memset(coef, 0, (size_t)(1 + p + q) * sizeof(double));
    if (k == 0) {
        status = 0;
        goto out;
    }
    for (int t = start; t < n; t++) {
        double *x = X + (size_t)(t - start) * k;
        int c = 0;
        if (with_const)
            x[c++] = 1.0;
        for (int i = 1; i <= p; i++)
            x[c++] = w[t - i];
        for (int j = 1; j <= q; j++)
            x[c++] = e[t - j];
    }
    if (swy_load_lstsq(X, w + start, rows, k, b) != 0)
        goto out;
    coef[0] = with_const ? b[0] : 0.0;
    memcpy(coef + 1, b + kc, (size_t)(p + q) * sizeof(double));
    status = 0;
out:
    swy_free(b);
    swy_free(X);
    swy_free(e);
    return status;
}

swy_status_t swy_load_arima_fit(const swy_load_predictor_config_t *cfg,
                                int n_experts, const double *series,
                                int n_steps, swy_load_arima_t **arima_p)
{
    int p = cfg->p, d = cfg->d, q = cfg->q, nc = 1 + p + q;
    swy_load_arima_t *a = swy_calloc(1, sizeof(*a));
    double *x = swy_calloc((size_t)n_steps, sizeof(double));
    double *w = swy_calloc((size_t)n_steps, sizeof(double));
    if (a == NULL || x == NULL || w == NULL)
        goto nomem;
    a->coef = swy_calloc((size_t)n_experts * nc, sizeof(double));
    if (a->coef == NULL)
        goto nomem;
    a->p = p;
    a->d = d;
    a->q = q;
    a->n_experts = n_experts;
    for (int e = 0; e < n_experts; e++) {
        for (int t = 0; t < n_steps; t++)
            x[t] = series[(size_t)t * n_experts + e];
        difference(x, n_steps, d, w);
        if (fit_one(p, q, d == 0, w, n_steps - d, a->coef + (size_t)e * nc))
            goto nomem;
    }
    swy_free(w);
    swy_free(x);
    *arima_p = a;
    return SWY_OK;
nomem:
    swy_free(w);
    swy_free(x);
    swy_load_arima_destroy(a);
    return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                       "swy_load_predictor_fit: no memory for ARIMA over "
                       "%d steps", n_steps);
}

/* Forecast one expert h steps ahead from x[n] (n >= d + 1). */
static double forecast_one(const swy_load_arima_t *a, const double *coef,
                           const double *x, int n, int h, double *w,
                           double *e, double *fw, double *level)
{
    int p = a->p, d = a->d, q = a->q, nw = n - d;
    const double *ar = coef + 1, *ma = coef + 1 + p;
    difference(x, n, d, w);
    /* Innovations over the history by the model's own recursion; the
     * first lags start from 0. An MA part that is not invertible makes
     * them grow without bound: then forecast without them. */
    int ok = 1;
    for (int t = 0; t < nw; t++) {
        double f = coef[0];
        for (int i = 1; i <= p && t - i >= 0; i++)
            f += ar[i - 1] * w[t - i];
        for (int j = 1; j <= q && t - j >= 0; j++)
            f += ma[j - 1] * e[t - j];
        e[t] = w[t] - f;
        if (!isfinite(e[t]) || fabs(e[t]) > 1e6)
            ok = 0;
    }
    if (!ok)
        memset(e, 0, (size_t)nw * sizeof(double));
    /* fw[k] = forecast of w at nw + k. */
    for (int k = 0; k < h; k++) {
        double f = coef[0];
        for (int i = 1; i <= p; i++) {
            int s = k - i; /* <0: history index nw + s */
            if (s >= 0)
                f += ar[i - 1] * fw[s];
            else if (nw + s >= 0)
                f += ar[i - 1] * w[nw + s];
        }
        for (int j = 1; j <= q; j++) {
            int s = k - j;
            if (s < 0 && nw + s >= 0)
                f += ma[j - 1] * e[nw + s];
        }
        fw[k] = f;
    }
    /* Integrate back: level j's last value plus the running sum of level
     * j+1's forecasts, from level d-1 down to the series itself. */
    for (int j = d - 1; j >= 0; j--) {
        difference(x, n, j, level);
        double last = level[n - j - 1];
        for (int k = 0; k < h; k++) {
            last += fw[k];
            fw[k] = last;
        }
    }
    double r = fw[h - 1];
    return isfinite(r) ? r : x[n - 1];
}

swy_status_t swy_load_arima_predict(const swy_load_arima_t *a,
                                    const double *history, int n_steps,
                                    int horizon, double *out)
{
    int nc = 1 + a->p + a->q;
    size_t n = (size_t)n_steps;
    double *x = swy_calloc(n, sizeof(double));
    double *w = swy_calloc(n, sizeof(double));
    double *e = swy_calloc(n, sizeof(double));
    double *level = swy_calloc(n, sizeof(double));
    double *fw = swy_calloc((size_t)horizon, sizeof(double));
    swy_status_t st = SWY_OK;
    if (!x || !w || !e || !level || !fw) {
        st = swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                         "swy_load_predictor_predict: no memory for ARIMA "
                         "over %d steps, horizon %d", n_steps, horizon);
        goto out;
    }
    for (int k = 0; k < a->n_experts; k++) {
        for (size_t t = 0; t < n; t++)
            x[t] = history[t * a->n_experts + k];
        out[k] = forecast_one(a, a->coef + (size_t)k * nc, x, n_steps,
                              horizon, w, e, fw, level);
    }
out:
    swy_free(fw);
    swy_free(level);
    swy_free(e);
    swy_free(w);
    swy_free(x);
    return st;
}

void swy_load_arima_coefs(const swy_load_arima_t *a, int expert, double *ar,
                          double *ma, double *constant_p)
{
    const double *c = a->coef + (size_t)expert * (1 + a->p + a->q);
    if (ar != NULL)
        memcpy(ar, c + 1, (size_t)a->p * sizeof(double));
    if (ma != NULL)
        memcpy(ma, c + 1 + a->p, (size_t)a->q * sizeof(double));
    if (constant_p != NULL)
        *constant_p = c[0];
}

void swy_load_arima_destroy(swy_load_arima_t *a)
{
    if (a == NULL)
        return;
    swy_free(a->coef);
    swy_free(a);
}
