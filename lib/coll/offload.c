/* Device collectives run by the plugin (swy_devcoll_v1, coll.h): the op
 * cut into partitions, each one launch of plugin calls. The algorithm
 * moves nothing through the transports; lib/sched hands the launches to
 * the plugin in order, one communicator per priority class, when its
 * policy lets them go.
 *
 * A partition is a group of calls that every rank of the op launches as
 * its own group of the same index:
 *   allreduce       one ALLREDUCE of a slice of the buffer;
 *   broadcast       one BROADCAST of a slice;
 *   allgather       a BROADCAST from every rank of a slice of its block
 *                   (NCCL's allgather needs the whole block contiguous);
 *   reduce_scatter  a REDUCE to every rank of a slice of its block;
 *   reduce          one REDUCE of a slice to the root;
 *   gather          a SEND of a slice to the root, which RECVs the
 *                   slice of every rank's block (its own too);
 *   scatter         the root SENDs a slice of every rank's block, every
 *                   rank RECVs its slice;
 *   allgatherv      a BROADCAST from every rank of slice j of its block,
 *                   as alltoallv's slices (ranks whose blocks are shorter
 *                   drop out of the later groups);
 *   alltoallv       a SEND and a RECV of slice j of every non-empty
 *                   block (peers with fewer slices drop out of the later
 *                   groups; a pair's slices meet in the group of the same
 *                   index on both ranks, so no group waits on a later
 *                   one);
 *   send, recv      one SEND (RECV) of the whole message, to (from) one
 *                   peer other than this rank: only the pair launches it,
 *                   and lib/sched merges the p2p launches of one
 *                   swy_group_start/end into one launch, as NCCL's group
 *                   calls. */
#include <string.h>

#include "coll/coll.h"
#include "util/alloc.h"

struct swy_coll_state {
    swy_coll_offload_plan_t plan;
};

int swy_coll_offloadable(swy_coll_kind_t kind)
{
    return kind == SWY_COLL_ALLREDUCE || kind == SWY_COLL_BROADCAST ||
           kind == SWY_COLL_ALLGATHER || kind == SWY_COLL_REDUCE_SCATTER ||
           kind == SWY_COLL_ALLTOALLV || kind == SWY_COLL_ALLGATHERV ||
           kind == SWY_COLL_REDUCE || kind == SWY_COLL_GATHER ||
           kind == SWY_COLL_SCATTER;
}

typedef struct {
    swy_coll_offload_plan_t *plan;
    size_t cap_calls, cap_groups;
} builder_t;

static swy_status_t new_group(builder_t *b)
{
    swy_coll_offload_plan_t *p = b->plan;
    if ((size_t)p->ngroups + 2 > b->cap_groups) {
        size_t cap = b->cap_groups ? 2 * b->cap_groups : 16;
        int *first = swy_realloc_array(p->first, cap, sizeof(int));
        if (first == NULL)
            return SWY_ERR_NO_MEMORY;
        p->first = first;
        size_t *bytes = swy_realloc_array(p->bytes, cap, sizeof(size_t));
        if (bytes == NULL)
            return SWY_ERR_NO_MEMORY;
        p->bytes = bytes;
        b->cap_groups = cap;
    }
    p->bytes[p->ngroups] = 0;
    p->first[p->ngroups++] = p->ncalls;
    p->first[p->ngroups] = p->ncalls;
    return SWY_OK;
}

static swy_status_t add_call(builder_t *b, const swy_devcoll_call_v1_t *call,
                             size_t bytes)
{
    swy_coll_offload_plan_t *p = b->plan;
    if ((size_t)p->ncalls == b->cap_calls) {
        size_t cap = b->cap_calls ? 2 * b->cap_calls : 16;
        swy_devcoll_call_v1_t *calls =
            swy_realloc_array(p->calls, cap, sizeof(*calls));
        if (calls == NULL)
            return SWY_ERR_NO_MEMORY;
        p->calls = calls;
        b->cap_calls = cap;
    }
    p->calls[p->ncalls++] = *call;
    p->first[p->ngroups] = p->ncalls;
    p->bytes[p->ngroups - 1] += bytes;
    return SWY_OK;
}

static const char *at(const void *base, size_t elems, size_t dsize)
{
    return base != NULL ? (const char *)base + elems * dsize : NULL;
}

static swy_status_t plan_build(const swy_coll_args_t *a, int rank,
                               int nranks, size_t partition_bytes,
                               builder_t *b)
{
    size_t dsize = swy_dtype_size(a->dtype);
    size_t slice = SWY_MAX(partition_bytes / dsize, (size_t)1);
    swy_devcoll_call_v1_t c = {.dtype = a->dtype, .redop = a->redop};
    if (a->kind == SWY_COLL_SEND || a->kind == SWY_COLL_RECV) {
        /* One call, uncut: ncclSend meets ncclRecv whole, so a group of
         * them (swy_group_start/end, one launch) meets its peer's calls
         * whether or not the peer grouped them. */
        if (a->count == 0)
            return SWY_OK;
        int send = a->kind == SWY_COLL_SEND;
        SWY_CHECK(new_group(b));
        c.kind = send ? SWY_DEVCOLL_SEND : SWY_DEVCOLL_RECV;
        c.root = a->root;
        c.count = a->count;
        c.sendbuf = send ? a->sendbuf : NULL;
        c.recvbuf = send ? NULL : a->recvbuf;
        return add_call(b, &c, send ? a->count * dsize : 0);
    }
    if (a->kind == SWY_COLL_ALLTOALLV) {
        size_t most = 0;
        for (int p = 0; p < nranks; p++)
            most = SWY_MAX(most, SWY_MAX(a->sendcounts[p], a->recvcounts[p]));
        for (size_t off = 0; off < most; off += slice) {
            SWY_CHECK(new_group(b));
            /* From the next rank on, as the pairwise exchange: the ranks
             * do not all start with the same peer. */
            for (int i = 0; i < nranks; i++) {
                int p = (rank + i) % nranks;
                if (a->sendcounts[p] > off) {
                    c.kind = SWY_DEVCOLL_SEND;
                    c.root = p;
                    c.count = SWY_MIN(slice, a->sendcounts[p] - off);
                    c.sendbuf = at(a->sendbuf, a->sdispls[p] + off, dsize);
                    c.recvbuf = NULL;
                    SWY_CHECK(add_call(b, &c, c.count * dsize));
                }
                if (a->recvcounts[p] > off) {
                    c.kind = SWY_DEVCOLL_RECV;
                    c.root = p;
                    c.count = SWY_MIN(slice, a->recvcounts[p] - off);
                    c.sendbuf = NULL;
                    c.recvbuf = (char *)at(a->recvbuf, a->rdispls[p] + off,
                                           dsize);
                    SWY_CHECK(add_call(b, &c, 0));
                }
            }
        }
        return SWY_OK;
    }
    if (a->kind == SWY_COLL_ALLGATHERV) {
        /* The headers made every rank's recvcounts the same. */
        size_t most = 0;
        for (int r = 0; r < nranks; r++)
            most = SWY_MAX(most, a->recvcounts[r]);
        c.kind = SWY_DEVCOLL_BROADCAST;
        for (size_t off = 0; off < most; off += slice) {
            SWY_CHECK(new_group(b));
            for (int r = 0; r < nranks; r++) {
                if (a->recvcounts[r] <= off)
                    continue;
                c.root = r;
                c.count = SWY_MIN(slice, a->recvcounts[r] - off);
                c.sendbuf = r == rank ? at(a->sendbuf, off, dsize) : NULL;
                c.recvbuf =
                    (char *)at(a->recvbuf, a->rdispls[r] + off, dsize);
                SWY_CHECK(add_call(b, &c, r == rank ? c.count * dsize : 0));
            }
        }
        return SWY_OK;
    }
    for (size_t off = 0; off < a->count; off += slice) {
        size_t n = SWY_MIN(slice, a->count - off);
        SWY_CHECK(new_group(b));
        c.count = n;
        switch (a->kind) {
        case SWY_COLL_ALLREDUCE:
        case SWY_COLL_BROADCAST:
            c.kind = a->kind == SWY_COLL_ALLREDUCE ? SWY_DEVCOLL_ALLREDUCE
                                                   : SWY_DEVCOLL_BROADCAST;
            c.root = a->kind == SWY_COLL_BROADCAST ? a->root : 0;
            c.sendbuf = at(a->sendbuf, off, dsize);
            c.recvbuf = (char *)at(a->recvbuf, off, dsize);
            SWY_CHECK(add_call(b, &c, n * dsize));
            break;
        case SWY_COLL_ALLGATHER:
            c.kind = SWY_DEVCOLL_BROADCAST;
            for (int r = 0; r < nranks; r++) {
                c.root = r;
                c.sendbuf = r == rank ? at(a->sendbuf, off, dsize) : NULL;
                c.recvbuf = (char *)at(a->recvbuf, (size_t)r * a->count + off,
                                       dsize);
                SWY_CHECK(add_call(b, &c, r == rank ? n * dsize : 0));
            }
            break;
        case SWY_COLL_REDUCE_SCATTER:
            c.kind = SWY_DEVCOLL_REDUCE;
            for (int r = 0; r < nranks; r++) {
                c.root = r;
                c.sendbuf = at(a->sendbuf, (size_t)r * a->count + off, dsize);
                c.recvbuf = r == rank ? (char *)at(a->recvbuf, off, dsize)
                                      : NULL;
                SWY_CHECK(add_call(b, &c, n * dsize));
            }
            break;
        case SWY_COLL_REDUCE:
            c.kind = SWY_DEVCOLL_REDUCE;
            c.root = a->root;
            c.sendbuf = at(a->sendbuf, off, dsize);
            c.recvbuf = rank == a->root ? (char *)at(a->recvbuf, off, dsize)
                                        : NULL;
            SWY_CHECK(add_call(b, &c, n * dsize));
            break;
        case SWY_COLL_GATHER:
            c.kind = SWY_DEVCOLL_SEND;
            c.root = a->root;
            c.sendbuf = at(a->sendbuf, off, dsize);
            c.recvbuf = NULL;
            SWY_CHECK(add_call(b, &c, n * dsize));
            for (int r = 0; rank == a->root && r < nranks; r++) {
                c.kind = SWY_DEVCOLL_RECV;
                c.root = r;
                c.sendbuf = NULL;
                c.recvbuf = (char *)at(a->recvbuf, (size_t)r * a->count + off,
                                       dsize);
                SWY_CHECK(add_call(b, &c, 0));
            }
            break;
        case SWY_COLL_SCATTER:
            for (int r = 0; rank == a->root && r < nranks; r++) {
                c.kind = SWY_DEVCOLL_SEND;
                c.root = r;
                c.sendbuf = at(a->sendbuf, (size_t)r * a->count + off, dsize);
                c.recvbuf = NULL;
                SWY_CHECK(add_call(b, &c, n * dsize));
            }
            c.kind = SWY_DEVCOLL_RECV;
            c.root = a->root;
            c.sendbuf = NULL;
            c.recvbuf = (char *)at(a->recvbuf, off, dsize);
            SWY_CHECK(add_call(b, &c, 0));
            break;
        default:
            return SWY_ERR_UNSUPPORTED;
        }
    }
    return SWY_OK;
}

static void offload_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_free(st->plan.calls);
    swy_free(st->plan.first);
    swy_free(st->plan.bytes);
    swy_free(st);
}

static swy_status_t offload_create(const swy_coll_args_t *args, int rank,
                                   int nranks, size_t partition_bytes,
                                   swy_coll_state_t **state_p)
{
    swy_coll_state_t *st = swy_calloc(1, sizeof(*st));
    if (st == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "offload: out of "
                           "memory");
    builder_t b = {.plan = &st->plan};
    swy_status_t status = plan_build(args, rank, nranks, partition_bytes, &b);
    if (status != SWY_OK) {
        offload_destroy(st);
        return swy_err_set(status, "coll", "offload: cannot plan %s of "
                           "device memory", swy_coll_kind_name(args->kind));
    }
    *state_p = st;
    return SWY_OK;
}

/* Everything is in the launches, which lib/sched hands to the plugin. */
static swy_status_t offload_start(swy_coll_state_t *st,
                                  const swy_coll_emit_t *emit)
{
    return SWY_OK;
}

static swy_status_t offload_recv_done(swy_coll_state_t *st,
                                      const swy_coll_xfer_t *x,
                                      const swy_coll_emit_t *emit)
{
    return swy_err_set(SWY_ERR_INTERNAL, "coll", "offload: a transfer "
                       "completed, but this algorithm posts none");
}

const swy_coll_offload_plan_t *
swy_coll_offload_plan(const swy_coll_state_t *st)
{
    return &st->plan;
}

const swy_coll_algo_t swy_coll_offload = {
    .name = "offload",
    .create = offload_create,
    .start = offload_start,
    .recv_done = offload_recv_done,
    .destroy = offload_destroy,
};
