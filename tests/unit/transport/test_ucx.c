/* The ucx plugin, loaded as a plugin, with two contexts in one process as
 * ranks 0 and 1: address exchange by hand, messages of 0 B .. 64 MiB both
 * ways with random data, truncation, cancel, the sleep path, and the
 * send hints' effect on the eager path to a local rank.
 * argv[1]: path of swy-transport-ucx.so. */
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "transport/transport.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"

#include "transport_test.h"


static const swy_transport_v1_t *ops;
static void *ctx[2];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Progress both ranks until every completion in list has been called. */
static int wait_all(completion_t **list, int n, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    for (;;) {
        int done = 1;
        for (int i = 0; i < n; i++)
            if (list[i]->calls == 0)
                done = 0;
        if (done)
            return 0;
        if (now_s() > deadline) {
            fprintf(stderr, "timeout waiting for completions\n");
            return -1;
        }
        ops->progress(ctx[0]);
        ops->progress(ctx[1]);
    }
}

static void fill_random(unsigned char *buf, size_t len)
{
    /* Random seed, cheap generator: 64 MiB must not take seconds. */
    uint64_t state;
    if (getrandom(&state, sizeof(state), 0) != sizeof(state))
        state = (uint64_t)time(NULL);
    state |= 1;
    for (size_t i = 0; i < len; i += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        memcpy(buf + i, &state, SWY_MIN(8, len - i));
    }
}

static void test_message(int from, int to, size_t len, int recv_first,
                         uint64_t tag)
{
    unsigned char *src = malloc(len + 1), *dst = malloc(len + 1);
    if (src == NULL || dst == NULL) {
        CHECK(!"out of memory");
        return;
    }
    fill_random(src, len);
    memset(dst, 0, len + 1);
    completion_t sc = {0}, rc = {0};
    void *sh, *rh;
    if (recv_first)
        CHECK(ops->irecv(ctx[to], from, tag, dst, len, SWY_MEM_HOST,
                         on_complete, &rc, &rh) == SWY_OK);
    CHECK(ops->isend(ctx[from], to, tag, len ? src : NULL, len, SWY_MEM_HOST,
                     on_complete, &sc, &sh) == SWY_OK);
    CHECK(sc.calls == 0); /* never from isend, even if UCX finished */
    if (!recv_first) {
        /* Let the message arrive unexpected before the receive. */
        for (int i = 0; i < 100; i++) {
            ops->progress(ctx[from]);
            ops->progress(ctx[to]);
        }
        CHECK(ops->irecv(ctx[to], from, tag, len ? dst : NULL, len,
                         SWY_MEM_HOST, on_complete, &rc, &rh) == SWY_OK);
        CHECK(rc.calls == 0); /* never from irecv */
    }
    completion_t *all[] = {&sc, &rc};
    CHECK(wait_all(all, 2, 20.0) == 0);
    CHECK(sc.calls == 1 && sc.status == SWY_OK);
    CHECK(rc.calls == 1 && rc.status == SWY_OK && rc.bytes == len);
    if (rc.status != SWY_OK || rc.bytes != len)
        fprintf(stderr, "  receive: %d calls, %s, %zu bytes of %zu\n",
                rc.calls, swy_status_string(rc.status), rc.bytes, len);
    CHECK(len == 0 || memcmp(src, dst, len) == 0);
    CHECK(dst[len] == 0);
    printf("  %d -> %d %9zu B %s: ok\n", from, to, len,
           recv_first ? "expected  " : "unexpected");
    free(src);
    free(dst);
}

static void test_truncation(size_t send_len, size_t recv_len, int recv_first)
{
    unsigned char *src = malloc(send_len), *dst = malloc(recv_len + 64);
    fill_random(src, send_len);
    memset(dst, 0xEE, recv_len + 64);
    completion_t sc = {0}, rc = {0};
    if (recv_first)
        CHECK(ops->irecv(ctx[1], 0, 500, dst, recv_len, SWY_MEM_HOST,
                         on_complete, &rc, NULL) == SWY_OK);
    CHECK(ops->isend(ctx[0], 1, 500, src, send_len, SWY_MEM_HOST,
                     on_complete, &sc, NULL) == SWY_OK);
    if (!recv_first) {
        for (int i = 0; i < 100; i++) {
            ops->progress(ctx[0]);
            ops->progress(ctx[1]);
        }
        CHECK(ops->irecv(ctx[1], 0, 500, dst, recv_len, SWY_MEM_HOST,
                         on_complete, &rc, NULL) == SWY_OK);
    }
    completion_t *all[] = {&sc, &rc};
    CHECK(wait_all(all, 2, 20.0) == 0);
    CHECK(rc.calls == 1 && rc.status == SWY_ERR_MISMATCH);
    CHECK(rc.bytes <= recv_len);
    CHECK(sc.calls == 1);
    for (size_t i = recv_len; i < recv_len + 64; i++)
        CHECK(dst[i] == 0xEE); /* never past len */
    printf("  truncation %zu into %zu (%s): recv %s, send %s\n", send_len,
           recv_len, recv_first ? "expected" : "unexpected",
           swy_status_string(rc.status), swy_status_string(sc.status));
    free(src);
    free(dst);
}

static void test_cancel(void)
{
    char buf[64];
    completion_t rc = {0};
    void *rh = NULL;
    CHECK(ops->irecv(ctx[0], 1, 999, buf, sizeof(buf), SWY_MEM_HOST,
                     on_complete, &rc, &rh) == SWY_OK);
    ops->progress(ctx[0]);
    CHECK(rc.calls == 0);
    ops->cancel(ctx[0], rh);
    completion_t *all[] = {&rc};
    CHECK(wait_all(all, 1, 5.0) == 0);
    CHECK(rc.calls == 1 && rc.status == SWY_ERR_ABORTED);

    /* The cancelled receive must not swallow a later message. */
    char msg[8] = "later", got[8] = "";
    completion_t sc = {0}, rc2 = {0};
    CHECK(ops->isend(ctx[1], 0, 999, msg, sizeof(msg), SWY_MEM_HOST,
                     on_complete, &sc, NULL) == SWY_OK);
    CHECK(ops->irecv(ctx[0], 1, 999, got, sizeof(got), SWY_MEM_HOST,
                     on_complete, &rc2, NULL) == SWY_OK);
    completion_t *all2[] = {&sc, &rc2};
    CHECK(wait_all(all2, 2, 5.0) == 0);
    CHECK(rc2.status == SWY_OK && strcmp(got, "later") == 0);
}

/* A receive of a message that had arrived completes inside irecv, and
 * its completion waits for the next progress. A cancel in between (the
 * host cancels what it has not heard of as done, as a probe of a
 * receive from any source) must not reach the receive posted after it:
 * UCX reuses the first one's freed request for it. */
static void test_cancel_completed(void)
{
    char first[8] = "first", second[8] = "second";
    char got1[8] = "", got2[8] = "";
    completion_t s1 = {0}, s2 = {0}, r1 = {0}, r2 = {0};
    void *h1 = NULL;
    CHECK(ops->isend(ctx[1], 0, 1001, first, sizeof(first), SWY_MEM_HOST,
                     on_complete, &s1, NULL) == SWY_OK);
    for (int i = 0; i < 100; i++) { /* arrives unexpected */
        ops->progress(ctx[1]);
        ops->progress(ctx[0]);
    }
    CHECK(ops->irecv(ctx[0], 1, 1001, got1, sizeof(got1), SWY_MEM_HOST,
                     on_complete, &r1, &h1) == SWY_OK);
    CHECK(ops->irecv(ctx[0], 1, 1002, got2, sizeof(got2), SWY_MEM_HOST,
                     on_complete, &r2, NULL) == SWY_OK);
    CHECK(r1.calls == 0);
    ops->cancel(ctx[0], h1);
    CHECK(ops->isend(ctx[1], 0, 1002, second, sizeof(second), SWY_MEM_HOST,
                     on_complete, &s2, NULL) == SWY_OK);
    completion_t *all[] = {&s1, &s2, &r1, &r2};
    CHECK(wait_all(all, 4, 5.0) == 0);
    CHECK(r1.status == SWY_OK && strcmp(got1, "first") == 0);
    CHECK(r2.status == SWY_OK && strcmp(got2, "second") == 0);
    printf("  cancel of a receive done inside irecv: second receive %s\n",
           swy_status_string(r2.status));
}

/* Tags are matched per source: rank 1's tag 5 is not rank 0's tag 5. */
static void test_source_matching(void)
{
    int from0 = 100, from1 = 101, got0 = 0, got1 = 0;
    completion_t c[4] = {{0}};
    CHECK(ops->irecv(ctx[0], 1, 5, &got1, sizeof(int), SWY_MEM_HOST,
                     on_complete, &c[0], NULL) == SWY_OK);
    CHECK(ops->irecv(ctx[0], 0, 5, &got0, sizeof(int), SWY_MEM_HOST,
                     on_complete, &c[1], NULL) == SWY_OK);
    CHECK(ops->isend(ctx[0], 0, 5, &from0, sizeof(int), SWY_MEM_HOST,
                     on_complete, &c[2], NULL) == SWY_OK);
    CHECK(ops->isend(ctx[1], 0, 5, &from1, sizeof(int), SWY_MEM_HOST,
                     on_complete, &c[3], NULL) == SWY_OK);
    completion_t *all[] = {&c[0], &c[1], &c[2], &c[3]};
    CHECK(wait_all(all, 4, 5.0) == 0);
    CHECK(got0 == 100 && got1 == 101);
}

/* Both ranks are on this host. A send of 128 KiB, below
 * SWY_UCX_LOCAL_EAGER, goes eagerly into UCX's shared-memory queue and
 * completes before anyone receives it; one with
 * SWY_SEND_HINT_PREEMPTIBLE must not: its bytes wait at the sender
 * (rendezvous) until the receive is posted, so that what the scheduler
 * counts in flight is all a later send waits behind. A send whose
 * completion only tells that UCX copied it would let the policy's credit
 * stand for nothing. Progress for a while first: a send that could
 * complete early would have. */
static void test_preemptible_hint(const swy_send_hints_v1_t *hints)
{
    enum { LEN = 128 << 10 };
    /* The plugin's eager path takes it unless the user moved the bound
     * (its rule: below SWY_UCX_LOCAL_EAGER; UCX's own variable wins). */
    int eager_path = getenv("UCX_RNDV_SEND_NBR_THRESH") == NULL &&
                     swy_config_size("SWY_UCX_LOCAL_EAGER") > LEN;
    for (int hinted = 0; hinted <= 1; hinted++) {
        unsigned char *src = malloc(LEN), *dst = malloc(LEN);
        CHECK(src != NULL && dst != NULL);
        if (src == NULL || dst == NULL) {
            free(src);
            free(dst);
            return;
        }
        fill_random(src, LEN);
        memset(dst, 0, LEN);
        completion_t sc = {0}, rc = {0};
        uint64_t tag = 7000 + (uint64_t)hinted;
        CHECK(hints->isend_hinted(ctx[1], 0, tag, src, LEN, SWY_MEM_HOST,
                                  hinted ? SWY_SEND_HINT_PREEMPTIBLE : 0,
                                  on_complete, &sc, NULL) == SWY_OK);
        double until = now_s() + 0.2;
        while (now_s() < until) {
            ops->progress(ctx[0]);
            ops->progress(ctx[1]);
        }
        printf("  128 KiB to a local rank%s: %s before the receive\n",
               hinted ? ", preemptible" : "",
               sc.calls ? "complete" : "not complete");
        if (hinted)
            CHECK(sc.calls == 0);
        else if (eager_path)
            CHECK(sc.calls == 1 && sc.status == SWY_OK);
        CHECK(ops->irecv(ctx[0], 1, tag, dst, LEN, SWY_MEM_HOST, on_complete,
                         &rc, NULL) == SWY_OK);
        completion_t *all[] = {&sc, &rc};
        CHECK(wait_all(all, 2, 5.0) == 0);
        CHECK(sc.status == SWY_OK && rc.status == SWY_OK && rc.bytes == LEN);
        CHECK(memcmp(src, dst, LEN) == 0);
        free(src);
        free(dst);
    }
}

/* Arm rank 0, send from rank 1: rank 0's fd must wake up. */
static void test_wakeup(void)
{
    int fd = ops->event_fd(ctx[0]);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    swy_status_t armed = SWY_INPROGRESS;
    for (int i = 0; i < 1000 && armed == SWY_INPROGRESS; i++) {
        ops->progress(ctx[0]);
        armed = ops->arm(ctx[0]);
    }
    CHECK(armed == SWY_OK);
    int v = 7, got = 0;
    completion_t sc = {0}, rc = {0};
    CHECK(ops->isend(ctx[1], 0, 1234, &v, sizeof(v), SWY_MEM_HOST,
                     on_complete, &sc, NULL) == SWY_OK);
    for (int i = 0; i < 10; i++)
        ops->progress(ctx[1]);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    double t0 = now_s();
    int n = poll(&pfd, 1, 5000);
    CHECK(n == 1);
    printf("  wakeup after %.3f ms\n", (now_s() - t0) * 1e3);
    CHECK(ops->irecv(ctx[0], 1, 1234, &got, sizeof(got), SWY_MEM_HOST,
                     on_complete, &rc, NULL) == SWY_OK);
    completion_t *all[] = {&sc, &rc};
    CHECK(wait_all(all, 2, 5.0) == 0);
    CHECK(got == 7);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s path/to/swy-transport-ucx.so\n", argv[0]);
        return 2;
    }
    void *dl = NULL;
    char why[1024];
    static swy_transport_v1_t table;
    if (swy_transport_plugin_open(argv[1], &table, &ops, &dl, why,
                                  sizeof(why)) != SWY_OK) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tls = swy_config_getenv_foreign("UCX_TLS");
    printf("UCX_TLS=%s\n", tls != NULL ? tls : "(default)");

    swy_transport_host_v1_t host[2];
    void *addr[2];
    size_t lens[2];
    for (int r = 0; r < 2; r++) {
        host[r] = (swy_transport_host_v1_t){
            .abi_version = SWY_TRANSPORT_ABI_V1,
            .struct_size = sizeof(host[r]),
            .log = swy_log,
            .config_get = swy_config_get,
            .alloc = swy_malloc,
            .free = swy_free,
            .rank = r,
            .nranks = 2,
            .size_parse = swy_config_parse_size,
        };
        if (ops->init(&host[r], &ctx[r]) != SWY_OK) {
            fprintf(stderr, "init of rank %d failed\n", r);
            return 1;
        }
        swy_transport_caps_v1_t caps = {.struct_size = sizeof(caps)};
        CHECK(ops->query(ctx[r], &caps) == SWY_OK);
        CHECK(caps.mem_types == 1u << SWY_MEM_HOST);
        CHECK(caps.score[SWY_LINK_SELF] == 10 &&
              caps.score[SWY_LINK_SAME_NUMA] == 50 &&
              caps.score[SWY_LINK_SAME_NODE] == 50 &&
              caps.score[SWY_LINK_CROSS_NODE] == 50);
        addr[r] = malloc(caps.max_address_len);
        CHECK(ops->get_address(ctx[r], addr[r], &lens[r]) == SWY_OK);
        CHECK(lens[r] > 0 && lens[r] <= caps.max_address_len);
    }
    const void *addrs[2] = {addr[0], addr[1]};
    const uint8_t reachable[2] = {1, 1}; /* own rank too */
    for (int r = 0; r < 2; r++)
        CHECK(ops->connect(ctx[r], addrs, lens, reachable) == SWY_OK);
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < 2; p++) {
            char desc[128];
            CHECK(ops->describe_peer(ctx[r], p, desc, sizeof(desc)) ==
                  SWY_OK);
            CHECK(strncmp(desc, "ucx: ", 5) == 0);
            printf("  rank %d -> %d: %s\n", r, p, desc);
        }

    static const size_t sizes[] = {0, 8, 1 << 20, 64 << 20};
    uint64_t tag = 1;
    for (size_t i = 0; i < SWY_ARRAY_SIZE(sizes); i++)
        for (int recv_first = 1; recv_first >= 0; recv_first--) {
            test_message(0, 1, sizes[i], recv_first, tag++);
            test_message(1, 0, sizes[i], recv_first, tag++);
        }
    /* Through the endpoint to itself, and a tag using all 48 bits. */
    test_message(0, 0, 4096, 1, SWY_TRANSPORT_TAG_MASK);
    test_message(1, 1, 0, 0, 3);

    test_truncation(100, 50, 1);
    test_truncation(100, 50, 0);
    test_truncation(1 << 20, 1000, 1);
    test_cancel();
    test_cancel_completed();
    test_source_matching();
    swy_send_hints_v1_t hints_table;
    const swy_send_hints_v1_t *hints = NULL;
    CHECK(swy_send_hints_plugin_symbol(dl, argv[1], &hints_table, &hints, why,
                                       sizeof(why)) == SWY_OK &&
          hints != NULL);
    if (hints != NULL)
        test_preemptible_hint(hints);
    test_wakeup();

    /* Posted operations are dropped silently at finalize. */
    completion_t never = {0};
    char buf[8];
    CHECK(ops->irecv(ctx[0], 1, 4242, buf, sizeof(buf), SWY_MEM_HOST,
                     on_complete, &never, NULL) == SWY_OK);
    for (int r = 0; r < 2; r++) {
        ops->finalize(ctx[r]);
        free(addr[r]);
    }
    CHECK(never.calls == 0);
    dlclose(dl);

    if (check_failures != 0) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("ucx plugin: all checks passed\n");
    return 0;
}
