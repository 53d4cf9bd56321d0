/* Every rank of a job in one process (swy_sim.h): the in-process
 * rendezvous that stands in for the control plane (topology records and
 * transport addresses handed over in memory), engines progressed by the
 * caller, and the replaceable clock. */
#include <stdio.h>
#include <string.h>

#include "api/comm_impl.h"
#include "coll/coll.h"
#include "switchyard/swy_sim.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

void swy_sim_clock_set(uint64_t (*now_ns)(void *arg), void *arg)
{
    swy_clock_set(now_ns, arg);
}

/* A node's host record: what swy_topo_discover would say of one host of
 * the simulated cluster (its identity is all the topology compares). */
static void sim_local(int node, swy_topo_local_t *local)
{
    memset(local, 0, sizeof(*local));
    snprintf(local->hostname, sizeof(local->hostname), "sim%d", node);
    snprintf(local->host_id, sizeof(local->host_id), "sim-node-%d", node);
    local->n_packages = local->n_numa = local->n_cores = local->n_pus = 1;
    local->numa = local->package = -1;
    snprintf(local->source, sizeof(local->source), "simulated");
}

static void sim_comm_free(swy_comm_t comm)
{
    if (comm == NULL)
        return;
    if (comm->engine != NULL) {
        comm->engine->refs = 1;
        swy_api_engine_release(comm->engine, "simulated job not made");
    } else {
        swy_transport_set_destroy(comm->transports);
        swy_sched_destroy(comm->sched);
        swy_topo_destroy(comm->topo);
        swy_coll_mem_destroy(comm->mem);
    }
    swy_free(comm);
}

static swy_status_t sim_check(const swy_sim_params_t *p, swy_comm_t *comms)
{
    const char *fn = "swy_sim_comms_create";
    if (p == NULL || comms == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL", fn,
                           p == NULL ? "params" : "comms");
    if (p->struct_size != sizeof(*p))
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: struct_size %zu, "
                           "expected %zu", fn, p->struct_size, sizeof(*p));
    if (p->nranks < 1 || p->nranks > 65535)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: nranks %d out of "
                           "range 1..65535", fn, p->nranks);
    if (p->node_of == NULL || p->transport == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL", fn,
                           p->node_of == NULL ? "node_of" : "transport");
    for (int r = 0; r < p->nranks; r++)
        if (p->node_of[r] < 0)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: rank %d on "
                               "node %d", fn, r, p->node_of[r]);
    if (p->transport->abi_version != SWY_TRANSPORT_ABI_V1 ||
        p->transport->struct_size != sizeof(swy_transport_v1_t))
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: transport of ABI "
                           "%u, struct size %u (expected %u, %zu)", fn,
                           p->transport->abi_version,
                           p->transport->struct_size, SWY_TRANSPORT_ABI_V1,
                           sizeof(swy_transport_v1_t));
    return SWY_OK;
}

/* One rank up to its transport addresses: topology, links, transports. */
static swy_status_t sim_rank_open(const swy_sim_params_t *p,
                                  const swy_topo_local_t *all, int rank,
                                  swy_comm_t *comm_p)
{
    swy_status_t status;
    int n = p->nranks;
    swy_comm_t comm = swy_calloc(1, sizeof(*comm));
    if (comm == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    comm->rank = rank;
    comm->nranks = n;
    comm->timeout_s = swy_config_double("SWY_TIMEOUT_S");
    SWY_CHECK_GOTO(swy_coll_mem_create(n, &comm->mem), status, err);
    SWY_CHECK_GOTO(swy_topo_build(all, n, rank, &comm->topo), status, err);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            size_t ab = (size_t)a * (size_t)n + (size_t)b;
            if (a == b || (p->bandwidth == NULL && p->latency == NULL))
                continue;
            swy_topo_set_link(comm->topo, a, b,
                              p->bandwidth != NULL
                                  ? p->bandwidth[ab]
                                  : swy_topo_bandwidth(comm->topo, a, b),
                              p->latency != NULL
                                  ? p->latency[ab]
                                  : swy_topo_latency(comm->topo, a, b));
        }
    SWY_CHECK_GOTO(swy_transport_set_create_given(rank, n, p->transport,
                                                  &comm->transports),
                   status, err);
    *comm_p = comm;
    return SWY_OK;
err:
    sim_comm_free(comm);
    return status;
}

/* The rest, once every rank's address is known: connect, scheduler,
 * engine. */
static swy_status_t sim_rank_start(swy_comm_t comm, const void *addrs,
                                   const size_t *lens, size_t *auto_partition)
{
    SWY_CHECK(swy_transport_set_connect_all(comm->transports, addrs, lens,
                                            comm->topo));
    swy_sched_params_t params;
    SWY_CHECK(swy_api_sched_create(comm, 1, *auto_partition, &params));
    /* Every rank arrives at the same size (comm.c): rank 0 works it out
     * once for all, a pass over every pair that each of n ranks would
     * repeat. */
    *auto_partition = params.auto_partition_bytes;
    comm->view = swy_sched_world(comm->sched);
    comm->engine = swy_calloc(1, sizeof(*comm->engine));
    if (comm->engine == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    *comm->engine = (swy_engine_t){
        .refs = 1, .timeout_s = comm->timeout_s, .topo = comm->topo,
        .transports = comm->transports, .sched = comm->sched,
        .mem = comm->mem};
    return SWY_OK;
}

swy_status_t swy_sim_comms_create(const swy_sim_params_t *p,
                                  swy_comm_t *comms)
{
    swy_err_clear();
    SWY_CHECK(sim_check(p, comms));
    int n = p->nranks;
    swy_status_t status = SWY_OK;
    swy_topo_local_t *all = swy_calloc((size_t)n, sizeof(*all));
    void **blobs = swy_calloc((size_t)n, sizeof(void *));
    size_t *lens = swy_calloc((size_t)n, sizeof(size_t));
    uint8_t *addrs = NULL;
    if (all == NULL || blobs == NULL || lens == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
        goto out;
    }
    memset(comms, 0, (size_t)n * sizeof(*comms));
    for (int r = 0; r < n; r++)
        sim_local(p->node_of[r], &all[r]);
    size_t total = 0;
    for (int r = 0; r < n && status == SWY_OK; r++) {
        status = sim_rank_open(p, all, r, &comms[r]);
        if (status == SWY_OK)
            status = swy_transport_set_address(comms[r]->transports,
                                               &blobs[r], &lens[r]);
        total += lens[r];
    }
    if (status == SWY_OK && (addrs = swy_malloc(total ? total : 1)) == NULL)
        status = swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    for (int r = 0, off = 0; r < n && status == SWY_OK; r++) {
        memcpy(addrs + off, blobs[r], lens[r]);
        off += (int)lens[r];
    }
    size_t auto_partition = 0;
    for (int r = 0; r < n && status == SWY_OK; r++)
        status = sim_rank_start(comms[r], addrs, lens, &auto_partition);
    if (status == SWY_OK)
        swy_info("api", "simulated job of %d ranks ready: policy %s, "
                 "partition %zu bytes", n,
                 swy_sched_policy_name(comms[0]->sched),
                 swy_sched_partition_bytes(comms[0]->sched));
out:
    if (status != SWY_OK && comms != NULL && all != NULL)
        for (int r = 0; r < n; r++) {
            sim_comm_free(comms[r]);
            comms[r] = NULL;
        }
    if (blobs != NULL)
        for (int r = 0; r < n; r++)
            swy_free(blobs[r]);
    swy_free(blobs);
    swy_free(lens);
    swy_free(addrs);
    swy_free(all);
    return status;
}

swy_status_t swy_sim_comms_split(const swy_comm_t *comms, int n,
                                 const int *colors, const int *keys,
                                 swy_comm_t *out)
{
    const char *fn = "swy_sim_comms_split";
    swy_err_clear();
    if (comms == NULL || colors == NULL || keys == NULL || out == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: NULL argument",
                           fn);
    if (n < 1)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %d ranks", fn,
                           n);
    for (int r = 0; r < n; r++) {
        if (comms[r] == NULL || comms[r]->nranks != n ||
            comms[r]->rank != r || comms[r]->engine->boot != NULL)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: comms[%d] is "
                               "not rank %d of a job of %d ranks made by "
                               "swy_sim_comms_create", fn, r, r, n);
        if (colors[r] < SWY_SPLIT_NOCOLOR)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: color %d of "
                               "rank %d is negative", fn, colors[r], r);
    }
    return swy_api_split_local(comms, n, colors, keys, out);
}
