/* Public collectives: argument checks, default priorities, the memory
 * type of the buffers (and the caller's stream), blocking variants, and
 * requests. Every check names the argument and its value. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/comm_impl.h"
#include "coll/coll.h"
#include "transport/device.h"
#include "util/abi.h"
#include "util/alloc.h"

#define SWY_PRIO_MAX 1000

static const char *attr_name(const swy_op_attr_t *attr)
{
    return attr != NULL && attr->name != NULL ? attr->name : "";
}

/* Common checks; fills the priority and order. A caller's attr is read
 * once, by the struct_size rule, into *copy, and *attr_p then points
 * there: everything after reads this library's layout. */
static swy_status_t check_common(const char *fn, swy_comm_t comm,
                                 swy_coll_kind_t kind, int dtype,
                                 const swy_op_attr_t **attr_p,
                                 swy_op_attr_t *copy, int *prio_p,
                                 int64_t *order_p)
{
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: comm is NULL", fn);
    const swy_op_attr_t *attr = *attr_p;
    if (attr != NULL) {
        if (swy_struct_import(copy, sizeof(*copy), attr, attr->struct_size,
                              SWY_OP_ATTR_SIZE_V1) != 0)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                               "%s: attr->struct_size %zu is below the %zu "
                               "bytes of swy_op_attr_t's first release "
                               "(initialize it with SWY_OP_ATTR_INIT)", fn,
                               attr->struct_size,
                               (size_t)SWY_OP_ATTR_SIZE_V1);
        attr = *attr_p = copy;
    }
    if (!swy_dtype_valid(dtype))
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "%s: dtype %d is not a swy_dtype_t", fn, dtype);
    /* Reductions (gradients) yield to the all-to-alls that block the
     * forward pass. */
    int prio = kind == SWY_COLL_ALLTOALLV ? SWY_PRIO_HIGH
               : kind == SWY_COLL_ALLREDUCE || kind == SWY_COLL_REDUCE ||
                       kind == SWY_COLL_REDUCE_SCATTER
                   ? SWY_PRIO_LOW
                   : SWY_PRIO_DEFAULT;
    int64_t order = 0;
    if (attr != NULL) {
        if (attr->priority > SWY_PRIO_MAX || attr->priority < -1)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                               "%s: priority %d out of range 0..%d (or -1 "
                               "for the default)", fn, attr->priority,
                               SWY_PRIO_MAX);
        if (attr->priority >= 0)
            prio = attr->priority;
        order = attr->order;
    }
    *prio_p = prio;
    *order_p = order;
    return SWY_OK;
}

/* count elements of dtype must be addressable: count*size fits, below
 * PTRDIFF_MAX (a negative int passed as size_t lands here too). */
static swy_status_t check_bytes(const char *fn, const char *what, size_t count,
                                size_t dsize, size_t *bytes_p)
{
    size_t bytes;
    if (swy_mul_overflow(count, dsize, &bytes) != 0 || bytes > PTRDIFF_MAX)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "%s: %s %zu is too large (a negative value "
                           "converted to size_t?)", fn, what, count);
    if (bytes_p != NULL)
        *bytes_p = bytes;
    return SWY_OK;
}

/* nranks blocks of count elements (one per rank) must be addressable. */
static swy_status_t check_blocks(const char *fn, const char *what,
                                 size_t count, int nranks, size_t dsize)
{
    size_t total;
    if (swy_mul_overflow(count, (size_t)nranks, &total) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s %zu times %d "
                           "ranks overflows", fn, what, count, nranks);
    return check_bytes(fn, "count*nranks", total, dsize, NULL);
}

static swy_status_t check_redop(const char *fn, swy_redop_t op)
{
    if (swy_redop_valid(op))
        return SWY_OK;
    return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                       "%s: op %d is not a swy_redop_t", fn, (int)op);
}

static swy_status_t check_root(const char *fn, swy_comm_t comm, int root)
{
    if (root >= 0 && root < comm->nranks)
        return SWY_OK;
    return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: root %d out of "
                       "range 0..%d", fn, root, comm->nranks - 1);
}

/* A buffer that must hold data: NULL is an error naming it and count. */
static swy_status_t check_buf(const char *fn, const char *name,
                              const void *buf, size_t count)
{
    if (buf != NULL || count == 0)
        return SWY_OK;
    return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL with "
                       "count %zu", fn, name, count);
}

/* The memory type of the op's buffers (args->mem), and for device memory
 * what it needs before anything is posted: a transport that moves device
 * memory to every peer it exchanges data with, and the order after the
 * work queued on the caller's stream (see swy_op_attr_t.stream). Where
 * on_stream_p is given and the device services have the stream
 * functions, *on_stream_p = 1 says the op is to be posted on the stream
 * (swy_sched_post_on_stream: nothing blocks); otherwise this thread waits
 * here until the stream drains. A buffer that carries no data (count 0)
 * takes the other one's type; with no data at all, the pointers' type.
 * With may_offload, a device collective the plugin can run is handed to
 * it (args->offload), its communicators made on the comm's first. */
static swy_status_t prepare_memory(const char *fn, swy_comm_t comm,
                                   swy_coll_args_t *args, int send_used,
                                   int recv_used, int may_offload,
                                   const swy_op_attr_t *attr,
                                   int *on_stream_p)
{
    void *stream = attr != NULL ? attr->stream : NULL;
    const swy_device_v1_t *dev = swy_device_ops();
    args->mem = SWY_MEM_HOST;
    if (dev == NULL) {
        if (stream != NULL)
            return swy_err_set(SWY_ERR_UNSUPPORTED, "api",
                               "%s '%s': a CUDA stream was given, but there "
                               "are no device services (the nccl plugin, "
                               "swy-transport-nccl.so, is not built or sees "
                               "no GPU); pass a NULL stream with host "
                               "buffers", fn, attr_name(attr));
        return SWY_OK;
    }
    swy_mem_type_t smem = send_used ? swy_device_mem_type(args->sendbuf)
                                    : SWY_MEM_HOST;
    swy_mem_type_t rmem = recv_used ? swy_device_mem_type(args->recvbuf)
                                    : smem;
    if (!send_used)
        smem = rmem;
    if (!send_used && !recv_used) {
        /* Nothing moves here (an alltoallv whose counts are all 0 on this
         * rank), but the peers compare memory types with this rank's:
         * the pointers say which, where given. */
        smem = rmem = swy_device_mem_type(args->sendbuf != NULL
                                              ? args->sendbuf
                                              : args->recvbuf);
    }
    if (smem != rmem)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "api",
                           "%s '%s': sendbuf is %s memory but recvbuf is %s "
                           "memory: both must be host or both device", fn,
                           attr_name(attr), swy_mem_type_name(smem),
                           swy_mem_type_name(rmem));
    args->mem = smem;
    if (smem == SWY_MEM_HOST)
        return SWY_OK; /* a stream, if given, orders nothing here */
    if (args->kind == SWY_COLL_RECV && args->root == SWY_ANY_SOURCE)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "api", "%s '%s' from "
                           "SWY_ANY_SOURCE: %s memory; a receive from any "
                           "source takes host buffers only", fn,
                           attr_name(attr), swy_mem_type_name(smem));
    if (may_offload && swy_coll_offloadable(args->kind)) {
        int ready;
        SWY_CHECK(swy_api_devcoll_ready(fn, comm, &ready));
        args->offload = (uint8_t)ready;
    } else if (may_offload && (args->kind == SWY_COLL_SEND ||
                               args->kind == SWY_COLL_RECV) &&
               args->root != comm->rank && swy_devcoll_ops() != NULL) {
        /* Only the pair posts it, so it cannot make the device
         * communicators (collective): it uses those the communicator got
         * at its creation or split (swy_api_devcoll_eager), as every
         * rank does alike. */
        args->offload = (uint8_t)swy_sched_lane_attached(comm->view);
    }

    int *peers = swy_malloc((size_t)comm->nranks * sizeof(int));
    if (peers == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    int npeers = swy_coll_data_peers(args, comm->rank, comm->nranks, peers);
    for (int i = 0; i < npeers; i++) {
        int peer = peers[i];
        if (swy_transport_for_peer(comm->transports, swy_api_peer(comm, peer),
                                   SWY_MEM_CUDA) != NULL)
            continue;
        char names[256];
        swy_transport_set_names(comm->transports, names, sizeof(names));
        swy_free(peers);
        return swy_err_set(SWY_ERR_UNSUPPORTED, "api",
                           "%s '%s': no transport moves device memory to "
                           "rank %d (%s); loaded: %s; is the nccl plugin "
                           "built and a GPU visible?", fn, attr_name(attr),
                           peer, swy_topo_link_class_name(swy_topo_link_class(
                                     comm->topo, comm->rank, peer)),
                           names);
    }
    swy_free(peers);
    if (on_stream_p != NULL && swy_device_has_streams(dev)) {
        int capturing = dev->stream_capturing(stream);
        if (capturing < 0)
            return swy_err_set(SWY_ERR_TRANSPORT, "api", "%s '%s': cannot "
                               "ask stream %p whether it is being captured: "
                               "%s", fn, attr_name(attr), stream,
                               dev->error_string());
        /* The op runs from the host, driven by Switchyard's progress: a
         * graph would replay none of it. */
        if (capturing > 0)
            return swy_err_set(SWY_ERR_UNSUPPORTED, "api", "%s '%s': stream "
                               "%p is being captured into a CUDA graph; "
                               "Switchyard's ops are driven by the host and "
                               "cannot be captured: post the op outside the "
                               "capture", fn, attr_name(attr), stream);
        *on_stream_p = 1;
        return SWY_OK;
    }
    /* Blocks this thread until the stream drains: the transports then
     * read sendbuf on their own streams with the caller's data in it. */
    if (dev->stream_sync(stream) != SWY_OK)
        return swy_err_set(SWY_ERR_TRANSPORT, "api",
                           "%s '%s': waiting for the work queued on stream "
                           "%p failed: %s", fn, attr_name(attr), stream,
                           dev->error_string());
    return SWY_OK;
}

/* swy_group_start/end: per thread, the depth, the blocking calls made
 * inside (posted at once, waited for at the outermost end) and the ops
 * on CUDA streams (ordered on their streams at the end, those of one
 * stream together, as NCCL's group calls are). */
#define GROUP_MAX_DEPTH 64
typedef struct {
    int depth;
    struct swy_request **waits;
    swy_comm_t *comms;
    size_t nwaits, cap;
    struct swy_request **sops;
    void **streams;
    size_t nsops, scap;
    /* The group's offloaded sends and receives (args.lane_group = id),
     * held in their lanes until the outermost end. */
    uint32_t id;
    struct swy_request **lops;
    size_t nlops, lcap;
} group_t;
static __thread group_t group;
/* Group numbers, unique in the process (a lane may see several threads'). */
static uint32_t next_group_id;

/* Room for entry n of two parallel arrays of pointers, *cap long (or of
 * one: b_p NULL); a_p and b_p point at the arrays' variables (copied
 * through memcpy: they are of other pointer types). */
static swy_status_t group_grow(void *a_p, void *b_p, size_t n, size_t *cap)
{
    if (n < *cap)
        return SWY_OK;
    size_t grown = *cap ? 2 * *cap : 16;
    void *arrays[2] = {a_p, b_p};
    for (int k = 0; k < 2 && arrays[k] != NULL; k++) {
        void *a;
        memcpy(&a, arrays[k], sizeof(a));
        void *na = swy_realloc_array(a, grown, sizeof(void *));
        if (na == NULL)
            return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
        memcpy(arrays[k], &na, sizeof(na));
    }
    *cap = grown;
    return SWY_OK;
}

static swy_status_t group_add_stream_op(struct swy_request *op, void *stream)
{
    SWY_CHECK(group_grow(&group.sops, &group.streams, group.nsops,
                         &group.scap));
    group.sops[group.nsops] = op;
    group.streams[group.nsops++] = stream;
    return SWY_OK;
}

/* The group's ops on streams, ordered stream by stream; the first
 * failure. */
static swy_status_t group_order_streams(void)
{
    swy_status_t first = SWY_OK;
    char msg[SWY_ERRMSG_MAX] = "";
    size_t n = group.nsops;
    for (size_t i = 0; i < n;) {
        /* The ops on stream i's stream to i..k-1, in posting order (the
         * others' order does not matter: each stream is one batch). */
        void *stream = group.streams[i];
        size_t k = i + 1;
        for (size_t j = k; j < n; j++)
            if (group.streams[j] == stream) {
                struct swy_request *op = group.sops[j];
                group.sops[j] = group.sops[k];
                group.streams[j] = group.streams[k];
                group.sops[k] = op;
                group.streams[k++] = stream;
            }
        int gated;
        swy_status_t status = swy_sched_stream_order(
            &group.sops[i], (int)(k - i), stream, &gated);
        /* A stream the device could not hold: its ops are done before the
         * caller queues more work on it (every op of the group is posted,
         * so waiting cannot deadlock). */
        for (size_t j = i; j < k && status == SWY_OK && !gated; j++)
            status = swy_sched_wait(group.sops[j]);
        if (status != SWY_OK && first == SWY_OK) {
            first = status;
            snprintf(msg, sizeof(msg), "%s", swy_err_last());
        }
        i = k;
    }
    group.nsops = 0;
    if (first != SWY_OK)
        swy_err_store(msg);
    return first;
}

static swy_status_t group_add(swy_comm_t comm, struct swy_request *op)
{
    SWY_CHECK(group_grow(&group.waits, &group.comms, group.nwaits,
                         &group.cap));
    group.waits[group.nwaits] = op;
    group.comms[group.nwaits++] = comm;
    return SWY_OK;
}

swy_status_t swy_group_start(void)
{
    swy_err_clear();
    if (group.depth >= GROUP_MAX_DEPTH)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_group_start: "
                           "groups nested deeper than %d", GROUP_MAX_DEPTH);
    if (group.depth++ == 0) {
        group.id = __atomic_add_fetch(&next_group_id, 1, __ATOMIC_RELAXED);
        if (group.id == 0) /* 0 means no group: once in 2^32 groups */
            group.id = __atomic_add_fetch(&next_group_id, 1,
                                          __ATOMIC_RELAXED);
    }
    return SWY_OK;
}

swy_status_t swy_group_end(void)
{
    swy_err_clear();
    if (group.depth == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_group_end: no "
                           "swy_group_start() to end on this thread");
    if (--group.depth > 0)
        return SWY_OK;
    /* The device sends and receives go to their lanes' plugin as one
     * launch per communicator and class (before any wait below). */
    swy_sched_lane_group_end(group.lops, group.nlops);
    group.nlops = 0;
    swy_status_t first = group_order_streams();
    char msg[SWY_ERRMSG_MAX] = "";
    if (first != SWY_OK)
        snprintf(msg, sizeof(msg), "%s", swy_err_last());
    /* Every call of the group is posted (a post never waits for a peer):
     * waiting for them in any order cannot deadlock. */
    for (size_t i = 0; i < group.nwaits; i++) {
        swy_status_t status = swy_sched_wait(group.waits[i]);
        swy_api_fail(group.comms[i], status);
        if (status != SWY_OK && first == SWY_OK) {
            first = status;
            snprintf(msg, sizeof(msg), "%s", swy_err_last());
        }
        swy_sched_release(group.waits[i]);
    }
    group.nwaits = 0;
    if (first != SWY_OK)
        swy_err_store(msg);
    else
        swy_err_clear();
    return first;
}

static swy_status_t post_or_run(const char *fn, swy_comm_t comm,
                                swy_coll_args_t *args, int send_used,
                                int recv_used, int prio, int64_t order,
                                const swy_op_attr_t *attr,
                                swy_request_t *req)
{
    struct swy_request *op;
    int on_stream = 0;
    swy_status_t status = prepare_memory(fn, comm, args, send_used,
                                         recv_used, 1, attr, &on_stream);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    int grouped = group.depth > 0 && args->offload &&
                  (args->kind == SWY_COLL_SEND || args->kind == SWY_COLL_RECV);
    if (grouped) {
        /* Room first: once posted, the op must be in the list. */
        status = group_grow(&group.lops, NULL, group.nlops, &group.lcap);
        if (status != SWY_OK)
            return swy_api_fail(comm, status);
        args->lane_group = group.id;
    }
    status = on_stream ? swy_sched_post_on_stream(comm->view, args, prio,
                                                  order, attr_name(attr), &op)
                       : swy_sched_post(comm->view, args, prio, order,
                                        attr_name(attr), &op);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    if (grouped)
        group.lops[group.nlops++] = op;
    void *stream = attr != NULL ? attr->stream : NULL;
    if (on_stream && group.depth > 0) {
        /* Ordered with the group's other ops on this stream at its end. */
        status = group_add_stream_op(op, stream);
        if (status != SWY_OK) {
            int gated;
            if (swy_sched_stream_order(&op, 1, stream, &gated) != SWY_OK)
                status = SWY_ERR_TRANSPORT;
            swy_sched_release(op);
            return swy_api_fail(comm, status);
        }
    } else if (on_stream) {
        int gated;
        status = swy_sched_stream_order(&op, 1, stream, &gated);
        /* A stream the device could not hold: the op is done before the
         * caller queues more work on it. */
        if (status == SWY_OK && !gated && req != NULL)
            status = swy_sched_wait(op);
        if (status != SWY_OK) {
            swy_sched_release(op);
            return swy_api_fail(comm, status);
        }
    }
    if (req == NULL && group.depth > 0) {
        status = group_add(comm, op);
        if (status != SWY_OK) { /* cannot wait for it later: now then */
            swy_sched_wait(op);
            swy_sched_release(op);
            return swy_api_fail(comm, status);
        }
        swy_sched_handoff(comm->sched);
        return SWY_OK;
    }
    if (req != NULL) {
        *req = op;
        swy_sched_handoff(comm->sched);
        return SWY_OK;
    }
    status = swy_sched_wait(op);
    swy_sched_release(op);
    return swy_api_fail(comm, status);
}

typedef struct {
    size_t start, end;
    int peer;
} region_t;

static int region_cmp(const void *a, const void *b)
{
    const region_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The receive regions [rdispls[p], rdispls[p] + recvcounts[p]) of the
 * nranks peers: each addressable (in elements of dsize bytes), and those
 * with data disjoint. *any_p: whether any holds data. */
static swy_status_t check_recv_regions(const char *fn,
                                       const size_t *recvcounts,
                                       const size_t *rdispls, int nranks,
                                       size_t dsize, size_t *any_p)
{
    size_t any = 0, end;
    region_t *regions = swy_malloc((size_t)nranks * sizeof(region_t));
    if (regions == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    int nregions = 0;
    for (int p = 0; p < nranks; p++) {
        if (swy_add_overflow(rdispls[p], recvcounts[p], &end) != 0 ||
            check_bytes(fn, "rdispls+recvcounts", end, dsize, NULL) != 0) {
            swy_free(regions);
            return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                               "%s: the receive region of rank %d overflows "
                               "(recvcounts[%d] %zu at rdispls[%d] %zu)", fn,
                               p, p, recvcounts[p], p, rdispls[p]);
        }
        any |= recvcounts[p];
        if (recvcounts[p] > 0)
            regions[nregions++] = (region_t){rdispls[p],
                                             rdispls[p] + recvcounts[p], p};
    }
    qsort(regions, (size_t)nregions, sizeof(region_t), region_cmp);
    swy_status_t status = SWY_OK;
    for (int i = 1; i < nregions && status == SWY_OK; i++)
        if (regions[i].start < regions[i - 1].end)
            status = swy_err_set(SWY_ERR_INVALID_ARG, "api",
                "%s: receive regions of ranks %d [%zu,%zu) and %d [%zu,%zu) "
                "overlap", fn, regions[i - 1].peer, regions[i - 1].start,
                regions[i - 1].end, regions[i].peer, regions[i].start,
                regions[i].end);
    swy_free(regions);
    *any_p = any;
    return status;
}

/* An alltoallv's arrays and buffers (one chunk's, for
 * swy_alltoallv_chunks: chunk >= 0 is named in messages); args filled. */
static swy_status_t check_alltoallv(const char *fn, int chunk,
                                    swy_comm_t comm, const void *sendbuf,
                                    const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf,
                                    const size_t *recvcounts,
                                    const size_t *rdispls, swy_dtype_t dtype,
                                    swy_coll_args_t *args, int *send_used_p,
                                    int *recv_used_p)
{
    char where[32] = "";
    if (chunk >= 0)
        snprintf(where, sizeof(where), " (chunk %d)", chunk);
    size_t dsize = swy_dtype_size(dtype);
    int w = comm->nranks;
    size_t send_total = 0, recv_total = 0, end;
    for (int p = 0; p < w; p++) {
        if (swy_add_overflow(sdispls[p], sendcounts[p], &end) != 0 ||
            check_bytes(fn, "sdispls+sendcounts", end, dsize, NULL) != 0)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                "%s%s: counts/displacements for rank %d overflow (send %zu "
                "at %zu)", fn, where, p, sendcounts[p], sdispls[p]);
        send_total |= sendcounts[p];
    }
    SWY_CHECK(check_recv_regions(fn, recvcounts, rdispls, w, dsize,
                                 &recv_total));
    if ((send_total && sendbuf == NULL) || (recv_total && recvbuf == NULL))
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "%s%s: %s is NULL but counts are not all zero", fn,
                           where, send_total && sendbuf == NULL ? "sendbuf"
                                                                : "recvbuf");
    *args = (swy_coll_args_t){
        .kind = SWY_COLL_ALLTOALLV, .dtype = dtype, .sendbuf = sendbuf,
        .recvbuf = recvbuf, .root = -1,
        .sendcounts = (size_t *)sendcounts, .sdispls = (size_t *)sdispls,
        .recvcounts = (size_t *)recvcounts, .rdispls = (size_t *)rdispls};
    *send_used_p = send_total != 0;
    *recv_used_p = recv_total != 0;
    return SWY_OK;
}

static const char *a2a_null_array(const size_t *sendcounts,
                                  const size_t *sdispls,
                                  const size_t *recvcounts,
                                  const size_t *rdispls)
{
    return !sendcounts   ? "sendcounts"
           : !sdispls    ? "sdispls"
           : !recvcounts ? "recvcounts"
           : !rdispls    ? "rdispls"
                         : NULL;
}

swy_status_t swy_alltoallv(const void *sendbuf, const size_t *sendcounts,
                           const size_t *sdispls, void *recvbuf,
                           const size_t *recvcounts, const size_t *rdispls,
                           swy_dtype_t dtype, swy_comm_t comm,
                           const swy_op_attr_t *attr, swy_request_t *req)
{
    static const char fn[] = "swy_alltoallv";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_ALLTOALLV, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    const char *null = a2a_null_array(sendcounts, sdispls, recvcounts,
                                      rdispls);
    if (null != NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: %s is NULL", fn, null));
    swy_coll_args_t args;
    int send_used, recv_used;
    status = check_alltoallv(fn, -1, comm, sendbuf, sendcounts, sdispls,
                             recvbuf, recvcounts, rdispls, dtype, &args,
                             &send_used, &recv_used);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    return post_or_run(fn, comm, &args, send_used, recv_used, prio, order,
                       attr, req);
}

/* The chunks of a series posted on stream, ordered on it as one op: in
 * a group at its end, with the group's other ops on that stream; else
 * now. On failure the chunks are released (their requests gone). */
static swy_status_t chunks_order_on_stream(struct swy_request **reqs, int n,
                                           void *stream)
{
    swy_status_t status = SWY_OK;
    int gated = 1, added = 0;
    if (group.depth > 0) {
        while (added < n && status == SWY_OK)
            if ((status = group_add_stream_op(reqs[added], stream)) == SWY_OK)
                added++;
        if (status == SWY_OK)
            return SWY_OK;
        group.nsops -= (size_t)added; /* out of memory: all go now */
    }
    status = swy_sched_stream_order(reqs, n, stream, &gated);
    /* A stream the device could not hold: the chunks are done before the
     * caller queues more work on it. */
    for (int j = 0; j < n && status == SWY_OK && !gated; j++)
        status = swy_sched_wait(reqs[j]);
    if (status == SWY_OK)
        return SWY_OK;
    char msg[SWY_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "%s", swy_err_last());
    for (int j = 0; j < n; j++)
        swy_sched_release(reqs[j]);
    swy_err_store(msg);
    return status;
}

swy_status_t swy_alltoallv_chunks(const void *sendbuf,
                                  const size_t *sendcounts,
                                  const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts,
                                  const size_t *rdispls, int nchunks,
                                  swy_dtype_t dtype, swy_comm_t comm,
                                  const swy_op_attr_t *attr, unsigned flags,
                                  swy_request_t *reqs)
{
    static const char fn[] = "swy_alltoallv_chunks";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_ALLTOALLV, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    const char *null = a2a_null_array(sendcounts, sdispls, recvcounts,
                                      rdispls);
    if (null == NULL && reqs == NULL)
        null = "reqs (the chunks are non-blocking only)";
    if (null != NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: %s is NULL", fn, null));
    if (nchunks < 1 || nchunks > SWY_CHUNKS_MAX)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: nchunks %d out of range 1..%d", fn, nchunks,
                            SWY_CHUNKS_MAX));
    if ((flags & ~(unsigned)SWY_CHUNKS_HELD) != 0)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: unknown flags %#x", fn,
                            flags & ~(unsigned)SWY_CHUNKS_HELD));
    if (order > INT64_MAX - nchunks)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: order %lld + %d chunks overflows", fn,
                            (long long)order, nchunks));
    swy_coll_args_t *args = swy_calloc((size_t)nchunks, sizeof(*args));
    if (args == NULL)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_NO_MEMORY, "api",
                            "%s: out of memory", fn));
    size_t w = (size_t)comm->nranks;
    /* The chunks' memory: that of the first chunk with data (one buffer
     * pair for all); a chunk without data takes it. */
    int with_data = -1, held = (flags & SWY_CHUNKS_HELD) != 0, on_stream = 0;
    for (int j = 0; j < nchunks && status == SWY_OK; j++) {
        size_t at = (size_t)j * w;
        int send_used, recv_used;
        status = check_alltoallv(fn, j, comm, sendbuf, sendcounts + at,
                                 sdispls + at, recvbuf, recvcounts + at,
                                 rdispls + at, dtype, &args[j], &send_used,
                                 &recv_used);
        /* Chunks the caller releases start when it says, which a stream
         * cannot order: those wait for their stream here. Device chunks
         * are the plugin's, as a lone alltoallv: each lane takes its
         * launches in op order, so a held chunk released early waits
         * for the chunks before it (lib/sched/lane.c). */
        if (status == SWY_OK)
            status = prepare_memory(fn, comm, &args[j], send_used,
                                    recv_used, 1, attr,
                                    held ? NULL : &on_stream);
        if (status != SWY_OK || !(send_used || recv_used))
            continue;
        if (with_data < 0)
            with_data = j;
        else if (args[j].mem != args[with_data].mem)
            status = swy_err_set(SWY_ERR_INVALID_ARG, "api",
                                 "%s: chunk %d moves %s memory, chunk %d %s",
                                 fn, j, swy_mem_type_name(args[j].mem),
                                 with_data,
                                 swy_mem_type_name(args[with_data].mem));
    }
    for (int j = 0; j < nchunks && status == SWY_OK && with_data >= 0; j++) {
        args[j].mem = args[with_data].mem;
        args[j].offload = args[with_data].offload;
    }
    if (status == SWY_OK)
        status = swy_sched_post_series(comm->view, args, nchunks, held,
                                       on_stream, prio, order,
                                       attr_name(attr)[0] != '\0'
                                           ? attr_name(attr)
                                           : "alltoallv",
                                       reqs);
    swy_free(args);
    if (status == SWY_OK && on_stream)
        status = chunks_order_on_stream(reqs, nchunks,
                                        attr != NULL ? attr->stream : NULL);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_sched_handoff(comm->sched);
    return SWY_OK;
}

swy_status_t swy_chunk_release(swy_request_t req)
{
    swy_err_clear();
    if (req == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api",
                           "swy_chunk_release: req is NULL");
    return swy_sched_release_held(req);
}

swy_status_t swy_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                           swy_dtype_t dtype, swy_redop_t op, swy_comm_t comm,
                           const swy_op_attr_t *attr, swy_request_t *req)
{
    static const char fn[] = "swy_allreduce";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_ALLREDUCE, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status == SWY_OK)
        status = check_redop(fn, op);
    if (status == SWY_OK)
        status = check_bytes(fn, "count", count, swy_dtype_size(dtype), NULL);
    if (status == SWY_OK)
        status = check_buf(fn, "sendbuf", sendbuf, count);
    if (status == SWY_OK)
        status = check_buf(fn, "recvbuf", recvbuf, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_ALLREDUCE, .dtype = dtype,
                            .redop = op, .sendbuf = sendbuf,
                            .recvbuf = recvbuf, .count = count, .root = -1};
    return post_or_run(fn, comm, &args, count > 0, count > 0, prio, order,
                       attr, req);
}

swy_status_t swy_allgather(const void *sendbuf, void *recvbuf, size_t count,
                           swy_dtype_t dtype, swy_comm_t comm,
                           const swy_op_attr_t *attr, swy_request_t *req)
{
    static const char fn[] = "swy_allgather";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_ALLGATHER, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status == SWY_OK)
        status = check_blocks(fn, "count", count, comm->nranks,
                              swy_dtype_size(dtype));
    if (status == SWY_OK)
        status = check_buf(fn, "sendbuf", sendbuf, count);
    if (status == SWY_OK)
        status = check_buf(fn, "recvbuf", recvbuf, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_ALLGATHER, .dtype = dtype,
                            .sendbuf = sendbuf, .recvbuf = recvbuf,
                            .count = count, .root = -1};
    return post_or_run(fn, comm, &args, count > 0, count > 0, prio, order,
                       attr, req);
}

swy_status_t swy_broadcast(void *buf, size_t count, swy_dtype_t dtype,
                           int root, swy_comm_t comm,
                           const swy_op_attr_t *attr, swy_request_t *req)
{
    static const char fn[] = "swy_broadcast";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_BROADCAST, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status == SWY_OK)
        status = check_root(fn, comm, root);
    if (status == SWY_OK)
        status = check_bytes(fn, "count", count, swy_dtype_size(dtype), NULL);
    if (status == SWY_OK)
        status = check_buf(fn, "buf", buf, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_BROADCAST, .dtype = dtype,
                            .sendbuf = buf, .recvbuf = buf, .count = count,
                            .root = root};
    return post_or_run(fn, comm, &args, count > 0, count > 0, prio, order,
                       attr, req);
}

/* swy_send and swy_recv: one peer, buf read or written. */
static swy_status_t p2p(const char *fn, swy_coll_kind_t kind, void *buf,
                        size_t count, swy_dtype_t dtype, int peer, int tag,
                        swy_comm_t comm, const swy_op_attr_t *attr,
                        swy_request_t *req)
{
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, kind, dtype, &attr,
                                       &attr_copy, &prio,
                                       &order);
    int any = kind == SWY_COLL_RECV && peer == SWY_ANY_SOURCE;
    if (status == SWY_OK && !any && (peer < 0 || peer >= comm->nranks))
        status = swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: peer %d out "
                             "of range 0..%d%s", fn, peer, comm->nranks - 1,
                             kind == SWY_COLL_RECV ? " or SWY_ANY_SOURCE"
                                                   : "");
    if (status == SWY_OK && tag < 0)
        status = swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: tag %d is "
                             "negative", fn, tag);
    if (status == SWY_OK)
        status = check_bytes(fn, "count", count, swy_dtype_size(dtype), NULL);
    if (status == SWY_OK && count > 0 && buf == NULL)
        status = swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: buf is NULL "
                             "with count %zu", fn, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    int is_send = kind == SWY_COLL_SEND;
    swy_coll_args_t args = {.kind = kind, .dtype = dtype,
                            .sendbuf = is_send ? buf : NULL,
                            .recvbuf = is_send ? NULL : buf, .count = count,
                            .root = peer, .user_tag = (uint32_t)tag};
    return post_or_run(fn, comm, &args, is_send && count > 0,
                       !is_send && count > 0, prio, order, attr, req);
}

swy_status_t swy_send(const void *buf, size_t count, swy_dtype_t dtype,
                      int peer, swy_comm_t comm, const swy_op_attr_t *attr,
                      swy_request_t *req)
{
    return p2p("swy_send", SWY_COLL_SEND, (void *)buf, count, dtype, peer, 0,
               comm, attr, req);
}

swy_status_t swy_recv(void *buf, size_t count, swy_dtype_t dtype, int peer,
                      swy_comm_t comm, const swy_op_attr_t *attr,
                      swy_request_t *req)
{
    return p2p("swy_recv", SWY_COLL_RECV, buf, count, dtype, peer, 0, comm,
               attr, req);
}

swy_status_t swy_send_tagged(const void *buf, size_t count,
                             swy_dtype_t dtype, int peer, int tag,
                             swy_comm_t comm, const swy_op_attr_t *attr,
                             swy_request_t *req)
{
    return p2p("swy_send_tagged", SWY_COLL_SEND, (void *)buf, count, dtype,
               peer, tag, comm, attr, req);
}

swy_status_t swy_recv_tagged(void *buf, size_t count, swy_dtype_t dtype,
                             int peer, int tag, swy_comm_t comm,
                             const swy_op_attr_t *attr, swy_request_t *req)
{
    return p2p("swy_recv_tagged", SWY_COLL_RECV, buf, count, dtype, peer,
               tag, comm, attr, req);
}

swy_status_t swy_barrier(swy_comm_t comm)
{
    int prio = 0;
    int64_t order = 0;
    const swy_op_attr_t *no_attr = NULL;
    swy_status_t status = check_common("swy_barrier", comm, SWY_COLL_BARRIER,
                                       SWY_UINT8, &no_attr, NULL, &prio,
                                       &order);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_BARRIER, .dtype = SWY_UINT8,
                            .root = -1};
    return post_or_run("swy_barrier", comm, &args, 0, 0, prio, order, NULL,
                       NULL);
}

swy_status_t swy_reduce_scatter(const void *sendbuf, void *recvbuf,
                                size_t recvcount, swy_dtype_t dtype,
                                swy_redop_t op, swy_comm_t comm,
                                const swy_op_attr_t *attr, swy_request_t *req)
{
    static const char fn[] = "swy_reduce_scatter";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_REDUCE_SCATTER,
                                       dtype, &attr, &attr_copy, &prio,
                                       &order);
    if (status == SWY_OK)
        status = check_redop(fn, op);
    if (status == SWY_OK)
        status = check_blocks(fn, "recvcount", recvcount, comm->nranks,
                              swy_dtype_size(dtype));
    if (status == SWY_OK)
        status = check_buf(fn, "sendbuf", sendbuf, recvcount);
    if (status == SWY_OK)
        status = check_buf(fn, "recvbuf", recvbuf, recvcount);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_REDUCE_SCATTER, .dtype = dtype,
                            .redop = op, .sendbuf = sendbuf,
                            .recvbuf = recvbuf, .count = recvcount,
                            .root = -1};
    return post_or_run(fn, comm, &args, recvcount > 0, recvcount > 0, prio,
                       order, attr, req);
}

swy_status_t swy_allgatherv(const void *sendbuf, size_t sendcount,
                            void *recvbuf, const size_t *recvcounts,
                            const size_t *rdispls, swy_dtype_t dtype,
                            swy_comm_t comm, const swy_op_attr_t *attr,
                            swy_request_t *req)
{
    static const char fn[] = "swy_allgatherv";
    int prio = 0;
    int64_t order = 0;
    size_t recv_total = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_ALLGATHERV, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status == SWY_OK && (recvcounts == NULL || rdispls == NULL))
        status = swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL",
                             fn, recvcounts == NULL ? "recvcounts"
                                                    : "rdispls");
    if (status == SWY_OK)
        status = check_bytes(fn, "sendcount", sendcount,
                             swy_dtype_size(dtype), NULL);
    if (status == SWY_OK)
        status = check_recv_regions(fn, recvcounts, rdispls, comm->nranks,
                                    swy_dtype_size(dtype), &recv_total);
    if (status == SWY_OK)
        status = check_buf(fn, "sendbuf", sendbuf, sendcount);
    if (status == SWY_OK && recv_total > 0 && recvbuf == NULL)
        status = swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: recvbuf is "
                             "NULL but recvcounts are not all zero", fn);
    /* On more ranks the op header finds it, on every rank. */
    if (status == SWY_OK && comm->nranks == 1 && sendcount != recvcounts[0])
        status = swy_err_set(SWY_ERR_MISMATCH, "api", "%s: sendcount %zu "
                             "but recvcounts[0] %zu", fn, sendcount,
                             recvcounts[0]);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_ALLGATHERV, .dtype = dtype,
                            .sendbuf = sendbuf, .recvbuf = recvbuf,
                            .count = sendcount, .root = -1,
                            .recvcounts = (size_t *)recvcounts,
                            .rdispls = (size_t *)rdispls};
    return post_or_run(fn, comm, &args, sendcount > 0, recv_total > 0, prio,
                       order, attr, req);
}

swy_status_t swy_reduce(const void *sendbuf, void *recvbuf, size_t count,
                        swy_dtype_t dtype, swy_redop_t op, int root,
                        swy_comm_t comm, const swy_op_attr_t *attr,
                        swy_request_t *req)
{
    static const char fn[] = "swy_reduce";
    int prio = 0;
    int64_t order = 0;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, SWY_COLL_REDUCE, dtype,
                                       &attr, &attr_copy, &prio, &order);
    if (status == SWY_OK)
        status = check_redop(fn, op);
    if (status == SWY_OK)
        status = check_root(fn, comm, root);
    if (status == SWY_OK)
        status = check_bytes(fn, "count", count, swy_dtype_size(dtype), NULL);
    int at_root = status == SWY_OK && comm->rank == root;
    if (status == SWY_OK)
        status = check_buf(fn, "sendbuf", sendbuf, count);
    if (status == SWY_OK && at_root)
        status = check_buf(fn, "recvbuf at the root", recvbuf, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = SWY_COLL_REDUCE, .dtype = dtype,
                            .redop = op, .sendbuf = sendbuf,
                            .recvbuf = at_root ? recvbuf : NULL,
                            .count = count, .root = root};
    return post_or_run(fn, comm, &args, count > 0, at_root && count > 0,
                       prio, order, attr, req);
}

/* Gather and scatter: the root's buffer holds a block per rank. */
static swy_status_t gather_scatter(const char *fn, swy_coll_kind_t kind,
                                   const void *sendbuf, void *recvbuf,
                                   size_t count, swy_dtype_t dtype, int root,
                                   swy_comm_t comm,
                                   const swy_op_attr_t *attr,
                                   swy_request_t *req)
{
    int prio = 0;
    int64_t order = 0;
    int gather = kind == SWY_COLL_GATHER;
    swy_op_attr_t attr_copy;

    swy_status_t status = check_common(fn, comm, kind, dtype, &attr,
                                       &attr_copy, &prio,
                                       &order);
    if (status == SWY_OK)
        status = check_root(fn, comm, root);
    if (status == SWY_OK)
        status = check_blocks(fn, "count", count, comm->nranks,
                              swy_dtype_size(dtype));
    int at_root = status == SWY_OK && comm->rank == root;
    int send_used = count > 0 && (gather || at_root);
    int recv_used = count > 0 && (!gather || at_root);
    if (status == SWY_OK && send_used)
        status = check_buf(fn, gather ? "sendbuf" : "sendbuf at the root",
                           sendbuf, count);
    if (status == SWY_OK && recv_used)
        status = check_buf(fn, gather ? "recvbuf at the root" : "recvbuf",
                           recvbuf, count);
    if (status != SWY_OK)
        return swy_api_fail(comm, status);
    swy_coll_args_t args = {.kind = kind, .dtype = dtype,
                            .sendbuf = send_used ? sendbuf : NULL,
                            .recvbuf = recv_used ? recvbuf : NULL,
                            .count = count, .root = root};
    return post_or_run(fn, comm, &args, send_used, recv_used, prio, order,
                       attr, req);
}

swy_status_t swy_gather(const void *sendbuf, void *recvbuf, size_t count,
                        swy_dtype_t dtype, int root, swy_comm_t comm,
                        const swy_op_attr_t *attr, swy_request_t *req)
{
    return gather_scatter("swy_gather", SWY_COLL_GATHER, sendbuf, recvbuf,
                          count, dtype, root, comm, attr, req);
}

swy_status_t swy_scatter(const void *sendbuf, void *recvbuf, size_t count,
                         swy_dtype_t dtype, int root, swy_comm_t comm,
                         const swy_op_attr_t *attr, swy_request_t *req)
{
    return gather_scatter("swy_scatter", SWY_COLL_SCATTER, sendbuf, recvbuf,
                          count, dtype, root, comm, attr, req);
}

swy_status_t swy_test(swy_request_t req, int *done)
{
    swy_err_clear();
    if (req == NULL || done == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_test: %s is NULL",
                           req == NULL ? "req" : "done");
    swy_status_t status = swy_sched_test(req, done);
    return swy_api_fail(swy_sched_owner(req), status);
}

swy_status_t swy_wait(swy_request_t req)
{
    swy_err_clear();
    if (req == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_wait: req is NULL");
    swy_status_t status = swy_sched_wait(req);
    return swy_api_fail(swy_sched_owner(req), status);
}

swy_status_t swy_request_source(swy_request_t req, int *source)
{
    swy_err_clear();
    if (req == NULL || source == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_request_source: "
                           "%s is NULL", req == NULL ? "req" : "source");
    int peer = swy_sched_source(req);
    if (peer == -1)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_request_source: "
                           "the request is not a receive");
    *source = peer;
    return SWY_OK;
}

void swy_request_free(swy_request_t req)
{
    if (req != NULL)
        swy_sched_release(req);
}
