/* Embedding lookup and its scatter-add backward. */
#include <assert.h>
#include <string.h>

#include "swy_kernels.h"

void swy_k_embed_fwd(const float *table, const int *ids, int S, int H,
                     float *out)
{
    assert(S >= 0 && H > 0);
    for (int t = 0; t < S; t++) {
        assert(ids[t] >= 0);
        memcpy(out + (size_t)t * H, table + (size_t)ids[t] * H,
               (size_t)H * sizeof(*out));
    }
}

void swy_k_embed_bwd(const float *dout, const int *ids, int S, int H,
                     float *dtable)
{
    assert(S >= 0 && H > 0);
    /* Serial in token order, so repeated ids add up deterministically; a
     * GPU version needs atomics or a sort by id for the same result. */
    for (int t = 0; t < S; t++) {
        assert(ids[t] >= 0);
        float *dst = dtable + (size_t)ids[t] * H;
        const float *src = dout + (size_t)t * H;
        for (int h = 0; h < H; h++)
            dst[h] += src[h];
    }
}
