/* The synthetic, seeded, learnable task of swy-train.
 *
 * Token ids x are uniform over the vocabulary V, or with skew Z > 0
 * Zipf(Z)-distributed: p(x) proportional to (x + 1)^-Z, id 0 the most
 * frequent (a skewed workload: the gate sends the frequent ids' rows to
 * the same few experts). The label of a token is
 * perm[x] for a fixed random permutation perm, except that with
 * probability q (the noise) it is uniform over V instead. The best any
 * model can do is predict p(y | x) = (1 - q) + q/V at perm[x] and q/V
 * elsewhere, so the lowest expected cross-entropy (the loss floor) is the
 * entropy of that mixture, whatever the distribution of x:
 *   floor = -a ln a - (V - 1) b ln b,  a = 1 - q + q/V,  b = q/V.
 *
 * Token i of step s of the global batch is a pure function of (seed, s, i)
 * (rng.h): rank r draws global indices r*S .. r*S+S-1, so any split of the
 * same global batch over ranks sees the same tokens. */
#ifndef SWT_TASK_H
#define SWT_TASK_H

#include <stdint.h>

typedef struct {
    int vocab;       /* V >= 2 */
    double noise;    /* q in [0, 1] */
    double skew;     /* Z >= 0; 0 = uniform ids */
    uint64_t seed;
    int *perm;       /* [V] */
    double *cdf;     /* [V] Zipf cumulative distribution, NULL when Z = 0 */
} swt_task_t;

/** Build the task; returns 0, or -1 when out of memory. skew 0 draws
 *  exactly the tokens of a task without skew. */
int swt_task_init(swt_task_t *task, int vocab, double noise, double skew,
                  uint64_t seed);

/** Release the task (accepts a zeroed struct). */
void swt_task_fini(swt_task_t *task);

/** Tokens [first, first + n) of the global batch of step @p step:
 *  ids[n] and labels[n] overwritten. */
void swt_task_batch(const swt_task_t *task, long step, int64_t first, int n,
                    int *ids, int *labels);

/** The loss floor in nats (see above). */
double swt_task_floor(const swt_task_t *task);

#endif /* SWT_TASK_H */
