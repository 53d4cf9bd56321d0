/* The coll benchmark's calls (coll_run.h) on Switchyard's public API, for
 * swy-bench coll and for swy-bench-mpi --with-switchyard; and the check of
 * a Switchyard call that every swy-bench mode uses. */
#ifndef SWY_BENCH_COLL_SWY_H
#define SWY_BENCH_COLL_SWY_H

#include "coll_run.h"

#include "switchyard/switchyard.h"

/** 0 when @p status is SWY_OK; else print "swy-bench: rank R: WHAT
 * failed: status: last error" to stderr and return -1. */
int swyb_swy_check(swy_comm_t comm, swy_status_t status, const char *what);

/** Fill @p impl ("switchyard") to run on @p comm. */
void swyb_coll_switchyard_impl(swy_comm_t comm, swyb_coll_impl_t *impl);

#endif /* SWY_BENCH_COLL_SWY_H */
