/* The communicator object behind swy_comm_t (lib/api only). */
#ifndef SWY_API_COMM_IMPL_H
#define SWY_API_COMM_IMPL_H

#include "boot/boot.h"
#include "sched/sched.h"
#include "topo/topo.h"
#include "transport/transport.h"
#include "util/status.h"

struct swy_comm {
    int rank, nranks;
    double timeout_s;
    swy_boot_t *boot;
    swy_boot_root_t *root; /* root service this comm owns, or NULL */
    swy_topo_t *topo;
    swy_transport_set_t *transports;
    swy_sched_t *sched;
    swy_coll_shm_t *shm;     /* the one-host channels (coll.h), or NULL */
    swy_coll_shm_t *shm_a2a;
    struct swy_coll_mem *mem; /* swy_mem_alloc's allocations (mem.c) */
    char last_error[SWY_ERRMSG_MAX];
};

/* SWY_TOPO_PROBE: measure every link and put the figures in comm->topo
 * (collective; probe.c). */
swy_status_t swy_api_probe_links(swy_comm_t comm);

/* Record the calling thread's last error on the comm; returns status. */
swy_status_t swy_api_fail(swy_comm_t comm, swy_status_t status);

#endif
