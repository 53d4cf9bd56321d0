/* Setting up a comm's shared-memory channels (coll.h,
 * swy_coll_shm_setup): the collective steps over the control plane that
 * make, share and check the segments, probe whether the ranks may read
 * each other's memory, and start the copy helpers. The channels
 * themselves are shm.c's; the swy_mem_alloc registry shm_mem.c's. */
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boot/boot.h"
#include "coll/coll.h"
#include "topo/topo.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/status.h"

/* What the collective steps need of the comm being made. */
typedef struct {
    swy_boot_t *boot;
    int rank, nranks;
    double timeout_s;
    swy_coll_mem_t *mem;
} setup_t;

/* SWY_COPY_THREADS for nranks ranks on this host (the table bounds a
 * number to 0..SWY_POOL_MAX_HELPERS): auto gives each rank the CPUs it
 * may run on beyond one per rank, up to AUTO_HELPERS_MAX helpers (none
 * where ranks share CPUs). Each helper shortens allreduce/shm's copies
 * and reductions on a host with CPUs to spare; three is the most that was
 * measured (docs/archive/performance-2026-11.md, "The shared-memory
 * allreduce"). */
#define AUTO_HELPERS_MAX 3
static int copy_helpers(int nranks)
{
    cpu_set_t set;
    int spare = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        spare = SWY_MAX(0, SWY_MIN(CPU_COUNT(&set) / nranks - 1,
                                   AUTO_HELPERS_MAX));
    /* auto, or a value that is not a number: the automatic count */
    return (int)swy_config_get_int("SWY_COPY_THREADS", spare);
}

/* SWY_SHM_PULL: its table values are auto, never, always, in the order
 * of SWY_COLL_PULL_*. */
static int pull_setting(void)
{
    int mode = swy_config_get_choice("SWY_SHM_PULL");
    return mode < 0 ? SWY_COLL_PULL_AUTO : mode;
}

/* Read by the peers at setup (swy_coll_shm_probe_pull). */
static const volatile uint64_t pull_probe = SWY_COLL_PULL_PROBE;

/* One channel into *shm_p, or none (collective): rank 0 creates the
 * segment and allgathers its name, the others attach, and a second
 * allgather makes every rank keep the channel only if every rank has it,
 * so that all choose the same algorithms. With pull, the ranks also try
 * to read each other's memory (alltoallv/shm's pulls). */
static swy_status_t setup_channel(const setup_t *s, const char *what,
                                  int pull, swy_coll_shm_t **shm_p)
{
    int n = s->nranks;
    char name[64] = "";
    swy_status_t made = SWY_ERR_SYSTEM;
    if (s->rank == 0)
        made = swy_coll_shm_create(0, n, name, sizeof(name), shm_p);
    void *all = NULL;
    size_t *lens = swy_calloc((size_t)n, sizeof(size_t));
    if (lens == NULL) {
        swy_coll_shm_destroy(*shm_p);
        *shm_p = NULL;
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "out of memory");
    }
    swy_status_t status = swy_boot_allgather(
        s->boot, name, s->rank == 0 ? strlen(name) : 0, s->timeout_s,
        &all, lens);
    if (status == SWY_OK && s->rank != 0 && lens[0] > 0 &&
        lens[0] < sizeof(name)) {
        memcpy(name, all, lens[0]);
        name[lens[0]] = '\0';
        made = swy_coll_shm_attach(name, s->rank, n, shm_p);
    }
    swy_free(all);
    all = NULL;
    if (status == SWY_OK) {
        if (made != SWY_OK && s->rank != 0 && name[0] == '\0')
            swy_info("coll", "no shared-memory %s channel: rank 0 could not "
                     "create it", what);
        else if (made != SWY_OK)
            swy_info("coll", "no shared-memory %s channel (%s)", what,
                     swy_err_last());
        /* Whether this rank attached, and the CPUs it may run on: the
         * ranks share CPUs when all of theirs together are fewer than
         * the ranks (ranks pinned to a core each do not). A rank whose
         * affinity is unknown counts as able to run anywhere. */
        struct {
            uint8_t attached;
            cpu_set_t cpus;
            int64_t pid;
            uint64_t pid_ns; /* a pid means this process only within it */
            uint64_t probe;  /* the address of pull_probe */
        } mine, *theirs;
        memset(&mine, 0, sizeof(mine)); /* padding too: it is sent */
        mine.attached = made == SWY_OK;
        mine.pid = (int64_t)getpid();
        struct stat ns;
        mine.pid_ns = stat("/proc/self/ns/pid", &ns) == 0 ? ns.st_ino : 0;
        mine.probe = (uint64_t)(uintptr_t)&pull_probe;
        int pull_mode = pull ? pull_setting() : SWY_COLL_PULL_NEVER;
        if (pull_mode != SWY_COLL_PULL_NEVER)
            swy_coll_shm_allow_pull(); /* before the peers try */
        if (sched_getaffinity(0, sizeof(mine.cpus), &mine.cpus) != 0)
            memset(&mine.cpus, 0xff, sizeof(mine.cpus));
        status = swy_boot_allgather(s->boot, &mine, sizeof(mine),
                                    s->timeout_s, &all, lens);
        int ok = made == SWY_OK;
        cpu_set_t cpus;
        CPU_ZERO(&cpus);
        theirs = all;
        for (int r = 0; status == SWY_OK && r < n; r++) {
            if (lens[r] != sizeof(mine)) {
                ok = 0;
                break;
            }
            ok = ok && theirs[r].attached;
            CPU_OR(&cpus, &cpus, &theirs[r].cpus);
        }
        int share = CPU_COUNT(&cpus) < n;
        if (status == SWY_OK && !ok && made == SWY_OK)
            swy_info("coll", "no shared-memory %s channel: another rank "
                     "could not attach", what);
        if (status != SWY_OK || !ok) {
            swy_coll_shm_destroy(*shm_p);
            *shm_p = NULL;
        } else {
            (*shm_p)->ranks_share_cpus = share;
            (*shm_p)->pull.mode = pull_mode;
            int64_t pids[SWY_COLL_SHM_MAX_RANKS];
            uint64_t probes[SWY_COLL_SHM_MAX_RANKS];
            int one_ns = mine.pid_ns != 0;
            for (int r = 0; r < n; r++) {
                pids[r] = theirs[r].pid;
                probes[r] = theirs[r].probe;
                one_ns = one_ns && theirs[r].pid_ns == mine.pid_ns;
            }
            /* In another PID namespace a peer's pid names some other
             * process here: no pulls then (can_pull stays 0). */
            if (pull_mode != SWY_COLL_PULL_NEVER && one_ns)
                swy_coll_shm_probe_pull(*shm_p, pids, probes);
            else if (pull_mode != SWY_COLL_PULL_NEVER)
                swy_info("coll", "alltoallv/shm: the ranks are in different "
                         "PID namespaces; blocks go by copy");
        }
    }
    if (s->rank == 0)
        swy_coll_shm_unlink(name); /* every rank attached or gave up */
    swy_free(all);
    swy_free(lens);
    return status;
}

/* Whether every rank can map every other's swy_mem_alloc memory
 * (collective): each makes a probe allocation, the ranks allgather where
 * they are, each maps the others' and reads them, and a second
 * allgather makes the answer the same everywhere. The channels then
 * carry it (mem_ok), so that the shm algorithms reach into the peers'
 * allocations only where all can. */
static swy_status_t setup_mem(const setup_t *s, swy_coll_shm_t *shm,
                              swy_coll_shm_t *shm_a2a)
{
    int n = s->nranks;
    void *probe = NULL, *all = NULL;
    swy_coll_mem_ref_t mine;
    memset(&mine, 0, sizeof(mine));
    if (swy_coll_mem_probe_make(s->mem, &probe, &mine) != SWY_OK)
        swy_info("coll", "no probe of swy_mem_alloc memory: %s",
                 swy_err_last());
    size_t *lens = swy_calloc((size_t)n, sizeof(size_t));
    if (lens == NULL) {
        if (probe != NULL)
            swy_coll_mem_free(s->mem, probe);
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "out of memory");
    }
    swy_status_t status = swy_boot_allgather(s->boot, &mine, sizeof(mine),
                                             s->timeout_s, &all, lens);
    uint8_t ok = status == SWY_OK && mine.valid;
    for (int r = 0; ok && r < n; r++) {
        const swy_coll_mem_ref_t *ref =
            (const swy_coll_mem_ref_t *)all + r;
        ok = lens[r] == sizeof(mine) &&
             (r == s->rank || swy_coll_mem_probe_peer(s->mem, r, ref));
    }
    swy_free(all);
    all = NULL;
    if (status == SWY_OK)
        status = swy_boot_allgather(s->boot, &ok, 1, s->timeout_s,
                                    &all, lens);
    int all_ok = status == SWY_OK;
    for (int r = 0; all_ok && r < n; r++)
        all_ok = lens[r] == 1 && ((const uint8_t *)all)[r];
    if (probe != NULL)
        swy_coll_mem_free(s->mem, probe); /* every peer is done */
    if (shm != NULL) {
        shm->mem = s->mem;
        shm->mem_ok = all_ok;
        /* Frees are announced in the allreduce channel's pages. */
        char *places[SWY_COLL_SHM_MAX_RANKS];
        for (int r = 0; r < n; r++)
            places[r] = swy_coll_shm_desc(shm, r) +
                        SWY_COLL_SHM_DESC_RING_AT;
        if (status == SWY_OK)
            status = swy_coll_mem_attach(s->mem, s->rank, places);
    }
    if (shm_a2a != NULL) {
        shm_a2a->mem = s->mem;
        shm_a2a->mem_ok = all_ok;
    }
    if (status == SWY_OK && !all_ok)
        swy_info("coll", "swy_mem_alloc memory: not every rank can map the "
                 "others'; collectives copy it as any other");
    swy_free(all);
    swy_free(lens);
    return status;
}

/* The shared-memory channels of a comm whose ranks all share this host
 * (coll.h; SWY_SHM_CHANNEL=0 goes without): one for allreduce, one for
 * alltoallv, so that an all-to-all never waits for an allreduce's turn.
 * Collective: rank 0 creates each segment and allgathers its name, the
 * others attach, and a second allgather makes every rank keep a channel
 * only if every rank has it, so that all choose the same algorithms. A
 * channel that cannot be made (a small /dev/shm) is a note in the log,
 * not an error; only a failing control plane fails the comm. */
swy_status_t swy_coll_shm_setup(swy_boot_t *boot, const swy_topo_t *topo,
                                int rank, int nranks, double timeout_s,
                                swy_coll_mem_t *mem, swy_coll_shm_t **shm_p,
                                swy_coll_shm_t **shm_a2a_p)
{
    const setup_t s = {boot, rank, nranks, timeout_s, mem};
    int n = nranks, one_host = n >= 2 && n <= SWY_COLL_SHM_MAX_RANKS &&
                                   swy_config_bool("SWY_SHM_CHANNEL");
    *shm_p = NULL;
    *shm_a2a_p = NULL;
    for (int r = 1; r < n && one_host; r++)
        one_host = swy_topo_node_of(topo, r) == swy_topo_node_of(topo, 0);
    if (!one_host)
        return SWY_OK;
    SWY_CHECK(setup_channel(&s, "allreduce", 0, shm_p));
    SWY_CHECK(setup_channel(&s, "alltoallv", 1, shm_a2a_p));
    if (*shm_p != NULL || *shm_a2a_p != NULL)
        SWY_CHECK(setup_mem(&s, *shm_p, *shm_a2a_p));
    if (*shm_p != NULL) {
        int helpers = copy_helpers(n);
        if (helpers > 0)
            helpers = swy_pool_start(helpers);
        swy_debug("coll", "shared-memory channels: %zu bytes each, slots of "
                  "%zu; ranks %s CPUs; %d copy helper thread%s",
                  (*shm_p)->bytes, (*shm_p)->slot_bytes,
                  (*shm_p)->ranks_share_cpus ? "share" : "do not share",
                  helpers, helpers == 1 ? "" : "s");
    }
    return SWY_OK;
}

