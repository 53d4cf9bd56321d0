/* The built-in `self` transport: a rank's messages to itself, matched in
 * process. An unmatched send is only remembered (its buffer is borrowed
 * until completion, as for any transport), so a message is copied exactly
 * once, when both sides are known. Completions are queued and delivered
 * from progress(), as the ABI requires; an eventfd makes the queue visible
 * to a progress loop that armed and sleeps. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/transport.h"
#include "util/alloc.h"
#include "util/copy.h"
#include "util/list.h"

#define SELF_SUBSYS "transport"

typedef enum { SELF_OP_SEND, SELF_OP_RECV } self_op_kind_t;

typedef struct {
    swy_list_t link; /* in posted_recvs, pending_sends or completions */
    self_op_kind_t kind;
    uint64_t tag;
    void *buf; /* const for sends */
    size_t len;
    swy_transport_complete_cb_v1_t cb;
    void *cb_arg;
    swy_status_t status; /* valid once queued for completion */
    size_t bytes;
    int matched; /* 1 once matched or cancelled: no longer cancellable */
} self_op_t;

typedef struct {
    const swy_transport_host_v1_t *host;
    swy_list_t posted_recvs;
    swy_list_t pending_sends;
    swy_list_t completions;
    int efd;
    int armed;    /* arm() said the queue was empty: someone may sleep */
    int signaled; /* efd was written and not yet drained */
} self_ctx_t;

static void self_complete(self_ctx_t *ctx, self_op_t *op, swy_status_t status,
                          size_t bytes)
{
    op->status = status;
    op->bytes = bytes;
    op->matched = 1;
    swy_list_push_back(&ctx->completions, &op->link);
    /* Only a loop that armed may be asleep on efd; one that never armed
     * sees the queue in progress() without a system call. One write makes
     * efd readable (and wakes every sleeper) until progress() drains it.
     * The write only fails if the counter would overflow, which leaves it
     * readable anyway. */
    if (ctx->armed && !ctx->signaled) {
        uint64_t one = 1;
        ssize_t written = write(ctx->efd, &one, sizeof(one));
        (void)written;
        ctx->signaled = 1;
    }
}

/* Pair a send with a receive: copy what fits, complete both. */
static void self_match(self_ctx_t *ctx, self_op_t *send, self_op_t *recv)
{
    size_t bytes = SWY_MIN(send->len, recv->len);
    if (bytes > 0)
        swy_copy(recv->buf, send->buf, bytes);
    swy_status_t recv_status = SWY_OK;
    if (send->len > recv->len) {
        ctx->host->log(SWY_LOG_DEBUG, SELF_SUBSYS,
                       "self: message of %zu bytes with tag %llu truncated "
                       "to the receive's %zu bytes",
                       send->len, (unsigned long long)send->tag, recv->len);
        recv_status = SWY_ERR_MISMATCH;
    }
    self_complete(ctx, send, SWY_OK, send->len);
    self_complete(ctx, recv, recv_status, bytes);
}

static self_op_t *self_find(swy_list_t *list, uint64_t tag)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, list)
    {
        self_op_t *op = swy_container_of(pos, self_op_t, link);
        if (op->tag == tag)
            return op;
    }
    return NULL;
}

static swy_status_t self_init(const swy_transport_host_v1_t *host,
                              void **ctx_p)
{
    self_ctx_t *ctx = host->alloc(sizeof(*ctx));
    if (ctx == NULL)
        return SWY_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof(*ctx));
    ctx->host = host;
    swy_list_init(&ctx->posted_recvs);
    swy_list_init(&ctx->pending_sends);
    swy_list_init(&ctx->completions);
    ctx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->efd < 0) {
        host->log(SWY_LOG_WARN, SELF_SUBSYS, "self: eventfd failed: %s",
                  strerror(errno));
        host->free(ctx);
        return SWY_ERR_SYSTEM;
    }
    *ctx_p = ctx;
    return SWY_OK;
}

static swy_status_t self_query(void *ctx, swy_transport_caps_v1_t *caps)
{
    /* Written by the struct_size rule: no further than the host's. */
    swy_transport_caps_v1_t mine = {.struct_size = caps->struct_size};
    swy_transport_caps_v1_t *given = caps;
    caps = &mine;
    caps->mem_types = 1u << SWY_MEM_HOST;
    caps->score[SWY_LINK_SELF] = 100;
    caps->max_address_len = 0;
    if (swy_struct_export(given, given->struct_size, &mine, sizeof(mine),
                          SWY_STRUCT_END(swy_transport_caps_v1_t,
                                         max_address_len)) != 0)
        return SWY_ERR_INVALID_ARG; /* not a host of any release */
    return SWY_OK;
}

static swy_status_t self_get_address(void *ctx, void *addr, size_t *len_p)
{
    *len_p = 0;
    return SWY_OK;
}

static swy_status_t self_connect(void *vctx, const void *const *addrs,
                                 const size_t *lens, const uint8_t *reachable)
{
    self_ctx_t *ctx = vctx;
    for (int r = 0; r < ctx->host->nranks; r++) {
        if (reachable[r] && r != ctx->host->rank) {
            ctx->host->log(SWY_LOG_WARN, SELF_SUBSYS,
                           "self: asked to reach rank %d, but self serves "
                           "only rank %d",
                           r, ctx->host->rank);
            return SWY_ERR_INVALID_ARG;
        }
    }
    return SWY_OK;
}

static swy_status_t self_post(self_ctx_t *ctx, self_op_kind_t kind, int peer,
                              uint64_t tag, void *buf, size_t len,
                              swy_mem_type_t mem,
                              swy_transport_complete_cb_v1_t cb, void *cb_arg,
                              void **handle_p)
{
    if (peer != ctx->host->rank) {
        ctx->host->log(SWY_LOG_WARN, SELF_SUBSYS,
                       "self: %s to rank %d, but self serves only rank %d",
                       kind == SELF_OP_SEND ? "send" : "receive", peer,
                       ctx->host->rank);
        return SWY_ERR_INVALID_ARG;
    }
    if (mem != SWY_MEM_HOST) {
        ctx->host->log(SWY_LOG_WARN, SELF_SUBSYS,
                       "self: memory type %d is not host memory", (int)mem);
        return SWY_ERR_UNSUPPORTED;
    }
    self_op_t *op = ctx->host->alloc(sizeof(*op));
    if (op == NULL)
        return SWY_ERR_NO_MEMORY;
    memset(op, 0, sizeof(*op));
    swy_list_init(&op->link);
    op->kind = kind;
    op->tag = tag & SWY_TRANSPORT_TAG_MASK;
    op->buf = buf;
    op->len = len;
    op->cb = cb;
    op->cb_arg = cb_arg;

    /* Match in posting order: the oldest waiting counterpart first. */
    swy_list_t *other = kind == SELF_OP_SEND ? &ctx->posted_recvs
                                             : &ctx->pending_sends;
    self_op_t *peer_op = self_find(other, op->tag);
    if (peer_op != NULL) {
        swy_list_del(&peer_op->link);
        if (kind == SELF_OP_SEND)
            self_match(ctx, op, peer_op);
        else
            self_match(ctx, peer_op, op);
    } else {
        swy_list_push_back(kind == SELF_OP_SEND ? &ctx->pending_sends
                                                : &ctx->posted_recvs,
                           &op->link);
    }
    if (handle_p != NULL)
        *handle_p = op;
    return SWY_OK;
}

static swy_status_t self_isend(void *ctx, int peer, uint64_t tag,
                               const void *buf, size_t len, swy_mem_type_t mem,
                               swy_transport_complete_cb_v1_t cb, void *cb_arg,
                               void **handle_p)
{
    /* The buffer is only read; the cast keeps one op type for both. */
    return self_post(ctx, SELF_OP_SEND, peer, tag, (void *)(uintptr_t)buf,
                     len, mem, cb, cb_arg, handle_p);
}

static swy_status_t self_irecv(void *ctx, int peer, uint64_t tag, void *buf,
                               size_t len, swy_mem_type_t mem,
                               swy_transport_complete_cb_v1_t cb, void *cb_arg,
                               void **handle_p)
{
    return self_post(ctx, SELF_OP_RECV, peer, tag, buf, len, mem, cb, cb_arg,
                     handle_p);
}

static void self_cancel(void *vctx, void *handle)
{
    self_ctx_t *ctx = vctx;
    self_op_t *op = handle;
    if (op == NULL || op->matched)
        return; /* already done or already queued: completes normally */
    swy_list_del(&op->link);
    self_complete(ctx, op, SWY_ERR_ABORTED, 0);
}

static int self_progress(void *vctx)
{
    self_ctx_t *ctx = vctx;
    /* Drain the counter first if it was written; that write woke whoever
     * had armed, who arms again before sleeping again. Until then the
     * arm stands, whichever thread calls progress() meanwhile: a sleeper
     * must hear of a completion queued while another thread progresses. */
    if (ctx->signaled) {
        uint64_t count;
        ssize_t got = read(ctx->efd, &count, sizeof(count));
        (void)got;
        ctx->signaled = 0;
        ctx->armed = 0;
    }

    /* Deliver a snapshot: callbacks may post operations that complete at
     * once, and those wait for the next progress() call. */
    swy_list_t batch;
    swy_list_init(&batch);
    if (!swy_list_empty(&ctx->completions)) {
        batch.next = ctx->completions.next;
        batch.prev = ctx->completions.prev;
        batch.next->prev = &batch;
        batch.prev->next = &batch;
        swy_list_init(&ctx->completions);
    }
    int events = 0;
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &batch)
    {
        self_op_t *op = swy_container_of(pos, self_op_t, link);
        swy_list_del(&op->link);
        if (op->cb != NULL)
            op->cb(op->cb_arg, op->status, op->bytes);
        ctx->host->free(op);
        events++;
    }
    return events;
}

static int self_event_fd(void *vctx)
{
    return ((self_ctx_t *)vctx)->efd;
}

static swy_status_t self_arm(void *vctx)
{
    self_ctx_t *ctx = vctx;
    if (!swy_list_empty(&ctx->completions))
        return SWY_INPROGRESS;
    ctx->armed = 1;
    return SWY_OK;
}

static swy_status_t self_describe_peer(void *vctx, int peer, char *buf,
                                       size_t len)
{
    self_ctx_t *ctx = vctx;
    if (peer != ctx->host->rank)
        return SWY_ERR_INVALID_ARG;
    snprintf(buf, len, "self: memcpy");
    return SWY_OK;
}

static void self_free_list(self_ctx_t *ctx, swy_list_t *list)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, list)
    {
        self_op_t *op = swy_container_of(pos, self_op_t, link);
        swy_list_del(&op->link);
        ctx->host->free(op);
    }
}

static void self_finalize(void *vctx)
{
    self_ctx_t *ctx = vctx;
    if (ctx == NULL)
        return;
    self_free_list(ctx, &ctx->posted_recvs);
    self_free_list(ctx, &ctx->pending_sends);
    self_free_list(ctx, &ctx->completions);
    close(ctx->efd);
    ctx->host->free(ctx);
}

static const swy_transport_v1_t self_ops = {
    .abi_version = SWY_TRANSPORT_ABI_V1,
    .struct_size = sizeof(swy_transport_v1_t),
    .name = "self",
    .init = self_init,
    .query = self_query,
    .get_address = self_get_address,
    .connect = self_connect,
    .isend = self_isend,
    .irecv = self_irecv,
    .cancel = self_cancel,
    .progress = self_progress,
    .event_fd = self_event_fd,
    .arm = self_arm,
    .describe_peer = self_describe_peer,
    .finalize = self_finalize,
};

const swy_transport_v1_t *swy_transport_self_ops(void)
{
    return &self_ops;
}
