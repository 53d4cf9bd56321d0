/* Expert-load tracker: a ring of the last `capacity` steps, each entry
 * holding every layer's per-expert token counts (FastMoE's global expert
 * counts, summed over ranks), so that the predictors of lib/load can read
 * a proportion series without the caller keeping history. */
#include <limits.h>
#include <string.h>

#include "switchyard/load.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_load_tracker {
    int n_layers, n_experts, capacity;
    int head;         /* ring index of the oldest held step */
    int n_steps;      /* steps held */
    int64_t *step;    /* [capacity] */
    int64_t *counts;  /* [capacity][n_layers][n_experts]; -1 = unrecorded */
};

static const char subsys[] = "load";

swy_status_t swy_load_tracker_create(int n_layers, int n_experts,
                                     int capacity_steps,
                                     swy_load_tracker_t *tracker_p)
{
    if (tracker_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_create: tracker_p is NULL");
    if (n_layers < 1 || n_experts < 1 || capacity_steps < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_create: n_layers %d, n_experts "
                           "%d, capacity_steps %d: each must be >= 1",
                           n_layers, n_experts, capacity_steps);
    size_t per_step, total;
    if (swy_mul_overflow((size_t)n_layers, (size_t)n_experts, &per_step) ||
        swy_mul_overflow(per_step, (size_t)capacity_steps, &total))
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_create: %d x %d x %d counts "
                           "overflow", n_layers, n_experts, capacity_steps);
    struct swy_load_tracker *t = swy_calloc(1, sizeof(*t));
    if (t == NULL)
        goto err;
    t->step = swy_calloc((size_t)capacity_steps, sizeof(int64_t));
    if (t->step == NULL)
        goto err_tracker;
    t->counts = swy_calloc(total, sizeof(int64_t));
    if (t->counts == NULL)
        goto err_step;
    t->n_layers = n_layers;
    t->n_experts = n_experts;
    t->capacity = capacity_steps;
    *tracker_p = t;
    return SWY_OK;

err_step:
    swy_free(t->step);
err_tracker:
    swy_free(t);
err:
    return swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                       "swy_load_tracker_create: no memory for %d steps of "
                       "%d x %d counts", capacity_steps, n_layers, n_experts);
}

void swy_load_tracker_destroy(swy_load_tracker_t tracker)
{
    if (tracker == NULL)
        return;
    swy_free(tracker->counts);
    swy_free(tracker->step);
    swy_free(tracker);
}

static int64_t *entry_counts(swy_load_tracker_t t, int slot, int layer)
{
    return t->counts +
           ((size_t)slot * t->n_layers + (size_t)layer) * t->n_experts;
}

swy_status_t swy_load_record(swy_load_tracker_t tracker, int64_t step,
                             int layer, const int64_t *counts_per_expert)
{
    if (tracker == NULL || counts_per_expert == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_record: %s is NULL",
                           tracker == NULL ? "tracker" : "counts_per_expert");
    if (layer < 0 || layer >= tracker->n_layers)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_record: layer %d out of range 0..%d",
                           layer, tracker->n_layers - 1);
    if (step < 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_record: step %lld < 0", (long long)step);
    for (int e = 0; e < tracker->n_experts; e++)
        if (counts_per_expert[e] < 0)
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "swy_load_record: step %lld layer %d: count "
                               "of expert %d is %lld < 0", (long long)step,
                               layer, e, (long long)counts_per_expert[e]);
    int newest = -1;
    if (tracker->n_steps > 0) {
        newest = (tracker->head + tracker->n_steps - 1) % tracker->capacity;
        if (step < tracker->step[newest])
            return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                               "swy_load_record: step %lld is older than "
                               "the newest recorded step %lld",
                               (long long)step,
                               (long long)tracker->step[newest]);
    }
    if (newest < 0 || step > tracker->step[newest]) {
        /* A new entry: overwrite the oldest when the ring is full. */
        if (tracker->n_steps == tracker->capacity) {
            newest = tracker->head;
            tracker->head = (tracker->head + 1) % tracker->capacity;
        } else {
            newest = (tracker->head + tracker->n_steps) % tracker->capacity;
            tracker->n_steps++;
        }
        tracker->step[newest] = step;
        for (int l = 0; l < tracker->n_layers; l++) {
            int64_t *c = entry_counts(tracker, newest, l);
            for (int e = 0; e < tracker->n_experts; e++)
                c[e] = -1;
        }
    }
    memcpy(entry_counts(tracker, newest, layer), counts_per_expert,
           (size_t)tracker->n_experts * sizeof(int64_t));
    return SWY_OK;
}

swy_status_t swy_load_tracker_info(swy_load_tracker_t tracker,
                                   int *n_steps_p, int *n_layers_p,
                                   int *n_experts_p)
{
    if (tracker == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_info: tracker is NULL");
    if (n_steps_p != NULL)
        *n_steps_p = tracker->n_steps;
    if (n_layers_p != NULL)
        *n_layers_p = tracker->n_layers;
    if (n_experts_p != NULL)
        *n_experts_p = tracker->n_experts;
    return SWY_OK;
}

swy_status_t swy_load_tracker_get(swy_load_tracker_t tracker, int index,
                                  int layer, int64_t *step_p,
                                  int64_t *counts)
{
    if (tracker == NULL || counts == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_get: %s is NULL",
                           tracker == NULL ? "tracker" : "counts");
    if (index < 0 || index >= tracker->n_steps)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_get: index %d out of range "
                           "0..%d (steps held)", index, tracker->n_steps - 1);
    if (layer < 0 || layer >= tracker->n_layers)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_get: layer %d out of range "
                           "0..%d", layer, tracker->n_layers - 1);
    int slot = (tracker->head + index) % tracker->capacity;
    memcpy(counts, entry_counts(tracker, slot, layer),
           (size_t)tracker->n_experts * sizeof(int64_t));
    if (step_p != NULL)
        *step_p = tracker->step[slot];
    return SWY_OK;
}

swy_status_t swy_load_tracker_proportions(swy_load_tracker_t tracker,
                                          int layer, int max_steps,
                                          double *props, int64_t *steps,
                                          int *n_p)
{
    if (tracker == NULL || props == NULL || n_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_proportions: %s is NULL",
                           tracker == NULL ? "tracker"
                           : props == NULL ? "props" : "n_p");
    if (layer < 0 || layer >= tracker->n_layers || max_steps < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_load_tracker_proportions: layer %d (0..%d), "
                           "max_steps %d (>= 1)", layer,
                           tracker->n_layers - 1, max_steps);
    int E = tracker->n_experts;
    /* Walk back from the newest to find the first usable step, then
     * write oldest first. */
    int first = tracker->n_steps, usable = 0;
    while (first > 0 && usable < max_steps) {
        first--;
        const int64_t *c = entry_counts(
            tracker, (tracker->head + first) % tracker->capacity, layer);
        int64_t sum = 0;
        for (int e = 0; e < E && c[0] >= 0; e++)
            sum += c[e];
        if (c[0] >= 0 && sum > 0)
            usable++;
    }
    int n = 0;
    for (int i = first; i < tracker->n_steps; i++) {
        int slot = (tracker->head + i) % tracker->capacity;
        const int64_t *c = entry_counts(tracker, slot, layer);
        int64_t sum = 0;
        for (int e = 0; e < E && c[0] >= 0; e++)
            sum += c[e];
        if (c[0] < 0 || sum <= 0)
            continue;
        for (int e = 0; e < E; e++)
            props[(size_t)n * E + e] = (double)c[e] / (double)sum;
        if (steps != NULL)
            steps[n] = tracker->step[slot];
        n++;
    }
    *n_p = n;
    return SWY_OK;
}
