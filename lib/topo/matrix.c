/* lib/topo/matrix.c: the communicator-wide view built from every rank's
 * local description: link class, bandwidth and latency of each ordered
 * pair of ranks, and the numbering of hosts (nodes).
 *
 * Thread safety: a swy_topo_t is immutable after swy_topo_build() and
 * swy_topo_load_file()/swy_topo_set_link() calls made by its owner;
 * concurrent readers are safe, concurrent writers are not. */
#include "topo/topo.h"

#include <string.h>

#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#define SWY_TOPO_SUBSYS "topo"

struct swy_topo {
    int nranks;
    int myrank;
    int nnodes;
    swy_topo_local_t *ranks;    /* [nranks], copied from the allgather */
    int *node_of_rank;          /* [nranks] */
    uint8_t *link_class;        /* [nranks * nranks], swy_link_class_t */
    double *bandwidth;          /* [nranks * nranks], bytes/s */
    double *latency;            /* [nranks * nranks], seconds */
};

/* Per-class defaults, used until a file (SWY_TOPO_FILE) or a probe says
 * otherwise. Sources:
 * - SELF: a memcpy within one process; taken equal to shared memory
 *   bandwidth (a single-core memcpy reaches roughly what UCX shm does), with
 *   a lower latency because nothing crosses a process boundary.
 * - SAME_NUMA: UCX shared memory between two local processes, as
 *   ucx_perftest's tag_bw and tag_lat measure it on the build host,
 *   rounded (ucx_perftest between two local processes).
 * - SAME_NODE: shared memory across sockets; the inter-socket link (UPI /
 *   Infinity Fabric) and remote-memory latency make it slower than within
 *   one NUMA node: a conservative estimate below SAME_NUMA.
 * - CROSS_NODE: a 100 Gb/s NIC at line rate, with the one-way latency
 *   typical of RDMA between hosts through one switch. */
static const double topo_default_bandwidth_by_class[SWY_LINK_NCLASSES] = {
    [SWY_LINK_SELF] = 20e9,
    [SWY_LINK_SAME_NUMA] = 20e9,
    [SWY_LINK_SAME_NODE] = 12e9,
    [SWY_LINK_CROSS_NODE] = 12.5e9,
};
static const double topo_default_latency_by_class[SWY_LINK_NCLASSES] = {
    [SWY_LINK_SELF] = 0.2e-6,
    [SWY_LINK_SAME_NUMA] = 0.3e-6,
    [SWY_LINK_SAME_NODE] = 0.5e-6,
    [SWY_LINK_CROSS_NODE] = 2e-6,
};
static const char *const topo_link_class_names[SWY_LINK_NCLASSES] = {
    [SWY_LINK_SELF] = "self",
    [SWY_LINK_SAME_NUMA] = "same_numa",
    [SWY_LINK_SAME_NODE] = "same_node",
    [SWY_LINK_CROSS_NODE] = "cross_node",
};

static int topo_class_valid(swy_link_class_t cls)
{
    return (int)cls >= 0 && (int)cls < SWY_LINK_NCLASSES;
}

double swy_topo_default_bandwidth(swy_link_class_t cls)
{
    return topo_class_valid(cls) ? topo_default_bandwidth_by_class[cls] : 0.0;
}

double swy_topo_default_latency(swy_link_class_t cls)
{
    return topo_class_valid(cls) ? topo_default_latency_by_class[cls] : 0.0;
}

const char *swy_topo_link_class_name(swy_link_class_t cls)
{
    return topo_class_valid(cls) ? topo_link_class_names[cls] : "unknown";
}

int swy_topo_link_class_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int cls = 0; cls < SWY_LINK_NCLASSES; cls++) {
        if (strcmp(name, topo_link_class_names[cls]) == 0)
            return cls;
    }
    return -1;
}

/* Strings in a swy_topo_local_t came over the wire; never trust them to be
 * terminated. */
static int topo_same_host(const swy_topo_local_t *a,
                          const swy_topo_local_t *b)
{
    return strncmp(a->host_id, b->host_id, sizeof(a->host_id)) == 0;
}

static swy_link_class_t topo_classify(const swy_topo_local_t *all, int a,
                                      int b)
{
    if (a == b)
        return SWY_LINK_SELF;
    if (!topo_same_host(&all[a], &all[b]))
        return SWY_LINK_CROSS_NODE;
    /* Unbound ranks (numa -1) may run anywhere on the host: only two ranks
     * known to sit in one NUMA node get the faster class. */
    if (all[a].numa >= 0 && all[a].numa == all[b].numa)
        return SWY_LINK_SAME_NUMA;
    return SWY_LINK_SAME_NODE;
}

static void topo_number_nodes(swy_topo_t *topo)
{
    topo->nnodes = 0;
    for (int r = 0; r < topo->nranks; r++) {
        int node = -1;

        for (int prev = 0; prev < r; prev++) {
            if (topo_same_host(&topo->ranks[prev], &topo->ranks[r])) {
                node = topo->node_of_rank[prev];
                break;
            }
        }
        topo->node_of_rank[r] = node >= 0 ? node : topo->nnodes++;
    }
}

swy_status_t swy_topo_build(const swy_topo_local_t *all, int nranks,
                            int myrank, swy_topo_t **topo_p)
{
    swy_topo_t *topo;
    size_t npairs;
    const char *file;
    swy_status_t status;

    if (all == NULL || topo_p == NULL || nranks <= 0 || myrank < 0 ||
        myrank >= nranks) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "topo build: bad arguments (all %p, nranks %d, "
                           "myrank %d, topo_p %p)",
                           (const void *)all, nranks, myrank,
                           (void *)topo_p);
    }
    if (swy_mul_overflow((size_t)nranks, (size_t)nranks, &npairs) != 0) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "topo build: %d ranks overflow the matrix size",
                           nranks);
    }

    topo = swy_calloc(1, sizeof(*topo));
    if (topo == NULL) {
        return swy_err_set(SWY_ERR_NO_MEMORY, SWY_TOPO_SUBSYS,
                           "topo build: out of memory for %d ranks", nranks);
    }
    topo->nranks = nranks;
    topo->myrank = myrank;
    topo->ranks = swy_calloc((size_t)nranks, sizeof(*topo->ranks));
    topo->node_of_rank = swy_calloc((size_t)nranks,
                                    sizeof(*topo->node_of_rank));
    topo->link_class = swy_calloc(npairs, sizeof(*topo->link_class));
    topo->bandwidth = swy_calloc(npairs, sizeof(*topo->bandwidth));
    topo->latency = swy_calloc(npairs, sizeof(*topo->latency));
    if (topo->ranks == NULL || topo->node_of_rank == NULL ||
        topo->link_class == NULL || topo->bandwidth == NULL ||
        topo->latency == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, SWY_TOPO_SUBSYS,
                             "topo build: out of memory for the %dx%d "
                             "matrix", nranks, nranks);
        goto err_destroy;
    }

    memcpy(topo->ranks, all, (size_t)nranks * sizeof(*topo->ranks));
    for (int r = 0; r < nranks; r++) {
        topo->ranks[r].hostname[sizeof(topo->ranks[r].hostname) - 1] = '\0';
        topo->ranks[r].host_id[sizeof(topo->ranks[r].host_id) - 1] = '\0';
        topo->ranks[r].source[sizeof(topo->ranks[r].source) - 1] = '\0';
    }
    topo_number_nodes(topo);
    for (int a = 0; a < nranks; a++) {
        for (int b = 0; b < nranks; b++) {
            size_t pair = (size_t)a * (size_t)nranks + (size_t)b;
            swy_link_class_t cls = topo_classify(topo->ranks, a, b);

            topo->link_class[pair] = (uint8_t)cls;
            topo->bandwidth[pair] = topo_default_bandwidth_by_class[cls];
            topo->latency[pair] = topo_default_latency_by_class[cls];
        }
    }

    file = swy_config_get("SWY_TOPO_FILE");
    if (file != NULL && file[0] != '\0') {
        status = swy_topo_load_file(topo, file);
        if (status != SWY_OK)
            goto err_destroy;
    }
    swy_debug(SWY_TOPO_SUBSYS, "topology of %d ranks on %d nodes built",
              nranks, topo->nnodes);
    *topo_p = topo;
    return SWY_OK;

err_destroy:
    swy_topo_destroy(topo);
    return status;
}

swy_status_t swy_topo_subset(const swy_topo_t *topo, const int *members,
                             int nmembers, int myrank, swy_topo_t **sub_p)
{
    size_t npairs = (size_t)nmembers * (size_t)nmembers;
    if (nmembers <= 0 || myrank < 0 || myrank >= nmembers)
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "topo subset: rank %d of %d", myrank, nmembers);
    for (int i = 0; i < nmembers; i++)
        if (members[i] < 0 || members[i] >= topo->nranks)
            return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                               "topo subset: member %d is rank %d of %d",
                               i, members[i], topo->nranks);
    swy_topo_t *sub = swy_calloc(1, sizeof(*sub));
    if (sub == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, SWY_TOPO_SUBSYS,
                           "out of memory");
    sub->nranks = nmembers;
    sub->myrank = myrank;
    sub->ranks = swy_calloc((size_t)nmembers, sizeof(*sub->ranks));
    sub->node_of_rank = swy_calloc((size_t)nmembers,
                                   sizeof(*sub->node_of_rank));
    sub->link_class = swy_calloc(npairs, sizeof(*sub->link_class));
    sub->bandwidth = swy_calloc(npairs, sizeof(*sub->bandwidth));
    sub->latency = swy_calloc(npairs, sizeof(*sub->latency));
    if (sub->ranks == NULL || sub->node_of_rank == NULL ||
        sub->link_class == NULL || sub->bandwidth == NULL ||
        sub->latency == NULL) {
        swy_topo_destroy(sub);
        return swy_err_set(SWY_ERR_NO_MEMORY, SWY_TOPO_SUBSYS,
                           "out of memory");
    }
    for (int a = 0; a < nmembers; a++) {
        sub->ranks[a] = topo->ranks[members[a]];
        for (int b = 0; b < nmembers; b++) {
            size_t from = (size_t)members[a] * (size_t)topo->nranks +
                          (size_t)members[b];
            size_t to = (size_t)a * (size_t)nmembers + (size_t)b;
            sub->link_class[to] = topo->link_class[from];
            sub->bandwidth[to] = topo->bandwidth[from];
            sub->latency[to] = topo->latency[from];
        }
    }
    topo_number_nodes(sub);
    *sub_p = sub;
    return SWY_OK;
}

void swy_topo_destroy(swy_topo_t *topo)
{
    if (topo == NULL)
        return;
    swy_free(topo->latency);
    swy_free(topo->bandwidth);
    swy_free(topo->link_class);
    swy_free(topo->node_of_rank);
    swy_free(topo->ranks);
    swy_free(topo);
}

static int topo_pair_valid(const swy_topo_t *topo, int a, int b)
{
    return topo != NULL && a >= 0 && a < topo->nranks && b >= 0 &&
           b < topo->nranks;
}

static size_t topo_pair(const swy_topo_t *topo, int a, int b)
{
    return (size_t)a * (size_t)topo->nranks + (size_t)b;
}

swy_link_class_t swy_topo_link_class(const swy_topo_t *topo, int a, int b)
{
    if (!topo_pair_valid(topo, a, b)) {
        swy_error(SWY_TOPO_SUBSYS, "link class of invalid pair (%d, %d)", a,
                  b);
        return SWY_LINK_CROSS_NODE;
    }
    return (swy_link_class_t)topo->link_class[topo_pair(topo, a, b)];
}

double swy_topo_bandwidth(const swy_topo_t *topo, int a, int b)
{
    if (!topo_pair_valid(topo, a, b)) {
        swy_error(SWY_TOPO_SUBSYS, "bandwidth of invalid pair (%d, %d)", a,
                  b);
        return 0.0;
    }
    return topo->bandwidth[topo_pair(topo, a, b)];
}

double swy_topo_latency(const swy_topo_t *topo, int a, int b)
{
    if (!topo_pair_valid(topo, a, b)) {
        swy_error(SWY_TOPO_SUBSYS, "latency of invalid pair (%d, %d)", a, b);
        return 0.0;
    }
    return topo->latency[topo_pair(topo, a, b)];
}

void swy_topo_set_link(swy_topo_t *topo, int a, int b, double bw, double lat)
{
    if (!topo_pair_valid(topo, a, b)) {
        swy_error(SWY_TOPO_SUBSYS, "set_link on invalid pair (%d, %d)", a,
                  b);
        return;
    }
    topo->bandwidth[topo_pair(topo, a, b)] = bw;
    topo->latency[topo_pair(topo, a, b)] = lat;
}

int swy_topo_nranks(const swy_topo_t *topo)
{
    return topo != NULL ? topo->nranks : 0;
}

int swy_topo_myrank(const swy_topo_t *topo)
{
    return topo != NULL ? topo->myrank : -1;
}

const swy_topo_local_t *swy_topo_rank_info(const swy_topo_t *topo, int rank)
{
    if (topo == NULL || rank < 0 || rank >= topo->nranks)
        return NULL;
    return &topo->ranks[rank];
}

int swy_topo_node_of(const swy_topo_t *topo, int rank)
{
    if (topo == NULL || rank < 0 || rank >= topo->nranks)
        return -1;
    return topo->node_of_rank[rank];
}

int swy_topo_nnodes(const swy_topo_t *topo)
{
    return topo != NULL ? topo->nnodes : 0;
}
