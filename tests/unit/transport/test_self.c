/* The built-in self transport: matching in both orders, zero length,
 * truncation, cancel, deferred completion and the event fd. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"

#include "transport_test.h"


static const swy_transport_v1_t *ops;
static void *ctx;

static int fd_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

static void fill(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 16);
    }
}

/* Post in the given order; completions must wait for progress(). */
static void test_match(int recv_first, size_t len)
{
    unsigned char *src = malloc(len + 1), *dst = malloc(len + 1);
    fill(src, len, (unsigned)len + 7u);
    memset(dst, 0, len + 1);
    completion_t sc = {0}, rc = {0};
    void *sh = NULL, *rh = NULL;
    /* A loop about to sleep arms first: the completions must wake it. */
    CHECK(ops->arm(ctx) == SWY_OK);
    if (recv_first) {
        CHECK(ops->irecv(ctx, 0, 42, len ? dst : NULL, len, SWY_MEM_HOST,
                         on_complete, &rc, &rh) == SWY_OK);
        CHECK(ops->isend(ctx, 0, 42, len ? src : NULL, len, SWY_MEM_HOST,
                         on_complete, &sc, &sh) == SWY_OK);
    } else {
        CHECK(ops->isend(ctx, 0, 42, len ? src : NULL, len, SWY_MEM_HOST,
                         on_complete, &sc, &sh) == SWY_OK);
        CHECK(ops->irecv(ctx, 0, 42, len ? dst : NULL, len, SWY_MEM_HOST,
                         on_complete, &rc, &rh) == SWY_OK);
    }
    CHECK(sc.calls == 0 && rc.calls == 0); /* never from isend/irecv */
    CHECK(fd_readable(ops->event_fd(ctx)));
    CHECK(ops->arm(ctx) == SWY_INPROGRESS);
    CHECK(ops->progress(ctx) == 2);
    CHECK(sc.calls == 1 && sc.status == SWY_OK && sc.bytes == len);
    CHECK(rc.calls == 1 && rc.status == SWY_OK && rc.bytes == len);
    CHECK(len == 0 || memcmp(src, dst, len) == 0);
    CHECK(!fd_readable(ops->event_fd(ctx)));
    CHECK(ops->arm(ctx) == SWY_OK);
    CHECK(ops->progress(ctx) == 0);
    free(src);
    free(dst);
}

/* One loop armed and sleeps while another calls progress() with nothing
 * to deliver: a completion queued after that must still wake the
 * sleeper (the arm stands until a completion drains it). */
static void test_arm_survives_progress(void)
{
    int x = 7, y = 0;
    completion_t sc = {0}, rc = {0};
    CHECK(ops->arm(ctx) == SWY_OK);
    CHECK(ops->progress(ctx) == 0);
    CHECK(!fd_readable(ops->event_fd(ctx)));
    CHECK(ops->irecv(ctx, 0, 9, &y, sizeof(y), SWY_MEM_HOST, on_complete,
                     &rc, NULL) == SWY_OK);
    CHECK(ops->isend(ctx, 0, 9, &x, sizeof(x), SWY_MEM_HOST, on_complete,
                     &sc, NULL) == SWY_OK);
    CHECK(fd_readable(ops->event_fd(ctx)));
    CHECK(ops->progress(ctx) == 2);
    CHECK(sc.calls == 1 && rc.calls == 1 && y == 7);
    CHECK(!fd_readable(ops->event_fd(ctx)));
}

/* An unmatched send is not copied: a change before the match shows. */
static void test_send_not_copied_early(void)
{
    char src[16] = "before", dst[16] = "";
    completion_t sc = {0}, rc = {0};
    CHECK(ops->isend(ctx, 0, 5, src, sizeof(src), SWY_MEM_HOST, on_complete,
                     &sc, NULL) == SWY_OK);
    strcpy(src, "after");
    CHECK(ops->irecv(ctx, 0, 5, dst, sizeof(dst), SWY_MEM_HOST, on_complete,
                     &rc, NULL) == SWY_OK);
    ops->progress(ctx);
    CHECK(strcmp(dst, "after") == 0);
    CHECK(sc.calls == 1 && rc.calls == 1);
}

/* Tags match independently; equal tags match in posting order. */
static void test_tags_and_order(void)
{
    int a = 1, b = 2, c = 3, out[3] = {0, 0, 0};
    completion_t comp[6] = {{0}};
    CHECK(ops->isend(ctx, 0, 10, &a, sizeof(a), SWY_MEM_HOST, on_complete,
                     &comp[0], NULL) == SWY_OK);
    CHECK(ops->isend(ctx, 0, 11, &b, sizeof(b), SWY_MEM_HOST, on_complete,
                     &comp[1], NULL) == SWY_OK);
    CHECK(ops->isend(ctx, 0, 10, &c, sizeof(c), SWY_MEM_HOST, on_complete,
                     &comp[2], NULL) == SWY_OK);
    CHECK(ops->irecv(ctx, 0, 11, &out[0], sizeof(int), SWY_MEM_HOST,
                     on_complete, &comp[3], NULL) == SWY_OK);
    CHECK(ops->irecv(ctx, 0, 10, &out[1], sizeof(int), SWY_MEM_HOST,
                     on_complete, &comp[4], NULL) == SWY_OK);
    CHECK(ops->irecv(ctx, 0, 10, &out[2], sizeof(int), SWY_MEM_HOST,
                     on_complete, &comp[5], NULL) == SWY_OK);
    CHECK(ops->progress(ctx) == 6);
    CHECK(out[0] == 2 && out[1] == 1 && out[2] == 3);
    for (int i = 0; i < 6; i++)
        CHECK(comp[i].calls == 1 && comp[i].status == SWY_OK);
}

static void test_truncation(int recv_first)
{
    unsigned char src[100], dst[64];
    fill(src, sizeof(src), 99);
    memset(dst, 0xEE, sizeof(dst));
    completion_t sc = {0}, rc = {0};
    if (recv_first)
        CHECK(ops->irecv(ctx, 0, 7, dst, 50, SWY_MEM_HOST, on_complete, &rc,
                         NULL) == SWY_OK);
    CHECK(ops->isend(ctx, 0, 7, src, sizeof(src), SWY_MEM_HOST, on_complete,
                     &sc, NULL) == SWY_OK);
    if (!recv_first)
        CHECK(ops->irecv(ctx, 0, 7, dst, 50, SWY_MEM_HOST, on_complete, &rc,
                         NULL) == SWY_OK);
    ops->progress(ctx);
    CHECK(rc.calls == 1 && rc.status == SWY_ERR_MISMATCH && rc.bytes == 50);
    CHECK(sc.calls == 1 && sc.status == SWY_OK && sc.bytes == sizeof(src));
    CHECK(memcmp(dst, src, 50) == 0);
    for (size_t i = 50; i < sizeof(dst); i++)
        CHECK(dst[i] == 0xEE); /* never past len */
}

static void test_cancel(void)
{
    char buf[8] = "xxxxxxx", msg[8] = "message";
    completion_t rc = {0}, sc = {0}, rc2 = {0}, sc2 = {0};
    void *rh = NULL, *sh = NULL;
    CHECK(ops->irecv(ctx, 0, 3, buf, sizeof(buf), SWY_MEM_HOST, on_complete,
                     &rc, &rh) == SWY_OK);
    ops->cancel(ctx, rh);
    CHECK(ops->arm(ctx) == SWY_INPROGRESS);
    ops->progress(ctx);
    CHECK(rc.calls == 1 && rc.status == SWY_ERR_ABORTED && rc.bytes == 0);

    /* The cancelled receive no longer matches: this send waits. */
    CHECK(ops->isend(ctx, 0, 3, msg, sizeof(msg), SWY_MEM_HOST, on_complete,
                     &sc, &sh) == SWY_OK);
    ops->progress(ctx);
    CHECK(sc.calls == 0 && strcmp(buf, "xxxxxxx") == 0);
    ops->cancel(ctx, sh);
    ops->progress(ctx);
    CHECK(sc.calls == 1 && sc.status == SWY_ERR_ABORTED);

    /* A matched operation is past cancelling: it completes normally. */
    CHECK(ops->isend(ctx, 0, 4, msg, sizeof(msg), SWY_MEM_HOST, on_complete,
                     &sc2, &sh) == SWY_OK);
    CHECK(ops->irecv(ctx, 0, 4, buf, sizeof(buf), SWY_MEM_HOST, on_complete,
                     &rc2, &rh) == SWY_OK);
    ops->cancel(ctx, rh);
    ops->progress(ctx);
    CHECK(rc2.calls == 1 && rc2.status == SWY_OK && strcmp(buf, msg) == 0);
    CHECK(sc2.calls == 1 && sc2.status == SWY_OK);
}

/* A callback that posts: its completion waits for the next progress(). */
static completion_t chained;
static void on_complete_then_post(void *arg, swy_status_t status, size_t bytes)
{
    static int value = 9;
    on_complete(arg, status, bytes);
    ops->isend(ctx, 0, 77, &value, sizeof(value), SWY_MEM_HOST, on_complete,
               &chained, NULL);
}

static void test_callback_posts(void)
{
    int v = 1, got = 0, got2 = 0;
    completion_t sc = {0}, rc = {0}, rc2 = {0};
    CHECK(ops->irecv(ctx, 0, 77, &got2, sizeof(got2), SWY_MEM_HOST,
                     on_complete, &rc2, NULL) == SWY_OK);
    CHECK(ops->irecv(ctx, 0, 76, &got, sizeof(got), SWY_MEM_HOST,
                     on_complete_then_post, &rc, NULL) == SWY_OK);
    CHECK(ops->isend(ctx, 0, 76, &v, sizeof(v), SWY_MEM_HOST, on_complete,
                     &sc, NULL) == SWY_OK);
    CHECK(ops->progress(ctx) == 2);
    CHECK(rc.calls == 1 && chained.calls == 0 && rc2.calls == 0);
    CHECK(ops->arm(ctx) == SWY_INPROGRESS);
    CHECK(ops->progress(ctx) == 2);
    CHECK(chained.calls == 1 && rc2.calls == 1 && got2 == 9);
}

int main(void)
{
    swy_transport_host_v1_t host = {
        .abi_version = SWY_TRANSPORT_ABI_V1,
        .struct_size = sizeof(host),
        .log = swy_log,
        .config_get = swy_config_get,
        .alloc = swy_malloc,
        .free = swy_free,
        .rank = 0,
        .nranks = 1,
    };
    ops = swy_transport_self_ops();
    CHECK(strcmp(ops->name, "self") == 0);
    CHECK(ops->init(&host, &ctx) == SWY_OK);
    swy_transport_caps_v1_t caps = {.struct_size = sizeof(caps)};
    CHECK(ops->query(ctx, &caps) == SWY_OK);
    CHECK(caps.score[SWY_LINK_SELF] == 100 &&
          caps.score[SWY_LINK_SAME_NUMA] == 0 &&
          caps.score[SWY_LINK_CROSS_NODE] == 0);
    CHECK(caps.mem_types == 1u << SWY_MEM_HOST);
    const void *addrs[1] = {NULL};
    size_t lens[1] = {0};
    uint8_t reachable[1] = {1};
    CHECK(ops->connect(ctx, addrs, lens, reachable) == SWY_OK);
    CHECK(ops->event_fd(ctx) >= 0);
    CHECK(ops->arm(ctx) == SWY_OK);

    for (int order = 0; order < 2; order++) {
        test_match(order, 0);
        test_match(order, 8);
        test_match(order, 1 << 20);
        test_truncation(order);
    }
    test_arm_survives_progress();
    test_send_not_copied_early();
    test_tags_and_order();
    test_cancel();
    test_callback_posts();

    int x = 0;
    CHECK(ops->isend(ctx, 1, 1, &x, sizeof(x), SWY_MEM_HOST, on_complete,
                     NULL, NULL) == SWY_ERR_INVALID_ARG);

    /* Pending operations are dropped silently. */
    completion_t never = {0};
    CHECK(ops->irecv(ctx, 0, 1, &x, sizeof(x), SWY_MEM_HOST, on_complete,
                     &never, NULL) == SWY_OK);
    ops->finalize(ctx);
    CHECK(never.calls == 0);

    if (check_failures != 0) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("self transport: all checks passed\n");
    return 0;
}
