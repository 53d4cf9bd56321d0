/* Which OpenBLAS kernels the ranks run (tools/common/blas_core.h).
 *   test_blas_core pick    the choice for every kind of name and CPU;
 *   test_blas_core rank    run as a rank under swy-run: the OpenBLAS this
 *                          process loaded runs kernels as good as the
 *                          CPU allows (fails where swy-run does not set
 *                          OPENBLAS_CORETYPE on a CPU that OpenBLAS does
 *                          not know, as on the 2-core CI VM);
 *   test_blas_core kept    run under swy-run with OPENBLAS_CORETYPE=
 *                          Haswell in the caller's environment: the rank
 *                          runs Haswell's, the caller's choice (77
 *                          without AVX2, where those kernels cannot
 *                          run). */
#include <string.h>
#include <strings.h>

#include "blas_core.h"
#include "check.h"
#include "swy_kernels.h"

static int same(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

static int pick_cases(void)
{
    const unsigned avx2 = SWY_BLAS_CPU_AVX2,
                   avx512 = SWY_BLAS_CPU_AVX2 | SWY_BLAS_CPU_AVX512;
    const struct {
        const char *current;
        unsigned features;
        const char *want;
    } cases[] = {
        /* OpenBLAS 0.3.21 on an Emerald Rapids, and on CPUs it misreads
         * as older ones: the best kernels the CPU runs. */
        {"Prescott", avx512, "SkylakeX"},
        {"prescott", avx2, "Haswell"},
        {"Nehalem", avx512, "SkylakeX"},
        {"Sandybridge", avx2, "Haswell"},
        {"Barcelona", avx2, "Haswell"},
        {"Core2", avx512, "SkylakeX"},
        /* A CPU without AVX2 runs none of them. */
        {"Prescott", 0, NULL},
        /* OpenBLAS's own AVX2 and AVX-512 choices stay. */
        {"Haswell", avx512, NULL},
        {"Zen", avx2, NULL},
        {"SkylakeX", avx512, NULL},
        {"Cooperlake", avx512, NULL},
        {"SapphireRapids", avx512, NULL},
        {"Excavator", avx2, NULL},
        /* A name from a newer OpenBLAS: it may know better. */
        {"GraniteRapids", avx512, NULL},
        {"", avx512, NULL},
        {NULL, avx512, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const char *got =
            swy_blas_core_pick(cases[i].current, cases[i].features);
        CHECK(same(got, cases[i].want), " %s with features %u: %s, not %s",
              cases[i].current ? cases[i].current : "(null)",
              cases[i].features, got ? got : "(keep)",
              cases[i].want ? cases[i].want : "(keep)");
    }
    /* The AVX-512 bit alone (no AVX2) cannot happen; it picks nothing. */
    CHECK(swy_blas_core_pick("Prescott", SWY_BLAS_CPU_AVX512) == NULL);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "pick";
    if (strcmp(mode, "pick") == 0)
        return pick_cases();
    const char *core = swy_k_blas_core();
    unsigned features = swy_blas_cpu_features();
    printf("OpenBLAS kernels: %s; CPU: AVX2 %s, AVX-512 %s; "
           "OPENBLAS_CORETYPE=%s\n", core,
           features & SWY_BLAS_CPU_AVX2 ? "yes" : "no",
           features & SWY_BLAS_CPU_AVX512 ? "yes" : "no",
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE")
                                       : "(unset)");
    if (strcmp(mode, "rank") == 0) {
        const char *pick = swy_blas_core_pick(core, features);
        CHECK(pick == NULL, " the rank runs OpenBLAS's %s kernels where %s "
              "ones run", core, pick);
        return 0;
    }
    if (strcmp(mode, "kept") == 0) {
        if (!(features & SWY_BLAS_CPU_AVX2))
            return TEST_SKIP;
        CHECK(strcasecmp(core, "Haswell") == 0,
              " OPENBLAS_CORETYPE=Haswell from the caller, kernels %s", core);
        return 0;
    }
    fprintf(stderr, "usage: test_blas_core [pick|rank|kept]\n");
    return 2;
}
