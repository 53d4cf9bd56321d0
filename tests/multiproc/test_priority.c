/* Priority semantics, observed in the Chrome trace each rank writes: with a
 * low-priority backlog queued, once a high-priority op is posted, the
 * low-priority micro-ops issued afterwards on a link never have more than
 * SWY_CREDIT_BYTES in flight until the high-priority op's last micro-op
 * left on that link (policy lina). The check must have had something to
 * hold: low-priority bytes still queued when the high op came, on some
 * link (else the test fails: a backlog that drained first, or that moved
 * no bytes through the transports, proves nothing). Also checks the
 * counters. Sends issued before their peer posted the op ("send_early" in
 * the trace: up to two partitions per op and link, which by design do not
 * count against the credit, so that no policy can deadlock) are left out.
 * The credit holds on the wire only if the transport counts the same
 * bytes: every low-priority send issued after the high op was posted
 * must carry SWY_SEND_HINT_PREEMPTIBLE ("hints" in the trace; the ucx
 * plugin then takes it off its eager path to local ranks, whose queue a
 * later send waits behind however early the send completed), and no
 * high-priority send may.
 * Usage: test_priority NRANKS TRACE_DIR [split]   (NRANKS 1 uses the self
 * transport; 2 uses UCX shared memory). With split, the high-priority
 * all-to-all runs on a communicator split from the world (ranks in
 * reverse order) while the backlog runs on the world: the engine orders
 * both on the same links. */
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "switchyard/swy_send_hints_v1.h"

#define PART (64u << 10)
#define CREDIT (64u << 10)

static const char *trace_dir;

typedef struct {
    double ts, dur;
    int tid, prio;
    unsigned hints;
    size_t bytes;
} ev_t;

/* Parse this rank's trace: send events and the high op's post time. */
static int check_trace(int rank, int w)
{
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/trace.%d.json", trace_dir, rank);
    FILE *f = fopen(path, "r");
    CHECK_RET(f != NULL, "trace %s missing", path);
    enum { MAX_EVENTS = 200000 };
    static ev_t evs[MAX_EVENTS];
    size_t n = 0;
    double high_post = -1;
    while (fgets(line, sizeof(line), f)) {
        double ts, dur, tid, prio, bytes, hints;
        if (swy_test_trace_num(line, "\"ts\":", &ts) ||
            swy_test_trace_num(line, "\"dur\":", &dur) ||
            swy_test_trace_num(line, "\"tid\":", &tid) ||
            swy_test_trace_num(line, "\"priority\":", &prio) ||
            swy_test_trace_num(line, "\"bytes\":", &bytes) ||
            swy_test_trace_num(line, "\"hints\":", &hints))
            continue;
        if (strstr(line, "\"cat\":\"send\"")) {
            /* A trace longer than this is read whole or not at all. */
            CHECK_RET(n < MAX_EVENTS, "trace %s has more than %d send events",
                      path, MAX_EVENTS);
            evs[n++] = (ev_t){ts, dur, (int)tid, (int)prio, (unsigned)hints,
                              (size_t)bytes};
        }
        else if (strstr(line, "\"name\":\"high #") && tid == 0)
            high_post = ts;
    }
    fclose(f);
    CHECK_RET(high_post > 0, "no op event for the high-priority op");
    int checked = 0;
    size_t low_bytes_behind = 0; /* low bytes issued after the high post */
    for (size_t i = 0; i < n; i++)
        if (evs[i].prio == SWY_PRIO_LOW && evs[i].ts >= high_post)
            low_bytes_behind += evs[i].bytes;
    fprintf(stderr, "rank %d: %zu low-priority bytes were queued behind the "
            "high op\n", rank, low_bytes_behind);
    CHECK_RET(low_bytes_behind > 0, "rank %d: no low-priority bytes waited for "
              "the high-priority op: the window was not exercised", rank);
    for (size_t i = 0; i < n; i++) {
        const ev_t *e = &evs[i];
        if (e->prio == SWY_PRIO_LOW && e->ts >= high_post)
            CHECK_RET(e->hints & SWY_SEND_HINT_PREEMPTIBLE, "rank %d: a "
                      "low-priority send to link %d at %.1f, after the high "
                      "op was posted, went without the preemptible hint "
                      "(hints %u)", rank, e->tid - 1, e->ts, e->hints);
        if (e->prio == SWY_PRIO_HIGH)
            CHECK_RET(!(e->hints & SWY_SEND_HINT_PREEMPTIBLE), "rank %d: a "
                      "high-priority send to link %d went with the "
                      "preemptible hint", rank, e->tid - 1);
    }
    for (int peer = 0; peer < w; peer++) {
        int tid = 1 + peer;
        double last_high = -1;
        size_t nlow_after = 0;
        for (size_t i = 0; i < n; i++)
            if (evs[i].tid == tid && evs[i].prio == SWY_PRIO_HIGH &&
                evs[i].ts > last_high)
                last_high = evs[i].ts;
        if (last_high < 0)
            continue;
        /* At each low issue inside the window, low in flight <= credit. */
        for (size_t i = 0; i < n; i++) {
            const ev_t *e = &evs[i];
            if (e->tid != tid || e->prio != SWY_PRIO_LOW || e->ts < high_post ||
                e->ts > last_high)
                continue;
            nlow_after++;
            /* Timestamps are wall-clock µs read into a double (0.25 µs
             * apart at today's epoch), and a completion is stamped when
             * it is handled, just before the next issue: back-to-back
             * micro-ops (eager sends, 12 µs apart) touch. 1 µs of slack
             * at the end. */
            size_t inflight = 0;
            for (size_t j = 0; j < n; j++) {
                const ev_t *o = &evs[j];
                if (o->tid == tid && o->prio == SWY_PRIO_LOW &&
                    o->ts <= e->ts && o->ts + o->dur > e->ts + 1.0)
                    inflight += o->bytes;
            }
            CHECK_RET(
                inflight <= CREDIT,
                "rank %d link %d: %zu bytes of low "
                "priority in flight at %.1f while high waited (credit %u)",
                rank, peer, inflight, e->ts, CREDIT);
        }
        fprintf(stderr, "rank %d link %d: %zu low micro-ops issued while the "
                "high op was issuing\n", rank, peer, nlow_after);
        checked++;
    }
    CHECK_RET(checked > 0, "no link carried the high-priority op");
    return 0;
}

static int split_mode;

static int rank_main(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_comm_t hc = comm; /* the high op's communicator */
    if (split_mode)
        CHECK_OK_RET(swy_comm_split(comm, 0, w - rank, &hc), comm);
    int me = swy_comm_rank(hc);
    size_t low_count = (32u << 20) / 4, per_peer = (4u << 20) / 4;
    float *low_send = calloc(low_count, 4), *low_recv = calloc(low_count, 4);
    float *hs = calloc(per_peer * (size_t)w, 4);
    float *hr = calloc(per_peer * (size_t)w, 4);
    size_t counts[16], displs[16];
    for (int j = 0; j < w; j++) {
        counts[j] = per_peer;
        displs[j] = (size_t)j * per_peer;
    }
    for (size_t i = 0; i < per_peer * (size_t)w; i++)
        hs[i] = (float)(me * 7 + (int)(i % 1000));
    swy_op_attr_t low = SWY_OP_ATTR_INIT, high = SWY_OP_ATTR_INIT;
    low.priority = SWY_PRIO_LOW;
    low.name = "low";
    high.priority = SWY_PRIO_HIGH;
    high.name = "high";
    swy_request_t lreq, hreq;
    /* The backlog: an allreduce (W > 1) or a large self exchange (W == 1). */
    size_t low_counts[16], low_displs[16];
    for (int j = 0; j < w; j++) {
        low_counts[j] = low_count / (size_t)w;
        low_displs[j] = (size_t)j * (low_count / (size_t)w);
    }
    if (w > 1)
        CHECK_OK_RET(swy_allreduce(low_send, low_recv, low_count, SWY_FLOAT32,
                                   SWY_SUM, comm, &low, &lreq), comm);
    else
        CHECK_OK_RET(swy_alltoallv(low_send, low_counts, low_displs, low_recv,
                                   low_counts, low_displs, SWY_FLOAT32, comm,
                                   &low, &lreq), comm);
    CHECK_OK_RET(swy_alltoallv(hs, counts, displs, hr, counts, displs,
                               SWY_FLOAT32, hc, &high, &hreq), hc);
    CHECK_OK_RET(swy_wait(hreq), comm);
    CHECK_OK_RET(swy_wait(lreq), comm);
    swy_request_free(hreq);
    swy_request_free(lreq);
    for (int j = 0; j < w; j++)
        for (size_t i = 0; i < per_peer; i += 997)
            CHECK_RET(hr[(size_t)j * per_peer + i] ==
                          (float)(j * 7 + (int)((me * per_peer + i) % 1000)),
                      "a2a data from %d", j);
    swy_comm_stats_t st = {.struct_size = sizeof(st)};
    CHECK_OK_RET(swy_comm_stats(comm, &st), comm);
    fprintf(stderr, "rank %d: preemptions %llu, high waited %.3f ms\n", rank,
            (unsigned long long)st.preemptions, st.high_wait_s * 1e3);
    CHECK_RET(st.micro_ops_sent > 0, "counters");
    if (hc != comm)
        CHECK_OK_RET(swy_comm_destroy(hc), hc);
    CHECK_OK_RET(swy_comm_destroy(comm), comm);
    if (check_trace(rank, w))
        return 201;
    return 200;
}

int main(int argc, char **argv)
{
    int w = argc > 1 ? atoi(argv[1]) : 2;
    trace_dir = argc > 2 ? argv[2] : "/tmp";
    split_mode = argc > 3 && strcmp(argv[3], "split") == 0;
    char pattern[600], part[32];
    snprintf(pattern, sizeof(pattern), "%s/trace.%%r.json", trace_dir);
    setenv("SWY_TRACE", pattern, 1);
    setenv("SWY_POLICY", "lina", 1);
    snprintf(part, sizeof(part), "%u", PART);
    setenv("SWY_PARTITION_BYTES", part, 1);
    snprintf(part, sizeof(part), "%u", CREDIT);
    setenv("SWY_CREDIT_BYTES", part, 1);
    setenv("SWY_WINDOW_BYTES", "512K", 1);
    /* The backlog's bytes go through the transports and the link queues
     * (the shared-memory allreduce sends only empty notices). */
    setenv("SWY_SHM_CHANNEL", "0", 1);
    /* Nothing moves between the two posts (a progress thread could drain
     * the backlog there on a loaded machine): the high op meets it. */
    setenv("SWY_PROGRESS", "caller", 1);
    int rc = swy_test_spawn(w, rank_main, NULL, 120, NULL);
    printf("%s: priority on %d ranks%s\n", rc ? "FAIL" : "PASS", w,
           split_mode ? ", high op on a split communicator" : "");
    return rc;
}
