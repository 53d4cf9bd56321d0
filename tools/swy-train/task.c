/* The synthetic task (see task.h). */
#include "task.h"

#include <math.h>
#include <stdlib.h>

#include "rng.h"

/* Stream purposes, so that the permutation, the tokens and the noise draw
 * from unrelated streams of the same seed. */
enum { TASK_PERM = 0x7065726d, TASK_TOKEN = 0x746f6b, TASK_NOISE = 0x6e6f69,
       TASK_NOISE_LABEL = 0x6e6c62 };

int swt_task_init(swt_task_t *task, int vocab, double noise, double skew,
                  uint64_t seed)
{
    int *perm = malloc((size_t)vocab * sizeof(*perm));
    double *cdf = NULL;
    if (perm == NULL)
        return -1;
    if (skew > 0) {
        cdf = malloc((size_t)vocab * sizeof(*cdf));
        if (cdf == NULL) {
            free(perm);
            return -1;
        }
        double sum = 0;
        for (int i = 0; i < vocab; i++)
            cdf[i] = sum += pow(i + 1.0, -skew);
        for (int i = 0; i < vocab; i++)
            cdf[i] /= sum;
        cdf[vocab - 1] = 1.0; /* no u in [0, 1) falls past the end */
    }
    for (int i = 0; i < vocab; i++)
        perm[i] = i;
    /* Fisher-Yates with the counter-based stream. */
    uint64_t key = swt_rng_key(seed, TASK_PERM, 0, 0);
    for (int i = vocab - 1; i > 0; i--) {
        int j = swt_rng_below(key, (uint64_t)i, i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    task->vocab = vocab;
    task->noise = noise;
    task->skew = skew;
    task->seed = seed;
    task->perm = perm;
    task->cdf = cdf;
    return 0;
}

void swt_task_fini(swt_task_t *task)
{
    free(task->cdf);
    free(task->perm);
    task->cdf = NULL;
    task->perm = NULL;
}

/* The Zipf id of uniform u: the first id whose cumulative probability
 * exceeds u (binary search). */
static int zipf_id(const double *cdf, int vocab, double u)
{
    int lo = 0, hi = vocab - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void swt_task_batch(const swt_task_t *task, long step, int64_t first, int n,
                    int *ids, int *labels)
{
    uint64_t tok = swt_rng_key(task->seed, TASK_TOKEN, (uint64_t)step, 0);
    uint64_t coin = swt_rng_key(task->seed, TASK_NOISE, (uint64_t)step, 0);
    uint64_t rnd = swt_rng_key(task->seed, TASK_NOISE_LABEL, (uint64_t)step,
                               0);
    for (int i = 0; i < n; i++) {
        uint64_t g = (uint64_t)(first + i);
        int x = task->cdf != NULL
                    ? zipf_id(task->cdf, task->vocab, swt_rng_unit(tok, g))
                    : swt_rng_below(tok, g, task->vocab);
        ids[i] = x;
        labels[i] = swt_rng_unit(coin, g) < task->noise
                        ? swt_rng_below(rnd, g, task->vocab)
                        : task->perm[x];
    }
}

double swt_task_floor(const swt_task_t *task)
{
    double V = task->vocab, q = task->noise;
    double a = 1.0 - q + q / V, b = q / V;
    double h = a > 0 ? -a * log(a) : 0.0;
    if (b > 0)
        h -= (V - 1) * b * log(b);
    return h;
}
