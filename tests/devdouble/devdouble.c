/* Test double of the nccl plugin for machines without a GPU; what it
 * stands in for and what not: devdouble.h. One file, three parts: the
 * "device" (memory regions and streams), the device services table, and
 * a transport for that memory over Unix stream sockets between the
 * processes of one host (a frame per message: tag, length, bytes; tag
 * matching per source in posting order, as the transport ABI asks). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devdouble.h"
#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_transport_v1.h"

#define DD_EXPORT __attribute__((visibility("default")))
#define DD_NAME "devdouble"
/* How long connect() waits for a peer's connection before failing. */
#define DD_CONNECT_TIMEOUT_MS 60000

/* ---- the device: memory regions ---------------------------------- */

typedef struct {
    char *base;
    size_t size;
} dd_region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static dd_region_t *regions;
static size_t n_regions, cap_regions;

DD_EXPORT void *swy_devdouble_alloc(size_t bytes)
{
    size_t size = bytes > 0 ? bytes : 1;
    char *p = malloc(size);
    if (p == NULL)
        return NULL;
    memset(p, 0xA5, size);
    pthread_mutex_lock(&regions_lock);
    if (n_regions == cap_regions) {
        size_t cap = cap_regions ? 2 * cap_regions : 64;
        dd_region_t *r = realloc(regions, cap * sizeof(*r));
        if (r == NULL) {
            pthread_mutex_unlock(&regions_lock);
            free(p);
            return NULL;
        }
        regions = r;
        cap_regions = cap;
    }
    regions[n_regions++] = (dd_region_t){p, size};
    pthread_mutex_unlock(&regions_lock);
    return p;
}

DD_EXPORT void swy_devdouble_free(void *ptr)
{
    if (ptr == NULL)
        return;
    pthread_mutex_lock(&regions_lock);
    for (size_t i = 0; i < n_regions; i++)
        if (regions[i].base == ptr) {
            regions[i] = regions[--n_regions];
            break;
        }
    pthread_mutex_unlock(&regions_lock);
    free(ptr);
}

/* Is [p, p + len) inside one region? */
static int in_device(const void *p, size_t len)
{
    const char *c = p;
    int found = 0;
    pthread_mutex_lock(&regions_lock);
    for (size_t i = 0; i < n_regions && !found; i++)
        found = c >= regions[i].base &&
                c < regions[i].base + regions[i].size &&
                len <= (size_t)(regions[i].base + regions[i].size - c);
    pthread_mutex_unlock(&regions_lock);
    return found;
}

/* ---- the device: streams ------------------------------------------ */

typedef struct dd_work {
    struct dd_work *next;
    void (*fn)(void *);
    void *arg;
} dd_work_t;

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    dd_work_t *head, *tail;
    int running, stop;
    int capturing; /* swy_devdouble_stream_capture */
} dd_stream_t;

static void *stream_main(void *arg)
{
    dd_stream_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL)
            break;
        dd_work_t *w = s->head;
        s->head = w->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        w->fn(w->arg);
        free(w);
        pthread_mutex_lock(&s->lock);
        s->running = 0;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

DD_EXPORT void *swy_devdouble_stream_create(void)
{
    dd_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

DD_EXPORT void swy_devdouble_stream_destroy(void *stream)
{
    dd_stream_t *s = stream;
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    free(s);
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static dd_stream_t *default_stream;

static void default_create(void)
{
    default_stream = swy_devdouble_stream_create();
}

static dd_stream_t *stream_of(void *stream)
{
    if (stream != NULL)
        return stream;
    pthread_once(&default_once, default_create);
    return default_stream;
}

DD_EXPORT int swy_devdouble_launch(void *stream, void (*fn)(void *), void *arg)
{
    dd_stream_t *s = stream_of(stream);
    dd_work_t *w = malloc(sizeof(*w));
    if (s == NULL || w == NULL) {
        free(w);
        return -1;
    }
    *w = (dd_work_t){NULL, fn, arg};
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

DD_EXPORT void swy_devdouble_stream_capture(void *stream, int on)
{
    dd_stream_t *s = stream_of(stream);
    pthread_mutex_lock(&s->lock);
    s->capturing = on;
    pthread_mutex_unlock(&s->lock);
}

/* ---- device services ---------------------------------------------- */

static __thread char dd_error[160] = "devdouble: no error";

static int dd_device_count(void)
{
    return 1;
}

static swy_mem_type_t dd_mem_type(const void *ptr)
{
    return ptr != NULL && in_device(ptr, 1) ? SWY_MEM_CUDA : SWY_MEM_HOST;
}

static swy_status_t dd_stream_sync(void *stream)
{
    dd_stream_t *s = stream_of(stream);
    if (s == NULL) {
        snprintf(dd_error, sizeof(dd_error), "devdouble: no default stream");
        return SWY_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL || s->running)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return SWY_OK;
}

/* As cudaMemcpy: any direction, regions that must not overlap (checked:
 * an overlap is a bug of the caller the real copy would not report). */
static swy_status_t dd_copy(void *dst, const void *src, size_t bytes)
{
    const char *d = dst, *s = src;
    if (bytes > 0 && d < s + bytes && s < d + bytes) {
        snprintf(dd_error, sizeof(dd_error), "devdouble copy: %zu bytes "
                 "from %p to %p overlap", bytes, src, dst);
        return SWY_ERR_INVALID_ARG;
    }
    if (bytes > 0)
        memcpy(dst, src, bytes);
    return SWY_OK;
}

static void *dd_host_alloc(size_t bytes)
{
    return malloc(bytes > 0 ? bytes : 1);
}

static void dd_host_free(void *ptr)
{
    free(ptr);
}

static const char *dd_error_string(void)
{
    return dd_error;
}

/* ---- the transport ------------------------------------------------ */

typedef struct dd_op {
    struct dd_op *next;
    int is_send, peer;
    uint64_t tag;
    char *buf;
    size_t len;  /* the caller's length */
    size_t done; /* bytes moved */
    swy_transport_complete_cb_v1_t cb;
    void *cb_arg;
    swy_status_t status;
} dd_op_t;

typedef struct {
    uint64_t tag, len;
} dd_frame_t;

typedef struct dd_msg { /* arrived before its receive was posted */
    struct dd_msg *next;
    uint64_t tag;
    size_t len;
    char *data;
} dd_msg_t;

typedef struct {
    int fd; /* -1: self, or not served */
    dd_op_t *sq, *sq_tail; /* sends, the head one being written */
    dd_frame_t out;
    size_t out_sent; /* of the head: frame header and bytes */
    dd_frame_t in;
    size_t in_got, body_got;
    int in_body;
    dd_op_t *filling; /* matched receive being read into, or NULL */
    dd_msg_t *unexp_cur;
    dd_op_t *rq, *rq_tail;       /* posted receives, unmatched */
    dd_msg_t *unexp, *unexp_tail; /* whole unexpected messages */
} dd_peer_t;

typedef struct {
    const swy_transport_host_v1_t *host;
    int rank, nranks;
    int lfd, epfd;
    char addr[sizeof(((struct sockaddr_un *)0)->sun_path)];
    size_t addr_len;
    dd_peer_t *peers;
    dd_op_t *done, *done_tail; /* completed; callbacks at progress() */
} dd_ctx_t;

#define dd_log(ctx, level, ...) (ctx)->host->log((level), DD_NAME, __VA_ARGS__)

static void push(dd_op_t **head, dd_op_t **tail, dd_op_t *op)
{
    op->next = NULL;
    if (*tail != NULL)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

/* Remove op from a singly linked queue; 1 if it was there. */
static int unlink_op(dd_op_t **head, dd_op_t **tail, dd_op_t *op)
{
    dd_op_t *prev = NULL;
    for (dd_op_t *o = *head; o != NULL; prev = o, o = o->next) {
        if (o != op)
            continue;
        if (prev != NULL)
            prev->next = o->next;
        else
            *head = o->next;
        if (*tail == o)
            *tail = prev;
        return 1;
    }
    return 0;
}

static void finish(dd_ctx_t *ctx, dd_op_t *op, swy_status_t status,
                   size_t bytes)
{
    op->status = status;
    op->done = bytes;
    push(&ctx->done, &ctx->done_tail, op);
}

static swy_status_t dd_init(const swy_transport_host_v1_t *host, void **ctx_p)
{
    dd_ctx_t *ctx = host->alloc(sizeof(*ctx));
    if (ctx == NULL)
        return SWY_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof(*ctx));
    ctx->host = host;
    ctx->rank = host->rank;
    ctx->nranks = host->nranks;
    ctx->peers = host->alloc((size_t)host->nranks * sizeof(dd_peer_t));
    if (ctx->peers == NULL) {
        host->free(ctx);
        return SWY_ERR_NO_MEMORY;
    }
    memset(ctx->peers, 0, (size_t)host->nranks * sizeof(dd_peer_t));
    for (int r = 0; r < host->nranks; r++)
        ctx->peers[r].fd = -1;
    /* An abstract socket: nothing on disk to clean up. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    ctx->addr[0] = '\0';
    int n = snprintf(ctx->addr + 1, sizeof(ctx->addr) - 1,
                     "swy-devdouble-%d-%p-%ld", (int)getpid(), (void *)ctx,
                     (long)now.tv_nsec);
    ctx->addr_len = 1 + (size_t)n;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, ctx->addr, ctx->addr_len);
    ctx->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->lfd < 0 || ctx->epfd < 0 ||
        bind(ctx->lfd, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                         ctx->addr_len)) != 0 ||
        listen(ctx->lfd, 256) != 0) {
        dd_log(ctx, SWY_LOG_WARN, "listening socket: %s", strerror(errno));
        if (ctx->lfd >= 0)
            close(ctx->lfd);
        if (ctx->epfd >= 0)
            close(ctx->epfd);
        host->free(ctx->peers);
        host->free(ctx);
        return SWY_ERR_TRANSPORT;
    }
    *ctx_p = ctx;
    return SWY_OK;
}

static swy_status_t dd_query(void *vctx, swy_transport_caps_v1_t *caps)
{
    dd_ctx_t *ctx = vctx;
    memset(caps, 0, sizeof(*caps));
    caps->mem_types = 1u << SWY_MEM_CUDA;
    caps->score[SWY_LINK_SELF] = 100;
    caps->score[SWY_LINK_SAME_NUMA] = 100;
    caps->score[SWY_LINK_SAME_NODE] = 100;
    caps->score[SWY_LINK_CROSS_NODE] = 0; /* one host only */
    caps->max_address_len = ctx->addr_len;
    return SWY_OK;
}

static swy_status_t dd_get_address(void *vctx, void *addr, size_t *len_p)
{
    dd_ctx_t *ctx = vctx;
    if (*len_p < ctx->addr_len)
        return SWY_ERR_INVALID_ARG;
    memcpy(addr, ctx->addr, ctx->addr_len);
    *len_p = ctx->addr_len;
    return SWY_OK;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Every pair connects once: the higher rank connects to the lower one
 * (the kernel queues the connection, so nobody waits for an accept) and
 * names itself; the lower one accepts. */
static swy_status_t dd_connect(void *vctx, const void *const *addrs,
                               const size_t *lens, const uint8_t *reachable)
{
    dd_ctx_t *ctx = vctx;
    int expect = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        if (!reachable[r] || r == ctx->rank)
            continue;
        if (r > ctx->rank) {
            expect++;
            continue;
        }
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (lens[r] > sizeof(sa.sun_path))
            return SWY_ERR_INVALID_ARG;
        memcpy(sa.sun_path, addrs[r], lens[r]);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int32_t me = ctx->rank;
        if (fd < 0 ||
            connect(fd, (struct sockaddr *)&sa,
                    (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                                lens[r])) != 0 ||
            write_all(fd, &me, sizeof(me)) != 0) {
            dd_log(ctx, SWY_LOG_WARN, "connecting to rank %d: %s", r,
                   strerror(errno));
            if (fd >= 0)
                close(fd);
            return SWY_ERR_TRANSPORT;
        }
        ctx->peers[r].fd = fd;
    }
    while (expect > 0) {
        struct pollfd p = {.fd = ctx->lfd, .events = POLLIN};
        if (poll(&p, 1, DD_CONNECT_TIMEOUT_MS) <= 0) {
            dd_log(ctx, SWY_LOG_WARN, "%d peer(s) never connected", expect);
            return SWY_ERR_TIMEOUT;
        }
        int fd = accept4(ctx->lfd, NULL, NULL, SOCK_CLOEXEC);
        int32_t who = -1;
        ssize_t n = fd >= 0 ? recv(fd, &who, sizeof(who), MSG_WAITALL) : -1;
        if (n != (ssize_t)sizeof(who) || who <= ctx->rank ||
            who >= ctx->nranks || !reachable[who] ||
            ctx->peers[who].fd >= 0) {
            dd_log(ctx, SWY_LOG_WARN, "bad hello from a peer (rank %d)",
                   (int)who);
            if (fd >= 0)
                close(fd);
            return SWY_ERR_TRANSPORT;
        }
        ctx->peers[who].fd = fd;
        expect--;
    }
    for (int r = 0; r < ctx->nranks; r++) {
        int fd = ctx->peers[r].fd;
        if (fd < 0)
            continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)r};
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
            epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            return SWY_ERR_TRANSPORT;
    }
    return SWY_OK;
}

/* The first posted receive from p with tag, taken off the queue; NULL if
 * none. */
static dd_op_t *take_recv(dd_peer_t *p, uint64_t tag)
{
    for (dd_op_t *op = p->rq; op != NULL; op = op->next)
        if (op->tag == tag) {
            unlink_op(&p->rq, &p->rq_tail, op);
            return op;
        }
    return NULL;
}

/* A receive whose message of msg_len bytes is in its buffer (as much as
 * fits): a longer message is SWY_ERR_MISMATCH, as the ABI says. */
static void finish_recv(dd_ctx_t *ctx, dd_op_t *op, size_t msg_len)
{
    finish(ctx, op, msg_len > op->len ? SWY_ERR_MISMATCH : SWY_OK,
           msg_len < op->len ? msg_len : op->len);
}

/* A whole message kept until its receive is posted. */
static void keep_unexpected(dd_peer_t *p, dd_msg_t *m)
{
    m->next = NULL;
    if (p->unexp_tail != NULL)
        p->unexp_tail->next = m;
    else
        p->unexp = m;
    p->unexp_tail = m;
}

/* A whole message from peer (self sends, or one read whole): to the
 * first posted receive with its tag, else kept until one is posted. */
static swy_status_t deliver(dd_ctx_t *ctx, int peer, uint64_t tag,
                            const char *data, size_t len)
{
    dd_peer_t *p = &ctx->peers[peer];
    dd_op_t *op = take_recv(p, tag);
    if (op != NULL) {
        if (len > 0 && op->len > 0)
            memcpy(op->buf, data, len < op->len ? len : op->len);
        finish_recv(ctx, op, len);
        return SWY_OK;
    }
    dd_msg_t *m = malloc(sizeof(*m));
    char *copy = malloc(len > 0 ? len : 1);
    if (m == NULL || copy == NULL) {
        free(m);
        free(copy);
        return SWY_ERR_NO_MEMORY;
    }
    if (len > 0)
        memcpy(copy, data, len);
    *m = (dd_msg_t){NULL, tag, len, copy};
    keep_unexpected(p, m);
    return SWY_OK;
}

/* The op's buffer must be this double's "device memory": a host buffer
 * here means the library handed a device transport the wrong memory. */
static swy_status_t check_buffer(dd_ctx_t *ctx, const char *what,
                                 const void *buf, size_t len,
                                 swy_mem_type_t mem)
{
    if (mem != SWY_MEM_CUDA || (len > 0 && !in_device(buf, len))) {
        dd_log(ctx, SWY_LOG_ERROR, "%s of %zu bytes at %p: not device memory "
               "of this double (mem type %d)", what, len, buf, (int)mem);
        return SWY_ERR_INVALID_ARG;
    }
    return SWY_OK;
}

/* A send's or a receive's record, after the checks of its arguments. */
static swy_status_t new_op(dd_ctx_t *ctx, int is_send, int peer,
                           uint64_t tag, const void *buf, size_t len,
                           swy_mem_type_t mem,
                           swy_transport_complete_cb_v1_t cb, void *cb_arg,
                           void **handle_p, dd_op_t **op_p)
{
    if (peer < 0 || peer >= ctx->nranks ||
        (peer != ctx->rank && ctx->peers[peer].fd < 0))
        return SWY_ERR_INVALID_ARG;
    swy_status_t status = check_buffer(ctx, is_send ? "send" : "receive",
                                       buf, len, mem);
    if (status != SWY_OK)
        return status;
    dd_op_t *op = malloc(sizeof(*op));
    if (op == NULL)
        return SWY_ERR_NO_MEMORY;
    *op = (dd_op_t){.is_send = is_send, .peer = peer, .tag = tag,
                    .buf = (char *)buf, .len = len, .cb = cb,
                    .cb_arg = cb_arg};
    if (handle_p != NULL)
        *handle_p = op;
    *op_p = op;
    return SWY_OK;
}

static swy_status_t dd_isend(void *vctx, int peer, uint64_t tag,
                             const void *buf, size_t len, swy_mem_type_t mem,
                             swy_transport_complete_cb_v1_t cb, void *cb_arg,
                             void **handle_p)
{
    dd_ctx_t *ctx = vctx;
    dd_op_t *op;
    swy_status_t status = new_op(ctx, 1, peer, tag, buf, len, mem, cb,
                                 cb_arg, handle_p, &op);
    if (status != SWY_OK)
        return status;
    if (peer == ctx->rank) {
        status = deliver(ctx, peer, tag, buf, len);
        if (status != SWY_OK) {
            free(op);
            return status;
        }
        finish(ctx, op, SWY_OK, len);
        return SWY_OK;
    }
    dd_peer_t *p = &ctx->peers[peer];
    push(&p->sq, &p->sq_tail, op);
    return SWY_OK;
}

static swy_status_t dd_irecv(void *vctx, int peer, uint64_t tag, void *buf,
                             size_t len, swy_mem_type_t mem,
                             swy_transport_complete_cb_v1_t cb, void *cb_arg,
                             void **handle_p)
{
    dd_ctx_t *ctx = vctx;
    dd_op_t *op;
    swy_status_t status = new_op(ctx, 0, peer, tag, buf, len, mem, cb,
                                 cb_arg, handle_p, &op);
    if (status != SWY_OK)
        return status;
    dd_peer_t *p = &ctx->peers[peer];
    dd_msg_t *prev = NULL;
    for (dd_msg_t *m = p->unexp; m != NULL; prev = m, m = m->next) {
        if (m->tag != tag)
            continue;
        if (prev != NULL)
            prev->next = m->next;
        else
            p->unexp = m->next;
        if (p->unexp_tail == m)
            p->unexp_tail = prev;
        if (m->len > 0 && len > 0)
            memcpy(buf, m->data, m->len < len ? m->len : len);
        finish_recv(ctx, op, m->len);
        free(m->data);
        free(m);
        return SWY_OK;
    }
    push(&p->rq, &p->rq_tail, op);
    return SWY_OK;
}

static void dd_cancel(void *vctx, void *handle)
{
    dd_ctx_t *ctx = vctx;
    dd_op_t *op = handle;
    if (op == NULL || op->peer < 0 || op->peer >= ctx->nranks)
        return;
    dd_peer_t *p = &ctx->peers[op->peer];
    int gone = 0;
    if (op->is_send) /* only if none of it is on the socket yet */
        gone = !(op == p->sq && p->out_sent > 0) &&
               unlink_op(&p->sq, &p->sq_tail, op);
    else
        gone = unlink_op(&p->rq, &p->rq_tail, op);
    if (gone)
        finish(ctx, op, SWY_ERR_ABORTED, 0);
}

/* Write what the socket takes of the queued sends. */
static int flush_sends(dd_ctx_t *ctx, dd_peer_t *p)
{
    int events = 0;
    while (p->sq != NULL) {
        dd_op_t *op = p->sq;
        if (p->out_sent == 0)
            p->out = (dd_frame_t){op->tag, op->len};
        size_t hdr = sizeof(p->out), total = hdr + op->len;
        const char *src = p->out_sent < hdr
                              ? (const char *)&p->out + p->out_sent
                              : op->buf + (p->out_sent - hdr);
        size_t want = p->out_sent < hdr ? hdr - p->out_sent
                                        : total - p->out_sent;
        ssize_t n = want > 0 ? send(p->fd, src, want, MSG_NOSIGNAL) : 0;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return events;
            dd_log(ctx, SWY_LOG_WARN, "send to rank %d: %s", op->peer,
                   strerror(errno));
            unlink_op(&p->sq, &p->sq_tail, op);
            p->out_sent = 0;
            finish(ctx, op, SWY_ERR_TRANSPORT, 0);
            events++;
            continue;
        }
        p->out_sent += (size_t)n;
        if (p->out_sent < total)
            continue;
        unlink_op(&p->sq, &p->sq_tail, op);
        p->out_sent = 0;
        finish(ctx, op, SWY_OK, op->len);
        events++;
    }
    return events;
}

/* Read what arrived from p: frame headers, then bytes straight into the
 * matched receive (the rest of a longer message is dropped, as the ABI
 * says) or into an unexpected message. */
static int read_peer(dd_ctx_t *ctx, int peer)
{
    dd_peer_t *p = &ctx->peers[peer];
    char sink[4096];
    int events = 0;
    for (;;) {
        char *dst;
        size_t want;
        if (!p->in_body) {
            dst = (char *)&p->in + p->in_got;
            want = sizeof(p->in) - p->in_got;
        } else if (p->filling != NULL) {
            size_t room = p->body_got < p->filling->len
                              ? p->filling->len - p->body_got
                              : 0;
            size_t left = p->in.len - p->body_got;
            dst = room > 0 ? p->filling->buf + p->body_got : sink;
            want = room > 0 ? (left < room ? left : room)
                            : (left < sizeof(sink) ? left : sizeof(sink));
        } else {
            dst = p->unexp_cur->data + p->body_got;
            want = p->in.len - p->body_got;
        }
        ssize_t n = want > 0 ? recv(p->fd, dst, want, 0) : 0;
        if (want > 0 && n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                          errno == EINTR))
                return events;
            /* The peer is gone: the library's control plane reports
             * that; here its receives simply never complete. */
            epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, p->fd, NULL);
            close(p->fd);
            p->fd = -1;
            return events;
        }
        if (!p->in_body) {
            p->in_got += (size_t)n;
            if (p->in_got < sizeof(p->in))
                continue;
            p->in_got = 0;
            p->in_body = 1;
            p->body_got = 0;
            p->filling = take_recv(p, p->in.tag);
            if (p->filling == NULL) {
                dd_msg_t *m = malloc(sizeof(*m));
                char *data = malloc(p->in.len > 0 ? p->in.len : 1);
                if (m == NULL || data == NULL) {
                    dd_log(ctx, SWY_LOG_ERROR, "out of memory for a "
                           "message of %llu bytes",
                           (unsigned long long)p->in.len);
                    abort(); /* a test double: no way to go on */
                }
                *m = (dd_msg_t){NULL, p->in.tag, p->in.len, data};
                p->unexp_cur = m;
            }
        } else {
            p->body_got += (size_t)n;
        }
        if (p->body_got < p->in.len)
            continue;
        p->in_body = 0;
        if (p->filling != NULL) {
            finish_recv(ctx, p->filling, p->in.len);
            p->filling = NULL;
        } else {
            keep_unexpected(p, p->unexp_cur);
            p->unexp_cur = NULL;
        }
        events++;
    }
}

static int dd_progress(void *vctx)
{
    dd_ctx_t *ctx = vctx;
    int events = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        dd_peer_t *p = &ctx->peers[r];
        if (p->fd < 0)
            continue;
        events += flush_sends(ctx, p);
        events += read_peer(ctx, r);
    }
    while (ctx->done != NULL) {
        dd_op_t *op = ctx->done;
        ctx->done = op->next;
        if (ctx->done == NULL)
            ctx->done_tail = NULL;
        if (op->cb != NULL)
            op->cb(op->cb_arg, op->status, op->done);
        free(op);
        events++;
    }
    return events;
}

static int dd_event_fd(void *vctx)
{
    return ((dd_ctx_t *)vctx)->epfd;
}

/* Sleep only with nothing to write and no callback due: sends wait for
 * room on a socket, which the epoll set does not watch. */
static swy_status_t dd_arm(void *vctx)
{
    dd_ctx_t *ctx = vctx;
    if (ctx->done != NULL)
        return SWY_INPROGRESS;
    for (int r = 0; r < ctx->nranks; r++)
        if (ctx->peers[r].sq != NULL)
            return SWY_INPROGRESS;
    return SWY_OK;
}

static swy_status_t dd_describe_peer(void *vctx, int peer, char *buf,
                                     size_t len)
{
    dd_ctx_t *ctx = vctx;
    snprintf(buf, len, "%s:%s", DD_NAME,
             peer == ctx->rank ? "self" : "unix-socket");
    return SWY_OK;
}

static void free_ops(dd_op_t *op)
{
    while (op != NULL) {
        dd_op_t *next = op->next;
        free(op);
        op = next;
    }
}

static void free_msgs(dd_msg_t *m)
{
    while (m != NULL) {
        dd_msg_t *next = m->next;
        free(m->data);
        free(m);
        m = next;
    }
}

static void dd_finalize(void *vctx)
{
    dd_ctx_t *ctx = vctx;
    for (int r = 0; r < ctx->nranks; r++) {
        dd_peer_t *p = &ctx->peers[r];
        if (p->fd >= 0)
            close(p->fd);
        free_ops(p->sq);
        free_ops(p->rq);
        free(p->filling);
        free_msgs(p->unexp);
        if (p->unexp_cur != NULL) {
            free(p->unexp_cur->data);
            free(p->unexp_cur);
        }
    }
    free_ops(ctx->done);
    close(ctx->lfd);
    close(ctx->epfd);
    ctx->host->free(ctx->peers);
    ctx->host->free(ctx);
}

#ifndef DD_FIRST_RELEASE
/* The stream functions: a callback is work on the stream's thread; a
 * gate is work that blocks that thread until opened (as the GPU waits
 * on a value), with two references: the stream's and the host's. */
typedef struct {
    void (*done)(void *);
    void *arg;
} dd_notify_t;

static void notify_run(void *arg)
{
    dd_notify_t n = *(dd_notify_t *)arg;
    free(arg);
    n.done(n.arg);
}

static swy_status_t dd_stream_notify(void *stream, void (*done)(void *),
                                     void *arg)
{
    dd_notify_t *n = malloc(sizeof(*n));
    if (n == NULL)
        return SWY_ERR_NO_MEMORY;
    *n = (dd_notify_t){done, arg};
    if (swy_devdouble_launch(stream, notify_run, n) != 0) {
        free(n);
        snprintf(dd_error, sizeof(dd_error), "devdouble: no stream");
        return SWY_ERR_NO_MEMORY;
    }
    return SWY_OK;
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open, refs;
} dd_gate_t;

static void gate_unref(dd_gate_t *g)
{
    pthread_mutex_lock(&g->lock);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (last) {
        pthread_mutex_destroy(&g->lock);
        pthread_cond_destroy(&g->cond);
        free(g);
    }
}

static void gate_wait(void *arg)
{
    dd_gate_t *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
    gate_unref(g);
}

static swy_status_t dd_stream_gate(void *stream, void **gate_p)
{
    dd_gate_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return SWY_ERR_NO_MEMORY;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->refs = 2;
    if (swy_devdouble_launch(stream, gate_wait, g) != 0) {
        free(g);
        snprintf(dd_error, sizeof(dd_error), "devdouble: no stream");
        return SWY_ERR_NO_MEMORY;
    }
    *gate_p = g;
    return SWY_OK;
}

static void dd_gate_open(void *gate)
{
    dd_gate_t *g = gate;
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    gate_unref(g);
}

static int dd_stream_capturing(void *stream)
{
    dd_stream_t *s = stream_of(stream);
    if (s == NULL)
        return -1;
    pthread_mutex_lock(&s->lock);
    int on = s->capturing;
    pthread_mutex_unlock(&s->lock);
    return on;
}

#endif /* DD_FIRST_RELEASE */

static swy_status_t dd_isend_prio(void *vctx, int peer, uint64_t tag,
                                  const void *buf, size_t len,
                                  swy_mem_type_t mem, int priority,
                                  swy_transport_complete_cb_v1_t cb,
                                  void *cb_arg, void **handle_p)
{
    (void)priority; /* one socket per peer: nothing to order by */
    return dd_isend(vctx, peer, tag, buf, len, mem, cb, cb_arg, handle_p);
}

DD_EXPORT const swy_transport_v1_t swy_transport_plugin_v1 = {
    .abi_version = SWY_TRANSPORT_ABI_V1,
    .struct_size = sizeof(swy_transport_v1_t),
    .name = DD_NAME,
    .init = dd_init,
    .query = dd_query,
    .get_address = dd_get_address,
    .connect = dd_connect,
    .isend = dd_isend,
    .irecv = dd_irecv,
    .cancel = dd_cancel,
    .progress = dd_progress,
    .event_fd = dd_event_fd,
    .arm = dd_arm,
    .describe_peer = dd_describe_peer,
    .finalize = dd_finalize,
};

/* DD_FIRST_RELEASE: the table as first released, without the stream
 * functions (an older plugin), to test the library's fallback. */
DD_EXPORT const swy_device_v1_t swy_device_plugin_v1 = {
    .abi_version = SWY_DEVICE_ABI_V1,
#ifdef DD_FIRST_RELEASE
    .struct_size = offsetof(swy_device_v1_t, stream_notify),
#else
    .struct_size = sizeof(swy_device_v1_t),
#endif
    .name = DD_NAME,
    .device_count = dd_device_count,
    .mem_type = dd_mem_type,
    .stream_sync = dd_stream_sync,
    .copy = dd_copy,
    .host_alloc = dd_host_alloc,
    .host_free = dd_host_free,
    .error_string = dd_error_string,
    .isend_prio = dd_isend_prio,
#ifndef DD_FIRST_RELEASE
    .stream_notify = dd_stream_notify,
    .stream_gate = dd_stream_gate,
    .gate_open = dd_gate_open,
    .stream_capturing = dd_stream_capturing,
#endif
};
