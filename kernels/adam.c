/* Adam / AdamW step over a flat parameter array. */
#include <assert.h>
#include <math.h>

#include "elem.h"
#include "swy_kernels.h"

void swy_k_adam_step(float *param, const float *grad, float *m, float *v,
                     size_t n, const swy_k_adam_params_t *hp, long step)
{
    assert(hp != NULL && step >= 1);
    /* Bias corrections in double: at step 1 with beta2 = 0.999, 1 - beta2^t
     * is 1e-3 and float pow loses digits that the division then magnifies. */
    float bc1 = (float)(1.0 - pow((double)hp->beta1, (double)step));
    float bc2 = (float)(1.0 - pow((double)hp->beta2, (double)step));
    for (size_t i = 0; i < n; i++)
        param[i] = swy_e_adam(param[i], grad[i], &m[i], &v[i], hp->lr,
                              hp->beta1, hp->beta2, hp->eps,
                              hp->weight_decay, hp->decoupled, bc1, bc2);
}
