/* The error-over-training plot of swy-predict: x = forecast origin step,
 * y = absolute error in percentage points at one horizon (binned means,
 * so that thousands of origins stay readable), one line per predictor,
 * and the stable state as a shaded band (darker: more layers stable). */
#include <math.h>
#include <stdlib.h>

#include "predict.h"

static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                     "#d62728", "#9467bd", "#8c564b",
                                     "#e377c2", "#7f7f7f", "#bcbd22"};

int swp_svg_write(FILE *f, const swp_plot_t *pl, int bins)
{
    const double W = 900, Hh = 420, left = 60, right = 170, top = 40,
                 bottom = 50;
    double pw = W - left - right, ph = Hh - top - bottom;
    if (pl->n_points < 1 || bins < 1)
        return -1;
    int64_t x0 = pl->step[0], x1 = pl->step[pl->n_points - 1];
    if (x1 <= x0)
        x1 = x0 + 1;
    double *sum = calloc((size_t)bins * pl->n_pred, sizeof(double));
    int *cnt = calloc((size_t)bins * pl->n_pred, sizeof(int));
    double *stable = calloc((size_t)bins, sizeof(double));
    int *all = calloc((size_t)bins, sizeof(int));
    if (!sum || !cnt || !stable || !all) {
        free(sum);
        free(cnt);
        free(stable);
        free(all);
        return -1;
    }
    for (int i = 0; i < pl->n_points; i++) {
        int b = (int)((double)(pl->step[i] - x0) * bins / (x1 - x0 + 1));
        all[b]++;
        stable[b] += pl->stable[i];
        for (int k = 0; k < pl->n_pred; k++) {
            double v = pl->err_pp[(size_t)i * pl->n_pred + k];
            if (!isnan(v)) {
                sum[b * pl->n_pred + k] += v;
                cnt[b * pl->n_pred + k]++;
            }
        }
    }
    double ymax = 0.0;
    for (int i = 0; i < bins * pl->n_pred; i++)
        if (cnt[i] > 0 && sum[i] / cnt[i] > ymax)
            ymax = sum[i] / cnt[i];
    ymax = ymax <= 0 ? 1.0 : ceil(ymax * 2.0) / 2.0;
#define X(s) (left + pw * (double)((s) - x0) / (double)(x1 - x0))
#define Y(v) (top + ph * (1.0 - (v) / ymax))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, Hh);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s</text>\n", left,
            pl->title);
    /* Stable bins as a band. */
    for (int b = 0; b < bins; b++)
        if (all[b] > 0 && stable[b] > 0) {
            double a = x0 + (double)b * (x1 - x0 + 1) / bins;
            double z = x0 + (double)(b + 1) * (x1 - x0 + 1) / bins;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" "
                       "height=\"%.0f\" fill=\"#2ca02c\" "
                       "opacity=\"%.3f\"/>\n",
                    X(a), top, X(z) - X(a) + 0.5, ph,
                    0.3 * stable[b] / all[b]);
        }
    fprintf(f, "<g stroke=\"black\" fill=\"none\"><rect x=\"%.0f\" y=\"%.0f\" "
               "width=\"%.0f\" height=\"%.0f\"/></g>\n", left, top, pw, ph);
    for (int i = 0; i <= 5; i++) {
        double v = ymax * i / 5;
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#ddd\"/><text x=\"%.0f\" y=\"%.1f\" "
                   "text-anchor=\"end\">%.2g</text>\n",
                left, left + pw, Y(v), Y(v), left - 5, Y(v) + 4, v);
        double s = x0 + (double)(x1 - x0) * i / 5;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f"
                   "</text>\n", X(s), top + ph + 16, s);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">forecast "
               "origin (training step); shaded: stable state (share of layers)</text>\n",
            left + pw / 2, Hh - 12);
    fprintf(f, "<text transform=\"translate(16 %.0f) rotate(-90)\" "
               "text-anchor=\"middle\">abs error at %d steps ahead (pp)"
               "</text>\n", top + ph / 2, pl->horizon);
    for (int k = 0; k < pl->n_pred; k++) {
        const char *col = colors[k % (sizeof(colors) / sizeof(colors[0]))];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\""
                   " points=\"", col);
        for (int b = 0; b < bins; b++) {
            int c = cnt[b * pl->n_pred + k];
            if (c == 0)
                continue;
            double mid = x0 + (b + 0.5) * (x1 - x0 + 1) / bins;
            double v = sum[b * pl->n_pred + k] / c;
            fprintf(f, "%.1f,%.1f ", X(mid), Y(v));
        }
        fprintf(f, "\"/>\n");
        double ly = top + 10 + 18 * k;
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" "
                   "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%.0f\" "
                   "y=\"%.0f\">%s</text>\n", left + pw + 10, left + pw + 30,
                ly, ly, col, left + pw + 35, ly + 4, pl->names[k]);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    free(sum);
    free(cnt);
    free(stable);
    free(all);
    return ferror(f) ? -1 : 0;
}
