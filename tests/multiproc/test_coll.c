/* Every collective against a serial reference computed independently on
 * each rank from the same seeded inputs: random data, random uneven counts
 * with zeros, every dtype and reduction op, several ops in flight at once.
 * Usage: test_coll NRANKS [SEED] */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "coll_ref.h"
#include "harness.h"

/* Buffers of the collectives: malloc'd, or from swy_mem_alloc on every
 * rank (TEST_COLL_MEM=shared) or on the odd ranks only (mixed), so that
 * the shm algorithms' direct paths meet every case of the reference; or
 * "device memory" of the GPU test double (device: tests/devdouble). */
static swy_comm_t g_comm;
static int g_shared; /* this rank allocates with swy_mem_alloc */
static int g_device; /* every buffer is the test double's device memory */

/* A buffer that is device memory in device mode, else malloc'd. */
static void *dbuf(size_t bytes)
{
    return g_device ? swy_test_dev_alloc(bytes) : malloc(bytes);
}

static void dfree(void *p)
{
    swy_test_buf_free(g_device, p);
}

static void *tbuf(size_t bytes)
{
    if (g_device || !g_shared)
        return dbuf(bytes);
    if (!g_shared)
        return malloc(bytes);
    void *p = NULL;
    if (swy_mem_alloc(g_comm, bytes, &p) != SWY_OK) {
        fprintf(stderr, "swy_mem_alloc(%zu): %s\n", bytes,
                swy_last_error(g_comm));
        abort();
    }
    return p;
}

static void tfree(void *p)
{
    if (g_device || !g_shared) {
        dfree(p);
    } else if (swy_mem_free(g_comm, p) != SWY_OK) {
        fprintf(stderr, "swy_mem_free: %s\n", swy_last_error(g_comm));
        abort();
    }
}

static int test_allreduce(swy_comm_t comm, int rank, int w, size_t count,
                          int iter0, int in_place)
{
    for (int di = 0; di < NDTYPES; di++)
        for (int op = SWY_SUM; op <= SWY_AVG; op++) {
            int iter = iter0 + di * 8 + op;
            size_t ds = dsizes[di];
            unsigned char *in = tbuf(count * ds + 1);
            unsigned char *out = tbuf(count * ds + 1);
            for (size_t i = 0; i < count; i++)
                gen_value(di, iter, rank, i, op == SWY_PROD, in + i * ds);
            void *dst = in_place ? in : out;
            CHECK_OK_RET(
                swy_allreduce(in, dst, count, dtypes[di], op, comm, NULL, NULL),
                comm);
            for (size_t i = 0; i < count; i++)
                CHECK_RET(check_allreduce_elem(di, op, iter, w, i,
                                               (unsigned char *)dst + i * ds),
                          "allreduce dtype %d op %d count %zu elem %zu", di, op,
                          count, i);
            tfree(in);
            tfree(out);
        }
    return 0;
}

/* counts[i*w+j] = elements rank i sends to rank j, from a shared seed. */
static void a2a_counts(int w, int iter, size_t max, size_t *counts)
{
    uint64_t st = base_seed * 31 + (uint64_t)iter;
    for (int k = 0; k < w * w; k++) {
        uint64_t x = swy_test_rand(&st);
        counts[k] = x % 4 == 0 ? 0 : (size_t)(x >> 8) % (max + 1);
    }
}

static uint32_t a2a_value(int src, int dst, size_t i, int iter)
{
    return (uint32_t)(src * 1000003u + dst * 7919u + i * 31u + (uint32_t)iter);
}

typedef struct {
    size_t *sc, *sd, *rc, *rd;
    uint32_t *sbuf, *rbuf;
    size_t rlen;
    int iter;
} a2a_case_t;

static void a2a_setup(a2a_case_t *c, int rank, int w, int iter, size_t max)
{
    size_t *counts = malloc((size_t)w * w * sizeof(size_t));
    a2a_counts(w, iter, max, counts);
    c->iter = iter;
    c->sc = calloc((size_t)w, sizeof(size_t));
    c->sd = calloc((size_t)w, sizeof(size_t));
    c->rc = calloc((size_t)w, sizeof(size_t));
    c->rd = calloc((size_t)w, sizeof(size_t));
    size_t soff = 0, roff = 0;
    for (int j = 0; j < w; j++) { /* gaps of 3 between blocks */
        c->sc[j] = counts[rank * w + j];
        c->sd[j] = soff;
        soff += c->sc[j] + 3;
        c->rc[j] = counts[j * w + rank];
        c->rd[j] = roff;
        roff += c->rc[j] + 3;
    }
    c->sbuf = tbuf((soff + 1) * 4);
    c->rbuf = tbuf((roff + 1) * 4);
    c->rlen = roff;
    for (int j = 0; j < w; j++)
        for (size_t i = 0; i < c->sc[j]; i++)
            c->sbuf[c->sd[j] + i] = a2a_value(rank, j, i, iter);
    for (size_t i = 0; i < roff; i++)
        c->rbuf[i] = 0xDEADBEEFu;
    free(counts);
}

static int a2a_verify(a2a_case_t *c, int rank, int w)
{
    size_t pos = 0;
    for (int j = 0; j < w; j++) {
        for (size_t i = 0; i < c->rc[j]; i++)
            CHECK_RET(c->rbuf[c->rd[j] + i] == a2a_value(j, rank, i, c->iter),
                      "alltoallv iter %d from %d elem %zu", c->iter, j, i);
        pos = c->rd[j] + c->rc[j];
        for (size_t g = 0; g < 3 && pos + g < c->rlen; g++) /* no overrun */
            CHECK_RET(c->rbuf[pos + g] == 0xDEADBEEFu, "gap after block %d "
                      "written (iter %d)", j, c->iter);
    }
    free(c->sc); free(c->sd); free(c->rc); free(c->rd);
    tfree(c->sbuf); tfree(c->rbuf);
    return 0;
}

static int test_alltoallv(swy_comm_t comm, int rank, int w, int iter,
                          size_t max)
{
    a2a_case_t c;
    a2a_setup(&c, rank, w, iter, max);
    CHECK_OK_RET(swy_alltoallv(c.sbuf, c.sc, c.sd, c.rbuf, c.rc, c.rd,
                               SWY_INT32, comm, NULL, NULL),
                 comm);
    return a2a_verify(&c, rank, w);
}

static int test_allgather(swy_comm_t comm, int rank, int w, size_t count,
                          int in_place)
{
    int64_t *buf = dbuf((count * (size_t)w + 1) * 8);
    int64_t *mine = dbuf((count + 1) * 8);
    for (size_t i = 0; i < count * (size_t)w; i++)
        buf[i] = -1;
    for (size_t i = 0; i < count; i++)
        mine[i] = rank * 1000000 + (int64_t)i;
    if (in_place)
        memcpy(buf + (size_t)rank * count, mine, count * 8);
    CHECK_OK_RET(swy_allgather(in_place ? buf + (size_t)rank * count : mine,
                               buf, count, SWY_INT64, comm, NULL, NULL),
                 comm);
    for (int r = 0; r < w; r++)
        for (size_t i = 0; i < count; i++)
            CHECK_RET(buf[(size_t)r * count + i] == r * 1000000 + (int64_t)i,
                      "allgather block %d elem %zu", r, i);
    dfree(buf);
    dfree(mine);
    return 0;
}

static int test_broadcast(swy_comm_t comm, int rank, int w, size_t count)
{
    for (int root = 0; root < w; root++) {
        double *buf = dbuf((count + 1) * 8);
        for (size_t i = 0; i < count; i++)
            buf[i] = rank == root ? root + i * 0.5 : -1;
        CHECK_OK_RET(swy_broadcast(buf, count, SWY_FLOAT64, root, comm, NULL,
                                   NULL), comm);
        for (size_t i = 0; i < count; i++)
            CHECK_RET(buf[i] == root + i * 0.5, "broadcast root %d elem %zu",
                      root, i);
        dfree(buf);
    }
    return 0;
}

/* Several ops in flight at once, of different kinds and priorities,
 * waited for in reverse order; the allreduces (one in place) queue for
 * the shared-memory channel where they take it. */
static int test_in_flight(swy_comm_t comm, int rank, int w)
{
    enum { NA2A = 4, NAR = 3 };
    a2a_case_t cases[NA2A];
    swy_request_t reqs[NA2A + NAR + 1];
    size_t count = 50000;
    float *ar_in[NAR], *ar_out[NAR];
    for (int a = 0; a < NAR; a++) {
        ar_in[a] = tbuf(count * 4);
        ar_out[a] = a == 1 ? ar_in[a] : tbuf(count * 4);
        for (size_t i = 0; i < count; i++)
            ar_in[a][i] = (float)(rank + 1) * (float)((i + (size_t)a) % 7);
    }
    int64_t *bc = dbuf(count * 8);
    for (size_t i = 0; i < count; i++)
        bc[i] = rank == 0 ? (int64_t)i * 3 : 0;
    CHECK_OK_RET(swy_allreduce(ar_in[0], ar_out[0], count, SWY_FLOAT32, SWY_SUM,
                               comm, NULL, &reqs[0]), comm);
    for (int k = 0; k < NA2A; k++) {
        a2a_setup(&cases[k], rank, w, 1000 + k, 30000);
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.priority = k % 2 ? SWY_PRIO_HIGH : SWY_PRIO_LOW;
        attr.order = NA2A - k;
        attr.name = "inflight";
        CHECK_OK_RET(swy_alltoallv(cases[k].sbuf, cases[k].sc, cases[k].sd,
                                   cases[k].rbuf, cases[k].rc, cases[k].rd,
                                   SWY_INT32, comm, &attr, &reqs[1 + k]), comm);
        if (k == 1) { /* between the all-to-alls, at high priority */
            swy_op_attr_t ar_attr = SWY_OP_ATTR_INIT;
            ar_attr.priority = SWY_PRIO_HIGH;
            CHECK_OK_RET(swy_allreduce(ar_in[1], ar_out[1], count, SWY_FLOAT32,
                                       SWY_SUM, comm, &ar_attr,
                                       &reqs[NA2A + 1]), comm);
        }
    }
    CHECK_OK_RET(swy_allreduce(ar_in[2], ar_out[2], count, SWY_FLOAT32, SWY_SUM,
                               comm, NULL, &reqs[NA2A + 2]), comm);
    CHECK_OK_RET(swy_broadcast(bc, count, SWY_INT64, 0, comm, NULL,
                               &reqs[NA2A + NAR]), comm);
    for (int k = NA2A + NAR; k >= 0; k--) {
        CHECK_OK_RET(swy_wait(reqs[k]), comm);
        swy_request_free(reqs[k]);
    }
    float expect_scale = (float)w * (float)(w + 1) / 2;
    for (size_t i = 0; i < count; i++) {
        for (int a = 0; a < NAR; a++)
            CHECK_RET(ar_out[a][i] ==
                          expect_scale * (float)((i + (size_t)a) % 7),
                      "inflight allreduce %d element %zu", a, i);
        CHECK_RET(bc[i] == (int64_t)i * 3, "inflight broadcast %zu", i);
    }
    for (int k = 0; k < NA2A; k++)
        if (a2a_verify(&cases[k], rank, w))
            return 1;
    for (int a = 0; a < NAR; a++) {
        if (ar_out[a] != ar_in[a])
            tfree(ar_out[a]);
        tfree(ar_in[a]);
    }
    dfree(bc);
    return 0;
}

/* Mappings of swy_mem_alloc memory (this rank's and the peers') in
 * this process. */
static int memfd_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, "/memfd:switchyard") != NULL;
    fclose(f);
    return n;
}

/* After hundreds of buffers allocated and freed, one more op (on every
 * rank; its buffers shared where the rank's are): the peers' frees were
 * announced, so only this op's buffers may still be mapped (this rank's
 * two, two of each shared peer). */
static int test_mappings_dropped(swy_comm_t comm, int w)
{
    size_t count = 100000;
    float *in = tbuf(count * 4), *out = tbuf(count * 4);
    for (size_t i = 0; i < count; i++)
        in[i] = 1.0f;
    CHECK_OK_RET(swy_allreduce(in, out, count, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               NULL), comm);
    CHECK_RET(out[count - 1] == (float)w, "allreduce of ones: %f", out[0]);
    int maps = memfd_mappings();
    CHECK_RET(maps >= 0 && maps <= 2 * w, "%d mappings of swy_mem_alloc memory "
              "left (at most %d expected)", maps, 2 * w);
    tfree(in);
    tfree(out);
    return 0;
}

/* Device mode: an allreduce posted with attr.stream reads what the work
 * queued on that stream before the post wrote, however late it runs
 * (here 30 ms). Broken when the post does not order itself after the
 * stream: the sum is then of the 0xA5 filler, not of the ranks' values. */
typedef struct {
    float *buf;
    size_t n;
    float value;
} slow_fill_t;

static void slow_fill(void *arg)
{
    slow_fill_t *f = arg;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (size_t i = 0; i < f->n; i++)
        f->buf[i] = f->value;
}

static int test_stream_order(swy_comm_t comm, int rank, int w)
{
    size_t count = 20000;
    float *in = tbuf(count * 4), *out = tbuf(count * 4);
    void *stream = swy_test_dev_stream_create();
    slow_fill_t fill = {in, count, (float)(rank + 1)};
    swy_test_dev_launch(stream, slow_fill, &fill);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    attr.name = "after-stream";
    CHECK_OK_RET(swy_allreduce(in, out, count, SWY_FLOAT32, SWY_SUM, comm,
                               &attr, NULL), comm);
    float expect = (float)w * (float)(w + 1) / 2;
    for (size_t i = 0; i < count; i++)
        CHECK_RET(out[i] == expect, "allreduce after the stream: element %zu "
                  "is %g, expected %g", i, (double)out[i], (double)expect);
    swy_test_dev_stream_destroy(stream);
    tfree(in);
    tfree(out);
    return 0;
}

/* Device mode with the double's gates refused (SWYTEST_DEVDOUBLE_GATE=
 * refuse, as the nccl plugin refuses them under CUDA_MODULE_LOADING=LAZY):
 * the library cannot hold the stream for an op, so a non-blocking post on a
 * stream, and a group's posts at swy_group_end, return only once their ops
 * completed; the result is right (each op still waited for its stream's
 * earlier, slow work). Broken when the fallback is missing: the op is then
 * not done when the post returns. */
static int test_stream_nogate(swy_comm_t comm, int rank, int w)
{
    size_t count = 20000;
    float *x = tbuf(count * 4), *y = tbuf(count * 4);
    float *xb = tbuf(count * 4), *yb = tbuf(count * 4);
    void *a = swy_test_dev_stream_create(), *b = swy_test_dev_stream_create();
    slow_fill_t fa = {x, count, (float)(rank + 1)};
    slow_fill_t fb = {xb, count, (float)(2 * rank)};
    swy_op_attr_t on_a = SWY_OP_ATTR_INIT, on_b = SWY_OP_ATTR_INIT;
    on_a.stream = a;
    on_b.stream = b;
    swy_request_t r, ra, rb;
    int done = 0;
    swy_test_dev_launch(a, slow_fill, &fa);
    CHECK_OK_RET(swy_allreduce(x, y, count, SWY_FLOAT32, SWY_SUM, comm, &on_a,
                               &r), comm);
    CHECK_OK_RET(swy_test(r, &done), comm);
    CHECK_RET(done, "a post on a stream that cannot be held returned before "
              "its op completed");
    swy_request_free(r);
    float sa = (float)w * (float)(w + 1) / 2, sb = (float)w * (float)(w - 1);
    for (size_t i = 0; i < count; i++)
        CHECK_RET(y[i] == sa, "allreduce on stream a: element %zu is %g, "
                  "expected %g", i, (double)y[i], (double)sa);
    swy_test_dev_launch(a, slow_fill, &fa);
    swy_test_dev_launch(b, slow_fill, &fb);
    CHECK_OK_RET(swy_group_start(), comm);
    CHECK_OK_RET(swy_allreduce(x, y, count, SWY_FLOAT32, SWY_SUM, comm, &on_a,
                               &ra), comm);
    CHECK_OK_RET(swy_allreduce(xb, yb, count, SWY_FLOAT32, SWY_SUM, comm,
                               &on_b, &rb), comm);
    CHECK_OK_RET(swy_group_end(), comm);
    int done_b = 0;
    CHECK_OK_RET(swy_test(ra, &done), comm);
    CHECK_OK_RET(swy_test(rb, &done_b), comm);
    CHECK_RET(done && done_b, "swy_group_end returned before the ops on "
              "streams that cannot be held completed (a %d, b %d)", done,
              done_b);
    swy_request_free(ra);
    swy_request_free(rb);
    for (size_t i = 0; i < count; i++)
        CHECK_RET(y[i] == sa && yb[i] == sb, "group on streams a and b: "
                  "element %zu is %g and %g, expected %g and %g", i,
                  (double)y[i], (double)yb[i], (double)sa, (double)sb);
    swy_test_dev_stream_destroy(a);
    swy_test_dev_stream_destroy(b);
    tfree(x);
    tfree(y);
    tfree(xb);
    tfree(yb);
    return 0;
}

/* Device mode, as NCCL's calls: a non-blocking post with attr.stream
 * returns while the stream's earlier work still runs (that work here
 * waits for the caller to say go, after the post: a post that waited for
 * the stream would wait the 10 s out), and work queued on the stream
 * after the post runs after the op completed (a snapshot of recvbuf
 * taken on the stream; rank 1 posts 100 ms late, so rank 0's op cannot
 * be done before its snapshot would run without the hold). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go, timed_out;
    float *buf;
    size_t n;
    float value;
} gated_fill_t;

static void gated_fill(void *arg)
{
    gated_fill_t *g = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&g->lock);
    while (!g->go && !g->timed_out)
        g->timed_out = pthread_cond_timedwait(&g->cond, &g->lock, &until) ==
                       ETIMEDOUT;
    pthread_mutex_unlock(&g->lock);
    for (size_t i = 0; i < g->n; i++)
        g->buf[i] = g->value;
}

static int test_stream_semantics(swy_comm_t comm, int rank, int w)
{
    size_t count = 20000;
    float *in = tbuf(count * 4), *out = tbuf(count * 4);
    float *snap = malloc(count * 4);
    CHECK_RET(snap != NULL, "out of memory");
    void *stream = swy_test_dev_stream_create();
    gated_fill_t g = {.buf = in, .n = count, .value = (float)(rank + 1)};
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.cond, NULL);
    swy_test_dev_launch(stream, gated_fill, &g);
    if (rank == 1) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    attr.name = "on-stream";
    swy_request_t req;
    CHECK_OK_RET(swy_allreduce(in, out, count, SWY_FLOAT32, SWY_SUM, comm,
                               &attr, &req), comm);
    /* Waiting for its stream, it is not the caller's to start. */
    CHECK_RET(swy_chunk_release(req) == SWY_ERR_INVALID_ARG,
              "swy_chunk_release of an op waiting for its stream");
    swy_test_snapshot_t snapshot = {out, snap, count * sizeof(float)};
    swy_test_dev_launch(stream, swy_test_snapshot, &snapshot);
    pthread_mutex_lock(&g.lock);
    int posted_in_time = !g.timed_out;
    g.go = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    CHECK_RET(posted_in_time, "the post waited for the stream's earlier work");
    CHECK_OK_RET(swy_wait(req), comm);
    swy_request_free(req);
    swy_test_dev_stream_destroy(stream); /* runs what is queued first */
    float expect = (float)w * (float)(w + 1) / 2;
    for (size_t i = 0; i < count; i++) {
        CHECK_RET(out[i] == expect, "on-stream allreduce: element %zu is %g, "
                  "expected %g", i, (double)out[i], (double)expect);
        CHECK_RET(snap[i] == expect, "work queued on the stream after the "
                  "post ran before the op completed: element %zu of its "
                  "snapshot is %g, expected %g", i, (double)snap[i],
                  (double)expect);
    }
    /* A stream being captured into a graph: refused, nothing posted. */
    stream = swy_test_dev_stream_create();
    swy_test_dev_stream_capture(stream, 1);
    attr.stream = stream;
    swy_status_t st = swy_allreduce(in, out, count, SWY_FLOAT32, SWY_SUM,
                                    comm, &attr, &req);
    CHECK_RET(st == SWY_ERR_UNSUPPORTED, "a post on a capturing stream: %s",
              swy_status_string(st));
    CHECK_RET(strstr(swy_last_error(comm), "captured") != NULL, "message: %s",
              swy_last_error(comm));
    swy_test_dev_stream_destroy(stream);
    pthread_mutex_destroy(&g.lock);
    pthread_cond_destroy(&g.cond);
    free(snap);
    tfree(in);
    tfree(out);
    /* The communicator goes on. */
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

/* Device mode: a group's ops on two streams, posted a, b, a: each stream's
 * ops are ordered on it together. The first op on stream a completes
 * while stream b still waits for the caller's go (were it batched with
 * b's op, it would wait too; it is posted first, as fifo serves a
 * communicator's ops in posting order), and the op on b reads what b's
 * earlier work wrote (were it batched with a's, it would sum the
 * filler). */
static int test_stream_group(swy_comm_t comm, int rank, int w)
{
    size_t count = 5000;
    float *xa = tbuf(count * 4), *ya = tbuf(count * 4);
    float *xb = tbuf(count * 4), *yb = tbuf(count * 4);
    float *ya2 = tbuf(count * 4);
    for (size_t i = 0; i < count; i++)
        xa[i] = (float)(rank + 1);
    void *a = swy_test_dev_stream_create(), *b = swy_test_dev_stream_create();
    gated_fill_t g = {.buf = xb, .n = count, .value = (float)(2 * rank)};
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.cond, NULL);
    swy_test_dev_launch(b, gated_fill, &g);
    swy_op_attr_t on_a = SWY_OP_ATTR_INIT, on_b = SWY_OP_ATTR_INIT;
    on_a.stream = a;
    on_b.stream = b;
    swy_request_t ra, rb, ra2;
    CHECK_OK_RET(swy_group_start(), comm);
    CHECK_OK_RET(swy_allreduce(xa, ya, count, SWY_FLOAT32, SWY_SUM, comm,
                               &on_a, &ra), comm);
    CHECK_OK_RET(swy_allreduce(xb, yb, count, SWY_FLOAT32, SWY_SUM, comm,
                               &on_b, &rb), comm);
    CHECK_OK_RET(swy_allreduce(xa, ya2, count, SWY_FLOAT32, SWY_SUM, comm,
                               &on_a, &ra2), comm);
    CHECK_OK_RET(swy_group_end(), comm);
    int done = 0;
    for (int i = 0; i < 5000 && !done; i++) {
        CHECK_OK_RET(swy_test(ra, &done), comm);
        if (!done) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&g.lock);
    g.go = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    CHECK_RET(done, "the group's op on stream a waited for stream b");
    CHECK_OK_RET(swy_wait(rb), comm);
    CHECK_OK_RET(swy_wait(ra2), comm);
    swy_request_free(ra);
    swy_request_free(rb);
    swy_request_free(ra2);
    swy_test_dev_stream_destroy(a);
    swy_test_dev_stream_destroy(b);
    float sa = (float)w * (float)(w + 1) / 2, sb = (float)w * (float)(w - 1);
    for (size_t i = 0; i < count; i++) {
        CHECK_RET(ya[i] == sa && ya2[i] == sa, "stream a: element %zu is "
                  "%g and %g, expected %g", i, (double)ya[i],
                  (double)ya2[i], (double)sa);
        CHECK_RET(yb[i] == sb, "stream b: element %zu is %g, expected %g", i,
                  (double)yb[i], (double)sb);
    }
    CHECK_RET(!g.timed_out, "stream b's work timed out");
    pthread_mutex_destroy(&g.lock);
    pthread_cond_destroy(&g.cond);
    tfree(xa);
    tfree(ya);
    tfree(xb);
    tfree(yb);
    tfree(ya2);
    return 0;
}

static int rank_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t big = *(size_t *)arg;
    const char *mem = getenv("TEST_COLL_MEM");
    g_comm = comm;
    g_shared = mem != NULL && (strcmp(mem, "shared") == 0 ||
                               (strcmp(mem, "mixed") == 0 && rank % 2));
    g_device = mem != NULL && strcmp(mem, "device") == 0;
    CHECK_RET(!g_device || swy_test_devdouble(), "TEST_COLL_MEM=device: the "
              "GPU test double is not loaded (SWYTEST_DEVDOUBLE)");
    CHECK_RET(swy_comm_rank(comm) == rank && swy_comm_size(comm) == w,
              "rank/size");
    CHECK_OK_RET(swy_barrier(comm), comm);
    size_t sizes[] = {0, 1, 7, 1000, big};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        if (test_allreduce(comm, rank, w, sizes[k], (int)k * 100, k % 2))
            return 1;
        if (test_allgather(comm, rank, w, sizes[k], k % 2))
            return 1;
        if (test_broadcast(comm, rank, w, sizes[k]))
            return 1;
    }
    for (int iter = 0; iter < 6; iter++)
        if (test_alltoallv(comm, rank, w, iter, iter < 3 ? 100 : big / 4))
            return 1;
    if (test_in_flight(comm, rank, w))
        return 1;
    /* A double without the optional stream functions: the post waits
     * for the stream (test_stream_order). */
    int first_release = getenv("TEST_DEVDOUBLE_FIRST_RELEASE") != NULL;
    const char *gate = getenv("SWYTEST_DEVDOUBLE_GATE");
    int no_gate = gate != NULL && strcmp(gate, "refuse") == 0;
    if (g_device && (test_stream_order(comm, rank, w) ||
                     (no_gate && test_stream_nogate(comm, rank, w)) ||
                     (!first_release && !no_gate &&
                      (test_stream_semantics(comm, rank, w) ||
                       test_stream_group(comm, rank, w)))))
        return 1;
    if (mem != NULL && !g_device && test_mappings_dropped(comm, w))
        return 1;
    CHECK_OK_RET(swy_barrier(comm), comm);
    swy_comm_stats_t stats = {.struct_size = sizeof(stats)};
    CHECK_OK_RET(swy_comm_stats(comm, &stats), comm);
    CHECK_RET(stats.ops_posted == stats.ops_completed,
              "stats %llu posted, %llu "
              "completed",
              (unsigned long long)stats.ops_posted,
              (unsigned long long)stats.ops_completed);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    size_t big = argc > 2 ? (size_t)atol(argv[2]) : 300000;
    if (argc > 3)
        base_seed = (uint64_t)atoll(argv[3]);
    int rc = swy_test_spawn(nranks, rank_main, &big, 240, NULL);
    printf("%s: %d ranks, big count %zu\n", rc ? "FAIL" : "PASS", nranks, big);
    return rc;
}
