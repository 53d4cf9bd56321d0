/**
 * @file swy_sim.h
 * @brief Advanced: every rank of a job in one process, for simulators.
 *
 * swy_sim_comms_create makes the communicators of all nranks ranks of a
 * job at once, inside the calling process: no control plane (the ranks
 * meet in memory), one transport the caller provides for every pair of
 * distinct ranks (the built-in `self` serves a rank's messages to
 * itself), no shared-memory channels (every transfer goes through the
 * transport), and progress driven by the caller (SWY_PROGRESS=caller:
 * swy_test makes progress; nothing runs in the background). Each
 * communicator has its own engine, scheduler, policy and per-peer links,
 * exactly as in a process of its own, and is used through the normal
 * API (swy_alltoallv, swy_allreduce, swy_test, swy_comm_configure, ...).
 *
 * swy_sim_clock_set replaces the clock the library reads everywhere
 * (deadlines, trace stamps, policies' ages), so that engines driven by a
 * discrete-event simulator run in simulated time. It is process-wide:
 * set it before the communicators are made and while no other engine of
 * the process runs.
 *
 * Not for normal programs: the ranks of such a job must be progressed by
 * one thread at a time, and swy_wait would spin in real time while only
 * the caller can advance the simulated clock (use swy_test).
 */
#ifndef SWY_SIM_H
#define SWY_SIM_H

#include <stdint.h>

#include "switchyard/switchyard.h"
#include "switchyard/swy_transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The job: its ranks' placement, links and transport. */
typedef struct {
    size_t struct_size; /**< sizeof(swy_sim_params_t) */
    int nranks;
    /** [nranks]: the node of each rank (ranks of one node are one host:
     *  their links are same_node, the others cross_node). */
    const int *node_of;
    /** [nranks * nranks]: bytes/s of the link a -> b at [a * nranks + b],
     *  what the scheduler sizes partitions and bursts by; NULL: the
     *  library's defaults per link class. */
    const double *bandwidth;
    /** [nranks * nranks]: seconds, likewise; NULL: the defaults. */
    const double *latency;
    /** The transport every rank uses to reach every other rank. Its
     *  init() is called once per rank with that rank in host->rank; the
     *  context it makes serves that rank only. */
    const swy_transport_v1_t *transport;
} swy_sim_params_t;

/**
 * Make the communicators of every rank (comms[r] is rank r's). All or
 * nothing: on failure no communicator is left and swy_last_error(NULL)
 * says why. Destroy each with swy_comm_destroy once none has an op in
 * flight.
 */
SWY_EXPORT swy_status_t swy_sim_comms_create(const swy_sim_params_t *params,
                                             swy_comm_t *comms);

/**
 * swy_comm_split of every rank at once: comms[r] is rank r's communicator
 * of a job made by swy_sim_comms_create (or split from one), colors[r]
 * and keys[r] what rank r would pass to swy_comm_split, out[r] its new
 * communicator (NULL for SWY_SPLIT_NOCOLOR). swy_comm_split itself would
 * block each rank in turn in an allgather that needs them all.
 */
SWY_EXPORT swy_status_t swy_sim_comms_split(const swy_comm_t *comms, int n,
                                            const int *colors,
                                            const int *keys,
                                            swy_comm_t *out);

/** The clock, in nanoseconds, the library reads from now on; NULL: the
 *  monotonic clock again. It must not go back, and must be above zero
 *  from the first op on (the engine's stamps take 0 for "not yet", as
 *  CLOCK_MONOTONIC never reads 0): start a simulated clock at an offset. */
SWY_EXPORT void swy_sim_clock_set(uint64_t (*now_ns)(void *arg),
                                  void *arg);

#ifdef __cplusplus
}
#endif
#endif /* SWY_SIM_H */
