/* Which OpenBLAS kernels the ranks should run. OpenBLAS built with
 * DYNAMIC_ARCH picks its kernels from the CPU's family and model; a
 * version older than the CPU does not know the model and falls back to
 * its SSE3 kernels ("Prescott"). Debian 12's 0.3.21 does so on Intel's
 * Emerald Rapids (family 6, model 207), where its single-thread SGEMM
 * then runs at about a fifth of the speed of the AVX-512 kernels the CPU
 * can run (33 against 155 GFLOP/s at 256 x 256; README, "Running on one
 * or several machines"). OPENBLAS_CORETYPE, read when the library
 * loads, overrides the choice: swy-run sets it for the ranks; swy-train
 * and switchyard.launch (the same list, checked by torch_blas) say so
 * when they run without it. */
#ifndef SWY_TOOLS_BLAS_CORE_H
#define SWY_TOOLS_BLAS_CORE_H

/* What the CPU (and the kernel, for the vector registers' state) allows,
 * as the kernels of OpenBLAS need it. */
enum {
    SWY_BLAS_CPU_AVX2 = 1,   /* AVX2 and FMA: OpenBLAS's "Haswell" */
    SWY_BLAS_CPU_AVX512 = 2  /* AVX-512 F, CD, BW, DQ, VL: "SkylakeX" */
};

/* This CPU's SWY_BLAS_CPU_* bits (0 off x86-64). */
unsigned swy_blas_cpu_features(void);

/**
 * The core to ask OpenBLAS for (through OPENBLAS_CORETYPE) when it chose
 * @p current (openblas_get_corename()) on a CPU with @p features, or NULL
 * to keep its choice. Only a choice of kernels older than AVX2 (SSE or
 * AVX, from "Katmai" to "Sandybridge", or AMD's before Zen) on a CPU
 * with AVX2 is replaced: by "SkylakeX" where AVX-512 is there, else by
 * "Haswell". A name this function does not know is kept, since a newer
 * OpenBLAS may know better cores than these.
 */
const char *swy_blas_core_pick(const char *current, unsigned features);

#endif /* SWY_TOOLS_BLAS_CORE_H */
