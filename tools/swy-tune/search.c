/* The search space (policies x partitions x credits), the candidates
 * measured in it, and the objective that picks one of them. */
#include "tune.h"

#include "switchyard/switchyard.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void swyt_size_format(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(bytes >> 20));
    else if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0)
        snprintf(buf, len, "%lluK", (unsigned long long)(bytes >> 10));
    else
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
}

int swyt_candidate_list_add(swyt_candidate_list_t *list,
                            const swyt_candidate_t *candidate)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 16;
        swyt_candidate_t *items =
            realloc(list->items, capacity * sizeof(*items));

        if (items == NULL)
            return -1;
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->count++] = *candidate;
    return 0;
}

long swyt_candidate_list_find(const swyt_candidate_list_t *list,
                              const char *policy, uint64_t partition_bytes,
                              uint64_t credit_bytes)
{
    for (size_t i = 0; i < list->count; i++) {
        const swyt_candidate_t *c = &list->items[i];

        if (strcmp(c->policy, policy) == 0 &&
            c->partition_bytes == partition_bytes &&
            c->credit_bytes == credit_bytes)
            return (long)i;
    }
    return -1;
}

void swyt_candidate_list_clear(swyt_candidate_list_t *list)
{
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}

/* A size field may come as a number of bytes or as text ("auto", "256K");
 * "auto" reads as 0. */
static int json_size_get(const swyt_json_object_t *object, const char *key,
                         uint64_t *bytes_p)
{
    const swyt_json_field_t *field = swyt_json_find(object, key);

    if (field == NULL)
        return -1;
    if (field->type == SWYT_JSON_NUMBER) {
        if (field->number < 0 || field->number != floor(field->number) ||
            field->number > 9.0e18)
            return -1;
        *bytes_p = (uint64_t)field->number;
        return 0;
    }
    if (field->type == SWYT_JSON_STRING) {
        if (strcmp(field->text, "auto") == 0) {
            *bytes_p = 0;
            return 0;
        }
        size_t bytes;
        if (swy_parse_size(field->text, &bytes) != SWY_OK)
            return -1;
        *bytes_p = bytes;
        return 0;
    }
    return -1;
}

static double json_number_get(const swyt_json_object_t *object,
                              const char *key)
{
    const swyt_json_field_t *field = swyt_json_find(object, key);

    return field != NULL && field->type == SWYT_JSON_NUMBER ? field->number
                                                            : NAN;
}

int swyt_candidate_from_json(const swyt_json_object_t *object,
                             swyt_candidate_t *candidate_p, char *why,
                             size_t why_len)
{
    const swyt_json_field_t *bench = swyt_json_find(object, "bench");
    const swyt_json_field_t *policy = swyt_json_find(object, "policy");
    swyt_candidate_t c;
    static const char *const required[] = {"a2a_loaded_ms",
                                           "allreduce_MBps"};

    if (bench == NULL || bench->type != SWYT_JSON_STRING ||
        strcmp(bench->text, "interference") != 0)
        return 1;
    memset(&c, 0, sizeof(c));
    if (policy == NULL || policy->type != SWYT_JSON_STRING ||
        policy->text[0] == '\0' || strlen(policy->text) >= sizeof(c.policy)) {
        snprintf(why, why_len, "no usable \"policy\" string");
        return -1;
    }
    strcpy(c.policy, policy->text);
    if (json_size_get(object, "partition_bytes", &c.partition_bytes) != 0 ||
        c.partition_bytes == 0) {
        snprintf(why, why_len, "no usable \"partition_bytes\"");
        return -1;
    }
    if (json_size_get(object, "credit_bytes", &c.credit_bytes) != 0) {
        snprintf(why, why_len, "no usable \"credit_bytes\"");
        return -1;
    }
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        double value = json_number_get(object, required[i]);

        if (!isfinite(value) || value <= 0) {
            snprintf(why, why_len, "no positive number \"%s\"", required[i]);
            return -1;
        }
    }
    c.a2a_loaded_ms = json_number_get(object, "a2a_loaded_ms");
    c.allreduce_MBps = json_number_get(object, "allreduce_MBps");
    c.a2a_alone_ms = json_number_get(object, "a2a_alone_ms");
    c.a2a_loaded_p95_ms = json_number_get(object, "a2a_loaded_p95_ms");
    c.slowdown = json_number_get(object, "slowdown");
    if (isnan(c.slowdown) && c.a2a_alone_ms > 0)
        c.slowdown = c.a2a_loaded_ms / c.a2a_alone_ms;
    c.allreduce_alone_MBps = json_number_get(object, "allreduce_alone_MBps");
    (void)json_size_get(object, "a2a_bytes", &c.a2a_bytes);
    (void)json_size_get(object, "allreduce_bytes", &c.allreduce_bytes);
    double ranks = json_number_get(object, "ranks");
    double nodes = json_number_get(object, "nodes");
    const swyt_json_field_t *sweep = swyt_json_find(object, "sweep");
    const swyt_json_field_t *check = swyt_json_find(object, "check");
    if (sweep != NULL && sweep->type == SWYT_JSON_STRING &&
        strlen(sweep->text) < sizeof(c.sweep))
        memcpy(c.sweep, sweep->text, strlen(sweep->text) + 1);
    /* Absent fields mean the benchmark did not say: take it as fine. */
    c.check_ok = check == NULL ||
                 (check->type == SWYT_JSON_STRING &&
                  strcmp(check->text, "ok") == 0);
    c.backlog_overlap = json_number_get(object, "backlog_overlap");
    if (isnan(c.backlog_overlap))
        c.backlog_overlap = 1.0;
    c.ranks = isfinite(ranks) ? (int)ranks : 0;
    c.nodes = isfinite(nodes) ? (int)nodes : 0;
    *candidate_p = c;
    return 0;
}

/* ---- the space ---- */

static char *list_next(char **cursor_p)
{
    char *start = *cursor_p, *comma;

    if (start == NULL)
        return NULL;
    comma = strchr(start, ',');
    if (comma != NULL) {
        *comma = '\0';
        *cursor_p = comma + 1;
    } else {
        *cursor_p = NULL;
    }
    return start;
}

/* Items in a comma list (an upper bound: empty items are rejected). */
static size_t list_count(const char *text)
{
    size_t n = 1;

    for (; *text != '\0'; text++)
        n += *text == ',';
    return n;
}

static int credit_spec_parse(const char *text, swyt_credit_spec_t *spec_p)
{
    size_t len = strlen(text);

    if (strcmp(text, "auto") == 0) {
        spec_p->kind = SWYT_CREDIT_AUTO;
        spec_p->value = 0;
        return 0;
    }
    if (len >= 2 && (text[len - 1] == 'x' || text[len - 1] == 'X')) {
        char digits[32];
        char *end;

        if (len - 1 >= sizeof(digits))
            return -1;
        memcpy(digits, text, len - 1);
        digits[len - 1] = '\0';
        errno = 0;
        unsigned long n = strtoul(digits, &end, 10);
        if (errno != 0 || *end != '\0' || n == 0 || n > 1024 ||
            !isdigit((unsigned char)digits[0]))
            return -1;
        spec_p->kind = SWYT_CREDIT_PARTITIONS;
        spec_p->value = n;
        return 0;
    }
    size_t bytes;
    spec_p->kind = SWYT_CREDIT_BYTES;
    if (swy_parse_size(text, &bytes) != SWY_OK || bytes == 0)
        return -1;
    spec_p->value = bytes;
    return 0;
}

int swyt_space_parse(const char *policies, const char *partitions,
                     const char *credits, swyt_space_t *space_p, char *why,
                     size_t why_len)
{
    swyt_space_t space = {0};
    char *copy = NULL, *cursor, *item;

    space.policies = calloc(list_count(policies), sizeof(char *));
    space.partitions = calloc(list_count(partitions), sizeof(uint64_t));
    space.credits = calloc(list_count(credits), sizeof(swyt_credit_spec_t));
    if (space.policies == NULL || space.partitions == NULL ||
        space.credits == NULL) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }

    copy = strdup(policies);
    if (copy == NULL) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    for (cursor = copy; (item = list_next(&cursor)) != NULL;) {
        int seen = 0;

        if (*item == '\0' || strlen(item) >= 32 ||
            strspn(item, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                strlen(item)) {
            snprintf(why, why_len, "bad policy name '%s'", item);
            goto fail;
        }
        for (size_t i = 0; i < space.npolicies; i++)
            seen |= strcmp(space.policies[i], item) == 0;
        if (!seen && (space.policies[space.npolicies++] = strdup(item)) ==
                         NULL) {
            snprintf(why, why_len, "out of memory");
            goto fail;
        }
    }
    free(copy);

    copy = strdup(partitions);
    if (copy == NULL) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    for (cursor = copy; (item = list_next(&cursor)) != NULL;) {
        size_t bytes;
        int seen = 0;

        if (swy_parse_size(item, &bytes) != SWY_OK || bytes == 0) {
            snprintf(why, why_len, "bad partition size '%s'", item);
            goto fail;
        }
        for (size_t i = 0; i < space.npartitions; i++)
            seen |= space.partitions[i] == bytes;
        if (!seen)
            space.partitions[space.npartitions++] = bytes;
    }
    free(copy);

    copy = strdup(credits);
    if (copy == NULL) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    for (cursor = copy; (item = list_next(&cursor)) != NULL;) {
        if (credit_spec_parse(item, &space.credits[space.ncredits]) != 0) {
            snprintf(why, why_len,
                     "bad credit '%s' (auto, N partitions as 2x, or a size)",
                     item);
            goto fail;
        }
        space.ncredits++;
    }
    free(copy);
    copy = NULL;
    if (space.npolicies == 0 || space.npartitions == 0 ||
        space.ncredits == 0) {
        snprintf(why, why_len, "empty list");
        goto fail;
    }
    *space_p = space;
    return 0;
fail:
    free(copy);
    swyt_space_destroy(&space);
    return -1;
}

void swyt_space_destroy(swyt_space_t *space)
{
    if (space == NULL)
        return;
    for (size_t i = 0; space->policies != NULL && i < space->npolicies; i++)
        free(space->policies[i]);
    free(space->policies);
    free(space->partitions);
    free(space->credits);
    memset(space, 0, sizeof(*space));
}

static uint64_t credit_resolve(const swyt_credit_spec_t *spec,
                               uint64_t partition)
{
    switch (spec->kind) {
    case SWYT_CREDIT_PARTITIONS: return spec->value * partition;
    case SWYT_CREDIT_BYTES: return spec->value;
    default: return 0;
    }
}

size_t swyt_space_size(const swyt_space_t *space)
{
    size_t total = 0;

    for (size_t p = 0; p < space->npartitions; p++) {
        for (size_t c = 0; c < space->ncredits; c++) {
            uint64_t bytes = credit_resolve(&space->credits[c],
                                            space->partitions[p]);
            int seen = 0;

            for (size_t d = 0; d < c; d++)
                seen |= credit_resolve(&space->credits[d],
                                       space->partitions[p]) == bytes;
            total += !seen;
        }
    }
    return total * space->npolicies;
}

int swyt_space_has_relative_credit(const swyt_space_t *space)
{
    for (size_t c = 0; c < space->ncredits; c++) {
        if (space->credits[c].kind == SWYT_CREDIT_PARTITIONS)
            return 1;
    }
    return 0;
}

int swyt_credits_resolve(const swyt_space_t *space,
                         const uint64_t *partitions, size_t npartitions,
                         char *buf, size_t len)
{
    uint64_t seen[256];
    size_t nseen = 0, used = 0;

    buf[0] = '\0';
    for (size_t p = 0; p < npartitions; p++) {
        for (size_t c = 0; c < space->ncredits; c++) {
            uint64_t bytes = credit_resolve(&space->credits[c], partitions[p]);
            char text[32];
            int dup = 0;

            for (size_t s = 0; s < nseen; s++)
                dup |= seen[s] == bytes;
            if (dup)
                continue;
            if (nseen == sizeof(seen) / sizeof(seen[0]))
                return -1;
            seen[nseen++] = bytes;
            if (bytes == 0)
                snprintf(text, sizeof(text), "auto");
            else
                swyt_size_format(bytes, text, sizeof(text));
            int n = snprintf(buf + used, len - used, "%s%s",
                             used ? "," : "", text);
            if (n < 0 || (size_t)n >= len - used)
                return -1;
            used += (size_t)n;
        }
    }
    return 0;
}

/* ---- the objective ---- */

const char *swyt_objective_describe(swyt_objective_t objective)
{
    if (objective == SWYT_OBJECTIVE_BALANCED)
        return "balanced: minimize a2a_loaded_ms / (best a2a_alone_ms of all "
               "candidates) + (best allreduce_alone_MBps of all candidates) "
               "/ allreduce_MBps, subject to allreduce_MBps >= 90% of the "
               "best allreduce_MBps of fair at the same partition (of all "
               "candidates at that partition if fair was not measured "
               "there); scores within 2% tie, broken by higher "
               "allreduce_MBps";
    return "a2a: minimize a2a_loaded_ms (the all-to-all under a concurrent "
           "allreduce backlog), subject to allreduce_MBps >= 90% of the best "
           "allreduce_MBps of fair at the same partition (of all "
           "candidates at that partition if fair was not measured there); "
           "times within 2% tie, broken by higher allreduce_MBps";
}

/* The throughput the allreduce floor is a fraction of: fair's best at
 * this partition, because fair is what the link does without priorities
 * (the baseline docs/measuring.md's interference target compares lina with). */
static double reference_MBps(const swyt_candidate_list_t *list,
                             uint64_t partition_bytes)
{
    double fair = 0.0, any = 0.0;

    for (size_t i = 0; i < list->count; i++) {
        const swyt_candidate_t *c = &list->items[i];

        if (c->partition_bytes != partition_bytes || !c->check_ok)
            continue;
        if (c->allreduce_MBps > any)
            any = c->allreduce_MBps;
        if (strcmp(c->policy, "fair") == 0 && c->allreduce_MBps > fair)
            fair = c->allreduce_MBps;
    }
    return fair > 0.0 ? fair : any;
}

int swyt_select(swyt_candidate_list_t *list, swyt_objective_t objective,
                size_t *winner_p)
{
    double best_a2a_alone = INFINITY, best_allreduce_alone = 0.0;
    double best_score = INFINITY;
    long winner = -1;

    for (size_t i = 0; i < list->count; i++) {
        const swyt_candidate_t *c = &list->items[i];
        double alone = c->a2a_alone_ms > 0 ? c->a2a_alone_ms
                                           : c->a2a_loaded_ms;
        double ar_alone = c->allreduce_alone_MBps > 0
                              ? c->allreduce_alone_MBps
                              : c->allreduce_MBps;

        if (alone < best_a2a_alone)
            best_a2a_alone = alone;
        if (ar_alone > best_allreduce_alone)
            best_allreduce_alone = ar_alone;
    }
    for (size_t i = 0; i < list->count; i++) {
        swyt_candidate_t *c = &list->items[i];

        c->reference_MBps = reference_MBps(list, c->partition_bytes);
        /* A wrong result, or an all-to-all that outran its backlog (so
         * it was partly measured unloaded), cannot be chosen. */
        if (!c->check_ok)
            c->verdict = "WRONG";
        else if (c->backlog_overlap < 1.0)
            c->verdict = "no-load";
        else if (c->allreduce_MBps < SWYT_ALLREDUCE_FLOOR * c->reference_MBps)
            c->verdict = "ar<floor";
        else
            c->verdict = "ok";
        c->feasible = strcmp(c->verdict, "ok") == 0;
        if (objective == SWYT_OBJECTIVE_BALANCED)
            c->score = c->a2a_loaded_ms / best_a2a_alone +
                       best_allreduce_alone / c->allreduce_MBps;
        else
            c->score = c->a2a_loaded_ms;
        if (c->feasible && c->score < best_score)
            best_score = c->score;
    }
    /* Differences of a few percent are noise on a shared machine: among
     * the near-best, the one that leaves the allreduce more bandwidth. */
    for (size_t i = 0; i < list->count; i++) {
        const swyt_candidate_t *c = &list->items[i];
        const swyt_candidate_t *w;

        if (!c->feasible || c->score > best_score * (1.0 + SWYT_TIE_FRACTION))
            continue;
        if (winner < 0) {
            winner = (long)i;
            continue;
        }
        w = &list->items[winner];
        if (c->allreduce_MBps > w->allreduce_MBps ||
            (c->allreduce_MBps == w->allreduce_MBps && c->score < w->score))
            winner = (long)i;
    }
    if (winner < 0)
        return -1;
    *winner_p = (size_t)winner;
    return 0;
}
