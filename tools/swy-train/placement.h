/* Load-driven expert placement of swy-train (--placement): which experts
 * to shadow, decided every N steps from the loads of the coming steps.
 *
 *  - predicted: each layer's per-expert rows of every step (summed over
 *    ranks, the same numbers on every rank) go into a load tracker; an EMA
 *    predictor (switchyard/load.h, horizon N) predicts the proportions of
 *    the next steps, scaled by the last step's rows;
 *  - oracle: the mean over the next N steps of a --trace-loads CSV of an
 *    earlier run with the same flags (the true future loads);
 * and swy_load_placement_plan() turns the loads into a plan: the shadow
 * flags (applied by the model, model.h) and, with apply_packing, the
 * packed homes with experts_per_rank experts on every rank (fixed_slots),
 * which become a new map of logical experts to slots (applied by the
 * model, swt_model_set_slots) when the modeled latency improves.
 * Loads are by logical expert.
 *
 * Every rank computes the same plan from the same numbers; the caller
 * checks that. Not thread-safe. */
#ifndef SWT_PLACEMENT_H
#define SWT_PLACEMENT_H

#include <stdint.h>

typedef enum {
    SWT_PLACE_NONE = 0,
    SWT_PLACE_PREDICTED = 1,
    SWT_PLACE_ORACLE = 2
} swt_placement_kind_t;

typedef struct {
    int kind;                  /* swt_placement_kind_t */
    int every;                 /* N >= 1: plan after steps N, 2N, ... */
    int horizon;               /* steps a relocation must pay for itself
                                  in (swy_load_placement_config_t's
                                  horizon_steps), 0: moves are free */
    const char *oracle_trace;  /* CSV step,layer,expert,tokens (oracle) */
    double link_bandwidth;     /* bytes/s of the latency model */
    double flops;              /* flop/s of one rank */
    int max_shadow;            /* per layer */
    int apply_packing;         /* 1: plan slot maps to apply; 0: report
                                  the unconstrained packing only */
    /* the model */
    int layers, ranks, experts_per_rank, hidden, ffn, steps;
} swt_placement_config_t;

typedef struct swt_placement swt_placement_t;

/** Reads the oracle trace (it must hold every step 1..steps of every
 *  layer and expert). Prints the cause on failure.
 *  @return 0; -1 bad input (exit 2); -2 out of memory. */
int swt_placement_create(const swt_placement_config_t *cfg,
                         swt_placement_t **pl_p);
void swt_placement_destroy(swt_placement_t *pl);

/** Step @p step's rows per expert, [layers][E], summed over ranks.
 *  @return 0, or -1 (printed). */
int swt_placement_observe(swt_placement_t *pl, long step,
                          const double *rows);

/** Whether a plan is due after @p step; if so, plan and write the shadow
 *  flags of every layer to shadow [layers][E] and the new slot of every
 *  logical expert to slot_new [layers][E], from the current slots
 *  slot_of [layers][E]. An expert stays in its slot unless packing moves
 *  it to another rank (then it takes a slot freed there, by logical id);
 *  without apply_packing, or when packing does not lower the modeled
 *  latency, slot_new = slot_of.
 *  @return 1 planned, 0 not due, -1 failure (printed). */
int swt_placement_plan(swt_placement_t *pl, long step, const int *slot_of,
                       int *shadow, int *slot_new);

/** The last plan's packing of layer @p layer: home [E] (NULL before the
 *  first plan) and the modeled latencies (seconds) before and after
 *  shadowing and packing. */
const int *swt_placement_home(const swt_placement_t *pl, int layer,
                              double *lat_before_p, double *lat_after_p,
                              int *moved_p);

/** Whether the last plan of layer @p layer changed its slots. */
int swt_placement_packed(const swt_placement_t *pl, int layer);

/** Relocations the plans proposed and did not make because their modeled
 *  gain until the next plan was below their bytes on the link. */
int swt_placement_kept_back(const swt_placement_t *pl);

/** Plans made so far. */
int swt_placement_num_plans(const swt_placement_t *pl);

const char *swt_placement_name(int kind);

#endif /* SWT_PLACEMENT_H */
