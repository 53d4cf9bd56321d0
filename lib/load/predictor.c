/* Load predictors: validation, the two stateless ones (sliding-window
 * average, EMA) and the dispatch to ARIMA (arima.c) and the LSTM
 * (lstm.c). Cong et al. find the window average best once the load is
 * stable; the EMA p̂ = θ p̂ + (1-θ) p is the usual cheap alternative. */
#include <math.h>
#include <string.h>

#include "load/load_impl.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/status.h"

static const char subsys[] = "load";

enum { LSTM_MAX_EXPERTS = 512, LSTM_MAX_HIDDEN = 256, ARIMA_MAX_ORDER = 32 };

/* Terms of the EMA whose weight θ^k is below this are dropped, so a
 * prediction costs O(log(EMA_TAIL)/log θ) steps, not the whole history;
 * the answer moves by at most EMA_TAIL times the range of the data. */
#define EMA_TAIL 1e-12

static swy_status_t check_config(const swy_load_predictor_config_t *c,
                                 int n_experts)
{
#define BAD(...) swy_err_set(SWY_ERR_INVALID_ARG, subsys,                   \
                             "swy_load_predictor_create: " __VA_ARGS__)
    if (n_experts < 1)
        return BAD("n_experts %d < 1", n_experts);
    if (c->normalize != 0 && c->normalize != 1)
        return BAD("normalize %d is neither 0 nor 1", c->normalize);
    switch (c->kind) {
    case SWY_LOAD_PRED_WINDOW:
        if (c->window < 1)
            return BAD("window %d < 1", c->window);
        return SWY_OK;
    case SWY_LOAD_PRED_EMA:
        if (!(c->theta >= 0.0 && c->theta < 1.0))
            return BAD("theta %g not in [0, 1)", c->theta);
        return SWY_OK;
    case SWY_LOAD_PRED_ARIMA:
        if (c->p < 0 || c->p > ARIMA_MAX_ORDER || c->q < 0 ||
            c->q > ARIMA_MAX_ORDER || c->d < 0 || c->d > 3)
            return BAD("ARIMA(%d,%d,%d): p and q must be in 0..%d, d in "
                       "0..3", c->p, c->d, c->q, ARIMA_MAX_ORDER);
        return SWY_OK;
    case SWY_LOAD_PRED_LSTM:
        if (n_experts > LSTM_MAX_EXPERTS)
            return BAD("n_experts %d > %d for the LSTM", n_experts,
                       LSTM_MAX_EXPERTS);
        if (c->lstm_hidden < 1 || c->lstm_hidden > LSTM_MAX_HIDDEN)
            return BAD("lstm_hidden %d not in 1..%d", c->lstm_hidden,
                       LSTM_MAX_HIDDEN);
        if (c->lstm_epochs < 1 || c->lstm_lookback < 1 || c->lstm_block < 1)
            return BAD("lstm_epochs %d, lstm_lookback %d, lstm_block %d: "
                       "each must be >= 1", c->lstm_epochs,
                       c->lstm_lookback, c->lstm_block);
        if (!(c->lstm_learning_rate > 0.0) ||
            !isfinite(c->lstm_learning_rate))
            return BAD("lstm_learning_rate %g must be > 0",
                       c->lstm_learning_rate);
        return SWY_OK;
    }
    return BAD("kind %d is not a swy_load_predictor_kind_t", (int)c->kind);
#undef BAD
}

swy_status_t swy_load_predictor_create(const swy_load_predictor_config_t *cfg,
                                       int n_experts,
                                       swy_load_predictor_t *pred_p)
{
    if (cfg == NULL || pred_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_predictor_create: %s is NULL",
                           cfg == NULL ? "cfg" : "pred_p");
    swy_load_predictor_config_t cfg_copy;
    if (swy_struct_import(&cfg_copy, sizeof(cfg_copy), cfg, cfg->struct_size,
                          SWY_LOAD_PREDICTOR_CONFIG_SIZE_V1) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_predictor_create: struct_size %zu is "
                           "below the %zu bytes of the config's first "
                           "release", cfg->struct_size,
                           (size_t)SWY_LOAD_PREDICTOR_CONFIG_SIZE_V1);
    cfg = &cfg_copy;
    SWY_CHECK(check_config(cfg, n_experts));
    struct swy_load_predictor *p = swy_calloc(1, sizeof(*p));
    if (p == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                           "swy_load_predictor_create: no memory");
    p->cfg = *cfg;
    p->n_experts = n_experts;
    *pred_p = p;
    return SWY_OK;
}

void swy_load_predictor_destroy(swy_load_predictor_t pred)
{
    if (pred == NULL)
        return;
    swy_load_arima_destroy(pred->arima);
    swy_load_lstm_destroy(pred->lstm);
    swy_free(pred);
}

static swy_status_t check_series(const char *fn, const double *s, int n,
                                 int E)
{
    if (s == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: series is NULL",
                           fn);
    if (n < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: n_steps %d < 1", fn, n);
    for (size_t i = 0; i < (size_t)n * E; i++)
        if (!isfinite(s[i]))
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: value at step %zu, expert %zu is not "
                               "finite (%g)", fn, i / E, i % E, s[i]);
    return SWY_OK;
}

swy_status_t swy_load_predictor_fit(swy_load_predictor_t pred,
                                    const double *series, int n_steps)
{
    static const char fn[] = "swy_load_predictor_fit";
    if (pred == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: pred is NULL",
                           fn);
    const swy_load_predictor_config_t *c = &pred->cfg;
    SWY_CHECK(check_series(fn, series, n_steps, pred->n_experts));
    if (c->kind == SWY_LOAD_PRED_ARIMA) {
        int need = swy_load_arima_min_fit_steps(c);
        if (n_steps < need)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: ARIMA(%d,%d,%d) needs at least %d steps, "
                               "got %d", fn, c->p, c->d, c->q, need, n_steps);
        swy_load_arima_t *a;
        SWY_CHECK(swy_load_arima_fit(c, pred->n_experts, series, n_steps,
                                     &a));
        swy_load_arima_destroy(pred->arima);
        pred->arima = a;
    } else if (c->kind == SWY_LOAD_PRED_LSTM) {
        long need = (long)(c->lstm_lookback + 1) * c->lstm_block;
        if (n_steps < need)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: the LSTM needs at least (lookback %d + 1)"
                               " x block %d = %ld steps, got %d", fn,
                               c->lstm_lookback, c->lstm_block, need,
                               n_steps);
        swy_load_lstm_t *m;
        SWY_CHECK(swy_load_lstm_fit(c, pred->n_experts, series, n_steps, &m));
        swy_load_lstm_destroy(pred->lstm);
        pred->lstm = m;
    }
    return SWY_OK;
}

/* Clamp to [0,1] and rescale to sum 1; an all-zero vector becomes
 * uniform (no expert is favoured without evidence). */
static void normalize(double *v, int E)
{
    double s = 0.0;
    for (int e = 0; e < E; e++) {
        v[e] = v[e] < 0.0 ? 0.0 : v[e] > 1.0 ? 1.0 : v[e];
        s += v[e];
    }
    for (int e = 0; e < E; e++)
        v[e] = s > 0.0 ? v[e] / s : 1.0 / E;
}

swy_status_t swy_load_predictor_predict(swy_load_predictor_t pred,
                                        const double *history, int n_steps,
                                        int horizon, double *out)
{
    static const char fn[] = "swy_load_predictor_predict";
    if (pred == NULL || out == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: %s is NULL", fn,
                           pred == NULL ? "pred" : "out");
    if (horizon < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: horizon %d < 1", fn, horizon);
    const swy_load_predictor_config_t *c = &pred->cfg;
    int E = pred->n_experts;
    SWY_CHECK(check_series(fn, history, n_steps, E));
    switch (c->kind) {
    case SWY_LOAD_PRED_WINDOW: {
        int w = n_steps < c->window ? n_steps : c->window;
        for (int e = 0; e < E; e++) {
            double s = 0.0;
            for (int t = n_steps - w; t < n_steps; t++)
                s += history[(size_t)t * E + e];
            out[e] = s / w;
        }
        break;
    }
    case SWY_LOAD_PRED_EMA: {
        int span = n_steps;
        if (c->theta > 0.0) {
            double k = ceil(log(EMA_TAIL) / log(c->theta));
            if (k < span)
                span = (int)k;
        } else {
            span = 1;
        }
        int first = n_steps - span;
        for (int e = 0; e < E; e++) {
            double v = history[(size_t)first * E + e];
            for (int t = first + 1; t < n_steps; t++)
                v = c->theta * v + (1.0 - c->theta) * history[(size_t)t * E + e];
            out[e] = v;
        }
        break;
    }
    case SWY_LOAD_PRED_ARIMA:
        if (pred->arima == NULL)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: the ARIMA predictor is not fitted", fn);
        if (n_steps < c->d + 1)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: ARIMA with d = %d needs at least %d "
                               "steps of history, got %d", fn, c->d,
                               c->d + 1, n_steps);
        SWY_CHECK(swy_load_arima_predict(pred->arima, history, n_steps,
                                         horizon, out));
        break;
    case SWY_LOAD_PRED_LSTM:
        if (pred->lstm == NULL)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: the LSTM predictor is not fitted", fn);
        SWY_CHECK(swy_load_lstm_predict(pred->lstm, history, n_steps,
                                        horizon, out));
        break;
    }
    if (c->normalize)
        normalize(out, E);
    return SWY_OK;
}

swy_status_t swy_load_predictor_arima_coefs(swy_load_predictor_t pred,
                                            int expert, double *ar,
                                            double *ma, double *constant_p)
{
    static const char fn[] = "swy_load_predictor_arima_coefs";
    if (pred == NULL || pred->cfg.kind != SWY_LOAD_PRED_ARIMA)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: not an ARIMA predictor", fn);
    if (pred->arima == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: the ARIMA predictor is not fitted", fn);
    if (expert < 0 || expert >= pred->n_experts)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: expert %d out of range 0..%d", fn, expert,
                           pred->n_experts - 1);
    swy_load_arima_coefs(pred->arima, expert, ar, ma, constant_p);
    return SWY_OK;
}
