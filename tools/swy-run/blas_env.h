/* OPENBLAS_CORETYPE for the ranks (tools/common/blas_core.h). */
#ifndef SWY_RUN_BLAS_ENV_H
#define SWY_RUN_BLAS_ENV_H

/* Where the caller's environment has no OPENBLAS_CORETYPE and the
 * OpenBLAS that the ranks will load chose kernels older than the CPU
 * (it does not know the CPU), sets OPENBLAS_CORETYPE to the kernels the
 * CPU runs, in swy-run's own environment so every rank inherits it.
 * Asks OpenBLAS in a child process (which loads it and exits), so that
 * swy-run itself stays single-threaded and without OpenBLAS. Anything
 * that fails on the way leaves the environment as it was. */
void swy_run_blas_env_set(void);

#endif
