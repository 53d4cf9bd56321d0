/* Sub-communicators on one engine (swy_comm_split), point-to-point
 * send/recv and groups, each against a serial reference computed here.
 * Usage: test_split NRANKS CASE
 *   basic     colors, keys (reversed), every collective on the halves
 *   nocolor   SWY_SPLIT_NOCOLOR gives NULL; the others still work
 *   nested    a split of a split; 1-rank groups
 *   parent    the parent destroyed before its children
 *   inflight  a split while ops of the parent are in flight; ops on three
 *             overlapping communicators in flight at once, each rank
 *             posting the communicators in its own order
 *   p2p       sends and receives match in posting order per pair,
 *             tagged ones (swy_send_tagged) among them; a negative tag
 *             is refused
 *   group     many peers, blocking calls in a scrambled order, in a group
 *   p2p_mismatch  a send and a receive of different counts: both fail
 *   p2p_mismatch_late  the same, the receive posted after the send's
 *             header came: the sender still finds it itself
 *   p2p_tag_mismatch  ... of different tags: both fail, naming the tags
 *             (under SWY_P2P_MATCH=tag both time out, the receive naming
 *             its tag)
 *   any_source  receives from SWY_ANY_SOURCE: every rank sends to every
 *             rank (itself too) at once, each message received once,
 *             from the rank swy_request_source says, in each sender's
 *             order; receives from a rank posted between them; a send
 *             to oneself before and after the receive; refused calls
 *   any_source_mismatch  a receive from any source of another count than
 *             the send it matched: both fail
 *   any_source_timeout  receives from any source nobody sends to:
 *             SWY_ERR_TIMEOUT, naming them
 *   tag_match  SWY_P2P_MATCH=tag (set with swy_comm_configure): every
 *             rank sends every rank (itself too) two messages of each of
 *             four tags (one of no elements), which it receives in
 *             reverse tag order, some receives posted before the sends:
 *             each gets its tag's message, the two of a tag in their
 *             order; receives from any source by tag; a receive waits
 *             for nothing but its own send (3 ranks: a chain that
 *             waiting behind an older receive would deadlock); bad
 *             values refused, and a switch of the setting while a
 *             caught header waits for its receive
 *   random_p2p  random traffic (seeded rounds, TEST_SEEDS): 0-6
 *             messages of three tags from every rank to every rank
 *             (itself too), posted in each rank's own order, each
 *             receive checked against posting order per pair
 *   random_tag  the same under SWY_P2P_MATCH=tag, receives in any order,
 *             by sender or from any source: against MPI's matching rule
 *   random_mix  random collectives (kinds, sizes, priorities) on four
 *             communicators of the same ranks, all in flight, each rank
 *             posting the communicators in its own order (TEST_SEEDS);
 *             on device memory, a stream per communicator
 *   mismatch  a mismatch on one split communicator: it fails on its
 *             ranks, the parent and the other half go on working
 *   kill      a rank dies: the communicators holding it fail on every
 *             other rank, the one without it goes on working
 *   reuse     a failed communicator's last messages do not reach the
 *             next one
 *   info      swy_comm_peer_info on the world and a reversed split
 *   threads   17 communicators run on the threads of one
 * TEST_COLL_MEM=device: p2p's and group's buffers are device memory of
 * the GPU test double (tests/devdouble).
 *   join      a communicator from a unique id of its own, over the same
 *             processes, joins their engine (its counters count both
 *             communicators' ops); ops of both in flight together
 *   join_first   the engine's first communicator destroyed first
 *   join_mismatch  a mismatch on the joined one fails it alone
 *   join_kill    a process that dies fails the joined one too */
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "harness.h"

/* Value that rank `src` (of the parent) contributes at index i. */
static double val(int src, size_t i)
{
    return (double)((src * 31 + (int)(i % 97)) % 61) - 20.0;
}

/* Every collective on comm against a reference; members[r] is the
 * parent rank of comm's rank r (their contributions are val(members[r])). */
static int exercise(swy_comm_t comm, const int *members, size_t count)
{
    int r = swy_comm_rank(comm), n = swy_comm_size(comm);
    double *in = malloc(count * sizeof(double) * (size_t)n);
    double *out = malloc(count * sizeof(double) * (size_t)n);
    CHECK_RET(in != NULL && out != NULL, "malloc");
    for (size_t i = 0; i < count; i++)
        in[i] = val(members[r], i);
    /* allreduce: sum and max */
    CHECK_OK_RET(swy_allreduce(in, out, count, SWY_FLOAT64, SWY_SUM, comm, NULL,
                               NULL), comm);
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int k = 0; k < n; k++)
            want += val(members[k], i);
        CHECK_RET(out[i] == want, "allreduce[%zu] %g want %g", i, out[i], want);
    }
    CHECK_OK_RET(swy_allreduce(in, out, count, SWY_FLOAT64, SWY_MAX, comm, NULL,
                               NULL), comm);
    for (size_t i = 0; i < count; i++) {
        double want = val(members[0], i);
        for (int k = 1; k < n; k++)
            want = val(members[k], i) > want ? val(members[k], i) : want;
        CHECK_RET(out[i] == want, "allreduce max[%zu]", i);
    }
    /* allgather */
    CHECK_OK_RET(swy_allgather(in, out, count, SWY_FLOAT64, comm, NULL, NULL),
                 comm);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++)
            CHECK_RET(out[(size_t)k * count + i] == val(members[k], i),
                      "allgather from %d [%zu]", k, i);
    /* broadcast from the last rank */
    for (size_t i = 0; i < count; i++)
        out[i] = r == n - 1 ? val(members[n - 1], i) : -1;
    CHECK_OK_RET(
        swy_broadcast(out, count, SWY_FLOAT64, n - 1, comm, NULL, NULL), comm);
    for (size_t i = 0; i < count; i++)
        CHECK_RET(out[i] == val(members[n - 1], i), "broadcast[%zu]", i);
    /* alltoallv: rank r sends (k + 1) * 3 elements to rank k, values
     * tagged with (source parent rank, destination rank) */
    size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
    for (int k = 0; k < n; k++) {
        sc[k] = (size_t)(k + 1) * 3;
        sd[k] = so;
        so += sc[k];
        rc[k] = (size_t)(r + 1) * 3;
        rd[k] = ro;
        ro += rc[k];
    }
    double *a2s = malloc(so * sizeof(double)), *a2r = malloc(ro * sizeof(double));
    CHECK_RET(a2s != NULL && a2r != NULL, "malloc");
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < sc[k]; i++)
            a2s[sd[k] + i] = members[r] * 1000 + k * 10 + (double)i;
    CHECK_OK_RET(
        swy_alltoallv(a2s, sc, sd, a2r, rc, rd, SWY_FLOAT64, comm, NULL, NULL),
        comm);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < rc[k]; i++)
            CHECK_RET(a2r[rd[k] + i] == members[k] * 1000 + r * 10 + (double)i,
                      "alltoallv from %d [%zu]", k, i);
    CHECK_OK_RET(swy_barrier(comm), comm);
    free(a2s);
    free(a2r);
    free(in);
    free(out);
    return 0;
}

/* The members of a split by (color, key) of every parent rank, ordered
 * by key then parent rank: the reference for swy_comm_split. */
static int expect_members(int w, const int *color, const int *key, int c,
                          int *members)
{
    int n = 0;
    for (int p = 0; p < w; p++)
        if (color[p] == c)
            members[n++] = p;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (key[members[j]] < key[members[j - 1]] ||
                                  (key[members[j]] == key[members[j - 1]] &&
                                   members[j] < members[j - 1]));
             j--) {
            int t = members[j];
            members[j] = members[j - 1];
            members[j - 1] = t;
        }
    return n;
}

/* Split with color[]/key[] (given for every rank), check rank and size
 * against the reference, and return the members. */
static int split_checked(swy_comm_t comm, const int *color, const int *key,
                         swy_comm_t *sub, int *members, int *n_p)
{
    int me = swy_comm_rank(comm), w = swy_comm_size(comm);
    CHECK_OK_RET(swy_comm_split(comm, color[me], key[me], sub), comm);
    if (color[me] == SWY_SPLIT_NOCOLOR) {
        CHECK_RET(*sub == NULL, "NOCOLOR gave a communicator");
        *n_p = 0;
        return 0;
    }
    int n = expect_members(w, color, key, color[me], members);
    int pos = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == me)
            pos = i;
    CHECK_RET(*sub != NULL, "no communicator");
    CHECK_RET(swy_comm_size(*sub) == n, "size %d, want %d", swy_comm_size(*sub),
              n);
    CHECK_RET(swy_comm_rank(*sub) == pos, "rank %d, want %d",
              swy_comm_rank(*sub), pos);
    *n_p = n;
    return 0;
}

static int case_basic(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], members[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = p % 2;
        key[p] = -p; /* reversed */
    }
    swy_comm_t sub;
    if (split_checked(comm, color, key, &sub, members, &n))
        return 1;
    if (exercise(sub, members, 5000))
        return 1;
    /* Same members, another communicator: ops of the two never mix. */
    swy_comm_t twin;
    int twin_members[64], tn;
    if (split_checked(comm, color, key, &twin, twin_members, &tn))
        return 1;
    if (exercise(twin, twin_members, 777) || exercise(sub, members, 33))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(twin), comm);
    CHECK_OK_RET(swy_comm_destroy(sub), comm);
    int world[64];
    for (int p = 0; p < w; p++)
        world[p] = p;
    return exercise(comm, world, 100);
}

static int case_nocolor(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], members[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = p == 0 ? SWY_SPLIT_NOCOLOR : 7;
        key[p] = 0;
    }
    swy_comm_t sub;
    if (split_checked(comm, color, key, &sub, members, &n))
        return 1;
    if (sub != NULL && exercise(sub, members, 300))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(sub), comm); /* NULL ok */
    /* Bad input: a clear error, nothing made. */
    swy_comm_t bad = (swy_comm_t)0x1;
    CHECK_RET(swy_comm_split(comm, -5, 0, &bad) == SWY_ERR_INVALID_ARG &&
                  bad == (swy_comm_t)0x1,
              "color -5 accepted");
    CHECK_RET(strstr(swy_last_error(comm), "color -5") != NULL, "message: %s",
              swy_last_error(comm));
    CHECK_RET(swy_comm_split(comm, 0, 0, NULL) == SWY_ERR_INVALID_ARG,
              "NULL newcomm accepted");
    CHECK_RET(swy_comm_split(NULL, 0, 0, &bad) == SWY_ERR_INVALID_ARG,
              "NULL comm accepted");
    return 0;
}

static int case_nested(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], m1[64], n1;
    for (int p = 0; p < w; p++) {
        color[p] = p % 2;
        key[p] = p;
    }
    swy_comm_t half;
    if (split_checked(comm, color, key, &half, m1, &n1))
        return 1;
    /* Split the half by position: pairs. */
    int hc[64], hk[64], m2[64], n2;
    for (int i = 0; i < n1; i++) {
        hc[i] = i / 2;
        hk[i] = 0;
    }
    swy_comm_t pair;
    if (split_checked(half, hc, hk, &pair, m2, &n2))
        return 1;
    int pm[64]; /* members of pair as parent (world) ranks */
    for (int i = 0; i < n2; i++)
        pm[i] = m1[m2[i]];
    if (exercise(pair, pm, 999))
        return 1;
    /* 1-rank groups */
    for (int p = 0; p < w; p++) {
        color[p] = p;
        key[p] = 0;
    }
    swy_comm_t alone;
    int ma[64], na;
    if (split_checked(comm, color, key, &alone, ma, &na))
        return 1;
    CHECK_RET(na == 1 && swy_comm_size(alone) == 1, "alone");
    if (exercise(alone, ma, 500) || exercise(half, m1, 200))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(alone), comm);
    CHECK_OK_RET(swy_comm_destroy(half), comm); /* before its child */
    if (exercise(pair, pm, 10))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(pair), comm);
    return 0;
}

static int case_parent(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], members[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = 0;
        key[p] = w - p;
    }
    swy_comm_t sub;
    if (split_checked(comm, color, key, &sub, members, &n))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(comm), comm);
    if (exercise(sub, members, 4000))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(sub), sub);
    return 200; /* the harness must not destroy comm again */
}

static int case_inflight(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t count = 200000;
    float *big = malloc(count * sizeof(float)), *bigr = malloc(count * 4);
    CHECK_RET(big != NULL && bigr != NULL, "malloc");
    for (size_t i = 0; i < count; i++)
        big[i] = (float)(rank + 1);
    swy_request_t req;
    CHECK_OK_RET(
        swy_allreduce(big, bigr, count, SWY_FLOAT32, SWY_SUM, comm, NULL, &req),
        comm);
    int color[64] = {0}, key[64] = {0}, mh[64], nh, mr[64], nr;
    for (int p = 0; p < w; p++) {
        color[p] = p < w / 2 ? 0 : 1;
        key[p] = 0;
    }
    swy_comm_t half, rev;
    if (split_checked(comm, color, key, &half, mh, &nh))
        return 1;
    for (int p = 0; p < w; p++) {
        color[p] = 0;
        key[p] = -p;
    }
    if (split_checked(comm, color, key, &rev, mr, &nr))
        return 1;
    CHECK_OK_RET(swy_wait(req), comm);
    swy_request_free(req);
    for (size_t i = 0; i < count; i += 1013)
        CHECK_RET(bigr[i] == (float)(w * (w + 1) / 2), "allreduce in flight");
    /* Rounds of ops on three communicators, all in flight together; each
     * rank posts the communicators in an order of its own (the order on
     * each communicator is the same everywhere). */
    enum { ROUNDS = 6, PER = 3 };
    swy_comm_t comms[3] = {comm, half, rev};
    size_t n_el = 3000;
    float *src = malloc(n_el * 4), *dst = malloc(9 * ROUNDS * n_el * 4);
    CHECK_RET(src != NULL && dst != NULL, "malloc");
    for (size_t i = 0; i < n_el; i++)
        src[i] = (float)(rank * 3 + (int)(i % 7));
    swy_request_t reqs[3 * ROUNDS * PER];
    int nreq = 0;
    uint64_t seed = 0x5eed + (uint64_t)rank;
    for (int round = 0; round < ROUNDS; round++) {
        int order[3] = {0, 1, 2};
        for (int i = 2; i > 0; i--) {
            int j = (int)(swy_test_rand(&seed) % (uint64_t)(i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int o = 0; o < 3; o++) {
            int c = order[o];
            float *out = dst + (size_t)(round * 3 + c) * 3 * n_el;
            swy_op_attr_t a = SWY_OP_ATTR_INIT;
            a.priority = c == 1 ? SWY_PRIO_HIGH : SWY_PRIO_LOW;
            CHECK_OK_RET(swy_allreduce(src, out, n_el, SWY_FLOAT32, SWY_SUM,
                                       comms[c], &a, &reqs[nreq++]), comms[c]);
            CHECK_OK_RET(swy_allgather(src, out + n_el,
                                       n_el / (size_t)swy_comm_size(comms[c]),
                                       SWY_FLOAT32, comms[c], &a,
                                       &reqs[nreq++]),
                         comms[c]);
            CHECK_OK_RET(swy_broadcast(out + 2 * n_el, n_el, SWY_FLOAT32, 0,
                                       comms[c], &a, &reqs[nreq++]), comms[c]);
        }
    }
    for (int i = 0; i < nreq; i++) {
        CHECK_OK_RET(swy_wait(reqs[i]), comm);
        swy_request_free(reqs[i]);
    }
    const int *mem[3] = {NULL, mh, mr};
    int sizes[3] = {w, nh, nr};
    for (int round = 0; round < ROUNDS; round++)
        for (int c = 0; c < 3; c++) {
            float *out = dst + (size_t)(round * 3 + c) * 3 * n_el;
            for (size_t i = 0; i < n_el; i += 37) {
                float want = 0;
                for (int k = 0; k < sizes[c]; k++)
                    want += (float)((c ? mem[c][k] : k) * 3 + (int)(i % 7));
                CHECK_RET(out[i] == want, "round %d comm %d allreduce", round,
                          c);
            }
        }
    CHECK_OK_RET(swy_comm_destroy(half), comm);
    CHECK_OK_RET(swy_comm_destroy(rev), comm);
    free(src);
    free(dst);
    free(big);
    free(bigr);
    return 0;
}

/* Rank r sends NMSG messages to every peer, of sizes that differ per
 * message, non-blocking; receives them in posting order. */
static int g_device; /* TEST_COLL_MEM=device */


static int case_p2p(swy_comm_t comm, int rank, int w, void *arg)
{
    enum { NMSG = 5 };
    size_t sizes[NMSG] = {1, 0, 70000, 13, 300001};
    int32_t *sbuf[64][NMSG], *rbuf[64][NMSG];
    swy_request_t reqs[64 * NMSG * 2];
    int nreq = 0;
    char match[16] = "";
    CHECK_OK_RET(swy_comm_query(comm, "SWY_P2P_MATCH", match, sizeof(match)),
                 comm);
    if (g_device && w > 1 && strcmp(match, "tag") == 0) {
        /* The device communicators match in posting order: a receive
         * that would match on tags is refused, and nothing is sent. */
        int32_t *d = swy_test_buf_calloc(1, 4, sizeof(int32_t));
        swy_request_t rq;
        swy_status_t st = swy_recv(d, 4, SWY_INT32, (rank + 1) % w, comm,
                                   NULL, &rq);
        CHECK_RET(st == SWY_ERR_UNSUPPORTED &&
                      strstr(swy_last_error(comm), "SWY_P2P_MATCH") != NULL,
                  "device receive under tag matching: %s: %s",
                  swy_status_string(st), swy_last_error(comm));
        swy_test_buf_free(1, d);
        return 0;
    }
    /* Ops on one stream run one after another, as NCCL's: device sends
     * and receives that need each other go in a group. */
    if (g_device)
        CHECK_OK_RET(swy_group_start(), comm);
    for (int k = 0; k < NMSG; k++)
        for (int p = 0; p < w; p++) {
            rbuf[p][k] = swy_test_buf_calloc(g_device, sizes[k] + 1,
                                             sizeof(int32_t));
            /* Odd messages tagged (the receiver's rank and k), even ones
             * tag 0 (swy_recv). */
            CHECK_OK_RET(k % 2 ? swy_recv_tagged(rbuf[p][k], sizes[k],
                                                 SWY_INT32, p, 100 * rank + k,
                                                 comm, NULL, &reqs[nreq++])
                               : swy_recv(rbuf[p][k], sizes[k], SWY_INT32, p,
                                          comm, NULL, &reqs[nreq++]),
                         comm);
        }
    for (int k = 0; k < NMSG; k++)
        for (int i = 1; i <= w; i++) {
            int p = (rank + i) % w; /* self last */
            sbuf[p][k] = swy_test_buf_calloc(g_device, sizes[k] + 1,
                                             sizeof(int32_t));
            for (size_t e = 0; e < sizes[k]; e++)
                sbuf[p][k][e] = rank * 1000000 + p * 10000 + k * 1000 +
                                (int32_t)(e % 1000);
            CHECK_OK_RET(k % 2 ? swy_send_tagged(sbuf[p][k], sizes[k],
                                                 SWY_INT32, p, 100 * p + k,
                                                 comm, NULL, &reqs[nreq++])
                               : swy_send(sbuf[p][k], sizes[k], SWY_INT32, p,
                                          comm, NULL, &reqs[nreq++]),
                         comm);
        }
    if (g_device)
        CHECK_OK_RET(swy_group_end(), comm);
    for (int i = 0; i < nreq; i++) {
        CHECK_OK_RET(swy_wait(reqs[i]), comm);
        swy_request_free(reqs[i]);
    }
    for (int p = 0; p < w; p++)
        for (int k = 0; k < NMSG; k++) {
            for (size_t e = 0; e < sizes[k]; e++)
                CHECK_RET(rbuf[p][k][e] == p * 1000000 + rank * 10000 +
                                               k * 1000 + (int32_t)(e % 1000),
                          "message %d from %d [%zu] = %d", k, p, e,
                          rbuf[p][k][e]);
            swy_test_buf_free(g_device, rbuf[p][k]);
            swy_test_buf_free(g_device, sbuf[p][k]);
        }
    if (g_device) { /* a receive from any source takes host memory only */
        int32_t *d = swy_test_buf_calloc(1, 4, sizeof(int32_t));
        swy_status_t st = swy_recv(d, 4, SWY_INT32, SWY_ANY_SOURCE, comm,
                                   NULL, NULL);
        CHECK_RET(st == SWY_ERR_UNSUPPORTED &&
                      strstr(swy_last_error(comm), "host") != NULL,
                  "device receive from any source: %s: %s",
                  swy_status_string(st), swy_last_error(comm));
        swy_test_buf_free(1, d);
    }
    /* Blocking, on a split communicator: a ring shift. */
    swy_comm_t rev;
    int color[64] = {0}, key[64] = {0}, m[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = 0;
        key[p] = -p;
    }
    if (split_checked(comm, color, key, &rev, m, &n))
        return 1;
    int me = swy_comm_rank(rev);
    double token = me, got = -1;
    if (n == 1) { /* a blocking send to oneself waits for its receive */
        swy_request_t rr;
        CHECK_OK_RET(swy_recv(&got, 1, SWY_FLOAT64, 0, rev, NULL, &rr), rev);
        CHECK_OK_RET(swy_send(&token, 1, SWY_FLOAT64, 0, rev, NULL, NULL), rev);
        CHECK_OK_RET(swy_wait(rr), rev);
        swy_request_free(rr);
    } else if (me % 2 == 0) {
        CHECK_OK_RET(swy_send(&token, 1, SWY_FLOAT64, (me + 1) % n, rev, NULL,
                              NULL), rev);
        CHECK_OK_RET(swy_recv(&got, 1, SWY_FLOAT64, (me - 1 + n) % n, rev, NULL,
                              NULL), rev);
    } else {
        CHECK_OK_RET(swy_recv(&got, 1, SWY_FLOAT64, (me - 1 + n) % n, rev, NULL,
                              NULL), rev);
        CHECK_OK_RET(swy_send(&token, 1, SWY_FLOAT64, (me + 1) % n, rev, NULL,
                              NULL), rev);
    }
    CHECK_RET(got == (double)((me - 1 + n) % n), "ring got %g", got);
    CHECK_RET(swy_send(&token, 1, SWY_FLOAT64, n, rev, NULL, NULL) ==
                  SWY_ERR_INVALID_ARG,
              "peer out of range accepted");
    CHECK_RET(swy_recv_tagged(&got, 1, SWY_FLOAT64, 0, -1, rev, NULL, NULL) ==
                  SWY_ERR_INVALID_ARG,
              "negative tag accepted");
    CHECK_RET(strstr(swy_last_error(rev), "tag -1") != NULL, "message: %s",
              swy_last_error(rev));
    CHECK_OK_RET(swy_comm_destroy(rev), comm);
    return 0;
}

/* Element e of what rank from sends rank to (case_device_lane). */
static int32_t lane_value(int from, int to, size_t e)
{
    return from * 1000000 + to * 10000 + (int32_t)(e % 9973);
}

/* A device buffer of n elements (and one more) holding what this rank
 * sends rank `to` (case_device_lane). */
static int32_t *lane_msg(int rank, int to, size_t n)
{
    int32_t *b = swy_test_buf_calloc(1, n + 1, sizeof(int32_t));
    for (size_t e = 0; e < n; e++)
        b[e] = lane_value(rank, to, e);
    return b;
}

static int lane_check(const int32_t *got, int from, int rank, size_t n,
                      const char *what)
{
    for (size_t e = 0; e < n; e++)
        CHECK_RET(got[e] == lane_value(from, rank, e), "%s: from rank %d "
                  "[%zu] = %d", what, from, e, got[e]);
    return 0;
}

/* Device sends and receives between ranks (GPU test double) move on the
 * device communicators, as NCCL calls, and none through the transports:
 * a group's (with both ring neighbours) as one launch, whose calls meet
 * their peers' in any order within it; outside a group, one launch per
 * call in posting order, as ncclSend and ncclRecv on one stream, here a
 * ring shift larger than a socket holds, in an order that lets each send
 * meet its receive. */
static int case_device_lane(swy_comm_t comm, int rank, int w, void *arg)
{
    (void)arg;
    CHECK_RET(g_device && w > 1, "device_lane: device memory, 2+ ranks");
    int next = (rank + 1) % w, prev = (rank - 1 + w) % w;
    size_t sizes[] = {13, 70000, 300001};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        int32_t *to_next = lane_msg(rank, next, n);
        int32_t *to_prev = lane_msg(rank, prev, n);
        int32_t *from_prev = swy_test_buf_calloc(1, n + 1, sizeof(int32_t));
        int32_t *from_next = swy_test_buf_calloc(1, n + 1, sizeof(int32_t));
        swy_test_dev_traffic_t mark = swy_test_dev_traffic_mark();
        /* The receive before its send on odd ranks: within a group the
         * order does not matter. */
        CHECK_OK_RET(swy_group_start(), comm);
        if (rank % 2)
            CHECK_OK_RET(swy_recv(from_prev, n, SWY_INT32, prev, comm, NULL,
                                  NULL), comm);
        CHECK_OK_RET(swy_send(to_next, n, SWY_INT32, next, comm, NULL, NULL),
                     comm);
        CHECK_OK_RET(swy_send(to_prev, n, SWY_INT32, prev, comm, NULL, NULL),
                     comm);
        if (rank % 2 == 0)
            CHECK_OK_RET(swy_recv(from_prev, n, SWY_INT32, prev, comm, NULL,
                                  NULL), comm);
        CHECK_OK_RET(swy_recv(from_next, n, SWY_INT32, next, comm, NULL,
                              NULL), comm);
        CHECK_OK_RET(swy_group_end(), comm);
        if (swy_test_dev_moved_by_plugin(mark, "a group's sends and receives"))
            return 1;
        swy_test_dev_traffic_t after = swy_test_dev_traffic_mark();
        CHECK_RET(after.launches == mark.launches + 1, "%zu elements: the "
                  "group's 4 calls took %llu launches, want 1", n,
                  after.launches - mark.launches);
        /* With 2 ranks next is prev: the pair's calls match in order. */
        if (lane_check(from_prev, prev, rank, n, w == 2 ? "1st" : "prev") ||
            lane_check(from_next, next, rank, n, w == 2 ? "2nd" : "next"))
            return 1;
        swy_test_buf_free(1, to_next);
        swy_test_buf_free(1, to_prev);
        swy_test_buf_free(1, from_prev);
        swy_test_buf_free(1, from_next);
    }
    size_t n = 300001;
    int32_t *out = lane_msg(rank, next, n);
    int32_t *in = swy_test_buf_calloc(1, n + 1, sizeof(int32_t));
    swy_test_dev_traffic_t mark = swy_test_dev_traffic_mark();
    if (rank % 2 == 0) {
        CHECK_OK_RET(swy_send(out, n, SWY_INT32, next, comm, NULL, NULL),
                     comm);
        CHECK_OK_RET(swy_recv(in, n, SWY_INT32, prev, comm, NULL, NULL),
                     comm);
    } else {
        CHECK_OK_RET(swy_recv(in, n, SWY_INT32, prev, comm, NULL, NULL),
                     comm);
        CHECK_OK_RET(swy_send(out, n, SWY_INT32, next, comm, NULL, NULL),
                     comm);
    }
    if (swy_test_dev_moved_by_plugin(mark, "a ring shift"))
        return 1;
    swy_test_dev_traffic_t after = swy_test_dev_traffic_mark();
    CHECK_RET(after.launches == mark.launches + 2, "ring shift: %llu "
              "launches, want 2", after.launches - mark.launches);
    if (lane_check(in, prev, rank, n, "ring"))
        return 1;
    swy_test_buf_free(1, out);
    swy_test_buf_free(1, in);
    return 0;
}

/* Every rank exchanges large messages with every peer, blocking calls in
 * a scrambled order of its own, inside a group: nothing may deadlock. */
static int case_group(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t count = 1u << 20; /* 4 MiB: rendezvous */
    int32_t *s = swy_test_buf_calloc(g_device, count * (size_t)w, 4);
    int32_t *r = swy_test_buf_calloc(g_device, count * (size_t)w, 4);
    CHECK_RET(s != NULL && r != NULL, "malloc");
    for (int p = 0; p < w; p++)
        for (size_t e = 0; e < count; e += 1)
            s[(size_t)p * count + e] = rank * 100 + p + (int32_t)(e & 0xff);
    int calls[128];
    int ncalls = 0;
    for (int p = 0; p < w; p++) {
        calls[ncalls++] = p;          /* send to p */
        calls[ncalls++] = 1000 + p;   /* receive from p */
    }
    uint64_t seed = 77 + (uint64_t)rank * 13;
    for (int i = ncalls - 1; i > 0; i--) {
        int j = (int)(swy_test_rand(&seed) % (uint64_t)(i + 1));
        int t = calls[i];
        calls[i] = calls[j];
        calls[j] = t;
    }
    CHECK_OK_RET(swy_group_start(), comm);
    CHECK_OK_RET(swy_group_start(), comm); /* nested */
    for (int i = 0; i < ncalls; i++) {
        int p = calls[i] % 1000;
        if (calls[i] < 1000)
            CHECK_OK_RET(swy_send(s + (size_t)p * count, count, SWY_INT32, p,
                                  comm, NULL, NULL), comm);
        else
            CHECK_OK_RET(swy_recv(r + (size_t)p * count, count, SWY_INT32, p,
                                  comm, NULL, NULL), comm);
    }
    CHECK_OK_RET(swy_group_end(), comm);
    CHECK_OK_RET(swy_group_end(), comm);
    for (int p = 0; p < w; p++)
        for (size_t e = 0; e < count; e += 4099)
            CHECK_RET(r[(size_t)p * count + e] ==
                          p * 100 + rank + (int32_t)(e & 0xff),
                      "from %d [%zu]", p, e);
    CHECK_RET(swy_group_end() == SWY_ERR_INVALID_ARG, "unmatched group_end");
    swy_test_buf_free(g_device, s);
    swy_test_buf_free(g_device, r);
    return 0;
}

/* Rank 0 sends 4 elements to rank 1, whose receive (from `from`)
 * expects 8: both fail. */
static int count_mismatch(swy_comm_t comm, int rank, int from)
{
    int32_t buf[16] = {0};
    swy_status_t st;
    if (rank == 0)
        st = swy_send(buf, 4, SWY_INT32, 1, comm, NULL, NULL);
    else if (rank == 1)
        st = swy_recv(buf, 8, SWY_INT32, from, comm, NULL, NULL);
    else
        return 0;
    CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d got %s: %s", rank,
              swy_status_string(st), swy_last_error(comm));
    CHECK_RET(strstr(swy_last_error(comm), "count") != NULL, "message: %s",
              swy_last_error(comm));
    return 201 - 1; /* exit 0, the comm failed */
}

static int case_p2p_mismatch(swy_comm_t comm, int rank, int w, void *arg)
{
    return count_mismatch(comm, rank, 0);
}

/* As p2p_mismatch, with progress by the caller (main): the sender posts
 * and looks away for a second, in which the receiver posts, finds the
 * disagreement, tells the job and exits at once. When the sender next
 * makes progress, the receiver's header and its exit are both there: the
 * header came first and must count (SWY_ERR_MISMATCH, its message naming
 * the sender's own op), not the exit (SWY_ERR_REMOTE). */
static int case_p2p_mismatch_late(swy_comm_t comm, int rank, int w,
                                  void *arg)
{
    int32_t buf[16] = {0};
    swy_status_t st;
    if (rank == 0) {
        swy_request_t req;
        st = swy_send(buf, 4, SWY_INT32, 1, comm, NULL, &req);
        if (st == SWY_OK) {
            usleep(1000 * 1000);
            st = swy_wait(req);
            swy_request_free(req);
        }
    } else if (rank == 1) {
        usleep(300 * 1000);
        st = swy_recv(buf, 8, SWY_INT32, 0, comm, NULL, NULL);
    } else {
        return 0;
    }
    const char *msg = swy_last_error(comm);
    CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d got %s: %s", rank,
              swy_status_string(st), msg);
    CHECK_RET(strstr(msg, rank == 0 ? "'send'" : "'recv'") != NULL,
              "rank %d did not see the disagreement itself: %s", rank, msg);
    return 201 - 1; /* exit 0 at once, the comm failed */
}

/* A send and its receive (the first of their pair) with other tags;
 * under SWY_P2P_MATCH=tag the receive waits for a send with its tag,
 * and both time out. */
static int case_p2p_tag_mismatch(swy_comm_t comm, int rank, int w, void *arg)
{
    int32_t buf[16] = {0};
    char mode[16];
    swy_status_t st;
    CHECK_OK_RET(swy_comm_query(comm, "SWY_P2P_MATCH", mode, sizeof(mode)),
                 comm);
    if (rank == 0)
        st = swy_send_tagged(buf, 4, SWY_INT32, 1, 3, comm, NULL, NULL);
    else if (rank == 1)
        st = swy_recv_tagged(buf, 4, SWY_INT32, 0, 4, comm, NULL, NULL);
    else
        return 0;
    if (strcmp(mode, "tag") == 0) {
        /* Each rank names its own tag, unless the other timed out first
         * and failed the communicator for both. */
        const char *msg = swy_last_error(comm);
        CHECK_RET(st == SWY_ERR_TIMEOUT, "rank %d got %s: %s", rank,
                  swy_status_string(st), msg);
        const char *own = rank == 0
                              ? "no receive there took it (tag 3"
                              : "sent it no message with its tag 4";
        CHECK_RET(strstr(msg, own) != NULL ||
                      strstr(msg, rank == 0 ? "on rank 1" : "on rank 0"),
                  "message: %s", msg);
        return 201 - 1; /* exit 0, the comm failed */
    }
    CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d got %s: %s", rank,
              swy_status_string(st), swy_last_error(comm));
    CHECK_RET(strstr(swy_last_error(comm), "tag 3") != NULL &&
                  strstr(swy_last_error(comm), "tag 4") != NULL,
              "message: %s", swy_last_error(comm));
    return 201 - 1; /* exit 0, the comm failed */
}

/* Message k of rank p's to rank q: its first element says whom from and
 * which, the others follow from it. */
static int32_t any_val(int p, int q, int k, size_t e)
{
    return p * 1000000 + q * 10000 + k * 100 + (int32_t)(e % 97);
}

static int any_check(const int32_t *buf, size_t count, int src, int me,
                     int *k_p)
{
    int k = (buf[0] - src * 1000000 - me * 10000) / 100;
    *k_p = k;
    for (size_t e = 0; e < count; e++)
        if (buf[e] != any_val(src, me, k, e))
            return 1;
    return 0;
}

static int case_any_source(swy_comm_t comm, int rank, int w, void *arg)
{
    enum { NMSG = 6 };
    /* Eager and rendezvous sizes; each round one size (a receive from
     * any source must match its send's count). */
    static const size_t sizes[2] = {37, 70000};
    for (int round = 0; round < 2; round++) {
        size_t count = sizes[round];
        int nrecv = w * NMSG;
        int32_t *rbuf = calloc((size_t)nrecv * count, sizeof(int32_t));
        int32_t *sbuf = calloc((size_t)nrecv * count, sizeof(int32_t));
        swy_request_t *rreq = calloc((size_t)nrecv, sizeof(*rreq));
        swy_request_t *sreq = calloc((size_t)nrecv, sizeof(*sreq));
        CHECK_RET(rbuf && sbuf && rreq && sreq, "calloc");
        /* Half the receives before the sends, half after (odd ranks the
         * other way round): the headers of some sends arrive before any
         * receive listens, others to probes already posted. */
        int early = rank % 2 ? nrecv - nrecv / 2 : nrecv / 2, posted = 0;
        for (; posted < early; posted++)
            CHECK_OK_RET(swy_recv(rbuf + (size_t)posted * count, count,
                                  SWY_INT32, SWY_ANY_SOURCE, comm, NULL,
                                  &rreq[posted]), comm);
        int nsend = 0;
        for (int k = 0; k < NMSG; k++)
            for (int i = 1; i <= w; i++) {
                int q = (rank + i) % w; /* self last */
                int32_t *b = sbuf + (size_t)nsend * count;
                for (size_t e = 0; e < count; e++)
                    b[e] = any_val(rank, q, k, e);
                CHECK_OK_RET(swy_send(b, count, SWY_INT32, q, comm, NULL,
                                      &sreq[nsend++]), comm);
            }
        for (; posted < nrecv; posted++)
            CHECK_OK_RET(swy_recv(rbuf + (size_t)posted * count, count,
                                  SWY_INT32, SWY_ANY_SOURCE, comm, NULL,
                                  &rreq[posted]), comm);
        int next_k[64] = {0};
        for (int j = 0; j < nrecv; j++) {
            CHECK_OK_RET(swy_wait(rreq[j]), comm);
            int src = -5, k;
            CHECK_OK_RET(swy_request_source(rreq[j], &src), comm);
            CHECK_RET(src >= 0 && src < w, "receive %d: source %d", j, src);
            CHECK_RET(!any_check(rbuf + (size_t)j * count, count, src, rank,
                                 &k),
                      "round %d receive %d from %d: data of another message "
                      "(first element %d)", round, j, src,
                      rbuf[(size_t)j * count]);
            /* A sender's messages arrive in the order it sent them. */
            CHECK_RET(k == next_k[src], "round %d receive %d: message %d of "
                      "rank %d, expected %d", round, j, k, src, next_k[src]);
            next_k[src]++;
            swy_request_free(rreq[j]);
        }
        for (int p = 0; p < w; p++)
            CHECK_RET(next_k[p] == NMSG, "round %d: %d messages from %d",
                      round, next_k[p], p);
        for (int j = 0; j < nsend; j++) {
            CHECK_OK_RET(swy_wait(sreq[j]), comm);
            swy_request_free(sreq[j]);
        }
        free(rbuf);
        free(sbuf);
        free(rreq);
        free(sreq);
        /* A receive from any source takes the next round's sends as
         * readily as this one's (MPI's too): rounds apart. */
        CHECK_OK_RET(swy_barrier(comm), comm);
    }

    /* Receives from a given rank between receives from any source: a
     * send matches the first receive posted for it. Rank 0 receives
     * any, from 1, and (3 ranks or more) any; rank 1 sends it 0, 1; rank
     * 2 sends it 0. Rank 1's 0 goes to the first receive from any source
     * unless rank 2's got there first (then it goes to the receive from
     * 1); every receive completes either way. On 2 ranks it must. */
    if (w >= 2 && rank <= 2) {
        int32_t m[3] = {-1, -1, -1}, v[2] = {0, 1};
        if (rank == 0) {
            swy_request_t r[3];
            int from[3] = {SWY_ANY_SOURCE, 1, SWY_ANY_SOURCE};
            int n = w >= 3 ? 3 : 2;
            for (int j = 0; j < n; j++)
                CHECK_OK_RET(swy_recv(&m[j], 1, SWY_INT32, from[j], comm,
                                      NULL, &r[j]), comm);
            int got[3], last1 = -1;
            for (int j = 0; j < n; j++) {
                CHECK_OK_RET(swy_wait(r[j]), comm);
                CHECK_OK_RET(swy_request_source(r[j], &got[j]), comm);
                swy_request_free(r[j]);
                CHECK_RET(from[j] == SWY_ANY_SOURCE || got[j] == from[j],
                          "receive %d from %d got %d", j, from[j], got[j]);
                if (got[j] == 1) { /* rank 1's in its order */
                    CHECK_RET(m[j] == last1 + 1, "receive %d: rank 1's "
                              "message %d after %d", j, m[j], last1);
                    last1 = m[j];
                } else {
                    CHECK_RET(got[j] == 2 && m[j] == 0, "receive %d: %d "
                              "from %d", j, m[j], got[j]);
                }
            }
            CHECK_RET(last1 == 1, "rank 1's last message %d", last1);
            CHECK_RET(w >= 3 || (got[0] == 1 && m[0] == 0), "on 2 ranks the "
                      "receive from any source got %d from %d", m[0], got[0]);
        } else if (rank == 1) {
            for (int j = 0; j < 2; j++)
                CHECK_OK_RET(swy_send(&v[j], 1, SWY_INT32, 0, comm, NULL,
                                      NULL), comm);
        } else {
            CHECK_OK_RET(swy_send(&v[0], 1, SWY_INT32, 0, comm, NULL, NULL),
                         comm);
        }
    }

    /* Oneself: a send posted before the receive from any source, and
     * one after it (no other rank sends meanwhile: a barrier each). */
    CHECK_OK_RET(swy_barrier(comm), comm);
    for (int order = 0; order < 2; order++) {
        double token = 10 + order, got = -1;
        swy_request_t sr, rr;
        if (order == 0)
            CHECK_OK_RET(swy_send(&token, 1, SWY_FLOAT64, rank, comm, NULL,
                                  &sr), comm);
        CHECK_OK_RET(swy_recv(&got, 1, SWY_FLOAT64, SWY_ANY_SOURCE, comm,
                              NULL, &rr), comm);
        int src = -5;
        if (order == 1) {
            CHECK_OK_RET(swy_request_source(rr, &src), comm);
            CHECK_RET(src == SWY_ANY_SOURCE, "source %d before a send", src);
            CHECK_OK_RET(swy_send(&token, 1, SWY_FLOAT64, rank, comm, NULL,
                                  &sr), comm);
        }
        CHECK_OK_RET(swy_wait(rr), comm);
        CHECK_OK_RET(swy_wait(sr), comm);
        CHECK_OK_RET(swy_request_source(rr, &src), comm);
        CHECK_RET(src == rank && got == token, "self (%d): %g from %d",
                  order, got, src);
        /* Not a receive; no source asked for. */
        CHECK_RET(swy_request_source(sr, &src) == SWY_ERR_INVALID_ARG,
                  "a send's source");
        CHECK_RET(swy_request_source(rr, NULL) == SWY_ERR_INVALID_ARG,
                  "NULL source");
        swy_request_free(sr);
        swy_request_free(rr);
        CHECK_OK_RET(swy_barrier(comm), comm);
    }
    /* A receive from oneself posted before one from any source takes the
     * first send to oneself, the other the second. */
    {
        double a = 1, b = 2, got_self = -1, got_any = -1;
        swy_request_t r[4];
        CHECK_OK_RET(swy_recv(&got_self, 1, SWY_FLOAT64, rank, comm, NULL,
                              &r[0]), comm);
        CHECK_OK_RET(swy_recv(&got_any, 1, SWY_FLOAT64, SWY_ANY_SOURCE, comm,
                              NULL, &r[1]), comm);
        CHECK_OK_RET(swy_send(&a, 1, SWY_FLOAT64, rank, comm, NULL, &r[2]),
                     comm);
        CHECK_OK_RET(swy_send(&b, 1, SWY_FLOAT64, rank, comm, NULL, &r[3]),
                     comm);
        for (int j = 0; j < 4; j++)
            CHECK_OK_RET(swy_wait(r[j]), comm);
        int src = -5;
        CHECK_OK_RET(swy_request_source(r[1], &src), comm);
        CHECK_RET(got_self == 1 && got_any == 2 && src == rank,
                  "self then any: %g, %g from %d", got_self, got_any, src);
        for (int j = 0; j < 4; j++)
            swy_request_free(r[j]);
        CHECK_OK_RET(swy_barrier(comm), comm);
    }
    /* ... and with no second send to oneself, the receive from any
     * source takes the previous rank's message, which came first. */
    if (w >= 2) {
        double mine = 100 + rank, got_self = -1, got_any = -1, seven = 7;
        swy_request_t r[4];
        CHECK_OK_RET(swy_recv(&got_self, 1, SWY_FLOAT64, rank, comm, NULL,
                              &r[0]), comm);
        CHECK_OK_RET(swy_recv(&got_any, 1, SWY_FLOAT64, SWY_ANY_SOURCE, comm,
                              NULL, &r[1]), comm);
        CHECK_OK_RET(swy_send(&mine, 1, SWY_FLOAT64, (rank + 1) % w, comm,
                              NULL, &r[2]), comm);
        CHECK_OK_RET(swy_wait(r[1]), comm);
        int src = -5, prev = (rank - 1 + w) % w;
        CHECK_OK_RET(swy_request_source(r[1], &src), comm);
        CHECK_RET(src == prev && got_any == 100 + prev,
                  "any after self: %g from %d", got_any, src);
        CHECK_OK_RET(swy_send(&seven, 1, SWY_FLOAT64, rank, comm, NULL,
                              &r[3]), comm);
        for (int j = 0; j < 4; j++)
            CHECK_OK_RET(swy_wait(r[j]), comm);
        CHECK_RET(got_self == 7, "self after any: %g", got_self);
        for (int j = 0; j < 4; j++)
            swy_request_free(r[j]);
        CHECK_OK_RET(swy_barrier(comm), comm);
    }
    double x = 0;
    CHECK_RET(swy_send(&x, 1, SWY_FLOAT64, SWY_ANY_SOURCE, comm, NULL,
                       NULL) == SWY_ERR_INVALID_ARG,
              "a send to SWY_ANY_SOURCE accepted");
    CHECK_RET(swy_request_source(NULL, NULL) == SWY_ERR_INVALID_ARG,
              "NULL request");
    return 0;
}

/* The same from any source. */
static int case_any_source_mismatch(swy_comm_t comm, int rank, int w,
                                    void *arg)
{
    return count_mismatch(comm, rank, SWY_ANY_SOURCE);
}

/* Every rank receives from any source and from the next rank after it;
 * nobody sends (run with a short SWY_TIMEOUT_S). */
static int case_any_source_timeout(swy_comm_t comm, int rank, int w,
                                   void *arg)
{
    int32_t a = 0, b = 0;
    swy_request_t r;
    /* The last rank posts 300 ms after the others, so the others time out
     * first and exit at once, without swy_comm_destroy: it must still
     * report the timeout they reported, not their exit. */
    if (rank == w - 1)
        usleep(300 * 1000);
    CHECK_OK_RET(swy_recv(&b, 1, SWY_INT32, SWY_ANY_SOURCE, comm, NULL, &r),
                 comm);
    swy_status_t st = swy_recv(&a, 1, SWY_INT32, (rank + 1) % w, comm, NULL,
                               NULL);
    CHECK_RET(st == SWY_ERR_TIMEOUT, "got %s: %s", swy_status_string(st),
              swy_last_error(comm));
    CHECK_RET(strstr(swy_last_error(comm), "any source") != NULL,
              "message: %s", swy_last_error(comm));
    CHECK_RET(swy_wait(r) == SWY_ERR_TIMEOUT, "the receive from any source");
    swy_request_free(r);
    return 201 - 1; /* exit 0, the comm failed */
}

/* Element e of message k of tag t from rank p to rank q. */
static int32_t tag_val(int p, int q, int t, int k, size_t e)
{
    return p * 1000000 + q * 10000 + t * 1000 + k * 100 + (int32_t)(e % 89);
}

static int case_tag_match(swy_comm_t comm, int rank, int w, void *arg)
{
    char mode[16];
    CHECK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH", "bogus") ==
                  SWY_ERR_INVALID_ARG, "SWY_P2P_MATCH=bogus accepted");
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH", "tag"), comm);
    CHECK_OK_RET(swy_comm_query(comm, "SWY_P2P_MATCH", mode, sizeof(mode)),
                 comm);
    CHECK_RET(strcmp(mode, "tag") == 0, "SWY_P2P_MATCH reads %s", mode);

    /* Two messages of each tag to each rank, tags in ascending order;
     * eager, rendezvous and empty sizes. */
    enum { NT = 4, NK = 2 };
    size_t count[NT];
    for (int t = 0; t < NT; t++) /* tag 2: no elements */
        count[t] = t == 2 ? 0 : (t % 2 ? 70000 : 37) + (size_t)t;
    size_t per_peer = 0;
    for (int t = 0; t < NT; t++)
        per_peer += NK * count[t];
    int nmsg = w * NT * NK;
    int32_t *sbuf = calloc((size_t)w * per_peer, sizeof(int32_t));
    int32_t *rbuf = calloc((size_t)w * per_peer, sizeof(int32_t));
    swy_request_t *sreq = calloc((size_t)nmsg, sizeof(*sreq));
    swy_request_t *rreq = calloc((size_t)nmsg, sizeof(*rreq));
    int (*rwhat)[3] = calloc((size_t)nmsg, sizeof(*rwhat));
    CHECK_RET(sbuf && rbuf && sreq && rreq && rwhat, "calloc");
    /* Receives in reverse tag order, each tag's two in order, from
     * every rank in turn; the sends go after half of them on even ranks
     * and after a quarter on odd ones, so that some headers come to
     * receives already listening and others before any. */
    int nr = 0, ns = 0;
    size_t at = 0;
    int posted_at_send = rank % 2 ? nmsg / 4 : nmsg / 2;
    size_t sat = 0;
    for (int j = 0; j < nmsg; j++) {
        if (j == posted_at_send) {
            for (int k = 0; k < NK; k++)
                for (int t = 0; t < NT; t++)
                    for (int i = 1; i <= w; i++) {
                        int q = (rank + i) % w; /* self last */
                        int32_t *b = sbuf + sat;
                        for (size_t e = 0; e < count[t]; e++)
                            b[e] = tag_val(rank, q, t, k, e);
                        CHECK_OK_RET(swy_send_tagged(b, count[t], SWY_INT32,
                                                     q, t, comm, NULL,
                                                     &sreq[ns++]), comm);
                        sat += count[t];
                    }
        }
        int p = j % w, t = NT - 1 - (j / w) / NK, k = (j / w) % NK;
        rwhat[nr][0] = p;
        rwhat[nr][1] = t;
        rwhat[nr][2] = k;
        CHECK_OK_RET(swy_recv_tagged(rbuf + at, count[t], SWY_INT32, p, t,
                                     comm, NULL, &rreq[nr++]), comm);
        at += count[t];
    }
    at = 0;
    for (int j = 0; j < nr; j++) {
        int p = rwhat[j][0], t = rwhat[j][1], k = rwhat[j][2];
        CHECK_OK_RET(swy_wait(rreq[j]), comm);
        swy_request_free(rreq[j]);
        for (size_t e = 0; e < count[t]; e++)
            CHECK_RET(rbuf[at + e] == tag_val(p, rank, t, k, e),
                      "receive %d (tag %d, #%d from rank %d): element %zu "
                      "is %d, want %d", j, t, k, p, e, rbuf[at + e],
                      tag_val(p, rank, t, k, e));
        at += count[t];
    }
    for (int j = 0; j < ns; j++) {
        CHECK_OK_RET(swy_wait(sreq[j]), comm);
        swy_request_free(sreq[j]);
    }
    free(sbuf);
    free(rbuf);
    free(sreq);
    free(rreq);
    free(rwhat);
    CHECK_OK_RET(swy_barrier(comm), comm);

    /* From any source, by tag: rank r sends rank 0 tag 100 + r; rank 0
     * receives the tags from the highest down. */
    int32_t v = rank, got = -1;
    swy_request_t s;
    CHECK_OK_RET(swy_send_tagged(&v, 1, SWY_INT32, 0, 100 + rank, comm, NULL,
                                 &s), comm);
    if (rank == 0)
        for (int r = w - 1; r >= 0; r--) {
            swy_request_t q;
            int src = -5;
            CHECK_OK_RET(swy_recv_tagged(&got, 1, SWY_INT32, SWY_ANY_SOURCE,
                                         100 + r, comm, NULL, &q), comm);
            CHECK_OK_RET(swy_wait(q), comm);
            CHECK_OK_RET(swy_request_source(q, &src), comm);
            swy_request_free(q);
            CHECK_RET(src == r && got == r, "tag %d from any source: %d "
                      "from rank %d", 100 + r, got, src);
        }
    CHECK_OK_RET(swy_wait(s), comm);
    swy_request_free(s);

    /* A receive waits for nothing but its own send: rank 1's receive
     * from 2 completes while its older one from 0 waits, and only then
     * does rank 1 send what rank 0 answers. */
    if (w >= 3 && rank <= 2) {
        int32_t a = -1, b = -1, x = 7;
        if (rank == 1) {
            swy_request_t ra, rb;
            CHECK_OK_RET(swy_recv_tagged(&a, 1, SWY_INT32, 0, 1, comm, NULL,
                                         &ra), comm);
            CHECK_OK_RET(swy_recv_tagged(&b, 1, SWY_INT32, 2, 2, comm, NULL,
                                         &rb), comm);
            CHECK_OK_RET(swy_wait(rb), comm);
            swy_request_free(rb);
            CHECK_OK_RET(swy_send_tagged(&x, 1, SWY_INT32, 0, 5, comm, NULL,
                                         NULL), comm);
            CHECK_OK_RET(swy_wait(ra), comm);
            swy_request_free(ra);
            CHECK_RET(a == 8 && b == 2, "rank 1 got %d and %d", a, b);
        } else if (rank == 0) {
            CHECK_OK_RET(swy_recv_tagged(&a, 1, SWY_INT32, 1, 5, comm, NULL,
                                         NULL), comm);
            a++;
            CHECK_OK_RET(swy_send_tagged(&a, 1, SWY_INT32, 1, 1, comm, NULL,
                                         NULL), comm);
        } else {
            b = 2;
            CHECK_OK_RET(swy_send_tagged(&b, 1, SWY_INT32, 1, 2, comm, NULL,
                                         NULL), comm);
        }
    }
    /* Rank 1 sends rank 0 tag 9, then tag 8; rank 0 receives tag 8,
     * whose search catches tag 9's header first. With nothing in flight
     * on rank 0, the setting cannot change until tag 9 is received. */
    if (w >= 2 && rank <= 1) {
        int32_t a = 9, b = 8, x = -1;
        if (rank == 1) {
            swy_request_t r9;
            CHECK_OK_RET(swy_send_tagged(&a, 1, SWY_INT32, 0, 9, comm, NULL,
                                         &r9), comm);
            CHECK_OK_RET(swy_send_tagged(&b, 1, SWY_INT32, 0, 8, comm, NULL,
                                         NULL), comm);
            CHECK_OK_RET(swy_wait(r9), comm);
            swy_request_free(r9);
        } else {
            CHECK_OK_RET(swy_recv_tagged(&x, 1, SWY_INT32, 1, 8, comm, NULL,
                                         NULL), comm);
            CHECK_RET(x == 8, "tag 8 got %d", x);
            CHECK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH", "order") ==
                          SWY_ERR_INVALID_ARG &&
                          strstr(swy_last_error(comm), "receive them") !=
                              NULL,
                      "switched with a caught header waiting: %s",
                      swy_last_error(comm));
            CHECK_OK_RET(swy_recv_tagged(&x, 1, SWY_INT32, 1, 9, comm, NULL,
                                         NULL), comm);
            CHECK_RET(x == 9, "tag 9 got %d", x);
        }
    }
    CHECK_OK_RET(swy_barrier(comm), comm);
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH", "order"), comm);
    return 0;
}

/* A seeded draw, the same on every rank for the same arguments. */
static uint32_t draw(uint32_t seed, uint32_t a, uint32_t b, uint32_t c)
{
    uint64_t z = ((uint64_t)seed << 32 | a) * UINT64_C(0x9E3779B97F4A7C15) ^
                 ((uint64_t)b << 16 | c) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 31)) * UINT64_C(0x94D049BB133111EB);
    return (uint32_t)(z ^ (z >> 29));
}

enum { RP_TAGS = 3, RP_MAX_PER_PAIR = 6 };

/* Round seed's plan: how many messages rank p sends rank q, and the tag
 * of the j-th. */
static int rp_messages(uint32_t seed, int p, int q)
{
    return (int)(draw(seed, 2, (uint32_t)p, (uint32_t)q) %
                 (RP_MAX_PER_PAIR + 1));
}

static int rp_tag(uint32_t seed, int p, int q, int j)
{
    return (int)(draw(seed, 3, (uint32_t)(p * 64 + q), (uint32_t)j) %
                 RP_TAGS);
}

/* One call of random_p2p_round: a send (to peer) or a receive (from
 * peer, or from any source) of message j of its pair, of tag t; k its
 * rank among its pair's messages of that tag (receives from any source:
 * set from what came). */
typedef struct {
    int send, peer, j, t, k;
    size_t count;
    int32_t *buf;
    swy_request_t req;
} rp_call_t;

/* Round seed of case_random_p2p: this rank's sends and receives in an
 * order of its own, checked against MPI's matching (tags) or NCCL's
 * (posting order per pair). */
static int random_p2p_round(swy_comm_t comm, int rank, int w, uint32_t seed,
                            int by_tag)
{
    /* One count per tag, so that a receive from any source fits whichever
     * message it takes: empty, eager and rendezvous sizes. */
    static const size_t sizes[4] = {0, 1, 37, 70000};
    size_t count[RP_TAGS];
    for (int t = 0; t < RP_TAGS; t++)
        count[t] = sizes[draw(seed, 1, (uint32_t)t, 0) % 4];
    int n = 0;
    for (int p = 0; p < w; p++)
        n += rp_messages(seed, rank, p) + rp_messages(seed, p, rank);
    rp_call_t *calls = calloc((size_t)n + 1, sizeof(*calls));
    CHECK_RET(calls != NULL, "calloc");
    /* Under tags, the receives of a tag are all from their senders or all
     * from any source (then none takes a message meant for another). */
    int any[RP_TAGS];
    for (int t = 0; t < RP_TAGS; t++)
        any[t] = by_tag && draw(seed, 4, (uint32_t)rank, (uint32_t)t) % 3 == 0;
    int i = 0;
    for (int p = 0; p < w; p++) {
        for (int j = 0; j < rp_messages(seed, rank, p); j++)
            calls[i++] = (rp_call_t){.send = 1, .peer = p, .j = j};
        for (int j = 0; j < rp_messages(seed, p, rank); j++)
            calls[i++] = (rp_call_t){.peer = p, .j = j};
    }
    /* Posted in an order of this rank's own (Fisher-Yates); by posting
     * order a pair's calls keep their order, by tag only the sends do. */
    for (i = n - 1; i > 0; i--) {
        int r = (int)(draw(seed, 5, (uint32_t)rank, (uint32_t)i) %
                      (uint32_t)(i + 1));
        rp_call_t c = calls[i];
        calls[i] = calls[r];
        calls[r] = c;
    }
    int next[2][64] = {{0}}, of_tag[2][65][RP_TAGS] = {{{0}}};
    for (i = 0; i < n; i++) {
        rp_call_t *c = &calls[i];
        if (c->send || !by_tag)
            c->j = next[c->send][c->peer]++;
        int from = c->send ? rank : c->peer, to = c->send ? c->peer : rank;
        c->t = rp_tag(seed, from, to, c->j);
        c->count = count[c->t];
        if (!c->send && any[c->t])
            c->peer = SWY_ANY_SOURCE;
        c->k = of_tag[c->send][c->peer == SWY_ANY_SOURCE ? w : c->peer]
                     [c->t]++;
        c->buf = calloc(c->count + 1, sizeof(int32_t));
        CHECK_RET(c->buf != NULL, "calloc");
        for (size_t e = 0; e < c->count; e++)
            c->buf[e] = c->send ? tag_val(rank, c->peer, c->t, c->k, e) : -1;
        if (c->send)
            CHECK_OK_RET(swy_send_tagged(c->buf, c->count, SWY_INT32,
                                         c->peer, c->t, comm, NULL, &c->req),
                         comm);
        else
            CHECK_OK_RET(swy_recv_tagged(c->buf, c->count, SWY_INT32,
                                         c->peer, c->t, comm, NULL, &c->req),
                         comm);
        if (draw(seed, 6, (uint32_t)rank, (uint32_t)i) % 4 == 0) {
            /* progress now and then, as a framework's loop does */
            int done = 0;
            uint32_t r = draw(seed, 7, (uint32_t)rank, (uint32_t)i) %
                         (uint32_t)(i + 1);
            CHECK_OK_RET(swy_test(calls[r].req, &done), comm);
        }
    }
    /* A receive from a rank got that rank's k-th message of its tag;
     * those from any source took every message of their tag once, each
     * sender's in its order. */
    int last_k[64][RP_TAGS], took[64][RP_TAGS] = {{0}};
    memset(last_k, -1, sizeof(last_k));
    for (i = 0; i < n; i++) {
        rp_call_t *c = &calls[i];
        CHECK_OK_RET(swy_wait(c->req), comm);
        int src = c->peer, k = c->k;
        if (!c->send && src == SWY_ANY_SOURCE) {
            CHECK_OK_RET(swy_request_source(c->req, &src), comm);
            CHECK_RET(src >= 0 && src < w, "seed %u: source %d", seed, src);
            k = c->count ? (c->buf[0] / 100) % 10 : took[src][c->t];
            CHECK_RET(k > last_k[src][c->t], "seed %u: tag %d from any "
                      "source: #%d from rank %d after #%d", seed, c->t, k,
                      src, last_k[src][c->t]);
            last_k[src][c->t] = k;
            took[src][c->t]++;
        }
        for (size_t e = 0; !c->send && e < c->count; e++)
            CHECK_RET(c->buf[e] == tag_val(src, rank, c->t, k, e),
                      "seed %u: receive %d (tag %d, #%d from rank %d%s): "
                      "element %zu is %d, want %d", seed, i, c->t, k, src,
                      c->peer == SWY_ANY_SOURCE ? ", any source" : "", e,
                      c->buf[e], tag_val(src, rank, c->t, k, e));
        swy_request_free(c->req);
        free(c->buf);
    }
    for (int p = 0; p < w; p++)
        for (int t = 0; t < RP_TAGS; t++) {
            int want = 0;
            for (int j = 0; j < rp_messages(seed, p, rank); j++)
                want += rp_tag(seed, p, rank, j) == t;
            CHECK_RET(!any[t] || took[p][t] == want, "seed %u: tag %d from "
                      "any source took %d messages of rank %d, it sent %d",
                      seed, t, took[p][t], p, want);
        }
    free(calls);
    return 0;
}

/* Random traffic: per round, every rank sends every rank (itself too)
 * 0-6 messages of three tags and posts its sends and receives in an
 * order of its own; under SWY_P2P_MATCH=tag (arg non-NULL) the receives
 * in any order too, each tag's from their senders or from any source.
 * TEST_SEEDS rounds (default 8). */
static int case_random_p2p(swy_comm_t comm, int rank, int w, void *arg)
{
    int by_tag = arg != NULL;
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH",
                                    by_tag ? "tag" : "order"), comm);
    const char *env = getenv("TEST_SEEDS");
    int rounds = env != NULL ? atoi(env) : 8;
    for (int s = 1; s <= rounds; s++) {
        if (random_p2p_round(comm, rank, w, (uint32_t)s, by_tag))
            return 1;
        CHECK_OK_RET(swy_barrier(comm), comm);
    }
    CHECK_OK_RET(swy_comm_configure(comm, "SWY_P2P_MATCH", "order"), comm);
    return 0;
}

/* case_random_mix: element i of world rank r's input of op o, and of its
 * block for world rank d (alltoallv). */
static int32_t mix_val(int r, int o, size_t i)
{
    return (int32_t)(((size_t)r * 131 + (size_t)o * 17 + i * 7) % 1000003);
}

static int32_t mix_block_val(int r, int d, int o, size_t i)
{
    return mix_val(r * 64 + d, o, i);
}

enum { MIX_COMMS = 4, MIX_OPS = 14 };
enum { MIX_ALLREDUCE, MIX_ALLGATHER, MIX_BROADCAST, MIX_REDUCE_SCATTER,
       MIX_ALLTOALLV, MIX_SHIFT, MIX_KINDS };

/* Elements op o of seed sends from world rank s to world rank d
 * (alltoallv), at most n. */
static size_t mix_a2a_count(uint32_t seed, int o, int s, int d, size_t n)
{
    return draw(seed, 20 + (uint32_t)o, (uint32_t)s, (uint32_t)d) %
           (uint32_t)(n + 1);
}

typedef struct {
    int c, kind, root;
    size_t n;
    /* communicator c, its size, this rank's place, its world ranks */
    swy_comm_t comm;
    int w, me;
    const int *mem;
    int32_t *in, *out;
    size_t out_len;
    size_t *counts; /* alltoallv: send, sdispl, recv, rdispl [4][size] */
    swy_request_t req, req2; /* shift: the send's, the receive's */
} mix_op_t;

/* Element e of op o's result on world rank `rank`, serially. */
static int32_t mix_want(const mix_op_t *op, int o, int rank, size_t e)
{
    int32_t want = 0;
    switch (op->kind) {
    case MIX_ALLREDUCE:
        for (int p = 0; p < op->w; p++)
            want += mix_val(op->mem[p], o, e);
        return want;
    case MIX_ALLGATHER:
        return mix_val(op->mem[e / op->n], o, e % op->n);
    case MIX_BROADCAST:
        return mix_val(op->mem[op->root], o, e);
    case MIX_REDUCE_SCATTER:
        for (int p = 0; p < op->w; p++)
            want += mix_val(op->mem[p], o, (size_t)op->me * op->n + e);
        return want;
    case MIX_SHIFT: /* the previous rank's input */
        return mix_val(op->mem[(op->me - 1 + op->w) % op->w], o, e);
    default: { /* MIX_ALLTOALLV: block p of the received ones */
        const size_t *rc = op->counts + 2 * op->w, *rd = rc + op->w;
        int p = 0;
        while (e >= rd[p] + rc[p])
            p++;
        return mix_block_val(op->mem[p], rank, o, e - rd[p]);
    }
    }
}

/* One round of case_random_mix. */
static int random_mix_round(swy_comm_t *comms, void **streams,
                            int (*members)[64], const int *sizes, int rank,
                            uint32_t seed)
{
    static const size_t counts[5] = {0, 1, 100, 5000, 70000};
    static const int prios[3] = {SWY_PRIO_LOW, SWY_PRIO_DEFAULT,
                                 SWY_PRIO_HIGH};
    mix_op_t ops[MIX_OPS];
    int order[MIX_OPS], queue[MIX_COMMS][MIX_OPS], queued[MIX_COMMS] = {0};
    memset(ops, 0, sizeof(ops));
    for (int o = 0; o < MIX_OPS; o++) {
        mix_op_t *op = &ops[o];
        op->c = (int)(draw(seed, 10, (uint32_t)o, 0) % MIX_COMMS);
        op->kind = (int)(draw(seed, 10, (uint32_t)o, 1) % MIX_KINDS);
        op->n = counts[draw(seed, 10, (uint32_t)o, 2) % 5];
        op->root = (int)(draw(seed, 10, (uint32_t)o, 3) %
                         (uint32_t)sizes[op->c]);
        op->comm = comms[op->c];
        op->w = sizes[op->c];
        op->me = swy_comm_rank(op->comm);
        op->mem = members[op->c];
        queue[op->c][queued[op->c]++] = o;
    }
    /* This rank's order: each communicator's ops in their order, the
     * communicators interleaved as this rank draws. */
    int taken[MIX_COMMS] = {0};
    for (int i = 0; i < MIX_OPS; i++) {
        int left = MIX_OPS - i,
            pick = (int)(draw(seed, 11, (uint32_t)rank, (uint32_t)i) %
                         (uint32_t)left);
        for (int c = 0; c < MIX_COMMS; c++) {
            int rest = queued[c] - taken[c];
            if (pick < rest) {
                order[i] = queue[c][taken[c]++];
                break;
            }
            pick -= rest;
        }
    }
    for (int i = 0; i < MIX_OPS; i++) {
        int o = order[i];
        mix_op_t *op = &ops[o];
        swy_comm_t comm = op->comm;
        int w = op->w, me = op->me;
        const int *mem = op->mem;
        size_t n = op->n, in_len = n;
        swy_op_attr_t a = SWY_OP_ATTR_INIT;
        a.priority = prios[draw(seed, 12, (uint32_t)o, 0) % 3];
        a.order = (int64_t)(draw(seed, 12, (uint32_t)o, 1) % 4);
        a.stream = streams[op->c];
        switch (op->kind) {
        case MIX_ALLREDUCE: op->out_len = n; break;
        case MIX_ALLGATHER: op->out_len = n * (size_t)w; break;
        case MIX_BROADCAST: op->out_len = n; in_len = 0; break;
        case MIX_REDUCE_SCATTER:
            op->out_len = n;
            in_len = n * (size_t)w;
            break;
        case MIX_SHIFT: op->out_len = n; break;
        default: { /* MIX_ALLTOALLV */
            op->counts = calloc(4 * (size_t)w, sizeof(size_t));
            CHECK_RET(op->counts != NULL, "calloc");
            size_t *sc = op->counts, *sd = sc + w, *rc = sd + w, *rd = rc + w;
            in_len = op->out_len = 0;
            for (int p = 0; p < w; p++) {
                sc[p] = mix_a2a_count(seed, o, rank, mem[p], n);
                rc[p] = mix_a2a_count(seed, o, mem[p], rank, n);
                sd[p] = in_len;
                rd[p] = op->out_len;
                in_len += sc[p];
                op->out_len += rc[p];
            }
        }
        }
        op->in = swy_test_buf_calloc(g_device, in_len + 1, sizeof(int32_t));
        op->out = swy_test_buf_calloc(g_device, op->out_len + 1,
                                      sizeof(int32_t));
        CHECK_RET(op->in != NULL && op->out != NULL, "calloc");
        for (size_t e = 0; e < op->out_len; e++)
            op->out[e] = -1;
        if (op->kind == MIX_ALLTOALLV) {
            size_t *sc = op->counts, *sd = sc + w;
            for (int p = 0; p < w; p++)
                for (size_t e = 0; e < sc[p]; e++)
                    op->in[sd[p] + e] = mix_block_val(rank, mem[p], o, e);
        } else {
            for (size_t e = 0; e < in_len; e++)
                op->in[e] = mix_val(rank, o, e);
        }
        swy_status_t st;
        switch (op->kind) {
        case MIX_ALLREDUCE:
            st = swy_allreduce(op->in, op->out, n, SWY_INT32, SWY_SUM, comm,
                               &a, &op->req);
            break;
        case MIX_ALLGATHER:
            st = swy_allgather(op->in, op->out, n, SWY_INT32, comm, &a,
                               &op->req);
            break;
        case MIX_BROADCAST:
            if (me == op->root)
                for (size_t e = 0; e < n; e++)
                    op->out[e] = mix_val(rank, o, e);
            st = swy_broadcast(op->out, n, SWY_INT32, op->root, comm, &a,
                               &op->req);
            break;
        case MIX_REDUCE_SCATTER:
            st = swy_reduce_scatter(op->in, op->out, n, SWY_INT32, SWY_SUM,
                                    comm, &a, &op->req);
            break;
        case MIX_SHIFT: /* a ring shift, in a group as NCCL's must be */
            CHECK_OK_RET(swy_group_start(), comm);
            st = swy_send(op->in, n, SWY_INT32, (me + 1) % w, comm, &a,
                          &op->req);
            if (st == SWY_OK)
                st = swy_recv(op->out, n, SWY_INT32, (me - 1 + w) % w, comm,
                              &a, &op->req2);
            CHECK_OK_RET(swy_group_end(), comm);
            break;
        default: {
            size_t *sc = op->counts, *sd = sc + w, *rc = sd + w, *rd = rc + w;
            st = swy_alltoallv(op->in, sc, sd, op->out, rc, rd, SWY_INT32,
                               comm, &a, &op->req);
        }
        }
        CHECK_OK_RET(st, comm);
    }
    /* Each against its serial reference, waited in post order. */
    static const char *names[MIX_KINDS] = {"allreduce", "allgather",
                                           "broadcast", "reduce_scatter",
                                           "alltoallv", "shift"};
    for (int i = 0; i < MIX_OPS; i++) {
        int o = order[i];
        mix_op_t *op = &ops[o];
        CHECK_OK_RET(swy_wait(op->req), op->comm);
        swy_request_free(op->req);
        if (op->kind == MIX_SHIFT) {
            CHECK_OK_RET(swy_wait(op->req2), op->comm);
            swy_request_free(op->req2);
        }
        for (size_t e = 0; e < op->out_len; e++) {
            int32_t want = mix_want(op, o, rank, e);
            CHECK_RET(op->out[e] == want, "seed %u op %d (%s of %zu on "
                      "communicator %d): element %zu is %d, want %d", seed, o,
                      names[op->kind], op->n, op->c, e, op->out[e], want);
        }
        swy_test_buf_free(g_device, op->in);
        swy_test_buf_free(g_device, op->out);
        free(op->counts);
    }
    return 0;
}

/* Random collectives on four communicators of the same ranks (the world,
 * its halves, its reverse, its odd and even ranks): per round 14 ops of
 * random kinds (allreduce, allgather, broadcast, reduce_scatter,
 * alltoallv of random counts, a ring shift of sends and receives in a
 * group), sizes (0-70,000 elements), priorities and orders, all in
 * flight together; each rank posts the communicators in an order of its
 * own. Every result against its serial reference.
 * TEST_SEEDS rounds (default 8). */
static int case_random_mix(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], members[MIX_COMMS][64], sizes[MIX_COMMS];
    swy_comm_t comms[MIX_COMMS] = {comm};
    sizes[0] = w;
    for (int p = 0; p < w; p++)
        members[0][p] = p;
    for (int c = 1; c < MIX_COMMS; c++) {
        for (int p = 0; p < w; p++) {
            color[p] = c == 1 ? p < w / 2 : c == 2 ? 0 : p % 2;
            key[p] = c == 2 ? -p : 0;
        }
        if (split_checked(comm, color, key, &comms[c], members[c],
                          &sizes[c]))
            return 1;
        /* split_checked gives the members as world ranks */
    }
    /* On device memory (TEST_COLL_MEM=device) each communicator's ops go
     * on a stream of its own, as a framework's expert-parallel and
     * data-parallel streams: on one stream they would run one after
     * another, and ranks that post the communicators in different orders
     * would wait for each other, as with NCCL. */
    void *streams[MIX_COMMS] = {NULL};
    for (int c = 0; g_device && c < MIX_COMMS; c++)
        streams[c] = swy_test_dev_stream_create();
    const char *env = getenv("TEST_SEEDS");
    int rounds = env != NULL ? atoi(env) : 8;
    for (int s = 1; s <= rounds; s++) {
        if (random_mix_round(comms, streams, members, sizes, rank,
                             (uint32_t)s))
            return 1;
        CHECK_OK_RET(swy_barrier(comm), comm);
    }
    for (int c = 0; g_device && c < MIX_COMMS; c++)
        swy_test_dev_stream_destroy(streams[c]);
    for (int c = 1; c < MIX_COMMS; c++)
        CHECK_OK_RET(swy_comm_destroy(comms[c]), comm);
    return 0;
}


static int case_mismatch(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], m[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = p % 2;
        key[p] = 0;
    }
    swy_comm_t half;
    if (split_checked(comm, color, key, &half, m, &n))
        return 1;
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = 1;
    if (rank % 2 == 0) {
        /* The even half disagrees on the count. */
        size_t count = rank == 0 ? 8 : 16;
        swy_status_t st = swy_allreduce(v, v, count, SWY_FLOAT32, SWY_SUM,
                                        half, NULL, NULL);
        CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d got %s", rank,
                  swy_status_string(st));
        /* Failed for good, and says why. */
        st = swy_barrier(half);
        CHECK_RET(st == SWY_ERR_MISMATCH, "later op on the failed comm: %s",
                  swy_status_string(st));
    } else {
        if (exercise(half, m, 1000))
            return 1;
    }
    int world[64];
    for (int p = 0; p < w; p++)
        world[p] = p;
    if (exercise(comm, world, 2000))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(half), comm);
    return 0;
}

static int case_kill(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64], key[64], m[64], n;
    for (int p = 0; p < w; p++) {
        color[p] = p < 2 ? 0 : 1; /* the victim (w - 1) is in half 1 */
        key[p] = 0;
    }
    swy_comm_t half;
    if (split_checked(comm, color, key, &half, m, &n))
        return 1;
    CHECK_OK_RET(swy_barrier(comm), comm);
    if (rank == w - 1) {
        /* The others may still be finishing the barrier: die once they
         * are past it (inside the next op). */
        usleep(200000);
        raise(SIGKILL);
    }
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)rank;
    swy_status_t st = swy_allreduce(v, v, 1000, SWY_FLOAT32, SWY_SUM, comm,
                                    NULL, NULL);
    CHECK_RET(st == SWY_ERR_REMOTE, "world: %s", swy_status_string(st));
    if (rank >= 2) {
        st = swy_allreduce(v, v, 1000, SWY_FLOAT32, SWY_SUM, half, NULL, NULL);
        CHECK_RET(st == SWY_ERR_REMOTE, "half with the victim: %s: %s",
                  swy_status_string(st), swy_last_error(half));
    } else {
        /* The half without the victim keeps working. */
        if (exercise(half, m, 3000))
            return 1;
        CHECK_OK_RET(swy_comm_destroy(half), half);
    }
    return 200;
}

/* A communicator from a unique id of its own (rank 0 makes it and
 * broadcasts it over comm), ranks reversed: its processes are all on
 * comm's engine, so it joins that engine. */
static int join_reversed(swy_comm_t comm, int rank, int w, swy_comm_t *c2,
                         int *members)
{
    swy_unique_id_t id;
    memset(&id, 0, sizeof(id));
    if (rank == 0)
        CHECK_OK_RET(swy_get_unique_id(&id), comm);
    CHECK_OK_RET(swy_broadcast(&id, sizeof(id), SWY_UINT8, 0, comm, NULL, NULL),
                 comm);
    CHECK_OK_RET(swy_comm_init_rank(c2, w, &id, w - 1 - rank), *c2);
    for (int r = 0; r < w; r++)
        members[r] = w - 1 - r;
    return 0;
}

static int case_join(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_comm_t c2;
    int members[64], world[64];
    for (int p = 0; p < w; p++)
        world[p] = p;
    if (join_reversed(comm, rank, w, &c2, members))
        return 1;
    CHECK_RET(swy_comm_rank(c2) == w - 1 - rank, "rank %d", swy_comm_rank(c2));
    /* One engine: its counters count the ops of both communicators. */
    swy_comm_stats_t a = {.struct_size = sizeof(a)}, b = a;
    CHECK_OK_RET(swy_comm_stats(comm, &a), comm);
    CHECK_OK_RET(swy_barrier(c2), c2);
    CHECK_OK_RET(swy_comm_stats(comm, &b), comm);
    CHECK_RET(b.ops_posted == a.ops_posted + 1, "the world's engine saw %llu "
              "ops for a barrier on the joined communicator, not 1",
              (unsigned long long)(b.ops_posted - a.ops_posted));
    if (exercise(c2, members, 3000) || exercise(comm, world, 100))
        return 1;
    /* Ops of both in flight together, each rank in its own order. */
    size_t n = 4096;
    float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
    CHECK_RET(x && y && z, "malloc");
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rank + 1);
    swy_request_t r1, r2;
    if (rank % 2) {
        CHECK_OK_RET(
            swy_allreduce(x, y, n, SWY_FLOAT32, SWY_SUM, c2, NULL, &r1), c2);
        CHECK_OK_RET(swy_allreduce(x, z, n, SWY_FLOAT32, SWY_MAX, comm, NULL,
                                   &r2), comm);
    } else {
        CHECK_OK_RET(swy_allreduce(x, z, n, SWY_FLOAT32, SWY_MAX, comm, NULL,
                                   &r2), comm);
        CHECK_OK_RET(
            swy_allreduce(x, y, n, SWY_FLOAT32, SWY_SUM, c2, NULL, &r1), c2);
    }
    CHECK_OK_RET(swy_wait(r1), c2);
    CHECK_OK_RET(swy_wait(r2), comm);
    swy_request_free(r1);
    swy_request_free(r2);
    CHECK_RET(y[n - 1] == (float)(w * (w + 1) / 2) && z[0] == (float)w,
              "sum %g max %g", y[n - 1], z[0]);
    free(x);
    free(y);
    free(z);
    CHECK_OK_RET(swy_comm_destroy(c2), comm);
    return 0;
}

/* The engine's first communicator destroyed, the joined one goes on. */
static int case_join_first(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_comm_t c2;
    int members[64];
    if (join_reversed(comm, rank, w, &c2, members))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(comm), comm);
    if (exercise(c2, members, 2000))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(c2), c2);
    return 200;
}

/* A mismatch on the joined communicator fails it on every rank; the
 * engine's first one goes on working. */
static int case_join_mismatch(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_comm_t c2;
    int members[64], world[64];
    for (int p = 0; p < w; p++)
        world[p] = p;
    if (join_reversed(comm, rank, w, &c2, members))
        return 1;
    float v[64] = {0};
    swy_status_t st = swy_allreduce(v, v, rank == 1 ? 16 : 8, SWY_FLOAT32,
                                    SWY_SUM, c2, NULL, NULL);
    CHECK_RET(st == SWY_ERR_MISMATCH, "rank %d: %s", rank,
              swy_status_string(st));
    if (exercise(comm, world, 500))
        return 1;
    CHECK_OK_RET(swy_comm_destroy(c2), comm); /* failed: released at once */
    return 0;
}

/* A process that dies fails the joined communicator too. */
static int case_join_kill(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_comm_t c2;
    int members[64];
    if (join_reversed(comm, rank, w, &c2, members))
        return 1;
    CHECK_OK_RET(swy_barrier(c2), c2);
    if (rank == w - 1) {
        /* The others may still be finishing the barrier: die once they
         * are past it (inside the next op). */
        usleep(200000);
        raise(SIGKILL);
    }
    float v[1000] = {0};
    swy_status_t st = swy_allreduce(v, v, 1000, SWY_FLOAT32, SWY_SUM, c2,
                                    NULL, NULL);
    CHECK_RET(st == SWY_ERR_REMOTE, "joined: %s: %s", swy_status_string(st),
              swy_last_error(c2));
    return 200;
}

/* A failed communicator's last messages (headers of ops one rank posted
 * before it heard of the failure) must not reach the next communicator:
 * its id is not handed out again soon. */
static int case_reuse(swy_comm_t comm, int rank, int w, void *arg)
{
    int color[64] = {0}, key[64] = {0}, m[64], n;
    for (int round = 0; round < 3; round++) {
        swy_comm_t g;
        if (split_checked(comm, color, key, &g, m, &n))
            return 1;
        float v[64] = {0};
        swy_request_t req[3];
        if (rank == 1) {
            /* Three ops, headers sent, before rank 0 posts its one (which
             * disagrees with the first): the headers of the other two
             * reach rank 0 with nothing to meet them. */
            for (int i = 0; i < 3; i++)
                CHECK_OK_RET(swy_allreduce(v, v, 5, SWY_FLOAT32, SWY_SUM, g,
                                           NULL, &req[i]), g);
            for (int i = 0; i < 3; i++) {
                swy_status_t st = swy_wait(req[i]);
                CHECK_RET(st == SWY_ERR_MISMATCH, "op %d: %s", i,
                          swy_status_string(st));
                swy_request_free(req[i]);
            }
        } else {
            usleep(50000);
            swy_status_t st = swy_allreduce(v, v, 8, SWY_FLOAT32, SWY_SUM,
                                            g, NULL, NULL);
            CHECK_RET(st == SWY_ERR_MISMATCH, "%s", swy_status_string(st));
        }
        CHECK_OK_RET(swy_comm_destroy(g), comm);
        /* The next group runs three ops of other counts. */
        swy_comm_t h;
        if (split_checked(comm, color, key, &h, m, &n))
            return 1;
        for (int i = 0; i < 3; i++)
            CHECK_OK_RET(swy_allreduce(v, v, 7 + (size_t)i, SWY_FLOAT32,
                                       SWY_SUM, h, NULL, NULL),
                         h);
        CHECK_OK_RET(swy_comm_destroy(h), comm);
    }
    return 0;
}

/* swy_comm_peer_info on the world and on a reversed split: the split's
 * rank r is the world's rank w - 1 - r, and so is what is said of it. */
static int case_info(swy_comm_t comm, int rank, int w, void *arg)
{
    swy_peer_info_t a = {.struct_size = sizeof(a)};
    CHECK_OK_RET(swy_comm_peer_info(comm, rank, &a), comm);
    CHECK_RET(strcmp(a.link_class, "self") == 0 &&
                  strcmp(a.transport, "self") == 0,
              "self: %s over %s", a.link_class, a.transport);
    CHECK_RET(a.bandwidth > 0 && a.latency > 0 && a.hostname[0] != '\0',
              "model %g B/s %g s, host '%s'", a.bandwidth, a.latency,
              a.hostname);
    int color[64] = {0}, key[64], m[64], n;
    for (int p = 0; p < w; p++)
        key[p] = -p;
    swy_comm_t rev;
    if (split_checked(comm, color, key, &rev, m, &n))
        return 1;
    for (int r = 0; r < n; r++) {
        swy_peer_info_t s1 = {.struct_size = sizeof(s1)}, w1 = s1;
        CHECK_OK_RET(swy_comm_peer_info(rev, r, &s1), rev);
        CHECK_OK_RET(swy_comm_peer_info(comm, m[r], &w1), comm);
        CHECK_RET(
            strcmp(s1.link_class, w1.link_class) == 0 &&
                strcmp(s1.transport, w1.transport) == 0 &&
                strcmp(s1.hostname, w1.hostname) == 0 &&
                s1.bandwidth == w1.bandwidth,
            "split rank %d (world %d): %s over %s, the world says %s over "
            "%s",
            r, m[r], s1.link_class, s1.transport, w1.link_class, w1.transport);
        CHECK_RET(strcmp(s1.link_class, m[r] == rank ? "self" : "same_numa") ==
                      0,
                  "split rank %d: %s", r, s1.link_class);
    }
    /* Bad input: a clear error. */
    swy_peer_info_t bad = {.struct_size = 8};
    CHECK_RET(swy_comm_peer_info(comm, 0, &bad) == SWY_ERR_INVALID_ARG,
              "struct_size 8 accepted");
    bad.struct_size = sizeof(bad);
    CHECK_RET(swy_comm_peer_info(comm, w, &bad) == SWY_ERR_INVALID_ARG &&
                  strstr(swy_last_error(comm), "out of range") != NULL,
              "peer %d accepted: %s", w, swy_last_error(comm));
    CHECK_RET(swy_comm_peer_info(NULL, 0, &bad) == SWY_ERR_INVALID_ARG, "NULL");
    char text[64];
    CHECK_RET(swy_describe("nonsense", text, sizeof(text)) ==
                  SWY_ERR_INVALID_ARG,
              "describe nonsense");
    CHECK_OK_RET(swy_describe("transports", text, sizeof(text)), comm);
    CHECK_RET(strlen(text) == sizeof(text) - 1, "cut at len - 1: %zu",
              strlen(text));
    CHECK_OK_RET(swy_comm_destroy(rev), comm);
    return 0;
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int case_threads(swy_comm_t comm, int rank, int w, void *arg)
{
    int before = count_threads();
    swy_comm_t subs[16];
    int color[64], key[64], m[64], n;
    for (int i = 0; i < 16; i++) {
        for (int p = 0; p < w; p++) {
            color[p] = (p + i) % 2;
            key[p] = (p * 7 + i) % w;
        }
        if (split_checked(comm, color, key, &subs[i], m, &n))
            return 1;
        if (i % 5 == 0 && exercise(subs[i], m, 100))
            return 1;
    }
    int after = count_threads();
    fprintf(stderr, "rank %d: %d threads with 1 communicator, %d with 17\n",
            rank, before, after);
    CHECK_RET(after == before, "threads grew from %d to %d", before, after);
    for (int i = 0; i < 16; i++)
        CHECK_OK_RET(swy_comm_destroy(subs[i]), comm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_split NRANKS CASE\n");
        return 2;
    }
    int w = atoi(argv[1]);
    const char *which = argv[2];
    swy_test_rank_fn fn = NULL;
    void *arg = NULL;
    if (!strcmp(which, "basic")) fn = case_basic;
    else if (!strcmp(which, "nocolor")) fn = case_nocolor;
    else if (!strcmp(which, "nested")) fn = case_nested;
    else if (!strcmp(which, "parent")) fn = case_parent;
    else if (!strcmp(which, "inflight")) fn = case_inflight;
    else if (!strcmp(which, "p2p")) fn = case_p2p;
    else if (!strcmp(which, "group")) fn = case_group;
    else if (!strcmp(which, "device_lane")) fn = case_device_lane;
    else if (!strcmp(which, "p2p_mismatch")) fn = case_p2p_mismatch;
    else if (!strcmp(which, "p2p_mismatch_late"))
        fn = case_p2p_mismatch_late;
    else if (!strcmp(which, "p2p_tag_mismatch")) fn = case_p2p_tag_mismatch;
    else if (!strcmp(which, "any_source")) fn = case_any_source;
    else if (!strcmp(which, "any_source_mismatch"))
        fn = case_any_source_mismatch;
    else if (!strcmp(which, "any_source_timeout"))
        fn = case_any_source_timeout;
    else if (!strcmp(which, "tag_match")) fn = case_tag_match;
    else if (!strcmp(which, "random_p2p")) fn = case_random_p2p;
    else if (!strcmp(which, "random_mix")) fn = case_random_mix;
    else if (!strcmp(which, "random_tag")) {
        fn = case_random_p2p;
        arg = "tag";
    }
    else if (!strcmp(which, "mismatch")) fn = case_mismatch;
    else if (!strcmp(which, "kill")) fn = case_kill;
    else if (!strcmp(which, "threads")) fn = case_threads;
    else if (!strcmp(which, "join")) fn = case_join;
    else if (!strcmp(which, "reuse")) fn = case_reuse;
    else if (!strcmp(which, "info")) fn = case_info;
    else if (!strcmp(which, "join_first")) fn = case_join_first;
    else if (!strcmp(which, "join_mismatch")) fn = case_join_mismatch;
    else if (!strcmp(which, "join_kill")) fn = case_join_kill;
    if (fn == NULL || w < 1 || w > 64) {
        fprintf(stderr, "test_split: bad arguments\n");
        return 2;
    }
    const char *mem = getenv("TEST_COLL_MEM");
    g_device = mem != NULL && strcmp(mem, "device") == 0;
    if (g_device && !swy_test_devdouble()) {
        fprintf(stderr, "test_split: TEST_COLL_MEM=device, but the GPU test "
                "double is not loaded (SWYTEST_DEVDOUBLE)\n");
        return 1;
    }
    if (fn == case_p2p_mismatch_late)
        setenv("SWY_PROGRESS", "caller", 1);
    swy_test_result_t result;
    int rc = swy_test_spawn(w, fn, arg, 120, &result);
    if (!strcmp(which, "kill") || !strcmp(which, "join_kill")) {
        rc = 0;
        for (int r = 0; r < w; r++)
            if (result.code[r] != (r == w - 1 ? -SIGKILL : 0))
                rc = 1;
    }
    printf("%s: split %s on %d ranks\n", rc ? "FAIL" : "PASS", which, w);
    return rc;
}
