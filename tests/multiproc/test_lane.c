/* Device collectives run by the plugin (lib/sched/lane.c), on the GPU test
 * double (tests/devdouble stands in for the nccl plugin: no GPU here).
 * Each rank posts a low-priority device allreduce cut into many
 * partitions, then a high-priority device alltoallv, waits for both and
 * checks them against serial references; then, from the Chrome trace it
 * wrote (one "launch" event per partition handed to the plugin, stamped
 * when it was handed over):
 *  - lina, and credit (its queue in priority order): no low-priority
 *    partition was handed over between the first and the last
 *    high-priority one (the high op never waits behind a low one that
 *    Switchyard could have held back);
 *  - fair: some were (each op gets its share);
 *  - all three: low-priority partitions were still to go after the last
 *    high one, so the backlog was there to hold (the window was
 *    exercised);
 *  - fifo: every low-priority partition went before the first high one
 *    (whole ops in submission order).
 * A third op, a device allgather on a communicator split in two, checks
 * that lanes of different communicators work side by side.
 * Failures (third argument):
 *  - kill: the last rank dies 20 ms into a device allreduce of 128
 *    partitions; every other rank's op fails (not hangs) with a message,
 *    and its communicator can be destroyed;
 *  - abort: rank 0 aborts a split communicator 20 ms into a device
 *    allreduce there; every rank's op on it fails, and a device
 *    collective on the parent still works (its device communicators are
 *    its own);
 *  - mismatch: rank 0 passes another count; every rank's op fails with
 *    SWY_ERR_MISMATCH (the headers disagree before the plugin sees a
 *    partition: a plugin communicator given mismatched calls would hang);
 *  - class: two device allreduces whose priority classes differ between
 *    rank 0 and the others: SWY_ERR_MISMATCH on every rank (on the
 *    plugin's communicators, one per class, they would meet each other);
 *  - stall: the last rank's launches never complete (the double's
 *    SWYTEST_DEVDOUBLE_STALL, a hung kernel): every rank's device
 *    allreduce fails with SWY_ERR_TIMEOUT, saying its partitions are with
 *    the plugin (the headers all came: no rank is silent).
 * Usage: test_lane NRANKS TRACE_DIR [kill|abort|mismatch|class|stall]
 *        (SWY_POLICY lina, fair, fifo or credit) */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define PART (16u << 10)

static const char *trace_dir;
static enum { LINA, FAIR, FIFO, CREDIT } policy;

typedef struct {
    double ts, dur;
    int prio;
} ev_t;

static int check_trace(int rank)
{
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/lane-trace.%d.json", trace_dir, rank);
    FILE *f = fopen(path, "r");
    CHECK_RET(f != NULL, "trace %s missing", path);
    enum { MAX_EVENTS = 100000 };
    static ev_t evs[MAX_EVENTS];
    size_t n = 0;
    while (fgets(line, sizeof(line), f)) {
        double ts, dur, prio;
        /* The two ops under test, not the later ones. */
        if (strstr(line, "\"cat\":\"launch\"") == NULL ||
            (strstr(line, "\"name\":\"low #") == NULL &&
             strstr(line, "\"name\":\"high #") == NULL) ||
            swy_test_trace_num(line, "\"ts\":", &ts) ||
            swy_test_trace_num(line, "\"dur\":", &dur) ||
            swy_test_trace_num(line, "\"priority\":", &prio))
            continue;
        CHECK_RET(n < MAX_EVENTS, "trace %s: too many launches", path);
        evs[n++] = (ev_t){ts, dur, (int)prio};
    }
    fclose(f);
    double first_high = -1, last_high = -1, high_end = -1;
    size_t nhigh = 0, nlow = 0;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].prio != SWY_PRIO_HIGH) {
            nlow++;
            continue;
        }
        nhigh++;
        if (first_high < 0 || evs[i].ts < first_high)
            first_high = evs[i].ts;
        if (evs[i].ts > last_high)
            last_high = evs[i].ts;
        if (evs[i].ts + evs[i].dur > high_end)
            high_end = evs[i].ts + evs[i].dur;
    }
    CHECK_RET(nhigh > 0 && nlow > 0, "rank %d: %zu high and %zu low "
              "launches in the trace", rank, nhigh, nlow);
    /* inside: handed over between the first and the last high-priority
     * launch; during: between the first and the end of the high op's
     * last (a wider window: a launch is stamped with its pass's clock,
     * which may read before the end of a launch that pass completed). */
    size_t inside = 0, during = 0, after = 0;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].prio == SWY_PRIO_HIGH)
            continue;
        inside += evs[i].ts > first_high && evs[i].ts < last_high;
        during += evs[i].ts > first_high && evs[i].ts < high_end;
        after += evs[i].ts > last_high;
    }
    fprintf(stderr, "rank %d: %zu high launches, %zu low; low ones between "
            "the first and last high: %zu (until the high op ended: %zu), "
            "after: %zu\n", rank, nhigh, nlow, inside, during, after);
    if (policy == FIFO) { /* whole ops in submission order */
        CHECK_RET(inside == 0 && after == 0 && during == 0, "rank %d: fifo "
                  "handed %zu low-priority partitions to the plugin after "
                  "the high op's first", rank, during + after);
        return 0;
    }
    CHECK_RET(after > 0, "rank %d: no low-priority partition was left when "
              "the high op's last went: the window was not exercised", rank);
    if (policy != FAIR) /* lina; credit orders its queue by priority */
        CHECK_RET(inside == 0, "rank %d: %s handed %zu low-priority "
                  "partitions to the plugin while the high op had some to "
                  "go", rank, policy == LINA ? "lina" : "credit", inside);
    else
        CHECK_RET(during > 0, "rank %d: fair let no low-priority partition "
                  "through while the high op was going", rank);
    return 0;
}

static uint64_t headers_sent(swy_comm_t comm)
{
    swy_comm_stats_t st = {.struct_size = sizeof(st)};
    return swy_comm_stats(comm, &st) == SWY_OK ? st.headers_sent
                                                : UINT64_MAX;
}

static int rank_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t low_count = (4u << 20) / 4, per_peer = (256u << 10) / 4;
    size_t wpp = per_peer * (size_t)w;
    float *ls = swy_test_buf_calloc(1, low_count, 4);
    float *lr = swy_test_buf_calloc(1, low_count, 4);
    float *hs = swy_test_buf_calloc(1, wpp, 4);
    float *hr = swy_test_buf_calloc(1, wpp, 4);
    /* "Device memory" of the double is host memory: filled directly. */
    for (size_t i = 0; i < low_count; i++)
        ls[i] = (float)((rank + 1) * (int)(i % 61));
    for (size_t i = 0; i < wpp; i++)
        hs[i] = (float)(rank * 1000 + (int)(i % 997));
    size_t counts[16], displs[16];
    for (int j = 0; j < w; j++) {
        counts[j] = per_peer;
        displs[j] = (size_t)j * per_peer;
    }
    swy_op_attr_t low = SWY_OP_ATTR_INIT, high = SWY_OP_ATTR_INIT;
    low.priority = SWY_PRIO_LOW;
    low.name = "low";
    high.priority = SWY_PRIO_HIGH;
    high.name = "high";
    /* Each on a stream of its own, as a framework puts its all-to-all
     * and its gradient allreduce: ops on one stream run one after the
     * other (as NCCL's), and there would be nothing to order. */
    void *lstream = swy_test_dev_stream_create();
    void *hstream = swy_test_dev_stream_create();
    low.stream = lstream;
    high.stream = hstream;
    swy_request_t lreq, hreq;
    CHECK_OK_RET(swy_allreduce(ls, lr, low_count, SWY_FLOAT32, SWY_SUM, comm,
                               &low, &lreq), comm);
    CHECK_OK_RET(swy_alltoallv(hs, counts, displs, hr, counts, displs,
                               SWY_FLOAT32, comm, &high, &hreq), comm);
    CHECK_OK_RET(swy_wait(hreq), comm);
    CHECK_OK_RET(swy_wait(lreq), comm);
    swy_request_free(hreq);
    swy_request_free(lreq);
    swy_test_dev_stream_destroy(lstream);
    swy_test_dev_stream_destroy(hstream);
    float sum_k = (float)(w * (w + 1) / 2);
    for (size_t i = 0; i < low_count; i++)
        CHECK_RET(lr[i] == sum_k * (float)(int)(i % 61),
                  "allreduce[%zu] = %g, expected %g", i, lr[i],
                  sum_k * (float)(int)(i % 61));
    for (int j = 0; j < w; j++)
        for (size_t i = 0; i < per_peer; i++) {
            float want = (float)(j * 1000 +
                                 (int)((rank * per_peer + i) % 997));
            CHECK_RET(hr[(size_t)j * per_peer + i] == want,
                      "alltoallv from %d [%zu] = %g, expected %g", j, i,
                      hr[(size_t)j * per_peer + i], want);
        }

    /* Two communicators, each with its own lane, one op each at once.
     * The parent has its device communicators, so the split splits them
     * (the double's comm_split, as ncclCommSplit): the child's first
     * device op makes none of its own (a broadcast of ids, whose headers
     * would count), and sends as many headers as its second. */
    swy_comm_t half;
    CHECK_OK_RET(swy_comm_split(comm, rank % 2, rank, &half), comm);
    int hw = swy_comm_size(half), hme = swy_comm_rank(half);
    size_t per = 5000;
    float *gs = swy_test_buf_calloc(1, per, 4);
    float *gr = swy_test_buf_calloc(1, per * (size_t)hw, 4);
    for (size_t i = 0; i < per; i++)
        gs[i] = (float)(hme * 100000 + (int)i);
    uint64_t hdr[3];
    for (int k = 0; k < 3; k++) {
        hdr[k] = headers_sent(half);
        if (k < 2)
            CHECK_OK_RET(swy_allgather(gs, gr, per, SWY_FLOAT32, half, NULL,
                                       NULL), half);
    }
    CHECK_RET(hdr[1] - hdr[0] == hdr[2] - hdr[1], "rank %d: the first device "
              "op on a split communicator sent %llu headers, the second "
              "%llu: it made device communicators of its own", rank,
              (unsigned long long)(hdr[1] - hdr[0]),
              (unsigned long long)(hdr[2] - hdr[1]));
    /* A rank out of a split (NOCOLOR) takes part in the device split too. */
    swy_comm_t rest;
    CHECK_OK_RET(swy_comm_split(comm, rank == 0 ? SWY_SPLIT_NOCOLOR : 1,
                                -rank, &rest), comm);
    CHECK_RET((rank == 0) == (rest == NULL), "NOCOLOR split");
    if (rest != NULL) {
        float *rs = swy_test_buf_calloc(1, 1000, 4);
        for (size_t i = 0; i < 1000; i++)
            rs[i] = (float)rank;
        CHECK_OK_RET(swy_allreduce(rs, rs, 1000, SWY_FLOAT32, SWY_SUM, rest,
                                   NULL, NULL), rest);
        float want = (float)(w * (w - 1) / 2);
        for (size_t i = 0; i < 1000; i++)
            CHECK_RET(rs[i] == want, "allreduce on the rest [%zu] = %g, "
                      "expected %g", i, rs[i], want);
        swy_test_buf_free(1, rs);
        CHECK_OK_RET(swy_comm_destroy(rest), rest);
    }
    swy_request_t greq, areq;
    CHECK_OK_RET(swy_allgather(gs, gr, per, SWY_FLOAT32, half, NULL, &greq),
                 half);
    CHECK_OK_RET(swy_allreduce(ls, lr, low_count, SWY_FLOAT32, SWY_MAX, comm,
                               NULL, &areq), comm);
    CHECK_OK_RET(swy_wait(greq), half);
    CHECK_OK_RET(swy_wait(areq), comm);
    swy_request_free(greq);
    swy_request_free(areq);
    for (int j = 0; j < hw; j++)
        for (size_t i = 0; i < per; i++)
            CHECK_RET(gr[(size_t)j * per + i] == (float)(j * 100000 + (int)i),
                      "allgather block %d [%zu] = %g", j, i,
                      gr[(size_t)j * per + i]);
    for (size_t i = 0; i < low_count; i++)
        CHECK_RET(lr[i] == (float)(w * (int)(i % 61)),
                  "allreduce max [%zu] = %g", i, lr[i]);
    swy_comm_stats_t st = {.struct_size = sizeof(st)};
    CHECK_OK_RET(swy_comm_stats(comm, &st), comm);
    CHECK_RET(st.micro_ops_sent > 0, "counters");
    /* The parent goes first; the child's device communicators (split
     * from the parent's) go on without it. */
    CHECK_OK_RET(swy_comm_destroy(comm), comm);
    CHECK_OK_RET(swy_allgather(gs, gr, per, SWY_FLOAT32, half, NULL, NULL),
                 half);
    for (int j = 0; j < hw; j++)
        CHECK_RET(gr[(size_t)j * per] == (float)(j * 100000),
                  "allgather after the parent went: block %d", j);
    CHECK_OK_RET(swy_comm_destroy(half), half);
    swy_test_buf_free(1, ls);
    swy_test_buf_free(1, lr);
    swy_test_buf_free(1, hs);
    swy_test_buf_free(1, hr);
    swy_test_buf_free(1, gs);
    swy_test_buf_free(1, gr);
    if (check_trace(rank))
        return 201;
    return 200;
}

static int kill_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t count = (8u << 20) / 4;
    float *b = swy_test_buf_calloc(1, count, 4);
    for (size_t i = 0; i < count; i++)
        b[i] = 1.0f;
    swy_request_t req;
    CHECK_OK_RET(swy_allreduce(b, b, count, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               &req), comm);
    if (rank == w - 1) {
        usleep(20 * 1000); /* some partitions are with the plugin */
        _exit(0);
    }
    double t0 = swy_test_now_s();
    swy_status_t st = swy_wait(req);
    double took = swy_test_now_s() - t0;
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank,
            swy_status_string(st), took, swy_last_error(comm));
    CHECK_RET(st != SWY_OK, "rank %d: the allreduce completed without rank "
              "%d", rank, w - 1);
    CHECK_RET(swy_last_error(comm)[0] != '\0', "no message");
    swy_request_free(req);
    swy_comm_destroy(comm);
    return 200;
}

static int abort_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t count = (8u << 20) / 4;
    float *b = swy_test_buf_calloc(1, count, 4);
    for (size_t i = 0; i < count; i++)
        b[i] = 1.0f;
    /* The parent's device communicators first, so that the split splits
     * them. */
    CHECK_OK_RET(swy_allreduce(b, b, 1000, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               NULL), comm);
    swy_comm_t sub;
    CHECK_OK_RET(swy_comm_split(comm, 0, -rank, &sub), comm);
    swy_request_t req;
    CHECK_OK_RET(swy_allreduce(b, b, count, SWY_FLOAT32, SWY_SUM, sub, NULL,
                               &req), sub);
    if (rank == 0) {
        usleep(20 * 1000);
        CHECK_OK_RET(swy_comm_abort(sub), sub);
        swy_request_free(req);
    } else {
        double t0 = swy_test_now_s();
        swy_status_t st = swy_wait(req);
        fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank,
                swy_status_string(st), swy_test_now_s() - t0, swy_last_error(sub));
        CHECK_RET(st != SWY_OK, "rank %d: the allreduce completed on a "
                  "communicator rank 0 aborted", rank);
        swy_request_free(req);
        swy_comm_destroy(sub);
    }
    for (size_t i = 0; i < 1000; i++)
        b[i] = (float)rank;
    CHECK_OK_RET(swy_allreduce(b, b, 1000, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               NULL), comm);
    for (size_t i = 0; i < 1000; i++)
        CHECK_RET(b[i] == (float)(w * (w - 1) / 2), "parent allreduce after "
                  "the abort [%zu] = %g", i, b[i]);
    swy_test_buf_free(1, b);
    return 0;
}

static int mismatch_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t count = 100000 + (rank == 0 ? 8 : 0);
    float *b = swy_test_buf_calloc(1, count, 4);
    for (size_t i = 0; i < count; i++)
        b[i] = (float)rank;
    swy_status_t st = swy_allreduce(b, b, count, SWY_FLOAT32, SWY_SUM, comm,
                                    NULL, NULL);
    CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d: %s, expected a mismatch: %s",
              rank, swy_status_string(st), swy_last_error(comm));
    fprintf(stderr, "rank %d: %s\n", rank, swy_last_error(comm));
    return 0;
}

/* Two device allreduces of one count, X then Y: rank 0 gives X the high
 * priority and Y the default (low), the others the other way round. The
 * plugin runs each class on its own communicator, where rank 0's X would
 * meet the others' Y: every rank's ops fail with SWY_ERR_MISMATCH
 * instead, naming the classes, and no result is written. */
static int class_main(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)w;
    (void)arg;
    size_t count = 50000;
    float *x = swy_test_buf_calloc(1, count, 4);
    float *y = swy_test_buf_calloc(1, count, 4);
    for (size_t i = 0; i < count; i++) {
        x[i] = 1.0f;
        y[i] = 1000.0f;
    }
    swy_op_attr_t high = SWY_OP_ATTR_INIT;
    high.priority = SWY_PRIO_HIGH;
    /* A post may already find the communicator failed by a peer. */
    swy_request_t rx = NULL, ry = NULL;
    swy_status_t sx = swy_allreduce(x, x, count, SWY_FLOAT32, SWY_SUM, comm,
                                    rank == 0 ? &high : NULL, &rx);
    swy_status_t sy = swy_allreduce(y, y, count, SWY_FLOAT32, SWY_SUM, comm,
                                    rank == 0 ? NULL : &high, &ry);
    if (rx != NULL)
        sx = swy_wait(rx);
    if (ry != NULL)
        sy = swy_wait(ry);
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s / %s: %s\n", rank, swy_status_string(sx),
            swy_status_string(sy), msg);
    swy_request_free(rx);
    swy_request_free(ry);
    CHECK_RET(sx == SWY_ERR_MISMATCH && sy == SWY_ERR_MISMATCH, "rank %d: "
              "%s and %s (x[0] %g, y[0] %g), expected mismatches", rank,
              swy_status_string(sx), swy_status_string(sy), (double)x[0],
              (double)y[0]);
    CHECK_RET(strstr(msg, "priority") != NULL, "message: %s", msg);
    swy_test_buf_free(1, x);
    swy_test_buf_free(1, y);
    return 0;
}

static int stall_main(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    if (rank == w - 1)
        setenv("SWYTEST_DEVDOUBLE_STALL", "1", 1);
    size_t count = 3 * PART / 4; /* 3 partitions */
    float *b = swy_test_buf_calloc(1, count, 4);
    swy_status_t st = swy_allreduce(b, b, count, SWY_FLOAT32, SWY_SUM, comm,
                                    NULL, NULL);
    const char *msg = swy_last_error(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, swy_status_string(st), msg);
    CHECK_RET(st == SWY_ERR_TIMEOUT, "rank %d: %s, expected a timeout: %s",
              rank, swy_status_string(st), msg);
    CHECK_RET(strstr(msg, "with the device plugin not completed") != NULL,
              "message: %s", msg);
    swy_test_buf_free(1, b);
    return 0;
}

int main(int argc, char **argv)
{
    int w = argc > 1 ? atoi(argv[1]) : 2;
    trace_dir = argc > 2 ? argv[2] : "/tmp";
    if (!swy_test_devdouble()) {
        printf("SKIP: the GPU test double is not there (SWYTEST_DEVDOUBLE)\n");
        return 77;
    }
    const char *name = getenv("SWY_POLICY");
    policy = name == NULL || strcmp(name, "lina") == 0 ? LINA
             : strcmp(name, "fair") == 0               ? FAIR
             : strcmp(name, "fifo") == 0               ? FIFO
             : strcmp(name, "credit") == 0             ? CREDIT
                                                       : LINA;
    char pattern[600], part[32];
    snprintf(pattern, sizeof(pattern), "%s/lane-trace.%%r.json", trace_dir);
    setenv("SWY_TRACE", pattern, 1);
    snprintf(part, sizeof(part), "%u", PART);
    setenv("SWY_PARTITION_BYTES", part, 1);
    /* Nothing moves between the two posts but what each post's own
     * progress pass issues: the high op meets the backlog. */
    setenv("SWY_PROGRESS", "caller", 1);
    const char *mode = argc > 3 ? argv[3] : "";
    swy_test_rank_fn fn = strcmp(mode, "kill") == 0       ? kill_main
                          : strcmp(mode, "abort") == 0    ? abort_main
                          : strcmp(mode, "mismatch") == 0 ? mismatch_main
                          : strcmp(mode, "class") == 0    ? class_main
                          : strcmp(mode, "stall") == 0    ? stall_main
                                                          : NULL;
    if (fn != NULL) {
        int rc = swy_test_spawn(w, fn, NULL, 120, NULL);
        printf("%s: device lanes on %d ranks: %s\n", rc ? "FAIL" : "PASS", w,
               mode);
        return rc;
    }
    int rc = swy_test_spawn(w, rank_main, NULL, 120, NULL);
    printf("%s: device lanes on %d ranks under %s\n", rc ? "FAIL" : "PASS", w,
           name != NULL ? name : "lina");
    return rc;
}
