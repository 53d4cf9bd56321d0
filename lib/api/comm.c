/* Communicator life cycle: unique id, init (rank or from launcher
 * variables), destroy, abort, queries, and the last-error message. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/comm_impl.h"
#include "coll/coll.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"

#define SWY_MAX_RANKS 65535

/* Root services started by swy_get_unique_id in this process, so that the
 * comm created from the same id can take ownership and release it. */
typedef struct {
    swy_boot_addr_t addr;
    swy_boot_root_t *root;
} root_slot_t;
static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;
static root_slot_t roots[16];

static void roots_add(const swy_boot_addr_t *addr, swy_boot_root_t *root)
{
    pthread_mutex_lock(&roots_lock);
    for (size_t i = 0; i < SWY_ARRAY_SIZE(roots); i++)
        if (roots[i].root == NULL) {
            roots[i].addr = *addr;
            roots[i].root = root;
            break;
        }
    pthread_mutex_unlock(&roots_lock);
}

static swy_boot_root_t *roots_take(const swy_boot_addr_t *addr)
{
    swy_boot_root_t *root = NULL;
    pthread_mutex_lock(&roots_lock);
    for (size_t i = 0; i < SWY_ARRAY_SIZE(roots); i++)
        if (roots[i].root != NULL && roots[i].addr.port == addr->port &&
            strcmp(roots[i].addr.host, addr->host) == 0 &&
            memcmp(roots[i].addr.secret, addr->secret,
                   SWY_BOOT_SECRET_LEN) == 0) {
            root = roots[i].root;
            roots[i].root = NULL;
            break;
        }
    pthread_mutex_unlock(&roots_lock);
    return root;
}

const char *swy_version(void)
{
    return SWY_VERSION_STRING;
}

swy_status_t swy_api_fail(swy_comm_t comm, swy_status_t status)
{
    if (comm != NULL && status < 0)
        snprintf(comm->last_error, sizeof(comm->last_error), "%s",
                 swy_err_last());
    return status;
}

/* The calling thread's own latest failure comes first (it may have come
 * from a layer above the comm, such as lib/moe); otherwise the comm's. */
const char *swy_last_error(swy_comm_t comm)
{
    const char *mine = swy_err_last();
    if (comm == NULL || mine[0] != '\0')
        return mine;
    return comm->last_error;
}

static swy_status_t root_secret(uint8_t secret[SWY_BOOT_SECRET_LEN])
{
    const char *key = swy_config_get("SWY_JOB_KEY");
    if (key != NULL && key[0] != '\0') {
        swy_boot_secret_from_text(key, secret);
        return SWY_OK;
    }
    return swy_boot_secret_random(secret);
}

swy_status_t swy_get_unique_id(swy_unique_id_t *id)
{
    swy_boot_addr_t addr;
    swy_boot_root_t *root;
    char host[64] = "";
    uint16_t port = 0;
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    swy_err_clear();
    if (id == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_get_unique_id: id is NULL");
    const char *bind = swy_config_get("SWY_ROOT");
    /* SWY_ROOT serves the first id of the process on its host. Later ids
     * (torch's groups each make a rendezvous of their own, under swy-run
     * too), and those of processes that cannot bind it (another rank's
     * host or port), listen where SWY_ROOT is unset would: an ephemeral
     * port of this host, which the id carries. */
    static atomic_int root_port_used;
    if (bind != NULL && !atomic_load(&root_port_used))
        SWY_CHECK(swy_boot_parse_hostport(bind, host, sizeof(host), &port));
    SWY_CHECK(root_secret(secret));
    swy_status_t started = swy_boot_root_start(host[0] ? host : NULL, port,
                                               secret, &root, &addr);
    if (started != SWY_OK && (host[0] || port != 0)) {
        swy_err_clear();
        started = swy_boot_root_start(NULL, 0, secret, &root, &addr);
    } else if (started == SWY_OK && port != 0) {
        atomic_store(&root_port_used, 1);
    }
    SWY_CHECK(started);
    swy_status_t status = swy_boot_id_encode(&addr, id);
    if (status != SWY_OK) {
        swy_boot_root_release(root);
        return status;
    }
    roots_add(&addr, root);
    return SWY_OK;
}

/* About 2 ms of the slowest flow's time (Lina's 30 MB on 100 Gb/s is
 * 2.4 ms), so a low-priority micro-op delays a high-priority one by at
 * most that much. A flow to another host shares its node's uplink (and
 * the queue in front of it) with every other rank's flows off the node,
 * each of which may have a low-priority micro-op queued there: the
 * uplink's share per flow counts (swy_topo_flow_bandwidth). The slowest
 * flow of the whole communicator, not this rank's: sender and receiver
 * cut a transfer into the same chunks, so every rank must arrive at the
 * same size (the matrix is the same on every rank).
 *
 * All ranks on one host: every link is a memory copy, whose cost per
 * micro-op is microseconds at any size, and the rule above would give
 * 32 MiB, so that a preemptible op (credit: one partition) keeps whole
 * segments in flight and the steps of the pipelined algorithms wait for
 * each other. There the partition is the pipelined algorithms' chunk,
 * small enough that their steps overlap: 256 KiB, which halved the
 * allreduce's time against 32 MiB on a 16-core host (docs/performance.md,
 * "coll", which points to the runs). alltoallv, which has no steps to
 * pipeline, is cut larger there (op_partition_bytes in lib/sched). */
static size_t auto_partition_bytes(const swy_topo_t *topo)
{
    int n = swy_topo_nranks(topo);
    double slowest = 0;
    int one_host = 1;
    for (int a = 0; a < n; a++) {
        if (swy_topo_node_of(topo, a) != swy_topo_node_of(topo, 0))
            one_host = 0;
        for (int b = 0; b < n; b++) {
            if (a == b && n > 1)
                continue;
            double bw = swy_topo_flow_bandwidth(topo, a, b);
            if (slowest == 0 || bw < slowest)
                slowest = bw;
        }
    }
    double bytes = slowest * 0.002;
    if (bytes < 64.0 * 1024)
        bytes = 64.0 * 1024;
    if (bytes > 32.0 * 1024 * 1024)
        bytes = 32.0 * 1024 * 1024;
    if (one_host && bytes > (double)SWY_COLL_PIPELINE_BYTES)
        bytes = (double)SWY_COLL_PIPELINE_BYTES;
    return ((size_t)bytes) & ~(size_t)4095;
}

static swy_status_t comm_setup_topo(swy_comm_t comm)
{
    swy_topo_local_t local;
    void *all = NULL;
    size_t *lens = swy_calloc((size_t)comm->nranks, sizeof(size_t));
    swy_status_t status;
    if (lens == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    SWY_CHECK_GOTO(swy_topo_discover(&local), status, out);
    SWY_CHECK_GOTO(swy_boot_allgather(comm->boot, &local, sizeof(local),
                                      comm->timeout_s, &all, lens),
                   status, out);
    for (int r = 0; r < comm->nranks; r++)
        if (lens[r] != sizeof(local)) {
            status = swy_err_set(SWY_ERR_MISMATCH, "api", "rank %d sent a "
                                 "topology record of %zu bytes (expected "
                                 "%zu): mixed Switchyard versions?", r,
                                 lens[r], sizeof(local));
            goto out;
        }
    status = swy_topo_build(all, comm->nranks, comm->rank, &comm->topo);
out:
    swy_free(all);
    swy_free(lens);
    return status;
}

/* The engine's scheduler for comm (its topology, transports, boot,
 * channels and the settings), in comm->sched; *params_p: what it was made
 * with. caller_progress: no progress thread, whatever SWY_PROGRESS says.
 * auto_partition: what SWY_PARTITION_BYTES=auto means, 0: from the
 * topology (a pass over every pair of ranks). */
swy_status_t swy_api_sched_create(swy_comm_t comm, int caller_progress,
                                  size_t auto_partition,
                                  swy_sched_params_t *params_p)
{
    if (auto_partition == 0)
        auto_partition = auto_partition_bytes(comm->topo);
    int rank = comm->rank, nranks = comm->nranks;
    uint8_t *remote = swy_calloc((size_t)nranks, 1);
    if (remote == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    size_t *burst = swy_calloc((size_t)nranks, sizeof(size_t));
    int *host = swy_calloc((size_t)nranks, sizeof(int));
    if (burst == NULL || host == NULL) {
        swy_free(host);
        swy_free(burst);
        swy_free(remote);
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    }
    for (int r = 0; r < nranks; r++) {
        host[r] = swy_topo_node_of(comm->topo, r);
        remote[r] = host[r] != swy_topo_node_of(comm->topo, rank);
        /* 4 ms of the link (bytes/s * 0.004), at least 64 KiB */
        double b = swy_topo_bandwidth(comm->topo, rank, r) * 0.004;
        burst[r] = b < 65536.0 ? 65536 : b > 1e15 ? (size_t)1e15 : (size_t)b;
    }
    swy_sched_params_t params = {
        .peer_remote = remote,
        .peer_host = host,
        .peer_burst_bytes = burst,
        .auto_partition_bytes = auto_partition,
        .rank = rank,
        .nranks = nranks,
        .transports = comm->transports,
        .boot = comm->boot,
        .partition_bytes = swy_config_get_size("SWY_PARTITION_BYTES",
                                               auto_partition),
        .window_bytes = swy_config_size("SWY_WINDOW_BYTES"),
        .timeout_s = comm->timeout_s,
        .spin_s = (double)swy_config_int("SWY_SPIN_US") * 1e-6,
        .owner = comm,
        .policy = swy_config_get_text("SWY_POLICY"),
        /* 0: auto, one partition (the scheduler's) */
        .credit_bytes = swy_config_get_size("SWY_CREDIT_BYTES", 0),
        .shm = comm->shm,
        .shm_a2a = comm->shm_a2a,
    };
    /* The table's values are thread, caller. */
    params.progress_thread = !caller_progress &&
                             swy_config_get_choice("SWY_PROGRESS") != 1;
    /* The table's values are order, tag. */
    params.p2p_match_tag = swy_config_get_choice("SWY_P2P_MATCH") == 1;
    const char *partition = swy_config_get("SWY_PARTITION_BYTES");
    params.partition_set = partition != NULL && strcmp(partition, "auto") != 0;
    if (params.partition_bytes == 0)
        params.partition_bytes = 1;
    if (params.window_bytes == 0)
        params.window_bytes = 1;
    swy_status_t status = swy_sched_create(&params, &comm->sched);
    swy_free(remote);
    swy_free(burst);
    swy_free(host);
    params.peer_remote = NULL;
    params.peer_host = NULL;
    params.peer_burst_bytes = NULL;
    *params_p = params;
    return status;
}

static swy_status_t comm_create(swy_comm_t *comm_p, int nranks,
                                const swy_boot_addr_t *addr, int rank,
                                swy_boot_root_t *root)
{
    swy_status_t status;
    swy_comm_t comm = swy_calloc(1, sizeof(*comm));
    if (comm == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    comm->rank = rank;
    comm->nranks = nranks;
    comm->timeout_s = swy_config_double("SWY_TIMEOUT_S"); /* >= 0.1 */
    swy_log_set_rank(rank);
    SWY_CHECK_GOTO(swy_coll_mem_create(nranks, &comm->mem), status,
                   err_free);
    SWY_CHECK_GOTO(swy_boot_connect(addr, rank, nranks, comm->timeout_s,
                                    &comm->boot),
                   status, err_free);
    SWY_CHECK_GOTO(comm_setup_topo(comm), status, err_boot);
    /* Processes an engine of this process reaches already: join it. */
    swy_api_proc_t *procs = NULL;
    int joined = 0;
    SWY_CHECK_GOTO(swy_api_procs_gather(comm, &procs), status, err_topo);
    status = swy_api_join(comm, procs, &joined);
    if (status != SWY_OK || joined) {
        swy_free(procs);
        if (status != SWY_OK)
            goto err_topo;
        comm->root = root;
        *comm_p = comm;
        return SWY_OK;
    }
    status = swy_transport_set_create(rank, nranks, &comm->transports);
    if (status != SWY_OK) {
        swy_free(procs);
        goto err_topo;
    }
    SWY_CHECK_GOTO(swy_transport_set_connect(comm->transports, comm->boot,
                                             comm->topo, comm->timeout_s),
                   status, err_transports);
    /* Init returns once every rank is connected: a fast rank must not
     * start (or finish and tear down its endpoints) while a slow one is
     * still attaching to them. */
    SWY_CHECK_GOTO(swy_boot_barrier(comm->boot, comm->timeout_s), status,
                   err_transports);
    SWY_CHECK_GOTO(swy_coll_shm_setup(comm->boot, comm->topo, rank, nranks,
                                      comm->timeout_s, comm->mem,
                                      &comm->shm, &comm->shm_a2a),
                   status, err_transports);
    swy_sched_params_t params;
    SWY_CHECK_GOTO(swy_api_sched_create(comm, 0, 0, &params), status,
                   err_transports);
    comm->view = swy_sched_world(comm->sched);
    if (swy_config_bool("SWY_TOPO_PROBE")) {
        /* Measured links replace the model; "auto" follows them. */
        status = swy_api_probe_links(comm);
        if (status != SWY_OK) {
            swy_sched_stop(comm->sched);
            swy_transport_set_destroy(comm->transports);
            swy_sched_destroy(comm->sched);
            swy_coll_shm_destroy(comm->shm);
            swy_coll_shm_destroy(comm->shm_a2a);
            swy_free(procs);
            goto err_topo;
        }
        swy_sched_set_auto_partition(comm->sched,
                                     auto_partition_bytes(comm->topo));
        params.partition_bytes = swy_sched_partition_bytes(comm->sched);
    }
    comm->root = root;
    comm->engine = swy_calloc(1, sizeof(*comm->engine));
    if (comm->engine == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
        swy_sched_stop(comm->sched);
        swy_transport_set_destroy(comm->transports);
        swy_sched_destroy(comm->sched);
        swy_coll_shm_destroy(comm->shm);
        swy_coll_shm_destroy(comm->shm_a2a);
        swy_free(procs);
        goto err_topo;
    }
    *comm->engine = (swy_engine_t){
        .refs = 1, .timeout_s = comm->timeout_s, .boot = comm->boot,
        .root = root, .topo = comm->topo, .transports = comm->transports,
        .sched = comm->sched, .shm = comm->shm, .shm_a2a = comm->shm_a2a,
        .mem = comm->mem};
    swy_api_engine_register(comm->engine, procs, nranks);
    procs = NULL;
    swy_info("api", "rank %d of %d ready: policy %s, partition %zu bytes, "
             "window %zu bytes, progress %s", rank, nranks,
             swy_sched_policy_name(comm->sched), params.partition_bytes,
             params.window_bytes, params.progress_thread ? "thread"
                                                          : "caller");
    *comm_p = comm;
    return SWY_OK;

err_transports:
    swy_free(procs);
    swy_transport_set_destroy(comm->transports);
    swy_coll_shm_destroy(comm->shm);
    swy_coll_shm_destroy(comm->shm_a2a);
err_topo:
    swy_topo_destroy(comm->topo);
err_boot:
    swy_boot_abort(comm->boot, swy_err_last());
err_free:
    swy_coll_mem_destroy(comm->mem);
    swy_free(comm);
    return status;
}

swy_status_t swy_comm_init_rank(swy_comm_t *comm_p, int nranks,
                                const swy_unique_id_t *id, int rank)
{
    swy_boot_addr_t addr;
    swy_err_clear();
    if (comm_p == NULL || id == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_rank: %s is NULL",
                           comm_p == NULL ? "comm" : "id");
    if (nranks < 1 || nranks > SWY_MAX_RANKS)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_rank: nranks %d out of range "
                           "1..%d", nranks, SWY_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_rank: rank %d out of range 0..%d",
                           rank, nranks - 1);
    SWY_CHECK(swy_boot_id_decode(id, &addr));
    swy_boot_root_t *root = roots_take(&addr);
    swy_status_t status = comm_create(comm_p, nranks, &addr, rank, root);
    if (status != SWY_OK && root != NULL)
        roots_add(&addr, root); /* still serving the other ranks */
    if (status == SWY_OK)
        swy_api_devcoll_eager(*comm_p);
    return status;
}

static const char *first_env(const char *const *names, const char **which_p)
{
    for (; *names != NULL; names++) {
        const char *value = strncmp(*names, "SWY_", 4) == 0
                                ? swy_config_get(*names)
                                : swy_config_getenv_foreign(*names);
        if (value != NULL && value[0] != '\0') {
            *which_p = *names;
            return value;
        }
    }
    return NULL;
}

static swy_status_t env_int(const char *const *names, const char *what,
                            int *value_p)
{
    const char *which = NULL;
    const char *text = first_env(names, &which);
    int64_t value;
    if (text == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_env: no %s: set SWY_%s (or a "
                           "launcher's: %s, %s, %s)", what,
                           strcmp(what, "rank") == 0 ? "RANK" : "WORLD_SIZE",
                           names[1], names[2], names[3]);
    if (swy_config_parse_int(text, &value) != 0 || value < 0 ||
        value > SWY_MAX_RANKS)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_env: %s='%s' is not a valid %s",
                           which, text, what);
    *value_p = (int)value;
    return SWY_OK;
}

/* The root address: SWY_ROOT, else torchrun's MASTER_ADDR:MASTER_PORT
 * (+1 under torchrun itself, whose agent holds MASTER_PORT for its own
 * store), else loopback when every rank is on this host (Open MPI tells)
 * on a port derived from the launcher's job id. */
static swy_status_t env_root(int nranks, char *host, size_t host_len,
                             uint16_t *port_p, char *jobid, size_t jobid_len)
{
    const char *which = NULL;
    static const char *const jobids[] = {
        "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID",
        "PMIX_NAMESPACE", NULL};
    const char *id = first_env(jobids, &which);
    snprintf(jobid, jobid_len, "%s", id ? id : "");
    const char *root = swy_config_get("SWY_ROOT");
    if (root != NULL && root[0] != '\0')
        return swy_boot_parse_hostport(root, host, host_len, port_p);
    const char *maddr = swy_config_getenv_foreign("MASTER_ADDR");
    const char *mport = swy_config_getenv_foreign("MASTER_PORT");
    if (maddr != NULL && mport != NULL) {
        char text[128];
        int64_t port;
        if (swy_config_parse_int(mport, &port) != 0 || port <= 0 ||
            port > 65534)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                               "MASTER_PORT='%s' is not a port", mport);
        if (swy_config_getenv_foreign("TORCHELASTIC_RUN_ID") != NULL)
            port++;
        snprintf(text, sizeof(text), "%s:%d", maddr, (int)port);
        return swy_boot_parse_hostport(text, host, host_len, port_p);
    }
    const char *local = swy_config_getenv_foreign("OMPI_COMM_WORLD_LOCAL_SIZE");
    int64_t local_size = -1;
    if (nranks == 1 ||
        (local != NULL && swy_config_parse_int(local, &local_size) == 0 &&
         local_size == nranks && id != NULL)) {
        uint32_t hash = 2166136261u;
        for (const char *c = jobid; *c; c++)
            hash = (hash ^ (uint8_t)*c) * 16777619u;
        snprintf(host, host_len, "127.0.0.1");
        *port_p = (uint16_t)(20000 + hash % 20000);
        swy_info("api", "SWY_ROOT not set: all ranks are local, using %s:%u",
                 host, *port_p);
        return SWY_OK;
    }
    return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                       "swy_comm_init_env: no root address: set "
                       "SWY_ROOT=host:port (rank 0's host) or MASTER_ADDR "
                       "and MASTER_PORT");
}

swy_status_t swy_comm_init_env(swy_comm_t *comm_p)
{
    static const char *const rank_names[] = {
        "SWY_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
        "PMI_RANK", NULL};
    static const char *const size_names[] = {
        "SWY_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
        "SLURM_NTASKS", "PMI_SIZE", NULL};
    swy_boot_addr_t addr;
    swy_boot_root_t *root = NULL;
    char jobid[128];
    int rank, nranks;
    swy_err_clear();
    if (comm_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_env: comm is NULL");
    SWY_CHECK(env_int(rank_names, "rank", &rank));
    SWY_CHECK(env_int(size_names, "world size", &nranks));
    if (nranks < 1 || rank >= nranks)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_comm_init_env: rank %d is not below the "
                           "world size %d", rank, nranks);
    memset(&addr, 0, sizeof(addr));
    SWY_CHECK(env_root(nranks, addr.host, sizeof(addr.host), &addr.port,
                       jobid, sizeof(jobid)));
    const char *key = swy_config_get("SWY_JOB_KEY");
    if (key != NULL && key[0] != '\0') {
        swy_boot_secret_from_text(key, addr.secret);
    } else {
        char text[256];
        snprintf(text, sizeof(text), "%s|%s:%u", jobid, addr.host,
                 addr.port);
        swy_boot_secret_from_text(text, addr.secret);
        swy_info("api", "SWY_JOB_KEY not set: job secret derived from the "
                 "launcher's job id and the root address");
    }
    if (rank == 0) {
        swy_boot_addr_t bound;
        swy_status_t status = swy_boot_root_start(addr.host, addr.port,
                                                  addr.secret, &root, &bound);
        if (status != SWY_OK) /* a name of this host that isn't bindable */
            status = swy_boot_root_start("0.0.0.0", addr.port, addr.secret,
                                         &root, &bound);
        SWY_CHECK(status);
    }
    swy_status_t status = comm_create(comm_p, nranks, &addr, rank, root);
    if (status != SWY_OK && root != NULL)
        swy_boot_root_release(root);
    if (status == SWY_OK)
        swy_api_devcoll_eager(*comm_p);
    return status;
}

/* Communicators come and go from any thread; their engine's count with
 * them. */
static pthread_mutex_t engine_lock = PTHREAD_MUTEX_INITIALIZER;

void swy_api_engine_ref(swy_engine_t *engine)
{
    pthread_mutex_lock(&engine_lock);
    engine->refs++;
    pthread_mutex_unlock(&engine_lock);
}

/* Drop a communicator's reference; the last one takes the engine down.
 * Leaving cleanly (abort_why NULL) waits first for every rank to arrive
 * (bounded by SWY_TIMEOUT_S), so no rank closes its endpoints while a
 * peer may still send to it; a job that failed is left at once. */
swy_status_t swy_api_engine_release(swy_engine_t *engine,
                                    const char *abort_why)
{
    pthread_mutex_lock(&engine_lock);
    int last = --engine->refs == 0;
    pthread_mutex_unlock(&engine_lock);
    if (!last)
        return SWY_OK;
    swy_api_engine_unregister(engine);
    swy_status_t status = SWY_OK;
    int failed = swy_boot_failure(engine->boot, NULL, 0) != SWY_OK;
    /* A job without a control plane (swy_sim.h) has every rank here. */
    if (abort_why == NULL && !failed && engine->boot != NULL)
        status = swy_boot_barrier(engine->boot, engine->timeout_s);
    swy_sched_stop(engine->sched); /* no progress while transports go */
    swy_transport_set_destroy(engine->transports);
    swy_sched_destroy(engine->sched);
    swy_coll_shm_destroy(engine->shm); /* after the last op's state */
    swy_coll_shm_destroy(engine->shm_a2a);
    swy_coll_mem_destroy(engine->mem); /* no op may reach it now */
    swy_topo_destroy(engine->topo);
    if (abort_why != NULL)
        swy_boot_abort(engine->boot, abort_why);
    else if (status == SWY_OK || failed)
        swy_boot_finalize(engine->boot);
    else
        swy_boot_abort(engine->boot, swy_err_last());
    swy_boot_root_release(engine->root);
    swy_free(engine);
    return status;
}

/* The communicator itself, once its view is gone from the engine. */
static void comm_free(swy_comm_t comm)
{
    if (comm->peers != NULL) /* a split one owns its topology */
        swy_topo_destroy(comm->topo);
    swy_free(comm->peers);
    swy_free(comm);
}

swy_status_t swy_comm_destroy(swy_comm_t comm)
{
    if (comm == NULL)
        return SWY_OK;
    swy_err_clear();
    /* A comm that already failed is released without waiting for peers
     * (they failed too); that is not a failure of destroy itself. */
    int failed_before = swy_sched_failure(comm->view, NULL, 0) != SWY_OK;
    swy_status_t status = SWY_OK;
    if (!failed_before)
        status = swy_sched_drain(comm->view, comm->timeout_s);
    if (status != SWY_OK)
        swy_sched_fail_all(comm->view, SWY_ERR_ABORTED,
                           "communicator destroyed");
    swy_engine_t *engine = comm->engine;
    swy_sched_comm_destroy(comm->view); /* nothing for the world's */
    if (comm->own_boot) {
        /* Its own control plane: every rank done before any leaves it. */
        if (!failed_before && status == SWY_OK)
            status = swy_boot_barrier(comm->boot, comm->timeout_s);
        if (status == SWY_OK || failed_before)
            swy_boot_finalize(comm->boot);
        else
            swy_boot_abort(comm->boot, swy_err_last());
        swy_boot_root_release(comm->root);
    }
    comm_free(comm);
    swy_status_t last = swy_api_engine_release(engine, NULL);
    return status != SWY_OK ? status : failed_before ? SWY_OK : last;
}

swy_status_t swy_comm_abort(swy_comm_t comm)
{
    char why[128];
    if (comm == NULL)
        return SWY_OK;
    snprintf(why, sizeof(why), "rank %d aborted the communicator",
             comm->rank);
    /* The other ranks of this communicator hear of it (a split one's
     * failure is scoped to it; the world's is the job's). */
    swy_sched_comm_t *view = comm->view;
    swy_sched_t *sched = comm->sched;
    swy_engine_t *engine = comm->engine;
    pthread_mutex_lock(&engine_lock);
    int last = engine->refs == 1;
    pthread_mutex_unlock(&engine_lock);
    if (last) {
        /* The whole engine goes: the progress thread sleeps on the boot's
         * failure fd, so it stops before the boot client does. */
        swy_sched_fail_all(view, SWY_ERR_ABORTED, why);
        swy_sched_stop(sched);
    } else {
        swy_sched_report_abort(view, why);
    }
    swy_sched_comm_destroy(view);
    if (comm->own_boot) {
        swy_boot_abort(comm->boot, why);
        swy_boot_root_release(comm->root);
    }
    comm_free(comm);
    swy_api_engine_release(engine, why);
    return SWY_OK;
}

int swy_comm_rank(swy_comm_t comm)
{
    return comm ? comm->rank : -1;
}

int swy_comm_size(swy_comm_t comm)
{
    return comm ? comm->nranks : -1;
}

swy_status_t swy_comm_stats(swy_comm_t comm, swy_comm_stats_t *stats)
{
    swy_err_clear();
    if (comm == NULL || stats == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_comm_stats: %s "
                           "is NULL", comm == NULL ? "comm" : "stats");
    if (stats->struct_size < SWY_COMM_STATS_SIZE_V1)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "swy_comm_stats: struct_size %zu is below the "
                            "%zu bytes of swy_comm_stats_t's first release "
                            "(set it to sizeof(swy_comm_stats_t))",
                            stats->struct_size,
                            (size_t)SWY_COMM_STATS_SIZE_V1));
    swy_comm_stats_t all;
    swy_sched_stats(comm->sched, &all);
    all.struct_size = stats->struct_size;
    swy_struct_export(stats, stats->struct_size, &all, sizeof(all),
                      SWY_COMM_STATS_SIZE_V1);
    return SWY_OK;
}

swy_status_t swy_comm_configure(swy_comm_t comm, const char *name,
                                const char *value)
{
    swy_err_clear();
    if (comm == NULL || name == NULL || value == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_comm_configure: "
                           "%s is NULL", comm == NULL   ? "comm"
                                         : name == NULL ? "name"
                                                        : "value");
    return swy_api_fail(comm, swy_sched_configure(comm->sched, name, value));
}

swy_status_t swy_comm_query(swy_comm_t comm, const char *name, char *buf,
                            size_t len)
{
    swy_err_clear();
    if (comm == NULL || name == NULL || buf == NULL || len == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_comm_query: "
                           "NULL argument or zero length");
    return swy_api_fail(comm, swy_sched_query(comm->sched, name, buf, len));
}

swy_status_t swy_phase_hint(swy_comm_t comm, int phase)
{
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_phase_hint: comm is NULL");
    if (phase != SWY_PHASE_NONE && phase != SWY_PHASE_A2A_IMMINENT)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "swy_phase_hint: unknown phase %d", phase));
    swy_sched_phase_hint(comm->sched, phase);
    return SWY_OK;
}
