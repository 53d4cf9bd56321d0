/* Softmax cross-entropy, mean over the counted tokens. */
#include <assert.h>
#include <string.h>

#include "elem.h"
#include "swy_kernels.h"

static int count_labeled(const int *labels, int S)
{
    int n = 0;
    for (int t = 0; t < S; t++)
        n += labels[t] >= 0;
    return n;
}

float swy_k_xent_fwd(const float *logits, const int *labels, int S, int C,
                     float *probs)
{
    assert(S >= 0 && C > 0);
    double total = 0.0; /* S terms of similar size: double keeps the mean */
    for (int t = 0; t < S; t++) {
        const float *row = logits + (size_t)t * C;
        if (probs != NULL)
            swy_e_softmax_row(row, C, probs + (size_t)t * C);
        if (labels[t] < 0)
            continue;
        assert(labels[t] < C);
        float m = swy_e_row_max(row, C);
        float s = swy_e_row_expsum(row, C, m);
        total += swy_e_xent_loss(row[labels[t]], m, s);
    }
    int n = count_labeled(labels, S);
    return n > 0 ? (float)(total / n) : 0.0f;
}

void swy_k_xent_bwd(const float *logits, const int *labels, int S, int C,
                    float dloss, float *dlogits)
{
    assert(S >= 0 && C > 0);
    int n = count_labeled(labels, S);
    float scale = n > 0 ? dloss / (float)n : 0.0f;
    for (int t = 0; t < S; t++) {
        float *drow = dlogits + (size_t)t * C;
        if (labels[t] < 0) {
            memset(drow, 0, (size_t)C * sizeof(*drow));
            continue;
        }
        swy_e_softmax_row(logits + (size_t)t * C, C, drow);
        for (int c = 0; c < C; c++)
            drow[c] = swy_e_xent_grad(drow[c], c == labels[t], scale);
    }
}
