/* The search results for people: a table on stdout, the same table as CSV,
 * and an SVG plot (loaded all-to-all time and allreduce throughput against
 * the partition size, one line per policy). */
#include "tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Policies in order of first appearance; returns how many. */
static size_t policies_collect(const swyt_candidate_list_t *list,
                               const char **names, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < list->count; i++) {
        int seen = 0;

        for (size_t k = 0; k < n; k++)
            seen |= strcmp(names[k], list->items[i].policy) == 0;
        if (!seen && n < cap)
            names[n++] = list->items[i].policy;
    }
    return n;
}

static size_t policy_rank(const swyt_candidate_list_t *list, const char *p)
{
    for (size_t i = 0; i < list->count; i++) {
        if (strcmp(list->items[i].policy, p) == 0)
            return i;
    }
    return list->count;
}

static const swyt_candidate_list_t *sort_list;

static int order_compare(const void *a, const void *b)
{
    const swyt_candidate_t *x = &sort_list->items[*(const size_t *)a];
    const swyt_candidate_t *y = &sort_list->items[*(const size_t *)b];
    size_t px = policy_rank(sort_list, x->policy);
    size_t py = policy_rank(sort_list, y->policy);

    if (px != py)
        return px < py ? -1 : 1;
    if (x->partition_bytes != y->partition_bytes)
        return x->partition_bytes < y->partition_bytes ? -1 : 1;
    if (x->credit_bytes != y->credit_bytes)
        return x->credit_bytes < y->credit_bytes ? -1 : 1;
    return 0;
}

/* Row order: by policy (as measured), then partition, then credit. */
static size_t *rows_order(const swyt_candidate_list_t *list)
{
    size_t *order = malloc((list->count + 1) * sizeof(*order));

    if (order == NULL)
        return NULL;
    for (size_t i = 0; i < list->count; i++)
        order[i] = i;
    sort_list = list;
    qsort(order, list->count, sizeof(*order), order_compare);
    return order;
}

static void credit_format(uint64_t bytes, char *buf, size_t len)
{
    if (bytes == 0)
        snprintf(buf, len, "auto");
    else
        swyt_size_format(bytes, buf, len);
}

/* A number for the table, "-" when not measured. */
static const char *num(double value, const char *fmt, char *buf, size_t len)
{
    if (!isfinite(value))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, value);
    return buf;
}

void swyt_report_table_print(FILE *out, const swyt_candidate_list_t *list,
                             long winner)
{
    size_t *order = rows_order(list);

    if (order == NULL)
        return;
    fprintf(out, "  %-10s %-9s %9s %7s %10s %10s %9s %8s %10s %10s %10s %8s %9s\n",
            "policy", "group", "partition", "credit", "alone_ms", "loaded_ms",
            "p95_ms", "slowdown", "ar_MBps", "ar_alone", "ar_floor",
            "verdict", "score");
    for (size_t r = 0; r < list->count; r++) {
        const swyt_candidate_t *c = &list->items[order[r]];
        char part[32], credit[32], b[8][32];

        swyt_size_format(c->partition_bytes, part, sizeof(part));
        credit_format(c->credit_bytes, credit, sizeof(credit));
        fprintf(out,
                "%c %-10s %-9s %9s %7s %10s %10s %9s %8s %10s %10s %10s %8s %9s%s\n",
                (long)order[r] == winner ? '*' : ' ', c->policy,
                c->sweep[0] ? c->sweep : "-", part, credit,
                num(c->a2a_alone_ms, "%.2f", b[0], 32),
                num(c->a2a_loaded_ms, "%.2f", b[1], 32),
                num(c->a2a_loaded_p95_ms, "%.2f", b[2], 32),
                num(c->slowdown, "%.3f", b[3], 32),
                num(c->allreduce_MBps, "%.1f", b[4], 32),
                num(c->allreduce_alone_MBps, "%.1f", b[5], 32),
                num(SWYT_ALLREDUCE_FLOOR * c->reference_MBps, "%.1f", b[6],
                    32),
                c->verdict ? c->verdict : "-",
                num(c->score, "%.3f", b[7], 32),
                (long)order[r] == winner ? "  <- chosen" : "");
    }
    free(order);
}

static void csv_number(FILE *f, double value)
{
    if (isfinite(value))
        fprintf(f, ",%.6g", value);
    else
        fputc(',', f);
}

int swyt_report_csv_write(const char *path, const swyt_candidate_list_t *list,
                          long winner)
{
    FILE *f = fopen(path, "w");
    size_t *order;

    if (f == NULL)
        return -1;
    order = rows_order(list);
    if (order == NULL) {
        fclose(f);
        return -1;
    }
    fprintf(f, "chosen,policy,partition_bytes,credit_bytes,a2a_alone_ms,"
               "a2a_loaded_ms,a2a_loaded_p95_ms,slowdown,allreduce_MBps,"
               "allreduce_alone_MBps,allreduce_floor_MBps,verdict,score\n");
    for (size_t r = 0; r < list->count; r++) {
        const swyt_candidate_t *c = &list->items[order[r]];

        /* Policy names are [A-Za-z0-9_-] (swyt_space_parse) but come back
         * from the benchmark: quote them anyway. */
        fprintf(f, "%d,\"", (long)order[r] == winner);
        for (const char *p = c->policy; *p; p++) {
            if (*p == '"')
                fputc('"', f);
            fputc(*p, f);
        }
        fprintf(f, "\",%llu,", (unsigned long long)c->partition_bytes);
        if (c->credit_bytes == 0)
            fprintf(f, "auto");
        else
            fprintf(f, "%llu", (unsigned long long)c->credit_bytes);
        csv_number(f, c->a2a_alone_ms);
        csv_number(f, c->a2a_loaded_ms);
        csv_number(f, c->a2a_loaded_p95_ms);
        csv_number(f, c->slowdown);
        csv_number(f, c->allreduce_MBps);
        csv_number(f, c->allreduce_alone_MBps);
        csv_number(f, SWYT_ALLREDUCE_FLOOR * c->reference_MBps);
        fprintf(f, ",%s", c->verdict ? c->verdict : "");
        csv_number(f, c->score);
        fputc('\n', f);
    }
    free(order);
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- SVG ---- */

enum {
    SVG_W = 780,
    SVG_H = 640,
    PLOT_X0 = 90,  /* left edge of the plot areas */
    PLOT_X1 = 590, /* right edge; the legend goes to its right */
};

typedef struct {
    double y0, y1; /* top and bottom pixel rows of the plot area */
    double vmax;   /* value at the top */
} panel_t;

static const char *const policy_colors[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
};

static void xml_text(FILE *f, const char *text)
{
    for (; *text; text++) {
        switch (*text) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*text, f);
        }
    }
}

/* A round tick step (1, 2 or 5 times a power of ten) giving about 5
 * ticks up to @p max. */
static double tick_step(double max)
{
    double raw = max / 5.0, mag, step;

    if (!(raw > 0))
        return 1.0;
    mag = pow(10.0, floor(log10(raw)));
    step = raw / mag <= 1.0 ? 1.0 : raw / mag <= 2.0 ? 2.0
                                  : raw / mag <= 5.0 ? 5.0 : 10.0;
    return step * mag;
}

static double panel_y(const panel_t *p, double value)
{
    return p->y1 - (p->y1 - p->y0) * value / p->vmax;
}

static void panel_axes(FILE *f, panel_t *p, double data_max,
                       const char *label)
{
    double step = tick_step(data_max);

    p->vmax = ceil(data_max / step) * step;
    if (!(p->vmax > 0))
        p->vmax = 1.0;
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" "
               "fill=\"none\" stroke=\"#000\"/>\n",
            PLOT_X0, p->y0, PLOT_X1 - PLOT_X0, p->y1 - p->y0);
    for (double v = 0; v <= p->vmax * 1.0001; v += step) {
        double y = panel_y(p, v);

        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                   "stroke=\"#ddd\"/>\n", PLOT_X0, y, PLOT_X1, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                PLOT_X0 - 6, y + 4, v);
    }
    fprintf(f, "<text transform=\"translate(%d,%.1f) rotate(-90)\" "
               "text-anchor=\"middle\">%s</text>\n",
            PLOT_X0 - 58, (p->y0 + p->y1) / 2, label);
}

static int partition_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

int swyt_report_svg_write(const char *path, const swyt_candidate_list_t *list,
                          long winner, const char *title)
{
    const char *policies[64];
    size_t npolicies = policies_collect(list, policies, 64);
    uint64_t *parts = malloc((list->count + 1) * sizeof(*parts));
    size_t nparts = 0;
    double a2a_max = 0, ar_max = 0;
    FILE *f;

    if (parts == NULL)
        return -1;
    for (size_t i = 0; i < list->count; i++) {
        const swyt_candidate_t *c = &list->items[i];
        int seen = 0;

        for (size_t k = 0; k < nparts; k++)
            seen |= parts[k] == c->partition_bytes;
        if (!seen)
            parts[nparts++] = c->partition_bytes;
        if (c->a2a_loaded_ms > a2a_max)
            a2a_max = c->a2a_loaded_ms;
        if (c->allreduce_MBps > ar_max)
            ar_max = c->allreduce_MBps;
        if (c->allreduce_alone_MBps > ar_max)
            ar_max = c->allreduce_alone_MBps;
    }
    qsort(parts, nparts, sizeof(*parts), partition_cmp);
    f = fopen(path, "w");
    if (f == NULL) {
        free(parts);
        return -1;
    }

    /* x: log2 of the partition, half a step of padding each side. */
    double lx0 = nparts ? log2((double)parts[0]) - 0.5 : 0;
    double lx1 = nparts ? log2((double)parts[nparts - 1]) + 0.5 : 1;
#define XPOS(bytes)                                                          \
    (PLOT_X0 + (PLOT_X1 - PLOT_X0) * (log2((double)(bytes)) - lx0) /          \
                   (lx1 - lx0))
    panel_t top = {.y0 = 70, .y1 = 300}, bottom = {.y0 = 370, .y1 = 580};

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
               "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n", SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\" "
               "font-weight=\"bold\">", PLOT_X0);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<text x=\"%d\" y=\"44\" fill=\"#555\">each policy at its "
               "best credit per partition; filled: feasible; hollow: not "
               "(allreduce below the floor, no full load, or wrong)</text>\n",
            PLOT_X0);
    fprintf(f, "<text x=\"%d\" y=\"%.0f\" font-weight=\"bold\">all-to-all "
               "under a concurrent allreduce backlog</text>\n", PLOT_X0,
            top.y0 - 8);
    fprintf(f, "<text x=\"%d\" y=\"%.0f\" font-weight=\"bold\">allreduce "
               "throughput under the all-to-all</text>\n", PLOT_X0,
            bottom.y0 - 8);
    panel_axes(f, &top, a2a_max, "a2a loaded (ms)");
    panel_axes(f, &bottom, ar_max, "allreduce (MB/s)");
    for (size_t k = 0; k < nparts; k++) {
        char label[32];
        double x = XPOS(parts[k]);

        swyt_size_format(parts[k], label, sizeof(label));
        for (int panel = 0; panel < 2; panel++) {
            const panel_t *p = panel ? &bottom : &top;

            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                       "y2=\"%.1f\" stroke=\"#000\"/>\n", x, p->y1, x,
                    p->y1 + 5);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                       "%s</text>\n", x, p->y1 + 18, label);
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"middle\">partition "
               "size (bytes, log scale)</text>\n", (PLOT_X0 + PLOT_X1) / 2,
            bottom.y1 + 40);

    /* The allreduce floor, per partition. */
    fprintf(f, "<polyline class=\"floor\" fill=\"none\" stroke=\"#888\" "
               "stroke-dasharray=\"5,4\" points=\"");
    for (size_t k = 0; k < nparts; k++) {
        double ref = 0;

        for (size_t i = 0; i < list->count; i++) {
            if (list->items[i].partition_bytes == parts[k])
                ref = list->items[i].reference_MBps;
        }
        fprintf(f, "%s%.1f,%.1f", k ? " " : "", XPOS(parts[k]),
                panel_y(&bottom, SWYT_ALLREDUCE_FLOOR * ref));
    }
    fprintf(f, "\"/>\n");

    for (size_t pi = 0; pi < npolicies; pi++) {
        const char *color = policy_colors[pi % (sizeof(policy_colors) /
                                                sizeof(policy_colors[0]))];
        long best[256];
        size_t nbest = 0;

        /* This policy's best credit at each partition. */
        for (size_t k = 0; k < nparts && nbest < 256; k++) {
            long b = -1;

            for (size_t i = 0; i < list->count; i++) {
                const swyt_candidate_t *c = &list->items[i];

                if (strcmp(c->policy, policies[pi]) != 0 ||
                    c->partition_bytes != parts[k])
                    continue;
                if (b < 0 || c->score < list->items[b].score ||
                    (long)i == winner)
                    b = (long)i;
                if (b == winner)
                    break;
            }
            if (b >= 0)
                best[nbest++] = b;
        }
        for (int panel = 0; panel < 2; panel++) {
            const panel_t *p = panel ? &bottom : &top;

            fprintf(f, "<polyline class=\"policy\" data-policy=\"");
            xml_text(f, policies[pi]);
            fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                       "points=\"", color);
            for (size_t j = 0; j < nbest; j++) {
                const swyt_candidate_t *c = &list->items[best[j]];
                double v = panel ? c->allreduce_MBps : c->a2a_loaded_ms;

                fprintf(f, "%s%.1f,%.1f", j ? " " : "",
                        XPOS(c->partition_bytes), panel_y(p, v));
            }
            fprintf(f, "\"/>\n");
            for (size_t j = 0; j < nbest; j++) {
                const swyt_candidate_t *c = &list->items[best[j]];
                double v = panel ? c->allreduce_MBps : c->a2a_loaded_ms;

                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" "
                           "stroke=\"%s\" fill=\"%s\"/>\n",
                        XPOS(c->partition_bytes), panel_y(p, v), color,
                        c->feasible ? color : "#fff");
                if (best[j] == winner) {
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"9\" "
                               "stroke=\"#000\" stroke-width=\"2\" "
                               "fill=\"none\"/>\n",
                            XPOS(c->partition_bytes), panel_y(p, v));
                    if (panel == 0)
                        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" "
                                   "font-weight=\"bold\">chosen</text>\n",
                                XPOS(c->partition_bytes) + 11,
                                panel_y(p, v) - 10);
                }
            }
        }
        /* Legend. */
        double ly = top.y0 + 10 + 22.0 * (double)pi;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                   "stroke=\"%s\" stroke-width=\"2\"/>\n",
                PLOT_X1 + 20, ly, PLOT_X1 + 50, ly, color);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\">", PLOT_X1 + 58, ly + 4);
        xml_text(f, policies[pi]);
        fprintf(f, "</text>\n");
    }
    double ly = top.y0 + 10 + 22.0 * (double)npolicies;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
               "stroke=\"#888\" stroke-dasharray=\"5,4\"/>\n",
            PLOT_X1 + 20, ly, PLOT_X1 + 50, ly);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\">allreduce floor</text>\n",
            PLOT_X1 + 58, ly + 4);
#undef XPOS
    fprintf(f, "</svg>\n");
    free(parts);
    return fclose(f) == 0 ? 0 : -1;
}
