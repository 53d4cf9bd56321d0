/* Transient/stable state of the expert load (Cong et al.: fluctuating
 * early, then temporal locality). The paper detects it from the variance
 * and range of each expert's proportion over sliding windows but gives
 * no thresholds, so every threshold is a parameter. The proportions are
 * smoothed first: with a small batch the per-step sampling noise alone
 * spans several percentage points within 100 steps. */
#include <math.h>
#include <stdlib.h>

#include "switchyard/load.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/status.h"

static const char subsys[] = "load";

/* The checks both entry points make; fn names the caller. The caller's
 * config is read into *cfg by the struct_size rule. */
static swy_status_t check_input(const char *fn,
                                const swy_load_state_config_t *given,
                                swy_load_state_config_t *cfg,
                                const double *series, int n_steps,
                                int n_experts)
{
    if (swy_struct_import(cfg, sizeof(*cfg), given, given->struct_size,
                          SWY_LOAD_STATE_CONFIG_SIZE_V1) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: struct_size %zu is below the %zu bytes of "
                           "the config's first release", fn,
                           given->struct_size,
                           (size_t)SWY_LOAD_STATE_CONFIG_SIZE_V1);
    if (n_steps < 1 || n_experts < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: n_steps %d, n_experts %d: each must be >= 1",
                           fn, n_steps, n_experts);
    if (cfg->window < 2 || cfg->consecutive < 1 || cfg->smooth < 1 ||
        isnan(cfg->max_range) || isnan(cfg->max_variance))
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: window %d (>= 2), consecutive %d (>= 1), "
                           "smooth %d (>= 1), max_range %g, max_variance %g",
                           fn, cfg->window, cfg->consecutive, cfg->smooth,
                           cfg->max_range, cfg->max_variance);
    size_t total = (size_t)n_steps * n_experts;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(series[i]))
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "%s: value at step %zu, expert %zu is not "
                               "finite (%g)", fn, i / n_experts,
                               i % n_experts, series[i]);
    return SWY_OK;
}

/* sm[t][e] = mean of series[(t-S, t]][e] (fewer at the start). */
static void smooth(const double *series, int n_steps, int E, int S,
                   double *sm)
{
    for (int e = 0; e < E; e++) {
        double run = 0.0;
        for (int t = 0; t < n_steps; t++) {
            run += series[(size_t)t * E + e];
            if (t >= S)
                run -= series[(size_t)(t - S) * E + e];
            sm[(size_t)t * E + e] = run / (t + 1 < S ? t + 1 : S);
        }
    }
}

/* Largest range and variance over experts of sm within (t-W, t]. */
static void window_spread(const double *sm, int E, int t, int W,
                          double *range_p, double *variance_p)
{
    double range = 0.0, variance = 0.0;
    for (int e = 0; e < E; e++) {
        double lo = INFINITY, hi = -INFINITY, s = 0.0, s2 = 0.0;
        for (int k = t - W + 1; k <= t; k++) {
            double v = sm[(size_t)k * E + e];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            s += v;
        }
        double mean = s / W;
        for (int k = t - W + 1; k <= t; k++) {
            double dv = sm[(size_t)k * E + e] - mean;
            s2 += dv * dv;
        }
        range = hi - lo > range ? hi - lo : range;
        variance = s2 / W > variance ? s2 / W : variance;
    }
    *range_p = range;
    *variance_p = variance;
}

swy_status_t swy_load_state(const swy_load_state_config_t *cfg,
                            const double *series, int n_steps, int n_experts,
                            swy_load_state_t *state_p)
{
    static const char fn[] = "swy_load_state";
    if (cfg == NULL || series == NULL || state_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: %s is NULL", fn,
                           cfg == NULL ? "cfg" : series == NULL ? "series"
                                                                : "state_p");
    swy_load_state_config_t cfg_copy;
    SWY_CHECK(check_input(fn, cfg, &cfg_copy, series, n_steps, n_experts));
    cfg = &cfg_copy;
    size_t total = (size_t)n_steps * n_experts;
    double *sm = swy_calloc(total, sizeof(double));
    unsigned char *calm = swy_calloc((size_t)n_steps, 1);
    if (sm == NULL || calm == NULL) {
        swy_free(calm);
        swy_free(sm);
        return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                           "%s: no memory for %d steps", fn, n_steps);
    }
    int E = n_experts, S = cfg->smooth, W = cfg->window;
    smooth(series, n_steps, E, S, sm);
    /* A window (t-W, t] counts only once its smoothing is complete. */
    for (int t = S - 1 + W - 1; t < n_steps; t++) {
        double range, variance;
        window_spread(sm, E, t, W, &range, &variance);
        calm[t] = (unsigned char)(
            !(cfg->max_range >= 0.0 && range > cfg->max_range) &&
            !(cfg->max_variance >= 0.0 && variance > cfg->max_variance));
    }
    for (int t = 0; t < n_steps; t++) {
        int stable = 1;
        for (int k = 0; k < cfg->consecutive && stable; k++) {
            long u = (long)t - (long)k * W;
            if (u < 0 || !calm[u])
                stable = 0;
        }
        state_p[t] = stable ? SWY_LOAD_STABLE : SWY_LOAD_TRANSIENT;
    }
    swy_free(calm);
    swy_free(sm);
    return SWY_OK;
}

static int by_value(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

swy_status_t swy_load_state_calibrate(swy_load_state_config_t *given,
                                      const double *series, int n_steps,
                                      int n_experts, double quantile)
{
    static const char fn[] = "swy_load_state_calibrate";
    if (given == NULL || series == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: %s is NULL", fn,
                           given == NULL ? "cfg" : "series");
    swy_load_state_config_t cfg_copy, *cfg = &cfg_copy;
    SWY_CHECK(check_input(fn, given, cfg, series, n_steps, n_experts));
    if (!(quantile > 0.0 && quantile <= 1.0))
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: quantile %g "
                           "must be in (0, 1]", fn, quantile);
    int E = n_experts, S = cfg->smooth, W = cfg->window;
    /* Windows that end in the last half and lie whole after the first
     * complete smoothing. */
    int first = S - 1 + W - 1, half = n_steps / 2;
    first = first > half ? first : half;
    if (first >= n_steps)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: %d steps hold "
                           "no window of %d steps (smoothed over %d) in "
                           "their last half: need at least %d steps, or a "
                           "smaller window or smoothing", fn, n_steps, W, S,
                           2 * (S - 1 + W));
    size_t total = (size_t)n_steps * n_experts;
    double *sm = swy_calloc(total, sizeof(double));
    double *ranges = swy_calloc((size_t)(n_steps - first), sizeof(double));
    if (sm == NULL || ranges == NULL) {
        swy_free(ranges);
        swy_free(sm);
        return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                           "%s: no memory for %d steps", fn, n_steps);
    }
    smooth(series, n_steps, E, S, sm);
    int n = 0;
    for (int t = first; t < n_steps; t++) {
        double variance;
        window_spread(sm, E, t, W, &ranges[n++], &variance);
    }
    qsort(ranges, (size_t)n, sizeof(double), by_value);
    int at = (int)ceil(quantile * n) - 1;
    given->max_range = ranges[at < 0 ? 0 : at]; /* in every release */
    swy_free(ranges);
    swy_free(sm);
    return SWY_OK;
}
