/* The prologue every algorithm's create() shares (coll.h, create.c): the
 * cookie every algorithm packs its transfers' phase, step and chunk into
 * gives each field back whole at the extremes, none bleeding into
 * another (checked against the fields packed by hand as shifted sums);
 * the create checks refuse device buffers where only host ones go, and
 * more steps than the tags of an op, naming the algorithm; and an
 * algorithm's create fills the state it describes.
 * Usage: test_create */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"
#include "util/status.h"

static void check_cookie(int phase, int step, size_t chunk)
{
    uint64_t c = swy_coll_cookie(phase, step, chunk);
    /* Phase in the top 2 bits, step in the 22 below, chunk in the low 40:
     * the layout written out as a sum of powers of two. */
    uint64_t want = (uint64_t)phase * (UINT64_C(1) << 62) +
                    (uint64_t)step * (UINT64_C(1) << 40) + (uint64_t)chunk;
    CHECK(c == want);
    CHECK(swy_coll_cookie_phase(c) == phase);
    CHECK(swy_coll_cookie_step(c) == step);
    CHECK(swy_coll_cookie_chunk(c) == chunk);
}

int main(void)
{
    const size_t chunk_max = ((size_t)1 << 40) - 1;
    const int step_max = (1 << 22) - 1;
    check_cookie(0, 0, 0);
    check_cookie(3, step_max, chunk_max);
    check_cookie(0, step_max, 0);
    check_cookie(3, 0, chunk_max);
    check_cookie(1, 12345, 678901234567);
    check_cookie(2, 1, 1);

    swy_coll_args_t host = {.kind = SWY_COLL_REDUCE, .dtype = SWY_FLOAT32,
                            .mem = SWY_MEM_HOST, .count = 10};
    swy_coll_args_t device = host;
    device.mem = SWY_MEM_CUDA;
    CHECK(swy_coll_create_check("x/y", &host, 4, SWY_COLL_HOST_ONLY, 3) ==
          SWY_OK);
    CHECK(swy_coll_create_check("x/y", &device, 4, SWY_COLL_ANY_MEM, 3) ==
          SWY_OK);
    CHECK(swy_coll_create_check("x/y", &device, 4, SWY_COLL_HOST_ONLY, 3) ==
          SWY_ERR_UNSUPPORTED);
    CHECK(strstr(swy_err_last(), "x/y") != NULL);
    CHECK(swy_coll_create_check("x/y", &host, 4, SWY_COLL_ANY_MEM,
                                SWY_COLL_TAG_MAX) == SWY_OK);
    CHECK(swy_coll_create_check("x/y", &host, 4, SWY_COLL_ANY_MEM,
                                (size_t)SWY_COLL_TAG_MAX + 1) ==
          SWY_ERR_UNSUPPORTED);
    CHECK(strstr(swy_err_last(), "x/y on 4 ranks") != NULL);

    /* reduce/chain takes host buffers only, through the shared check. */
    const swy_coll_algo_t *reduce = swy_coll_algo(SWY_COLL_REDUCE);
    swy_coll_state_t *st = NULL;
    CHECK(reduce != NULL);
    if (reduce != NULL) {
        CHECK(reduce->create(&device, 0, 4, 4096, &st) ==
              SWY_ERR_UNSUPPORTED);
        CHECK(strstr(swy_err_last(), "reduce/chain") != NULL);
        CHECK(reduce->create(&host, 0, 4, 4096, &st) == SWY_OK && st != NULL);
        if (st != NULL)
            reduce->destroy(st);
    }
    if (check_failures == 0)
        printf("PASS: coll create prologue and cookies\n");
    return check_failures == 0 ? 0 : 1;
}
