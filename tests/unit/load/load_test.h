/* The load tests' one check of their own: CHECK_NEAR, a CHECK (check.h)
 * of a value against its expected one within an absolute tolerance. */
#ifndef SWY_LOAD_TEST_H
#define SWY_LOAD_TEST_H

#include <math.h>

#include "check_swy.h"
#include "switchyard/load.h"

#define CHECK_NEAR(a, b, tol)                                               \
    CHECK(fabs((a) - (b)) <= (tol), "%s = %.12g, expected %.12g", #a,       \
          (double)(a), (double)(b))

#endif
