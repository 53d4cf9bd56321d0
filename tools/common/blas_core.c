/* OpenBLAS kernels for CPUs its version does not know; see blas_core.h. */
#include "blas_core.h"

#include <stddef.h>
#include <strings.h>

unsigned swy_blas_cpu_features(void)
{
    unsigned f = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    /* The builtins check the OS's XSAVE support of the registers too. */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= SWY_BLAS_CPU_AVX2;
    if ((f & SWY_BLAS_CPU_AVX2) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        f |= SWY_BLAS_CPU_AVX512;
#endif
    return f;
}

/* The x86-64 cores of OpenBLAS's DYNAMIC_ARCH (driver/others/dynamic.c)
 * whose kernels use neither AVX2 nor FMA. */
static const char *const pre_avx2_cores[] = {
    "Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom",
    "Core2", "Penryn", "Dunnington", "Nehalem", "Athlon", "Opteron",
    "Opteron_SSE3", "Barcelona", "Nano", "Sandybridge", "Bobcat",
    "Bulldozer", "Piledriver", "Steamroller",
};

const char *swy_blas_core_pick(const char *current, unsigned features)
{
    if (current == NULL || !(features & SWY_BLAS_CPU_AVX2))
        return NULL;
    int old = 0;
    for (size_t i = 0; i < sizeof(pre_avx2_cores) / sizeof(*pre_avx2_cores);
         i++)
        old |= strcasecmp(current, pre_avx2_cores[i]) == 0;
    if (!old)
        return NULL;
    return (features & SWY_BLAS_CPU_AVX512) ? "SkylakeX" : "Haswell";
}
