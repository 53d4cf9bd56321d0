/* The lina policy's uplink rule, observed in the Chrome trace each rank
 * writes, on the emulated cluster (2 nodes x 2 ranks, 1 gbit between them):
 * every link to another host leaves through one uplink, so while a
 * high-priority micro-op is in flight to one peer on the other node, no
 * low-priority micro-op starts to the other peer there; a peer on this
 * node (shared memory, not the uplink) is not held by it.
 *
 * Each round, rank r posts a low-priority backlog (an all-to-all carrying
 * data to every peer, 8 MiB each), then a low-priority exchange with its
 * local peer r ^ 1 only (16 MiB, so that the local link is busy while the
 * next op runs), then a high-priority all-to-all that carries data only to
 * the peer r ^ 2 on the other node (2 MiB). For each rank the trace gives
 * the high op's micro-ops to r ^ 2 and the low ones to r ^ 3 (the other
 * remote peer) and r ^ 1 (the local one): no low micro-op to r ^ 3 may
 * start while a high micro-op to r ^ 2 is in flight, and some to r ^ 1
 * must (the local link runs on). Results are checked too.
 *
 * A send issued before its peer posted the op does not count yet (see
 * lib/sched/engine_impl.h, "UNCONFIRMED"), so in each round one node's ranks
 * post their local and high ops 30 ms after the other node's (whose
 * headers have then arrived): every high micro-op of the late ranks
 * counts, and they are the ones checked that round. Odd rounds check
 * ranks 2 and 3, even rounds ranks 0 and 1: every rank is checked in
 * ROUNDS / 2 rounds. The uplink rule must hold in every one of them; the
 * local link must run under the high op in at least one (a local peer
 * descheduled on busy cores for the high op's whole 17 ms can leave one
 * round without a confirmed local micro-op, which says nothing of the
 * policy; a policy that holds the local link fails all of them).
 *
 * With split, the high-priority all-to-all runs on a communicator split
 * from the world across the nodes ({0, 2} and {1, 3}), the backlog and
 * the local exchange on the world: one engine orders them on the same
 * links and the same uplink.
 *
 * Usage: swy-run --nodes 2 --ranks-per-node 2 --link 1gbit
 *        test_uplink TRACE_DIR [split] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "switchyard/moe.h"
#include "switchyard/switchyard.h"

typedef struct {
    double ts, end;
    int peer, prio, round;
} ev_t;

#define MAX_EVENTS 200000
#define ROUNDS 6 /* at most 9: the round is one digit of the op's name */

/* The round of a micro-op: its op's name ends in the round's digit
 * ("high1 #7/3"), 0 if none. */
static int event_round(const char *line)
{
    const char *name = strstr(line, "\"name\":\"");
    const char *hash = name != NULL ? strstr(name, " #") : NULL;
    if (hash == NULL || hash[-1] < '1' || hash[-1] > '0' + ROUNDS)
        return 0;
    return hash[-1] - '0';
}

/* This rank's send micro-ops of data (not headers: those are small and
 * never held). More than max is an error, not a shorter trace. */
static int read_sends(const char *path, ev_t *evs, int max, int *n_p)
{
    char line[1024];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        double ts, dur, peer, prio, bytes;
        if (strstr(line, "\"cat\":\"send\"") == NULL ||
            swy_test_trace_num(line, "\"ts\":", &ts) ||
            swy_test_trace_num(line, "\"dur\":", &dur) ||
            swy_test_trace_num(line, "\"peer\":", &peer) ||
            swy_test_trace_num(line, "\"priority\":", &prio) ||
            swy_test_trace_num(line, "\"bytes\":", &bytes) || bytes < 4096)
            continue;
        if (n == max) {
            fclose(f);
            return -2;
        }
        evs[n++] = (ev_t){ts, ts + dur, (int)peer, (int)prio,
                          event_round(line)};
    }
    fclose(f);
    *n_p = n;
    return 0;
}

/* Is this a round in which this rank posts late, and is checked? */
static int strict_round(int rank, int round)
{
    return (round % 2 == 1) == (rank >= 2);
}

static int check_trace(int rank, const char *path)
{
    static ev_t evs[MAX_EVENTS];
    int n = 0, rc = read_sends(path, evs, MAX_EVENTS, &n);
    CHECK_RET(rc != -1, "rank %d: trace %s missing", rank, path);
    CHECK_RET(rc != -2, "rank %d: trace %s has more than %d data send "
              "micro-ops: raise MAX_EVENTS", rank, path, MAX_EVENTS);
    int far = rank ^ 2, other = rank ^ 3, near = rank ^ 1;
    int near_rounds = 0;
    for (int round = 1; round <= ROUNDS; round++) {
        int strict = strict_round(rank, round);
        int high = 0, near_low = 0, other_low = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].round != round || evs[i].peer != far ||
                evs[i].prio != SWY_PRIO_HIGH)
                continue;
            high++;
            for (int j = 0; j < n; j++) {
                const ev_t *o = &evs[j];
                /* The trace stamps a completion when the progress engine
                 * handles it, a little after the scheduler accounted it:
                 * 0.1 ms of slack at the end. */
                if (o->round != round || o->prio != SWY_PRIO_LOW ||
                    o->ts <= evs[i].ts || o->ts >= evs[i].end - 100.0)
                    continue;
                CHECK_RET(o->peer != other || !strict,
                          "rank %d: round %d: low-priority micro-op to rank "
                          "%d started at +%.3f ms while a high-priority one "
                          "to rank %d was in flight (+0 .. +%.3f ms): both "
                          "leave through the uplink", rank, round, other,
                          (o->ts - evs[i].ts) / 1e3, far,
                          (evs[i].end - evs[i].ts) / 1e3);
                other_low += o->peer == other;
                near_low += o->peer == near;
            }
        }
        CHECK_RET(high != 0, "rank %d: round %d: no high-priority micro-op "
                  "to rank %d in the trace", rank, round, far);
        fprintf(stderr, "rank %d, round %d%s: %d high micro-ops to rank %d; "
                "low ones started under them: %d to rank %d (other host), "
                "%d to rank %d (same host)\n", rank, round,
                strict ? "" : " (not checked: posted before its peer)", high,
                far, other_low, other, near_low, near);
        near_rounds += strict && near_low != 0;
    }
    CHECK_RET(near_rounds != 0,
              "rank %d: in none of its %d checked rounds did a low-priority "
              "micro-op to rank %d (same host) start while the high op to "
              "rank %d was in flight: the uplink rule held the local link "
              "too", rank, ROUNDS / 2, near, far);
    return 0;
}

int main(int argc, char **argv)
{
    int rank = -1;
    if (argc != 2 && !(argc == 3 && strcmp(argv[2], "split") == 0)) {
        fprintf(stderr, "usage: test_uplink TRACE_DIR [split] (under "
                "swy-run --nodes 2 --ranks-per-node 2)\n");
        return 2;
    }
    int split = argc == 3;
    char pattern[600], path[700];
    snprintf(pattern, sizeof(pattern), "%s/uplink.%%r.json", argv[1]);
    setenv("SWY_TRACE", pattern, 1);
    setenv("SWY_POLICY", "lina", 1);
    setenv("SWY_PARTITION_BYTES", "64K", 1);
    swy_comm_t comm = NULL;
    CHECK_OK_RET(swy_comm_init_env(&comm), NULL);
    rank = swy_comm_rank(comm);
    int w = swy_comm_size(comm);
    CHECK_RET(w == 4, "rank %d: needs 4 ranks on 2 nodes, got %d", rank, w);
    int nodes = 0;
    /* Topology check: rank ^ 1 shares this host, rank ^ 2 does not. */
    {
        int node[4];
        CHECK_OK_RET(swy_moe_topo_nodes(comm, node, &nodes), comm);
        CHECK_RET(nodes == 2 && node[rank] == node[rank ^ 1] &&
                      node[rank] != node[rank ^ 2],
                  "rank %d: expected ranks {0,1} and {2,3} on two hosts",
                  rank);
    }
    size_t low_per = (8u << 20) / 4, high_per = (2u << 20) / 4;
    size_t near_per = (16u << 20) / 4;
    float *ls = malloc(4 * low_per * 4), *lr = malloc(4 * low_per * 4);
    float *hs = malloc(high_per * 4), *hr = malloc(high_per * 4);
    float *ns = malloc(near_per * 4), *nr = malloc(near_per * 4);
    CHECK_RET(ls && lr && hs && hr && ns && nr, "rank %d: out of memory",
              rank);
    size_t lc[4], ld[4], sc[4] = {0}, sd[4] = {0}, nc[4] = {0}, nd[4] = {0};
    for (int j = 0; j < 4; j++) {
        lc[j] = low_per;
        ld[j] = (size_t)j * low_per;
        for (size_t i = 0; i < low_per; i++)
            ls[ld[j] + i] = (float)(rank * 1000 + j * 10 + (int)(i % 7));
    }
    for (size_t i = 0; i < high_per; i++)
        hs[i] = (float)(rank * 3 + (int)(i % 11));
    for (size_t i = 0; i < near_per; i++)
        ns[i] = (float)(rank * 5 + (int)(i % 13));
    sc[rank ^ 2] = high_per;
    nc[rank ^ 1] = near_per;
    /* split: the high op on {rank, rank ^ 2}, ordered by world rank. */
    swy_comm_t hcomm = comm;
    size_t hsc[2] = {0}, hsd[2] = {0};
    if (split) {
        CHECK_OK_RET(swy_comm_split(comm, rank & 1, rank, &hcomm), comm);
        CHECK_RET(swy_comm_size(hcomm) == 2 &&
                      swy_comm_rank(hcomm) == (rank < (rank ^ 2) ? 0 : 1),
                  "rank %d: the split gave rank %d of %d", rank,
                  swy_comm_rank(hcomm), swy_comm_size(hcomm));
        hsc[1 - swy_comm_rank(hcomm)] = high_per;
    }
    for (int round = 1; round <= ROUNDS; round++) {
        char low_name[16], near_name[16], high_name[16];
        snprintf(low_name, sizeof(low_name), "backlog%d", round);
        snprintf(near_name, sizeof(near_name), "local%d", round);
        snprintf(high_name, sizeof(high_name), "high%d", round);
        swy_op_attr_t low = SWY_OP_ATTR_INIT, nlow = SWY_OP_ATTR_INIT,
                      hi = SWY_OP_ATTR_INIT;
        low.priority = nlow.priority = SWY_PRIO_LOW;
        low.name = low_name;
        nlow.name = near_name;
        hi.priority = SWY_PRIO_HIGH;
        hi.name = high_name;
        swy_request_t lreq, nreq, hreq;
        memset(lr, 0, 4 * low_per * 4);
        memset(hr, 0, high_per * 4);
        memset(nr, 0, near_per * 4);
        CHECK_OK_RET(swy_barrier(comm), comm);
        CHECK_OK_RET(swy_alltoallv(ls, lc, ld, lr, lc, ld, SWY_FLOAT32, comm,
                                   &low, &lreq),
                     comm);
        if (strict_round(rank, round)) {
            /* Let the backlog run; then post after the other node. */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        CHECK_OK_RET(swy_alltoallv(ns, nc, nd, nr, nc, nd, SWY_FLOAT32, comm,
                                   &nlow, &nreq),
                     comm);
        if (split)
            CHECK_OK_RET(swy_alltoallv(hs, hsc, hsd, hr, hsc, hsd, SWY_FLOAT32,
                                       hcomm, &hi, &hreq),
                         hcomm);
        else
            CHECK_OK_RET(swy_alltoallv(hs, sc, sd, hr, sc, sd, SWY_FLOAT32,
                                       comm, &hi, &hreq),
                         comm);
        CHECK_OK_RET(swy_wait(hreq), comm);
        CHECK_OK_RET(swy_wait(nreq), comm);
        CHECK_OK_RET(swy_wait(lreq), comm);
        swy_request_free(hreq);
        swy_request_free(nreq);
        swy_request_free(lreq);
        for (size_t i = 0; i < high_per; i++)
            CHECK_RET(hr[i] == (float)((rank ^ 2) * 3 + (int)(i % 11)),
                      "rank %d: round %d: high all-to-all: element %zu from "
                      "rank %d", rank, round, i, rank ^ 2);
        for (size_t i = 0; i < near_per; i += 97)
            CHECK_RET(nr[i] == (float)((rank ^ 1) * 5 + (int)(i % 13)),
                      "rank %d: round %d: local exchange: element %zu from "
                      "rank %d", rank, round, i, rank ^ 1);
        for (int j = 0; j < 4; j++)
            for (size_t i = 0; i < low_per; i += 101)
                CHECK_RET(lr[ld[j] + i] ==
                              (float)(j * 1000 + rank * 10 + (int)(i % 7)),
                          "rank %d: round %d: backlog: element %zu from "
                          "rank %d", rank, round, i, j);
    }
    if (hcomm != comm)
        CHECK_OK_RET(swy_comm_destroy(hcomm), comm);
    CHECK_OK_RET(swy_comm_destroy(comm), comm);
    free(ls);
    free(lr);
    free(hs);
    free(hr);
    free(ns);
    free(nr);
    snprintf(path, sizeof(path), "%s/uplink.%d.json", argv[1], rank);
    if (check_trace(rank, path) != 0)
        return 1;
    printf("PASS: rank %d\n", rank);
    return 0;
}
