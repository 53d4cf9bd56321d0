/* swy_comm_split: sub-communicators on the process's engine.
 *
 * The ranks allgather (color, key, the communicator ids their engine has
 * in use, how many views it has made) over the parent itself, so no new
 * rendezvous is made. Each rank then derives the same answer alone: the
 * members of its color ordered by key then parent rank, and the lowest
 * id that no member's engine uses, which goes into every wire tag of the
 * new communicator so that its ops never match another's. The job-wide
 * name of its failures (swy_boot_report_comm_failure) is its first
 * member's engine peer, that engine's count of views made and the id:
 * no two communicators of a job share it, even after one is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/comm_impl.h"
#include "util/alloc.h"
#include "util/log.h"

typedef struct {
    int32_t color, key;
    uint32_t views_made;
    uint32_t pad;
    uint64_t used[SWY_SCHED_COMM_IDS / 64];
} split_entry_t;

typedef struct {
    int32_t key;
    int parent_rank;
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->parent_rank < y->parent_rank ? -1 : x->parent_rank > y->parent_rank;
}

/* The new communicator for this rank's color, from every rank's entry. */
static swy_status_t split_make(swy_comm_t parent, const split_entry_t *all,
                               swy_comm_t *newcomm)
{
    int n = parent->nranks, mine = parent->rank, color = all[mine].color;
    member_t *members = swy_malloc((size_t)n * sizeof(member_t));
    swy_comm_t comm = swy_calloc(1, sizeof(*comm));
    int *peers = swy_malloc((size_t)n * sizeof(int));
    swy_status_t status;
    if (members == NULL || comm == NULL || peers == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
        goto err;
    }
    int count = 0;
    uint64_t used[SWY_SCHED_COMM_IDS / 64] = {0};
    for (int r = 0; r < n; r++) {
        if (all[r].color != color)
            continue;
        members[count++] = (member_t){all[r].key, r};
        for (size_t w = 0; w < SWY_ARRAY_SIZE(used); w++)
            used[w] |= all[r].used[w];
    }
    qsort(members, (size_t)count, sizeof(member_t), member_cmp);
    uint32_t id = 0;
    for (uint32_t i = 1; i < SWY_SCHED_COMM_IDS && id == 0; i++)
        if (!(used[i / 64] & (UINT64_C(1) << (i % 64))))
            id = i;
    if (id == 0) {
        status = swy_err_set(SWY_ERR_UNSUPPORTED, "api", "swy_comm_split: "
                             "every one of the %u communicator ids is in use "
                             "on some member's process: destroy "
                             "communicators first", SWY_SCHED_COMM_IDS - 1);
        goto err;
    }
    int rank = -1;
    for (int i = 0; i < count; i++) {
        peers[i] = swy_api_peer(parent, members[i].parent_rank);
        if (members[i].parent_rank == mine)
            rank = i;
    }
    const split_entry_t *first = &all[members[0].parent_rank];
    uint64_t key = (uint64_t)(uint32_t)peers[0] << 40 |
                   (uint64_t)(first->views_made & 0x7FFFFFFFu) << 9 | id;
    comm->rank = rank;
    comm->nranks = count;
    comm->timeout_s = parent->timeout_s;
    comm->engine = parent->engine;
    comm->boot = parent->boot;
    comm->transports = parent->transports;
    comm->sched = parent->sched;
    comm->mem = parent->mem;
    comm->peers = peers;
    SWY_CHECK_GOTO(swy_topo_subset(parent->engine->topo, peers, count, rank,
                                   &comm->topo),
                   status, err);
    swy_sched_comm_params_t params = {
        .id = id, .key = key, .rank = rank, .nranks = count, .peers = peers,
        .owner = comm};
    status = swy_sched_comm_create(parent->sched, &params, &comm->view);
    if (status != SWY_OK) {
        swy_topo_destroy(comm->topo);
        goto err;
    }
    swy_api_engine_ref(parent->engine);
    parent->engine->views_made++;
    swy_debug("api", "split: color %d -> communicator %u, rank %d of %d",
              color, id, rank, count);
    swy_free(members);
    *newcomm = comm;
    return SWY_OK;

err:
    swy_free(members);
    swy_free(peers);
    swy_free(comm);
    return status;
}

/* Every rank's entry for a split, as swy_comm_split gathers it. */
static void split_entry(swy_comm_t comm, int color, int key,
                        split_entry_t *entry)
{
    memset(entry, 0, sizeof(*entry));
    entry->color = color;
    entry->key = key;
    entry->views_made = comm->engine->views_made;
    swy_sched_comm_ids(comm->sched, entry->used);
}

swy_status_t swy_api_split_local(const swy_comm_t *comms, int n,
                                 const int *colors, const int *keys,
                                 swy_comm_t *out)
{
    split_entry_t *all = swy_malloc((size_t)n * sizeof(split_entry_t));
    swy_status_t status = SWY_OK;
    if (all == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    for (int r = 0; r < n; r++) {
        split_entry(comms[r], colors[r], keys[r], &all[r]);
        out[r] = NULL;
    }
    for (int r = 0; r < n && status == SWY_OK; r++)
        if (colors[r] != SWY_SPLIT_NOCOLOR)
            status = split_make(comms[r], all, &out[r]);
    swy_free(all);
    if (status != SWY_OK) {
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "%s", swy_err_last());
        for (int r = 0; r < n; r++) {
            swy_comm_destroy(out[r]);
            out[r] = NULL;
        }
        swy_err_store(msg);
    }
    return status;
}

swy_status_t swy_comm_split(swy_comm_t comm, int color, int key,
                            swy_comm_t *newcomm)
{
    static const char fn[] = "swy_comm_split";
    swy_err_clear();
    if (comm == NULL || newcomm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL", fn,
                           comm == NULL ? "comm" : "newcomm");
    if (color < SWY_SPLIT_NOCOLOR)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: color %d is negative (use a color >= 0, or "
                            "SWY_SPLIT_NOCOLOR)", fn, color));
    int n = comm->nranks;
    split_entry_t mine;
    split_entry(comm, color, key, &mine);
    split_entry_t *all = swy_malloc((size_t)n * sizeof(split_entry_t));
    if (all == NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_NO_MEMORY, "api",
                                              "out of memory"));
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = "swy_comm_split";
    swy_status_t status = swy_allgather(&mine, all, sizeof(mine), SWY_UINT8,
                                        comm, &attr, NULL);
    swy_comm_t child = NULL;
    if (status == SWY_OK && color != SWY_SPLIT_NOCOLOR)
        status = swy_api_fail(comm, split_make(comm, all, &child));
    swy_free(all);
    /* Every rank of the parent takes part, NOCOLOR too; a failure here is
     * every rank's (the plugin's split is collective). */
    if (status == SWY_OK) {
        status = swy_api_fail(comm, swy_api_devcoll_split(comm, color, key,
                                                          child));
        if (status != SWY_OK && child != NULL) {
            char msg[SWY_ERRMSG_MAX];
            snprintf(msg, sizeof(msg), "%s", swy_err_last());
            swy_comm_destroy(child);
            swy_err_store(msg);
            child = NULL;
        }
    }
    if (status == SWY_OK)
        *newcomm = child;
    return status;
}
