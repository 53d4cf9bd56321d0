/* Expert placement from predicted loads: FasterMoE's shadowing decision
 * (J. He et al., "FasterMoE", PPoPP 2022, section 4, and its
 * fmoe/fastermoe/shadow_policy.py: sort by load, replicate the hottest
 * while the modeled latency falls) and first-fit-decreasing packing of
 * the rest (replicate hot, pack cold; Cong et al. arXiv 2404.16914 name
 * both as the use of predicted loads). Pure: no communication. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "switchyard/load.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/status.h"

static const char subsys[] = "load";

#define BAD(...) swy_err_set(SWY_ERR_INVALID_ARG, subsys,                   \
                             "swy_load_placement_plan: " __VA_ARGS__)

/* c is this library's copy of the caller's config (the struct_size rule
 * already applied). */
static swy_status_t check_config(const swy_load_placement_config_t *c)
{
    if (c->n_ranks < 1 || c->experts_per_rank < 1)
        return BAD("n_ranks %d and experts_per_rank %d must be >= 1",
                   c->n_ranks, c->experts_per_rank);
    if ((int64_t)c->n_ranks * c->experts_per_rank > (1 << 24))
        return BAD("n_ranks %d x experts_per_rank %d is too many experts",
                   c->n_ranks, c->experts_per_rank);
    if (c->hidden < 1 || c->ffn < 1 || c->bytes_per_param < 1)
        return BAD("hidden %d, ffn %d, bytes_per_param %d: each must be "
                   ">= 1", c->hidden, c->ffn, c->bytes_per_param);
    if (!(c->link_bandwidth > 0) || !isfinite(c->link_bandwidth))
        return BAD("link_bandwidth %g must be > 0", c->link_bandwidth);
    if (!(c->flops > 0) || !isfinite(c->flops))
        return BAD("flops %g must be > 0", c->flops);
    int E = c->n_ranks * c->experts_per_rank;
    if (c->max_shadow < 0 || c->max_shadow > E)
        return BAD("max_shadow %d not in 0..%d (the experts)", c->max_shadow,
                   E);
    if (!(c->cold_fraction >= 0) || !isfinite(c->cold_fraction))
        return BAD("cold_fraction %g must be >= 0", c->cold_fraction);
    if (!(c->pack_slack >= 0) || !isfinite(c->pack_slack))
        return BAD("pack_slack %g must be >= 0", c->pack_slack);
    if (c->fixed_slots != 0 && c->fixed_slots != 1)
        return BAD("fixed_slots %d must be 0 or 1", c->fixed_slots);
    if (c->horizon_steps < 0)
        return BAD("horizon_steps %d must be >= 0", c->horizon_steps);
    if (!(c->move_bytes >= 0) || !isfinite(c->move_bytes))
        return BAD("move_bytes %g must be finite and >= 0", c->move_bytes);
    return SWY_OK;
}

/* Bytes one relocation moves: the expert's w1 [H][F], b1 [F], w2 [F][H],
 * b2 [H] and, for Adam, their two moments. */
static double move_bytes(const swy_load_placement_config_t *c)
{
    if (c->move_bytes > 0)
        return c->move_bytes;
    double params = 2.0 * c->hidden * (double)c->ffn + c->hidden + c->ffn;
    return 3.0 * params * c->bytes_per_param;
}

/* cur[e] = the rank expert e lives on now; a current_rank must hold
 * experts_per_rank experts on every rank (lib/moe's slots). count is
 * scratch [W]. */
static swy_status_t current_ranks(const swy_load_placement_config_t *c,
                                  int *cur, int *count)
{
    int W = c->n_ranks, E = W * c->experts_per_rank;
    for (int e = 0; e < E; e++)
        cur[e] = c->current_rank != NULL ? c->current_rank[e]
                                         : e / c->experts_per_rank;
    if (c->current_rank == NULL)
        return SWY_OK;
    for (int r = 0; r < W; r++)
        count[r] = 0;
    for (int e = 0; e < E; e++) {
        if (cur[e] < 0 || cur[e] >= W)
            return BAD("current_rank[%d] = %d not in 0..%d", e, cur[e],
                       W - 1);
        count[cur[e]]++;
    }
    for (int r = 0; r < W; r++)
        if (count[r] != c->experts_per_rank)
            return BAD("current_rank puts %d experts on rank %d, expected "
                       "%d", count[r], r, c->experts_per_rank);
    return SWY_OK;
}

/* Per-token and per-replica costs of the latency model, in seconds. */
typedef struct {
    double compute_per_row; /* 3 x 4 a H^2 / P: forward and backward */
    double comm_per_row;    /* 4 x H b / BW: dispatch, combine, both ways */
    double per_shadow;      /* 2 a H^2 b / BW: one expert's parameters */
} cost_t;

static cost_t costs(const swy_load_placement_config_t *c)
{
    /* a H^2 = F H: the model is written in FasterMoE's a = F / H. */
    double HF = (double)c->hidden * c->ffn;
    cost_t k = {3.0 * 4.0 * HF / c->flops,
                4.0 * c->hidden * (double)c->bytes_per_param /
                    c->link_bandwidth,
                2.0 * HF * c->bytes_per_param / c->link_bandwidth};
    return k;
}

/* Modeled latency of a placement: experts on home[] (NULL: current
 * ranks cur[]), shadowed ones replicated. rank_load is scratch [W] (rows of
 * the rank's non-shadowed experts). B_comp is returned in *busiest_p. */
static double latency(const swy_load_placement_config_t *c, const cost_t *k,
                      const double *load, const int *shadow, const int *home,
                      const int *cur, double *rank_load, double *busiest_p)
{
    int W = c->n_ranks, E = W * c->experts_per_rank, n_shadow = 0;
    double shadowed = 0.0;
    for (int r = 0; r < W; r++)
        rank_load[r] = 0.0;
    for (int e = 0; e < E; e++) {
        if (shadow != NULL && shadow[e]) {
            shadowed += load[e];
            n_shadow++;
        } else {
            rank_load[home != NULL ? home[e] : cur[e]] += load[e];
        }
    }
    double b_comm = 0.0;
    for (int r = 0; r < W; r++)
        b_comm = rank_load[r] > b_comm ? rank_load[r] : b_comm;
    /* Every rank computes its own share of the shadowed rows, which the
     * model spreads evenly (the gate's choices are balanced over ranks
     * by the data, not by the placement). */
    double b_comp = b_comm + shadowed / W;
    *busiest_p = b_comp;
    return k->compute_per_row * b_comp + k->comm_per_row * b_comm +
           k->per_shadow * n_shadow;
}

/* Experts ordered by decreasing load, then increasing id (so the plan
 * is deterministic); a copy of the load keeps qsort's comparator free of
 * shared state. */
typedef struct {
    double load;
    int expert;
} ranked_t;

static int by_load_desc(const void *pa, const void *pb)
{
    const ranked_t *a = pa, *b = pb;
    if (a->load != b->load)
        return a->load > b->load ? -1 : 1;
    return (a->expert > b->expert) - (a->expert < b->expert);
}

/* First-fit decreasing of the non-shadowed experts (see load.h). */
static void pack(const swy_load_placement_config_t *c, const double *load,
                 const int *order, const int *shadow, const int *cold,
                 const int *cur_rank, double *bin, int *home)
{
    int W = c->n_ranks, E = W * c->experts_per_rank;
    double total = 0.0;
    for (int e = 0; e < E; e++) {
        home[e] = cur_rank[e];
        if (!shadow[e])
            total += load[e];
    }
    double capacity = total / W * (1.0 + c->pack_slack);
    for (int r = 0; r < W; r++)
        bin[r] = 0.0;
    for (int i = 0; i < E; i++) {
        int e = order[i], to = -1;
        if (shadow[e])
            continue;
        int cur = cur_rank[e];
        if (!cold[e] && bin[cur] + load[e] <= capacity)
            to = cur;
        for (int r = 0; to < 0 && r < W; r++)
            if (bin[r] + load[e] <= capacity)
                to = r;
        if (to < 0) { /* fits nowhere: the least loaded bin */
            to = 0;
            for (int r = 1; r < W; r++)
                if (bin[r] < bin[to])
                    to = r;
        }
        bin[to] += load[e];
        home[e] = to;
    }
}

/* Packing into lib/moe's fixed slots (fixed_slots, see load.h): each
 * non-shadowed expert, by decreasing load, stays on its current rank if
 * that rank has a free slot and stays within the bin capacity (a move
 * costs parameters and Adam state on the link, so a balanced placement
 * stays put), else goes to the least loaded rank with a free slot, ties
 * to its current rank, then the lower rank. free_slots is scratch [W]. */
static void pack_slots(const swy_load_placement_config_t *c,
                       const double *load, const int *order,
                       const int *shadow, const int *cur, double *bin,
                       int *free_slots, int *home)
{
    int W = c->n_ranks, E = W * c->experts_per_rank;
    double total = 0.0;
    for (int r = 0; r < W; r++) {
        bin[r] = 0.0;
        free_slots[r] = c->experts_per_rank;
    }
    for (int e = 0; e < E; e++) {
        home[e] = cur[e];
        if (shadow[e]) /* keeps its slot */
            free_slots[cur[e]]--;
        else
            total += load[e];
    }
    double capacity = total / W * (1.0 + c->pack_slack);
    for (int i = 0; i < E; i++) {
        int e = order[i], to = -1;
        if (shadow[e])
            continue;
        if (free_slots[cur[e]] > 0) {
            to = cur[e];
            if (bin[to] + load[e] > capacity)
                for (int r = 0; r < W; r++)
                    if (free_slots[r] > 0 && bin[r] < bin[to])
                        to = r;
        } else {
            for (int r = 0; r < W; r++)
                if (free_slots[r] > 0 && (to < 0 || bin[r] < bin[to]))
                    to = r;
        }
        bin[to] += load[e];
        free_slots[to]--;
        home[e] = to;
    }
}

swy_status_t swy_load_placement_plan(const swy_load_placement_config_t *cfg,
                                     const double *load,
                                     swy_load_placement_t *out)
{
    if (cfg == NULL || load == NULL || out == NULL)
        return BAD("%s is NULL", cfg == NULL    ? "cfg"
                                 : load == NULL ? "load"
                                                : "out");
    /* Both structs are read once into this library's layout; the plan
     * goes back to the caller covering its struct_size only. */
    swy_load_placement_config_t cfg_copy;
    if (swy_struct_import(&cfg_copy, sizeof(cfg_copy), cfg, cfg->struct_size,
                          SWY_LOAD_PLACEMENT_CONFIG_SIZE_V1) != 0)
        return BAD("cfg->struct_size %zu is below the %zu bytes of the "
                   "config's first release (start from "
                   "SWY_LOAD_PLACEMENT_CONFIG_INIT)", cfg->struct_size,
                   (size_t)SWY_LOAD_PLACEMENT_CONFIG_SIZE_V1);
    cfg = &cfg_copy;
    SWY_CHECK(check_config(cfg));
    swy_load_placement_t plan, *given = out;
    if (swy_struct_import(&plan, sizeof(plan), given, given->struct_size,
                          SWY_LOAD_PLACEMENT_SIZE_V1) != 0)
        return BAD("out->struct_size %zu is below the %zu bytes of the "
                   "plan's first release (set it to sizeof)",
                   given->struct_size, (size_t)SWY_LOAD_PLACEMENT_SIZE_V1);
    out = &plan;
    int W = cfg->n_ranks, E = W * cfg->experts_per_rank;
    double total = 0.0;
    for (int e = 0; e < E; e++) {
        if (!(load[e] >= 0) || !isfinite(load[e]))
            return BAD("load[%d] = %g must be finite and >= 0", e, load[e]);
        total += load[e];
    }

    int *order = swy_malloc((size_t)E * sizeof(int));
    ranked_t *ranked = swy_malloc((size_t)E * sizeof(ranked_t));
    int *shadow = swy_calloc((size_t)E, sizeof(int));
    int *cold = swy_calloc((size_t)E, sizeof(int));
    int *home = swy_malloc((size_t)E * sizeof(int));
    int *cur = swy_malloc((size_t)E * sizeof(int));
    int *slots = swy_malloc((size_t)W * sizeof(int));
    double *scratch = swy_malloc((size_t)W * sizeof(double));
    swy_status_t status = SWY_OK;
    if (order == NULL || ranked == NULL || shadow == NULL || cold == NULL ||
        home == NULL || cur == NULL || slots == NULL || scratch == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                             "swy_load_placement_plan: no memory for %d "
                             "experts", E);
        goto out;
    }
    status = current_ranks(cfg, cur, slots);
    if (status != SWY_OK)
        goto out;
    for (int e = 0; e < E; e++)
        ranked[e] = (ranked_t){load[e], e};
    qsort(ranked, (size_t)E, sizeof(ranked_t), by_load_desc);
    for (int e = 0; e < E; e++)
        order[e] = ranked[e].expert;

    /* Shadow the hottest while the modeled latency strictly falls. */
    cost_t k = costs(cfg);
    double b_before, b_try, b_after;
    double lat_before = latency(cfg, &k, load, NULL, NULL, cur, scratch,
                                &b_before);
    double lat_shadow = lat_before;
    int n_shadow = 0;
    while (n_shadow < cfg->max_shadow) {
        int e = order[n_shadow];
        shadow[e] = 1;
        double lat = latency(cfg, &k, load, shadow, NULL, cur, scratch,
                             &b_try);
        if (!(lat < lat_shadow)) {
            shadow[e] = 0;
            break;
        }
        lat_shadow = lat;
        n_shadow++;
    }

    double mean = total / E;
    int n_cold = 0;
    for (int e = 0; e < E; e++) {
        cold[e] = !shadow[e] && load[e] < cfg->cold_fraction * mean;
        n_cold += cold[e];
    }
    if (cfg->fixed_slots)
        pack_slots(cfg, load, order, shadow, cur, scratch, slots, home);
    else
        pack(cfg, load, order, shadow, cold, cur, scratch, home);
    int n_moved = 0;
    for (int e = 0; e < E; e++)
        n_moved += home[e] != cur[e];
    double lat_after = latency(cfg, &k, load, shadow, home, cur, scratch,
                               &b_after);
    /* A relocation is paid once, on the link, and gains on every step the
     * plan stands: moves whose gain over the horizon does not exceed their
     * bytes would send experts back and forth on predicted loads' noise.
     * The shadows are chosen either way (their cost is in the latency). */
    int horizon = cfg->horizon_steps;
    double move_cost = n_moved * move_bytes(cfg) / cfg->link_bandwidth;
    double move_gain = horizon * (lat_shadow - lat_after);
    int kept_back = 0;
    if (horizon > 0 && n_moved > 0 && !(move_gain > move_cost)) {
        kept_back = n_moved;
        n_moved = 0;
        memcpy(home, cur, (size_t)E * sizeof(int));
        lat_after = latency(cfg, &k, load, shadow, home, cur, scratch,
                            &b_after);
    }

    if (out->shadow != NULL)
        memcpy(out->shadow, shadow, (size_t)E * sizeof(int));
    if (out->home != NULL)
        memcpy(out->home, home, (size_t)E * sizeof(int));
    if (out->cold != NULL)
        memcpy(out->cold, cold, (size_t)E * sizeof(int));
    out->n_shadowed = n_shadow;
    out->n_cold = n_cold;
    out->n_moved = n_moved;
    out->busiest_before = b_before;
    out->busiest_after = b_after;
    out->latency_before_s = lat_before;
    out->latency_shadow_s = lat_shadow;
    out->latency_after_s = lat_after;
    out->move_cost_s = move_cost;
    out->move_gain_s = move_gain;
    out->moves_kept_back = kept_back;
    swy_struct_export(given, given->struct_size, out, sizeof(*out),
                      SWY_LOAD_PLACEMENT_SIZE_V1);
out:
    swy_free(scratch);
    swy_free(slots);
    swy_free(cur);
    swy_free(home);
    swy_free(cold);
    swy_free(shadow);
    swy_free(ranked);
    swy_free(order);
    return status;
}
