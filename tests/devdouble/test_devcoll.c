/* The GPU test double's device collectives (swy_devcoll_plugin_v1 of
 * devdouble.c) at W = 1, 2, 3 and 4 forked ranks, each result checked
 * bitwise against a serial computation in rank order: ALLREDUCE of
 * several dtypes and ops (in place too), REDUCE, BROADCAST, a group of
 * SENDs and RECVs to every peer and self in a call order of each rank's
 * own with a collective among them, several launches queued back to
 * back; then a host buffer refused, comm_abort while a launch waits for
 * a rank that never posts its part, a launch that needs a rank that
 * died, and comm_init's timeout.
 *
 * Usage: test_devcoll PATH-OF-THE-DOUBLE (swy-transport-nccl.so) */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "devdouble.h"
#include "switchyard/swy_devcoll_v1.h"

#define MAX_RANKS 4
/* How long a launch may take before the test calls it hung. */
#define DONE_TIMEOUT_S 20.0
/* A forked rank that hangs is killed after this long (SIGALRM). */
#define RANK_ALARM_S 15

static const swy_devcoll_v1_t *dc;
static swy_devdouble_alloc_fn dev_alloc;
static swy_devdouble_free_fn dev_free;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the values and the serial references ------------------------- */

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu ^
                 (c + 0x165667b1u) * 0xc2b2ae35u;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

static size_t dsize_of(swy_dtype_t dtype)
{
    static const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
    return sizes[dtype];
}

static const char *const dtype_names[] = {
    "int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64"};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

/* The fp16 and bf16 elements are small integers, whose sums and maxima
 * are exact: their reference needs no rounding. */
static int small_value(int salt, int rank, size_t i)
{
    return (int)(hash3((uint32_t)salt, (uint32_t)rank, (uint32_t)i) % 16u);
}

static uint16_t small_to_half(int v)
{
    if (v == 0)
        return 0;
    int e = 31 - __builtin_clz((unsigned)v);
    return (uint16_t)(((e + 15) << 10) | ((v << (10 - e)) & 0x3ff));
}

static uint16_t small_to_bf16(int v)
{
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return (uint16_t)(bits >> 16);
}

/* Rank's element i of the buffer named by salt. The floats spread over
 * nine decades, so that a sum in another order has other bits. */
static void gen(swy_dtype_t dtype, int salt, int rank, size_t i, void *out)
{
    static const float scale[4] = {1e-3f, 1.0f, 1e3f, 1e6f};
    uint32_t h = hash3((uint32_t)salt, (uint32_t)rank, (uint32_t)i);
    uint32_t h2 = hash3((uint32_t)salt, (uint32_t)rank, ~(uint32_t)i);
    int centered = (int)(h % 20001u) - 10000;
    switch (dtype) {
    case SWY_INT8: *(int8_t *)out = (int8_t)h; break;
    case SWY_UINT8: *(uint8_t *)out = (uint8_t)h; break;
    case SWY_INT32: *(int32_t *)out = (int32_t)h; break;
    case SWY_INT64:
        *(int64_t *)out = (int64_t)((uint64_t)h << 32 | h2);
        break;
    case SWY_FLOAT16:
        *(uint16_t *)out = small_to_half(small_value(salt, rank, i));
        break;
    case SWY_BFLOAT16:
        *(uint16_t *)out = small_to_bf16(small_value(salt, rank, i));
        break;
    case SWY_FLOAT32:
        *(float *)out = (float)centered / 3.0f * scale[h >> 30];
        break;
    case SWY_FLOAT64:
        *(double *)out = (double)centered / 3.0 * (double)scale[h >> 30];
        break;
    }
}

static void fill(swy_dtype_t dtype, int salt, int rank, void *buf,
                 size_t count)
{
    for (size_t i = 0; i < count; i++)
        gen(dtype, salt, rank, i, (char *)buf + i * dsize_of(dtype));
}

/* The reduction of element i over ranks 0..w-1 in order, as the library
 * reduces on the host (lib/coll/dtype.c): in the type, integer sums and
 * products wrap, AVG divides the sum (integer division for integers).
 * fp16 and bf16: SUM and MAX of the small integers only. */
#define REF_CASE(DT, T, UT, AVG)                                              \
    case DT: {                                                                \
        T acc = 0, x;                                                         \
        for (int r = 0; r < w; r++) {                                         \
            gen(dtype, salt, r, i, &x);                                       \
            if (r == 0)                                                       \
                acc = x;                                                      \
            else if (op == SWY_PROD)                                          \
                acc = (T)((UT)acc * (UT)x);                                   \
            else if (op == SWY_MAX)                                           \
                acc = acc > x ? acc : x;                                      \
            else if (op == SWY_MIN)                                           \
                acc = acc < x ? acc : x;                                      \
            else                                                              \
                acc = (T)((UT)acc + (UT)x);                                   \
        }                                                                     \
        if (op == SWY_AVG && w > 1)                                           \
            acc = (AVG);                                                      \
        memcpy(out, &acc, sizeof(acc));                                       \
        return;                                                               \
    }

static void reference(swy_dtype_t dtype, swy_redop_t op, int salt, int w,
                      size_t i, void *out)
{
    switch (dtype) {
    REF_CASE(SWY_INT8, int8_t, uint8_t, (int8_t)(acc / w))
    REF_CASE(SWY_UINT8, uint8_t, uint8_t, (uint8_t)(acc / w))
    REF_CASE(SWY_INT32, int32_t, uint32_t, (int32_t)(acc / w))
    REF_CASE(SWY_INT64, int64_t, uint64_t, (int64_t)(acc / w))
    REF_CASE(SWY_FLOAT32, float, float, acc / (float)w)
    REF_CASE(SWY_FLOAT64, double, double, acc / (double)w)
    case SWY_FLOAT16: case SWY_BFLOAT16: {
        int acc = 0;
        for (int r = 0; r < w; r++) {
            int v = small_value(salt, r, i);
            acc = r == 0 ? v : op == SWY_MAX ? (acc > v ? acc : v) : acc + v;
        }
        uint16_t bits = dtype == SWY_FLOAT16 ? small_to_half(acc)
                                             : small_to_bf16(acc);
        memcpy(out, &bits, sizeof(bits));
        return;
    }
    }
}

/* got against want, element by element; the first wrong one fails. */
static void expect_equal(int w, int rank, const char *what, const void *got,
                         const void *want, size_t count, size_t dsize)
{
    for (size_t i = 0; i < count; i++) {
        const char *g = (const char *)got + i * dsize;
        const char *x = (const char *)want + i * dsize;
        if (memcmp(g, x, dsize) == 0)
            continue;
        uint64_t gv = 0, xv = 0;
        memcpy(&gv, g, dsize);
        memcpy(&xv, x, dsize);
        CHECK(0, "W=%d rank %d: %s: element %zu of %zu is 0x%llx, not 0x%llx",
              w, rank, what, i, count, (unsigned long long)gv,
              (unsigned long long)xv);
        return;
    }
}

/* ---- launches and their done ------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls; /* how many times done came: once */
    swy_status_t status;
    int seq; /* when done came, among all launches of the process */
} done_t;

static atomic_int done_seq;

static void on_done(void *arg, swy_status_t status)
{
    done_t *d = arg;
    pthread_mutex_lock(&d->lock);
    d->calls++;
    d->status = status;
    d->seq = atomic_fetch_add(&done_seq, 1);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

static void done_init(done_t *d)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
}

/* 1 if d's done came within timeout_s. */
static int done_wait(done_t *d, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    pthread_mutex_lock(&d->lock);
    while (d->calls == 0 && now_s() < deadline) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 10000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&d->cond, &d->lock, &until);
    }
    int came = d->calls > 0;
    pthread_mutex_unlock(&d->lock);
    return came;
}

/* Wait for a launch that must succeed. */
static void expect_done_ok(int w, int rank, const char *what, done_t *d)
{
    int came = done_wait(d, DONE_TIMEOUT_S);
    CHECK(came, "W=%d rank %d: %s: done never came", w, rank, what);
    CHECK(!came || (d->calls == 1 && d->status == SWY_OK),
          "W=%d rank %d: %s: done came %d time(s), status %d", w, rank, what,
          d->calls, (int)d->status);
}

static void launch_ok(int w, int rank, const char *what, void *comm,
                      const swy_devcoll_call_v1_t *calls, int ncalls,
                      done_t *d)
{
    done_init(d);
    swy_status_t status = dc->launch(comm, calls, ncalls, on_done, d);
    CHECK(status == SWY_OK, "W=%d rank %d: %s: launch: %d: %s", w, rank,
          what, (int)status, dc->error_string());
    if (status != SWY_OK) /* nothing to wait for */
        on_done(d, status);
}

/* ---- the calls ---------------------------------------------------- */

/* One reduction: its buffers, its call and its expected result. */
typedef struct {
    swy_dtype_t dtype;
    swy_redop_t op;
    int salt, in_place;
    size_t count;
    void *send, *recv;
    swy_devcoll_call_v1_t call;
} reduction_t;

static void reduction_init(reduction_t *t, int rank, int kind, int root,
                           swy_dtype_t dtype, swy_redop_t op, int salt,
                           size_t count, int in_place)
{
    size_t bytes = count * dsize_of(dtype);
    *t = (reduction_t){.dtype = dtype, .op = op, .salt = salt,
                       .in_place = in_place, .count = count};
    t->send = dev_alloc(bytes);
    /* A REDUCE's recvbuf is the root's only: NULL elsewhere. */
    if (in_place)
        t->recv = t->send;
    else if (kind == SWY_DEVCOLL_ALLREDUCE || root == rank)
        t->recv = dev_alloc(bytes);
    fill(dtype, salt, rank, t->send, count);
    t->call = (swy_devcoll_call_v1_t){kind, root, dtype, op, t->send,
                                      t->recv, count};
}

static void reduction_check(const reduction_t *t, int w, int rank)
{
    if (t->recv == NULL)
        return;
    size_t dsize = dsize_of(t->dtype);
    char *want = malloc(t->count * dsize + 1);
    for (size_t i = 0; i < t->count; i++)
        reference(t->dtype, t->op, t->salt, w, i, want + i * dsize);
    char what[96];
    snprintf(what, sizeof(what), "%s %s %s of %zu%s",
             t->call.kind == SWY_DEVCOLL_ALLREDUCE ? "allreduce" : "reduce",
             dtype_names[t->dtype], op_names[t->op], t->count,
             t->in_place ? " in place" : "");
    expect_equal(w, rank, what, t->recv, want, t->count, dsize);
    free(want);
}

static void reduction_free(reduction_t *t)
{
    if (t->recv != t->send)
        dev_free(t->recv);
    dev_free(t->send);
}

typedef struct {
    int root, salt;
    size_t count;
    void *send, *recv;
    swy_devcoll_call_v1_t call;
} broadcast_t;

static void broadcast_init(broadcast_t *b, int rank, int root, int salt,
                           size_t count)
{
    *b = (broadcast_t){.root = root, .salt = salt, .count = count};
    b->recv = dev_alloc(count * 4);
    memset(b->recv, 0, count * 4);
    /* The root's sendbuf only: NULL elsewhere. */
    if (rank == root) {
        b->send = dev_alloc(count * 4);
        fill(SWY_INT32, salt, root, b->send, count);
    }
    b->call = (swy_devcoll_call_v1_t){SWY_DEVCOLL_BROADCAST, root, SWY_INT32,
                                      SWY_SUM, b->send, b->recv, count};
}

static void broadcast_check(const broadcast_t *b, int w, int rank)
{
    int32_t *want = malloc(b->count * 4 + 1);
    fill(SWY_INT32, b->salt, b->root, want, b->count);
    expect_equal(w, rank, "broadcast", b->recv, want, b->count, 4);
    free(want);
    dev_free(b->send);
    dev_free(b->recv);
}

/* A group of SENDs and RECVs, two messages each way with every rank and
 * self (of counts that differ per pair and message), in a call order of
 * this rank's own, and an ALLREDUCE among them at a position of its own:
 * the collective and the pairs match apart. */
#define P2P_MSGS 2

typedef struct {
    int32_t *send[MAX_RANKS][P2P_MSGS], *recv[MAX_RANKS][P2P_MSGS];
    reduction_t coll;
    swy_devcoll_call_v1_t calls[MAX_RANKS * P2P_MSGS * 2 + 1];
    int ncalls;
} p2p_group_t;

static size_t p2p_count(int src, int dst, int msg)
{
    return 1 + (size_t)(src * 7 + dst * 13 + msg * 5) % 29;
}

static int32_t p2p_value(int src, int dst, int msg, size_t i)
{
    return (int32_t)hash3((uint32_t)(src * MAX_RANKS + dst),
                          (uint32_t)msg + 77u, (uint32_t)i);
}

static void p2p_init(p2p_group_t *g, int w, int rank, int salt)
{
    memset(g, 0, sizeof(*g));
    /* The slots: (direction, peer) twice each, shuffled by the rank;
     * the k-th slot of a direction and peer carries message k. */
    int slots[MAX_RANKS * P2P_MSGS * 2], nslots = 0;
    for (int dir = 0; dir < 2; dir++)
        for (int q = 0; q < w; q++)
            for (int k = 0; k < P2P_MSGS; k++)
                slots[nslots++] = dir * MAX_RANKS + q;
    uint32_t rng = hash3((uint32_t)salt, (uint32_t)rank, 12345u) | 1u;
    for (int i = nslots - 1; i > 0; i--) {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        int j = (int)(rng % (uint32_t)(i + 1));
        int tmp = slots[i];
        slots[i] = slots[j];
        slots[j] = tmp;
    }
    reduction_init(&g->coll, rank, SWY_DEVCOLL_ALLREDUCE, 0, SWY_FLOAT32,
                   SWY_SUM, salt, 100, 0);
    int coll_at = (rank * 3 + salt) % (nslots + 1);
    int next[2][MAX_RANKS] = {{0}};
    for (int s = 0; s <= nslots; s++) {
        if (s == coll_at)
            g->calls[g->ncalls++] = g->coll.call;
        if (s == nslots)
            break;
        int dir = slots[s] / MAX_RANKS, q = slots[s] % MAX_RANKS;
        int k = next[dir][q]++;
        if (dir == 0) {
            size_t n = p2p_count(rank, q, k);
            int32_t *buf = dev_alloc(n * 4);
            for (size_t i = 0; i < n; i++)
                buf[i] = p2p_value(rank, q, k, i);
            g->send[q][k] = buf;
            g->calls[g->ncalls++] = (swy_devcoll_call_v1_t){
                SWY_DEVCOLL_SEND, q, SWY_INT32, SWY_SUM, buf, NULL, n};
        } else {
            size_t n = p2p_count(q, rank, k);
            int32_t *buf = dev_alloc(n * 4);
            memset(buf, 0, n * 4);
            g->recv[q][k] = buf;
            g->calls[g->ncalls++] = (swy_devcoll_call_v1_t){
                SWY_DEVCOLL_RECV, q, SWY_INT32, SWY_SUM, NULL, buf, n};
        }
    }
}

static void p2p_check(p2p_group_t *g, int w, int rank)
{
    for (int q = 0; q < w; q++)
        for (int k = 0; k < P2P_MSGS; k++) {
            size_t n = p2p_count(q, rank, k);
            int32_t want[32];
            for (size_t i = 0; i < n; i++)
                want[i] = p2p_value(q, rank, k, i);
            char what[64];
            snprintf(what, sizeof(what), "message %d from rank %d", k, q);
            expect_equal(w, rank, what, g->recv[q][k], want, n, 4);
            dev_free(g->send[q][k]);
            dev_free(g->recv[q][k]);
        }
    reduction_check(&g->coll, w, rank);
    reduction_free(&g->coll);
}

/* ---- one rank ----------------------------------------------------- */

static void test_allreduce(void *comm, int w, int rank)
{
    static const struct {
        swy_dtype_t dtype;
        swy_redop_t op;
    } cases[] = {
        {SWY_FLOAT32, SWY_SUM}, {SWY_INT32, SWY_SUM}, {SWY_FLOAT32, SWY_AVG},
        {SWY_INT32, SWY_AVG},   {SWY_INT8, SWY_PROD}, {SWY_UINT8, SWY_MAX},
        {SWY_INT64, SWY_SUM},   {SWY_FLOAT64, SWY_MIN},
        {SWY_FLOAT64, SWY_AVG}, {SWY_FLOAT16, SWY_SUM},
        {SWY_BFLOAT16, SWY_MAX},
    };
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int c = 0; c < n; c++) {
        reduction_t t;
        reduction_init(&t, rank, SWY_DEVCOLL_ALLREDUCE, 0, cases[c].dtype,
                       cases[c].op, 10 + c, 1000 + 37 * (size_t)c, c % 3 == 0);
        done_t d;
        launch_ok(w, rank, "allreduce", comm, &t.call, 1, &d);
        expect_done_ok(w, rank, "allreduce", &d);
        reduction_check(&t, w, rank);
        reduction_free(&t);
    }
}

static void test_reduce_broadcast(void *comm, int w, int rank)
{
    reduction_t t;
    reduction_init(&t, rank, SWY_DEVCOLL_REDUCE, 1 % w, SWY_FLOAT32, SWY_SUM,
                   30, 777, 0);
    done_t d;
    launch_ok(w, rank, "reduce", comm, &t.call, 1, &d);
    expect_done_ok(w, rank, "reduce", &d);
    reduction_check(&t, w, rank);
    reduction_free(&t);

    broadcast_t b;
    broadcast_init(&b, rank, w - 1, 31, 555);
    launch_ok(w, rank, "broadcast", comm, &b.call, 1, &d);
    expect_done_ok(w, rank, "broadcast", &d);
    broadcast_check(&b, w, rank);
}

static void test_p2p(void *comm, int w, int rank)
{
    p2p_group_t g;
    p2p_init(&g, w, rank, 40);
    done_t d;
    launch_ok(w, rank, "send/recv group", comm, g.calls, g.ncalls, &d);
    expect_done_ok(w, rank, "send/recv group", &d);
    p2p_check(&g, w, rank);
}

/* Launches queued before any completes: they run in order, each done
 * once, in launch order. The large one is more than a socket holds. */
static void test_back_to_back(void *comm, int w, int rank)
{
    enum { NLAUNCH = 5 };
    reduction_t big, in_place, reduce;
    broadcast_t b;
    p2p_group_t g;
    reduction_init(&big, rank, SWY_DEVCOLL_ALLREDUCE, 0, SWY_FLOAT32, SWY_SUM,
                   50, (size_t)1 << 20, 0);
    broadcast_init(&b, rank, 0, 51, 3000);
    reduction_init(&in_place, rank, SWY_DEVCOLL_ALLREDUCE, 0, SWY_INT64,
                   SWY_SUM, 52, 5000, 1);
    p2p_init(&g, w, rank, 53);
    reduction_init(&reduce, rank, SWY_DEVCOLL_REDUCE, w - 1, SWY_FLOAT64,
                   SWY_SUM, 54, 4000, 0);
    const swy_devcoll_call_v1_t *calls[NLAUNCH] = {
        &big.call, &b.call, &in_place.call, g.calls, &reduce.call};
    int ncalls[NLAUNCH] = {1, 1, 1, g.ncalls, 1};
    done_t d[NLAUNCH];
    for (int k = 0; k < NLAUNCH; k++)
        launch_ok(w, rank, "back to back", comm, calls[k], ncalls[k], &d[k]);
    for (int k = 0; k < NLAUNCH; k++)
        expect_done_ok(w, rank, "back to back", &d[k]);
    for (int k = 1; k < NLAUNCH; k++)
        CHECK(d[k - 1].seq < d[k].seq, "W=%d rank %d: launch %d's done came"
              " before launch %d's", w, rank, k, k - 1);
    reduction_check(&big, w, rank);
    broadcast_check(&b, w, rank);
    reduction_check(&in_place, w, rank);
    p2p_check(&g, w, rank);
    reduction_check(&reduce, w, rank);
    reduction_free(&big);
    reduction_free(&in_place);
    reduction_free(&reduce);
}

/* Every rank launches with a host buffer: each refuses it at once. */
static void test_host_buffer(void *comm, int w, int rank)
{
    size_t count = 64;
    float *host = calloc(count, sizeof(float));
    float *dev = dev_alloc(count * sizeof(float));
    swy_devcoll_call_v1_t calls[2] = {
        {SWY_DEVCOLL_ALLREDUCE, 0, SWY_FLOAT32, SWY_SUM, host, dev, count},
        {SWY_DEVCOLL_ALLREDUCE, 0, SWY_FLOAT32, SWY_SUM, dev, host, count},
    };
    done_t d;
    done_init(&d);
    for (int k = 0; k < 2; k++) {
        swy_status_t status = dc->launch(comm, &calls[k], 1, on_done, &d);
        CHECK(status == SWY_ERR_INVALID_ARG, "W=%d rank %d: a host %s: "
              "status %d", w, rank, k == 0 ? "sendbuf" : "recvbuf",
              (int)status);
        CHECK(strstr(dc->error_string(), "not device memory") != NULL,
              "W=%d rank %d: error text \"%s\"", w, rank,
              dc->error_string());
    }
    CHECK(d.calls == 0, "W=%d rank %d: done came for a refused launch", w,
          rank);
    free(host);
    dev_free(dev);
}

/* The last rank never posts the launch that the others wait in; they
 * queue one more behind it and abort. The one waiting ends with an error
 * before comm_abort returns, the queued one with SWY_ERR_ABORTED without
 * touching its buffer, and later launches are refused. The last rank
 * stays until they are done (sync_fd), so that the others' launch ends
 * by their abort, not by its leaving. */
static void test_abort(void *comm, int w, int rank, const int sync_fd[2])
{
    int skips = rank == w - 1 && w > 1;
    size_t count = 64;
    int32_t *send = dev_alloc(count * 4), *recv = dev_alloc(count * 4);
    int32_t *queued_recv = dev_alloc(count * 4);
    memset(send, 1, count * 4);
    memset(queued_recv, 0x5a, count * 4);
    swy_devcoll_call_v1_t waits = {SWY_DEVCOLL_ALLREDUCE, 0, SWY_INT32,
                                   SWY_SUM, send, recv, count};
    swy_devcoll_call_v1_t queued = waits;
    queued.recvbuf = queued_recv;
    done_t d_wait, d_queued;
    done_init(&d_wait);
    done_init(&d_queued);
    if (skips) {
        for (int k = 0; k < w - 1; k++) {
            struct pollfd p = {.fd = sync_fd[0], .events = POLLIN};
            char byte;
            CHECK(poll(&p, 1, (int)(DONE_TIMEOUT_S * 1000)) == 1 &&
                      read(sync_fd[0], &byte, 1) == 1,
                  "W=%d rank %d: the others never finished their abort", w,
                  rank);
        }
        dc->comm_abort(comm);
    } else if (w > 1) {
        launch_ok(w, rank, "abort: waiting", comm, &waits, 1, &d_wait);
        launch_ok(w, rank, "abort: queued", comm, &queued, 1, &d_queued);
        CHECK(!done_wait(&d_wait, 0.3), "W=%d rank %d: a launch without "
              "rank %d's part completed (status %d)", w, rank, w - 1,
              (int)d_wait.status);
        double start = now_s();
        dc->comm_abort(comm);
        double took = now_s() - start;
        CHECK(took < 2.0, "W=%d rank %d: comm_abort took %.2f s", w, rank,
              took);
        CHECK(d_wait.calls == 1 && d_wait.status != SWY_OK,
              "W=%d rank %d: after comm_abort, the waiting launch's done "
              "came %d time(s), status %d", w, rank, d_wait.calls,
              (int)d_wait.status);
        CHECK(done_wait(&d_queued, 2.0) && d_queued.calls == 1 &&
                  d_queued.status == SWY_ERR_ABORTED,
              "W=%d rank %d: the queued launch's done came %d time(s), "
              "status %d", w, rank, d_queued.calls, (int)d_queued.status);
        int32_t untouched[64];
        memset(untouched, 0x5a, sizeof(untouched));
        expect_equal(w, rank, "the aborted launch's recvbuf", queued_recv,
                     untouched, count, 4);
        char byte = 1;
        CHECK(write(sync_fd[1], &byte, 1) == 1, "W=%d rank %d: sync: %s", w,
              rank, strerror(errno));
    } else {
        dc->comm_abort(comm);
    }
    dc->comm_abort(comm); /* twice is fine */
    done_t d;
    done_init(&d);
    swy_status_t status = dc->launch(comm, &waits, 1, on_done, &d);
    CHECK(status == SWY_ERR_ABORTED, "W=%d rank %d: a launch after "
          "comm_abort: status %d", w, rank, (int)status);
    dev_free(send);
    dev_free(recv);
    dev_free(queued_recv);
}

static int rank_main(int w, int rank, const char *id, const int sync_fd[2])
{
    alarm(RANK_ALARM_S);
    void *comm = NULL;
    swy_status_t status = dc->comm_init(id, w, rank, SWY_PRIO_DEFAULT, 10.0,
                                        &comm);
    CHECK_RET(status == SWY_OK, "W=%d rank %d: comm_init: %d: %s", w, rank,
              (int)status, dc->error_string());
    test_allreduce(comm, w, rank);
    test_reduce_broadcast(comm, w, rank);
    test_p2p(comm, w, rank);
    test_back_to_back(comm, w, rank);
    test_host_buffer(comm, w, rank);
    test_abort(comm, w, rank, sync_fd);
    dc->comm_destroy(comm);
    return check_failures != 0;
}

/* Rank 1 leaves right after comm_init, as a crash would (the kernel
 * closes its sockets): rank 0's launch that needs it fails, not hangs. */
static int rank_peer_death(int w, int rank, const char *id,
                           const int sync_fd[2])
{
    alarm(RANK_ALARM_S);
    void *comm = NULL;
    swy_status_t status = dc->comm_init(id, w, rank, SWY_PRIO_LOW, 10.0,
                                        &comm);
    CHECK_RET(status == SWY_OK, "W=%d rank %d: comm_init: %d: %s", w, rank,
              (int)status, dc->error_string());
    if (rank == 1)
        _exit(0);
    reduction_t t;
    reduction_init(&t, rank, SWY_DEVCOLL_ALLREDUCE, 0, SWY_FLOAT32, SWY_SUM,
                   60, 1000, 0);
    done_t d;
    launch_ok(w, rank, "peer death", comm, &t.call, 1, &d);
    CHECK(done_wait(&d, 5.0) && d.status == SWY_ERR_TRANSPORT,
          "W=%d rank %d: a launch that needs a dead rank: done came %d "
          "time(s), status %d", w, rank, d.calls, (int)d.status);
    dc->comm_destroy(comm);
    reduction_free(&t);
    return check_failures != 0;
}

/* W forked ranks running fn on an id that the parent made, as rank 0
 * would. */
static void run_world(const char *name, int w,
                      int (*fn)(int w, int rank, const char *id,
                                const int sync_fd[2]))
{
    char id[SWY_DEVCOLL_ID_MAX];
    int sync_fd[2];
    CHECK_EXIT(dc->unique_id(id) == SWY_OK, "unique_id: %s",
               dc->error_string());
    CHECK_EXIT(pipe(sync_fd) == 0, "pipe: %s", strerror(errno));
    pid_t pids[MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < w; r++) {
        pids[r] = fork();
        CHECK_EXIT(pids[r] >= 0, "fork: %s", strerror(errno));
        if (pids[r] == 0)
            exit(fn(w, r, id, sync_fd));
    }
    close(sync_fd[0]);
    close(sync_fd[1]);
    int failed = 0;
    for (int r = 0; r < w; r++) {
        int st = 0;
        CHECK_EXIT(waitpid(pids[r], &st, 0) == pids[r], "waitpid: %s",
                   strerror(errno));
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        CHECK(ok, "W=%d rank %d: %s %d", w, r,
              WIFSIGNALED(st) ? "killed by signal" : "exit status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        failed += !ok;
    }
    printf("%s, W=%d: %s\n", name, w, failed == 0 ? "ok" : "FAILED");
}

/* A rank whose peers never come: comm_init fails after timeout_s, whether
 * it waits to accept (rank 0) or to connect (rank 1). */
static void test_init_timeout(void)
{
    int failures = check_failures;
    for (int rank = 0; rank < 2; rank++) {
        char id[SWY_DEVCOLL_ID_MAX];
        CHECK_EXIT(dc->unique_id(id) == SWY_OK);
        void *comm = NULL;
        double start = now_s();
        swy_status_t status = dc->comm_init(id, 2, rank, SWY_PRIO_HIGH, 0.5,
                                            &comm);
        double took = now_s() - start;
        CHECK(status == SWY_ERR_TIMEOUT && comm == NULL,
              "comm_init of rank %d of 2 alone: status %d", rank,
              (int)status);
        CHECK(took >= 0.5 && took < 2.5, "comm_init of rank %d of 2 alone "
              "took %.2f s for a timeout of 0.5 s", rank, took);
        CHECK(strstr(dc->error_string(), "did not join") != NULL,
              "error text \"%s\"", dc->error_string());
    }
    printf("comm_init timeout: %s\n",
           check_failures == failures ? "ok" : "FAILED");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-OF-THE-DOUBLE\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK_RET(lib != NULL, "dlopen: %s", dlerror());
    dc = dlsym(lib, SWY_DEVCOLL_PLUGIN_SYMBOL_V1);
    dev_alloc = (swy_devdouble_alloc_fn)dlsym(lib, SWY_DEVDOUBLE_ALLOC);
    dev_free = (swy_devdouble_free_fn)dlsym(lib, SWY_DEVDOUBLE_FREE);
    CHECK_RET(dc != NULL && dev_alloc != NULL && dev_free != NULL,
              "%s lacks %s or the allocator", argv[1],
              SWY_DEVCOLL_PLUGIN_SYMBOL_V1);
    CHECK_RET(dc->abi_version == SWY_DEVCOLL_ABI_V1 &&
                  dc->struct_size == sizeof(*dc) &&
                  strcmp(dc->name, "devdouble") == 0 && dc->id_bytes > 0 &&
                  dc->id_bytes <= SWY_DEVCOLL_ID_MAX,
              "table: abi %u, size %u, name %s, id_bytes %zu",
              dc->abi_version, dc->struct_size, dc->name, dc->id_bytes);
    /* Forked before any thread of this process starts. */
    for (int w = 1; w <= MAX_RANKS; w++)
        run_world("collectives", w, rank_main);
    run_world("peer death", 2, rank_peer_death);
    test_init_timeout();
    return check_failures != 0;
}
