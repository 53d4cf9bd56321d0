/* Moving token rows into and out of the send-buffer layout. */
#include <assert.h>
#include <string.h>

#include "swy_kernels.h"

void swy_k_pack(const float *x, const int *row_of_slot, int S, int k, int H,
                float *send)
{
    assert(S >= 0 && k >= 1 && H > 0);
    for (int t = 0; t < S; t++)
        for (int j = 0; j < k; j++) {
            int r = row_of_slot[(size_t)t * k + j];
            if (r >= 0)
                memcpy(send + (size_t)r * H, x + (size_t)t * H,
                       (size_t)H * sizeof(*send));
        }
}

void swy_k_pack_bwd(const float *dsend, const int *row_of_slot, int S, int k,
                    int H, float *dx)
{
    assert(S >= 0 && k >= 1 && H > 0);
    for (int t = 0; t < S; t++) {
        float *d = dx + (size_t)t * H;
        memset(d, 0, (size_t)H * sizeof(*d));
        for (int j = 0; j < k; j++) {
            int r = row_of_slot[(size_t)t * k + j];
            if (r < 0)
                continue;
            const float *src = dsend + (size_t)r * H;
            for (int h = 0; h < H; h++)
                d[h] += src[h];
        }
    }
}

void swy_k_unpack(const float *recv, const int *row_of_slot, int S, int k,
                  int H, float *slots)
{
    assert(S >= 0 && k >= 1 && H > 0);
    swy_k_gather_rows(recv, row_of_slot, S * k, H, slots);
}

void swy_k_gather_rows(const float *src, const int *src_row, int n, int H,
                       float *dst)
{
    assert(n >= 0 && H > 0);
    for (int i = 0; i < n; i++) {
        float *d = dst + (size_t)i * H;
        if (src_row[i] < 0)
            memset(d, 0, (size_t)H * sizeof(*d));
        else
            memcpy(d, src + (size_t)src_row[i] * H, (size_t)H * sizeof(*d));
    }
}
