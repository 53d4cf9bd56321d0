/* The root refuses what it must refuse and keeps serving everyone else:
 * (b) a wrong secret, (c) garbage, oversized, half-sent and out-of-order
 * frames from raw sockets, (d) an nranks mismatch and a duplicate rank.
 * After each abuse a legitimate job on the same root still completes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "boot_test.h"
#include "boot/wire.h"

static swy_boot_addr_t g_addr;

/* ---- a legitimate job of n ranks on the root ---- */

typedef struct {
    int nranks;
    int base_rank_value;
} job_t;

static void job_rank(int rank, void *arg)
{
    job_t *job = arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, job->nranks, 10.0, &boot),
                  NULL);
    int value = job->base_rank_value + rank;
    void *all = NULL;
    size_t lens[8];
    CHECK_OK_EXIT(swy_boot_allgather(boot, &value, sizeof(value), 10.0, &all,
                                     lens), NULL);
    for (int r = 0; r < job->nranks; r++) {
        CHECK_EXIT(lens[r] == sizeof(int));
        int got;
        memcpy(&got, (char *)all + r * sizeof(int), sizeof(int));
        CHECK_EXIT(got == job->base_rank_value + r);
    }
    swy_free(all);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    swy_boot_finalize(boot);
}

/* Every legit job needs its own root: a job's ranks leave it done. */
static swy_boot_root_t *start_root(const char *secret_text)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    test_secret(secret, secret_text);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    return root;
}

static void run_job(int nranks, int base_value)
{
    job_t job = {nranks, base_value};
    test_run_ranks(nranks, NULL, job_rank, &job);
}

/* ---- raw sockets ---- */

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EXIT(fd >= 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(g_addr.port);
    inet_pton(AF_INET, g_addr.host, &sin.sin_addr);
    CHECK_EXIT(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    CHECK_EXIT(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

static void raw_recv_challenge(int fd, uint8_t nonce[SWY_BOOT_NONCE_LEN])
{
    uint8_t frame[SWY_BOOT_HEADER_LEN + SWY_BOOT_NONCE_LEN];
    size_t got = 0;
    while (got < sizeof(frame)) {
        ssize_t n = recv(fd, frame + got, sizeof(frame) - got, 0);
        CHECK_EXIT(n > 0);
        got += (size_t)n;
    }
    CHECK_EXIT(swy_boot_get_u32(frame) == SWY_BOOT_MSG_CHALLENGE);
    CHECK_EXIT(swy_boot_get_u32(frame + 4) == SWY_BOOT_NONCE_LEN);
    if (nonce != NULL)
        memcpy(nonce, frame + SWY_BOOT_HEADER_LEN, SWY_BOOT_NONCE_LEN);
}

/* Read until the root closes; fails the test if it does not within 5 s.
 * Returns whether a REJECT frame came first (after any CHALLENGE). */
static int raw_expect_closed(int fd, const char *what)
{
    uint8_t buf[4096];
    size_t have = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + have, sizeof(buf) - have, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            break;
        if (n < 0) {
            fprintf(stderr, "%s: the root did not close the connection "
                    "(%s)\n", what, strerror(errno));
            exit(1);
        }
        have += (size_t)n;
        CHECK_EXIT(have < sizeof(buf));
    }
    close(fd);
    size_t off = 0;
    while (off + SWY_BOOT_HEADER_LEN <= have) {
        uint32_t type = swy_boot_get_u32(buf + off);
        uint32_t len = swy_boot_get_u32(buf + off + 4);
        if (type == SWY_BOOT_MSG_REJECT)
            return 1;
        off += SWY_BOOT_HEADER_LEN + len;
    }
    return 0;
}

static void put_header(uint8_t *p, uint32_t type, uint32_t len)
{
    swy_boot_put_u32(p, type);
    swy_boot_put_u32(p + 4, len);
}

/* Answer the challenge with a proof that covers the HELLO payload hello
 * (which the caller sends next, or not). */
static void raw_prove(int fd, const char *secret_text, const void *hello,
                      size_t hello_len)
{
    uint8_t nonce[SWY_BOOT_NONCE_LEN];
    raw_recv_challenge(fd, nonce);
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    test_secret(secret, secret_text);
    uint8_t frame[SWY_BOOT_HEADER_LEN + SWY_BOOT_RANK_PROOF_LEN];
    put_header(frame, SWY_BOOT_MSG_PROOF, SWY_BOOT_RANK_PROOF_LEN);
    uint8_t *rank_nonce = frame + SWY_BOOT_HEADER_LEN;
    memset(rank_nonce, 0x5a, SWY_BOOT_NONCE_LEN);
    swy_boot_proof(secret, SWY_BOOT_PROOF_RANK, nonce, rank_nonce, hello,
                   hello_len, rank_nonce + SWY_BOOT_NONCE_LEN);
    raw_send(fd, frame, sizeof(frame));
}

static void test_wrong_secret(void)
{
    swy_boot_root_t *root = start_root("the right secret");
    swy_boot_addr_t wrong = g_addr;
    test_secret(wrong.secret, "a wrong secret");
    swy_boot_t *boot = NULL;
    double t0 = swy_time_s();
    swy_status_t status = swy_boot_connect(&wrong, 0, 2, 10.0, &boot);
    CHECK_EXIT(status == SWY_ERR_INVALID_ARG);
    CHECK_EXIT(boot == NULL);
    CHECK_EXIT(strstr(swy_err_last(), "secret") != NULL);
    CHECK_EXIT(swy_time_s() - t0 < 5.0); /* rejected, not timed out */
    run_job(2, 100);
    swy_boot_root_release(root);
}

static void test_raw_abuse(void)
{
    swy_boot_root_t *root = start_root("raw abuse");

    /* A silent peer that never finishes the handshake stays open during
     * the whole test: it must not block anyone. */
    int silent = raw_connect();

    /* Garbage instead of PROOF. */
    int fd = raw_connect();
    raw_recv_challenge(fd, NULL);
    uint8_t garbage[64];
    for (size_t i = 0; i < sizeof(garbage); i++)
        garbage[i] = (uint8_t)(i * 151 + 7);
    raw_send(fd, garbage, sizeof(garbage));
    CHECK_EXIT(raw_expect_closed(fd, "garbage"));

    /* A 2 GiB length prefix. */
    fd = raw_connect();
    uint8_t header[SWY_BOOT_HEADER_LEN];
    put_header(header, SWY_BOOT_MSG_PROOF, 0x80000000u);
    raw_send(fd, header, sizeof(header));
    CHECK_EXIT(raw_expect_closed(fd, "2 GiB length"));

    /* Wrong proof. */
    fd = raw_connect();
    raw_recv_challenge(fd, NULL);
    uint8_t proof[SWY_BOOT_HEADER_LEN + SWY_BOOT_DIGEST_LEN];
    put_header(proof, SWY_BOOT_MSG_PROOF, SWY_BOOT_DIGEST_LEN);
    memset(proof + SWY_BOOT_HEADER_LEN, 0xab, SWY_BOOT_DIGEST_LEN);
    raw_send(fd, proof, sizeof(proof));
    CHECK_EXIT(raw_expect_closed(fd, "wrong proof"));

    /* Unknown message type. */
    fd = raw_connect();
    put_header(header, 0x7777, 4);
    raw_send(fd, header, sizeof(header));
    CHECK_EXIT(raw_expect_closed(fd, "unknown type"));

    /* A collective before the handshake. */
    fd = raw_connect();
    put_header(header, SWY_BOOT_MSG_COLL, 8);
    raw_send(fd, header, sizeof(header));
    raw_send(fd, garbage, 8);
    CHECK_EXIT(raw_expect_closed(fd, "COLL before PROOF"));

    /* Half a frame, then close (nothing to read back). */
    fd = raw_connect();
    put_header(proof, SWY_BOOT_MSG_PROOF, SWY_BOOT_DIGEST_LEN);
    raw_send(fd, proof, SWY_BOOT_HEADER_LEN + 10);
    close(fd);

    /* A header cut in the middle, then close. */
    fd = raw_connect();
    raw_send(fd, proof, 3);
    close(fd);

    /* Proven, then a malformed HELLO. */
    fd = raw_connect();
    raw_prove(fd, "raw abuse", "abc", 3);
    put_header(header, SWY_BOOT_MSG_HELLO, 3);
    raw_send(fd, header, sizeof(header));
    raw_send(fd, "abc", 3);
    CHECK_EXIT(raw_expect_closed(fd, "malformed HELLO"));

    /* Proven, then a frame over the handshake limit (the secret is right
     * but the rank has not joined yet). */
    fd = raw_connect();
    raw_prove(fd, "raw abuse", NULL, 0);
    put_header(header, SWY_BOOT_MSG_HELLO, 1u << 20);
    raw_send(fd, header, sizeof(header));
    CHECK_EXIT(raw_expect_closed(fd, "oversized HELLO"));

    /* Proven, HELLO with a rank out of range. */
    fd = raw_connect();
    uint8_t hello[SWY_BOOT_HEADER_LEN + 12 + 4];
    put_header(hello, SWY_BOOT_MSG_HELLO, 16);
    swy_boot_put_u32(hello + 8, 5);  /* rank */
    swy_boot_put_u32(hello + 12, 2); /* nranks */
    swy_boot_put_u32(hello + 16, 1);
    memcpy(hello + 20, "host", 4);
    raw_prove(fd, "raw abuse", hello + SWY_BOOT_HEADER_LEN, 16);
    raw_send(fd, hello, sizeof(hello));
    CHECK_EXIT(raw_expect_closed(fd, "rank out of range"));

    /* The root still serves a real job. */
    run_job(2, 200);

    close(silent);
    swy_boot_root_release(root);
}

/* A joined rank that sends garbage is dropped and reported as failed to
 * the others (it is a rank of the job, so its loss matters). */
static void test_joined_rank_garbage(void)
{
    swy_boot_root_t *root = start_root("joined garbage");
    int fd = raw_connect();
    uint8_t hello[SWY_BOOT_HEADER_LEN + 12 + 3];
    put_header(hello, SWY_BOOT_MSG_HELLO, 15);
    swy_boot_put_u32(hello + 8, 1);
    swy_boot_put_u32(hello + 12, 2);
    swy_boot_put_u32(hello + 16, 4242);
    memcpy(hello + 20, "raw", 3);
    raw_prove(fd, "joined garbage", hello + SWY_BOOT_HEADER_LEN, 15);
    raw_send(fd, hello, sizeof(hello));

    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, 0, 2, 10.0, &boot), NULL);
    uint8_t header[SWY_BOOT_HEADER_LEN];
    put_header(header, 0xdead, 0);
    raw_send(fd, header, sizeof(header));
    CHECK_EXIT(swy_boot_barrier(boot, 10.0) == SWY_ERR_REMOTE);
    char msg[512];
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_REMOTE);
    CHECK_EXIT(strstr(msg, "rank 1 (pid 4242 on raw)") != NULL);
    raw_expect_closed(fd, "joined garbage");
    swy_boot_finalize(boot);
    swy_boot_root_release(root);
}

/* ---- (d) nranks mismatch and duplicate rank ---- */

static void mismatch_rank0(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 4, 10.0, &boot), NULL);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    swy_boot_finalize(boot);
}

static void late_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 4, 10.0, &boot), NULL);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    swy_boot_finalize(boot);
}

static void test_mismatch(void)
{
    swy_boot_root_t *root = start_root("mismatch");
    pthread_t first;
    test_thread_t first_arg = {mismatch_rank0, 0, NULL};
    CHECK_EXIT(pthread_create(&first, NULL, test_thread_main, &first_arg) == 0);
    /* Let rank 0 (nranks 4) be the first to join. */
    swy_sleep_us(500000);

    swy_boot_t *boot = NULL;
    swy_status_t status = swy_boot_connect(&g_addr, 1, 3, 10.0, &boot);
    CHECK_EXIT(status == SWY_ERR_MISMATCH);
    CHECK_EXIT(strstr(swy_err_last(), "nranks 3") != NULL);
    CHECK_EXIT(strstr(swy_err_last(), "nranks 4") != NULL);

    /* Rank 1 properly, then a second rank 1. */
    int ranks[3] = {1, 2, 3};
    pthread_t others[3];
    test_thread_t other_args[3];
    other_args[0] = (test_thread_t){late_rank, ranks[0], NULL};
    CHECK_EXIT(pthread_create(&others[0], NULL, test_thread_main,
                              &other_args[0]) == 0);
    swy_sleep_us(300000);
    status = swy_boot_connect(&g_addr, 1, 4, 10.0, &boot);
    CHECK_EXIT(status == SWY_ERR_MISMATCH);
    CHECK_EXIT(strstr(swy_err_last(), "rank 1 is already taken") != NULL);

    for (int i = 1; i < 3; i++) {
        other_args[i] = (test_thread_t){late_rank, ranks[i], NULL};
        CHECK_EXIT(pthread_create(&others[i], NULL, test_thread_main,
                                  &other_args[i]) == 0);
    }
    pthread_join(first, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(others[i], NULL);
    swy_boot_root_release(root);
}

int main(void)
{
    test_wrong_secret();
    test_raw_abuse();
    test_joined_rank_garbage();
    test_mismatch();
    printf("boot reject: ok\n");
    return 0;
}
