/**
 * @file load.h
 * @brief Switchyard expert-load tracking and prediction: per-step token
 *        counts of every (layer, expert) in a bounded ring, the
 *        transient/stable state of the load, and predictors of future
 *        expert proportions (sliding-window average, EMA, ARIMA(p,d,q),
 *        a small LSTM) — after P. Cong et al., "Prediction Is All MoE
 *        Needs", arXiv 2404.16914.
 *
 * **Series.** Predictors and the state detector work on a multivariate
 * series of expert proportions laid out step-major: `series[t * E + e]`
 * is the share of the step-t assignments of one layer that went to
 * expert e (sum over e = 1). swy_load_tracker_proportions() produces it
 * from recorded counts; per-expert counts come from
 * swy_moe_route_counts() (summed over ranks).
 *
 * **Errors.** Every call returns a swy_status_t; the detail of a failure
 * is in swy_last_error(NULL) on the calling thread.
 *
 * **Threads and ownership.** Objects are not thread-safe: one thread at a
 * time per tracker or predictor. Different objects may be used from
 * different threads. Every function is local (no communication). Input
 * arrays are read during the call only.
 */
#ifndef SWITCHYARD_LOAD_H
#define SWITCHYARD_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Tracker                                                             */
/* ------------------------------------------------------------------ */

typedef struct swy_load_tracker *swy_load_tracker_t;

/**
 * @brief Create a tracker holding the per-expert token counts of the last
 *        @p capacity_steps steps of @p n_layers layers.
 * @param n_layers       >= 1.
 * @param n_experts      >= 1, experts per layer (the global count E).
 * @param capacity_steps >= 1, steps kept; older steps are overwritten.
 * @param tracker_p      Output, set only on success.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (a size < 1, NULL output);
 *         SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_tracker_create(int n_layers, int n_experts,
                                                int capacity_steps,
                                                swy_load_tracker_t *tracker_p);

/** @brief Destroy a tracker. Accepts NULL. */
SWY_EXPORT void swy_load_tracker_destroy(swy_load_tracker_t tracker);

/**
 * @brief Record one layer's per-expert token counts of one step. Steps
 *        must not decrease: a step greater than the newest one starts a
 *        new ring entry (overwriting the oldest when full; steps in
 *        between are simply absent), the newest step may be recorded
 *        again for another layer (or again for the same layer, which
 *        replaces its counts).
 * @param step               Training step, >= 0.
 * @param layer              0..n_layers-1.
 * @param counts_per_expert  [n_experts] counts, each >= 0.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, layer out of range, a
 *         negative count or step, a step older than the newest one).
 */
SWY_EXPORT swy_status_t swy_load_record(swy_load_tracker_t tracker,
                                        int64_t step, int layer,
                                        const int64_t *counts_per_expert);

/**
 * @brief Number of steps held (<= capacity) and the tracker's shape.
 *        Any output may be NULL.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (tracker NULL).
 */
SWY_EXPORT swy_status_t swy_load_tracker_info(swy_load_tracker_t tracker,
                                              int *n_steps_p,
                                              int *n_layers_p,
                                              int *n_experts_p);

/**
 * @brief Read one held step of the ring.
 * @param index      0 = oldest held step .. n_steps-1 = newest.
 * @param layer      0..n_layers-1.
 * @param step_p     Output: the step number (may be NULL).
 * @param counts     Output [n_experts]: the counts; all -1 when this
 *                   layer was not recorded for that step.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (index or layer out of range,
 *         counts NULL).
 */
SWY_EXPORT swy_status_t swy_load_tracker_get(swy_load_tracker_t tracker,
                                             int index, int layer,
                                             int64_t *step_p,
                                             int64_t *counts);

/**
 * @brief One layer's proportion series over the newest held steps,
 *        oldest first: `props[i * E + e] = counts[e] / sum(counts)`.
 *        Steps where the layer was not recorded or got no tokens at all
 *        are left out (they have no proportions).
 * @param layer     0..n_layers-1.
 * @param max_steps >= 1: at most this many (the newest) steps.
 * @param props     Output [max_steps * n_experts].
 * @param steps     Output [max_steps] step numbers, or NULL.
 * @param n_p       Output: rows written.
 * @return SWY_OK; SWY_ERR_INVALID_ARG.
 */
SWY_EXPORT swy_status_t swy_load_tracker_proportions(
    swy_load_tracker_t tracker, int layer, int max_steps, double *props,
    int64_t *steps, int *n_p);

/* ------------------------------------------------------------------ */
/* State detection                                                     */
/* ------------------------------------------------------------------ */

/** Load state of a step. */
typedef enum {
    SWY_LOAD_TRANSIENT = 0, /**< obvious fluctuation (early training) */
    SWY_LOAD_STABLE = 1     /**< temporal locality: loads hold still */
} swy_load_state_t;

/**
 * State detector parameters. The paper publishes no thresholds; these
 * are calibrated on traces (swy_load_state_calibrate; docs/performance.md,
 * "predict").
 *
 * Step t is stable when each of the @c consecutive windows of
 * @c window steps that end at t, t-window, ..., t-(consecutive-1)*window
 * is calm; a window is calm when, for every expert, the range (max-min)
 * of its smoothed proportion within the window is <= @c max_range and
 * the variance is <= @c max_variance. The smoothed proportion at s is
 * the mean of the raw proportions over (s-smooth, s] (per-step sampling
 * noise of a small batch would otherwise dominate the range). Only data
 * up to t decides t (causal); steps before enough data exists are
 * transient. A threshold < 0 disables its test.
 */
typedef struct {
    size_t struct_size;  /**< sizeof(swy_load_state_config_t) */
    int window;          /**< steps per window, >= 2 (100) */
    int consecutive;     /**< calm windows in a row, >= 1 (5) */
    int smooth;          /**< moving-average length, >= 1 (1 = raw) */
    double max_range;    /**< proportion units (0.02), < 0 = off */
    double max_variance; /**< proportion units squared, < 0 = off */
} swy_load_state_config_t;

/** Defaults: window 100, 5 windows, raw, range 0.02, variance off. */
#define SWY_LOAD_STATE_CONFIG_INIT                                          \
    {sizeof(swy_load_state_config_t), 100, 5, 1, 0.02, -1.0}

/**
 * @brief Classify every step of a proportion series.
 * @param cfg       Parameters (see swy_load_state_config_t).
 * @param series    [n_steps * n_experts], finite.
 * @param n_steps   >= 1.
 * @param n_experts >= 1.
 * @param state_p   Output [n_steps].
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, sizes, struct_size, a
 *         parameter out of range, a non-finite value);
 *         SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_state(const swy_load_state_config_t *cfg,
                                       const double *series, int n_steps,
                                       int n_experts,
                                       swy_load_state_t *state_p);

/**
 * @brief Calibrate the state detector's range threshold on a trace.
 *
 * The paper publishes no threshold. Taking the last half of the trace as
 * stable (late training; Cong et al. see the loads settle as training
 * goes on), @c cfg->max_range becomes the @p quantile of the calm
 * statistic of every window (t - window, t] that ends there: the largest
 * range over experts of the smoothed proportion (see
 * swy_load_state_config_t). Calibrate on one trace and detect on others:
 * a threshold set on the trace it judges says nothing of the next one.
 * @param cfg       window and smooth are read, max_range is written (only
 *                  on success); the rest as for swy_load_state().
 * @param series    [n_steps * n_experts], finite.
 * @param quantile  in (0, 1], e.g. 0.95.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, sizes, struct_size, a
 *         parameter out of range, a non-finite value, a trace whose last
 *         half holds no complete window: the message gives the steps
 *         needed); SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_state_calibrate(
    swy_load_state_config_t *cfg, const double *series, int n_steps,
    int n_experts, double quantile);

/* ------------------------------------------------------------------ */
/* Predictors                                                          */
/* ------------------------------------------------------------------ */

typedef struct swy_load_predictor *swy_load_predictor_t;

/** Predictor kinds. */
typedef enum {
    SWY_LOAD_PRED_WINDOW = 0, /**< mean of the last @c window steps */
    SWY_LOAD_PRED_EMA = 1,    /**< p̂ = θ p̂ + (1-θ) p over the history */
    SWY_LOAD_PRED_ARIMA = 2,  /**< per expert ARIMA(p,d,q), Hannan–Rissanen
                                   least squares */
    SWY_LOAD_PRED_LSTM = 3    /**< one LSTM over all experts at once */
} swy_load_predictor_kind_t;

/**
 * Predictor parameters; only the fields of the chosen kind are read.
 *
 * ARIMA: the series of one expert is differenced @c d times; the result
 * w is fitted as w_t = c + Σ_i ar_i w_{t-i} + Σ_j ma_j e_{t-j} + e_t by
 * Hannan–Rissanen (a long AR by least squares estimates the innovations
 * e, then one least-squares regression on the lagged w and lagged e);
 * the constant c is fitted only when d = 0 (with d >= 1 it would be a
 * drift that grows with the horizon). Forecasts are recursive with
 * future innovations 0 and integrated back d times.
 *
 * LSTM: the series is cut into blocks of @c lstm_block steps and each
 * block averaged; inputs are standardized (per-expert mean of the fit
 * series, one global scale). The network (one layer, @c lstm_hidden
 * units, linear output over all experts) reads @c lstm_lookback block
 * means and predicts the next; it is trained with backpropagation
 * through time, mean squared error and Adam (@c lstm_learning_rate,
 * @c lstm_epochs passes over every window of the fit series, weights
 * drawn from @c lstm_seed). A forecast h steps ahead feeds its own
 * predictions back for ceil(h / lstm_block) blocks.
 */
typedef struct {
    size_t struct_size;             /**< sizeof(swy_load_predictor_config_t) */
    swy_load_predictor_kind_t kind; /**< which predictor */
    int normalize;          /**< 1: clamp predictions to [0,1] and rescale to
                                 sum 1 (proportions); 0: raw values */
    int window;             /**< WINDOW: W >= 1 (100) */
    double theta;           /**< EMA: θ in [0, 1) (0.9) */
    int p, d, q;            /**< ARIMA: p, q in 0..32, d in 0..3 (5,1,5) */
    int lstm_hidden;        /**< LSTM: units, 1..256 (16) */
    int lstm_epochs;        /**< LSTM: passes, >= 1 (30) */
    double lstm_learning_rate; /**< LSTM: Adam step, > 0 (0.005) */
    int lstm_lookback;      /**< LSTM: input blocks, >= 1 (16) */
    int lstm_block;         /**< LSTM: steps per block, >= 1 (10) */
    uint64_t lstm_seed;     /**< LSTM: weight init and sample order (1) */
} swy_load_predictor_config_t;

/** Defaults (window average of 100 steps; the other kinds' defaults are
 *  the values in parentheses above). */
#define SWY_LOAD_PREDICTOR_CONFIG_INIT                                      \
    {sizeof(swy_load_predictor_config_t), SWY_LOAD_PRED_WINDOW, 1, 100,     \
     0.9, 5, 1, 5, 16, 30, 0.005, 16, 10, 1}

/**
 * @brief Create a predictor for series of @p n_experts proportions.
 * @param cfg       Parameters; copied.
 * @param n_experts >= 1 (>= 2 makes sense for proportions).
 * @param pred_p    Output, set only on success.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, struct_size, kind or a
 *         parameter of the kind out of range); SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_predictor_create(
    const swy_load_predictor_config_t *cfg, int n_experts,
    swy_load_predictor_t *pred_p);

/** @brief Destroy a predictor. Accepts NULL. */
SWY_EXPORT void swy_load_predictor_destroy(swy_load_predictor_t pred);

/**
 * @brief Fit the predictor's parameters on a series (ARIMA coefficients,
 *        LSTM weights; window and EMA have none and only check the
 *        input). A later fit replaces the earlier one. Deterministic.
 * @param series  [n_steps * n_experts], finite.
 * @param n_steps ARIMA: enough for the regressions (at least
 *                d + 3*(p+q) + 20 steps); LSTM: at least
 *                (lookback + 1) * block; others: >= 1.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, non-finite value, series
 *         too short; the message says the minimum); SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_predictor_fit(swy_load_predictor_t pred,
                                               const double *series,
                                               int n_steps);

/**
 * @brief Predict the proportions @p horizon steps after the last step of
 *        @p history, from @p history (data up to now) and the fitted
 *        parameters. The history need not be the fit series.
 * @param history [n_steps * n_experts], finite; n_steps >= 1 (ARIMA:
 *                >= d + 1).
 * @param horizon >= 1: 1 = the next step.
 * @param out     Output [n_experts] (normalized when cfg.normalize).
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, horizon < 1, non-finite
 *         value, too short, ARIMA or LSTM not fitted);
 *         SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_predictor_predict(swy_load_predictor_t pred,
                                                   const double *history,
                                                   int n_steps, int horizon,
                                                   double *out);

/**
 * @brief The fitted ARIMA coefficients of one expert's series.
 * @param expert     0..n_experts-1.
 * @param ar         Output [p] (ar_1..ar_p), or NULL.
 * @param ma         Output [q] (ma_1..ma_q), or NULL.
 * @param constant_p Output c (0 when d >= 1), or NULL.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (not an ARIMA predictor, not
 *         fitted, expert out of range).
 */
SWY_EXPORT swy_status_t swy_load_predictor_arima_coefs(
    swy_load_predictor_t pred, int expert, double *ar, double *ma,
    double *constant_p);

/* ------------------------------------------------------------------ */
/* Placement                                                           */
/* ------------------------------------------------------------------ */

/**
 * Placement planner parameters (FasterMoE's shadowing, J. He et al.,
 * PPoPP 2022, section 4; replicate-hot / pack-cold after Cong et al.).
 *
 * Latency model of one MoE layer, per step: with a = ffn / hidden,
 *   lat = 3 * (4 a H^2 / P) * B_comp + 4 * (H b / BW) * B_comm
 *         + n_shadowed * 2 a H^2 b / BW
 * where P = @c flops, BW = @c link_bandwidth, b = @c bytes_per_param,
 * B_comp the tokens the busiest rank computes (the rows of its
 * non-shadowed experts plus 1/n_ranks of every shadowed expert's rows:
 * every rank computes its own tokens of a shadowed expert) and B_comm
 * the rows the busiest rank receives for its non-shadowed experts
 * (shadowed rows are not dispatched). The 3 counts forward and the two
 * backward products, the 4 the dispatch and combine of forward and
 * backward; the last term is the per-step cost of keeping a replica
 * (FasterMoE's broadcast of its parameters, here also the reduction of
 * its gradients).
 */
typedef struct {
    size_t struct_size;      /**< sizeof(swy_load_placement_config_t) */
    int n_ranks;             /**< W >= 1 */
    int experts_per_rank;    /**< >= 1; E = n_ranks * experts_per_rank,
                                  global expert e lives on rank
                                  e / experts_per_rank */
    int hidden;              /**< H >= 1 */
    int ffn;                 /**< F >= 1 (a = F / H) */
    int bytes_per_param;     /**< b >= 1 (4 for fp32) */
    double link_bandwidth;   /**< BW, bytes/s, > 0 */
    double flops;            /**< P, flop/s of one rank, > 0 */
    int max_shadow;          /**< at most this many shadowed experts,
                                  0..E (0: never shadow) */
    double cold_fraction;    /**< an expert with load < cold_fraction x
                                  mean load is cold, >= 0 (0.25) */
    double pack_slack;       /**< bin capacity (load / n_ranks) x
                                  (1 + pack_slack), >= 0 (0.1) */
    int fixed_slots;         /**< 0 (default): packing as described at
                                  swy_load_placement_plan; 1: every rank
                                  keeps exactly experts_per_rank experts
                                  (lib/moe's slots), see there */
    const int *current_rank; /**< [E] the rank each expert lives on now
                                  (each rank holding experts_per_rank),
                                  or NULL (default): e / experts_per_rank */
    int horizon_steps;       /**< steps the plan stands for (the planning
                                  horizon), >= 0: relocations are made only
                                  when the modeled gain over this many
                                  steps exceeds what the moves cost on the
                                  link (see swy_load_placement_plan);
                                  0: moves are free */
    double move_bytes;       /**< bytes one relocation moves, >= 0; 0
                                  (default): the expert's parameters and
                                  Adam's two moments, 3 x (2 H F + H + F)
                                  x bytes_per_param */
} swy_load_placement_config_t;

/** Defaults: sizes 0 (must be set), fp32, 12.5 GB/s, 10 Tflop/s, up to
 *  4 shadowed experts, cold below 0.25 x mean, 10% slack, packing not
 *  held to the slots, experts on their initial ranks, a plan that stands
 *  for 10 steps, moves of parameters and Adam state. */
#define SWY_LOAD_PLACEMENT_CONFIG_INIT                                      \
    {sizeof(swy_load_placement_config_t), 0, 0, 0, 0, 4, 12.5e9, 1e13, 4,  \
     0.25, 0.1, 0, NULL, 10, 0.0}

/**
 * A placement plan. The caller points @c shadow, @c home and @c cold at
 * arrays of E ints (any may be NULL when not wanted); the planner fills
 * them and the scalars.
 */
typedef struct {
    size_t struct_size;      /**< sizeof(swy_load_placement_t) */
    int *shadow;             /**< [E] out: 1 = replicate on every rank */
    int *home;               /**< [E] out: the rank the expert should live
                                  on after packing (its current rank
                                  e / experts_per_rank unless moved); a
                                  shadowed expert keeps its current rank */
    int *cold;               /**< [E] out: 1 = cold (load below
                                  cold_fraction x mean) */
    int n_shadowed;          /**< out: experts shadowed */
    int n_cold;              /**< out: cold experts */
    int n_moved;             /**< out: experts whose home changed */
    double busiest_before;   /**< out: B_comp of the current placement */
    double busiest_after;    /**< out: B_comp with shadowing and home[] */
    double latency_before_s; /**< out: modeled latency, current placement,
                                  nothing shadowed */
    double latency_shadow_s; /**< out: with the chosen shadows, experts on
                                  their current ranks */
    double latency_after_s;  /**< out: with the shadows and home[] */
    double move_cost_s;      /**< out: link time of the relocations the
                                  packing proposed (n_moved x move_bytes /
                                  link_bandwidth), kept or not */
    double move_gain_s;      /**< out: modeled gain of those relocations
                                  over horizon_steps (latency with the
                                  shadows on the current ranks minus with
                                  the proposed homes, times the steps) */
    int moves_kept_back;     /**< out: relocations proposed and not made
                                  because move_gain_s <= move_cost_s */
} swy_load_placement_t;

/**
 * @brief Plan the placement of one MoE layer's experts from their loads.
 *
 * Shadowing (FasterMoE): experts are taken by decreasing load (ties: the
 * lower id first); the k hottest are shadowed for k = 1, 2, ... as long
 * as the modeled latency (see swy_load_placement_config_t) strictly
 * decreases, at most @c max_shadow.
 *
 * Packing (first-fit decreasing): the non-shadowed experts, by
 * decreasing load (ties: lower id first), go into n_ranks bins of
 * capacity (their total load / n_ranks) x (1 + pack_slack). A warm
 * expert tries its current rank first, then the ranks in order; a cold
 * expert tries the ranks in order only, so cold experts end up packed
 * together on the first ranks with room. An expert that fits nowhere
 * goes to the least loaded bin (lowest rank on ties). The number of
 * experts per rank is not constrained.
 *
 * With @c fixed_slots, packing keeps exactly experts_per_rank experts on
 * every rank: a shadowed expert keeps its slot on its current rank; the
 * others, by decreasing load (ties: lower id first), each stay on their
 * current rank when it has a free slot and stays within the capacity
 * above, else go to the rank with the lowest load so far that still has
 * a free slot (ties: the expert's current rank, then the lower rank).
 * Cold experts thus fill the slots left on the ranks that took hot ones,
 * and a balanced placement does not move.
 *
 * Moves cost: with @c horizon_steps > 0 the relocations packing proposes
 * are charged their bytes, n_moved x move_bytes / link_bandwidth, against
 * their modeled gain over the horizon, horizon_steps x (latency with the
 * shadows and the experts on their current ranks - with the proposed
 * homes). Unless the gain exceeds the cost, every expert keeps its
 * current rank (home[] = current, n_moved 0, moves_kept_back the number
 * proposed): a plan stays until a new one wins by more than the move.
 *
 * "Current" is @c current_rank when given, else e / experts_per_rank;
 * home[], n_moved and the latencies before refer to it.
 *
 * Pure function: no communication, deterministic, so every rank that
 * passes the same loads gets the same plan.
 * @param cfg   Parameters.
 * @param load  [E] predicted tokens (rows) of every global expert in one
 *              step, summed over ranks; finite, >= 0.
 * @param out   struct_size set; arrays as above.
 * @return SWY_OK; SWY_ERR_INVALID_ARG (NULL, struct_size, a parameter
 *         out of range, a current_rank out of range or not holding
 *         experts_per_rank experts on every rank, a negative or non-finite
 *         load); out is then
 *         unchanged. SWY_ERR_NO_MEMORY.
 */
SWY_EXPORT swy_status_t swy_load_placement_plan(
    const swy_load_placement_config_t *cfg, const double *load,
    swy_load_placement_t *out);

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_LOAD_H */
