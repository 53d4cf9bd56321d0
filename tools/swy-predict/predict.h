/* swy-predict's shared types: the evaluated points for the SVG plot. */
#ifndef SWY_PREDICT_H
#define SWY_PREDICT_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int n_pred;              /* lines */
    const char *const *names; /* [n_pred] */
    int n_points;            /* forecast origins */
    const int64_t *step;     /* [n_points] origin step */
    const double *err_pp;    /* [n_points][n_pred] abs error, pp, mean over
                                experts and layers; NaN = none */
    const double *stable;    /* [n_points] fraction of layers stable */
    int horizon;
    const char *title;
} swp_plot_t;

/* Write the plot as SVG; 0 or -1 (errno set). */
int swp_svg_write(FILE *f, const swp_plot_t *plot, int bins);

#endif
