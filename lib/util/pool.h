/* Helper threads for bulk memory work inside one call: a job is a number
 * of independent pieces; the caller and the helpers take pieces until
 * none is left, and swy_pool_run returns once all are done. With no
 * helpers (the default), or while another caller's job runs, the caller
 * runs every piece itself. Helpers spin briefly between jobs, then sleep
 * on a futex; they live as long as the process. */
#ifndef SWY_UTIL_POOL_H
#define SWY_UTIL_POOL_H

#include <stddef.h>

#define SWY_POOL_MAX_HELPERS 7

typedef void (*swy_pool_fn_t)(void *arg, size_t piece);

/* Grow the pool to `helpers` threads (at most SWY_POOL_MAX_HELPERS; it
 * never shrinks); returns how many there are. */
int swy_pool_start(int helpers);
int swy_pool_helpers(void);
void swy_pool_run(swy_pool_fn_t fn, void *arg, size_t npieces);

#endif
