/* SWY_TRACE: Chrome trace JSON per rank (loadable in Perfetto or
 * chrome://tracing). Events are kept in memory (bounded) and written when
 * the communicator is destroyed. Lanes: tid 0 = ops, 1+peer = sends to
 * peer, 100000+peer = receives from peer. Timestamps are wall-clock
 * microseconds so the ranks of one host line up. */
#ifndef SWY_SCHED_TRACE_H
#define SWY_SCHED_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct swy_trace swy_trace_t;

/* NULL when SWY_TRACE is unset (tracing off). %r in the path becomes the
 * rank. */
swy_trace_t *swy_trace_create(int rank, int nranks);
/* A complete event [start_ns, end_ns] (monotonic ns) in a lane; hints:
 * the SWY_SEND_HINT_* bits a send went with (0 for anything else). */
void swy_trace_event(swy_trace_t *trace, int tid, const char *name,
                     const char *cat, uint64_t start_ns, uint64_t end_ns,
                     int priority, size_t bytes, int peer, uint32_t seq,
                     unsigned hints);
/* Write the file and free; NULL ok. */
void swy_trace_finish(swy_trace_t *trace);

#endif
