/* swy_alltoallv_chunks: an all-to-all in chunks that share one header
 * exchange, against a serial reference computed here.
 * Usage: test_chunks NRANKS CASE
 *   basic     8 chunks of random counts (zeros among them): every chunk's
 *             data right; the series sends one header to each peer,
 *             where the same chunks as lone alltoallvs send one each;
 *             device chunks move in the device plugin's launches, none
 *             through the transport
 *   held      SWY_CHUNKS_HELD: each chunk's part of sendbuf is written
 *             only just before its release, in an order of each rank's
 *             own; releasing twice or a lone op is refused; device
 *             chunks move in the device plugin's launches
 *   args      bad arguments refused, naming the chunk; nothing posted
 *   nchunks   rank 0 posts one chunk more: SWY_ERR_MISMATCH everywhere
 *   totals    rank 1 expects one element more from rank 0 in chunk 2
 *   divide    same totals, chunks 1 and 2 divide them differently
 *   unreleased  the last rank never releases chunk 1 of 3 held chunks:
 *             every rank's wait ends in SWY_ERR_TIMEOUT (run with a short
 *             SWY_TIMEOUT_S), naming the chunk never released or the
 *             rank whose data never came
 *   stream_stuck  (device) the last rank's stream never gets to its
 *             alltoallv (posted on it, not in chunks): every rank's wait
 *             ends in SWY_ERR_TIMEOUT, naming the stream or the rank;
 *             the stream goes on after the failure, and the op's late
 *             callback finds it failed (run with a short SWY_TIMEOUT_S)
 *   later_op  (device) a device alltoallv posted after held chunks and
 *             waited for before any release: SWY_ERR_TIMEOUT on every
 *             rank, naming the held chunk (short SWY_TIMEOUT_S)
 *   stream    (device) 8 chunks posted on a stream whose earlier work
 *             (the fill of sendbuf) waits for the caller's go, given after
 *             the post: the post does not wait for it, the chunks read
 *             what it wrote, release is refused, and work queued on the
 *             stream after the post sees every chunk's data
 * TEST_COLL_MEM=device: sendbuf and recvbuf are device memory of the GPU
 * test double (tests/devdouble). */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NCHUNKS 8

static int g_device; /* TEST_COLL_MEM=device */

/* n doubles, zeroed: device memory of the test double in device mode. */
static double *dzalloc(size_t n)
{
    return swy_test_buf_calloc(g_device, n, sizeof(double));
}

static void dfree(void *p)
{
    swy_test_buf_free(g_device, p);
}

/* The value rank src sends rank dst at element i of chunk j. */
static double val(int src, int dst, int j, size_t i)
{
    return (double)(src * 100000 + dst * 1000 + j * 100) + (double)(i % 97);
}

/* Elements rank src sends rank dst in chunk j (zeros included). */
static size_t count_of(int src, int dst, int j, uint64_t seed)
{
    uint64_t st = seed ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^
                  (uint64_t)j;
    uint64_t r = swy_test_rand(&st);
    return r % 5 == 0 ? 0 : (size_t)(r % 3000);
}

typedef struct {
    size_t *sc, *sd, *rc, *rd; /* [NCHUNKS * w] */
    double *send, *recv;
    size_t send_total, recv_total;
} plan_t;

static int plan_make(plan_t *p, int rank, int w, int n, uint64_t seed)
{
    size_t cells = (size_t)n * (size_t)w;
    p->sc = calloc(cells * 4, sizeof(size_t));
    CHECK_RET(p->sc != NULL, "malloc");
    p->sd = p->sc + cells;
    p->rc = p->sd + cells;
    p->rd = p->rc + cells;
    size_t so = 0, ro = 0;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < w; k++) {
            size_t c = (size_t)j * (size_t)w + (size_t)k;
            p->sc[c] = count_of(rank, k, j, seed);
            p->sd[c] = so;
            so += p->sc[c];
            p->rc[c] = count_of(k, rank, j, seed);
            p->rd[c] = ro;
            ro += p->rc[c];
        }
    p->send_total = so;
    p->recv_total = ro;
    p->send = dzalloc(so + 1);
    p->recv = dzalloc(ro + 1);
    CHECK_RET(p->send != NULL && p->recv != NULL, "malloc");
    for (size_t i = 0; i < ro; i++)
        p->recv[i] = -1;
    return 0;
}

static void fill_chunk(plan_t *p, int rank, int w, int j)
{
    for (int k = 0; k < w; k++) {
        size_t c = (size_t)j * (size_t)w + (size_t)k;
        for (size_t i = 0; i < p->sc[c]; i++)
            p->send[p->sd[c] + i] = val(rank, k, j, i);
    }
}

static int check_chunk(const plan_t *p, int rank, int w, int j)
{
    for (int k = 0; k < w; k++) {
        size_t c = (size_t)j * (size_t)w + (size_t)k;
        for (size_t i = 0; i < p->rc[c]; i++)
            CHECK_RET(p->recv[p->rd[c] + i] == val(k, rank, j, i),
                      "chunk %d from rank %d [%zu]: %g, want %g", j, k, i,
                      p->recv[p->rd[c] + i], val(k, rank, j, i));
    }
    return 0;
}

static void plan_free(plan_t *p)
{
    free(p->sc);
    dfree(p->send);
    dfree(p->recv);
}

static uint64_t headers_sent(swy_comm_t comm)
{
    swy_comm_stats_t st = {.struct_size = sizeof(st)};
    if (swy_comm_stats(comm, &st) != SWY_OK)
        return UINT64_MAX;
    return st.headers_sent;
}

/* Device mode: what moved device memory so far (the double counts). */
static swy_test_dev_traffic_t traffic_mark(void)
{
    swy_test_dev_traffic_t none = {0, 0};
    return g_device ? swy_test_dev_traffic_mark() : none;
}

/* Device mode: since mark, the chunks' data moved in the plugin's
 * launches, none through the transport's pairs. */
static int check_plugin_moved(swy_test_dev_traffic_t mark, const char *what)
{
    return g_device ? swy_test_dev_moved_by_plugin(mark, what) : 0;
}

static int case_basic(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    for (int round = 0; round < 3; round++) {
        plan_t p;
        if (plan_make(&p, rank, w, NCHUNKS, 77 + (uint64_t)round))
            return 1;
        for (int j = 0; j < NCHUNKS; j++)
            fill_chunk(&p, rank, w, j);
        swy_request_t reqs[NCHUNKS];
        /* Device chunks, as lone device alltoallvs, are the plugin's, and
         * the first makes its communicators (a broadcast, with headers of
         * its own): a lone one makes them before the windows. */
        CHECK_OK_RET(swy_alltoallv(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                   SWY_FLOAT64, comm, NULL, NULL), comm);
        for (size_t i = 0; i < p.recv_total; i++)
            p.recv[i] = -1;
        CHECK_OK_RET(swy_barrier(comm), comm);
        uint64_t h0 = headers_sent(comm);
        swy_test_dev_traffic_t mark = traffic_mark();
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.name = "chunks";
        CHECK_OK_RET(swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                      NCHUNKS, SWY_FLOAT64, comm, &attr, 0,
                                      reqs), comm);
        /* The last chunk first: each completes on its own. */
        for (int j = NCHUNKS - 1; j >= 0; j--) {
            CHECK_OK_RET(swy_wait(reqs[j]), comm);
            swy_request_free(reqs[j]);
            if (check_chunk(&p, rank, w, j))
                return 1;
        }
        uint64_t series = headers_sent(comm) - h0;
        if (check_plugin_moved(mark, "chunks"))
            return 1;
        /* The same chunks as lone alltoallvs: a header each. */
        CHECK_OK_RET(swy_barrier(comm), comm);
        h0 = headers_sent(comm);
        for (int j = 0; j < NCHUNKS; j++) {
            size_t at = (size_t)j * (size_t)w;
            CHECK_OK_RET(swy_alltoallv(p.send, p.sc + at, p.sd + at, p.recv,
                                   p.rc + at, p.rd + at, SWY_FLOAT64, comm,
                                   NULL, &reqs[j]), comm);
        }
        for (int j = 0; j < NCHUNKS; j++) {
            CHECK_OK_RET(swy_wait(reqs[j]), comm);
            swy_request_free(reqs[j]);
        }
        uint64_t lone = headers_sent(comm) - h0;
        /* The barriers' own headers are outside both windows. */
        CHECK_RET(series == (uint64_t)(w - 1), "the series sent %llu headers, "
                  "want %d (one per peer)", (unsigned long long)series, w - 1);
        CHECK_RET(lone == (uint64_t)NCHUNKS * (uint64_t)(w - 1), "lone chunks "
                  "sent %llu headers, want %d", (unsigned long long)lone,
                  NCHUNKS * (w - 1));
        plan_free(&p);
    }
    return 0;
}

static int case_held(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    plan_t p;
    if (plan_make(&p, rank, w, NCHUNKS, 4242))
        return 1;
    for (size_t i = 0; i < p.send_total; i++)
        p.send[i] = -7; /* what a send before its release would carry */
    swy_request_t reqs[NCHUNKS];
    swy_test_dev_traffic_t mark = traffic_mark();
    CHECK_OK_RET(swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                  NCHUNKS, SWY_FLOAT64, comm, NULL,
                                  SWY_CHUNKS_HELD, reqs), comm);
    usleep(20000); /* room for a send that would not wait */
    /* Each rank releases in an order of its own: backwards, starting
     * three chunks further on per rank. */
    for (int i = 0; i < NCHUNKS; i++) {
        int j = (NCHUNKS - 1 - i + 3 * rank) % NCHUNKS;
        fill_chunk(&p, rank, w, j);
        CHECK_OK_RET(swy_chunk_release(reqs[j]), comm);
        if (i == 0) {
            swy_status_t st = swy_chunk_release(reqs[j]);
            CHECK_RET(st == SWY_ERR_INVALID_ARG, "a second release: %s",
                      swy_status_string(st));
            CHECK_RET(strstr(swy_last_error(NULL), "released already") != NULL,
                      "message: %s", swy_last_error(NULL));
        }
    }
    for (int j = 0; j < NCHUNKS; j++) {
        CHECK_OK_RET(swy_wait(reqs[j]), comm);
        swy_request_free(reqs[j]);
        if (check_chunk(&p, rank, w, j))
            return 1;
    }
    if (check_plugin_moved(mark, "held chunks"))
        return 1;
    /* A lone op is not held. */
    float x = 1, y = 0;
    swy_request_t req;
    CHECK_OK_RET(swy_allreduce(&x, &y, 1, SWY_FLOAT32, SWY_SUM, comm, NULL, &req),
             comm);
    CHECK_RET(swy_chunk_release(req) == SWY_ERR_INVALID_ARG, "lone op released");
    CHECK_OK_RET(swy_wait(req), comm);
    swy_request_free(req);
    CHECK_RET(y == (float)w, "allreduce after the series: %g", (double)y);
    CHECK_RET(swy_chunk_release(NULL) == SWY_ERR_INVALID_ARG, "NULL released");
    plan_free(&p);
    return 0;
}

static int expect_refused(swy_comm_t comm, swy_status_t got,
                          const char *needle)
{
    CHECK_RET(got == SWY_ERR_INVALID_ARG, "got %s", swy_status_string(got));
    CHECK_RET(strstr(swy_last_error(comm), needle) != NULL, "message lacks "
              "'%s': %s", needle, swy_last_error(comm));
    return 0;
}

static int case_args(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    plan_t p;
    if (plan_make(&p, rank, w, 3, 5))
        return 1;
    swy_request_t reqs[3] = {NULL, NULL, NULL};
    uint64_t posted0;
    swy_comm_stats_t st = {.struct_size = sizeof(st)};
    CHECK_OK_RET(swy_comm_stats(comm, &st), comm);
    posted0 = st.ops_posted;
    if (expect_refused(comm, swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv,
                       p.rc, p.rd, 0, SWY_FLOAT64, comm, NULL, 0, reqs),
                       "nchunks 0"))
        return 1;
    if (expect_refused(comm, swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv,
                       p.rc, p.rd, 3, SWY_FLOAT64, comm, NULL, 0, NULL),
                       "reqs"))
        return 1;
    if (expect_refused(comm, swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv,
                       p.rc, p.rd, 3, SWY_FLOAT64, comm, NULL, 6, reqs),
                       "unknown flags"))
        return 1;
    if (expect_refused(comm, swy_alltoallv_chunks(p.send, NULL, p.sd, p.recv,
                       p.rc, p.rd, 3, SWY_FLOAT64, comm, NULL, 0, reqs),
                       "sendcounts is NULL"))
        return 1;
    /* Chunk 2 receives from rank 0 over chunk 2's region of rank w-1. */
    size_t saved = p.rd[2 * (size_t)w];
    p.rd[2 * (size_t)w] = p.rd[2 * (size_t)w + (size_t)w - 1];
    size_t c0 = p.rc[2 * (size_t)w], c1 = p.rc[2 * (size_t)w + (size_t)w - 1];
    p.rc[2 * (size_t)w] = p.rc[2 * (size_t)w + (size_t)w - 1] = 5;
    if (w > 1 && expect_refused(comm, swy_alltoallv_chunks(p.send, p.sc, p.sd,
                                p.recv, p.rc, p.rd, 3, SWY_FLOAT64, comm,
                                NULL, 0, reqs), "overlap"))
        return 1;
    p.rd[2 * (size_t)w] = saved;
    p.rc[2 * (size_t)w] = c0;
    p.rc[2 * (size_t)w + (size_t)w - 1] = c1;
    p.sc[2 * (size_t)w] = SIZE_MAX / 2;
    if (expect_refused(comm, swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv,
                       p.rc, p.rd, 3, SWY_FLOAT64, comm, NULL, 0, reqs),
                       "(chunk 2)"))
        return 1;
    CHECK_OK_RET(swy_comm_stats(comm, &st), comm);
    CHECK_RET(st.ops_posted == posted0, "a refused series posted %llu ops",
              (unsigned long long)(st.ops_posted - posted0));
    CHECK_RET(reqs[0] == NULL, "a refused series set a request");
    /* The comm works after the refusals. */
    double x = rank, y = 0;
    CHECK_OK_RET(swy_allreduce(&x, &y, 1, SWY_FLOAT64, SWY_SUM, comm, NULL, NULL),
             comm);
    CHECK_RET(y == (double)w * (w - 1) / 2, "allreduce %g", y);
    plan_free(&p);
    return 0;
}

/* A disagreement: every rank's chunks end in SWY_ERR_MISMATCH naming it. */
static int mismatch(swy_comm_t comm, int rank, int w, const char *which)
{
    int n = 3 + (!strcmp(which, "nchunks") && rank == 0);
    plan_t p;
    if (plan_make(&p, rank, w, n, 99))
        return 1;
    for (int j = 0; j < n; j++) {
        for (int k = 0; k < w; k++) { /* every count non-zero */
            size_t c = (size_t)j * (size_t)w + (size_t)k;
            p.sc[c] = p.rc[c] = 10;
            p.sd[c] = p.rd[c] = c * 16;
        }
    }
    const char *needle = "chunk";
    size_t c1 = 1 * (size_t)w, c2 = 2 * (size_t)w; /* rank 1 gets from 0 */
    if (!strcmp(which, "totals")) {
        needle = "summed over the chunks";
        if (rank == 1)
            p.rc[c2] = 11;
    } else if (!strcmp(which, "divide")) {
        needle = "divide";
        if (rank == 1) {
            p.rc[c1] = 8;
            p.rc[c2] = 12;
        }
    }
    dfree(p.send);
    dfree(p.recv);
    p.send = dzalloc((size_t)n * (size_t)w * 16);
    p.recv = dzalloc((size_t)n * (size_t)w * 16);
    CHECK_RET(p.send != NULL && p.recv != NULL, "malloc");
    swy_request_t reqs[NCHUNKS];
    swy_status_t st = swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc,
                                           p.rd, n, SWY_FLOAT64, comm, NULL, 0,
                                           reqs);
    swy_status_t got = st;
    if (st == SWY_OK) {
        for (int j = 0; j < n; j++) {
            swy_status_t s = swy_wait(reqs[j]);
            if (got == SWY_OK)
                got = s;
            swy_request_free(reqs[j]);
        }
        if (got == SWY_OK) /* finished its part: the comm fails next */
            got = swy_barrier(comm);
    }
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(got), msg);
    CHECK_RET(got == SWY_ERR_MISMATCH, "got %s", swy_status_string(got));
    CHECK_RET(strstr(msg, needle) != NULL, "message lacks '%s'", needle);
    plan_free(&p);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200; /* the comm is gone: the harness must not destroy it */
}

static int case_unreleased(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    plan_t p;
    if (plan_make(&p, rank, w, 3, 11))
        return 1;
    for (int j = 0; j < 3; j++) /* data from every rank in every chunk */
        for (int k = 0; k < w; k++) {
            size_t c = (size_t)j * (size_t)w + (size_t)k;
            p.sc[c] = p.rc[c] = 10;
            p.sd[c] = p.rd[c] = c * 16;
        }
    dfree(p.send);
    dfree(p.recv);
    p.send = dzalloc((size_t)3 * (size_t)w * 16);
    p.recv = dzalloc((size_t)3 * (size_t)w * 16);
    CHECK_RET(p.send != NULL && p.recv != NULL, "malloc");
    swy_request_t reqs[3];
    CHECK_OK_RET(swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                      3, SWY_FLOAT64, comm, NULL,
                                      SWY_CHUNKS_HELD, reqs), comm);
    for (int j = 0; j < 3; j++)
        if (!(rank == w - 1 && j == 1))
            CHECK_OK_RET(swy_chunk_release(reqs[j]), comm);
    swy_status_t got = SWY_OK;
    for (int j = 0; j < 3; j++) {
        swy_status_t st = swy_wait(reqs[j]);
        if (got == SWY_OK)
            got = st;
        swy_request_free(reqs[j]);
    }
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(got), msg);
    CHECK_RET(got == SWY_ERR_TIMEOUT, "got %s", swy_status_string(got));
    /* Whichever rank's deadline passes first names the cause for all:
     * the rank that held the chunk, or one that had no data from it. */
    char silent[64];
    snprintf(silent, sizeof(silent), "no data from rank %d", w - 1);
    CHECK_RET(strstr(msg, "never released") != NULL ||
                  strstr(msg, silent) != NULL, "message: %s", msg);
    plan_free(&p);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

static int case_mismatch(swy_comm_t comm, int rank, int w, void *arg)
{
    return mismatch(comm, rank, w, arg);
}

/* A stream's work that waits until the test says go, or 10 s (then
 * timed_out: a post that waited for it would take that long). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go, timed_out;
} hold_t;

static void hold_init(hold_t *h, int go)
{
    *h = (hold_t){.go = go};
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
}

static void hold_stream(void *arg)
{
    hold_t *h = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&h->lock);
    while (!h->go && !h->timed_out)
        h->timed_out = pthread_cond_timedwait(&h->cond, &h->lock, &until) ==
                       ETIMEDOUT;
    pthread_mutex_unlock(&h->lock);
}

/* Say go; 1 if the hold had not timed out by then. */
static int hold_release(hold_t *h)
{
    pthread_mutex_lock(&h->lock);
    int in_time = !h->timed_out;
    h->go = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    return in_time;
}

static void hold_destroy(hold_t *h)
{
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
}

static int case_stream_stuck(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    CHECK_RET(g_device, "stream_stuck needs TEST_COLL_MEM=device");
    plan_t p;
    if (plan_make(&p, rank, w, 1, 5))
        return 1;
    for (int k = 0; k < w; k++) { /* data to and from everyone */
        p.sc[k] = p.rc[k] = 10;
        p.sd[k] = p.rd[k] = (size_t)k * 16;
    }
    dfree(p.send);
    dfree(p.recv);
    p.send = dzalloc((size_t)w * 16);
    p.recv = dzalloc((size_t)w * 16);
    void *stream = swy_test_dev_stream_create();
    hold_t h;
    hold_init(&h, rank != w - 1);
    swy_test_dev_launch(stream, hold_stream, &h);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    attr.name = "stuck";
    swy_request_t req;
    CHECK_OK_RET(swy_alltoallv(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                               SWY_FLOAT64, comm, &attr, &req), comm);
    swy_status_t got = swy_wait(req);
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(got), msg);
    CHECK_RET(got == SWY_ERR_TIMEOUT, "got %s", swy_status_string(got));
    char silent[64];
    snprintf(silent, sizeof(silent), "no data from rank %d", w - 1);
    CHECK_RET(strstr(msg, "its stream") != NULL ||
                  strstr(msg, silent) != NULL, "message: %s", msg);
    swy_request_free(req); /* freed when its callback has come */
    /* Now the stream goes on; the op's callback comes after its failure,
     * and the stream passes the op's (opened) gate. */
    hold_release(&h);
    swy_test_dev_stream_destroy(stream); /* returns once it drained */
    hold_destroy(&h);
    plan_free(&p);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

/* The stream's earlier work: fill sendbuf once the test says go. */
typedef struct {
    hold_t h;
    plan_t *p;
    int rank, w;
} fill_t;

static void fill_when_told(void *arg)
{
    fill_t *f = arg;
    hold_stream(&f->h);
    for (int j = 0; j < NCHUNKS; j++)
        fill_chunk(f->p, f->rank, f->w, j);
}

static int case_stream(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    CHECK_RET(g_device, "stream needs TEST_COLL_MEM=device");
    plan_t p;
    if (plan_make(&p, rank, w, NCHUNKS, 11))
        return 1;
    double *snap = calloc(p.recv_total + 1, sizeof(double));
    CHECK_RET(snap != NULL, "malloc");
    void *stream = swy_test_dev_stream_create();
    fill_t f = {.p = &p, .rank = rank, .w = w};
    hold_init(&f.h, 0);
    swy_test_dev_launch(stream, fill_when_told, &f);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    attr.name = "on-stream";
    swy_request_t reqs[NCHUNKS];
    swy_test_dev_traffic_t mark = traffic_mark();
    CHECK_OK_RET(swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                      NCHUNKS, SWY_FLOAT64, comm, &attr, 0,
                                      reqs), comm);
    CHECK_RET(swy_chunk_release(reqs[1]) == SWY_ERR_INVALID_ARG,
              "swy_chunk_release of a chunk waiting for its stream");
    swy_test_snapshot_t snapshot = {p.recv, snap,
                                    p.recv_total * sizeof(double)};
    swy_test_dev_launch(stream, swy_test_snapshot, &snapshot);
    CHECK_RET(hold_release(&f.h), "the post waited for the stream's earlier "
              "work");
    for (int j = NCHUNKS - 1; j >= 0; j--) {
        CHECK_OK_RET(swy_wait(reqs[j]), comm);
        swy_request_free(reqs[j]);
    }
    swy_test_dev_stream_destroy(stream); /* runs what is queued first */
    for (int j = 0; j < NCHUNKS; j++)
        if (check_chunk(&p, rank, w, j))
            return 1;
    if (check_plugin_moved(mark, "chunks on a stream"))
        return 1;
    for (size_t i = 0; i < p.recv_total; i++)
        CHECK_RET(snap[i] == p.recv[i], "work queued on the stream after "
                  "the chunks ran before all of them completed: element %zu "
                  "of its snapshot is %g, want %g", i, snap[i], p.recv[i]);
    hold_destroy(&f.h);
    free(snap);
    plan_free(&p);
    return 0;
}

/* Device: every rank posts 3 held chunks, then a lone device alltoallv
 * of the same priority class, and waits for that before releasing any
 * chunk. The plugin takes the lane's launches in post order, so the
 * alltoallv waits for the chunks: every rank's wait ends in
 * SWY_ERR_TIMEOUT (run with a short SWY_TIMEOUT_S), naming the held
 * chunk, never a hang. */
static int case_later_op(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    CHECK_RET(g_device, "later_op needs TEST_COLL_MEM=device");
    plan_t p;
    if (plan_make(&p, rank, w, 3, 12))
        return 1;
    for (int j = 0; j < 3; j++)
        fill_chunk(&p, rank, w, j);
    swy_request_t reqs[3], req;
    CHECK_OK_RET(swy_alltoallv_chunks(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                                      3, SWY_FLOAT64, comm, NULL,
                                      SWY_CHUNKS_HELD, reqs), comm);
    CHECK_OK_RET(swy_alltoallv(p.send, p.sc, p.sd, p.recv, p.rc, p.rd,
                               SWY_FLOAT64, comm, NULL, &req), comm);
    swy_status_t got = swy_wait(req);
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(got), msg);
    CHECK_RET(got == SWY_ERR_TIMEOUT, "got %s", swy_status_string(got));
    CHECK_RET(strstr(msg, "held chunk") != NULL, "message: %s", msg);
    swy_request_free(req);
    for (int j = 0; j < 3; j++) {
        swy_status_t st = swy_wait(reqs[j]);
        CHECK_RET(st == SWY_ERR_TIMEOUT, "chunk %d: %s", j,
                  swy_status_string(st));
        swy_request_free(reqs[j]);
    }
    plan_free(&p);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_chunks NRANKS CASE\n");
        return 2;
    }
    int w = atoi(argv[1]);
    const char *which = argv[2];
    swy_test_rank_fn fn = NULL;
    int mism = 0;
    if (!strcmp(which, "basic")) fn = case_basic;
    else if (!strcmp(which, "held")) fn = case_held;
    else if (!strcmp(which, "args")) fn = case_args;
    else if (!strcmp(which, "unreleased")) fn = case_unreleased;
    else if (!strcmp(which, "stream_stuck")) fn = case_stream_stuck;
    else if (!strcmp(which, "stream")) fn = case_stream;
    else if (!strcmp(which, "later_op")) fn = case_later_op;
    else if (!strcmp(which, "nchunks") || !strcmp(which, "totals") ||
             !strcmp(which, "divide"))
        fn = case_mismatch, mism = 1;
    if (fn == NULL || w < 1 || w > 64 || (mism && w < 2)) {
        fprintf(stderr, "test_chunks: bad arguments\n");
        return 2;
    }
    const char *mem = getenv("TEST_COLL_MEM");
    g_device = mem != NULL && strcmp(mem, "device") == 0;
    if (g_device && !swy_test_devdouble()) {
        fprintf(stderr, "test_chunks: TEST_COLL_MEM=device, but the GPU "
                "test double is not loaded (SWYTEST_DEVDOUBLE)\n");
        return 1;
    }
    swy_test_result_t result;
    int rc = swy_test_spawn(w, fn, (void *)which, 60, &result);
    printf("%s: chunks %s on %d ranks\n", rc ? "FAIL" : "PASS", which, w);
    return rc;
}
