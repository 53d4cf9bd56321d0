/* One engine per process, also across rendezvous: a communicator made by
 * swy_comm_init_rank/_env with a unique id of its own, whose ranks are
 * all processes that an engine of this process already reaches (the
 * usual case: a framework that makes one communicator per group, each
 * from its own id, over the same processes), joins that engine instead
 * of starting transports and a progress thread of its own. Its ops then
 * share the engine's links, so priorities hold across it and the others.
 *
 * Processes are named job-wide by (host identity, pid, a random number
 * drawn once per process), which every rank of every communicator
 * allgathers at init. The communicator keeps its own control plane
 * (boot): its failures (mismatch, timeout, abort) are that control
 * plane's job failures and reach its ranks alone; a process that dies is
 * seen by the engine's control plane too, and fails every communicator
 * that holds it. Where some rank's process is not on the engine (a
 * communicator that reaches new processes), the communicator gets an
 * engine of its own, as before. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "api/comm_impl.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

static pthread_mutex_t engines_lock = PTHREAD_MUTEX_INITIALIZER;
static swy_engine_t *engines; /* newest first */

static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;
static uint64_t nonce;

static void nonce_draw(void)
{
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
        nonce = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^
                (uint64_t)(uintptr_t)&nonce;
}

swy_status_t swy_api_procs_gather(swy_comm_t comm, swy_api_proc_t **procs_p)
{
    int n = comm->nranks;
    swy_api_proc_t mine;
    memset(&mine, 0, sizeof(mine)); /* padding too: it is sent */
    pthread_once(&nonce_once, nonce_draw);
    const swy_topo_local_t *local = swy_topo_rank_info(comm->topo,
                                                       comm->rank);
    snprintf(mine.host_id, sizeof(mine.host_id), "%s", local->host_id);
    mine.pid = (int64_t)getpid();
    mine.nonce = nonce;
    if (getrandom(&mine.draw, sizeof(mine.draw), 0) != sizeof(mine.draw))
        mine.draw = nonce ^ (uint64_t)swy_time_ns();
    void *all = NULL;
    size_t *lens = swy_calloc((size_t)n, sizeof(size_t));
    if (lens == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    swy_status_t status = swy_boot_allgather(comm->boot, &mine, sizeof(mine),
                                             comm->timeout_s, &all, lens);
    for (int r = 0; status == SWY_OK && r < n; r++)
        if (lens[r] != sizeof(mine))
            status = swy_err_set(SWY_ERR_MISMATCH, "api", "rank %d sent a "
                                 "process record of %zu bytes (expected "
                                 "%zu): mixed Switchyard versions?", r,
                                 lens[r], sizeof(mine));
    swy_free(lens);
    if (status != SWY_OK) {
        swy_free(all);
        return status;
    }
    swy_api_proc_t *procs = all;
    for (int r = 0; r < n; r++)
        procs[r].host_id[sizeof(procs[r].host_id) - 1] = '\0';
    *procs_p = procs;
    return SWY_OK;
}

void swy_api_engine_register(swy_engine_t *engine, swy_api_proc_t *procs,
                             int nprocs)
{
    pthread_mutex_lock(&engines_lock);
    engine->procs = procs;
    engine->nprocs = nprocs;
    engine->job = procs[0].draw;
    engine->next = engines;
    engines = engine;
    pthread_mutex_unlock(&engines_lock);
}

void swy_api_engine_unregister(swy_engine_t *engine)
{
    pthread_mutex_lock(&engines_lock);
    for (swy_engine_t **at = &engines; *at != NULL; at = &(*at)->next)
        if (*at == engine) {
            *at = engine->next;
            break;
        }
    pthread_mutex_unlock(&engines_lock);
    swy_free(engine->procs);
    engine->procs = NULL;
}

static int proc_equal(const swy_api_proc_t *a, const swy_api_proc_t *b)
{
    return a->pid == b->pid && a->nonce == b->nonce &&
           strcmp(a->host_id, b->host_id) == 0;
}

/* An engine of this process on which every one of procs is a peer (the
 * engine peer of each in map), with a reference taken; or NULL. */
static swy_engine_t *engine_find(const swy_api_proc_t *procs, int n, int *map)
{
    swy_engine_t *found = NULL;
    pthread_mutex_lock(&engines_lock);
    for (swy_engine_t *e = engines; e != NULL && found == NULL; e = e->next) {
        int all = 1;
        for (int r = 0; r < n && all; r++) {
            map[r] = -1;
            for (int p = 0; p < e->nprocs && map[r] < 0; p++)
                if (proc_equal(&procs[r], &e->procs[p]))
                    map[r] = p;
            all = map[r] >= 0;
        }
        if (all) {
            found = e;
            swy_api_engine_ref(e);
        }
    }
    pthread_mutex_unlock(&engines_lock);
    return found;
}

typedef struct {
    uint32_t found;
    uint32_t pad;
    uint64_t job; /* of the engine found */
    uint64_t used[SWY_SCHED_COMM_IDS / 64];
} join_entry_t;

swy_status_t swy_api_join(swy_comm_t comm, const swy_api_proc_t *procs,
                          int *joined)
{
    int n = comm->nranks;
    *joined = 0;
    int *map = swy_malloc((size_t)n * sizeof(int));
    if (map == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    swy_engine_t *engine = engine_find(procs, n, map);
    join_entry_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.found = engine != NULL;
    if (engine != NULL) {
        mine.job = engine->job;
        swy_sched_comm_ids(engine->sched, mine.used);
    }
    void *all = NULL;
    size_t *lens = swy_calloc((size_t)n, sizeof(size_t));
    swy_status_t status =
        lens == NULL ? swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory")
                     : swy_boot_allgather(comm->boot, &mine, sizeof(mine),
                                          comm->timeout_s, &all, lens);
    /* Every rank found an engine of the same job (each process its own
     * part of it: messages go between the parts of one job's engine), or
     * none joins; the id is free on every member's part. */
    uint64_t used[SWY_SCHED_COMM_IDS / 64] = {0};
    int everyone = status == SWY_OK;
    for (int r = 0; everyone && r < n; r++) {
        const join_entry_t *e = (const join_entry_t *)all + r;
        everyone = lens[r] == sizeof(mine) && e->found &&
                   e->job == ((const join_entry_t *)all)[0].job;
        for (size_t w = 0; everyone && w < SWY_ARRAY_SIZE(used); w++)
            used[w] |= e->used[w];
    }
    uint32_t id = 0;
    for (uint32_t i = 1; everyone && i < SWY_SCHED_COMM_IDS && id == 0; i++)
        if (!(used[i / 64] & (UINT64_C(1) << (i % 64))))
            id = i;
    swy_free(all);
    swy_free(lens);
    if (status != SWY_OK || !everyone || id == 0) {
        if (status == SWY_OK && everyone)
            swy_info("api", "every communicator id is in use on some "
                     "member's engine: this communicator gets its own");
        if (engine != NULL)
            swy_api_engine_release(engine, NULL);
        swy_free(map);
        return status;
    }
    swy_sched_comm_params_t params = {
        .id = id, .rank = comm->rank, .nranks = n, .peers = map,
        .owner = comm, .boot = comm->boot};
    status = swy_sched_comm_create(engine->sched, &params, &comm->view);
    if (status != SWY_OK) {
        swy_api_engine_release(engine, NULL);
        swy_free(map);
        return status;
    }
    swy_coll_mem_destroy(comm->mem); /* the engine's serves it */
    comm->engine = engine;
    comm->peers = map;
    comm->own_boot = 1;
    comm->transports = engine->transports;
    comm->sched = engine->sched;
    comm->mem = engine->mem;
    swy_info("api", "rank %d of %d joined this process's engine as "
             "communicator %u (its ranks' processes are its peers)",
             comm->rank, n, id);
    *joined = 1;
    return SWY_OK;
}
