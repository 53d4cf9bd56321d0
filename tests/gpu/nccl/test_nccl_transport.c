/* The NCCL transport plugin through its two ABIs, on one rank (one GPU is
 * all any machine here has: NCCL refuses two ranks on one GPU, so the
 * 2-rank direction communicators cannot run here).
 *
 *   test_nccl_transport [PLUGIN.so]           GPU checks; 77 without a GPU
 *   test_nccl_transport --no-gpu [PLUGIN.so]  init() without a GPU must
 *                                             say SWY_ERR_UNSUPPORTED fast;
 *                                             77 where there is a GPU
 *
 * The plugin is dlopen'ed from the path given, else from SWY_PLUGIN_PATH.
 * The host table is the test's own (stderr logging, malloc). Messages are
 * checked byte by byte against the pattern they were filled with, with a
 * guard zone after each receive buffer; every wait is bounded. */
#include <dlfcn.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_transport_v1.h"
#include "../gputest.h"

#define WAIT_S 10.0
#define GUARD 64
#define GUARD_BYTE 0xEE

static const char *status_name(swy_status_t s)
{
    switch (s) {
    case SWY_OK: return "SWY_OK";
    case SWY_INPROGRESS: return "SWY_INPROGRESS";
    case SWY_ERR_INVALID_ARG: return "SWY_ERR_INVALID_ARG";
    case SWY_ERR_NO_MEMORY: return "SWY_ERR_NO_MEMORY";
    case SWY_ERR_UNSUPPORTED: return "SWY_ERR_UNSUPPORTED";
    case SWY_ERR_TIMEOUT: return "SWY_ERR_TIMEOUT";
    case SWY_ERR_REMOTE: return "SWY_ERR_REMOTE";
    case SWY_ERR_MISMATCH: return "SWY_ERR_MISMATCH";
    case SWY_ERR_TRANSPORT: return "SWY_ERR_TRANSPORT";
    case SWY_ERR_SYSTEM: return "SWY_ERR_SYSTEM";
    case SWY_ERR_ABORTED: return "SWY_ERR_ABORTED";
    case SWY_ERR_INTERNAL: return "SWY_ERR_INTERNAL";
    }
    return "unknown status";
}

/* ---- the host table ---------------------------------------------------- */

static int log_max = SWY_LOG_INFO;

__attribute__((format(printf, 3, 4))) static void
host_log(swy_log_level_t level, const char *subsys, const char *fmt, ...)
{
    static const char *names[] = {"", "ERROR", "WARN", "INFO", "DEBUG",
                                  "TRACE"};
    if ((int)level > log_max)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plugin %s %s: ",
            level >= 1 && level <= 5 ? names[level] : "?", subsys);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static const char *host_config_get(const char *name)
{
    (void)name;
    return NULL; /* the plugin reads no SWY_* knob */
}

static const swy_transport_host_v1_t host_table = {
    .abi_version = SWY_TRANSPORT_ABI_V1,
    .struct_size = sizeof(swy_transport_host_v1_t),
    .log = host_log,
    .config_get = host_config_get,
    .alloc = malloc,
    .free = free,
    .rank = 0,
    .nranks = 1,
};

/* ---- loading --------------------------------------------------------------- */

static const swy_transport_v1_t *tp;
static const swy_device_v1_t *dev;

static void plugin_load(const char *arg)
{
    char path[4096];
    if (arg != NULL) {
        snprintf(path, sizeof(path), "%s", arg);
    } else {
        const char *dirs = getenv("SWY_PLUGIN_PATH");
        path[0] = '\0';
        char copy[4096];
        snprintf(copy, sizeof(copy), "%s", dirs != NULL ? dirs : "");
        for (char *save = NULL, *d = strtok_r(copy, ":", &save); d != NULL;
             d = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof(path), "%s/swy-transport-nccl.so", d);
            FILE *f = fopen(path, "r");
            if (f != NULL) {
                fclose(f);
                break;
            }
            path[0] = '\0';
        }
        if (path[0] == '\0') {
            fprintf(stderr, "swy-transport-nccl.so: not given and not found "
                            "in SWY_PLUGIN_PATH=%s\n",
                    dirs != NULL ? dirs : "(unset)");
            exit(1);
        }
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(1);
    }
    tp = dlsym(handle, SWY_TRANSPORT_PLUGIN_SYMBOL_V1);
    dev = dlsym(handle, SWY_DEVICE_PLUGIN_SYMBOL_V1);
    if (tp == NULL || dev == NULL) {
        fprintf(stderr, "%s: missing %s\n", path,
                tp == NULL ? SWY_TRANSPORT_PLUGIN_SYMBOL_V1
                           : SWY_DEVICE_PLUGIN_SYMBOL_V1);
        exit(1);
    }
    CHECK(tp->abi_version == SWY_TRANSPORT_ABI_V1 &&
              tp->struct_size == sizeof(swy_transport_v1_t),
          "transport ABI %u size %u", tp->abi_version, tp->struct_size);
    CHECK(dev->abi_version == SWY_DEVICE_ABI_V1 &&
              dev->struct_size == sizeof(swy_device_v1_t),
          "device ABI %u size %u", dev->abi_version, dev->struct_size);
    CHECK(strcmp(tp->name, "nccl") == 0, "transport name %s", tp->name);
    CHECK(strcmp(dev->name, "cuda") == 0, "device name %s", dev->name);
    fprintf(stderr, "loaded %s\n", path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- without a GPU ------------------------------------------------------- */

static int run_no_gpu(void)
{
    int count = dev->device_count();
    if (count > 0) {
        printf("SKIP: %d CUDA device(s) here; this case is for machines "
               "without one\n", count);
        return TEST_SKIP;
    }
    const char *why = dev->error_string();
    CHECK(why != NULL && strstr(why, "cudaGetDeviceCount") != NULL,
          "error_string after device_count()=0: %s", why ? why : "(NULL)");
    void *ctx = NULL;
    double t0 = now_s();
    swy_status_t st = tp->init(&host_table, &ctx);
    double took = now_s() - t0;
    CHECK(st == SWY_ERR_UNSUPPORTED, "init without a GPU: %s",
          status_name(st));
    CHECK(took < 5.0, "init without a GPU took %.2f s", took);
    if (st == SWY_OK)
        tp->finalize(ctx);
    printf("no-GPU init: %s in %.3f s (%s)\n", status_name(st), took,
           why ? why : "");
    return check_failures ? 1 : 0;
}

/* ---- completions and waiting ------------------------------------------------ */

typedef struct {
    int calls;
    swy_status_t status;
    size_t bytes;
} completion_t;

static void on_complete(void *arg, swy_status_t status, size_t bytes)
{
    completion_t *c = arg;
    c->calls++;
    c->status = status;
    c->bytes = bytes;
}

static int late_wakeups;

/* Progress until every completion in cs has been called once, sleeping on
 * the event fd when arm() allows: a sleep that ends by timeout although
 * work then completes is a lost wake-up. */
static int wait_all(void *ctx, completion_t **cs, int n, const char *what)
{
    int fd = tp->event_fd(ctx);
    double deadline = now_s() + WAIT_S;
    for (;;) {
        int events = tp->progress(ctx);
        int done = 0;
        for (int i = 0; i < n; i++)
            done += cs[i]->calls > 0;
        if (done == n)
            break;
        if (now_s() > deadline) {
            fprintf(stderr, "%s: %d of %d operations incomplete after "
                            "%.0f s:",
                    what, n - done, n, WAIT_S);
            for (int i = 0; i < n; i++)
                if (cs[i]->calls == 0)
                    fprintf(stderr, " #%d", i);
            fprintf(stderr, "\n");
            check_failures++;
            return -1;
        }
        if (events > 0 || fd < 0)
            continue;
        swy_status_t st = tp->arm(ctx);
        if (st != SWY_OK)
            continue;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, 2000);
        if (ready == 0 && tp->progress(ctx) > 0) {
            fprintf(stderr, "%s: work completed, but the event fd stayed "
                            "silent for 2 s\n", what);
            late_wakeups++;
        }
    }
    for (int i = 0; i < n; i++)
        CHECK(cs[i]->calls == 1, "%s: op #%d completed %d times", what, i,
              cs[i]->calls);
    return 0;
}

/* ---- buffers ------------------------------------------------------------------- */

static unsigned char pattern_byte(uint64_t tag, size_t i)
{
    return (unsigned char)((i * 131u + tag * 17u + (i >> 12)) & 0xffu);
}

/* Device buffer of len bytes + guard, filled with tag's pattern (source)
 * or with the guard byte (destination). */
static void *buffer_new(size_t len, uint64_t tag, int source)
{
    void *d;
    size_t total = len + GUARD;
    CUDA_OK(cudaMalloc(&d, total));
    unsigned char *h = malloc(total);
    if (h == NULL) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", total);
        exit(1);
    }
    memset(h, GUARD_BYTE, total);
    if (source)
        for (size_t i = 0; i < len; i++)
            h[i] = pattern_byte(tag, i);
    CUDA_OK(cudaMemcpy(d, h, total, cudaMemcpyHostToDevice));
    /* From pageable memory the copy may still be landing on return, and
     * the plugin's streams do not wait for the default stream. */
    CUDA_OK(cudaDeviceSynchronize());
    free(h);
    return d;
}

/* dst holds the first n bytes of tag's pattern, then the guard byte up to
 * its end (cap + GUARD). */
static void buffer_check(const void *d, size_t cap, size_t n, uint64_t tag,
                         const char *what)
{
    size_t total = cap + GUARD;
    unsigned char *h = malloc(total);
    if (h == NULL) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", total);
        exit(1);
    }
    CUDA_OK(cudaMemcpy(h, d, total, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < total; i++) {
        unsigned char want = i < n ? pattern_byte(tag, i) : GUARD_BYTE;
        if (h[i] != want) {
            CHECK(h[i] == want, "%s: byte %zu of %zu (message %zu) is 0x%02x, "
                                "expected 0x%02x",
                  what, i, total, n, h[i], want);
            break;
        }
    }
    free(h);
}

/* ---- the cases ---------------------------------------------------------------- */

static void test_device_abi(void)
{
    CHECK(dev->device_count() >= 1, "device_count %d", dev->device_count());
    const size_t n = 1 << 20;
    void *d, *pinned;
    CUDA_OK(cudaMalloc(&d, n));
    CUDA_OK(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
    unsigned char *h = malloc(n), *back = malloc(n);
    int on_stack = 0;
    if (h == NULL || back == NULL) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    CHECK(dev->mem_type(d) == SWY_MEM_CUDA, "cudaMalloc pointer");
    CHECK(dev->mem_type((char *)d + n / 2) == SWY_MEM_CUDA,
          "pointer inside a cudaMalloc block");
    CHECK(dev->mem_type(h) == SWY_MEM_HOST, "malloc pointer");
    CHECK(dev->mem_type(pinned) == SWY_MEM_HOST, "cudaHostAlloc pointer");
    CHECK(dev->mem_type(&on_stack) == SWY_MEM_HOST, "stack pointer");
    CHECK(dev->mem_type(NULL) == SWY_MEM_HOST, "NULL");
    cudaError_t sticky = cudaGetLastError();
    CHECK(sticky == cudaSuccess, "mem_type left a CUDA error behind: %s",
          cudaGetErrorString(sticky));

    void *plugin_pinned = dev->host_alloc(n);
    CHECK(plugin_pinned != NULL, "host_alloc: %s", dev->error_string());
    if (plugin_pinned != NULL)
        CHECK(dev->mem_type(plugin_pinned) == SWY_MEM_HOST,
              "host_alloc pointer");

    /* copy: host -> device -> device -> host, through each kind. */
    for (size_t i = 0; i < n; i++)
        h[i] = pattern_byte(7, i);
    void *d2;
    CUDA_OK(cudaMalloc(&d2, n));
    CHECK(dev->copy(d, h, n) == SWY_OK, "copy H2D: %s", dev->error_string());
    CHECK(dev->copy(d2, d, n) == SWY_OK, "copy D2D: %s", dev->error_string());
    void *via = plugin_pinned != NULL ? plugin_pinned : pinned;
    CHECK(dev->copy(via, d2, n) == SWY_OK, "copy D2H: %s",
          dev->error_string());
    CHECK(dev->copy(back, via, n) == SWY_OK, "copy H2H: %s",
          dev->error_string());
    CHECK(memcmp(back, h, n) == 0, "data after H2D, D2D, D2H, H2H copies");
    CHECK(dev->copy(d, h, 0) == SWY_OK, "copy of 0 bytes");
    /* A failing copy names the call and leaves no sticky error. */
    CHECK(dev->copy(NULL, h, n) != SWY_OK, "copy to NULL succeeded");
    CHECK(strstr(dev->error_string(), "cudaMemcpy") != NULL,
          "error_string after a failed copy: %s", dev->error_string());
    (void)cudaGetLastError();

    /* stream_sync: the stream is idle once it returns. */
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaMemsetAsync(d2, i, n, stream));
    CUDA_OK(cudaMemcpyAsync(pinned, d2, n, cudaMemcpyDeviceToHost, stream));
    CHECK(dev->stream_sync(stream) == SWY_OK, "stream_sync: %s",
          dev->error_string());
    CHECK(cudaStreamQuery(stream) == cudaSuccess,
          "stream busy after stream_sync");
    CHECK(((unsigned char *)pinned)[n - 1] == 7,
          "stream_sync returned before the copy (last byte %u)",
          ((unsigned char *)pinned)[n - 1]);
    CHECK(dev->stream_sync(NULL) == SWY_OK, "stream_sync(NULL): %s",
          dev->error_string());
    CUDA_OK(cudaStreamDestroy(stream));

    dev->host_free(plugin_pinned);
    dev->host_free(NULL);
    CUDA_OK(cudaFree(d2));
    CUDA_OK(cudaFreeHost(pinned));
    CUDA_OK(cudaFree(d));
    free(h);
    free(back);
    fprintf(stderr, "device ABI: done\n");
}

typedef struct {
    uint64_t tag;
    size_t len;     /* sent */
    size_t cap;     /* receive buffer */
    int prio;       /* -1: isend, else isend_prio with this priority */
    void *src, *dst;
    completion_t sc, rc;
} msg_t;

static void msg_setup(msg_t *m, uint64_t tag, size_t len, size_t cap,
                      int prio)
{
    memset(m, 0, sizeof(*m));
    m->tag = tag;
    m->len = len;
    m->cap = cap;
    m->prio = prio;
    m->src = buffer_new(len, tag, 1);
    m->dst = buffer_new(cap, tag, 0);
}

static void msg_free(msg_t *m)
{
    CUDA_OK(cudaFree(m->src));
    CUDA_OK(cudaFree(m->dst));
}

static void msg_send(void *ctx, msg_t *m)
{
    void *handle = NULL;
    swy_status_t st =
        m->prio < 0
            ? tp->isend(ctx, 0, m->tag, m->src, m->len, SWY_MEM_CUDA,
                        on_complete, &m->sc, &handle)
            : dev->isend_prio(ctx, 0, m->tag, m->src, m->len, SWY_MEM_CUDA,
                              m->prio, on_complete, &m->sc, &handle);
    CHECK(st == SWY_OK, "isend tag %llu (%zu bytes, prio %d): %s",
          (unsigned long long)m->tag, m->len, m->prio, status_name(st));
    CHECK(m->sc.calls == 0, "isend tag %llu called back from isend",
          (unsigned long long)m->tag);
}

static void *msg_recv(void *ctx, msg_t *m)
{
    void *handle = NULL;
    swy_status_t st = tp->irecv(ctx, 0, m->tag, m->dst, m->cap, SWY_MEM_CUDA,
                                on_complete, &m->rc, &handle);
    CHECK(st == SWY_OK, "irecv tag %llu (%zu bytes): %s",
          (unsigned long long)m->tag, m->cap, status_name(st));
    CHECK(m->rc.calls == 0, "irecv tag %llu called back from irecv",
          (unsigned long long)m->tag);
    return handle;
}

static void msg_wait_check(void *ctx, msg_t *ms, int n, const char *what)
{
    completion_t **cs = malloc(sizeof(*cs) * (size_t)n * 2);
    for (int i = 0; i < n; i++) {
        cs[2 * i] = &ms[i].sc;
        cs[2 * i + 1] = &ms[i].rc;
    }
    if (wait_all(ctx, cs, 2 * n, what) == 0) {
        for (int i = 0; i < n; i++) {
            msg_t *m = &ms[i];
            char label[128];
            snprintf(label, sizeof(label), "%s, tag %llu (%zu bytes)", what,
                     (unsigned long long)m->tag, m->len);
            CHECK(m->sc.status == SWY_OK && m->sc.bytes == m->len,
                  "%s: send completed %s, %zu bytes", label,
                  status_name(m->sc.status), m->sc.bytes);
            swy_status_t want = m->len > m->cap ? SWY_ERR_MISMATCH : SWY_OK;
            size_t got = m->len > m->cap ? m->cap : m->len;
            CHECK(m->rc.status == want && m->rc.bytes == got,
                  "%s: receive completed %s with %zu bytes, expected %s "
                  "with %zu",
                  label, status_name(m->rc.status), m->rc.bytes,
                  status_name(want), got);
            buffer_check(m->dst, m->cap, got, m->tag, label);
        }
    }
    free(cs);
}

static const size_t sizes[] = {0, 1, 4099, 1 << 20, 64 << 20};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

/* Every size, all in flight at once, in both classes; the receives are
 * posted in the opposite order of the sends. */
static void test_sizes(void *ctx, int recv_first)
{
    msg_t ms[NSIZES];
    static const int prios[] = {-1, SWY_PRIO_HIGH, SWY_PRIO_LOW, 1000,
                                SWY_PRIO_DEFAULT};
    for (int i = 0; i < NSIZES; i++)
        msg_setup(&ms[i], (recv_first ? 100u : 200u) + (uint64_t)i, sizes[i],
                  sizes[i], prios[i % 5]);
    if (recv_first) {
        for (int i = 0; i < NSIZES; i++)
            msg_recv(ctx, &ms[i]);
        for (int i = NSIZES - 1; i >= 0; i--)
            msg_send(ctx, &ms[i]);
    } else {
        for (int i = 0; i < NSIZES; i++)
            msg_send(ctx, &ms[i]);
        for (int i = NSIZES - 1; i >= 0; i--)
            msg_recv(ctx, &ms[i]);
    }
    msg_wait_check(ctx, ms, NSIZES,
                   recv_first ? "sizes, receives first" : "sizes, sends first");
    for (int i = 0; i < NSIZES; i++)
        msg_free(&ms[i]);
    fprintf(stderr, "sizes (%s first): done\n", recv_first ? "receives"
                                                           : "sends");
}

/* Many messages in flight, posted in a shuffled interleaving of sends and
 * receives, half of them high priority; two pairs share a tag (matched in
 * posting order). */
static void test_many(void *ctx)
{
    enum { N = 24 };
    msg_t ms[N];
    for (int i = 0; i < N; i++) {
        size_t len = (size_t)(i * 7919 % 300000) + (size_t)i;
        uint64_t tag = 1000 + (uint64_t)(i < 4 ? 0 : i); /* #0..3 share */
        msg_setup(&ms[i], tag, len, len, i % 2 ? SWY_PRIO_HIGH : -1);
    }
    /* #0..3 differ in size: a receive that met the wrong one of them
     * fails the length check. */
    int order[2 * N];
    for (int i = 0; i < 2 * N; i++)
        order[i] = i;
    unsigned seed = 12345;
    for (int i = 2 * N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 16) % (unsigned)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* Keep #0..3's sends in order and their receives in order. */
    int next_send = 0, next_recv = 0;
    for (int k = 0; k < 2 * N; k++) {
        int op = order[k];
        int i = op / 2;
        int is_send = op % 2;
        if (i < 4)
            i = is_send ? next_send++ : next_recv++;
        if (is_send)
            msg_send(ctx, &ms[i]);
        else
            msg_recv(ctx, &ms[i]);
    }
    msg_wait_check(ctx, ms, N, "many in flight");
    for (int i = 0; i < N; i++)
        msg_free(&ms[i]);
    fprintf(stderr, "many in flight: done\n");
}

/* Longer than the receive: SWY_ERR_MISMATCH, the receive's length written,
 * nothing beyond; the same class's stream keeps working afterwards. */
static void test_too_long(void *ctx)
{
    for (int recv_first = 0; recv_first < 2; recv_first++) {
        msg_t m[2];
        msg_setup(&m[0], 300 + (uint64_t)recv_first, 4099, 1000,
                  recv_first ? SWY_PRIO_HIGH : -1);
        msg_setup(&m[1], 310 + (uint64_t)recv_first, 1 << 20, 1 << 20,
                  recv_first ? SWY_PRIO_HIGH : -1);
        if (recv_first) {
            msg_recv(ctx, &m[0]);
            msg_send(ctx, &m[0]);
        } else {
            msg_send(ctx, &m[0]);
            msg_recv(ctx, &m[0]);
        }
        msg_wait_check(ctx, &m[0], 1, "too long");
        msg_send(ctx, &m[1]);
        msg_recv(ctx, &m[1]);
        msg_wait_check(ctx, &m[1], 1, "after a too long message");
        msg_free(&m[0]);
        msg_free(&m[1]);
    }
    /* A receive of 0 bytes for a message of some. */
    msg_t z;
    msg_setup(&z, 320, 4099, 0, -1);
    msg_recv(ctx, &z);
    msg_send(ctx, &z);
    msg_wait_check(ctx, &z, 1, "too long for an empty receive");
    msg_free(&z);
    fprintf(stderr, "too long: done\n");
}

static void test_cancel(void *ctx)
{
    /* An unmatched receive: aborted, and the message of its tag goes to
     * the next receive. */
    msg_t m;
    msg_setup(&m, 400, 4099, 4099, -1);
    completion_t cancelled = {0};
    void *handle = NULL;
    swy_status_t st = tp->irecv(ctx, 0, m.tag, m.dst, m.cap, SWY_MEM_CUDA,
                                on_complete, &cancelled, &handle);
    CHECK(st == SWY_OK && handle != NULL, "irecv to cancel: %s",
          status_name(st));
    tp->cancel(ctx, handle);
    /* Queued, not yet called back: arm must say so. */
    if (cancelled.calls == 0)
        CHECK(tp->arm(ctx) == SWY_INPROGRESS,
              "arm with a queued cancellation");
    completion_t *c1[] = {&cancelled};
    if (wait_all(ctx, c1, 1, "cancelled receive") == 0)
        CHECK(cancelled.status == SWY_ERR_ABORTED && cancelled.bytes == 0,
              "cancelled receive: %s, %zu bytes",
              status_name(cancelled.status), cancelled.bytes);
    msg_send(ctx, &m);
    msg_recv(ctx, &m);
    msg_wait_check(ctx, &m, 1, "after a cancelled receive");

    /* An unmatched send to oneself can be cancelled too. */
    completion_t send_cancelled = {0};
    st = tp->isend(ctx, 0, 401, m.src, m.len, SWY_MEM_CUDA, on_complete,
                   &send_cancelled, &handle);
    CHECK(st == SWY_OK, "isend to cancel: %s", status_name(st));
    tp->cancel(ctx, handle);
    completion_t *c2[] = {&send_cancelled};
    if (wait_all(ctx, c2, 1, "cancelled send") == 0)
        CHECK(send_cancelled.status == SWY_ERR_ABORTED,
              "cancelled send: %s", status_name(send_cancelled.status));
    msg_free(&m);
    fprintf(stderr, "cancel: done\n");
}

static void test_host_memory(void *ctx)
{
    char host_buf[64];
    completion_t c = {0};
    void *handle = NULL;
    swy_status_t st = tp->isend(ctx, 0, 500, host_buf, sizeof(host_buf),
                                SWY_MEM_HOST, on_complete, &c, &handle);
    CHECK(st == SWY_ERR_UNSUPPORTED, "isend of host memory: %s",
          status_name(st));
    st = tp->irecv(ctx, 0, 500, host_buf, sizeof(host_buf), SWY_MEM_HOST,
                   on_complete, &c, &handle);
    CHECK(st == SWY_ERR_UNSUPPORTED, "irecv of host memory: %s",
          status_name(st));
    st = dev->isend_prio(ctx, 0, 500, host_buf, sizeof(host_buf),
                         SWY_MEM_HOST, SWY_PRIO_HIGH, on_complete, &c,
                         &handle);
    CHECK(st == SWY_ERR_UNSUPPORTED, "isend_prio of host memory: %s",
          status_name(st));
    /* A rank that does not exist. */
    void *d;
    CUDA_OK(cudaMalloc(&d, 64));
    st = tp->isend(ctx, 1, 500, d, 64, SWY_MEM_CUDA, on_complete, &c,
                   &handle);
    CHECK(st == SWY_ERR_INVALID_ARG, "isend to rank 1 of 1: %s",
          status_name(st));
    CUDA_OK(cudaFree(d));
    tp->progress(ctx);
    CHECK(c.calls == 0, "a refused post was called back");
    fprintf(stderr, "host memory: done\n");
}

static int run_gpu(void)
{
    void *ctx = NULL;
    swy_status_t st = tp->init(&host_table, &ctx);
    if (st != SWY_OK) {
        fprintf(stderr, "init: %s\n", status_name(st));
        return 1;
    }
    swy_transport_caps_v1_t caps = {.struct_size = sizeof(caps)};
    st = tp->query(ctx, &caps);
    CHECK(st == SWY_OK, "query: %s", status_name(st));
    CHECK(caps.mem_types == (1u << SWY_MEM_CUDA), "mem_types 0x%x",
          caps.mem_types);
    for (int c = 0; c < SWY_LINK_NCLASSES; c++)
        CHECK(caps.score[c] > 0, "score of link class %d: %d", c,
              caps.score[c]);
    unsigned char *addr = malloc(caps.max_address_len + 1);
    size_t len = caps.max_address_len;
    st = tp->get_address(ctx, addr, &len);
    CHECK(st == SWY_OK && len <= caps.max_address_len,
          "get_address: %s, %zu of at most %zu bytes", status_name(st), len,
          caps.max_address_len);
    const void *addrs[1] = {addr};
    const uint8_t reachable[1] = {1};
    double t0 = now_s();
    st = tp->connect(ctx, addrs, &len, reachable);
    CHECK(st == SWY_OK, "connect (self): %s", status_name(st));
    fprintf(stderr, "connect (self): %s in %.2f s\n", status_name(st),
            now_s() - t0);
    if (st != SWY_OK) {
        tp->finalize(ctx);
        free(addr);
        return 1;
    }
    char desc[128];
    st = tp->describe_peer(ctx, 0, desc, sizeof(desc));
    CHECK(st == SWY_OK && strcmp(desc, "nccl:self") == 0,
          "describe_peer(0): %s \"%s\"", status_name(st), desc);
    CHECK(tp->describe_peer(ctx, 1, desc, sizeof(desc)) ==
              SWY_ERR_INVALID_ARG,
          "describe_peer(1) of 1 rank");
    CHECK(tp->event_fd(ctx) >= 0, "event_fd %d", tp->event_fd(ctx));

    test_device_abi();
    test_host_memory(ctx);
    test_sizes(ctx, 1);
    test_sizes(ctx, 0);
    test_many(ctx);
    test_too_long(ctx);
    test_cancel(ctx);

    /* Idle: after a progress that finds nothing, arm lets us sleep. */
    while (tp->progress(ctx) > 0)
        ;
    st = tp->arm(ctx);
    CHECK(st == SWY_OK, "arm when idle: %s", status_name(st));
    CHECK(late_wakeups == 0, "%d lost wake-ups", late_wakeups);

    /* Finalize with work that never completes: a receive and a send to
     * oneself, unmatched. Nothing is called back, nothing hangs. */
    void *d;
    CUDA_OK(cudaMalloc(&d, 4096));
    completion_t left[2] = {{0}, {0}};
    void *handle;
    CHECK(tp->irecv(ctx, 0, 900, d, 4096, SWY_MEM_CUDA, on_complete,
                    &left[0], &handle) == SWY_OK,
          "irecv left posted");
    CHECK(dev->isend_prio(ctx, 0, 901, d, 4096, SWY_MEM_CUDA, SWY_PRIO_HIGH,
                          on_complete, &left[1], &handle) == SWY_OK,
          "isend left posted");
    tp->progress(ctx);
    t0 = now_s();
    tp->finalize(ctx);
    double took = now_s() - t0;
    CHECK(took < 10.0, "finalize took %.1f s", took);
    CHECK(left[0].calls == 0 && left[1].calls == 0,
          "finalize called back dropped operations");
    CUDA_OK(cudaFree(d));
    free(addr);
    fprintf(stderr, "finalize: %.2f s\n", took);
    return check_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int no_gpu = argc > 1 && strcmp(argv[1], "--no-gpu") == 0;
    const char *path = argc > 1 + no_gpu ? argv[1 + no_gpu] : NULL;
    if (getenv("SWYTEST_VERBOSE") != NULL)
        log_max = SWY_LOG_TRACE;
    if (!no_gpu) {
        int count = 0;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess || count == 0) {
            printf("SKIP: no CUDA device (%s)\n",
                   err != cudaSuccess ? cudaGetErrorString(err)
                                      : "cudaGetDeviceCount found 0");
            return TEST_SKIP;
        }
    }
    plugin_load(path);
    int rc = no_gpu ? run_no_gpu() : run_gpu();
    if (rc == 1 || check_failures > 0) {
        fprintf(stderr, "FAILED: %d check(s)\n", check_failures);
        return 1;
    }
    if (rc == 0)
        printf("PASS\n");
    return rc;
}
