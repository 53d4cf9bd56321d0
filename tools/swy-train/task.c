/* The synthetic task (see task.h). */
#include "task.h"

#include <math.h>
#include <stdlib.h>

#include "rng.h"

/* Stream purposes, so that the permutation, the tokens and the noise draw
 * from unrelated streams of the same seed. */
enum { TASK_PERM = 0x7065726d, TASK_TOKEN = 0x746f6b, TASK_NOISE = 0x6e6f69,
       TASK_NOISE_LABEL = 0x6e6c62 };

int swt_task_init(swt_task_t *task, int vocab, double noise, uint64_t seed)
{
    int *perm = malloc((size_t)vocab * sizeof(*perm));
    if (perm == NULL)
        return -1;
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
    task->seed = seed;
    task->perm = perm;
    return 0;
}

void swt_task_fini(swt_task_t *task)
{
    free(task->perm);
    task->perm = NULL;
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
        int x = swt_rng_below(tok, g, task->vocab);
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
