/* Transient/stable state of the expert load (Cong et al.: fluctuating
 * early, then temporal locality). The paper detects it from the variance
 * and range of each expert's proportion over sliding windows but gives
 * no thresholds, so every threshold is a parameter. The proportions are
 * smoothed first: with a small batch the per-step sampling noise alone
 * spans several percentage points within 100 steps. */
#include <math.h>

#include "switchyard/load.h"
#include "util/alloc.h"
#include "util/status.h"

static const char subsys[] = "load";

swy_status_t swy_load_state(const swy_load_state_config_t *cfg,
                            const double *series, int n_steps, int n_experts,
                            swy_load_state_t *state_p)
{
    static const char fn[] = "swy_load_state";
    if (cfg == NULL || series == NULL || state_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys, "%s: %s is NULL", fn,
                           cfg == NULL ? "cfg" : series == NULL ? "series"
                                                                : "state_p");
    if (cfg->struct_size != sizeof(*cfg))
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "%s: struct_size %zu, expected %zu", fn,
                           cfg->struct_size, sizeof(*cfg));
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
    double *sm = swy_calloc(total, sizeof(double));
    unsigned char *calm = swy_calloc((size_t)n_steps, 1);
    if (sm == NULL || calm == NULL) {
        swy_free(calm);
        swy_free(sm);
        return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                           "%s: no memory for %d steps", fn, n_steps);
    }
    int E = n_experts, S = cfg->smooth, W = cfg->window;
    for (int e = 0; e < E; e++) {
        double run = 0.0;
        for (int t = 0; t < n_steps; t++) {
            run += series[(size_t)t * E + e];
            if (t >= S)
                run -= series[(size_t)(t - S) * E + e];
            sm[(size_t)t * E + e] = run / (t + 1 < S ? t + 1 : S);
        }
    }
    /* A window (t-W, t] counts only once its smoothing is complete. */
    for (int t = S - 1 + W - 1; t < n_steps; t++) {
        int ok = 1;
        for (int e = 0; e < E && ok; e++) {
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
            if (cfg->max_range >= 0.0 && hi - lo > cfg->max_range)
                ok = 0;
            if (cfg->max_variance >= 0.0 && s2 / W > cfg->max_variance)
                ok = 0;
        }
        calm[t] = (unsigned char)ok;
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
