/* The serial reference of the collective tests (coll_ref.c). */
#ifndef SWY_TEST_COLL_REF_H
#define SWY_TEST_COLL_REF_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"

#define NDTYPES 8
extern const swy_dtype_t dtypes[NDTYPES];
extern const size_t dsizes[NDTYPES];
/* The seed of every input (a test's command line may set it). */
extern uint64_t base_seed;

/* Value of element i of rank r's input for op number `iter` of dtype
 * dtypes[di] into out: sums exact in every float type, products (for_prod)
 * near 1. */
void gen_value(int di, int iter, int r, size_t i, int for_prod, void *out);
/* A float dtype's element as a double (0 for integer dtypes). */
double as_double(int di, const void *p);
/* Whether got is element i of the reduction by op of the w ranks'
 * gen_value inputs (integer ops wrap, AVG divides the wrapped sum;
 * float types within their rounding). */
int check_allreduce_elem(int di, swy_redop_t op, int iter, int w, size_t i,
                         const void *got);

#endif
