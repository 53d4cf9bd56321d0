/* Checks shared by the load tests: CHECK counts a failure and goes on,
 * CHECK_OK ends the test on a failed call (printing swy_last_error). */
#ifndef SWY_LOAD_TEST_H
#define SWY_LOAD_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "switchyard/load.h"

static int failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            failures++;                                                     \
        }                                                                   \
    } while (0)

#define CHECK_OK(expr)                                                      \
    do {                                                                    \
        swy_status_t st_ = (expr);                                          \
        if (st_ != SWY_OK) {                                                \
            fprintf(stderr, "FAIL %s:%d: %s -> %d: %s\n", __FILE__,         \
                    __LINE__, #expr, st_, swy_last_error(NULL));            \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                               \
    CHECK(fabs((a) - (b)) <= (tol), "%s = %.12g, expected %.12g", #a,       \
          (double)(a), (double)(b))

#endif
