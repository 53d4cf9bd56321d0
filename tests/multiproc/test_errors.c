/* Bad input and failing peers: each case gets its documented status on
 * every rank, with a message naming what went wrong, and no rank hangs.
 * Usage: test_errors CASE NRANKS
 *   args      local argument checks (comm stays usable afterwards)
 *   counts    alltoallv counts disagree between two ranks
 *   kinds     different collectives on different ranks
 *   allreduce allreduce counts disagree
 *   partition ranks cut transfers into micro-ops of different sizes
 *   kill      a rank is SIGKILLed mid-collective
 *   abort     a rank calls swy_comm_abort
 *   timeout   a rank never posts (SWY_TIMEOUT_S=2)
 *   more_NAME reduce_scatter, allgatherv, reduce, gather or scatter
 *             arguments disagree (case_mismatch_more)
 *   id        a unique id from another job / a corrupted id */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define EXPECT_STATUS(expr, want, comm, needle)                               \
    do {                                                                      \
        swy_status_t got_ = (expr);                                           \
        CHECK_RET(got_ == (want), "%s returned %s, expected %s (%s)", #expr,  \
                  swy_status_string(got_), swy_status_string(want),           \
                  swy_last_error(comm));                                      \
        CHECK_RET(strstr(swy_last_error(comm), (needle)) != NULL,             \
                  "message '%s' lacks '%s'", swy_last_error(comm), (needle)); \
    } while (0)

/* The argument checks of reduce_scatter, allgatherv, reduce, gather and
 * scatter (called from case_args); then the buffers they do not use
 * passed as NULL where the calls allow it. */
static int args_more(swy_comm_t comm, int rank, int w)
{
    size_t counts[64] = {0}, displs[64] = {0}, huge[64];
    float buf[64 * 4];
    for (int i = 0; i < 64; i++)
        huge[i] = (size_t)-1 / 2;
    EXPECT_STATUS(swy_reduce_scatter(NULL, buf, 4, SWY_FLOAT32, SWY_SUM, comm,
                                     NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "sendbuf is NULL");
    EXPECT_STATUS(swy_reduce_scatter(buf, NULL, 4, SWY_FLOAT32, SWY_SUM, comm,
                                     NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "recvbuf is NULL");
    EXPECT_STATUS(swy_reduce_scatter(buf, buf, 4, SWY_FLOAT32,
                                     (swy_redop_t)9, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "op 9");
    EXPECT_STATUS(swy_reduce_scatter(buf, buf, 4, (swy_dtype_t)42, SWY_SUM,
                                     comm, NULL, NULL), SWY_ERR_INVALID_ARG,
                  comm, "dtype 42");
    EXPECT_STATUS(swy_reduce_scatter(buf, buf, (size_t)-5, SWY_FLOAT32,
                                     SWY_SUM, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm,
                  w > 1 ? "recvcount" : "too large");
    EXPECT_STATUS(swy_reduce_scatter(buf, buf, 4, SWY_FLOAT32, SWY_SUM, NULL,
                                     NULL, NULL), SWY_ERR_INVALID_ARG, NULL,
                  "comm is NULL");

    EXPECT_STATUS(swy_allgatherv(buf, 1, buf, NULL, displs, SWY_FLOAT32,
                                 comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "recvcounts is NULL");
    EXPECT_STATUS(swy_allgatherv(buf, 1, buf, counts, NULL, SWY_FLOAT32,
                                 comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "rdispls is NULL");
    EXPECT_STATUS(swy_allgatherv(buf, 0, buf, counts, huge, SWY_FLOAT32,
                                 comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "overflows");
    EXPECT_STATUS(swy_allgatherv(buf, (size_t)-3, buf, counts, displs,
                                 SWY_FLOAT32, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "sendcount");
    size_t twos[64], overlap[64], apart[64];
    for (int i = 0; i < 64; i++) {
        twos[i] = 2;
        overlap[i] = (size_t)i; /* regions [i, i+2) overlap */
        apart[i] = 2 * (size_t)i;
    }
    if (w > 1)
        EXPECT_STATUS(swy_allgatherv(buf, 2, buf, twos, overlap, SWY_FLOAT32,
                                     comm, NULL, NULL), SWY_ERR_INVALID_ARG,
                      comm, "overlap");
    EXPECT_STATUS(swy_allgatherv(NULL, 2, buf, twos, apart, SWY_FLOAT32,
                                 comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "sendbuf is NULL");
    EXPECT_STATUS(swy_allgatherv(buf, 0, NULL, twos, apart, SWY_FLOAT32,
                                 comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "recvbuf is NULL");
    if (w == 1) /* with peers, the op header finds it on every rank */
        EXPECT_STATUS(swy_allgatherv(buf, 3, buf + 8, twos, apart,
                                     SWY_FLOAT32, comm, NULL, NULL),
                      SWY_ERR_MISMATCH, comm, "recvcounts[0] 2");

    EXPECT_STATUS(swy_reduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, w, comm, NULL,
                             NULL), SWY_ERR_INVALID_ARG, comm, "root");
    EXPECT_STATUS(swy_reduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, -1, comm,
                             NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "root -1");
    EXPECT_STATUS(swy_reduce(buf, buf, 4, SWY_FLOAT32, (swy_redop_t)-2, 0,
                             comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "op -2");
    EXPECT_STATUS(swy_reduce(NULL, buf, 4, SWY_FLOAT32, SWY_SUM, 0, comm,
                             NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "sendbuf is NULL");
    EXPECT_STATUS(swy_reduce(buf, buf, (size_t)-5, SWY_FLOAT32, SWY_SUM, 0,
                             comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "too large");
    if (rank == 0)
        EXPECT_STATUS(swy_reduce(buf, NULL, 4, SWY_FLOAT32, SWY_SUM, 0, comm,
                                 NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                      "recvbuf at the root is NULL");

    EXPECT_STATUS(swy_gather(buf, buf, 4, SWY_FLOAT32, w, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "root");
    EXPECT_STATUS(swy_gather(NULL, buf, 4, SWY_FLOAT32, 0, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "sendbuf is NULL");
    EXPECT_STATUS(swy_gather(buf, buf, (size_t)-1 / 2, SWY_FLOAT32, 0, comm,
                             NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  w > 1 ? "overflows" : "too large");
    if (rank == 0)
        EXPECT_STATUS(swy_gather(buf, NULL, 4, SWY_FLOAT32, 0, comm, NULL,
                                 NULL), SWY_ERR_INVALID_ARG, comm,
                      "recvbuf at the root is NULL");
    EXPECT_STATUS(swy_scatter(buf, buf, 4, SWY_FLOAT32, -3, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "root -3");
    EXPECT_STATUS(swy_scatter(buf, NULL, 4, SWY_FLOAT32, 0, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "recvbuf is NULL");
    EXPECT_STATUS(swy_scatter(buf, buf, 4, (swy_dtype_t)-1, 0, comm, NULL,
                              NULL), SWY_ERR_INVALID_ARG, comm, "dtype -1");
    if (rank == 0)
        EXPECT_STATUS(swy_scatter(NULL, buf, 4, SWY_FLOAT32, 0, comm, NULL,
                                  NULL), SWY_ERR_INVALID_ARG, comm,
                      "sendbuf at the root is NULL");

    /* Valid calls: buffers a rank does not use may be NULL there. */
    float in[4], out[64 * 4];
    for (int i = 0; i < 4; i++)
        in[i] = (float)(rank + i);
    int root = w - 1;
    CHECK_OK_RET(swy_reduce(in, rank == root ? out : NULL, 4, SWY_FLOAT32,
                            SWY_SUM, root, comm, NULL, NULL), comm);
    if (rank == root)
        CHECK_RET(out[1] == (float)(w * (w - 1) / 2 + w), "reduce: %f", out[1]);
    CHECK_OK_RET(swy_gather(in, rank == root ? out : NULL, 4, SWY_FLOAT32, root,
                            comm, NULL, NULL), comm);
    if (rank == root)
        CHECK_RET(out[4 * (w - 1)] == (float)(w - 1), "gather: %f",
                  out[4 * (w - 1)]);
    CHECK_OK_RET(swy_scatter(rank == root ? out : NULL, in, 4, SWY_FLOAT32,
                             root, comm, NULL, NULL),
                 comm);
    CHECK_RET(in[3] == (float)(rank + 3), "scatter: %f", in[3]);
    return 0;
}

static int case_args(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t counts[64] = {0}, displs[64] = {0}, huge[64];
    float buf[64];
    swy_request_t req;
    for (int i = 0; i < 64; i++)
        huge[i] = (size_t)-1 / 2;
    EXPECT_STATUS(swy_allreduce(NULL, buf, 4, SWY_FLOAT32, SWY_SUM, comm,
                                NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "sendbuf is NULL");
    EXPECT_STATUS(swy_allreduce(buf, buf, (size_t)-5, SWY_FLOAT32, SWY_SUM,
                                comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "too large");
    EXPECT_STATUS(swy_allreduce(buf, buf, 4, (swy_dtype_t)42, SWY_SUM, comm,
                                NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "dtype 42");
    EXPECT_STATUS(swy_allreduce(buf, buf, 4, SWY_FLOAT32, (swy_redop_t)9,
                                comm, NULL, NULL), SWY_ERR_INVALID_ARG, comm,
                  "op 9");
    EXPECT_STATUS(swy_allreduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, NULL,
                                NULL, NULL), SWY_ERR_INVALID_ARG, NULL,
                  "comm is NULL");
    EXPECT_STATUS(swy_broadcast(buf, 4, SWY_FLOAT32, w, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "root");
    EXPECT_STATUS(swy_broadcast(buf, 4, SWY_FLOAT32, -1, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "root -1");
    EXPECT_STATUS(swy_alltoallv(buf, NULL, displs, buf, counts, displs,
                                SWY_FLOAT32, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "sendcounts is NULL");
    EXPECT_STATUS(swy_alltoallv(buf, huge, displs, buf, counts, displs,
                                SWY_FLOAT32, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "overflow");
    size_t ones[64], overlap_displs[64];
    for (int i = 0; i < 64; i++) {
        ones[i] = 2;
        overlap_displs[i] = (size_t)i; /* regions [i, i+2) overlap */
    }
    if (w > 1)
        EXPECT_STATUS(swy_alltoallv(buf, ones, displs, buf, ones,
                                    overlap_displs, SWY_FLOAT32, comm, NULL,
                                    NULL), SWY_ERR_INVALID_ARG, comm,
                      "overlap");
    EXPECT_STATUS(swy_alltoallv(NULL, ones, displs, buf, counts, displs,
                                SWY_FLOAT32, comm, NULL, NULL),
                  SWY_ERR_INVALID_ARG, comm, "sendbuf is NULL");
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = 5000;
    EXPECT_STATUS(swy_allreduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, comm,
                                &attr, NULL), SWY_ERR_INVALID_ARG, comm,
                  "priority 5000");
    attr.priority = -1;
    attr.stream = (void *)0x1;
    EXPECT_STATUS(swy_allreduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, comm,
                                &attr, NULL), SWY_ERR_UNSUPPORTED, comm,
                  "device");
    EXPECT_STATUS(swy_test(NULL, NULL), SWY_ERR_INVALID_ARG, NULL, "req");
    EXPECT_STATUS(swy_wait(NULL), SWY_ERR_INVALID_ARG, NULL, "req");
    swy_comm_stats_t stats = {.struct_size = 3};
    EXPECT_STATUS(swy_comm_stats(comm, &stats), SWY_ERR_INVALID_ARG, comm,
                  "struct_size");
    EXPECT_STATUS(swy_phase_hint(comm, 77), SWY_ERR_INVALID_ARG, comm,
                  "phase 77");
    swy_request_free(NULL);
    char value[64];
    EXPECT_STATUS(swy_comm_configure(comm, "SWY_TIMEOUT_S", "3"),
                  SWY_ERR_INVALID_ARG, comm, "cannot be changed");
    EXPECT_STATUS(swy_comm_configure(comm, "SWY_POLICY", "nosuch"),
                  SWY_ERR_INVALID_ARG, comm, "nosuch");
    EXPECT_STATUS(swy_comm_configure(comm, "SWY_PARTITION_BYTES", "-4"),
                  SWY_ERR_INVALID_ARG, comm, "-4");
    /* swy_mem_alloc / swy_mem_free */
    void *mem = NULL;
    EXPECT_STATUS(swy_mem_alloc(NULL, 64, &mem), SWY_ERR_INVALID_ARG, NULL,
                  "comm is NULL");
    EXPECT_STATUS(swy_mem_alloc(comm, 64, NULL), SWY_ERR_INVALID_ARG, comm,
                  "ptr is NULL");
    EXPECT_STATUS(swy_mem_alloc(comm, 0, &mem), SWY_ERR_INVALID_ARG, comm,
                  "0 bytes");
    EXPECT_STATUS(swy_mem_alloc(comm, (size_t)-1, &mem), SWY_ERR_INVALID_ARG,
                  comm, "swy_mem_alloc");
    EXPECT_STATUS(swy_mem_alloc(comm, (size_t)1 << 60, &mem),
                  SWY_ERR_NO_MEMORY, comm, "more than this machine");
    CHECK_RET(mem == NULL, "a failed swy_mem_alloc left a pointer");
    CHECK_OK_RET(swy_mem_alloc(comm, 10, &mem), comm);
    CHECK_RET(mem != NULL && ((uintptr_t)mem & 4095) == 0, "not page aligned");
    for (int i = 0; i < 4096; i++)
        CHECK_RET(((volatile char *)mem)[i] == 0, "byte %d not zero", i);
    memset(mem, 7, 4096);
    EXPECT_STATUS(swy_mem_free(comm, buf), SWY_ERR_INVALID_ARG, comm,
                  "not an address swy_mem_alloc returned");
    EXPECT_STATUS(swy_mem_free(comm, (char *)mem + 8), SWY_ERR_INVALID_ARG,
                  comm, "not an address");
    EXPECT_STATUS(swy_mem_free(NULL, mem), SWY_ERR_INVALID_ARG, NULL,
                  "comm is NULL");
    CHECK_OK_RET(swy_mem_free(comm, mem), comm);
    EXPECT_STATUS(swy_mem_free(comm, mem), SWY_ERR_INVALID_ARG, comm,
                  "was freed");
    CHECK_OK_RET(swy_mem_free(comm, NULL), comm);
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_POLICY", "fair"), comm);
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_PARTITION_BYTES", "4K"), comm);
    CHECK_OK_RET(swy_comm_query(comm, "SWY_POLICY", value, sizeof(value)),
                 comm);
    CHECK_RET(strcmp(value, "fair") == 0, "policy now %s", value);
    CHECK_OK_RET(swy_comm_query(comm, "SWY_CREDIT_BYTES", value, sizeof(value)),
                 comm);
    CHECK_RET(strcmp(value, "4096") == 0, "credit follows partition: %s",
              value);
    if (args_more(comm, rank, w))
        return 1;
    /* The comm is still usable after rejected calls. */
    for (int i = 0; i < 4; i++)
        buf[i] = (float)rank;
    CHECK_OK_RET(swy_allreduce(buf, buf, 4, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               &req), comm);
    CHECK_OK_RET(swy_wait(req), comm);
    swy_request_free(req);
    CHECK_RET(buf[3] == (float)(w * (w - 1) / 2), "sum after bad calls");
    return 0;
}

/* Wait for a status on every rank within limit_s; the comm is then dead,
 * so exit without destroy (code 200). */
static int expect_failure(swy_comm_t comm, swy_request_t req,
                          swy_status_t want, const char *needle,
                          double limit_s)
{
    double t0 = swy_test_now_s();
    swy_status_t got = swy_wait(req);
    swy_request_free(req);
    if (got == SWY_OK && want == SWY_ERR_MISMATCH) {
        /* A rank not involved in the disagreement may finish its part of
         * the op; the comm is poisoned all the same: its next call fails. */
        got = swy_barrier(comm);
    }
    double took = swy_test_now_s() - t0;
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", swy_comm_rank(comm),
            swy_status_string(got), took, msg);
    CHECK_RET(got == want, "got %s, expected %s", swy_status_string(got),
              swy_status_string(want));
    CHECK_RET(strstr(msg, needle) != NULL, "message lacks '%s'", needle);
    CHECK_RET(took < limit_s, "took %.1f s (limit %.1f)", took, limit_s);
    /* Later calls fail at once with the same status. */
    float x = 0;
    CHECK_RET(swy_allreduce(&x, &x, 1, SWY_FLOAT32, SWY_SUM, comm, NULL,
                            NULL) == want,
              "later call did not fail");
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

/* The failure may reach a rank before it even posts (another rank found
 * the disagreement first): then the post itself must fail the same way. */
static int expect_post_failure(swy_comm_t comm, swy_status_t got,
                               swy_status_t want, const char *needle)
{
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: post failed: %s: %s\n", swy_comm_rank(comm),
            swy_status_string(got), msg);
    CHECK_RET(got == want, "post got %s", swy_status_string(got));
    CHECK_RET(strstr(msg, needle) != NULL, "message lacks '%s'", needle);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

#define POST_OR_EXPECT(call, want, needle)                                    \
    do {                                                                      \
        swy_status_t post_status_ = (call);                                   \
        if (post_status_ != SWY_OK)                                           \
            return expect_post_failure(comm, post_status_, (want), (needle)); \
    } while (0)

static int case_counts(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t sc[64], sd[64], rc[64], rd[64];
    static int32_t sbuf[64 * 100], rbuf[64 * 200];
    swy_request_t req;
    for (int j = 0; j < w; j++) {
        sc[j] = rc[j] = 10;
        sd[j] = rd[j] = (size_t)j * 100;
    }
    if (rank == 1)
        rc[0] = 7; /* rank 0 sends 10 */
    POST_OR_EXPECT(swy_alltoallv(sbuf, sc, sd, rbuf, rc, rd, SWY_INT32, comm,
                                 NULL, &req), SWY_ERR_MISMATCH, "alltoallv");
    return expect_failure(comm, req, SWY_ERR_MISMATCH, "alltoallv", 10);
}

static int case_kinds(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t c[64], d[64];
    static float buf[64 * 8], out[64 * 8];
    swy_request_t req;
    for (int j = 0; j < w; j++) {
        c[j] = 4;
        d[j] = (size_t)j * 4;
    }
    if (rank == w - 1)
        POST_OR_EXPECT(swy_allreduce(buf, out, 16, SWY_FLOAT32, SWY_SUM, comm,
                                     NULL, &req), SWY_ERR_MISMATCH, "disagree");
    else
        POST_OR_EXPECT(swy_alltoallv(buf, c, d, out, c, d, SWY_FLOAT32, comm,
                                     NULL, &req), SWY_ERR_MISMATCH, "disagree");
    return expect_failure(comm, req, SWY_ERR_MISMATCH, "disagree", 10);
}

static int case_allreduce(swy_comm_t comm, int rank, int w, void *arg)
{
    static double buf[100];
    swy_request_t req;
    POST_OR_EXPECT(swy_allreduce(buf, buf, rank == 0 ? 100 : 99, SWY_FLOAT64,
                                 SWY_SUM, comm, NULL, &req), SWY_ERR_MISMATCH,
                   "count");
    return expect_failure(comm, req, SWY_ERR_MISMATCH, "count", 10);
}

/* Counts on both sides of the recursive-halving limit (256 KiB): the ranks
 * would run different algorithms with different peers; they must all
 * fail with SWY_ERR_MISMATCH instead of waiting for each other. */
static int case_allreduce_algo(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t big = (2u << 20) / sizeof(float); /* 2 MiB: direct */
    float *buf = calloc(big, sizeof(float));
    swy_request_t req;
    CHECK_RET(buf != NULL, "out of memory");
    POST_OR_EXPECT(swy_allreduce(buf, buf, rank == w - 1 ? big : 64,
                                 SWY_FLOAT32, SWY_SUM, comm, NULL, &req),
                   SWY_ERR_MISMATCH, "count");
    int rc = expect_failure(comm, req, SWY_ERR_MISMATCH, "count", 10);
    free(buf);
    return rc;
}

/* Ranks that cut transfers differently (SWY_PARTITION_BYTES) are told so
 * on every rank, instead of receiving chunks that do not fit. */
static int case_partition(swy_comm_t comm, int rank, int w, void *arg)
{
    static float buf[1 << 16];
    swy_request_t req;
    if (rank == 0)
        CHECK_OK_RET(swy_comm_configure(comm, "SWY_PARTITION_BYTES", "4K"),
                     comm);
    POST_OR_EXPECT(swy_allreduce(buf, buf, 1 << 16, SWY_FLOAT32, SWY_SUM,
                                 comm, NULL, &req), SWY_ERR_MISMATCH,
                   "SWY_PARTITION_BYTES");
    return expect_failure(comm, req, SWY_ERR_MISMATCH, "SWY_PARTITION_BYTES",
                          10);
}

/* A rank killed mid-allreduce; with shared, on swy_mem_alloc buffers,
 * which the peers read and write in place (allreduce/shm's direct way):
 * every other rank still ends with SWY_ERR_REMOTE. */
static int kill_mid_allreduce(swy_comm_t comm, int rank, int w, int shared)
{
    size_t count = 4 << 20;
    float *buf = NULL;
    swy_request_t req;
    if (shared)
        CHECK_OK_RET(swy_mem_alloc(comm, count * sizeof(float), (void **)&buf),
                     comm);
    else
        buf = calloc(count, sizeof(float));
    CHECK_OK_RET(swy_barrier(comm), comm);
    if (rank == w - 1) {
        usleep(200000); /* the others are inside the allreduce */
        raise(SIGKILL);
    }
    CHECK_OK_RET(
        swy_allreduce(buf, buf, count, SWY_FLOAT32, SWY_SUM, comm, NULL, &req),
        comm);
    return expect_failure(comm, req, SWY_ERR_REMOTE, "died", 5);
}

static int case_kill(swy_comm_t comm, int rank, int w, void *arg)
{
    return kill_mid_allreduce(comm, rank, w, 0);
}

static int case_kill_shared(swy_comm_t comm, int rank, int w, void *arg)
{
    return kill_mid_allreduce(comm, rank, w, 1);
}

/* Ranks that disagree on the count, on swy_mem_alloc buffers: the
 * documented error everywhere, and nobody touches memory outside the
 * buffers. */
static int case_allreduce_shared(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t big = (1u << 20) / sizeof(float);
    float *in = NULL, *out = NULL;
    swy_request_t req;
    CHECK_OK_RET(swy_mem_alloc(comm, big * sizeof(float), (void **)&in), comm);
    CHECK_OK_RET(swy_mem_alloc(comm, big * sizeof(float), (void **)&out), comm);
    POST_OR_EXPECT(swy_allreduce(in, out, rank == w - 1 ? big : big - 1000,
                                 SWY_FLOAT32, SWY_SUM, comm, NULL, &req),
                   SWY_ERR_MISMATCH, "count");
    return expect_failure(comm, req, SWY_ERR_MISMATCH, "count", 10);
}

/* Ranks that disagree on an argument of reduce_scatter, allgatherv,
 * reduce, gather or scatter (the case "more_<name>", arg: the name):
 * SWY_ERR_MISMATCH on every rank, the last rank (or rank 1) being the
 * odd one out. */
static int case_mismatch_more(swy_comm_t comm, int rank, int w, void *arg)
{
    const char *which = arg;
    static float in[64 * 16], out[64 * 16];
    size_t counts[64], displs[64];
    swy_request_t req;
    int odd = rank == w - 1;
    const char *needle = "disagree";
    swy_status_t posted;
    if (!strcmp(which, "rs_count")) {
        needle = "recvcount";
        posted = swy_reduce_scatter(in, out, odd ? 9 : 10, SWY_FLOAT32,
                                    SWY_SUM, comm, NULL, &req);
    } else if (!strcmp(which, "reduce_root")) {
        needle = "root";
        posted = swy_reduce(in, out, 10, SWY_FLOAT32, SWY_SUM, odd ? 1 : 0,
                            comm, NULL, &req);
    } else if (!strcmp(which, "reduce_op")) {
        posted = swy_reduce(in, out, 10, SWY_FLOAT32, odd ? SWY_MAX : SWY_SUM,
                            0, comm, NULL, &req);
    } else if (!strcmp(which, "gather_count")) {
        needle = "gather(";
        posted = swy_gather(in, out, odd ? 12 : 10, SWY_FLOAT32, 0, comm,
                            NULL, &req);
    } else if (!strcmp(which, "scatter_root")) {
        needle = "scatter(";
        posted = swy_scatter(in, out, 10, SWY_FLOAT32, odd ? 0 : 1, comm,
                             NULL, &req);
    } else if (!strcmp(which, "agv_counts") ||
               !strcmp(which, "agv_sendcount")) {
        /* rank w/2 (not a ring neighbour of rank 0 on 4 ranks or more)
         * expects 7 elements of rank 0, which sends 10; or rank 0 sends 9
         * where every rank, itself too, expects 10 */
        int own = !strcmp(which, "agv_sendcount");
        needle = own ? "sendcount" : "recvcounts[0]";
        for (int j = 0; j < w; j++) {
            counts[j] = 10;
            displs[j] = (size_t)j * 16;
        }
        if (!own && rank == w / 2)
            counts[0] = 7;
        posted = swy_allgatherv(in, own && rank == 0 ? 9 : 10, out, counts,
                                displs, SWY_FLOAT32, comm, NULL, &req);
    } else {
        fprintf(stderr, "unknown case more_%s\n", which);
        return 1;
    }
    POST_OR_EXPECT(posted, SWY_ERR_MISMATCH, needle);
    return expect_failure(comm, req, SWY_ERR_MISMATCH, needle, 10);
}

static int case_abort(swy_comm_t comm, int rank, int w, void *arg)
{
    float buf[16] = {0};
    swy_request_t req;
    CHECK_OK_RET(swy_barrier(comm), comm);
    if (rank == 0) {
        usleep(100000);
        CHECK_OK_RET(swy_comm_abort(comm), NULL);
        return 200;
    }
    CHECK_OK_RET(swy_allreduce(buf, buf, 16, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               &req), comm);
    return expect_failure(comm, req, SWY_ERR_REMOTE, "abort", 5);
}

static int case_timeout(swy_comm_t comm, int rank, int w, void *arg)
{
    float buf[16] = {0};
    swy_request_t req;
    CHECK_OK_RET(swy_barrier(comm), comm);
    if (rank == w - 1) { /* silent but alive */
        sleep(6);
        return 200;
    }
    CHECK_OK_RET(swy_allreduce(buf, buf, 16, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               &req), comm);
    swy_status_t got = swy_wait(req);
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(got), msg);
    CHECK_RET(got == SWY_ERR_TIMEOUT, "got %s", swy_status_string(got));
    CHECK_RET(strstr(msg, "timed out") != NULL, "message names the timeout");
    char silent[32];
    snprintf(silent, sizeof(silent), "%d", w - 1);
    if (rank == 0 || rank == w - 2) /* the silent rank's ring neighbours */
        CHECK_RET(strstr(msg, silent) != NULL, "message names rank %d", w - 1);
    swy_request_free(req);
    swy_comm_destroy(comm);
    return 200;
}

static int run_id_case(void)
{
    swy_comm_t comm;
    swy_unique_id_t id;
    memset(&id, 0x5a, sizeof(id));
    EXPECT_STATUS(swy_comm_init_rank(&comm, 1, &id, 0), SWY_ERR_INVALID_ARG,
                  NULL, "");
    EXPECT_STATUS(swy_comm_init_rank(&comm, 0, &id, 0), SWY_ERR_INVALID_ARG,
                  NULL, "nranks");
    EXPECT_STATUS(swy_comm_init_rank(&comm, 2, &id, 2), SWY_ERR_INVALID_ARG,
                  NULL, "rank 2");
    EXPECT_STATUS(swy_comm_init_rank(NULL, 2, &id, 0), SWY_ERR_INVALID_ARG,
                  NULL, "comm");
    EXPECT_STATUS(swy_get_unique_id(NULL), SWY_ERR_INVALID_ARG, NULL, "id");
    /* A valid id whose secret we do not know: the job of another user. */
    swy_unique_id_t other;
    CHECK_OK_RET(swy_get_unique_id(&other), NULL);
    unsigned char *b = other.bytes;
    for (size_t i = sizeof(other.bytes) - 40; i < sizeof(other.bytes); i++)
        b[i] ^= 0xff; /* flip the tail, where the secret lives */
    setenv("SWY_TIMEOUT_S", "3", 1);
    swy_status_t st = swy_comm_init_rank(&comm, 1, &other, 0);
    fprintf(stderr, "foreign id: %s: %s\n", swy_status_string(st),
            swy_last_error(NULL));
    CHECK_RET(st != SWY_OK, "a foreign id was accepted");
    printf("PASS: id\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "args";
    int w = argc > 2 ? atoi(argv[2]) : 3;
    swy_test_rank_fn fn = NULL;
    if (strcmp(which, "id") == 0)
        return run_id_case();
    if (!strcmp(which, "args")) fn = case_args;
    else if (!strcmp(which, "counts")) fn = case_counts;
    else if (!strcmp(which, "kinds")) fn = case_kinds;
    else if (!strcmp(which, "allreduce")) fn = case_allreduce;
    else if (!strcmp(which, "allreduce_algo")) fn = case_allreduce_algo;
    else if (!strcmp(which, "kill")) fn = case_kill;
    else if (!strcmp(which, "kill_shared")) fn = case_kill_shared;
    else if (!strcmp(which, "allreduce_shared")) fn = case_allreduce_shared;
    else if (!strcmp(which, "partition")) fn = case_partition;
    else if (!strcmp(which, "abort")) fn = case_abort;
    else if (!strcmp(which, "timeout")) fn = case_timeout;
    else if (!strncmp(which, "more_", 5)) fn = case_mismatch_more;
    if (fn == NULL) {
        fprintf(stderr, "unknown case %s\n", which);
        return 2;
    }
    swy_test_result_t result;
    int rc = swy_test_spawn(w, fn, (void *)(which + 5), 60, &result);
    if (!strcmp(which, "kill") || !strcmp(which, "kill_shared")) {
        /* the victim dies by SIGKILL by design */
        rc = 0;
        for (int r = 0; r < w; r++)
            if (result.code[r] != (r == w - 1 ? -SIGKILL : 0))
                rc = 1;
    }
    printf("%s: %s on %d ranks\n", rc ? "FAIL" : "PASS", which, w);
    return rc;
}
