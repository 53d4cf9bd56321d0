/* The communicator object behind swy_comm_t (lib/api only). */
#ifndef SWY_API_COMM_IMPL_H
#define SWY_API_COMM_IMPL_H

#include "boot/boot.h"
#include "sched/sched.h"
#include "topo/topo.h"
#include "transport/transport.h"
#include "util/status.h"

/* What the communicators of one job in a process share (docs/usage.md,
 * "Communicators, groups and point-to-point"): the control plane, the
 * transports, the scheduler with its progress thread, policy and
 * per-peer links. Made by swy_comm_init_rank/_env with the job's
 * rendezvous; every communicator split from it joins it; it goes with
 * the last of them. */
/* A process, as every rank of a job names it (join.c): its host, its pid
 * there and a random number drawn once per process (a pid is reused). */
typedef struct {
    char host_id[128];
    int64_t pid;
    uint64_t nonce;
    uint64_t draw; /* random, per gather: rank 0's names an engine's job */
} swy_api_proc_t;

typedef struct swy_engine {
    struct swy_engine *next; /* the process's engines (join.c's list) */
    int refs; /* communicators on it (comm.c's engine lock) */
    swy_api_proc_t *procs;   /* [nranks of its job]: the process of each
                                engine peer */
    int nprocs;
    uint64_t job; /* the job's name: its rank 0's draw at the gather */
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
    int own_boot; /* joined an engine with a rendezvous of its own: boot
                     and root are this communicator's (join.c) */
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

/* One more communicator on the engine (swy_comm_split, join.c). */
void swy_api_engine_ref(swy_engine_t *engine);
/* Drop a reference (engine_release in comm.c): the last one takes the
 * engine down; abort_why NULL leaves the job cleanly. */
swy_status_t swy_api_engine_release(swy_engine_t *engine,
                                    const char *abort_why);

/* join.c: every rank's process (an allgather over comm->boot), filled
 * into *procs_p ([nranks], swy_free it). */
swy_status_t swy_api_procs_gather(swy_comm_t comm, swy_api_proc_t **procs_p);
/* A new communicator whose every rank is a process some engine of this
 * process already reaches joins that engine (collective over comm->boot:
 * every rank must find one, or none joins): *joined 1 and comm runs as a
 * view on it, with its own control plane for its failures; *joined 0 and
 * nothing changed otherwise. */
swy_status_t swy_api_join(swy_comm_t comm, const swy_api_proc_t *procs,
                          int *joined);
/* Make an engine findable by swy_api_join (it takes procs), and forget
 * it as it goes. */
void swy_api_engine_register(swy_engine_t *engine, swy_api_proc_t *procs,
                             int nprocs);
void swy_api_engine_unregister(swy_engine_t *engine);

/* SWY_TOPO_PROBE: measure every link and put the figures in comm->topo
 * (collective; probe.c). */
swy_status_t swy_api_probe_links(swy_comm_t comm);

/* The device plugin's communicators of comm, made (collectively) if it
 * has none yet: *ready_p = 1 when its device collectives can go to the
 * plugin, 0 when there is no plugin that runs them (devcoll.c). */
swy_status_t swy_api_devcoll_ready(const char *fn, swy_comm_t comm,
                                   int *ready_p);

/* At a communicator's creation, on every rank: its device plugin's
 * communicators, where there is a plugin that runs collectives; a
 * failure is logged (the communicator's device ops then fail). */
void swy_api_devcoll_eager(swy_comm_t comm);

/* swy_comm_split's part on the device: where the plugin splits its
 * communicators (ncclCommSplit), make the parent's if it has none yet,
 * and split them for child (NULL for SWY_SPLIT_NOCOLOR, which takes part
 * all the same); else the child makes its own (swy_api_devcoll_eager). */
swy_status_t swy_api_devcoll_split(swy_comm_t parent, int color, int key,
                                   swy_comm_t child);

/* split.c: swy_comm_split of every rank of a job at once, in memory (for
 * swy_sim.h, whose ranks are all in this process and cannot each block in
 * an allgather): out[r] is rank r's child, NULL for SWY_SPLIT_NOCOLOR.
 * All or nothing. */
swy_status_t swy_api_split_local(const swy_comm_t *comms, int n,
                                 const int *colors, const int *keys,
                                 swy_comm_t *out);

/* comm.c: the engine's scheduler for comm (topology, transports, boot
 * and channels set), in comm->sched; *params_p: what it was made with.
 * caller_progress: no progress thread, whatever SWY_PROGRESS says.
 * auto_partition: what SWY_PARTITION_BYTES=auto means (the same on every
 * rank), or 0: worked out from comm->topo. */
swy_status_t swy_api_sched_create(swy_comm_t comm, int caller_progress,
                                  size_t auto_partition,
                                  swy_sched_params_t *params_p);

/* Record the calling thread's last error on the comm; returns status. */
swy_status_t swy_api_fail(swy_comm_t comm, swy_status_t status);

#endif
