/* lib/load against series with known answers: the tracker's ring, the
 * window average and EMA (exact), ARIMA on a line (exact with d = 1),
 * coefficient recovery on simulated AR(2) and ARIMA(1,1,1) series, an
 * LSTM on a periodic two-expert series, state detection on a noisy then
 * calm series, bad input, and swy-predict end to end. Usage: test_load
 * CASE, or test_load tool PATH-TO-swy-predict. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load_test.h"

/* Deterministic normal draws (xorshift + Box–Muller). */
static uint64_t rng_state = 88172645463325252ull;
static double unif(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double gauss(void)
{
    return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
}

static swy_load_predictor_t make(swy_load_predictor_config_t c, int E)
{
    swy_load_predictor_t p;
    CHECK_OK_EXIT(swy_load_predictor_create(&c, E, &p), NULL);
    return p;
}

static void test_tracker(void)
{
    swy_load_tracker_t t;
    CHECK_OK_EXIT(swy_load_tracker_create(2, 3, 4, &t), NULL);
    /* Steps 10..16; layer 1 is missing at step 12, step 13 gets no
     * tokens in layer 0. Capacity 4: steps 13..16 remain. */
    for (int64_t s = 10; s <= 16; s++) {
        int64_t c0[3] = {s, 2 * s, 3 * s}, c1[3] = {1, 1, s};
        if (s == 13)
            c0[0] = c0[1] = c0[2] = 0;
        CHECK_OK_EXIT(swy_load_record(t, s, 0, c0), NULL);
        if (s != 12)
            CHECK_OK_EXIT(swy_load_record(t, s, 1, c1), NULL);
    }
    int n, L, E;
    CHECK_OK_EXIT(swy_load_tracker_info(t, &n, &L, &E), NULL);
    CHECK(n == 4 && L == 2 && E == 3, "info %d %d %d", n, L, E);
    int64_t step, c[3];
    CHECK_OK_EXIT(swy_load_tracker_get(t, 0, 0, &step, c), NULL);
    CHECK(step == 13 && c[0] == 0, "oldest step %lld", (long long)step);
    CHECK_OK_EXIT(swy_load_tracker_get(t, 3, 0, &step, c), NULL);
    CHECK(step == 16 && c[0] == 16 && c[1] == 32 && c[2] == 48,
          "newest %lld: %lld %lld %lld", (long long)step, (long long)c[0],
          (long long)c[1], (long long)c[2]);
    double props[4 * 3];
    int64_t steps[4];
    CHECK_OK_EXIT(swy_load_tracker_proportions(t, 0, 4, props, steps, &n),
                  NULL);
    /* Step 13 has no tokens in layer 0: left out. */
    CHECK(n == 3 && steps[0] == 14 && steps[2] == 16, "n %d first %lld", n,
          (long long)steps[0]);
    for (int i = 0; i < n; i++)
        for (int e = 0; e < 3; e++)
            CHECK(fabs(props[i * 3 + e] - (e + 1) / 6.0) < 1e-15,
                  "prop %d %d = %g", i, e, props[i * 3 + e]);
    CHECK_OK_EXIT(swy_load_tracker_proportions(t, 1, 2, props, steps, &n),
                  NULL);
    CHECK(n == 2 && steps[0] == 15 && fabs(props[3 + 2] - 16.0 / 18) < 1e-15,
          "layer 1 newest 2: n %d step %lld", n, (long long)steps[0]);
    /* Going back in time is refused; re-recording the newest replaces. */
    int64_t c1[3] = {5, 5, 5};
    CHECK(swy_load_record(t, 15, 0, c1) == SWY_ERR_INVALID_ARG, "old step");
    CHECK_OK_EXIT(swy_load_record(t, 16, 0, c1), NULL);
    CHECK_OK_EXIT(swy_load_tracker_get(t, 3, 0, &step, c), NULL);
    CHECK(c[0] == 5 && step == 16, "replace");
    swy_load_tracker_destroy(t);
}

static void test_window_ema(void)
{
    enum { N = 300, E = 2 };
    double s[N * E], out[E];
    swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    /* Constant series: every predictor returns it exactly. */
    for (int t = 0; t < N; t++) {
        s[t * E] = 0.3;
        s[t * E + 1] = 0.7;
    }
    c.window = 10;
    swy_load_predictor_t w = make(c, E);
    CHECK_OK_EXIT(swy_load_predictor_predict(w, s, N, 1000, out), NULL);
    CHECK(fabs(out[0] - 0.3) < 1e-15 && fabs(out[1] - 0.7) < 1e-15,
          "window const %g %g", out[0], out[1]);
    c.kind = SWY_LOAD_PRED_EMA;
    c.theta = 0.9;
    swy_load_predictor_t m = make(c, E);
    CHECK_OK_EXIT(swy_load_predictor_predict(m, s, N, 1, out), NULL);
    CHECK(fabs(out[0] - 0.3) < 1e-15, "ema const %g", out[0]);
    /* Step from (0.3, 0.7) to (0.6, 0.4) at step 280, 20 steps ago:
     * window 10 sees only the new value; window 40 half and half;
     * the EMA started at 0.3 moves 1 - 0.9^20 of the way. */
    for (int t = 280; t < N; t++) {
        s[t * E] = 0.6;
        s[t * E + 1] = 0.4;
    }
    CHECK_OK_EXIT(swy_load_predictor_predict(w, s, N, 100, out), NULL);
    CHECK(fabs(out[0] - 0.6) < 1e-15, "window 10 after step %g", out[0]);
    swy_load_predictor_destroy(w);
    c.kind = SWY_LOAD_PRED_WINDOW;
    c.window = 40;
    w = make(c, E);
    CHECK_OK_EXIT(swy_load_predictor_predict(w, s, N, 1, out), NULL);
    CHECK(fabs(out[0] - 0.45) < 1e-15 && fabs(out[1] - 0.55) < 1e-15,
          "window 40 after step %g %g", out[0], out[1]);
    /* A window longer than the history averages all of it. */
    CHECK_OK_EXIT(swy_load_predictor_predict(w, s + (N - 20) * E, 20, 1, out),
                  NULL);
    CHECK(fabs(out[0] - 0.6) < 1e-15, "short history %g", out[0]);
    CHECK_OK_EXIT(swy_load_predictor_predict(m, s, N, 1, out), NULL);
    double want = 0.6 - 0.3 * pow(0.9, 20);
    CHECK(fabs(out[0] - want) < 1e-12 && fabs(out[0] + out[1] - 1) < 1e-15,
          "ema after step %.15g want %.15g", out[0], want);
    swy_load_predictor_destroy(w);
    swy_load_predictor_destroy(m);
}

static void test_arima_trend(void)
{
    /* p_0 = 0.2 + 0.0005 t, p_1 = 1 - p_0: a line; ARIMA(p,1,q) must
     * forecast it exactly (to 1e-7, the effect of the ridge of the least
     * squares over 1,000 steps; normalization keeps it: it sums to 1). */
    enum { N = 400, E = 2 };
    double s[N * E], out[E];
    for (int t = 0; t < N; t++) {
        s[t * E] = 0.2 + 0.0005 * t;
        s[t * E + 1] = 1.0 - s[t * E];
    }
    int orders[][3] = {{1, 1, 0}, {2, 1, 1}, {5, 1, 5}};
    for (size_t i = 0; i < 3; i++) {
        swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
        c.kind = SWY_LOAD_PRED_ARIMA;
        c.p = orders[i][0];
        c.d = orders[i][1];
        c.q = orders[i][2];
        swy_load_predictor_t a = make(c, E);
        CHECK_OK_EXIT(swy_load_predictor_fit(a, s, 300), NULL);
        for (int h = 1; h <= 1000; h *= 10) {
            /* From data up to step 299, the value at 299 + h. */
            CHECK_OK_EXIT(swy_load_predictor_predict(a, s, 300, h, out), NULL);
            double want = 0.2 + 0.0005 * (299 + h);
            CHECK(fabs(out[0] - want) < 1e-7,
                  "ARIMA(%d,1,%d) h %d: %.12g want %.12g", c.p, c.q, h,
                  out[0], want);
        }
        swy_load_predictor_destroy(a);
    }
}

static void test_ar2(void)
{
    /* x_t = 0.05 + 0.6 x_{t-1} - 0.3 x_{t-2} + e_t, e ~ N(0, 0.01²),
     * 20,000 steps: least squares recovers the coefficients to well
     * within 0.03 (their standard error is about 0.007). */
    enum { N = 20000 };
    double *s = malloc(N * sizeof(double)), ar[2], ma[1], c0;
    double x1 = 0.0, x2 = 0.0;
    for (int t = -200; t < N; t++) {
        double x = 0.05 + 0.6 * x1 - 0.3 * x2 + 0.01 * gauss();
        x2 = x1;
        x1 = x;
        if (t >= 0)
            s[t] = x;
    }
    swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    c.kind = SWY_LOAD_PRED_ARIMA;
    c.p = 2;
    c.d = 0;
    c.q = 0;
    c.normalize = 0;
    swy_load_predictor_t a = make(c, 1);
    CHECK_OK_EXIT(swy_load_predictor_fit(a, s, N), NULL);
    CHECK_OK_EXIT(swy_load_predictor_arima_coefs(a, 0, ar, ma, &c0), NULL);
    printf("AR(2): ar %.4f %.4f c %.5f (true 0.6 -0.3 0.05)\n", ar[0], ar[1],
           c0);
    CHECK(fabs(ar[0] - 0.6) < 0.03 && fabs(ar[1] + 0.3) < 0.03 &&
              fabs(c0 - 0.05) < 0.005,
          "AR(2) coefficients %g %g %g", ar[0], ar[1], c0);
    /* Far ahead the forecast is the process mean c / (1 - ar1 - ar2). */
    double out;
    CHECK_OK_EXIT(swy_load_predictor_predict(a, s, N, 1000, &out), NULL);
    CHECK(fabs(out - c0 / (1 - ar[0] - ar[1])) < 1e-9, "mean %g", out);
    /* One step ahead: exactly the fitted recursion. */
    CHECK_OK_EXIT(swy_load_predictor_predict(a, s, N, 1, &out), NULL);
    double want = c0 + ar[0] * s[N - 1] + ar[1] * s[N - 2];
    CHECK(fabs(out - want) < 1e-12, "1 step %g want %g", out, want);
    swy_load_predictor_destroy(a);
    free(s);
}

static void test_arima111(void)
{
    /* w_t = 0.5 w_{t-1} + e_t + 0.4 e_{t-1}, x = cumulative sum of w,
     * 20,000 steps: Hannan–Rissanen recovers ar 0.5 and ma 0.4 within
     * 0.05. */
    enum { N = 20000 };
    double *s = malloc(N * sizeof(double)), ar[1], ma[1], c0;
    double w1 = 0.0, e1 = 0.0, x = 0.0;
    for (int t = -200; t < N; t++) {
        double e = 0.01 * gauss();
        double w = 0.5 * w1 + e + 0.4 * e1;
        w1 = w;
        e1 = e;
        x += w;
        if (t >= 0)
            s[t] = x;
    }
    swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    c.kind = SWY_LOAD_PRED_ARIMA;
    c.p = 1;
    c.d = 1;
    c.q = 1;
    c.normalize = 0;
    swy_load_predictor_t a = make(c, 1);
    CHECK_OK_EXIT(swy_load_predictor_fit(a, s, N), NULL);
    CHECK_OK_EXIT(swy_load_predictor_arima_coefs(a, 0, ar, ma, &c0), NULL);
    printf("ARIMA(1,1,1): ar %.4f ma %.4f c %g (true 0.5 0.4 0)\n", ar[0],
           ma[0], c0);
    CHECK(fabs(ar[0] - 0.5) < 0.05 && fabs(ma[0] - 0.4) < 0.05 && c0 == 0.0,
          "ARIMA(1,1,1) coefficients %g %g %g", ar[0], ma[0], c0);
    /* Far ahead: last level plus the geometric sum of the expected
     * increments w_{n+k} (decaying as ar^k); check it lies between the
     * last value and that plus w's 1-step forecast / (1 - ar). */
    double f1, f1000;
    CHECK_OK_EXIT(swy_load_predictor_predict(a, s, N, 1, &f1), NULL);
    CHECK_OK_EXIT(swy_load_predictor_predict(a, s, N, 1000, &f1000), NULL);
    double inc = f1 - s[N - 1];
    double want = s[N - 1] + inc / (1.0 - ar[0]);
    CHECK(fabs(f1000 - want) < 1e-9, "h 1000 %.12g want %.12g", f1000, want);
    swy_load_predictor_destroy(a);
    free(s);
}

static void test_lstm(void)
{
    /* Two experts, p_0 = 0.5 + 0.2 sin(2πt/20), p_1 = 1 - p_0. The LSTM
     * (16 units, lookback 10, block 1) trained on 1,000 steps must
     * forecast 1 and 5 steps ahead with a mean absolute error below 2
     * percentage points over the next 200 steps; the window average of
     * 20 (the best constant guess) is off by about 12.7. */
    enum { N = 1400, E = 2 };
    double *s = malloc(N * E * sizeof(double)), out[E];
    for (int t = 0; t < N; t++) {
        s[t * E] = 0.5 + 0.2 * sin(6.283185307179586 * t / 20.0);
        s[t * E + 1] = 1.0 - s[t * E];
    }
    swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    c.kind = SWY_LOAD_PRED_LSTM;
    c.lstm_hidden = 16;
    c.lstm_lookback = 10;
    c.lstm_block = 1;
    c.lstm_epochs = 60;
    c.lstm_learning_rate = 0.01;
    swy_load_predictor_t m = make(c, E);
    CHECK_OK_EXIT(swy_load_predictor_fit(m, s, 1000), NULL);
    int horizons[] = {1, 5};
    for (int i = 0; i < 2; i++) {
        double err = 0.0;
        int n = 0;
        for (int t = 1000; t < 1200; t++, n++) {
            CHECK_OK_EXIT(swy_load_predictor_predict(m, s, t, horizons[i], out),
                          NULL);
            err += fabs(out[0] - s[(t - 1 + horizons[i]) * E]);
        }
        err = 100.0 * err / n;
        printf("LSTM periodic: horizon %d MAE %.3f pp\n", horizons[i], err);
        CHECK(err < 2.0, "LSTM horizon %d MAE %.3f pp >= 2", horizons[i],
              err);
    }
    /* Deterministic: the same seed gives the same weights. */
    swy_load_predictor_t m2 = make(c, E);
    double o1[E], o2[E];
    CHECK_OK_EXIT(swy_load_predictor_fit(m2, s, 1000), NULL);
    CHECK_OK_EXIT(swy_load_predictor_predict(m, s, 1100, 3, o1), NULL);
    CHECK_OK_EXIT(swy_load_predictor_predict(m2, s, 1100, 3, o2), NULL);
    CHECK(o1[0] == o2[0], "not deterministic %.17g %.17g", o1[0], o2[0]);
    /* A constant series is learned too (standardization keeps it 0). */
    for (int t = 0; t < N; t++) {
        s[t * E] = 0.25;
        s[t * E + 1] = 0.75;
    }
    CHECK_OK_EXIT(swy_load_predictor_fit(m2, s, 1000), NULL);
    CHECK_OK_EXIT(swy_load_predictor_predict(m2, s, 1000, 100, out), NULL);
    CHECK(fabs(out[0] - 0.25) < 0.005, "LSTM constant %g", out[0]);
    swy_load_predictor_destroy(m);
    swy_load_predictor_destroy(m2);
    free(s);
}

static void test_state(void)
{
    /* 4 experts: steps 0..1999 wander (a random walk with steps of 0.5
     * pp plus 2 pp noise), then stay at fixed shares with 0.3 pp noise.
     * Window 100, 5 windows, smooth 1, range 0.02: the first stable step
     * must be 2000 + 5*100 - 1 (the first five calm windows) ± one
     * window, and every later step stable. */
    enum { N = 5000, E = 4, CHANGE = 2000 };
    double *s = malloc(N * E * sizeof(double));
    double walk[E] = {0.25, 0.25, 0.25, 0.25};
    for (int t = 0; t < N; t++) {
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            double v;
            if (t < CHANGE) {
                walk[e] += 0.005 * gauss();
                walk[e] = walk[e] < 0.05 ? 0.05 : walk[e];
                v = walk[e] + 0.02 * fabs(gauss());
            } else {
                v = 0.1 * (e + 1) + 0.003 * gauss();
            }
            s[t * E + e] = v;
            sum += v;
        }
        for (int e = 0; e < E; e++)
            s[t * E + e] /= sum;
    }
    swy_load_state_config_t c = SWY_LOAD_STATE_CONFIG_INIT;
    swy_load_state_t *st = malloc(N * sizeof(*st));
    CHECK_OK_EXIT(swy_load_state(&c, s, N, E, st), NULL);
    int first = -1, transient_after = 0, stable_before = 0;
    for (int t = 0; t < N; t++) {
        if (st[t] == SWY_LOAD_STABLE && first < 0)
            first = t;
        if (first >= 0 && st[t] != SWY_LOAD_STABLE)
            transient_after++;
    }
    for (int t = 0; t < CHANGE; t++)
        stable_before += st[t] == SWY_LOAD_STABLE;
    int want = CHANGE + 5 * 100 - 1;
    printf("state: first stable step %d (want %d +- 100)\n", first, want);
    CHECK(abs(first - want) <= 100, "first stable %d, want %d", first, want);
    CHECK(transient_after == 0 && stable_before == 0,
          "%d transient after, %d stable before", transient_after,
          stable_before);
    /* Smoothing over 50 steps: the switch comes 49 steps later. */
    c.smooth = 50;
    CHECK_OK_EXIT(swy_load_state(&c, s, N, E, st), NULL);
    int first_s = -1;
    for (int t = 0; t < N && first_s < 0; t++)
        if (st[t] == SWY_LOAD_STABLE)
            first_s = t;
    CHECK(abs(first_s - (want + 49)) <= 100, "smoothed first stable %d",
          first_s);
    /* A variance threshold alone also separates the phases. */
    c.smooth = 1;
    c.max_range = -1.0;
    c.max_variance = 0.0001;
    CHECK_OK_EXIT(swy_load_state(&c, s, N, E, st), NULL);
    first_s = -1;
    for (int t = 0; t < N && first_s < 0; t++)
        if (st[t] == SWY_LOAD_STABLE)
            first_s = t;
    CHECK(abs(first_s - want) <= 100, "variance first stable %d", first_s);
    free(st);
    free(s);
}

static void test_bad_input(void)
{
    swy_load_tracker_t t;
    swy_load_predictor_t p;
    swy_load_predictor_config_t c = SWY_LOAD_PREDICTOR_CONFIG_INIT;
    CHECK(swy_load_tracker_create(1, 0, 10, &t) == SWY_ERR_INVALID_ARG,
          "zero experts tracker");
    CHECK(strstr(swy_last_error(NULL), "n_experts 0") != NULL,
          "message: %s", swy_last_error(NULL));
    CHECK(swy_load_predictor_create(&c, 0, &p) == SWY_ERR_INVALID_ARG,
          "zero experts predictor");
    c.kind = SWY_LOAD_PRED_EMA;
    c.theta = 1.0;
    CHECK(swy_load_predictor_create(&c, 2, &p) == SWY_ERR_INVALID_ARG,
          "theta 1");
    c = (swy_load_predictor_config_t)SWY_LOAD_PREDICTOR_CONFIG_INIT;
    c.kind = SWY_LOAD_PRED_ARIMA;
    c.d = 4;
    CHECK(swy_load_predictor_create(&c, 2, &p) == SWY_ERR_INVALID_ARG, "d 4");
    c.d = 1;
    p = make(c, 2);
    double s[40 * 2], out[2];
    for (int i = 0; i < 80; i++)
        s[i] = 0.5;
    CHECK(swy_load_predictor_predict(p, s, 40, 1, out) ==
              SWY_ERR_INVALID_ARG, "ARIMA not fitted");
    CHECK(swy_load_predictor_fit(p, s, 40) == SWY_ERR_INVALID_ARG,
          "ARIMA(5,1,5) on 40 steps");
    CHECK(strstr(swy_last_error(NULL), "at least 51") != NULL, "message: %s",
          swy_last_error(NULL));
    swy_load_predictor_destroy(p);
    c = (swy_load_predictor_config_t)SWY_LOAD_PREDICTOR_CONFIG_INIT;
    p = make(c, 2);
    CHECK(swy_load_predictor_predict(p, s, 40, 0, out) ==
              SWY_ERR_INVALID_ARG, "horizon 0");
    s[13] = NAN;
    CHECK(swy_load_predictor_predict(p, s, 40, 1, out) ==
              SWY_ERR_INVALID_ARG, "NaN");
    CHECK(strstr(swy_last_error(NULL), "step 6, expert 1") != NULL,
          "message: %s", swy_last_error(NULL));
    swy_load_state_config_t sc = SWY_LOAD_STATE_CONFIG_INIT;
    swy_load_state_t st[40];
    CHECK(swy_load_state(&sc, s, 40, 2, st) == SWY_ERR_INVALID_ARG,
          "state NaN");
    s[13] = 0.5;
    CHECK(swy_load_state(&sc, s, 40, 0, st) == SWY_ERR_INVALID_ARG,
          "state zero experts");
    /* Calibration: quantile out of range; 40 steps hold no window of
     * 100 in their last half, and the message says how many would. */
    CHECK(swy_load_state_calibrate(&sc, s, 40, 2, 0.0) ==
              SWY_ERR_INVALID_ARG, "calibrate quantile 0");
    CHECK(swy_load_state_calibrate(&sc, s, 40, 2, 0.9) ==
              SWY_ERR_INVALID_ARG, "calibrate 40 steps, window 100");
    CHECK(strstr(swy_last_error(NULL), "need at least 200 steps") != NULL,
          "message: %s", swy_last_error(NULL));
    sc.window = 4;
    CHECK_OK_EXIT(swy_load_state_calibrate(&sc, s, 40, 2, 0.9), NULL);
    CHECK(sc.max_range >= 0.0, "calibrated range %g", sc.max_range);
    sc.window = 1;
    CHECK(swy_load_state(&sc, s, 40, 2, st) == SWY_ERR_INVALID_ARG,
          "state window 1");
    swy_load_predictor_destroy(p);
    CHECK_OK_EXIT(swy_load_tracker_create(1, 2, 10, &t), NULL);
    int64_t neg[2] = {3, -1};
    CHECK(swy_load_record(t, 0, 0, neg) == SWY_ERR_INVALID_ARG, "negative");
    CHECK(swy_load_record(t, 0, 1, neg) == SWY_ERR_INVALID_ARG, "layer 1");
    swy_load_tracker_destroy(t);
    swy_load_tracker_destroy(NULL);
    swy_load_predictor_destroy(NULL);
}

/* swy-predict end to end on a synthetic trace: 2 layers, 4 experts,
 * 3,000 steps of 40,000 assignments; the shares wander until step 1,000,
 * then hold at 10/20/30/40 %. Expected: a stable fraction near
 * (3000 - 1000 - 100 - 500) / 3000 = 0.47 (smoothing 100, five windows
 * of 100), a best predictor per horizon and state, and a stable-state
 * error at 100 steps of about the sampling noise (0.2 pp), far below
 * 0.5 pp. A missing file exits 2. */
static const char *predict_exe;

static void test_tool(void)
{
    if (predict_exe == NULL) {
        fprintf(stderr, "usage: test_load tool PATH-TO-swy-predict\n");
        exit(2);
    }
    char path[] = "/tmp/swy_load_traceXXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL, "mkstemp");
    if (f == NULL)
        return;
    fprintf(f, "step,layer,expert,tokens\n");
    double walk[2][4] = {{0.25, 0.25, 0.25, 0.25}, {0.25, 0.25, 0.25, 0.25}};
    for (int t = 1; t <= 3000; t++)
        for (int l = 0; l < 2; l++) {
            double p[4], sum = 0.0;
            for (int e = 0; e < 4; e++) {
                if (t <= 1000) {
                    walk[l][e] += 0.01 * gauss();
                    walk[l][e] = walk[l][e] < 0.05 ? 0.05 : walk[l][e];
                    p[e] = walk[l][e];
                } else {
                    p[e] = 0.1 * (e + 1);
                }
                sum += p[e];
            }
            for (int e = 0; e < 4; e++) {
                double m = 40000.0 * p[e] / sum;
                double c = m + sqrt(m * (1 - p[e] / sum)) * gauss();
                fprintf(f, "%d,%d,%d,%.0f\n", t, l, e, c < 0 ? 0 : c);
            }
        }
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --json --horizons 1,100 --start 300 "
             "--refit 500 --lstm-fit 1000 %s", predict_exe, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "popen");
    if (p == NULL)
        return;
    char line[512];
    double frac = -1.0, win_stable = -1.0;
    int bests = 0, lines = 0;
    while (fgets(line, sizeof(line), p) != NULL) {
        lines++;
        char *q = strstr(line, "\"stable_fraction\":");
        if (q != NULL)
            frac = atof(q + 18);
        if (strstr(line, "\"best\":") != NULL)
            bests++;
        if (strstr(line, "\"predictor\":\"window100\",\"horizon\":100,"
                         "\"state\":\"stable\"") != NULL) {
            q = strstr(line, "\"mae_pp\":");
            win_stable = q != NULL ? atof(q + 9) : -1.0;
        }
    }
    int status = pclose(p);
    printf("tool: %d lines, stable fraction %.3f, window100 stable MAE at "
           "100 steps %.3f pp\n", lines, frac, win_stable);
    CHECK(status == 0, "swy-predict exit status %d", status);
    CHECK(frac > 0.35 && frac < 0.55, "stable fraction %g", frac);
    CHECK(bests == 6, "%d best lines, want 2 horizons x 3 states", bests);
    CHECK(win_stable >= 0.0 && win_stable < 0.5, "window100 stable MAE %g",
          win_stable);
    snprintf(cmd, sizeof(cmd), "%s %s.missing 2>/dev/null", predict_exe,
             path);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "missing file: %d",
          status);
    unlink(path);
}

/* A 1-layer, 4-expert trace of n steps of 40,000 assignments with
 * sampling noise: shares fixed at 10/20/30/40 % (trend 0), or moving
 * linearly from 10/20/30/40 % to 40/30/20/10 % (trend 1), into a new
 * file named after the mkstemp template path. Returns 0 or -1. */
static int write_trace(char *path, int n, int trend)
{
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL)
        return -1;
    fprintf(f, "step,layer,expert,tokens\n");
    for (int t = 1; t <= n; t++)
        for (int e = 0; e < 4; e++) {
            double p = 0.1 * (e + 1);
            if (trend)
                p += (0.1 * (4 - e) - p) * t / n;
            double m = 40000.0 * p;
            double c = m + sqrt(m * (1 - p)) * gauss();
            fprintf(f, "%d,0,%d,%.0f\n", t, e, c < 0 ? 0 : c);
        }
    return fclose(f);
}

/* Reads swy-predict's JSON lines: the state range of the judged trace,
 * and per horizon 1 and state "all" the best predictor in hindsight and
 * the one chosen on the calibration trace. */
typedef struct {
    double state_range;
    char best[32], chosen[32], chosen_on[256];
    int status;
} heldout_t;

static void copy_field(const char *line, const char *key, char *out,
                       size_t len)
{
    const char *q = strstr(line, key);
    if (q == NULL)
        return;
    q += strlen(key);
    size_t i = 0;
    while (q[i] != '"' && q[i] != '\0' && i + 1 < len) {
        out[i] = q[i];
        i++;
    }
    out[i] = '\0';
}

static heldout_t run_heldout(const char *args)
{
    heldout_t h = {-1.0, "", "", "", -1};
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --json --horizons 1,10 --start 300 "
             "--refit 500 --lstm-fit 300 --state-window 50 "
             "--state-windows 3 --state-smooth 20 %s 2>/dev/null",
             predict_exe, args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return h;
    char line[512];
    while (fgets(line, sizeof(line), p) != NULL) {
        char *q = strstr(line, "\"state_range\":");
        if (q != NULL)
            h.state_range = atof(q + 14);
        if (strstr(line, "\"horizon\":1,\"state\":\"all\"") == NULL)
            continue;
        if (strstr(line, "\"best\":") != NULL)
            copy_field(line, "\"best\":\"", h.best, sizeof(h.best));
        if (strstr(line, "\"chosen\":") != NULL) {
            copy_field(line, "\"chosen\":\"", h.chosen, sizeof(h.chosen));
            copy_field(line, "\"chosen_on\":\"", h.chosen_on,
                       sizeof(h.chosen_on));
        }
    }
    h.status = pclose(p);
    return h;
}

/* Held-out evaluation (swy-predict --calibrate CAL TRACE): the detector's
 * threshold and the choice of predictor come from CAL alone. CAL holds
 * still, where a long average wins; the judged traces drift, where it
 * loses to a short one. So the predictor chosen for TRACE must be CAL's
 * best and not TRACE's own, and the threshold must not change with the
 * trace judged. A short trace (300 steps) with the default --start 500
 * is evaluated from an earlier origin instead of refused. */
static void test_tool_heldout(void)
{
    if (predict_exe == NULL) {
        fprintf(stderr, "usage: test_load tool_heldout PATH\n");
        exit(2);
    }
    char cal[] = "/tmp/swy_load_calXXXXXX", drift[] = "/tmp/swy_load_drXXXXXX";
    char drift2[] = "/tmp/swy_load_dr2XXXXXX";
    char shrt[] = "/tmp/swy_load_shortXXXXXX";
    CHECK(write_trace(cal, 1500, 0) == 0 && write_trace(drift, 1500, 1) == 0 &&
              write_trace(drift2, 1200, 1) == 0 &&
              write_trace(shrt, 300, 0) == 0,
          "writing the traces");
    char args[1024];
    heldout_t own = run_heldout(cal);
    heldout_t judged_own = run_heldout(drift);
    snprintf(args, sizeof(args), "--calibrate %s %s", cal, drift);
    heldout_t h = run_heldout(args);
    snprintf(args, sizeof(args), "--calibrate %s %s", cal, drift2);
    heldout_t h2 = run_heldout(args);
    printf("tool_heldout: best on the calibration trace %s, on the drifting "
           "one %s; chosen for it %s (on %s); state range %g and %g\n",
           own.best, judged_own.best, h.chosen, h.chosen_on, h.state_range,
           h2.state_range);
    CHECK(own.status == 0 && judged_own.status == 0 && h.status == 0 &&
              h2.status == 0,
          "exit status %d %d %d %d", own.status, judged_own.status, h.status,
          h2.status);
    CHECK(own.best[0] != '\0' && judged_own.best[0] != '\0' &&
              strcmp(own.best, judged_own.best) != 0,
          "the traces do not separate the predictors (%s vs %s)", own.best,
          judged_own.best);
    CHECK(strcmp(h.chosen, own.best) == 0, "chosen %s, but the calibration "
          "trace's best is %s", h.chosen, own.best);
    CHECK(strcmp(h.chosen_on, cal) == 0, "chosen on '%s'", h.chosen_on);
    CHECK(strcmp(h.best, judged_own.best) == 0, "best in hindsight %s vs %s",
          h.best, judged_own.best);
    CHECK(h.state_range > 0 && h.state_range == h2.state_range,
          "the calibrated range depends on the judged trace: %g vs %g",
          h.state_range, h2.state_range);
    /* A short trace with the default --start: evaluated, not refused. */
    snprintf(args, sizeof(args), "%s --json %s >/dev/null 2>&1", predict_exe,
             shrt);
    int status = system(args);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "300 steps with the default --start: status %d", status);
    snprintf(args, sizeof(args), "%s --start 400 %s 2>&1 | grep -q "
             "'set --start below 299'", predict_exe, shrt);
    status = system(args);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "--start 400 on 300 steps does not say which --start would do");
    unlink(cal);
    unlink(drift);
    unlink(drift2);
    unlink(shrt);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"tracker", test_tracker},     {"window_ema", test_window_ema},
        {"arima_trend", test_arima_trend}, {"ar2", test_ar2},
        {"arima111", test_arima111},   {"lstm", test_lstm},
        {"state", test_state},         {"bad_input", test_bad_input},
        {"tool", test_tool},           {"tool_heldout", test_tool_heldout},
    };
    if (argc == 3)
        predict_exe = argv[2];
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_load CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            if (check_failures)
                fprintf(stderr, "%d check(s) failed\n", check_failures);
            return check_failures ? 1 : 0;
        }
    fprintf(stderr, "test_load: no case %s\n", argv[1]);
    return 2;
}
