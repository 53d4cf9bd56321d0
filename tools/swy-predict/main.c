/* swy-predict: evaluate the expert-load predictors of lib/load on a
 * trace of swy-train --trace-loads (CSV step,layer,expert,tokens).
 *
 * For every layer the tracker turns counts into proportions; the state
 * detector labels each step transient or stable; then, at forecast
 * origins t = start, start+stride, ..., every predictor predicts the
 * proportions of step t+h from the data up to t, for each horizon h.
 * ARIMA and the LSTM are refitted every --refit steps on the newest
 * data (not every origin: that is what a trainer could afford).
 * Errors are reported per predictor x horizon x state of the origin:
 *   MAE (pp)   = 100 * mean over (origin, expert) of |p̂ - p|
 *   rel (%)    = 100 * mean over (origin, expert) with p > 0 of |p̂ - p|/p
 * Exit status: 0, 2 on bad input, 1 on a failure. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict.h"
#include "switchyard/load.h"
#include "switchyard/switchyard.h"

enum { MAX_HORIZONS = 8, MAX_PRED = 8 };

typedef struct {
    const char *trace;
    int horizons[MAX_HORIZONS], n_horizons;
    int stride, start, refit, arima_fit, arima_history, lstm_fit;
    swy_load_state_config_t state;
    int start_set, range_set;  /* --start, --state-range given */
    const char *calibrate;     /* --calibrate TRACE, or NULL */
    double calibrate_quantile;
    int json;
    const char *svg;
    int svg_horizon, svg_bins;
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
"Usage: swy-predict [options] TRACE.csv\n"
"Evaluate expert-load predictors (window average, EMA, ARIMA, LSTM) on a\n"
"trace written by swy-train --trace-loads: predict each layer's expert\n"
"proportions h steps ahead from the data so far, per load state.\n"
"\n"
"  --horizons LIST       comma list of horizons in steps (1,100,1000)\n"
"  --stride N            steps between forecast origins (10)\n"
"  --start N             first origin, as a step index (500)\n"
"  --refit N             refit ARIMA and LSTM every N steps (1000)\n"
"  --arima-fit N         steps ARIMA is fitted on (2000)\n"
"  --arima-history N     steps of history an ARIMA forecast reads (400)\n"
"  --lstm-fit N          steps the LSTM is trained on (4000)\n"
"A trace shorter than --start starts a fifth of the way in (unless\n"
"--start is given); what a short trace cannot show is said on stderr.\n"
"Held-out evaluation:\n"
"  --calibrate CAL.csv   calibrate the state detector's range (unless\n"
"                        --state-range is given) and choose the predictor\n"
"                        per horizon and state on CAL.csv; report the\n"
"                        chosen one's error on TRACE.csv (not looked at\n"
"                        for either), beside the best in hindsight\n"
"  --calibrate-quantile Q  the range threshold is this quantile of the\n"
"                        calibration trace's last-half windows (0.95)\n"
"State detection (stable: C windows of W steps in a row where every\n"
"expert's proportion, averaged over S steps, spans <= R and has variance\n"
"<= V; < 0 disables a test):\n"
"  --state-window W      (100)\n"
"  --state-windows C     (5)\n"
"  --state-smooth S      (100)\n"
"  --state-range R       (0.02)\n"
"  --state-variance V    (-1)\n"
"Output:\n"
"  --json                JSON lines instead of the table\n"
"  --svg FILE            plot error over training at one horizon\n"
"  --svg-horizon H       the plotted horizon (the largest)\n"
"  --svg-bins N          points per line (200)\n"
"  -h, --help            this text\n");
}

static int bad(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "swy-predict: %s %s: %s\n", flag, value, why);
    return -1;
}

static int parse_int(const char *flag, const char *s, long lo, long hi,
                     int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return bad(flag, s, "not an integer");
    if (v < lo || v > hi)
        return bad(flag, s, "out of range");
    *out = (int)v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return bad(flag, s, "not a number");
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options_t *o)
{
    enum { O_HOR = 256, O_STRIDE, O_START, O_REFIT, O_AFIT, O_AHIST,
           O_LFIT, O_SW, O_SC, O_SS, O_SR, O_SV, O_JSON, O_SVG, O_SVGH,
           O_SVGB, O_CAL, O_CALQ };
    static const struct option longopts[] = {
        {"horizons", required_argument, NULL, O_HOR},
        {"stride", required_argument, NULL, O_STRIDE},
        {"start", required_argument, NULL, O_START},
        {"refit", required_argument, NULL, O_REFIT},
        {"arima-fit", required_argument, NULL, O_AFIT},
        {"arima-history", required_argument, NULL, O_AHIST},
        {"lstm-fit", required_argument, NULL, O_LFIT},
        {"state-window", required_argument, NULL, O_SW},
        {"state-windows", required_argument, NULL, O_SC},
        {"state-smooth", required_argument, NULL, O_SS},
        {"state-range", required_argument, NULL, O_SR},
        {"state-variance", required_argument, NULL, O_SV},
        {"calibrate", required_argument, NULL, O_CAL},
        {"calibrate-quantile", required_argument, NULL, O_CALQ},
        {"json", no_argument, NULL, O_JSON},
        {"svg", required_argument, NULL, O_SVG},
        {"svg-horizon", required_argument, NULL, O_SVGH},
        {"svg-bins", required_argument, NULL, O_SVGB},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c, r = 0;
    while (r == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case O_HOR: {
            char buf[256], *save = NULL;
            snprintf(buf, sizeof(buf), "%s", a);
            o->n_horizons = 0;
            for (char *tok = strtok_r(buf, ",", &save); tok && r == 0;
                 tok = strtok_r(NULL, ",", &save)) {
                if (o->n_horizons == MAX_HORIZONS)
                    r = bad("--horizons", a, "too many (at most 8)");
                else
                    r = parse_int("--horizons", tok, 1, 1000000,
                                  &o->horizons[o->n_horizons++]);
            }
            if (r == 0 && o->n_horizons == 0)
                r = bad("--horizons", a, "empty");
            break;
        }
        case O_STRIDE: r = parse_int("--stride", a, 1, 1 << 30, &o->stride); break;
        case O_START:
            r = parse_int("--start", a, 0, 1 << 30, &o->start);
            o->start_set = 1;
            break;
        case O_CAL: o->calibrate = a; break;
        case O_CALQ:
            r = parse_double("--calibrate-quantile", a,
                             &o->calibrate_quantile);
            if (r == 0 && !(o->calibrate_quantile > 0.0 &&
                            o->calibrate_quantile <= 1.0))
                r = bad("--calibrate-quantile", a, "not in (0, 1]");
            break;
        case O_REFIT: r = parse_int("--refit", a, 1, 1 << 30, &o->refit); break;
        case O_AFIT: r = parse_int("--arima-fit", a, 1, 1 << 30, &o->arima_fit); break;
        case O_AHIST: r = parse_int("--arima-history", a, 1, 1 << 30, &o->arima_history); break;
        case O_LFIT: r = parse_int("--lstm-fit", a, 1, 1 << 30, &o->lstm_fit); break;
        case O_SW: r = parse_int("--state-window", a, 2, 1 << 30, &o->state.window); break;
        case O_SC: r = parse_int("--state-windows", a, 1, 1 << 30, &o->state.consecutive); break;
        case O_SS: r = parse_int("--state-smooth", a, 1, 1 << 30, &o->state.smooth); break;
        case O_SR:
            r = parse_double("--state-range", a, &o->state.max_range);
            o->range_set = 1;
            break;
        case O_SV: r = parse_double("--state-variance", a, &o->state.max_variance); break;
        case O_JSON: o->json = 1; break;
        case O_SVG: o->svg = a; break;
        case O_SVGH: r = parse_int("--svg-horizon", a, 1, 1000000, &o->svg_horizon); break;
        case O_SVGB: r = parse_int("--svg-bins", a, 1, 100000, &o->svg_bins); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (r != 0)
        return -1;
    if (optind != argc - 1) {
        fprintf(stderr, "swy-predict: expected one trace file\n");
        usage(stderr);
        return -1;
    }
    o->trace = argv[optind];
    if (o->svg_horizon == 0) {
        for (int i = 0; i < o->n_horizons; i++)
            if (o->horizons[i] > o->svg_horizon)
                o->svg_horizon = o->horizons[i];
    } else {
        int found = 0;
        for (int i = 0; i < o->n_horizons; i++)
            found |= o->horizons[i] == o->svg_horizon;
        if (!found) {
            fprintf(stderr, "swy-predict: --svg-horizon %d is not one of "
                            "--horizons\n", o->svg_horizon);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    int64_t step;
    int layer, expert;
    int64_t tokens;
} row_t;

/* Read the CSV into a tracker holding every step. Returns 0, 1 (I/O or
 * memory), 2 (bad content). */
static int read_trace(const char *path, swy_load_tracker_t *tracker_p)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "swy-predict: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char line[256];
    row_t *rows = NULL;
    size_t n = 0, cap = 0;
    int rc = 2, L = 0, E = 0, n_steps = 0, lineno = 1;
    swy_load_tracker_t t = NULL;
    int64_t *counts = NULL;
    if (fgets(line, sizeof(line), f) == NULL ||
        strncmp(line, "step,layer,expert,tokens", 24) != 0) {
        fprintf(stderr, "swy-predict: %s: the first line is not "
                        "'step,layer,expert,tokens'\n", path);
        goto out;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        long long s;
        int l, e;
        double tok;
        if (sscanf(line, "%lld,%d,%d,%lf", &s, &l, &e, &tok) != 4 || s < 0 ||
            l < 0 || e < 0 || !(tok >= 0) || l > 100000 || e > 100000) {
            fprintf(stderr, "swy-predict: %s:%d: not step,layer,expert,"
                            "tokens (non-negative)\n", path, lineno);
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            row_t *nr = realloc(rows, cap * sizeof(*rows));
            if (nr == NULL) {
                rc = 1;
                goto out;
            }
            rows = nr;
        }
        if (n > 0 && s < rows[n - 1].step) {
            fprintf(stderr, "swy-predict: %s:%d: step %lld after %lld "
                            "(steps must not decrease)\n", path, lineno, s,
                    (long long)rows[n - 1].step);
            goto out;
        }
        if (n == 0 || s != rows[n - 1].step)
            n_steps++;
        rows[n++] = (row_t){s, l, e, (int64_t)tok};
        L = l + 1 > L ? l + 1 : L;
        E = e + 1 > E ? e + 1 : E;
    }
    if (n == 0) {
        fprintf(stderr, "swy-predict: %s: no data\n", path);
        goto out;
    }
    rc = 1;
    if (swy_load_tracker_create(L, E, n_steps, &t) != SWY_OK) {
        fprintf(stderr, "swy-predict: %s\n", swy_last_error(NULL));
        goto out;
    }
    counts = calloc((size_t)E, sizeof(int64_t));
    if (counts == NULL)
        goto out;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        memset(counts, 0, (size_t)E * sizeof(int64_t));
        for (; j < n && rows[j].step == rows[i].step &&
               rows[j].layer == rows[i].layer; j++)
            counts[rows[j].expert] += rows[j].tokens;
        if (swy_load_record(t, rows[i].step, rows[i].layer, counts) !=
            SWY_OK) {
            fprintf(stderr, "swy-predict: %s\n", swy_last_error(NULL));
            goto out;
        }
        i = j;
    }
    *tracker_p = t;
    t = NULL;
    rc = 0;
out:
    free(counts);
    swy_load_tracker_destroy(t);
    free(rows);
    fclose(f);
    return rc;
}

typedef struct {
    const char *name;
    swy_load_predictor_config_t cfg;
} pred_spec_t;

typedef struct {
    double abs_sum, rel_sum;
    long pairs, rel_pairs, points;
} acc_t;

static const char *const state_names[] = {"transient", "stable", "all"};

/* The predictors: window averages of three lengths (the paper's best in
 * the stable state), two EMAs, ARIMA(5,1,5) (the paper's ARIMA), and the
 * LSTM over all experts. */
static int make_specs(pred_spec_t *specs)
{
    static char win_names[3][16], ema_names[2][16];
    int n_pred = 0;
    const swy_load_predictor_config_t init = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    int windows[] = {10, 100, 1000};
    for (int i = 0; i < 3; i++) {
        snprintf(win_names[i], sizeof(win_names[i]), "window%d", windows[i]);
        specs[n_pred] = (pred_spec_t){win_names[i], init};
        specs[n_pred++].cfg.window = windows[i];
    }
    double thetas[] = {0.9, 0.99};
    for (int i = 0; i < 2; i++) {
        snprintf(ema_names[i], sizeof(ema_names[i]), "ema%g", thetas[i]);
        specs[n_pred] = (pred_spec_t){ema_names[i], init};
        specs[n_pred].cfg.kind = SWY_LOAD_PRED_EMA;
        specs[n_pred++].cfg.theta = thetas[i];
    }
    specs[n_pred] = (pred_spec_t){"arima515", init};
    specs[n_pred++].cfg.kind = SWY_LOAD_PRED_ARIMA;
    specs[n_pred] = (pred_spec_t){"lstm", init};
    specs[n_pred++].cfg.kind = SWY_LOAD_PRED_LSTM;
    return n_pred;
}

/* One trace's evaluation: errors per predictor x horizon x state, and the
 * points of the SVG plot. */
typedef struct {
    const char *path;
    int n_steps, L, E, start, n_origins;
    long stable_steps, all_steps;
    acc_t *acc;          /* [n_pred][H][3] */
    double *plot_err;    /* [n_origins][n_pred] */
    int *plot_cnt;       /* [n_origins][n_pred] */
    double *plot_stable; /* [n_origins] */
    int64_t *plot_step;  /* [n_origins] */
} eval_t;

static void eval_free(eval_t *ev)
{
    free(ev->plot_step);
    free(ev->plot_stable);
    free(ev->plot_cnt);
    free(ev->plot_err);
    free(ev->acc);
}

/* The first forecast origin for a trace of n_steps: --start when given
 * (-1 when it leaves no origin, with the flag to change); else 500, or a
 * fifth of the way in when 500 is past the end of a short trace. */
static int first_origin(const options_t *o, const char *path, int n_steps)
{
    if (o->start_set) {
        if (o->start < n_steps - 1)
            return o->start;
        fprintf(stderr, "swy-predict: %s: --start %d leaves no forecast "
                "origin in its %d steps: set --start below %d\n", path,
                o->start, n_steps, n_steps - 1);
        return -1;
    }
    if (o->start < n_steps - 1)
        return o->start;
    int start = n_steps / 5;
    if (start >= n_steps - 1) {
        fprintf(stderr, "swy-predict: %s: %d steps are too few to forecast "
                "(at least 2 needed)\n", path, n_steps);
        return -1;
    }
    fprintf(stderr, "swy-predict: %s: %d steps end before the default "
            "--start %d: origins from step index %d instead (set --start "
            "to choose)\n", path, n_steps, o->start, start);
    return start;
}

/* What a short trace cannot show, and the flag that would change it. */
static void warn_short(const options_t *o, const swy_load_state_config_t *sc,
                       const char *path, int n_steps, int start)
{
    int need = sc->smooth - 1 + sc->window * sc->consecutive;
    if (need >= n_steps)
        fprintf(stderr, "swy-predict: %s: every step is transient: the "
                "stable state needs %d steps (--state-smooth %d - 1 + "
                "--state-window %d x --state-windows %d), the trace has "
                "%d: lower those flags for a short trace\n", path, need,
                sc->smooth, sc->window, sc->consecutive, n_steps);
    for (int i = 0; i < o->n_horizons; i++)
        if (start + o->horizons[i] >= n_steps)
            fprintf(stderr, "swy-predict: %s: horizon %d has no target "
                    "after the first origin (step index %d of %d): lower "
                    "--horizons or --start\n", path, o->horizons[i], start,
                    n_steps);
}

/* Evaluate every predictor on the trace at path with the detector sc.
 * Returns 0, 1 (failure) or 2 (bad input). */
static int evaluate(const options_t *o, const swy_load_state_config_t *sc,
                    const pred_spec_t *specs, int n_pred, const char *path,
                    eval_t *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->path = path;
    swy_load_tracker_t tracker;
    int rc = read_trace(path, &tracker);
    if (rc != 0)
        return rc;
    int n_steps, L, E;
    swy_load_tracker_info(tracker, &n_steps, &L, &E);
    ev->n_steps = n_steps;
    ev->L = L;
    ev->E = E;
    int H = o->n_horizons;
    double *props = NULL, *out = NULL;
    int64_t *steps = NULL;
    swy_load_state_t *state = NULL;
    rc = 2;
    int start = first_origin(o, path, n_steps);
    if (start < 0)
        goto out;
    warn_short(o, sc, path, n_steps, start);
    ev->start = start;
    int n_origins = 0;
    for (int t = start; t < n_steps - 1; t += o->stride)
        n_origins++;
    ev->n_origins = n_origins;
    rc = 1;
    ev->acc = calloc((size_t)n_pred * H * 3, sizeof(acc_t));
    props = malloc((size_t)n_steps * E * sizeof(double));
    steps = malloc((size_t)n_steps * sizeof(int64_t));
    state = malloc((size_t)n_steps * sizeof(*state));
    ev->plot_err = calloc((size_t)n_origins * n_pred, sizeof(double));
    ev->plot_cnt = calloc((size_t)n_origins * n_pred, sizeof(int));
    ev->plot_stable = calloc((size_t)n_origins, sizeof(double));
    ev->plot_step = calloc((size_t)n_origins, sizeof(int64_t));
    out = malloc((size_t)E * sizeof(double));
    if (!ev->acc || !props || !steps || !state || !ev->plot_err ||
        !ev->plot_cnt || !ev->plot_stable || !ev->plot_step || !out) {
        fprintf(stderr, "swy-predict: out of memory\n");
        goto out;
    }
    for (int l = 0; l < L; l++) {
        int n;
        swy_load_predictor_t pred[MAX_PRED] = {0};
        int fitted[MAX_PRED] = {0}, last_fit = -1;
        if (swy_load_tracker_proportions(tracker, l, n_steps, props, steps,
                                         &n) != SWY_OK ||
            swy_load_state(sc, props, n, E, state) != SWY_OK) {
            fprintf(stderr, "swy-predict: %s: layer %d: %s\n", path, l,
                    swy_last_error(NULL));
            goto out;
        }
        for (int t = 0; t < n; t++)
            ev->stable_steps += state[t] == SWY_LOAD_STABLE;
        ev->all_steps += n;
        for (int k = 0; k < n_pred; k++)
            if (swy_load_predictor_create(&specs[k].cfg, E, &pred[k]) !=
                SWY_OK) {
                fprintf(stderr, "swy-predict: %s\n", swy_last_error(NULL));
                for (int j = 0; j < k; j++)
                    swy_load_predictor_destroy(pred[j]);
                goto out;
            }
        int oi = 0;
        for (int t = start; t < n - 1; t += o->stride, oi++) {
            int have = t + 1; /* steps 0..t are known */
            if (last_fit < 0 || t - last_fit >= o->refit) {
                last_fit = t;
                for (int k = 0; k < n_pred; k++) {
                    swy_load_predictor_kind_t kind = specs[k].cfg.kind;
                    if (kind != SWY_LOAD_PRED_ARIMA &&
                        kind != SWY_LOAD_PRED_LSTM) {
                        fitted[k] = 1;
                        continue;
                    }
                    int span = kind == SWY_LOAD_PRED_ARIMA ? o->arima_fit
                                                           : o->lstm_fit;
                    span = span < have ? span : have;
                    /* Too short yet: keep the previous fit, if any. */
                    if (swy_load_predictor_fit(
                            pred[k], props + (size_t)(have - span) * E,
                            span) == SWY_OK)
                        fitted[k] = 1;
                }
            }
            if (oi < n_origins) {
                ev->plot_step[oi] = steps[t];
                ev->plot_stable[oi] +=
                    (state[t] == SWY_LOAD_STABLE) / (double)L;
            }
            for (int hi = 0; hi < H; hi++) {
                int h = o->horizons[hi];
                if (t + h >= n)
                    continue;
                const double *target = props + (size_t)(t + h) * E;
                for (int k = 0; k < n_pred; k++) {
                    if (!fitted[k])
                        continue;
                    int span = have;
                    if (specs[k].cfg.kind == SWY_LOAD_PRED_ARIMA &&
                        span > o->arima_history)
                        span = o->arima_history;
                    if (swy_load_predictor_predict(
                            pred[k], props + (size_t)(have - span) * E, span,
                            h, out) != SWY_OK) {
                        fprintf(stderr, "swy-predict: %s: layer %d step "
                                "%lld %s: %s\n", path, l,
                                (long long)steps[t], specs[k].name,
                                swy_last_error(NULL));
                        for (int j = 0; j < n_pred; j++)
                            swy_load_predictor_destroy(pred[j]);
                        goto out;
                    }
                    double abs_sum = 0.0, rel_sum = 0.0;
                    int rel_pairs = 0;
                    for (int e = 0; e < E; e++) {
                        double d = fabs(out[e] - target[e]);
                        abs_sum += d;
                        if (target[e] > 0) {
                            rel_sum += d / target[e];
                            rel_pairs++;
                        }
                    }
                    int sts[2] = {state[t] == SWY_LOAD_STABLE, 2};
                    for (int si = 0; si < 2; si++) {
                        acc_t *a =
                            &ev->acc[((size_t)k * H + hi) * 3 + sts[si]];
                        a->abs_sum += abs_sum;
                        a->rel_sum += rel_sum;
                        a->pairs += E;
                        a->rel_pairs += rel_pairs;
                        a->points++;
                    }
                    if (h == o->svg_horizon && oi < n_origins) {
                        ev->plot_err[(size_t)oi * n_pred + k] +=
                            100.0 * abs_sum / E;
                        ev->plot_cnt[(size_t)oi * n_pred + k]++;
                    }
                }
            }
        }
        for (int k = 0; k < n_pred; k++)
            swy_load_predictor_destroy(pred[k]);
    }
    rc = 0;
out:
    free(out);
    free(state);
    free(steps);
    free(props);
    swy_load_tracker_destroy(tracker);
    return rc;
}

/* The detector calibrated on the trace at path (swy_load_state_calibrate
 * on each layer; the largest threshold of the layers, so that no layer's
 * settled loads read as transient). Returns 0, 1 or 2. */
static int calibrate(const options_t *o, const char *path,
                     swy_load_state_config_t *sc)
{
    swy_load_tracker_t tracker;
    int rc = read_trace(path, &tracker);
    if (rc != 0)
        return rc;
    int n_steps, L, E, n;
    swy_load_tracker_info(tracker, &n_steps, &L, &E);
    double *props = malloc((size_t)n_steps * E * sizeof(double));
    int64_t *steps = malloc((size_t)n_steps * sizeof(int64_t));
    double max_range = 0.0;
    rc = 1;
    if (props == NULL || steps == NULL) {
        fprintf(stderr, "swy-predict: out of memory\n");
        goto out;
    }
    for (int l = 0; l < L; l++) {
        swy_load_state_config_t c = *sc;
        swy_status_t st = swy_load_tracker_proportions(tracker, l, n_steps,
                                                       props, steps, &n);
        if (st == SWY_OK)
            st = swy_load_state_calibrate(&c, props, n, E,
                                          o->calibrate_quantile);
        if (st != SWY_OK) {
            fprintf(stderr, "swy-predict: --calibrate %s: layer %d: %s\n",
                    path, l, swy_last_error(NULL));
            rc = 2;
            goto out;
        }
        max_range = c.max_range > max_range ? c.max_range : max_range;
    }
    sc->max_range = max_range;
    rc = 0;
out:
    free(steps);
    free(props);
    swy_load_tracker_destroy(tracker);
    return rc;
}

static double mae_of(const acc_t *a)
{
    return a->points > 0 ? 100.0 * a->abs_sum / a->pairs : INFINITY;
}

/* The predictor with the lowest MAE at (horizon index hi, state s), or
 * -1 when none has a point there. */
static int best_of(const eval_t *ev, int n_pred, int H, int hi, int s)
{
    int best = -1;
    for (int k = 0; k < n_pred; k++) {
        const acc_t *a = &ev->acc[((size_t)k * H + hi) * 3 + s];
        if (a->points > 0 &&
            (best < 0 ||
             mae_of(a) < mae_of(&ev->acc[((size_t)best * H + hi) * 3 + s])))
            best = k;
    }
    return best;
}

static void report(const options_t *o, const pred_spec_t *specs, int n_pred,
                   const eval_t *ev, const swy_load_state_config_t *sc)
{
    int H = o->n_horizons;
    double frac = ev->all_steps > 0
                      ? (double)ev->stable_steps / ev->all_steps : 0.0;
    if (!o->json) {
        printf("# swy-predict %s: %d layers, %d experts, %d steps; stable "
               "%.1f%% of layer-steps (state range %g%s)\n", ev->path,
               ev->L, ev->E, ev->n_steps, 100.0 * frac, sc->max_range,
               o->calibrate != NULL ? ", calibrated on --calibrate" : "");
        printf("# MAE = 100*mean|p̂-p| (percentage points); rel = "
               "100*mean(|p̂-p|/p) (%%); state of the origin\n");
        printf("%-10s %8s %-10s %8s %9s %9s\n", "predictor", "horizon",
               "state", "points", "MAE_pp", "rel_%");
    } else {
        printf("{\"trace\":\"%s\",\"layers\":%d,\"experts\":%d,"
               "\"steps\":%d,\"start\":%d,\"stable_fraction\":%.4f,"
               "\"state_range\":%g}\n", ev->path, ev->L, ev->E,
               ev->n_steps, ev->start, frac, sc->max_range);
    }
    for (int hi = 0; hi < H; hi++)
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < n_pred; k++) {
                const acc_t *a = &ev->acc[((size_t)k * H + hi) * 3 + s];
                if (a->points == 0)
                    continue;
                double rel = 100.0 * a->rel_sum / a->rel_pairs;
                if (o->json)
                    printf("{\"trace\":\"%s\",\"predictor\":\"%s\","
                           "\"horizon\":%d,\"state\":\"%s\","
                           "\"points\":%ld,\"mae_pp\":%.4f,"
                           "\"rel_pct\":%.3f}\n", ev->path,
                           specs[k].name, o->horizons[hi], state_names[s],
                           a->points, mae_of(a), rel);
                else
                    printf("%-10s %8d %-10s %8ld %9.3f %9.2f\n",
                           specs[k].name, o->horizons[hi], state_names[s],
                           a->points, mae_of(a), rel);
            }
}

/* Per horizon and state: the predictor chosen on the calibration trace
 * (cal, NULL: none) with its error on this trace, beside the best in
 * hindsight on this trace. */
static void report_choice(const options_t *o, const pred_spec_t *specs,
                          int n_pred, const eval_t *ev, const eval_t *cal)
{
    int H = o->n_horizons;
    if (!o->json)
        printf(cal != NULL
                   ? "# chosen on %s (lowest MAE there), its error here; "
                     "best in hindsight here\n"
                   : "# best in hindsight (lowest MAE on this trace; "
                     "choose on another with --calibrate)%s\n",
               cal != NULL ? cal->path : "");
    for (int hi = 0; hi < H; hi++)
        for (int s = 0; s < 3; s++) {
            int best = best_of(ev, n_pred, H, hi, s);
            if (best < 0)
                continue;
            double best_mae =
                mae_of(&ev->acc[((size_t)best * H + hi) * 3 + s]);
            if (o->json)
                printf("{\"trace\":\"%s\",\"best\":\"%s\","
                       "\"horizon\":%d,\"state\":\"%s\","
                       "\"mae_pp\":%.4f}\n", ev->path, specs[best].name,
                       o->horizons[hi], state_names[s], best_mae);
            else
                printf("best %-10s %8d %-10s %9.3f\n", specs[best].name,
                       o->horizons[hi], state_names[s], best_mae);
            int chosen = cal != NULL ? best_of(cal, n_pred, H, hi, s) : -1;
            if (chosen < 0)
                continue;
            const acc_t *a = &ev->acc[((size_t)chosen * H + hi) * 3 + s];
            if (a->points == 0)
                continue;
            if (o->json)
                printf("{\"trace\":\"%s\",\"chosen\":\"%s\","
                       "\"chosen_on\":\"%s\",\"horizon\":%d,"
                       "\"state\":\"%s\",\"mae_pp\":%.4f}\n",
                       ev->path, specs[chosen].name, cal->path,
                       o->horizons[hi], state_names[s], mae_of(a));
            else
                printf("chosen %-10s %6d %-10s %9.3f (held out)\n",
                       specs[chosen].name, o->horizons[hi], state_names[s],
                       mae_of(a));
        }
}

int main(int argc, char **argv)
{
    options_t o = {.horizons = {1, 100, 1000}, .n_horizons = 3,
                   .stride = 10, .start = 500, .refit = 1000,
                   .arima_fit = 2000, .arima_history = 400,
                   .lstm_fit = 4000, .state = SWY_LOAD_STATE_CONFIG_INIT,
                   .svg_bins = 200, .calibrate_quantile = 0.95};
    o.state.smooth = 100;
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    pred_spec_t specs[MAX_PRED];
    int n_pred = make_specs(specs);
    swy_load_state_config_t sc = o.state;
    eval_t cal = {0}, ev = {0};
    int rc = 0;
    if (o.calibrate != NULL) {
        /* The detector and the choice of predictor come from this trace
         * only; the traces judged are not looked at until they are. */
        if (!o.range_set)
            rc = calibrate(&o, o.calibrate, &sc);
        if (rc == 0)
            rc = evaluate(&o, &sc, specs, n_pred, o.calibrate, &cal);
        if (rc != 0)
            goto out;
        if (!o.json)
            printf("# calibration trace %s: state range %g (quantile %g of "
                   "its last half's windows)\n", o.calibrate, sc.max_range,
                   o.calibrate_quantile);
    }
    rc = evaluate(&o, &sc, specs, n_pred, o.trace, &ev);
    if (rc != 0)
        goto out;
    report(&o, specs, n_pred, &ev, &sc);
    report_choice(&o, specs, n_pred, &ev, o.calibrate != NULL ? &cal : NULL);

    if (o.svg != NULL) {
        for (size_t i = 0; i < (size_t)ev.n_origins * n_pred; i++)
            ev.plot_err[i] =
                ev.plot_cnt[i] ? ev.plot_err[i] / ev.plot_cnt[i] : NAN;
        const char *names[MAX_PRED];
        for (int k = 0; k < n_pred; k++)
            names[k] = specs[k].name;
        char title[160];
        snprintf(title, sizeof(title), "Expert-load prediction error, %d "
                 "steps ahead (%d layers x %d experts, mean over layers)",
                 o.svg_horizon, ev.L, ev.E);
        swp_plot_t pl = {n_pred, names, ev.n_origins, ev.plot_step,
                         ev.plot_err, ev.plot_stable, o.svg_horizon, title};
        FILE *f = fopen(o.svg, "w");
        if (f == NULL || swp_svg_write(f, &pl, o.svg_bins) != 0) {
            fprintf(stderr, "swy-predict: --svg %s: %s\n", o.svg,
                    strerror(errno));
            if (f != NULL)
                fclose(f);
            rc = 1;
            goto out;
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "swy-predict: --svg %s: %s\n", o.svg,
                    strerror(errno));
            rc = 1;
            goto out;
        }
    }
out:
    eval_free(&ev);
    eval_free(&cal);
    return rc;
}
