/* Weighted sum of each token's top-k expert outputs, and its backward. */
#include <assert.h>
#include <string.h>

#include "swy_kernels.h"

void swy_k_combine_fwd(const float *rows, const int *row_of_slot,
                       const float *topk_w, int S, int k, int H, float *out)
{
    assert(S >= 0 && k >= 1 && H > 0);
    for (int t = 0; t < S; t++) {
        float *o = out + (size_t)t * H;
        memset(o, 0, (size_t)H * sizeof(*o));
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)t * k + j;
            int r = row_of_slot[s];
            if (r < 0)
                continue;
            const float *y = rows + (size_t)r * H;
            float w = topk_w[s];
            for (int h = 0; h < H; h++)
                o[h] += w * y[h];
        }
    }
}

void swy_k_combine_bwd(const float *rows, const int *row_of_slot,
                       const float *topk_w, const float *dout, int S, int k,
                       int H, float *drows, float *dtopk_w)
{
    assert(S >= 0 && k >= 1 && H > 0);
    for (int t = 0; t < S; t++) {
        const float *d = dout + (size_t)t * H;
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)t * k + j;
            int r = row_of_slot[s];
            if (r < 0) {
                /* The dropped slot's weight is the constant 0. */
                if (dtopk_w != NULL)
                    dtopk_w[s] = 0.0f;
                continue;
            }
            if (drows != NULL) {
                float *dr = drows + (size_t)r * H;
                float w = topk_w[s];
                for (int h = 0; h < H; h++)
                    dr[h] = w * d[h];
            }
            if (dtopk_w != NULL) {
                const float *y = rows + (size_t)r * H;
                float dot = 0.0f;
                for (int h = 0; h < H; h++)
                    dot += d[h] * y[h];
                dtopk_w[s] = dot;
            }
        }
    }
}
