/* The coll benchmark's calls (coll_run.h) on Switchyard's public API, for
 * swy-bench coll and for swy-bench-mpi --with-switchyard. */
#ifndef SWY_BENCH_COLL_SWY_H
#define SWY_BENCH_COLL_SWY_H

#include "coll_run.h"

#include "switchyard/switchyard.h"

/** Fill @p impl ("switchyard") to run on @p comm. */
void swyb_coll_switchyard_impl(swy_comm_t comm, swyb_coll_impl_t *impl);

#endif /* SWY_BENCH_COLL_SWY_H */
