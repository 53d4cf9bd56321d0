/* Load-driven expert placement of swy-train (see placement.h). */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "switchyard/load.h"

/* Steps of history the predictor sees: the EMA's weights (theta 0.9)
 * fall below 1e-11 after 240 steps, so more would change nothing. */
enum { HISTORY_STEPS = 256 };

struct swt_placement {
    swt_placement_config_t cfg;
    int E;
    swy_load_tracker_t tracker;     /* predicted */
    swy_load_predictor_t predictor; /* predicted */
    double *props;                  /* [HISTORY_STEPS][E] */
    double *oracle;                 /* [steps][layers][E] (oracle) */
    double *last_total;             /* [layers]: rows of the last step */
    int64_t *counts;                /* [E] scratch */
    double *load;                   /* [E] scratch */
    int *home;                      /* [layers][E], last plan */
    double *lat_before, *lat_after; /* [layers], last plan */
    int *moved;                     /* [layers], last plan */
    int *packed;                    /* [layers], last plan: slots change */
    int *cur;                       /* [E] scratch: current ranks */
    int *fill;                      /* [ranks] scratch */
    int n_plans;
    int kept_back;                  /* moves not worth their bytes, all
                                       plans and layers */
};

const char *swt_placement_name(int kind)
{
    return kind == SWT_PLACE_PREDICTED ? "predicted"
           : kind == SWT_PLACE_ORACLE  ? "oracle"
                                       : "none";
}

/* The --trace-loads CSV: a header line, then step,layer,expert,tokens.
 * Every (step, layer, expert) of steps 1..steps must be there. */
static int read_oracle(swt_placement_t *pl)
{
    const swt_placement_config_t *c = &pl->cfg;
    const char *path = c->oracle_trace;
    size_t L = (size_t)c->layers, E = (size_t)pl->E;
    size_t n = (size_t)c->steps * L * E;
    char *seen = calloc(n ? n : 1, 1);
    pl->oracle = calloc(n ? n : 1, sizeof(double));
    if (seen == NULL || pl->oracle == NULL) {
        free(seen);
        return -2;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "swy-train: --oracle-trace %s: %s\n", path,
                strerror(errno));
        free(seen);
        return -1;
    }
    char line[256];
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        long step, layer, expert;
        double tokens;
        char extra;
        if (lineno == 1 && strncmp(line, "step,", 5) == 0)
            continue;
        if (sscanf(line, "%ld,%ld,%ld,%lf %c", &step, &layer, &expert,
                   &tokens, &extra) != 4 ||
            tokens < 0 || layer < 0 || (size_t)layer >= L || expert < 0 ||
            (size_t)expert >= E || step < 1) {
            fprintf(stderr, "swy-train: --oracle-trace %s:%ld: expected "
                    "step,layer,expert,tokens with layer < %zu, expert < "
                    "%zu, got '%.*s'\n", path, lineno, L, E,
                    (int)strcspn(line, "\n"), line);
            rc = -1;
            break;
        }
        if (step > c->steps)
            continue; /* a longer run's trace serves as well */
        size_t i = ((size_t)(step - 1) * L + (size_t)layer) * E +
                   (size_t)expert;
        pl->oracle[i] = tokens;
        seen[i] = 1;
    }
    fclose(f);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!seen[i]) {
            fprintf(stderr, "swy-train: --oracle-trace %s: no row for step "
                    "%zu, layer %zu, expert %zu (record it with "
                    "--trace-loads and the same flags, at least as many "
                    "--steps)\n", path, i / (L * E) + 1, i / E % L, i % E);
            rc = -1;
        }
    free(seen);
    return rc;
}

int swt_placement_create(const swt_placement_config_t *cfg,
                         swt_placement_t **pl_p)
{
    swt_placement_t *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return -2;
    pl->cfg = *cfg;
    pl->E = cfg->ranks * cfg->experts_per_rank;
    size_t L = (size_t)cfg->layers, E = (size_t)pl->E;
    pl->last_total = calloc(L, sizeof(double));
    pl->counts = calloc(E, sizeof(int64_t));
    pl->load = calloc(E, sizeof(double));
    pl->home = calloc(L * E, sizeof(int));
    pl->lat_before = calloc(L, sizeof(double));
    pl->lat_after = calloc(L, sizeof(double));
    pl->moved = calloc(L, sizeof(int));
    pl->packed = calloc(L, sizeof(int));
    pl->cur = calloc(E, sizeof(int));
    pl->fill = calloc((size_t)cfg->ranks, sizeof(int));
    int rc = 0;
    if (!pl->last_total || !pl->counts || !pl->load || !pl->home ||
        !pl->lat_before || !pl->lat_after || !pl->moved || !pl->packed ||
        !pl->cur || !pl->fill) {
        rc = -2;
    } else if (cfg->kind == SWT_PLACE_PREDICTED) {
        swy_load_predictor_config_t pc = SWY_LOAD_PREDICTOR_CONFIG_INIT;
        pc.kind = SWY_LOAD_PRED_EMA;
        pc.theta = 0.9;
        pl->props = malloc(HISTORY_STEPS * E * sizeof(double));
        if (pl->props == NULL)
            rc = -2;
        else if (swy_load_tracker_create(cfg->layers, pl->E, HISTORY_STEPS,
                                         &pl->tracker) != SWY_OK ||
                 swy_load_predictor_create(&pc, pl->E, &pl->predictor) !=
                     SWY_OK) {
            fprintf(stderr, "swy-train: --placement predicted: %s\n",
                    swy_last_error(NULL));
            rc = -2;
        }
    } else if (cfg->kind == SWT_PLACE_ORACLE) {
        rc = read_oracle(pl);
    }
    if (rc != 0) {
        if (rc == -2)
            fprintf(stderr, "swy-train: out of memory for the placement\n");
        swt_placement_destroy(pl);
        return rc;
    }
    *pl_p = pl;
    return 0;
}

void swt_placement_destroy(swt_placement_t *pl)
{
    if (pl == NULL)
        return;
    swy_load_predictor_destroy(pl->predictor);
    swy_load_tracker_destroy(pl->tracker);
    free(pl->fill);
    free(pl->cur);
    free(pl->packed);
    free(pl->moved);
    free(pl->lat_after);
    free(pl->lat_before);
    free(pl->home);
    free(pl->load);
    free(pl->counts);
    free(pl->last_total);
    free(pl->oracle);
    free(pl->props);
    free(pl);
}

int swt_placement_observe(swt_placement_t *pl, long step, const double *rows)
{
    int E = pl->E;
    for (int l = 0; l < pl->cfg.layers; l++) {
        const double *r = rows + (size_t)l * E;
        pl->last_total[l] = 0;
        for (int e = 0; e < E; e++) {
            pl->counts[e] = (int64_t)r[e];
            pl->last_total[l] += r[e];
        }
        if (pl->tracker != NULL &&
            swy_load_record(pl->tracker, step, l, pl->counts) != SWY_OK) {
            fprintf(stderr, "swy-train: placement: swy_load_record: %s\n",
                    swy_last_error(NULL));
            return -1;
        }
    }
    return 0;
}

/* Layer l's loads for steps step+1 .. step+N: predicted from the history,
 * or the oracle's mean. */
static int layer_loads(swt_placement_t *pl, long step, int l)
{
    const swt_placement_config_t *c = &pl->cfg;
    int E = pl->E;
    if (c->kind == SWT_PLACE_ORACLE) {
        long last = step + c->every < c->steps ? step + c->every : c->steps;
        for (int e = 0; e < E; e++)
            pl->load[e] = 0;
        for (long s = step + 1; s <= last; s++)
            for (int e = 0; e < E; e++)
                pl->load[e] += pl->oracle[((size_t)(s - 1) * c->layers +
                                           (size_t)l) * E + (size_t)e];
        for (int e = 0; e < E && last > step; e++)
            pl->load[e] /= (double)(last - step);
        return 0;
    }
    int n = 0;
    if (swy_load_tracker_proportions(pl->tracker, l, HISTORY_STEPS,
                                     pl->props, NULL, &n) != SWY_OK ||
        (n > 0 && swy_load_predictor_predict(pl->predictor, pl->props, n,
                                             c->every, pl->load) != SWY_OK)) {
        fprintf(stderr, "swy-train: placement: prediction for layer %d: "
                "%s\n", l, swy_last_error(NULL));
        return -1;
    }
    /* Proportions to rows: the step's total rows change only with
     * capacity drops, so the last one is the estimate. */
    for (int e = 0; e < E; e++)
        pl->load[e] = n > 0 ? pl->load[e] * pl->last_total[l] : 0.0;
    return 0;
}

/* The slots of a packing: an expert whose home is its current rank
 * keeps its slot; the others take, by logical id, the slots freed on
 * their home rank, lowest first. home holds experts_per_rank experts per
 * rank (fixed_slots), so the slots come out a permutation. */
static void slots_from_home(swt_placement_t *pl, const int *slot_of,
                            const int *home, int *slot_new)
{
    int E = pl->E, nl = pl->cfg.experts_per_rank, W = pl->cfg.ranks;
    char *taken = (char *)pl->counts; /* [E] bytes of scratch */
    memset(taken, 0, (size_t)E);
    for (int e = 0; e < E; e++) {
        slot_new[e] = -1;
        if (home[e] == slot_of[e] / nl) {
            slot_new[e] = slot_of[e];
            taken[slot_of[e]] = 1;
        }
    }
    for (int r = 0; r < W; r++)
        pl->fill[r] = r * nl; /* next slot to try on rank r */
    for (int e = 0; e < E; e++) {
        if (slot_new[e] >= 0)
            continue;
        int r = home[e];
        while (pl->fill[r] < (r + 1) * nl && taken[pl->fill[r]])
            pl->fill[r]++;
        if (pl->fill[r] < (r + 1) * nl) { /* else: not a permutation, which
                                           * the model refuses */
            slot_new[e] = pl->fill[r];
            taken[pl->fill[r]] = 1;
        }
    }
}

int swt_placement_plan(swt_placement_t *pl, long step, const int *slot_of,
                       int *shadow, int *slot_new)
{
    const swt_placement_config_t *c = &pl->cfg;
    if (c->kind == SWT_PLACE_NONE || step % c->every != 0 ||
        step >= c->steps)
        return 0;
    int E = pl->E;
    swy_load_placement_config_t pc = SWY_LOAD_PLACEMENT_CONFIG_INIT;
    pc.n_ranks = c->ranks;
    pc.experts_per_rank = c->experts_per_rank;
    pc.hidden = c->hidden;
    pc.ffn = c->ffn;
    pc.bytes_per_param = (int)sizeof(float);
    pc.link_bandwidth = c->link_bandwidth;
    pc.flops = c->flops;
    pc.max_shadow = c->max_shadow < E ? c->max_shadow : E;
    pc.fixed_slots = c->apply_packing != 0;
    pc.horizon_steps = c->horizon;
    for (int l = 0; l < c->layers; l++) {
        const int *sl = slot_of + (size_t)l * E;
        int *sn = slot_new + (size_t)l * E;
        if (layer_loads(pl, step, l) != 0)
            return -1;
        for (int e = 0; e < E; e++)
            pl->cur[e] = sl[e] / c->experts_per_rank;
        pc.current_rank = pl->cur;
        swy_load_placement_t out = {.struct_size = sizeof(out),
                                    .shadow = shadow + (size_t)l * E,
                                    .home = pl->home + (size_t)l * E};
        if (swy_load_placement_plan(&pc, pl->load, &out) != SWY_OK) {
            fprintf(stderr, "swy-train: placement: layer %d: %s\n", l,
                    swy_last_error(NULL));
            return -1;
        }
        pl->lat_before[l] = out.latency_before_s;
        pl->lat_after[l] = out.latency_after_s;
        pl->moved[l] = out.n_moved;
        pl->kept_back += out.moves_kept_back;
        /* Moving costs parameters and Adam state on the link: only when
         * the model says packing beats shadowing alone. */
        pl->packed[l] = c->apply_packing && out.n_moved > 0 &&
                        out.latency_after_s < out.latency_shadow_s;
        if (pl->packed[l])
            slots_from_home(pl, sl, pl->home + (size_t)l * E, sn);
        else
            memcpy(sn, sl, (size_t)E * sizeof(int));
    }
    pl->n_plans++;
    return 1;
}

const int *swt_placement_home(const swt_placement_t *pl, int layer,
                              double *lat_before_p, double *lat_after_p,
                              int *moved_p)
{
    if (pl->n_plans == 0)
        return NULL;
    *lat_before_p = pl->lat_before[layer];
    *lat_after_p = pl->lat_after[layer];
    *moved_p = pl->moved[layer];
    return pl->home + (size_t)layer * pl->E;
}

int swt_placement_num_plans(const swt_placement_t *pl)
{
    return pl->n_plans;
}

int swt_placement_kept_back(const swt_placement_t *pl)
{
    return pl->kept_back;
}

int swt_placement_packed(const swt_placement_t *pl, int layer)
{
    return pl->n_plans > 0 && pl->packed[layer];
}
