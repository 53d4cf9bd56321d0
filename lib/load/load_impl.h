/* Internals of lib/load: the predictor object and the pieces each kind
 * implements (arima.c, lstm.c), plus the small dense least-squares solver
 * they share. */
#ifndef SWY_LOAD_IMPL_H
#define SWY_LOAD_IMPL_H

#include <stddef.h>

#include "switchyard/load.h"

typedef struct swy_load_arima swy_load_arima_t;
typedef struct swy_load_lstm swy_load_lstm_t;

struct swy_load_predictor {
    swy_load_predictor_config_t cfg;
    int n_experts;
    swy_load_arima_t *arima; /* NULL until fitted */
    swy_load_lstm_t *lstm;   /* NULL until fitted */
};

/* Solve min ||X b - y||^2 (+ a tiny ridge that only matters for exactly
 * collinear columns) for b[k]; X is [n][k] row-major. Returns 0, or -1
 * when out of memory. */
int swy_load_lstsq(const double *X, const double *y, int n, int k,
                   double *b);

/* ARIMA, one model per expert. */
swy_status_t swy_load_arima_fit(const swy_load_predictor_config_t *cfg,
                                int n_experts, const double *series,
                                int n_steps, swy_load_arima_t **arima_p);
swy_status_t swy_load_arima_predict(const swy_load_arima_t *arima,
                                    const double *history, int n_steps,
                                    int horizon, double *out);
void swy_load_arima_coefs(const swy_load_arima_t *arima, int expert,
                          double *ar, double *ma, double *constant_p);
void swy_load_arima_destroy(swy_load_arima_t *arima);
int swy_load_arima_min_fit_steps(const swy_load_predictor_config_t *cfg);

/* LSTM over all experts. */
swy_status_t swy_load_lstm_fit(const swy_load_predictor_config_t *cfg,
                               int n_experts, const double *series,
                               int n_steps, swy_load_lstm_t **lstm_p);
swy_status_t swy_load_lstm_predict(const swy_load_lstm_t *lstm,
                                   const double *history, int n_steps,
                                   int horizon, double *out);
void swy_load_lstm_destroy(swy_load_lstm_t *lstm);

#endif
