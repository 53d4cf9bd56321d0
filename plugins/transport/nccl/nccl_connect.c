/* swy-transport-nccl: context life cycle. init() finds the caller's CUDA
 * device (or reports SWY_ERR_UNSUPPORTED quietly where there is none),
 * get_address() publishes the ncclUniqueIds of this rank's outgoing
 * per-pair communicators (under SWY_DEVICE_COLL=staged; else none: the
 * device communicators of nccl_coll.c carry device data between ranks),
 * connect() creates them in one NCCL group (and the streams of the
 * messages to oneself, which are copies), finalize() aborts them. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nccl_plugin.h"

static void nccl_host_identity(char *buf, size_t len);

static void nccl_destroy(nccl_ctx_t *ctx);

swy_status_t nccl_init(const swy_transport_host_v1_t *host, void **ctx_p)
{
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        /* Every CPU machine comes here: say why at info level only. */
        host->log(SWY_LOG_INFO, NCCL_SUBSYS, "no CUDA device (%s); not used",
                  err != cudaSuccess ? cudaGetErrorString(err)
                                     : "cudaGetDeviceCount found 0");
        (void)cudaGetLastError();
        return SWY_ERR_UNSUPPORTED;
    }
    if (host->nranks <= 0 || host->rank < 0 || host->rank >= host->nranks) {
        host->log(SWY_LOG_WARN, NCCL_SUBSYS, "init: rank %d of %d ranks",
                  host->rank, host->nranks);
        return SWY_ERR_INVALID_ARG;
    }
    nccl_ctx_t *ctx = host->alloc(sizeof(*ctx));
    if (ctx == NULL)
        return SWY_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof(*ctx));
    ctx->host = host;
    swy_list_init(&ctx->self_sends);
    swy_list_init(&ctx->inflight);
    swy_list_init(&ctx->completions);
    swy_status_t status;

    /* As with NCCL, the device is the caller's current one: frameworks
     * call cudaSetDevice before creating the communicator. */
    err = cudaGetDevice(&ctx->device);
    if (err != cudaSuccess) {
        status = nccl_cuda_fail(ctx, "cudaGetDevice", err);
        goto err;
    }
    err = cudaDeviceGetPCIBusId(ctx->bus_id, (int)sizeof(ctx->bus_id),
                                ctx->device);
    if (err != cudaSuccess) {
        status = nccl_cuda_fail(ctx, "cudaDeviceGetPCIBusId", err);
        goto err;
    }
    int least = 0, greatest = 0;
    err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (err != cudaSuccess) {
        status = nccl_cuda_fail(ctx, "cudaDeviceGetStreamPriorityRange", err);
        goto err;
    }
    ctx->stream_prio[NCCL_CLASS_HIGH] = greatest;
    ctx->stream_prio[NCCL_CLASS_LOW] = least;
    const char *mode = host->config_get("SWY_DEVICE_COLL");
    ctx->pairs = mode != NULL && strcmp(mode, "staged") == 0;

    size_t npeers = (size_t)host->nranks;
    ctx->peers = host->alloc(npeers * sizeof(*ctx->peers));
    if (ctx->peers == NULL) {
        status = SWY_ERR_NO_MEMORY;
        goto err;
    }
    memset(ctx->peers, 0, npeers * sizeof(*ctx->peers));
    for (size_t r = 0; r < npeers; r++)
        swy_list_init(&ctx->peers[r].posted_recvs);

    ctx->address_len = sizeof(nccl_address_head_t) +
                       npeers * NCCL_NCLASSES * sizeof(ncclUniqueId);
    ctx->waker = nccl_waker_create();
    if (ctx->waker == NULL) {
        nccl_log(ctx, SWY_LOG_WARN, "eventfd: %s", strerror(errno));
        status = SWY_ERR_SYSTEM;
        goto err;
    }
    int nccl_version = 0;
    ncclResult_t res = ncclGetVersion(&nccl_version);
    if (res != ncclSuccess) {
        status = nccl_nccl_fail(ctx, "ncclGetVersion", res, NULL);
        goto err;
    }
    nccl_log(ctx, SWY_LOG_INFO,
             "rank %d: CUDA device %d (PCI %s) of %d, NCCL %d, stream "
             "priorities high %d low %d",
             host->rank, ctx->device, ctx->bus_id, ndev, nccl_version,
             greatest, least);
    *ctx_p = ctx;
    return SWY_OK;

err:
    nccl_destroy(ctx);
    return status;
}

swy_status_t nccl_query(void *vctx, swy_transport_caps_v1_t *caps)
{
    nccl_ctx_t *ctx = vctx;
    /* Written by the struct_size rule: no further than the host's. */
    swy_transport_caps_v1_t mine = {.struct_size = caps->struct_size};
    swy_transport_caps_v1_t *given = caps;
    caps = &mine;
    caps->mem_types = 1u << SWY_MEM_CUDA;
    /* The only transport for device memory, on every link class. */
    for (int c = 0; c < SWY_LINK_NCLASSES; c++)
        caps->score[c] = 100;
    caps->max_address_len = ctx->address_len;
    if (swy_struct_export(given, given->struct_size, &mine, sizeof(mine),
                          SWY_STRUCT_END(swy_transport_caps_v1_t,
                                         max_address_len)) != 0)
        return SWY_ERR_INVALID_ARG; /* not a host of any release */
    return SWY_OK;
}

swy_status_t nccl_get_address(void *vctx, void *addr, size_t *len_p)
{
    nccl_ctx_t *ctx = vctx;
    const swy_transport_host_v1_t *host = ctx->host;
    /* Ids are made once: each one is a listening NCCL bootstrap root that
     * waits for its communicator's ranks. */
    if (ctx->address == NULL) {
        uint8_t *address = host->alloc(ctx->address_len);
        if (address == NULL)
            return SWY_ERR_NO_MEMORY;
        memset(address, 0, ctx->address_len);
        nccl_address_head_t head = {
            .magic = NCCL_ADDRESS_MAGIC,
            .version = NCCL_ADDRESS_VERSION,
            .rank = host->rank,
            .nranks = host->nranks,
            .device = ctx->device,
        };
        memcpy(head.bus_id, ctx->bus_id, sizeof(head.bus_id));
        nccl_host_identity(head.host, sizeof(head.host));
        memcpy(address, &head, sizeof(head));
        ncclUniqueId *ids = (ncclUniqueId *)(address + sizeof(head));
        for (int r = 0; r < host->nranks && ctx->pairs; r++) {
            if (r == host->rank)
                continue;
            for (int c = 0; c < NCCL_NCLASSES; c++) {
                ncclResult_t res = ncclGetUniqueId(
                    &ids[(size_t)r * NCCL_NCLASSES + (size_t)c]);
                if (res != ncclSuccess) {
                    swy_status_t status = nccl_nccl_fail(
                        ctx, "ncclGetUniqueId", res, NULL);
                    host->free(address);
                    return status;
                }
            }
        }
        ctx->address = address;
        ctx->my_ids = ids;
    }
    memcpy(addr, ctx->address, ctx->address_len);
    *len_p = ctx->address_len;
    return SWY_OK;
}

/* hostname:boot-id, so that equal PCI bus ids on two hosts differ. */
static void nccl_host_identity(char *buf, size_t len)
{
    char name[64] = "?", boot[64] = "";
    gethostname(name, sizeof(name) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(buf, len, "%s:%s", name, boot);
}

/* Two ranks on one GPU: NCCL refuses them, so nothing is created. Every
 * rank compares every address and reaches the same verdict. */
static int nccl_find_shared_gpu(nccl_ctx_t *ctx, const void *const *addrs,
                                const size_t *lens)
{
    int n = ctx->host->nranks;
    for (int a = 0; a < n; a++) {
        nccl_address_head_t ha, hb;
        if (addrs[a] == NULL || lens[a] < sizeof(ha))
            continue;
        memcpy(&ha, addrs[a], sizeof(ha));
        ha.bus_id[sizeof(ha.bus_id) - 1] = '\0';
        ha.host[sizeof(ha.host) - 1] = '\0';
        for (int b = a + 1; b < n; b++) {
            if (addrs[b] == NULL || lens[b] < sizeof(hb))
                continue;
            memcpy(&hb, addrs[b], sizeof(hb));
            if (strncmp(ha.host, hb.host, sizeof(ha.host)) == 0 &&
                strncmp(ha.bus_id, hb.bus_id, sizeof(ha.bus_id)) == 0) {
                snprintf(ctx->shared_gpu, sizeof(ctx->shared_gpu),
                         "ranks %d and %d share the GPU %s on %.64s; NCCL "
                         "needs one GPU per rank (set CUDA_VISIBLE_DEVICES "
                         "or cudaSetDevice per local rank)", a, b,
                         ha.bus_id, ha.host);
                return 1;
            }
        }
    }
    return 0;
}

/* The id of dir(r->me, c) from rank r's address, after checking it. */
static swy_status_t nccl_peer_ids(nccl_ctx_t *ctx, int r, const void *addr,
                                  size_t len, const ncclUniqueId **ids_p)
{
    nccl_address_head_t head;
    if (addr == NULL || len != ctx->address_len) {
        nccl_log(ctx, SWY_LOG_WARN,
                 "rank %d sent an NCCL address of %zu bytes, expected %zu "
                 "(%d ranks)",
                 r, addr != NULL ? len : 0, ctx->address_len,
                 ctx->host->nranks);
        return SWY_ERR_INVALID_ARG;
    }
    memcpy(&head, addr, sizeof(head));
    if (head.magic != NCCL_ADDRESS_MAGIC ||
        head.version != NCCL_ADDRESS_VERSION || head.rank != r ||
        head.nranks != ctx->host->nranks) {
        nccl_log(ctx, SWY_LOG_WARN,
                 "rank %d sent an NCCL address of another kind (magic 0x%x "
                 "version %u, rank %d of %d)",
                 r, head.magic, head.version, head.rank, head.nranks);
        return SWY_ERR_INVALID_ARG;
    }
    head.bus_id[sizeof(head.bus_id) - 1] = '\0';
    nccl_log(ctx, SWY_LOG_DEBUG, "rank %d: CUDA device %d (PCI %s)", r,
             head.device, head.bus_id);
    *ids_p = (const ncclUniqueId *)((const uint8_t *)addr + sizeof(head));
    return SWY_OK;
}

static swy_status_t nccl_stream_create(nccl_ctx_t *ctx, int cls,
                                       cudaStream_t *stream_p)
{
    /* Non-blocking: the legacy default stream (the user's cudaMemcpy)
     * must not wait for a header receive that waits for a peer. */
    cudaError_t err = cudaStreamCreateWithPriority(
        stream_p, cudaStreamNonBlocking, ctx->stream_prio[cls]);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaStreamCreateWithPriority", err);
    return SWY_OK;
}

static const char *const nccl_class_names[NCCL_NCLASSES] = {"high", "low"};

/* One communicator init inside the group of nccl_connect; config and
 * name stay with the communicator. */
static swy_status_t nccl_comm_init(nccl_ctx_t *ctx, ncclComm_t *comm_p,
                                   ncclConfig_t *config, int nranks,
                                   ncclUniqueId id, int rank,
                                   const char *name)
{
    ncclConfig_t initial = NCCL_CONFIG_INITIALIZER;
    *config = initial;
    /* Blocking: ncclGroupEnd returns once every communicator is ready,
     * and later calls never answer ncclInProgress. */
    config->blocking = 1;
    config->commName = name;
    ncclResult_t res = ncclCommInitRankConfig(comm_p, nranks, id, rank,
                                              config);
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclCommInitRankConfig", res, *comm_p);
    return SWY_OK;
}

/* First traffic on every direction communicator, in one group: a hello
 * header to each peer, and the first header receive from each. NCCL
 * connects a pair's p2p channels at its first send and receive and
 * blocks the host until both ends get there; in one group it sets up all
 * communicators at once, so no rank waits for a peer that waits for it. */
static swy_status_t nccl_hello(nccl_ctx_t *ctx,
                               const ncclUniqueId *const *peer_ids)
{
    const swy_transport_host_v1_t *host = ctx->host;
    swy_status_t status;
    /* One hello per class (the class is checked on arrival), read by every
     * hello send of that class; the slots live until finalize. */
    for (int c = 0; c < NCCL_NCLASSES; c++) {
        status = nccl_slot_get(ctx, &ctx->hello_slot[c]);
        if (status != SWY_OK)
            return status;
        nccl_header_t hello = {
            .magic = NCCL_HEADER_MAGIC,
            .cls = (uint16_t)c,
            .flags = NCCL_HEADER_HELLO,
        };
        /* Landed before a send reads the slot; on the plugin's copy
         * stream, which no gate on a caller's stream holds. */
        cudaError_t err =
            nccl_copy_sync(ctx->hello_slot[c]->dev, &hello, sizeof(hello));
        if (err != cudaSuccess)
            return nccl_cuda_fail(ctx, "cudaMemcpy (hello header)", err);
    }
    for (int r = 0; r < host->nranks; r++) {
        if (peer_ids[r] == NULL)
            continue;
        for (int c = 0; c < NCCL_NCLASSES; c++) {
            nccl_dir_t *dir = &ctx->peers[r].recv[c];
            dir->hdr_op.kind = NCCL_OP_HEADER;
            dir->hdr_op.state = NCCL_OP_POSTED;
            dir->hdr_op.peer = r;
            dir->hdr_op.cls = c;
            dir->hdr_op.dir = dir;
            swy_list_init(&dir->hdr_op.link);
            status = nccl_slot_get(ctx, &dir->hdr_slot);
            if (status == SWY_OK)
                status = nccl_event_get(ctx, &dir->hdr_op.event);
            if (status != SWY_OK)
                return status;
        }
    }

    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclGroupStart (hello)", res, NULL);
    status = SWY_OK;
    for (int r = 0; r < host->nranks && status == SWY_OK; r++) {
        if (peer_ids[r] == NULL)
            continue;
        for (int c = 0; c < NCCL_NCLASSES && status == SWY_OK; c++) {
            nccl_dir_t *send = &ctx->peers[r].send[c];
            res = ncclSend(ctx->hello_slot[c]->dev, sizeof(nccl_header_t),
                           ncclUint8, NCCL_DIR_RECEIVER, send->comm,
                           send->stream);
            if (res != ncclSuccess)
                status = nccl_nccl_fail(ctx, "ncclSend (hello)", res,
                                        send->comm);
            else
                status = nccl_header_recv(ctx, &ctx->peers[r].recv[c]);
        }
    }
    /* Always close the group, also after a failure inside it. */
    res = ncclGroupEnd();
    if (res != ncclSuccess && status == SWY_OK)
        status = nccl_nccl_fail(ctx, "ncclGroupEnd (hello)", res, NULL);
    if (status != SWY_OK)
        return status;
    for (int r = 0; r < host->nranks; r++) {
        if (peer_ids[r] == NULL)
            continue;
        for (int c = 0; c < NCCL_NCLASSES; c++) {
            ctx->peers[r].send[c].seq = 1; /* 0 was the hello */
            status = nccl_header_recv_finish(ctx, &ctx->peers[r].recv[c]);
            if (status != SWY_OK)
                return status;
        }
    }
    return SWY_OK;
}

/* The per-pair communicators of every peer with ids (SWY_DEVICE_COLL=
 * staged), then their hello.  One group: NCCL requires it when one
 * thread creates several communicators, and it lets every pair meet in
 * any order.  On failure the caller aborts what was made. */
static swy_status_t nccl_pairs_init(nccl_ctx_t *ctx,
                                    const ncclUniqueId *const *peer_ids)
{
    const swy_transport_host_v1_t *host = ctx->host;
    int me = host->rank;
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclGroupStart", res, NULL);
    swy_status_t init_status = SWY_OK;
    for (int r = 0; r < host->nranks && init_status == SWY_OK; r++) {
        if (peer_ids[r] == NULL)
            continue;
        for (int c = 0; c < NCCL_NCLASSES && init_status == SWY_OK; c++) {
            nccl_dir_t *send = &ctx->peers[r].send[c];
            nccl_dir_t *recv = &ctx->peers[r].recv[c];
            init_status = nccl_comm_init(
                ctx, &send->comm, &send->config, 2,
                ctx->my_ids[(size_t)r * NCCL_NCLASSES + (size_t)c],
                NCCL_DIR_SENDER, send->name);
            if (init_status == SWY_OK)
                init_status = nccl_comm_init(
                    ctx, &recv->comm, &recv->config, 2,
                    peer_ids[r][(size_t)me * NCCL_NCLASSES + (size_t)c],
                    NCCL_DIR_RECEIVER, recv->name);
        }
    }
    /* Always close the group, also after a failed init inside it. */
    res = ncclGroupEnd();
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclGroupEnd (communicator init)", res,
                              NULL);
    if (init_status != SWY_OK)
        return init_status;
    return nccl_hello(ctx, peer_ids);
}

swy_status_t nccl_connect(void *vctx, const void *const *addrs,
                          const size_t *lens, const uint8_t *reachable)
{
    nccl_ctx_t *ctx = vctx;
    const swy_transport_host_v1_t *host = ctx->host;
    int me = host->rank;
    if (ctx->connect_called) {
        nccl_log(ctx, SWY_LOG_WARN, "connect called twice");
        return SWY_ERR_INVALID_ARG;
    }
    if (ctx->address == NULL) {
        nccl_log(ctx, SWY_LOG_WARN, "connect before get_address");
        return SWY_ERR_INVALID_ARG;
    }
    ctx->connect_called = 1;

    /* Check every address before NCCL waits for anyone. */
    const ncclUniqueId **peer_ids = host->alloc(
        (size_t)host->nranks * sizeof(*peer_ids));
    if (peer_ids == NULL)
        return SWY_ERR_NO_MEMORY;
    swy_status_t status = SWY_OK;
    int npeers = 0;
    for (int r = 0; r < host->nranks; r++) {
        peer_ids[r] = NULL;
        if (!reachable[r] || r == me || !ctx->pairs)
            continue;
        status = nccl_peer_ids(ctx, r, addrs[r], lens[r], &peer_ids[r]);
        if (status != SWY_OK)
            goto out_free;
        npeers++;
    }

    if (nccl_find_shared_gpu(ctx, addrs, lens)) {
        /* A CPU job on a GPU host is legitimate: say it at info, and
         * refuse device buffers later with the reason. */
        nccl_log(ctx, SWY_LOG_INFO, "device memory disabled: %s",
                 ctx->shared_gpu);
        status = SWY_OK;
        goto out_free;
    }

    int prev;
    status = nccl_device_enter(ctx, &prev);
    if (status != SWY_OK)
        goto out_free;

    if (reachable[me]) {
        for (int c = 0; c < NCCL_NCLASSES; c++) {
            status = nccl_stream_create(ctx, c, &ctx->self_stream[c]);
            if (status != SWY_OK)
                goto out_leave;
        }
    }
    for (int r = 0; r < host->nranks; r++) {
        if (peer_ids[r] == NULL)
            continue;
        for (int c = 0; c < NCCL_NCLASSES; c++) {
            nccl_dir_t *dirs[2] = {&ctx->peers[r].send[c],
                                   &ctx->peers[r].recv[c]};
            for (int d = 0; d < 2; d++) {
                dirs[d]->peer = r;
                dirs[d]->cls = c;
                dirs[d]->is_recv = d;
                snprintf(dirs[d]->name, sizeof(dirs[d]->name),
                         "swy:%d->%d:%s", d ? r : me, d ? me : r,
                         nccl_class_names[c]);
                status = nccl_stream_create(ctx, c, &dirs[d]->stream);
                if (status != SWY_OK)
                    goto out_leave;
            }
        }
    }

    nccl_log(ctx, SWY_LOG_INFO,
             "rank %d: creating %d NCCL communicators (%d peers%s; messages "
             "to oneself %s)",
             me, npeers * 2 * NCCL_NCLASSES, npeers,
             ctx->pairs ? "" : ": device memory between ranks goes on the "
             "device communicators",
             reachable[me] ? "as copies" : "not served");
    if (npeers > 0) {
        status = nccl_pairs_init(ctx, peer_ids);
        if (status != SWY_OK)
            goto out_abort;
    }
    for (int r = 0; r < host->nranks; r++)
        if (peer_ids[r] != NULL)
            ctx->peers[r].connected = 1;
    if (reachable[me])
        ctx->peers[me].connected = 1;
    nccl_log(ctx, SWY_LOG_DEBUG, "rank %d: connected to %d peers%s", me,
             npeers, reachable[me] ? " and self" : "");
    status = SWY_OK;
    goto out_leave;

out_abort:
    /* A peer whose init failed may hold its side open: abort, never
     * destroy (destroy waits for it). */
    nccl_abort_comms(ctx);
    ctx->failed = status;
out_leave:
    nccl_device_leave(ctx, prev);
out_free:
    host->free(peer_ids);
    return status;
}

static void nccl_free_ops(nccl_ctx_t *ctx, swy_list_t *head)
{
    while (!swy_list_empty(head)) {
        nccl_op_t *op = (nccl_op_t *)head->next;
        swy_list_del(&op->link);
        if (op->kind == NCCL_OP_HEADER)
            continue; /* embedded in its nccl_dir_t */
        /* Events and slots of aborted operations go back unused: their
         * streams are never used again. */
        nccl_event_put(ctx, op->event);
        nccl_slot_put(ctx, op->slot);
        ctx->host->free(op);
    }
}

static void nccl_destroy_stream(cudaStream_t stream)
{
    /* Returns at once; CUDA releases it when its work has drained. */
    if (stream != NULL)
        (void)cudaStreamDestroy(stream);
}

static void nccl_destroy(nccl_ctx_t *ctx)
{
    const swy_transport_host_v1_t *host = ctx->host;
    int prev = -1;
    int entered = ctx->peers != NULL &&
                  nccl_device_enter(ctx, &prev) == SWY_OK;
    /* Abort, not destroy: a parked header receive never completes, and
     * ncclCommDestroy would wait for it. */
    nccl_abort_comms(ctx);
    nccl_free_ops(ctx, &ctx->inflight);
    nccl_free_ops(ctx, &ctx->completions);
    nccl_free_ops(ctx, &ctx->self_sends);
    for (int r = 0; ctx->peers != NULL && r < host->nranks; r++) {
        nccl_peer_t *peer = &ctx->peers[r];
        nccl_free_ops(ctx, &peer->posted_recvs);
        for (int c = 0; c < NCCL_NCLASSES; c++) {
            nccl_destroy_stream(peer->send[c].stream);
            nccl_destroy_stream(peer->recv[c].stream);
            nccl_event_put(ctx, peer->recv[c].hdr_op.event);
        }
    }
    for (int c = 0; c < NCCL_NCLASSES; c++)
        nccl_destroy_stream(ctx->self_stream[c]);
    nccl_events_destroy(ctx);
    nccl_slots_destroy(ctx);
    if (entered)
        nccl_device_leave(ctx, prev);
    nccl_waker_put(ctx->waker);
    host->free(ctx->address);
    host->free(ctx->peers);
    host->free(ctx);
}

void nccl_finalize(void *vctx)
{
    if (vctx != NULL)
        nccl_destroy(vctx);
}
