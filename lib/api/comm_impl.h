/* The communicator object behind swy_comm_t (lib/api only). */
#ifndef SWY_API_COMM_IMPL_H
#define SWY_API_COMM_IMPL_H

#include "boot/boot.h"
#include "sched/sched.h"
#include "topo/topo.h"
#include "transport/transport.h"
#include "util/status.h"

/* What the communicators of one job in a process share (DESIGN.md, "One
 * engine per process"): the control plane, the transports, the
 * scheduler with its progress thread, policy and per-peer links. Made by
 * swy_comm_init_rank/_env with the job's rendezvous; every communicator
 * split from it joins it; it goes with the last of them. */
typedef struct swy_engine {
    int refs; /* communicators on it (comm.c's engine lock) */
    double timeout_s;
    swy_boot_t *boot;
    swy_boot_root_t *root; /* root service the engine owns, or NULL */
    swy_topo_t *topo;      /* of the job's ranks (the engine's peers) */
    swy_transport_set_t *transports;
    swy_sched_t *sched;
    swy_coll_shm_t *shm, *shm_a2a; /* the world's channels, or NULL */
    struct swy_coll_mem *mem;
    uint32_t views_made; /* split views made here: names their failures */
} swy_engine_t;

struct swy_comm {
    int rank, nranks;
    double timeout_s;
    swy_engine_t *engine;
    swy_sched_comm_t *view; /* this communicator on the engine */
    int *peers;   /* [nranks]: engine peer of each rank; NULL: identity */
    swy_boot_t *boot;      /* the engine's */
    swy_boot_root_t *root; /* while init runs; then the engine's */
    swy_topo_t *topo; /* the engine's (world), or this comm's own subset */
    swy_transport_set_t *transports; /* the engine's, by engine peer */
    swy_sched_t *sched;              /* the engine's */
    swy_coll_shm_t *shm;     /* the one-host channels (coll.h), or NULL */
    swy_coll_shm_t *shm_a2a;
    struct swy_coll_mem *mem; /* swy_mem_alloc's allocations (mem.c) */
    char last_error[SWY_ERRMSG_MAX];
};

/* The engine peer of a rank of comm (its transports are indexed so). */
static inline int swy_api_peer(const struct swy_comm *comm, int rank)
{
    return comm->peers != NULL ? comm->peers[rank] : rank;
}

/* One more communicator on the engine (swy_comm_split). */
void swy_api_engine_ref(swy_engine_t *engine);

/* SWY_TOPO_PROBE: measure every link and put the figures in comm->topo
 * (collective; probe.c). */
swy_status_t swy_api_probe_links(swy_comm_t comm);

/* Record the calling thread's last error on the comm; returns status. */
swy_status_t swy_api_fail(swy_comm_t comm, swy_status_t status);

#endif
