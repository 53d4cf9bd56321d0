/* Test double of the nccl plugin for machines without a GPU; what it
 * stands in for and what not: devdouble.h. One file, five parts: the
 * "device" (memory regions and streams), the device services table, a
 * transport for that memory over Unix stream sockets between the
 * processes of one host (a frame per message: tag, length, bytes; tag
 * matching per source in posting order, as the transport ABI asks),
 * collectives on that memory (swy_devcoll_plugin_v1) over a mesh of such
 * sockets, as NCCL's communicators, and the MoE row kernels on it
 * (swy_devmoe_plugin_v1) as stream work with lib/moe's arithmetic. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "switchyard/swy_devcoll_v1.h"
#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_devmoe_v1.h"
#include "switchyard/swy_transport_v1.h"
#ifndef DD_FIRST_RELEASE
/* The library's conversions (lib/util/half.c, built into this double):
 * its reductions must give the bits the library's give. */
#include "util/half.h"
#endif

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

/* What moved device memory in this process: transport sends of it, and
 * launches of the device collectives (swy_devdouble_traffic). */
static atomic_ullong xport_device_sends, coll_launches;

DD_EXPORT void swy_devdouble_traffic(unsigned long long *transport_sends,
                                     unsigned long long *launches)
{
    *transport_sends = atomic_load(&xport_device_sends);
    *launches = atomic_load(&coll_launches);
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
    /* As the nccl plugin: between ranks only under SWY_DEVICE_COLL=staged
     * (else the device collectives carry device data between ranks). */
    int pairs;
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
    const char *mode = host->config_get("SWY_DEVICE_COLL");
    ctx->pairs = mode != NULL && strcmp(mode, "staged") == 0;
#ifdef DD_FIRST_RELEASE
    ctx->pairs = 1; /* no device collectives: the library stages */
#endif
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
    /* Written by the struct_size rule: no further than the host's. */
    swy_transport_caps_v1_t mine = {.struct_size = caps->struct_size};
    swy_transport_caps_v1_t *given = caps;
    caps = &mine;
    caps->mem_types = 1u << SWY_MEM_CUDA;
    caps->score[SWY_LINK_SELF] = 100;
    caps->score[SWY_LINK_SAME_NUMA] = 100;
    caps->score[SWY_LINK_SAME_NODE] = 100;
    caps->score[SWY_LINK_CROSS_NODE] = 0; /* one host only */
    caps->max_address_len = ctx->addr_len;
    if (swy_struct_export(given, given->struct_size, &mine, sizeof(mine),
                          SWY_STRUCT_END(swy_transport_caps_v1_t,
                                         max_address_len)) != 0)
        return SWY_ERR_INVALID_ARG; /* not a host of any release */
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
    if (peer != ctx->rank && !ctx->pairs) {
        dd_log(ctx, SWY_LOG_WARN, "%s of %zu bytes with rank %d refused: "
               "under SWY_DEVICE_COLL=auto device memory between ranks goes "
               "on the device communicators (as with the nccl plugin)",
               is_send ? "send" : "receive", len, peer);
        return SWY_ERR_UNSUPPORTED;
    }
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
    if (mem == SWY_MEM_CUDA)
        atomic_fetch_add(&xport_device_sends, 1);
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
    /* SWYTEST_DEVDOUBLE_GATE=refuse: no gate, as the nccl plugin when CUDA
     * loads kernels lazily; the library then waits for its ops. */
    const char *refuse = getenv("SWYTEST_DEVDOUBLE_GATE");
    if (refuse != NULL && strcmp(refuse, "refuse") == 0) {
        snprintf(dd_error, sizeof(dd_error), "devdouble: gates refused "
                 "(SWYTEST_DEVDOUBLE_GATE=refuse)");
        return SWY_ERR_UNSUPPORTED;
    }
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

/* DD_FIRST_RELEASE: a plugin with the least a device table has, without
 * the optional stream functions (NULL), to test the library's fallback. */
DD_EXPORT const swy_device_v1_t swy_device_plugin_v1 = {
    .abi_version = SWY_DEVICE_ABI_V1,
    .struct_size = sizeof(swy_device_v1_t),
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

#ifndef DD_FIRST_RELEASE
/* ---- collectives on device memory (swy_devcoll_plugin_v1) --------- */

/* What NCCL does on the GPU, done by the communicator's stream thread
 * over a full mesh of Unix stream sockets. launch() checks and plans a
 * group whole: per peer, the frames to send and those to receive, in call
 * order, and buffers for the peers' contributions to a reduction. The
 * job then moves every frame of the group at once (non-blocking sockets,
 * one poll loop: no call order of a group can deadlock), then reduces
 * and copies. A reduction takes the ranks in order 0..W-1 with the
 * library's arithmetic (lib/coll/dtype.c), so that every rank gets the
 * bits of the library's host reduction and of the tests' serial
 * references. The id is an abstract socket name: nothing on disk. */

/* sizeof(sun_path): an id is a socket address, the leading NUL included. */
#define DD_COLL_ID_BYTES 108
_Static_assert(DD_COLL_ID_BYTES == sizeof(((struct sockaddr_un *)0)->sun_path),
               "an id is a sun_path");
_Static_assert(DD_COLL_ID_BYTES <= SWY_DEVCOLL_ID_MAX, "id too long");
/* The id's name, so that "-<rank>" still fits in sun_path. */
#define DD_COLL_NAME_MAX 90
/* How long a job waits in poll() before it looks at the abort flag. */
#define DD_COLL_POLL_MS 100
#define DD_COLL_HELLO_MAGIC 0x53595744u /* "SYWD" */

/* A frame is a dd_frame_t whose tag is its class, then its bytes.
 * Collectives and sends/receives are matched apart, as NCCL does: the
 * collectives of a launch come in the same order on every rank, the
 * sends and receives of a pair in that pair's call order, but how a
 * rank orders the two kinds among each other is its own. */
enum { DD_FRAME_COLL, DD_FRAME_P2P, DD_FRAME_CLASSES };

typedef struct {
    char *buf;
    size_t len;
    int call; /* index in the launch, for messages */
    int cls;  /* DD_FRAME_* */
} dd_seg_t;

/* A job's traffic with one peer (with this rank itself: the sends to
 * self and the receives from self, which pair up in order). */
typedef struct {
    dd_seg_t *out; /* to send, in call order */
    int n_out, out_next;
    size_t out_sent; /* of out[out_next]: frame header, then bytes */
    dd_seg_t *in[DD_FRAME_CLASSES]; /* to receive, per class in order */
    int n_in[DD_FRAME_CLASSES], in_next[DD_FRAME_CLASSES];
    dd_frame_t in_hdr;
    size_t in_got;     /* of in_hdr, then of the body of *filling */
    dd_seg_t *filling; /* the segment the body goes to, or NULL */
} dd_coll_peer_t;

typedef struct dd_coll_job {
    struct dd_coll_job *next;
    swy_devcoll_call_v1_t *calls;
    int ncalls;
    char **tmp;            /* per call: the peers' contributions, or NULL */
    dd_coll_peer_t *peers; /* per rank */
    dd_seg_t *segs;        /* the peers' segments: 3 * ncalls each */
    swy_devcoll_done_cb_v1_t done;
    void *arg;
} dd_coll_job_t;

typedef struct {
    int rank, nranks;
    int priority; /* recorded only: the stream's thread has none */
    int *fds;     /* per rank; -1 for this rank */
    dd_stream_t *stream;
    /* The running job's scratch, per rank (one job runs at a time). */
    struct pollfd *pfds;
    int *pfd_rank;
    const void **srcs;
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* running went to 0 */
    dd_coll_job_t *head, *tail;  /* launched, not started */
    int running;                 /* a job is between start and done */
    atomic_int aborted;          /* comm_abort came */
    swy_status_t broken;         /* the stream's: a launch failed */
    char name[DD_COLL_NAME_MAX + 1]; /* of its id: what splits derive from */
    unsigned splits;             /* comm_split calls so far */
} dd_coll_t;

typedef struct {
    uint32_t magic;
    int32_t rank, nranks;
} dd_coll_hello_t;

static const char *const dd_kind_names[] = {"?",    "allreduce", "reduce",
                                            "broadcast", "send", "recv"};

__attribute__((format(printf, 2, 3))) static swy_status_t
dd_fail(swy_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dd_error, sizeof(dd_error), fmt, ap);
    va_end(ap);
    return status;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t dd_dtype_size(int dtype)
{
    switch (dtype) {
    case SWY_INT8: case SWY_UINT8: return 1;
    case SWY_FLOAT16: case SWY_BFLOAT16: return 2;
    case SWY_INT32: case SWY_FLOAT32: return 4;
    case SWY_INT64: case SWY_FLOAT64: return 8;
    }
    return 0;
}

/* dst[i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ..., in the type,
 * as lib/coll/dtype.c: integer sums and products wrap (in UT, unsigned),
 * and SWY_AVG divides the sum by n as swy_coll_scale_avg does (AVG: the
 * expression of the sum a; integer division for the integers). dst may
 * be one of the sources. */
#define DD_REDUCE(NAME, T, UT, AVG)                                           \
    static void NAME(void *dst, const void *const *srcs, int n,               \
                     size_t count, swy_redop_t op)                            \
    {                                                                         \
        for (size_t i = 0; i < count; i++) {                                  \
            T a = ((const T *)srcs[0])[i];                                    \
            for (int k = 1; k < n; k++) {                                     \
                T b = ((const T *)srcs[k])[i];                                \
                switch (op) {                                                 \
                case SWY_SUM: case SWY_AVG: a = (T)((UT)a + (UT)b); break;    \
                case SWY_PROD: a = (T)((UT)a * (UT)b); break;                 \
                case SWY_MAX: a = a > b ? a : b; break;                       \
                case SWY_MIN: a = a < b ? a : b; break;                       \
                }                                                             \
            }                                                                 \
            ((T *)dst)[i] = op == SWY_AVG && n > 1 ? (AVG) : a;               \
        }                                                                     \
    }

DD_REDUCE(reduce_i8, int8_t, uint8_t, (int8_t)(a / n))
DD_REDUCE(reduce_u8, uint8_t, uint8_t, (uint8_t)(a / n))
DD_REDUCE(reduce_i32, int32_t, uint32_t, (int32_t)(a / n))
DD_REDUCE(reduce_i64, int64_t, uint64_t, (int64_t)(a / n))
DD_REDUCE(reduce_f32, float, float, a / (float)n)
DD_REDUCE(reduce_f64, double, double, a / (double)n)

static float apply_float(float a, float b, swy_redop_t op)
{
    switch (op) {
    case SWY_SUM: case SWY_AVG: return a + b;
    case SWY_PROD: return a * b;
    case SWY_MAX: return a > b ? a : b;
    case SWY_MIN: return a < b ? a : b;
    }
    return a;
}

/* fp16 and bf16 in float, rounded back after each operation, as the
 * library's reduce_half_n and swy_coll_scale_avg. */
static void reduce_half(void *dst, const void *const *srcs, int n,
                        size_t count, swy_redop_t op, int bf16)
{
    float (*to_float)(uint16_t) = bf16 ? swy_bf16_to_float
                                       : swy_half_to_float;
    uint16_t (*from_float)(float) = bf16 ? swy_float_to_bf16
                                         : swy_float_to_half;
    for (size_t i = 0; i < count; i++) {
        uint16_t acc = ((const uint16_t *)srcs[0])[i];
        for (int k = 1; k < n; k++) {
            float b = to_float(((const uint16_t *)srcs[k])[i]);
            acc = from_float(apply_float(to_float(acc), b, op));
        }
        if (op == SWY_AVG && n > 1)
            acc = from_float(to_float(acc) / (float)n);
        ((uint16_t *)dst)[i] = acc;
    }
}

static void dd_reduce(void *dst, const void *const *srcs, int n,
                      size_t count, swy_dtype_t dtype, swy_redop_t op)
{
    switch (dtype) {
    case SWY_INT8: reduce_i8(dst, srcs, n, count, op); break;
    case SWY_UINT8: reduce_u8(dst, srcs, n, count, op); break;
    case SWY_INT32: reduce_i32(dst, srcs, n, count, op); break;
    case SWY_INT64: reduce_i64(dst, srcs, n, count, op); break;
    case SWY_FLOAT16: reduce_half(dst, srcs, n, count, op, 0); break;
    case SWY_BFLOAT16: reduce_half(dst, srcs, n, count, op, 1); break;
    case SWY_FLOAT32: reduce_f32(dst, srcs, n, count, op); break;
    case SWY_FLOAT64: reduce_f64(dst, srcs, n, count, op); break;
    }
}

static swy_status_t dd_coll_unique_id(void *id)
{
    static atomic_uint counter;
    if (id == NULL)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble unique_id: id NULL");
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    /* Unique on the host: the pid, a counter for the ids of one process,
     * and the time against a pid that was reused. */
    char *name = id;
    memset(name, 0, DD_COLL_ID_BYTES);
    snprintf(name + 1, DD_COLL_NAME_MAX + 1, "swy-devcoll-%d-%u-%lld.%09ld",
             (int)getpid(), atomic_fetch_add(&counter, 1u),
             (long long)t.tv_sec, (long)t.tv_nsec);
    return SWY_OK;
}

/* Where rank listens in the communicator of the id's name: the abstract
 * name "<name>-<rank>". Returns the address length. */
static socklen_t rank_address(const char *name, int rank,
                              struct sockaddr_un *sa)
{
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "%.*s-%d",
                     DD_COLL_NAME_MAX, name, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Connect to peer (lower than this rank), retried until the deadline
 * while the peer has not bound its address yet (or its backlog is full),
 * and name this rank. */
static swy_status_t connect_rank(dd_coll_t *c, const char *name, int peer,
                                 double deadline, double timeout_s)
{
    struct sockaddr_un sa;
    socklen_t len = rank_address(name, peer, &sa);
    dd_coll_hello_t hello = {DD_COLL_HELLO_MAGIC, c->rank, c->nranks};
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        0);
        if (fd < 0)
            return dd_fail(SWY_ERR_TRANSPORT, "devdouble comm_init: "
                           "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, len) == 0) {
            /* A new socket's buffer holds the hello whole. */
            if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) !=
                (ssize_t)sizeof(hello)) {
                close(fd);
                return dd_fail(SWY_ERR_TRANSPORT, "devdouble comm_init: "
                               "rank %d: hello to rank %d: %s", c->rank,
                               peer, strerror(errno));
            }
            c->fds[peer] = fd;
            return SWY_OK;
        }
        int err = errno;
        close(fd);
        if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN &&
            err != EINTR)
            return dd_fail(SWY_ERR_TRANSPORT, "devdouble comm_init: rank %d:"
                           " connecting to rank %d: %s", c->rank, peer,
                           strerror(err));
        if (now_s() >= deadline)
            return dd_fail(SWY_ERR_TIMEOUT, "devdouble comm_init: rank %d of"
                           " %d: rank %d did not join within %g s", c->rank,
                           c->nranks, peer, timeout_s);
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
}

/* Accept one higher rank's connection and its hello. */
static swy_status_t accept_rank(dd_coll_t *c, int lfd, double deadline,
                                double timeout_s)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            int missing = 0;
            for (int r = c->rank + 1; r < c->nranks; r++)
                missing += c->fds[r] < 0;
            return dd_fail(SWY_ERR_TIMEOUT, "devdouble comm_init: rank %d "
                           "of %d: %d rank(s) above it did not join within "
                           "%g s", c->rank, c->nranks, missing, timeout_s);
        }
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int ms = left > 1.0 ? 1000 : (int)(left * 1e3) + 1;
        if (poll(&p, 1, ms) > 0)
            break;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    dd_coll_hello_t hello = {0};
    /* The peer sends its hello right after it connects: read blocking,
     * then non-blocking as the peer's socket is. */
    ssize_t n = fd >= 0 ? recv(fd, &hello, sizeof(hello), MSG_WAITALL) : -1;
    int flags = n == (ssize_t)sizeof(hello) ? fcntl(fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        hello.magic != DD_COLL_HELLO_MAGIC ||
        hello.nranks != c->nranks || hello.rank <= c->rank ||
        hello.rank >= c->nranks || c->fds[hello.rank] >= 0) {
        if (fd >= 0)
            close(fd);
        return dd_fail(SWY_ERR_TRANSPORT, "devdouble comm_init: rank %d of "
                       "%d: bad hello (rank %d of %d)", c->rank, c->nranks,
                       (int)hello.rank, (int)hello.nranks);
    }
    c->fds[hello.rank] = fd;
    return SWY_OK;
}

/* Every pair connects once: the higher rank connects to the lower one's
 * address (the kernel queues the connection, so no one waits for an
 * accept) and names itself; the lower one accepts. */
static swy_status_t connect_mesh(dd_coll_t *c, const char *name,
                                 double timeout_s)
{
    double deadline = now_s() + timeout_s;
    swy_status_t status = SWY_OK;
    int lfd = -1;
    if (c->rank < c->nranks - 1) {
        struct sockaddr_un sa;
        socklen_t len = rank_address(name, c->rank, &sa);
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, len) != 0 ||
            listen(lfd, c->nranks) != 0)
            status = dd_fail(SWY_ERR_TRANSPORT, "devdouble comm_init: rank "
                             "%d: listening socket: %s", c->rank,
                             strerror(errno));
    }
    for (int r = 0; r < c->rank && status == SWY_OK; r++)
        status = connect_rank(c, name, r, deadline, timeout_s);
    for (int r = c->rank + 1; r < c->nranks && status == SWY_OK; r++)
        status = accept_rank(c, lfd, deadline, timeout_s);
    if (lfd >= 0)
        close(lfd);
    return status;
}

/* Free a communicator whose stream is gone (or was never made). */
static void coll_free(dd_coll_t *c)
{
    for (int r = 0; c->fds != NULL && r < c->nranks; r++)
        if (c->fds[r] >= 0)
            close(c->fds[r]);
    free(c->fds);
    free(c->pfds);
    free(c->pfd_rank);
    free(c->srcs);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

static swy_status_t dd_coll_comm_init(const void *id, int nranks, int rank,
                                      int priority, double timeout_s,
                                      void **comm_p)
{
    const char *name = id != NULL ? (const char *)id + 1 : NULL;
    if (id == NULL || comm_p == NULL || nranks < 1 || rank < 0 ||
        rank >= nranks || !(timeout_s >= 0))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble comm_init: rank %d "
                       "of %d, timeout %g s, id %p, comm_p %p", rank, nranks,
                       timeout_s, id, (void *)comm_p);
    size_t name_len = strnlen(name, DD_COLL_ID_BYTES - 1);
    if (((const char *)id)[0] != '\0' || name_len == 0 ||
        name_len > DD_COLL_NAME_MAX)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble comm_init: the id is "
                       "not one of this double's unique_id");
    dd_coll_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble comm_init: no memory");
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->rank = rank;
    c->nranks = nranks;
    c->priority = priority;
    memcpy(c->name, name, name_len);
    c->fds = malloc((size_t)nranks * sizeof(*c->fds));
    c->pfds = malloc((size_t)nranks * sizeof(*c->pfds));
    c->pfd_rank = malloc((size_t)nranks * sizeof(*c->pfd_rank));
    c->srcs = malloc((size_t)nranks * sizeof(*c->srcs));
    for (int r = 0; c->fds != NULL && r < nranks; r++)
        c->fds[r] = -1;
    if (c->fds == NULL || c->pfds == NULL || c->pfd_rank == NULL ||
        c->srcs == NULL) {
        coll_free(c);
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble comm_init: no memory");
    }
    swy_status_t status = connect_mesh(c, name, timeout_s);
    if (status == SWY_OK && (c->stream = swy_devdouble_stream_create()) ==
                                NULL)
        status = dd_fail(SWY_ERR_NO_MEMORY, "devdouble comm_init: no "
                         "stream");
    if (status != SWY_OK) {
        coll_free(c);
        return status;
    }
    *comm_p = c;
    return SWY_OK;
}

/* buf, bytes long, must be this double's "device memory". */
static swy_status_t check_device(int i, const swy_devcoll_call_v1_t *call,
                                 const char *what, const void *buf,
                                 size_t bytes)
{
    if (bytes == 0 || in_device(buf, bytes))
        return SWY_OK;
    return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d (%s): "
                   "%s %p of %zu bytes is not device memory of this double",
                   i, dd_kind_names[call->kind], what, buf, bytes);
}

/* The checks of call i, as NCCL's: its bytes in *bytes_p. A buffer the
 * call does not use on this rank (a REDUCE's recvbuf, a BROADCAST's
 * sendbuf off the root) may be anything. */
static swy_status_t check_call(const dd_coll_t *c, int i,
                               const swy_devcoll_call_v1_t *call,
                               size_t *bytes_p)
{
    int kind = call->kind;
    if (kind < SWY_DEVCOLL_ALLREDUCE || kind > SWY_DEVCOLL_RECV)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d: "
                       "kind %d is not a swy_devcoll_kind_t", i, kind);
    size_t dsize = dd_dtype_size(call->dtype);
    if (dsize == 0)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d "
                       "(%s): dtype %d is not a swy_dtype_t", i,
                       dd_kind_names[kind], (int)call->dtype);
    int reduces = kind == SWY_DEVCOLL_ALLREDUCE || kind == SWY_DEVCOLL_REDUCE;
    if (reduces && ((int)call->redop < SWY_SUM || call->redop > SWY_AVG))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d "
                       "(%s): redop %d is not a swy_redop_t", i,
                       dd_kind_names[kind], (int)call->redop);
    if (kind != SWY_DEVCOLL_ALLREDUCE &&
        (call->root < 0 || call->root >= c->nranks))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d "
                       "(%s): root or peer %d is not a rank of %d", i,
                       dd_kind_names[kind], (int)call->root, c->nranks);
    if (call->count > SIZE_MAX / dsize)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d "
                       "(%s): %zu elements of %zu bytes overflow", i,
                       dd_kind_names[kind], call->count, dsize);
    size_t bytes = call->count * dsize;
    int root = call->root == c->rank;
    int sends = kind != SWY_DEVCOLL_RECV &&
                (kind != SWY_DEVCOLL_BROADCAST || root);
    int receives = kind != SWY_DEVCOLL_SEND &&
                   (kind != SWY_DEVCOLL_REDUCE || root);
    swy_status_t status = SWY_OK;
    if (sends)
        status = check_device(i, call, "sendbuf", call->sendbuf, bytes);
    if (receives && status == SWY_OK)
        status = check_device(i, call, "recvbuf", call->recvbuf, bytes);
    *bytes_p = bytes;
    return status;
}

static void add_seg(dd_seg_t *segs, int *n, int call, int cls,
                    const void *buf, size_t len)
{
    segs[(*n)++] = (dd_seg_t){(char *)buf, len, call, cls};
}

/* Where rank r's contribution to call i lands: its slot of tmp[i]
 * (NULL for a call of no bytes). */
static char *peer_slot(const dd_coll_t *c, const dd_coll_job_t *job, int i,
                       int r, size_t bytes)
{
    if (job->tmp[i] == NULL)
        return NULL;
    return job->tmp[i] + (size_t)(r < c->rank ? r : r - 1) * bytes;
}

/* The segments of call i, to and from each peer, as NCCL moves them:
 * ALLREDUCE sends to all and receives from all; REDUCE sends to the root,
 * which receives from all; BROADCAST the other way. */
static void plan_call(const dd_coll_t *c, dd_coll_job_t *job, int i,
                      size_t bytes)
{
    const swy_devcoll_call_v1_t *call = &job->calls[i];
    int me = c->rank, root = call->root;
    for (int r = 0; r < c->nranks; r++) {
        dd_coll_peer_t *p = &job->peers[r];
        int coll_in = 0, coll_out = 0;
        switch (call->kind) {
        case SWY_DEVCOLL_ALLREDUCE:
            coll_in = coll_out = r != me;
            break;
        case SWY_DEVCOLL_REDUCE:
            coll_in = root == me && r != me;
            coll_out = root != me && r == root;
            break;
        case SWY_DEVCOLL_BROADCAST:
            coll_in = root != me && r == root;
            coll_out = root == me && r != me;
            break;
        case SWY_DEVCOLL_SEND:
            if (r == root)
                add_seg(p->out, &p->n_out, i, DD_FRAME_P2P, call->sendbuf,
                        bytes);
            break;
        case SWY_DEVCOLL_RECV:
            if (r == root)
                add_seg(p->in[DD_FRAME_P2P], &p->n_in[DD_FRAME_P2P], i,
                        DD_FRAME_P2P, call->recvbuf, bytes);
            break;
        }
        if (coll_out)
            add_seg(p->out, &p->n_out, i, DD_FRAME_COLL, call->sendbuf, bytes);
        if (coll_in)
            add_seg(p->in[DD_FRAME_COLL], &p->n_in[DD_FRAME_COLL], i,
                    DD_FRAME_COLL,
                    call->kind == SWY_DEVCOLL_BROADCAST
                        ? call->recvbuf
                        : peer_slot(c, job, i, r, bytes),
                    bytes);
    }
}

static void job_free(dd_coll_job_t *job)
{
    for (int i = 0; job->tmp != NULL && i < job->ncalls; i++)
        free(job->tmp[i]);
    free(job->tmp);
    free(job->segs);
    free(job->peers);
    free(job->calls);
    free(job);
}

/* Check calls[0..ncalls-1] and plan them into a new job. */
static swy_status_t job_create(const dd_coll_t *c,
                               const swy_devcoll_call_v1_t *calls, int ncalls,
                               dd_coll_job_t **job_p)
{
    size_t w = (size_t)c->nranks, n = ncalls > 0 ? (size_t)ncalls : 1;
    dd_coll_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble launch: no memory");
    job->ncalls = ncalls;
    job->calls = malloc(n * sizeof(*job->calls));
    job->tmp = calloc(n, sizeof(*job->tmp));
    job->peers = calloc(w, sizeof(*job->peers));
    job->segs = malloc(w * 3 * n * sizeof(*job->segs));
    if (job->calls == NULL || job->tmp == NULL || job->peers == NULL ||
        job->segs == NULL) {
        job_free(job);
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble launch: no memory");
    }
    if (ncalls > 0)
        memcpy(job->calls, calls, (size_t)ncalls * sizeof(*calls));
    /* A call adds at most one segment per peer, direction and class. */
    for (size_t r = 0; r < w; r++) {
        job->peers[r].out = job->segs + 3 * r * n;
        job->peers[r].in[DD_FRAME_COLL] = job->segs + (3 * r + 1) * n;
        job->peers[r].in[DD_FRAME_P2P] = job->segs + (3 * r + 2) * n;
    }
    swy_status_t status = SWY_OK;
    for (int i = 0; i < ncalls && status == SWY_OK; i++) {
        const swy_devcoll_call_v1_t *call = &job->calls[i];
        size_t bytes = 0;
        status = check_call(c, i, call, &bytes);
        int gathers = call->kind == SWY_DEVCOLL_ALLREDUCE ||
                      (call->kind == SWY_DEVCOLL_REDUCE &&
                       call->root == c->rank);
        if (status == SWY_OK && gathers && w > 1 && bytes > 0 &&
            (bytes > SIZE_MAX / (w - 1) ||
             (job->tmp[i] = malloc((w - 1) * bytes)) == NULL))
            status = dd_fail(SWY_ERR_NO_MEMORY, "devdouble launch: call %d "
                             "(%s): no memory for %zu contributions of %zu "
                             "bytes", i, dd_kind_names[call->kind], w - 1,
                             bytes);
        if (status == SWY_OK)
            plan_call(c, job, i, bytes);
    }
    /* The sends to this rank and the receives from it pair up in order:
     * each pair must agree on the bytes, or NCCL would wait forever. */
    const dd_coll_peer_t *self = &job->peers[c->rank];
    const dd_seg_t *sends = self->out, *recvs = self->in[DD_FRAME_P2P];
    if (status == SWY_OK && self->n_out != self->n_in[DD_FRAME_P2P])
        status = dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: %d send(s) "
                         "to this rank, %d receive(s) from it", self->n_out,
                         self->n_in[DD_FRAME_P2P]);
    for (int k = 0; status == SWY_OK && k < self->n_out; k++)
        if (sends[k].len != recvs[k].len)
            status = dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: call %d"
                             " sends %zu bytes to this rank, its receive "
                             "(call %d) takes %zu", sends[k].call,
                             sends[k].len, recvs[k].call, recvs[k].len);
    if (status != SWY_OK) {
        job_free(job);
        return status;
    }
    *job_p = job;
    return SWY_OK;
}

/* The connection to peer failed in a job: because of comm_abort (which
 * shut the sockets down), or the peer died or aborted. */
static swy_status_t link_failed(const dd_coll_t *c, int peer, const char *why)
{
    if (atomic_load(&c->aborted))
        return dd_fail(SWY_ERR_ABORTED, "devdouble: communicator aborted");
    return dd_fail(SWY_ERR_TRANSPORT, "devdouble launch: rank %d: connection"
                   " to rank %d: %s", c->rank, peer, why);
}

/* Write what the socket takes of p's frames. */
static swy_status_t peer_send(const dd_coll_t *c, int peer, dd_coll_peer_t *p)
{
    while (p->out_next < p->n_out) {
        const dd_seg_t *seg = &p->out[p->out_next];
        dd_frame_t hdr = {(uint64_t)seg->cls, seg->len};
        size_t hs = sizeof(hdr), body = p->out_sent > hs ? p->out_sent - hs
                                                         : 0;
        struct iovec iov[2];
        int niov = 0;
        if (p->out_sent < hs)
            iov[niov++] = (struct iovec){(char *)&hdr + p->out_sent,
                                         hs - p->out_sent};
        if (body < seg->len)
            iov[niov++] = (struct iovec){seg->buf + body, seg->len - body};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(c->fds[peer], &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return SWY_OK;
        if (n < 0)
            return link_failed(c, peer, strerror(errno));
        p->out_sent += (size_t)n;
        if (p->out_sent == hs + seg->len) {
            p->out_next++;
            p->out_sent = 0;
        }
    }
    return SWY_OK;
}

static int in_pending(const dd_coll_peer_t *p)
{
    return p->in_next[DD_FRAME_COLL] < p->n_in[DD_FRAME_COLL] ||
           p->in_next[DD_FRAME_P2P] < p->n_in[DD_FRAME_P2P];
}

/* The segment that the frame header from peer is for: the next one of
 * its class, of the same length. */
static swy_status_t match_frame(const dd_coll_t *c,
                                const dd_coll_job_t *job, int peer,
                                dd_coll_peer_t *p)
{
    uint64_t cls = p->in_hdr.tag, len = p->in_hdr.len;
    if (cls >= DD_FRAME_CLASSES || p->in_next[cls] >= p->n_in[cls])
        return dd_fail(SWY_ERR_MISMATCH, "devdouble launch: rank %d sent "
                       "rank %d a frame (class %llu, %llu bytes) that no "
                       "call of this launch receives", peer, c->rank,
                       (unsigned long long)cls, (unsigned long long)len);
    dd_seg_t *seg = &p->in[cls][p->in_next[cls]];
    if (len != seg->len)
        return dd_fail(SWY_ERR_MISMATCH, "devdouble launch: rank %d: call %d"
                       " (%s) receives %zu bytes from rank %d, which sent "
                       "%llu", c->rank, seg->call,
                       dd_kind_names[job->calls[seg->call].kind], seg->len, peer,
                       (unsigned long long)len);
    p->filling = seg;
    return SWY_OK;
}

/* Read what arrived from peer: frame headers, each body straight into
 * its segment. Never past the last frame of this job: the next job's
 * frames stay on the socket. */
static swy_status_t peer_recv(const dd_coll_t *c, const dd_coll_job_t *job,
                              int peer, dd_coll_peer_t *p)
{
    while (in_pending(p)) {
        int header = p->filling == NULL;
        size_t full = header ? sizeof(p->in_hdr) : p->filling->len;
        if (p->in_got < full) {
            char *dst = header ? (char *)&p->in_hdr : p->filling->buf;
            ssize_t n = recv(c->fds[peer], dst + p->in_got, full - p->in_got,
                             0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return SWY_OK;
            if (n <= 0)
                return link_failed(c, peer, n == 0 ? "closed by the peer "
                                   "(it died, aborted or left)"
                                   : strerror(errno));
            p->in_got += (size_t)n;
            continue;
        }
        p->in_got = 0;
        if (header) {
            swy_status_t status = match_frame(c, job, peer, p);
            if (status != SWY_OK)
                return status;
        } else {
            p->in_next[p->filling->cls]++;
            p->filling = NULL;
        }
    }
    return SWY_OK;
}

/* Move every frame of the job, all peers at once. */
static swy_status_t job_move(dd_coll_t *c, dd_coll_job_t *job)
{
    for (;;) {
        if (atomic_load(&c->aborted))
            return dd_fail(SWY_ERR_ABORTED, "devdouble: communicator "
                           "aborted");
        nfds_t n = 0;
        for (int r = 0; r < c->nranks; r++) {
            const dd_coll_peer_t *p = &job->peers[r];
            short events = (short)((p->out_next < p->n_out ? POLLOUT : 0) |
                                   (in_pending(p) ? POLLIN : 0));
            if (r == c->rank || events == 0)
                continue;
            c->pfds[n] = (struct pollfd){c->fds[r], events, 0};
            c->pfd_rank[n++] = r;
        }
        if (n == 0)
            return SWY_OK;
        /* Bounded, so that the abort flag is looked at even if nothing
         * wakes the poll (comm_abort's shutdown() should). */
        if (poll(c->pfds, n, DD_COLL_POLL_MS) < 0 && errno != EINTR)
            return dd_fail(SWY_ERR_TRANSPORT, "devdouble launch: poll: %s",
                           strerror(errno));
        for (nfds_t k = 0; k < n; k++) {
            short ready = c->pfds[k].revents, asked = c->pfds[k].events;
            int r = c->pfd_rank[k];
            swy_status_t status = SWY_OK;
            /* An error or a hang-up shows on the next send or receive. */
            if ((asked & POLLOUT) && (ready & (POLLOUT | POLLERR | POLLHUP)))
                status = peer_send(c, r, &job->peers[r]);
            if (status == SWY_OK && (asked & POLLIN) &&
                (ready & (POLLIN | POLLERR | POLLHUP)))
                status = peer_recv(c, job, r, &job->peers[r]);
            if (status != SWY_OK)
                return status;
        }
    }
}

/* After the moves: the copies to self, then the reductions (in rank
 * order, this rank's own contribution from its sendbuf) and the root's
 * copy of a BROADCAST, in call order. */
static void job_finish(dd_coll_t *c, dd_coll_job_t *job)
{
    const dd_coll_peer_t *self = &job->peers[c->rank];
    for (int k = 0; k < self->n_out; k++)
        if (self->out[k].len > 0)
            memmove(self->in[DD_FRAME_P2P][k].buf, self->out[k].buf,
                    self->out[k].len);
    for (int i = 0; i < job->ncalls; i++) {
        const swy_devcoll_call_v1_t *call = &job->calls[i];
        size_t bytes = call->count * dd_dtype_size(call->dtype);
        int root = call->root == c->rank;
        if (call->kind == SWY_DEVCOLL_ALLREDUCE ||
            (call->kind == SWY_DEVCOLL_REDUCE && root)) {
            for (int r = 0; r < c->nranks; r++)
                c->srcs[r] = r == c->rank ? call->sendbuf
                                          : peer_slot(c, job, i, r, bytes);
            dd_reduce(call->recvbuf, c->srcs, c->nranks, call->count,
                      call->dtype, call->redop);
        } else if (call->kind == SWY_DEVCOLL_BROADCAST && root &&
                   call->recvbuf != call->sendbuf && bytes > 0) {
            memmove(call->recvbuf, call->sendbuf, bytes);
        }
    }
}

/* A launch's work on the communicator's stream: the oldest launched job,
 * unless comm_abort has them (it fails them itself). */
static void job_run(void *arg)
{
    dd_coll_t *c = arg;
    pthread_mutex_lock(&c->lock);
    dd_coll_job_t *job = atomic_load(&c->aborted) ? NULL : c->head;
    if (job != NULL) {
        c->head = job->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->running = 1;
    }
    pthread_mutex_unlock(&c->lock);
    if (job == NULL)
        return;
    swy_status_t status = c->broken;
    /* SWYTEST_DEVDOUBLE_STALL=1 in a process: its launches never move, as
     * a GPU kernel that hangs, until comm_abort. */
    const char *stall = getenv("SWYTEST_DEVDOUBLE_STALL");
    if (status == SWY_OK && stall != NULL && strcmp(stall, "1") == 0) {
        while (!atomic_load(&c->aborted)) {
            struct timespec ms = {0, 10 * 1000 * 1000};
            nanosleep(&ms, NULL);
        }
        status = SWY_ERR_ABORTED;
    }
    if (status == SWY_OK) {
        status = job_move(c, job);
        if (status == SWY_OK) {
            job_finish(c, job);
        } else if (status != SWY_ERR_ABORTED) {
            /* The sockets' bytes no longer line up with the calls: the
             * launches after this one fail too, as on an NCCL
             * communicator with an asynchronous error. done carries no
             * text, hence stderr. */
            c->broken = status;
            fprintf(stderr, "%s\n", dd_error);
        }
    }
    job->done(job->arg, status);
    job_free(job);
    pthread_mutex_lock(&c->lock);
    c->running = 0;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static swy_status_t dd_coll_launch(void *comm,
                                   const swy_devcoll_call_v1_t *calls,
                                   int ncalls, swy_devcoll_done_cb_v1_t done,
                                   void *arg)
{
    dd_coll_t *c = comm;
    if (c == NULL || done == NULL || ncalls < 0 ||
        (ncalls > 0 && calls == NULL))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble launch: comm %p, "
                       "%d calls at %p, done %s", comm, ncalls,
                       (const void *)calls, done != NULL ? "set" : "NULL");
    if (atomic_load(&c->aborted))
        return dd_fail(SWY_ERR_ABORTED, "devdouble launch: the communicator"
                       " was aborted");
    dd_coll_job_t *job = NULL;
    swy_status_t status = job_create(c, calls, ncalls, &job);
    if (status != SWY_OK)
        return status;
    job->done = done;
    job->arg = arg;
    /* The stream's work and the job are queued together, under the lock
     * that job_run takes first: each work runs the oldest job. */
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->aborted))
        status = dd_fail(SWY_ERR_ABORTED, "devdouble launch: the "
                         "communicator was aborted");
    else if (swy_devdouble_launch(c->stream, job_run, c) != 0)
        status = dd_fail(SWY_ERR_NO_MEMORY, "devdouble launch: no memory");
    if (status == SWY_OK) {
        if (c->tail != NULL)
            c->tail->next = job;
        else
            c->head = job;
        c->tail = job;
        atomic_fetch_add(&coll_launches, 1);
    }
    pthread_mutex_unlock(&c->lock);
    if (status != SWY_OK)
        job_free(job);
    return status;
}

static void dd_coll_comm_abort(void *comm)
{
    dd_coll_t *c = comm;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    atomic_store(&c->aborted, 1);
    /* Wakes a job in poll(): its sockets, and the peers', read the end. */
    for (int r = 0; r < c->nranks; r++)
        if (c->fds[r] >= 0)
            shutdown(c->fds[r], SHUT_RDWR);
    while (c->running)
        pthread_cond_wait(&c->cond, &c->lock);
    dd_coll_job_t *queued = c->head;
    c->head = c->tail = NULL;
    pthread_mutex_unlock(&c->lock);
    while (queued != NULL) {
        dd_coll_job_t *next = queued->next;
        queued->done(queued->arg, SWY_ERR_ABORTED);
        job_free(queued);
        queued = next;
    }
}

static void dd_coll_comm_destroy(void *comm)
{
    dd_coll_t *c = comm;
    if (c == NULL)
        return;
    swy_devdouble_stream_destroy(c->stream);
    coll_free(c);
}

/* The id of a communicator made by split number `split` of the
 * communicator named parent: for color < 0 the one every rank of the
 * parent joins to trade colors and keys, else that color's. Every rank
 * derives the same (FNV-1a), of a fixed length however deep the splits. */
static void split_id(char *id, const char *parent, unsigned split,
                     int color)
{
    uint64_t h = 0xcbf29ce484222325ull;
    char tail[32];
    snprintf(tail, sizeof(tail), "/%u/%d", split, color);
    for (const char *p = parent; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (const char *p = tail; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    memset(id, 0, DD_COLL_ID_BYTES);
    snprintf(id + 1, DD_COLL_NAME_MAX + 1, "swy-devsplit-%016llx",
             (unsigned long long)h);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    swy_status_t status;
} split_wait_t;

static void split_done(void *arg, swy_status_t status)
{
    split_wait_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

typedef struct {
    int32_t key;
    int rank;
} split_member_t;

static int split_member_cmp(const void *a, const void *b)
{
    const split_member_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* As ncclCommSplit. The colors and keys go round on a communicator of
 * the parent's ranks made for it (the parent's sockets belong to its
 * stream, where launches may be running); then the ranks of each color
 * join a communicator whose id they all derive. */
static swy_status_t dd_coll_comm_split(void *parent, int color, int key,
                                       int priority, double timeout_s,
                                       void **comm_p)
{
    dd_coll_t *p = parent;
    if (p == NULL || comm_p == NULL || !(timeout_s >= 0))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble comm_split: parent "
                       "%p, comm_p %p, timeout %g s", parent, (void *)comm_p,
                       timeout_s);
    *comm_p = NULL;
    int n = p->nranks;
    unsigned split = p->splits++;
    char id[DD_COLL_ID_BYTES];
    split_id(id, p->name, split, -1);
    void *all_comm;
    swy_status_t status = dd_coll_comm_init(id, n, p->rank, priority,
                                            timeout_s, &all_comm);
    if (status != SWY_OK)
        return status;
    int32_t *ck = swy_devdouble_alloc(2 * (size_t)n * sizeof(int32_t));
    swy_devcoll_call_v1_t *calls = calloc((size_t)n, sizeof(*calls));
    split_member_t *members = calloc((size_t)n, sizeof(*members));
    if (ck == NULL || calls == NULL || members == NULL)
        status = dd_fail(SWY_ERR_NO_MEMORY, "devdouble comm_split: no "
                         "memory");
    split_wait_t w = {.status = SWY_OK};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    if (status == SWY_OK) {
        ck[2 * p->rank] = color < 0 ? -1 : color;
        ck[2 * p->rank + 1] = key;
        for (int r = 0; r < n; r++)
            calls[r] = (swy_devcoll_call_v1_t){
                .kind = SWY_DEVCOLL_BROADCAST, .root = r,
                .dtype = SWY_INT32, .sendbuf = &ck[2 * r],
                .recvbuf = &ck[2 * r], .count = 2};
        status = dd_coll_launch(all_comm, calls, n, split_done, &w);
    }
    if (status == SWY_OK) {
        pthread_mutex_lock(&w.lock);
        while (!w.done)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        status = w.status;
    }
    dd_coll_comm_destroy(all_comm);
    int count = 0, rank = -1;
    if (status == SWY_OK && color >= 0) {
        for (int r = 0; r < n; r++)
            if (ck[2 * r] == color)
                members[count++] = (split_member_t){ck[2 * r + 1], r};
        qsort(members, (size_t)count, sizeof(*members), split_member_cmp);
        for (int i = 0; i < count; i++)
            if (members[i].rank == p->rank)
                rank = i;
        split_id(id, p->name, split, color);
        status = dd_coll_comm_init(id, count, rank, priority, timeout_s,
                                   comm_p);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    swy_devdouble_free(ck);
    free(calls);
    free(members);
    return status;
}

DD_EXPORT const swy_devcoll_v1_t swy_devcoll_plugin_v1 = {
    .abi_version = SWY_DEVCOLL_ABI_V1,
    .struct_size = sizeof(swy_devcoll_v1_t),
    .name = DD_NAME,
    .id_bytes = DD_COLL_ID_BYTES,
    .unique_id = dd_coll_unique_id,
    .comm_init = dd_coll_comm_init,
    .comm_destroy = dd_coll_comm_destroy,
    .comm_abort = dd_coll_comm_abort,
    .launch = dd_coll_launch,
    .error_string = dd_error_string,
    .comm_split = dd_coll_comm_split,
};
#endif /* DD_FIRST_RELEASE */

#ifndef DD_FIRST_RELEASE
/* ---- MoE row kernels on device memory (swy_devmoe_plugin_v1) ------ */

/* A kernel is work on the stream's thread with its scalars copied into a
 * job. The arithmetic is lib/moe/rows.c's, term for term (fp32 sums in
 * slot order, rounded once; dot products in double), so that the tests
 * can compare the rows bitwise with the library's host path. Arrays of
 * known length are checked at the call, as the real plugin's launch
 * would fault on them; rows reached through an index are checked when
 * the job reads them: a row outside device memory is a fault that, as
 * CUDA's illegal address, fails every later call of this table. */

static pthread_mutex_t dm_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int dm_faulted;
static char dm_fault[160];

static swy_status_t dm_check_fault(const char *fn)
{
    if (!atomic_load(&dm_faulted))
        return SWY_OK;
    pthread_mutex_lock(&dm_fault_lock);
    swy_status_t status = dd_fail(SWY_ERR_TRANSPORT, "devdouble %s: an "
                                  "earlier kernel faulted: %s", fn, dm_fault);
    pthread_mutex_unlock(&dm_fault_lock);
    return status;
}

/* Row r of base (rb bytes a row), or NULL after recording a fault. */
static char *dm_row(const void *base, int32_t r, size_t rb, const char *fn,
                    const char *what)
{
    char *row = (char *)((uintptr_t)base + (uintptr_t)r * rb);
    if (in_device(row, rb))
        return row;
    pthread_mutex_lock(&dm_fault_lock);
    if (!atomic_load(&dm_faulted)) {
        snprintf(dm_fault, sizeof(dm_fault), "%s: row %d of %s (%p) is "
                 "outside device memory (illegal address)", fn, (int)r,
                 what, base);
        fprintf(stderr, "devdouble: %s\n", dm_fault);
        atomic_store(&dm_faulted, 1);
    }
    pthread_mutex_unlock(&dm_fault_lock);
    return NULL;
}

/* Element h of an fp32 or bf16 row, as fp32, and back: swy_moe_get and
 * swy_moe_put (lib/moe/moe_impl.h). */
static float dm_get(int bf16, const char *row, size_t h)
{
    uint16_t b;
    float f;
    if (bf16) {
        memcpy(&b, row + 2 * h, 2);
        return swy_bf16_to_float(b);
    }
    memcpy(&f, row + 4 * h, 4);
    return f;
}

static void dm_put(int bf16, char *row, size_t h, float v)
{
    if (bf16) {
        uint16_t b = swy_float_to_bf16(v);
        memcpy(row + 2 * h, &b, 2);
    } else {
        memcpy(row + 4 * h, &v, 4);
    }
}

typedef struct {
    const char *fn;            /* the table's function, for a fault */
    int bf16, S, k;            /* S: tokens, or rows of gather_rows */
    size_t H, rb;              /* elements and bytes a row */
    const char *in;            /* x, dsend, src or rows */
    const int32_t *row;        /* row_of_slot or src_row */
    const float *w;            /* topk_w */
    const char *g;             /* dout */
    char *out;                 /* send, dx, dst, out or drows */
    float *dw;                 /* dtopk_w */
    float acc[];               /* H: a token's sum */
} dm_job_t;

static swy_status_t dm_check_sizes(const char *fn, int S, int k, int H)
{
    if (S < 0 || k < 0 || H < 0)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: a negative size "
                       "(S %d, k %d, H %d)", fn, S, k, H);
    return SWY_OK;
}

static swy_status_t dm_check_dtype(const char *fn, swy_dtype_t dtype)
{
    if (dtype != SWY_FLOAT32 && dtype != SWY_BFLOAT16)
        return dd_fail(SWY_ERR_UNSUPPORTED, "devdouble %s: dtype %d is not "
                       "supported (rows are SWY_FLOAT32 or SWY_BFLOAT16)",
                       fn, (int)dtype);
    return SWY_OK;
}

/* bytes of device memory at p; 0 for rows reached through an index,
 * whose number the call does not give (the job checks each). */
static swy_status_t dm_check_array(const char *fn, const char *name,
                                   const void *p, size_t bytes)
{
    if (p == NULL)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: %s is NULL with "
                       "rows to touch", fn, name);
    if (bytes == 0 && !in_device(p, 1))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: %s (%p) is not "
                       "device memory", fn, name, p);
    if (bytes > 0 && !in_device(p, bytes))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: %s (%p) is not "
                       "%zu bytes of device memory", fn, name, p, bytes);
    return SWY_OK;
}

static dm_job_t *dm_job_create(const char *fn, swy_dtype_t dtype, int S,
                               int k, int H, size_t acc_elems)
{
    dm_job_t *job = calloc(1, sizeof(*job) + acc_elems * sizeof(float));
    if (job == NULL) {
        dd_fail(SWY_ERR_NO_MEMORY, "devdouble %s: no memory", fn);
        return NULL;
    }
    job->fn = fn;
    job->bf16 = dtype == SWY_BFLOAT16;
    job->S = S;
    job->k = k;
    job->H = (size_t)H;
    job->rb = (size_t)H * (job->bf16 ? 2 : 4);
    return job;
}

static swy_status_t dm_launch(void *stream, void (*run)(void *), void *job,
                              const char *fn)
{
    if (swy_devdouble_launch(stream, run, job) != 0) {
        free(job);
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble %s: no stream (out of "
                       "memory)", fn);
    }
    return SWY_OK;
}

static void dm_pack_run(void *arg)
{
    dm_job_t *j = arg;
    for (int t = 0; t < j->S; t++)
        for (int s = 0; s < j->k; s++) {
            int32_t r = j->row[(size_t)t * j->k + s];
            char *dst = r >= 0 ? dm_row(j->out, r, j->rb, j->fn, "send")
                               : NULL;
            if (dst != NULL)
                memcpy(dst, j->in + (size_t)t * j->rb, j->rb);
        }
    free(j);
}

static swy_status_t dm_pack(void *stream, swy_dtype_t dtype, const void *x,
                            const int32_t *row_of_slot, int S, int k, int H,
                            void *send)
{
    static const char fn[] = "pack";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK ||
        (status = dm_check_sizes(fn, S, k, H)) != SWY_OK ||
        (status = dm_check_dtype(fn, dtype)) != SWY_OK)
        return status;
    if (S == 0 || k == 0 || H == 0)
        return SWY_OK;
    size_t rb = (size_t)H * (dtype == SWY_BFLOAT16 ? 2 : 4);
    if ((status = dm_check_array(fn, "x", x, (size_t)S * rb)) != SWY_OK ||
        (status = dm_check_array(fn, "row_of_slot", row_of_slot,
                                 (size_t)S * k * 4)) != SWY_OK ||
        (status = dm_check_array(fn, "send", send, 0)) != SWY_OK)
        return status;
    dm_job_t *job = dm_job_create(fn, dtype, S, k, H, 0);
    if (job == NULL)
        return SWY_ERR_NO_MEMORY;
    job->in = x;
    job->row = row_of_slot;
    job->out = send;
    return dm_launch(stream, dm_pack_run, job, fn);
}

/* swy_moe_dispatch_backward_finish: acc += 1 * row per kept slot. */
static void dm_pack_bwd_run(void *arg)
{
    dm_job_t *j = arg;
    const float wf = 1.0f;
    for (int t = 0; t < j->S; t++) {
        memset(j->acc, 0, j->H * sizeof(float));
        for (int s = 0; s < j->k; s++) {
            int32_t r = j->row[(size_t)t * j->k + s];
            const char *row = r >= 0 ? dm_row(j->in, r, j->rb, j->fn,
                                              "dsend")
                                     : NULL;
            if (row == NULL)
                continue;
            for (size_t h = 0; h < j->H; h++)
                j->acc[h] += wf * dm_get(j->bf16, row, h);
        }
        char *dx = j->out + (size_t)t * j->rb;
        for (size_t h = 0; h < j->H; h++)
            dm_put(j->bf16, dx, h, j->acc[h]);
    }
    free(j);
}

static swy_status_t dm_pack_bwd(void *stream, swy_dtype_t dtype,
                                const void *dsend, const int32_t *row_of_slot,
                                int S, int k, int H, void *dx)
{
    static const char fn[] = "pack_bwd";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK ||
        (status = dm_check_sizes(fn, S, k, H)) != SWY_OK ||
        (status = dm_check_dtype(fn, dtype)) != SWY_OK)
        return status;
    if (S == 0 || H == 0)
        return SWY_OK;
    size_t rb = (size_t)H * (dtype == SWY_BFLOAT16 ? 2 : 4);
    if ((status = dm_check_array(fn, "dx", dx, (size_t)S * rb)) != SWY_OK)
        return status;
    if (k > 0 &&
        ((status = dm_check_array(fn, "row_of_slot", row_of_slot,
                                  (size_t)S * k * 4)) != SWY_OK ||
         (status = dm_check_array(fn, "dsend", dsend, 0)) != SWY_OK))
        return status;
    dm_job_t *job = dm_job_create(fn, dtype, S, k, H, (size_t)H);
    if (job == NULL)
        return SWY_ERR_NO_MEMORY;
    job->in = dsend;
    job->row = row_of_slot;
    job->out = dx;
    return dm_launch(stream, dm_pack_bwd_run, job, fn);
}

static void dm_gather_rows_run(void *arg)
{
    dm_job_t *j = arg;
    for (int i = 0; i < j->S; i++) {
        char *dst = j->out + (size_t)i * j->rb;
        int32_t s = j->row[i];
        const char *src = s >= 0 ? dm_row(j->in, s, j->rb, j->fn, "src")
                                 : NULL;
        if (src != NULL)
            memcpy(dst, src, j->rb);
        else if (s < 0) /* -1: a row no source maps to */
            memset(dst, 0, j->rb);
    }
    free(j);
}

static swy_status_t dm_gather_rows(void *stream, swy_dtype_t dtype,
                                   const void *src, const int32_t *src_row,
                                   int n, int H, void *dst)
{
    static const char fn[] = "gather_rows";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK)
        return status;
    if (n < 0 || H < 0)
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: a negative size "
                       "(n %d, H %d)", fn, n, H);
    if ((status = dm_check_dtype(fn, dtype)) != SWY_OK)
        return status;
    if (n == 0 || H == 0)
        return SWY_OK;
    size_t rb = (size_t)H * (dtype == SWY_BFLOAT16 ? 2 : 4);
    if ((status = dm_check_array(fn, "src_row", src_row,
                                 (size_t)n * 4)) != SWY_OK ||
        (status = dm_check_array(fn, "dst", dst, (size_t)n * rb)) != SWY_OK ||
        (status = dm_check_array(fn, "src", src, 0)) != SWY_OK)
        return status;
    dm_job_t *job = dm_job_create(fn, dtype, n, 0, H, 0);
    if (job == NULL)
        return SWY_ERR_NO_MEMORY;
    job->in = src;
    job->row = src_row;
    job->out = dst;
    return dm_launch(stream, dm_gather_rows_run, job, fn);
}

/* swy_moe_combine_finish: acc += topk_w * row per kept slot. */
static void dm_combine_fwd_run(void *arg)
{
    dm_job_t *j = arg;
    for (int t = 0; t < j->S; t++) {
        memset(j->acc, 0, j->H * sizeof(float));
        for (int s = 0; s < j->k; s++) {
            size_t slot = (size_t)t * j->k + s;
            int32_t r = j->row[slot];
            const char *row = r >= 0 ? dm_row(j->in, r, j->rb, j->fn, "rows")
                                     : NULL;
            if (row == NULL)
                continue;
            float wf = j->w[slot];
            for (size_t h = 0; h < j->H; h++)
                j->acc[h] += wf * dm_get(j->bf16, row, h);
        }
        char *out = j->out + (size_t)t * j->rb;
        for (size_t h = 0; h < j->H; h++)
            dm_put(j->bf16, out, h, j->acc[h]);
    }
    free(j);
}

static swy_status_t dm_combine_fwd(void *stream, swy_dtype_t dtype,
                                   const void *rows,
                                   const int32_t *row_of_slot,
                                   const float *topk_w, int S, int k, int H,
                                   void *out)
{
    static const char fn[] = "combine_fwd";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK ||
        (status = dm_check_sizes(fn, S, k, H)) != SWY_OK ||
        (status = dm_check_dtype(fn, dtype)) != SWY_OK)
        return status;
    if (S == 0 || H == 0)
        return SWY_OK;
    size_t rb = (size_t)H * (dtype == SWY_BFLOAT16 ? 2 : 4);
    if ((status = dm_check_array(fn, "out", out, (size_t)S * rb)) != SWY_OK)
        return status;
    if (k > 0 &&
        ((status = dm_check_array(fn, "row_of_slot", row_of_slot,
                                  (size_t)S * k * 4)) != SWY_OK ||
         (status = dm_check_array(fn, "topk_w", topk_w,
                                  (size_t)S * k * 4)) != SWY_OK ||
         (status = dm_check_array(fn, "rows", rows, 0)) != SWY_OK))
        return status;
    dm_job_t *job = dm_job_create(fn, dtype, S, k, H, (size_t)H);
    if (job == NULL)
        return SWY_ERR_NO_MEMORY;
    job->in = rows;
    job->row = row_of_slot;
    job->w = topk_w;
    job->out = out;
    return dm_launch(stream, dm_combine_fwd_run, job, fn);
}

/* swy_moe_combine_backward with swy_moe_scale_row: drows[r] = w * g,
 * dtopk_w = dot(g, rows[r]) summed in double. */
static void dm_combine_bwd_run(void *arg)
{
    dm_job_t *j = arg;
    for (int t = 0; t < j->S; t++) {
        for (int s = 0; s < j->k; s++) {
            size_t slot = (size_t)t * j->k + s;
            int32_t r = j->H > 0 ? j->row[slot] : -1; /* H 0: dot 0 */
            double dot = 0;
            const char *y = NULL;
            char *dst = NULL;
            if (r >= 0 && j->dw != NULL &&
                (y = dm_row(j->in, r, j->rb, j->fn, "rows")) == NULL)
                r = -1;
            if (r >= 0 && j->out != NULL &&
                (dst = dm_row(j->out, r, j->rb, j->fn, "drows")) == NULL)
                r = -1;
            if (r >= 0) {
                const char *g = j->g + (size_t)t * j->rb;
                float wf = j->out != NULL ? j->w[slot] : 0.0f;
                for (size_t h = 0; h < j->H; h++) {
                    float gh = dm_get(j->bf16, g, h);
                    if (y != NULL)
                        dot += (double)gh * dm_get(j->bf16, y, h);
                    if (dst != NULL)
                        dm_put(j->bf16, dst, h, wf * gh);
                }
            }
            if (j->dw != NULL)
                j->dw[slot] = (float)dot;
        }
    }
    free(j);
}

static swy_status_t dm_combine_bwd(void *stream, swy_dtype_t dtype,
                                   const void *rows,
                                   const int32_t *row_of_slot,
                                   const float *topk_w, const void *dout,
                                   int S, int k, int H, void *drows,
                                   float *dtopk_w)
{
    static const char fn[] = "combine_bwd";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK ||
        (status = dm_check_sizes(fn, S, k, H)) != SWY_OK ||
        (status = dm_check_dtype(fn, dtype)) != SWY_OK)
        return status;
    /* H 0 still gives the weights' gradients: zeros. */
    if (S == 0 || k == 0 || (drows == NULL && dtopk_w == NULL) ||
        (H == 0 && dtopk_w == NULL))
        return SWY_OK;
    size_t rb = (size_t)H * (dtype == SWY_BFLOAT16 ? 2 : 4);
    size_t slots = (size_t)S * k;
    if ((status = dm_check_array(fn, "row_of_slot", row_of_slot,
                                 slots * 4)) != SWY_OK)
        return status;
    if (dtopk_w != NULL &&
        (status = dm_check_array(fn, "dtopk_w", dtopk_w, slots * 4)) !=
            SWY_OK)
        return status;
    if (H > 0 &&
        (status = dm_check_array(fn, "dout", dout, (size_t)S * rb)) != SWY_OK)
        return status;
    if (H > 0 && dtopk_w != NULL &&
        (status = dm_check_array(fn, "rows", rows, 0)) != SWY_OK)
        return status;
    if (H > 0 && drows != NULL &&
        ((status = dm_check_array(fn, "topk_w", topk_w, slots * 4)) !=
             SWY_OK ||
         (status = dm_check_array(fn, "drows", drows, 0)) != SWY_OK))
        return status;
    dm_job_t *job = dm_job_create(fn, dtype, S, k, H, 0);
    if (job == NULL)
        return SWY_ERR_NO_MEMORY;
    job->in = rows;
    job->row = row_of_slot;
    job->w = topk_w;
    job->g = dout;
    job->out = drows;
    job->dw = dtopk_w;
    return dm_launch(stream, dm_combine_bwd_run, job, fn);
}

/* upload: the source copied at the call, so that the caller may reuse it
 * at once (as cudaMemcpyAsync from pageable memory). */
typedef struct {
    void *dst;
    size_t bytes;
    char data[];
} dm_upload_t;

static void dm_upload_run(void *arg)
{
    dm_upload_t *u = arg;
    memcpy(u->dst, u->data, u->bytes);
    free(u);
}

static swy_status_t dm_upload(void *stream, void *dst, const void *src,
                              size_t bytes)
{
    static const char fn[] = "upload";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK)
        return status;
    if (bytes == 0)
        return SWY_OK;
    if ((status = dm_check_array(fn, "dst", dst, bytes)) != SWY_OK)
        return status;
    if (src == NULL || in_device(src, 1))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: src (%p) is not "
                       "host memory", fn, src);
    dm_upload_t *u = malloc(sizeof(*u) + bytes);
    if (u == NULL)
        return dd_fail(SWY_ERR_NO_MEMORY, "devdouble %s: no memory for %zu "
                       "bytes", fn, bytes);
    u->dst = dst;
    u->bytes = bytes;
    memcpy(u->data, src, bytes);
    return dm_launch(stream, dm_upload_run, u, fn);
}

/* download: a copy on the stream, which the caller waits for. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
} dm_download_t;

static void dm_download_run(void *arg)
{
    dm_download_t *d = arg;
    memcpy(d->dst, d->src, d->bytes);
    pthread_mutex_lock(&d->lock);
    d->done = 1;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

static swy_status_t dm_download(void *stream, void *dst, const void *src,
                                size_t bytes)
{
    static const char fn[] = "download";
    swy_status_t status;
    if ((status = dm_check_fault(fn)) != SWY_OK)
        return status;
    if (bytes == 0)
        return SWY_OK;
    if ((status = dm_check_array(fn, "src", src, bytes)) != SWY_OK)
        return status;
    if (dst == NULL || in_device(dst, 1))
        return dd_fail(SWY_ERR_INVALID_ARG, "devdouble %s: dst (%p) is not "
                       "host memory", fn, dst);
    dm_download_t d = {.dst = dst, .src = src, .bytes = bytes};
    pthread_mutex_init(&d.lock, NULL);
    pthread_cond_init(&d.cond, NULL);
    if (swy_devdouble_launch(stream, dm_download_run, &d) != 0)
        status = dd_fail(SWY_ERR_NO_MEMORY, "devdouble %s: no stream (out "
                         "of memory)", fn);
    else {
        pthread_mutex_lock(&d.lock);
        while (!d.done)
            pthread_cond_wait(&d.cond, &d.lock);
        pthread_mutex_unlock(&d.lock);
        /* As cudaMemcpy, which returns a fault of the work before it. */
        status = dm_check_fault(fn);
    }
    pthread_mutex_destroy(&d.lock);
    pthread_cond_destroy(&d.cond);
    return status;
}

DD_EXPORT const swy_devmoe_v1_t swy_devmoe_plugin_v1 = {
    .abi_version = SWY_DEVMOE_ABI_V1,
    .struct_size = sizeof(swy_devmoe_v1_t),
    .name = DD_NAME,
    .alloc = swy_devdouble_alloc,
    .free_mem = swy_devdouble_free,
    .upload = dm_upload,
    .download = dm_download,
    .pack = dm_pack,
    .pack_bwd = dm_pack_bwd,
    .gather_rows = dm_gather_rows,
    .combine_fwd = dm_combine_fwd,
    .combine_bwd = dm_combine_bwd,
    .error_string = dd_error_string,
};
#endif /* DD_FIRST_RELEASE */
