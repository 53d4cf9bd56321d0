/* The arithmetic on rows of combine and the backward passes, in the
 * precision of the plan's dtype: fp32, fp16 and bf16 rows are summed in
 * fp32 and rounded once, with fp32 gate weights; fp64 rows are summed in
 * fp64 with fp64 gate weights, so that a float64 model gets gradients
 * exact to double precision (what torch.autograd.gradcheck checks). */
#include <string.h>

#include "moe/moe_impl.h"

double swy_moe_weight(const swy_moe_route_t route, const void *w,
                      size_t slot)
{
    if (route->dtype == SWY_FLOAT64)
        return ((const double *)w)[slot];
    return ((const float *)w)[slot];
}

void swy_moe_set_weight(const swy_moe_route_t route, void *w, size_t slot,
                        double v)
{
    if (route->dtype == SWY_FLOAT64)
        ((double *)w)[slot] = v;
    else
        ((float *)w)[slot] = (float)v;
}

void swy_moe_acc_zero(swy_moe_route_t route)
{
    size_t es = route->dtype == SWY_FLOAT64 ? sizeof(double) : sizeof(float);
    memset(route->acc, 0, route->H * es);
}

void swy_moe_acc_add(swy_moe_route_t route, double w, const char *row)
{
    size_t H = route->H;
    if (route->dtype == SWY_FLOAT64) {
        double *acc = route->acc, x;
        for (size_t h = 0; h < H; h++) {
            memcpy(&x, row + 8 * h, 8);
            acc[h] += w * x;
        }
        return;
    }
    /* w came from an fp32 weight (or is 1): exact as float. */
    float *acc = route->acc, wf = (float)w;
    for (size_t h = 0; h < H; h++)
        acc[h] += wf * swy_moe_get(route, row, h);
}

void swy_moe_acc_store(swy_moe_route_t route, char *row)
{
    size_t H = route->H;
    if (route->dtype == SWY_FLOAT64) {
        memcpy(row, route->acc, H * sizeof(double));
        return;
    }
    const float *acc = route->acc;
    for (size_t h = 0; h < H; h++)
        swy_moe_put(route, row, h, acc[h]);
}

double swy_moe_scale_row(swy_moe_route_t route, const char *g,
                         const char *y, double w, char *dst)
{
    size_t H = route->H;
    double dot = 0;
    if (route->dtype == SWY_FLOAT64) {
        double gh, yh;
        for (size_t h = 0; h < H; h++) {
            memcpy(&gh, g + 8 * h, 8);
            memcpy(&yh, y + 8 * h, 8);
            dot += gh * yh;
            gh *= w;
            memcpy(dst + 8 * h, &gh, 8);
        }
        return dot;
    }
    float wf = (float)w;
    for (size_t h = 0; h < H; h++) {
        float gh = swy_moe_get(route, g, h);
        dot += (double)gh * swy_moe_get(route, y, h);
        swy_moe_put(route, dst, h, wf * gh);
    }
    return dot;
}
