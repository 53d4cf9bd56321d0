/* swy-transport-nccl: sends, receives, matching, completion and failure.
 *
 * Post failures that happen after NCCL may have enqueued part of a message
 * leave a communicator's two ends out of step, so they abort the context:
 * every operation, the new one included, then completes with
 * SWY_ERR_TRANSPORT from progress(), and later posts are refused. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_plugin.h"

int nccl_class_of_priority(int priority)
{
    return priority >= SWY_PRIO_HIGH ? NCCL_CLASS_HIGH : NCCL_CLASS_LOW;
}

/* ---- operations ------------------------------------------------------- */

static nccl_op_t *nccl_op_new(nccl_ctx_t *ctx, nccl_op_kind_t kind, int peer,
                              int cls, uint64_t tag, void *buf, size_t len,
                              swy_transport_complete_cb_v1_t cb, void *cb_arg)
{
    nccl_op_t *op = ctx->host->alloc(sizeof(*op));
    if (op == NULL) {
        nccl_log(ctx, SWY_LOG_WARN, "%s of %zu bytes: out of host memory",
                 kind == NCCL_OP_SEND ? "send" : "receive", len);
        return NULL;
    }
    memset(op, 0, sizeof(*op));
    swy_list_init(&op->link);
    op->kind = kind;
    op->state = NCCL_OP_POSTED;
    op->peer = peer;
    op->cls = cls;
    op->tag = tag;
    op->buf = buf;
    op->len = len;
    op->cb = cb;
    op->cb_arg = cb_arg;
    return op;
}

/* Queue op's completion; its callback runs from progress(). */
static void nccl_op_complete(nccl_ctx_t *ctx, nccl_op_t *op,
                             swy_status_t status, size_t bytes)
{
    swy_list_del(&op->link);
    nccl_event_put(ctx, op->event);
    op->event = NULL;
    nccl_slot_put(ctx, op->slot);
    op->slot = NULL;
    op->status = status;
    op->bytes = bytes;
    op->state = NCCL_OP_DONE;
    swy_list_push_back(&ctx->completions, &op->link);
}

/* Every comm of the context, one by one: i from 0 until NULL. */
static ncclComm_t *nccl_comm_at(nccl_ctx_t *ctx, int i, const char **name_p)
{
    int per_peer = 2 * NCCL_NCLASSES;
    if (ctx->peers == NULL || i >= ctx->host->nranks * per_peer)
        return NULL;
    nccl_peer_t *peer = &ctx->peers[i / per_peer];
    int k = i % per_peer;
    nccl_dir_t *dir = k < NCCL_NCLASSES ? &peer->send[k]
                                        : &peer->recv[k - NCCL_NCLASSES];
    *name_p = dir->name;
    return &dir->comm;
}

void nccl_abort_comms(nccl_ctx_t *ctx)
{
    const char *name;
    ncclComm_t *comm;
    int aborted = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* In one group (NCCL >= 2.22) the aborts run concurrently: one by one
     * they take about a second each, and may wait for each other. */
    ncclResult_t res = ncclGroupStart();
    int grouped = res == ncclSuccess;
    if (!grouped)
        nccl_log(ctx, SWY_LOG_DEBUG, "ncclGroupStart (abort): %s",
                 ncclGetErrorString(res));
    for (int i = 0; (comm = nccl_comm_at(ctx, i, &name)) != NULL; i++) {
        if (*comm == NULL)
            continue;
        res = ncclCommAbort(*comm);
        if (res != ncclSuccess)
            nccl_log(ctx, SWY_LOG_DEBUG, "ncclCommAbort (%s): %s", name,
                     ncclGetErrorString(res));
        *comm = NULL;
        aborted++;
    }
    res = grouped ? ncclGroupEnd() : ncclSuccess;
    if (res != ncclSuccess)
        nccl_log(ctx, SWY_LOG_DEBUG, "ncclGroupEnd (abort): %s",
                 ncclGetErrorString(res));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (aborted > 0)
        nccl_log(ctx, SWY_LOG_DEBUG, "aborted %d communicators in %.3f s",
                 aborted,
                 (double)(t1.tv_sec - t0.tv_sec) +
                     (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

static void nccl_fail_list(nccl_ctx_t *ctx, swy_list_t *head)
{
    swy_list_t items;
    swy_list_take(&items, head);
    while (!swy_list_empty(&items)) {
        nccl_op_t *op = (nccl_op_t *)items.next;
        swy_list_del(&op->link);
        if (op->kind == NCCL_OP_HEADER) {
            op->state = NCCL_OP_POSTED; /* embedded; its event stays */
            continue;
        }
        nccl_op_complete(ctx, op, SWY_ERR_TRANSPORT, 0);
    }
}

void nccl_fail_all(nccl_ctx_t *ctx, swy_status_t status, const char *why)
{
    if (ctx->failed == SWY_OK) {
        nccl_log(ctx, SWY_LOG_WARN,
                 "rank %d: %s; aborting every NCCL communicator of this "
                 "context, its operations fail",
                 ctx->host->rank, why);
        ctx->failed = status != SWY_OK ? status : SWY_ERR_TRANSPORT;
    }
    /* Abort first: NCCL then stops the kernels that still wait. */
    nccl_abort_comms(ctx);
    nccl_fail_list(ctx, &ctx->inflight);
    nccl_fail_list(ctx, &ctx->self_sends);
    for (int r = 0; ctx->peers != NULL && r < ctx->host->nranks; r++) {
        nccl_fail_list(ctx, &ctx->peers[r].posted_recvs);
        for (int c = 0; c < NCCL_NCLASSES; c++)
            ctx->peers[r].recv[c].parked = 0;
    }
}

/* A post broke the context: fail everything, then the operations of this
 * post that no list held. */
static void nccl_post_broken(nccl_ctx_t *ctx, const char *why, nccl_op_t *a,
                             nccl_op_t *b)
{
    nccl_fail_all(ctx, SWY_ERR_TRANSPORT, why);
    if (a != NULL && a->state != NCCL_OP_DONE)
        nccl_op_complete(ctx, a, SWY_ERR_TRANSPORT, 0);
    if (b != NULL && b->state != NCCL_OP_DONE)
        nccl_op_complete(ctx, b, SWY_ERR_TRANSPORT, 0);
}

static swy_status_t nccl_check_post(nccl_ctx_t *ctx, const char *what,
                                    int peer, const void *buf, size_t len,
                                    swy_mem_type_t mem)
{
    if (ctx->shared_gpu[0] != '\0') {
        nccl_log(ctx, SWY_LOG_WARN, "%s of %zu bytes with rank %d refused: "
                 "%s", what, len, peer, ctx->shared_gpu);
        return SWY_ERR_UNSUPPORTED;
    }
    if (ctx->failed != SWY_OK) {
        nccl_log(ctx, SWY_LOG_WARN,
                 "%s of %zu bytes with rank %d refused: this context's NCCL "
                 "communicators were aborted after an earlier error",
                 what, len, peer);
        return SWY_ERR_TRANSPORT;
    }
    if (peer >= 0 && peer < ctx->host->nranks && peer != ctx->host->rank &&
        !ctx->pairs) {
        nccl_log(ctx, SWY_LOG_WARN, "%s of %zu bytes with rank %d refused: "
                 "under SWY_DEVICE_COLL=auto device memory between ranks "
                 "goes on the device communicators (one per priority class "
                 "and communicator); this transport's per-pair ones are made "
                 "under SWY_DEVICE_COLL=staged only", what, len, peer);
        return SWY_ERR_UNSUPPORTED;
    }
    if (peer < 0 || peer >= ctx->host->nranks ||
        !ctx->peers[peer].connected) {
        nccl_log(ctx, SWY_LOG_WARN, "%s: rank %d is not connected", what,
                 peer);
        return SWY_ERR_INVALID_ARG;
    }
    if (mem != SWY_MEM_CUDA) {
        nccl_log(ctx, SWY_LOG_WARN,
                 "%s of %zu bytes with rank %d: memory type %d is not CUDA "
                 "device memory, the only kind the nccl transport moves",
                 what, len, peer, (int)mem);
        return SWY_ERR_UNSUPPORTED;
    }
    if (buf == NULL && len > 0) {
        nccl_log(ctx, SWY_LOG_WARN, "%s of %zu bytes with rank %d: NULL buffer",
                 what, len, peer);
        return SWY_ERR_INVALID_ARG;
    }
    return SWY_OK;
}

/* ---- receiving a message from another rank ------------------------------ */

swy_status_t nccl_header_recv(nccl_ctx_t *ctx, nccl_dir_t *dir)
{
    ncclResult_t res = ncclRecv(dir->hdr_slot->dev, sizeof(nccl_header_t),
                                ncclUint8, NCCL_DIR_SENDER, dir->comm,
                                dir->stream);
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclRecv (header)", res, dir->comm);
    return SWY_OK;
}

swy_status_t nccl_header_recv_finish(nccl_ctx_t *ctx, nccl_dir_t *dir)
{
    nccl_slot_t *slot = dir->hdr_slot;
    cudaError_t err = cudaMemcpyAsync(slot->host, slot->dev,
                                      sizeof(nccl_header_t),
                                      cudaMemcpyDeviceToHost, dir->stream);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaMemcpyAsync (header to host)", err);
    return nccl_op_record(ctx, &dir->hdr_op, dir->stream);
}

swy_status_t nccl_header_post(nccl_ctx_t *ctx, nccl_dir_t *dir)
{
    swy_status_t status = nccl_header_recv(ctx, dir);
    if (status != SWY_OK)
        return status;
    return nccl_header_recv_finish(ctx, dir);
}

/* Receive into scratch of len bytes on stream, then copy what fits into
 * dst: the payload must be consumed whole to keep the communicator in
 * step. Stream-ordered allocation: cudaFree would wait for the device. */
static swy_status_t nccl_recv_truncated(nccl_ctx_t *ctx, ncclComm_t comm,
                                        int nccl_peer, cudaStream_t stream,
                                        void *dst, size_t dst_len, size_t len)
{
    void *scratch = NULL;
    cudaError_t err = cudaMallocAsync(&scratch, len, stream);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaMallocAsync (truncated message)", err);
    swy_status_t status = SWY_OK;
    ncclResult_t res = ncclRecv(scratch, len, ncclUint8, nccl_peer, comm,
                                stream);
    if (res != ncclSuccess)
        status = nccl_nccl_fail(ctx, "ncclRecv (truncated message)", res,
                                comm);
    if (status == SWY_OK && dst_len > 0) {
        err = cudaMemcpyAsync(dst, scratch, dst_len, cudaMemcpyDeviceToDevice,
                              stream);
        if (err != cudaSuccess)
            status = nccl_cuda_fail(ctx, "cudaMemcpyAsync (truncated "
                                         "message)", err);
    }
    err = cudaFreeAsync(scratch, stream);
    if (err != cudaSuccess && status == SWY_OK)
        status = nccl_cuda_fail(ctx, "cudaFreeAsync", err);
    return status;
}

/* Post the payload receive of the message hdr announced on dir into op,
 * then the next header receive. */
static swy_status_t nccl_recv_issue(nccl_ctx_t *ctx, nccl_dir_t *dir,
                                    nccl_op_t *op, const nccl_header_t *hdr)
{
    size_t len = (size_t)hdr->len;
    op->cls = dir->cls;
    swy_status_t status = SWY_OK;
    if (len == 0) {
        nccl_op_complete(ctx, op, SWY_OK, 0);
    } else {
        if (len <= op->len) {
            ncclResult_t res = ncclRecv(op->buf, len, ncclUint8,
                                        NCCL_DIR_SENDER, dir->comm,
                                        dir->stream);
            if (res != ncclSuccess)
                return nccl_nccl_fail(ctx, "ncclRecv", res, dir->comm);
            op->status = SWY_OK;
            op->bytes = len;
        } else {
            nccl_log(ctx, SWY_LOG_DEBUG,
                     "message of %zu bytes from rank %d (tag %llu) "
                     "truncated to the receive's %zu bytes",
                     len, dir->peer, (unsigned long long)hdr->tag, op->len);
            status = nccl_recv_truncated(ctx, dir->comm, NCCL_DIR_SENDER,
                                         dir->stream, op->buf, op->len, len);
            if (status != SWY_OK)
                return status;
            op->status = SWY_ERR_MISMATCH;
            op->bytes = op->len;
        }
        status = nccl_op_record(ctx, op, dir->stream);
        if (status != SWY_OK)
            return status;
    }
    return nccl_header_post(ctx, dir);
}

static nccl_op_t *nccl_find_tag(swy_list_t *head, uint64_t tag)
{
    for (swy_list_t *l = head->next; l != head; l = l->next)
        if (((nccl_op_t *)l)->tag == tag)
            return (nccl_op_t *)l;
    return NULL;
}

/* dir's header receive completed: match it or park it. */
static void nccl_header_arrived(nccl_ctx_t *ctx, nccl_dir_t *dir)
{
    nccl_header_t hdr;
    memcpy(&hdr, dir->hdr_slot->host, sizeof(hdr));
    dir->hdr_op.state = NCCL_OP_POSTED;
    int hello = (hdr.flags & NCCL_HEADER_HELLO) != 0;
    if (hdr.magic != NCCL_HEADER_MAGIC || hdr.cls != (uint16_t)dir->cls ||
        hdr.seq != dir->seq || hello != (dir->seq == 0)) {
        char why[192];
        snprintf(why, sizeof(why),
                 "rank %d sent a bad header on %s (magic 0x%x class %u "
                 "flags 0x%x seq %llu, expected seq %llu)",
                 dir->peer, dir->name, hdr.magic, (unsigned)hdr.cls,
                 (unsigned)hdr.flags, (unsigned long long)hdr.seq,
                 (unsigned long long)dir->seq);
        nccl_fail_all(ctx, SWY_ERR_TRANSPORT, why);
        return;
    }
    dir->seq++;
    if (hello) {
        nccl_log(ctx, SWY_LOG_DEBUG, "%s: hello from rank %d", dir->name,
                 dir->peer);
        if (nccl_header_post(ctx, dir) != SWY_OK)
            nccl_post_broken(ctx, "posting a header receive failed", NULL,
                             NULL);
        return;
    }
    nccl_op_t *op = nccl_find_tag(&ctx->peers[dir->peer].posted_recvs,
                                  hdr.tag);
    if (op == NULL) {
        /* NCCL keeps this communicator's order: nothing can come before
         * the payload, so the header waits for its irecv. */
        dir->parked = 1;
        dir->parked_hdr = hdr;
        nccl_log(ctx, SWY_LOG_TRACE,
                 "header from rank %d (tag %llu, %llu bytes) parked on %s",
                 dir->peer, (unsigned long long)hdr.tag,
                 (unsigned long long)hdr.len, dir->name);
        return;
    }
    swy_list_del(&op->link);
    if (nccl_recv_issue(ctx, dir, op, &hdr) != SWY_OK)
        nccl_post_broken(ctx, "posting a receive failed", op, NULL);
}

/* ---- messages to oneself -------------------------------------------------- */

/* Move send's payload into recv: one copy on the self stream of the
 * send's class.  A rank's messages to itself need no NCCL communicator
 * (a 1-rank one takes NCCL's channels and their buffers all the same).  A
 * message longer than the receive fills it and fails it, as between
 * ranks. */
static swy_status_t nccl_self_issue(nccl_ctx_t *ctx, nccl_op_t *send,
                                    nccl_op_t *recv)
{
    size_t len = send->len;
    if (len == 0) {
        nccl_op_complete(ctx, send, SWY_OK, 0);
        nccl_op_complete(ctx, recv, SWY_OK, 0);
        return SWY_OK;
    }
    cudaStream_t stream = ctx->self_stream[send->cls];
    int truncated = len > recv->len;
    if (truncated)
        nccl_log(ctx, SWY_LOG_DEBUG,
                 "self: message of %zu bytes (tag %llu) truncated to the "
                 "receive's %zu bytes",
                 len, (unsigned long long)send->tag, recv->len);
    size_t n = truncated ? recv->len : len;
    swy_status_t status = SWY_OK;
    if (n > 0) {
        cudaError_t err = cudaMemcpyAsync(recv->buf, send->buf, n,
                                          cudaMemcpyDefault, stream);
        if (err != cudaSuccess)
            status = nccl_cuda_fail(ctx, "cudaMemcpyAsync (to oneself)",
                                    err);
    }
    if (status != SWY_OK)
        return status;
    send->status = SWY_OK;
    send->bytes = len;
    recv->status = truncated ? SWY_ERR_MISMATCH : SWY_OK;
    recv->bytes = truncated ? recv->len : len;
    status = nccl_op_record(ctx, send, stream);
    if (status == SWY_OK)
        status = nccl_op_record(ctx, recv, stream);
    return status;
}

/* ---- posting ---------------------------------------------------------------- */

/* Header and payload in one group on dir(me->peer, cls); the header goes
 * from pinned host memory to a device slot first, on the same stream. */
static swy_status_t nccl_send_issue(nccl_ctx_t *ctx, nccl_op_t *op)
{
    nccl_dir_t *dir = &ctx->peers[op->peer].send[op->cls];
    nccl_header_t hdr = {
        .magic = NCCL_HEADER_MAGIC,
        .cls = (uint16_t)op->cls,
        .tag = op->tag,
        .len = op->len,
        .seq = dir->seq,
    };
    memcpy(op->slot->host, &hdr, sizeof(hdr));
    cudaError_t err = cudaMemcpyAsync(op->slot->dev, op->slot->host,
                                      sizeof(hdr), cudaMemcpyHostToDevice,
                                      dir->stream);
    if (err != cudaSuccess)
        return nccl_cuda_fail(ctx, "cudaMemcpyAsync (header to device)", err);
    swy_status_t status = SWY_OK;
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess)
        return nccl_nccl_fail(ctx, "ncclGroupStart", res, dir->comm);
    res = ncclSend(op->slot->dev, sizeof(hdr), ncclUint8, NCCL_DIR_RECEIVER,
                   dir->comm, dir->stream);
    if (res != ncclSuccess)
        status = nccl_nccl_fail(ctx, "ncclSend (header)", res, dir->comm);
    if (status == SWY_OK && op->len > 0) {
        res = ncclSend(op->buf, op->len, ncclUint8, NCCL_DIR_RECEIVER,
                       dir->comm, dir->stream);
        if (res != ncclSuccess)
            status = nccl_nccl_fail(ctx, "ncclSend", res, dir->comm);
    }
    res = ncclGroupEnd();
    if (res != ncclSuccess && status == SWY_OK)
        status = nccl_nccl_fail(ctx, "ncclGroupEnd (send)", res, dir->comm);
    if (status != SWY_OK)
        return status;
    dir->seq++;
    op->status = SWY_OK;
    op->bytes = op->len;
    return nccl_op_record(ctx, op, dir->stream);
}

swy_status_t nccl_isend_class(nccl_ctx_t *ctx, int peer, uint64_t tag,
                              const void *buf, size_t len, swy_mem_type_t mem,
                              int cls, swy_transport_complete_cb_v1_t cb,
                              void *cb_arg, void **handle_p)
{
    swy_status_t status = nccl_check_post(ctx, "send", peer, buf, len, mem);
    if (status != SWY_OK)
        return status;
    /* The buffer is only read; one op type serves both directions. */
    nccl_op_t *op = nccl_op_new(ctx, NCCL_OP_SEND, peer, cls,
                                tag & SWY_TRANSPORT_TAG_MASK,
                                (void *)(uintptr_t)buf, len, cb, cb_arg);
    if (op == NULL)
        return SWY_ERR_NO_MEMORY;
    int prev;
    status = nccl_device_enter(ctx, &prev);
    if (status != SWY_OK) {
        ctx->host->free(op);
        return status;
    }
    if (peer == ctx->host->rank) {
        nccl_op_t *recv = nccl_find_tag(&ctx->peers[peer].posted_recvs,
                                        op->tag);
        if (recv == NULL) {
            swy_list_push_back(&ctx->self_sends, &op->link);
        } else {
            swy_list_del(&recv->link);
            if (nccl_self_issue(ctx, op, recv) != SWY_OK)
                nccl_post_broken(ctx, "a send to oneself failed", op, recv);
        }
    } else {
        /* Nothing is enqueued yet: running out of slots is no failure of
         * the communicator. */
        status = nccl_slot_get(ctx, &op->slot);
        if (status != SWY_OK) {
            nccl_device_leave(ctx, prev);
            ctx->host->free(op);
            return status;
        }
        if (nccl_send_issue(ctx, op) != SWY_OK)
            nccl_post_broken(ctx, "a send failed", op, NULL);
    }
    nccl_device_leave(ctx, prev);
    if (handle_p != NULL)
        *handle_p = op;
    return SWY_OK;
}

swy_status_t nccl_isend(void *vctx, int peer, uint64_t tag, const void *buf,
                        size_t len, swy_mem_type_t mem,
                        swy_transport_complete_cb_v1_t cb, void *cb_arg,
                        void **handle_p)
{
    return nccl_isend_class(vctx, peer, tag, buf, len, mem, NCCL_CLASS_LOW,
                            cb, cb_arg, handle_p);
}

swy_status_t nccl_irecv(void *vctx, int peer, uint64_t tag, void *buf,
                        size_t len, swy_mem_type_t mem,
                        swy_transport_complete_cb_v1_t cb, void *cb_arg,
                        void **handle_p)
{
    nccl_ctx_t *ctx = vctx;
    swy_status_t status = nccl_check_post(ctx, "receive", peer, buf, len,
                                          mem);
    if (status != SWY_OK)
        return status;
    /* Matching is by tag alone: the sender's class is its own affair. */
    nccl_op_t *op = nccl_op_new(ctx, NCCL_OP_RECV, peer, NCCL_CLASS_LOW,
                                tag & SWY_TRANSPORT_TAG_MASK, buf, len, cb,
                                cb_arg);
    if (op == NULL)
        return SWY_ERR_NO_MEMORY;
    int prev;
    status = nccl_device_enter(ctx, &prev);
    if (status != SWY_OK) {
        ctx->host->free(op);
        return status;
    }
    nccl_peer_t *from = &ctx->peers[peer];
    if (peer == ctx->host->rank) {
        nccl_op_t *send = nccl_find_tag(&ctx->self_sends, op->tag);
        if (send == NULL) {
            swy_list_push_back(&from->posted_recvs, &op->link);
        } else {
            swy_list_del(&send->link);
            if (nccl_self_issue(ctx, send, op) != SWY_OK)
                nccl_post_broken(ctx, "a send to oneself failed", send, op);
        }
    } else {
        nccl_dir_t *dir = NULL;
        for (int c = 0; c < NCCL_NCLASSES && dir == NULL; c++)
            if (from->recv[c].parked && from->recv[c].parked_hdr.tag == op->tag)
                dir = &from->recv[c];
        if (dir == NULL) {
            swy_list_push_back(&from->posted_recvs, &op->link);
        } else {
            nccl_header_t hdr = dir->parked_hdr;
            dir->parked = 0;
            if (nccl_recv_issue(ctx, dir, op, &hdr) != SWY_OK)
                nccl_post_broken(ctx, "posting a receive failed", op, NULL);
        }
    }
    nccl_device_leave(ctx, prev);
    if (handle_p != NULL)
        *handle_p = op;
    return SWY_OK;
}

void nccl_cancel(void *vctx, void *handle)
{
    nccl_ctx_t *ctx = vctx;
    nccl_op_t *op = handle;
    if (op == NULL)
        return;
    switch (op->state) {
    case NCCL_OP_POSTED:
        /* Unmatched: no stream has seen it. */
        nccl_op_complete(ctx, op, SWY_ERR_ABORTED, 0);
        break;
    case NCCL_OP_INFLIGHT:
        /* NCCL cannot take back an enqueued operation: report it as
         * cancelled once its event says the stream is past it. */
        op->cancelled = 1;
        break;
    case NCCL_OP_DONE:
        break;
    }
}

/* ---- progress ------------------------------------------------------------------ */

static void nccl_check_async_errors(nccl_ctx_t *ctx)
{
    const char *name;
    ncclComm_t *comm;
    for (int i = 0; (comm = nccl_comm_at(ctx, i, &name)) != NULL; i++) {
        if (*comm == NULL)
            continue;
        ncclResult_t async = ncclSuccess;
        ncclResult_t res = ncclCommGetAsyncError(*comm, &async);
        if (res == ncclSuccess &&
            (async == ncclSuccess || async == ncclInProgress))
            continue;
        ncclResult_t bad = res != ncclSuccess ? res : async;
        char why[256];
        snprintf(why, sizeof(why), "%s on %s: %s (%s)",
                 res != ncclSuccess ? "ncclCommGetAsyncError failed"
                                    : "asynchronous NCCL error",
                 name, ncclGetErrorString(bad), ncclGetLastError(*comm));
        nccl_fail_all(ctx, SWY_ERR_TRANSPORT, why);
        return;
    }
}

static int nccl_poll_inflight(nccl_ctx_t *ctx)
{
    int events = 0;
    swy_list_t *next;
    for (swy_list_t *l = ctx->inflight.next; l != &ctx->inflight; l = next) {
        /* Work posted below goes to the tail and does not touch next. */
        next = l->next;
        nccl_op_t *op = (nccl_op_t *)l;
        cudaError_t err = cudaEventQuery(op->event);
        if (err == cudaErrorNotReady)
            continue;
        if (err != cudaSuccess) {
            char why[160];
            snprintf(why, sizeof(why), "cudaEventQuery: %s (%s)",
                     cudaGetErrorString(err), cudaGetErrorName(err));
            nccl_fail_all(ctx, SWY_ERR_TRANSPORT, why);
            break;
        }
        swy_list_del(&op->link);
        events++;
        if (op->kind == NCCL_OP_HEADER) {
            nccl_header_arrived(ctx, op->dir);
            if (ctx->failed != SWY_OK)
                break;
        } else if (op->cancelled) {
            nccl_op_complete(ctx, op, SWY_ERR_ABORTED, 0);
        } else {
            nccl_op_complete(ctx, op, op->status, op->bytes);
        }
    }
    return events;
}

int nccl_progress(void *vctx)
{
    nccl_ctx_t *ctx = vctx;
    /* Host functions that ran before this point are covered by the event
     * queries below; arm() reports any that run later. */
    ctx->fired_seen = atomic_load(&ctx->waker->fired);
    int events = 0;
    if (ctx->failed == SWY_OK)
        nccl_check_async_errors(ctx);
    if (ctx->failed == SWY_OK && !swy_list_empty(&ctx->inflight)) {
        int prev;
        if (nccl_device_enter(ctx, &prev) == SWY_OK) {
            events += nccl_poll_inflight(ctx);
            nccl_device_leave(ctx, prev);
        } else {
            nccl_fail_all(ctx, SWY_ERR_TRANSPORT, "cudaSetDevice failed");
        }
    }
    /* A snapshot: what the callbacks post completes in a later call. */
    swy_list_t batch;
    swy_list_take(&batch, &ctx->completions);
    while (!swy_list_empty(&batch)) {
        nccl_op_t *op = (nccl_op_t *)batch.next;
        swy_list_del(&op->link);
        if (op->cb != NULL)
            op->cb(op->cb_arg, op->status, op->bytes);
        ctx->host->free(op);
        events++;
    }
    return events;
}

int nccl_event_fd(void *vctx)
{
    nccl_ctx_t *ctx = vctx;
    return ctx->waker->fd;
}

swy_status_t nccl_arm(void *vctx)
{
    nccl_ctx_t *ctx = vctx;
    uint64_t count;
    /* Clear first: a host function after this read makes it readable. */
    ssize_t got = read(ctx->waker->fd, &count, sizeof(count));
    (void)got;
    if (!swy_list_empty(&ctx->completions))
        return SWY_INPROGRESS;
    if (atomic_load(&ctx->waker->fired) != ctx->fired_seen)
        return SWY_INPROGRESS;
    return SWY_OK;
}

swy_status_t nccl_describe_peer(void *vctx, int peer, char *buf, size_t len)
{
    nccl_ctx_t *ctx = vctx;
    if (peer < 0 || peer >= ctx->host->nranks ||
        !ctx->peers[peer].connected) {
        snprintf(buf, len, "nccl: not connected");
        return SWY_ERR_INVALID_ARG;
    }
    if (peer == ctx->host->rank)
        snprintf(buf, len, "nccl:self");
    else
        snprintf(buf, len, "nccl:p2p dir comms (high,low)");
    return SWY_OK;
}
