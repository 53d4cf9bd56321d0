/* A rank trusts only a root that proves the job secret, and checks every
 * length the root sends:
 *   (a) a fake root without the secret (it answers the rank's proof with
 *       garbage, then READY) is refused before the rank trusts a frame;
 *   (b) a man in the middle that relays the real root's challenge to a
 *       rank cannot use that rank's proof to join as another rank;
 *   (c) a root (with the secret) whose allgather result carries forged
 *       lengths that wrap around 2^64 fails the rank with a clear error
 *       instead of handing out lengths past the buffer. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "boot_test.h"
#include "boot/wire.h"

/* ---- blocking frame I/O for the fake roots ---- */

static void io_send(int fd, const void *buf, size_t len)
{
    CHECK_EXIT(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

static int io_recv(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static void send_frame(int fd, uint32_t type, const void *payload,
                       size_t len)
{
    uint8_t header[SWY_BOOT_HEADER_LEN];
    swy_boot_put_u32(header, type);
    swy_boot_put_u32(header + 4, (uint32_t)len);
    io_send(fd, header, sizeof(header));
    if (len > 0)
        io_send(fd, payload, len);
}

/* Receive one frame of at most cap bytes; returns its type, -1 on EOF. */
static int recv_frame(int fd, uint8_t *payload, size_t cap, size_t *len_p)
{
    uint8_t header[SWY_BOOT_HEADER_LEN];
    if (io_recv(fd, header, sizeof(header)) != 0)
        return -1;
    size_t len = swy_boot_get_u32(header + 4);
    CHECK_EXIT(len <= cap);
    if (len > 0 && io_recv(fd, payload, len) != 0)
        return -1;
    *len_p = len;
    return (int)swy_boot_get_u32(header);
}

static int listen_any(uint16_t *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EXIT(fd >= 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    CHECK_EXIT(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    CHECK_EXIT(listen(fd, 8) == 0);
    socklen_t len = sizeof(sin);
    CHECK_EXIT(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
    *port_p = ntohs(sin.sin_port);
    return fd;
}

static int connect_to(const swy_boot_addr_t *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EXIT(fd >= 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(addr->port);
    inet_pton(AF_INET, addr->host, &sin.sin_addr);
    CHECK_EXIT(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* ---- a fake root: challenge, read PROOF + HELLO, then act ---- */

typedef enum {
    FAKE_NO_SECRET,     /* garbage proof, then READY */
    FAKE_FORGED_LENGTHS /* right proof, READY, forged COLL_RESULT */
} fake_mode_t;

typedef struct {
    fake_mode_t mode;
    int listen_fd;
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    int saw_coll;
} fake_root_t;

static void *fake_root_main(void *arg)
{
    fake_root_t *fake = arg;
    int fd = accept(fake->listen_fd, NULL, NULL);
    CHECK_EXIT(fd >= 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t nonce[SWY_BOOT_NONCE_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(nonce), NULL);
    send_frame(fd, SWY_BOOT_MSG_CHALLENGE, nonce, sizeof(nonce));

    uint8_t proof[256], hello[1024];
    size_t proof_len, hello_len;
    CHECK_EXIT(recv_frame(fd, proof, sizeof(proof), &proof_len) ==
               SWY_BOOT_MSG_PROOF);
    CHECK_EXIT(proof_len == SWY_BOOT_RANK_PROOF_LEN);
    CHECK_EXIT(recv_frame(fd, hello, sizeof(hello), &hello_len) ==
               SWY_BOOT_MSG_HELLO);

    uint8_t answer[SWY_BOOT_DIGEST_LEN];
    if (fake->mode == FAKE_NO_SECRET)
        memset(answer, 0x42, sizeof(answer));
    else
        swy_boot_proof(fake->secret, SWY_BOOT_PROOF_ROOT, nonce, proof,
                       hello, hello_len, answer);
    send_frame(fd, SWY_BOOT_MSG_PROOF, answer, sizeof(answer));
    send_frame(fd, SWY_BOOT_MSG_READY, NULL, 0);

    if (fake->mode == FAKE_FORGED_LENGTHS) {
        uint8_t coll[64];
        size_t coll_len;
        int type;
        while ((type = recv_frame(fd, coll, sizeof(coll), &coll_len)) ==
               SWY_BOOT_MSG_HEARTBEAT)
            ;
        CHECK_EXIT(type == SWY_BOOT_MSG_COLL);
        fake->saw_coll = 1;
        /* Two ranks, lengths 2^64-8 and L+8: they add up to L modulo
         * 2^64, the bytes that follow. */
        enum { L = 16 };
        uint8_t result[12 + 16 + L];
        memset(result, 0xee, sizeof(result));
        memcpy(result, coll, 8); /* the rank's sequence number */
        swy_boot_put_u32(result + 8, 2);
        swy_boot_put_u64(result + 12, UINT64_MAX - 7);
        swy_boot_put_u64(result + 20, L + 8);
        send_frame(fd, SWY_BOOT_MSG_COLL_RESULT, result, sizeof(result));
    }
    /* Hold the connection until the rank closes it. */
    uint8_t sink[256];
    size_t sink_len;
    while (recv_frame(fd, sink, sizeof(sink), &sink_len) >= 0)
        ;
    close(fd);
    return NULL;
}

static void start_fake(fake_root_t *fake, fake_mode_t mode,
                       swy_boot_addr_t *addr, pthread_t *thread)
{
    memset(fake, 0, sizeof(*fake));
    fake->mode = mode;
    memset(addr, 0, sizeof(*addr));
    snprintf(addr->host, sizeof(addr->host), "127.0.0.1");
    fake->listen_fd = listen_any(&addr->port);
    test_secret(addr->secret, "the job's secret");
    if (mode == FAKE_FORGED_LENGTHS)
        memcpy(fake->secret, addr->secret, SWY_BOOT_SECRET_LEN);
    CHECK_EXIT(pthread_create(thread, NULL, fake_root_main, fake) == 0);
}

static void test_fake_root_without_secret(void)
{
    fake_root_t fake;
    swy_boot_addr_t addr;
    pthread_t thread;
    start_fake(&fake, FAKE_NO_SECRET, &addr, &thread);
    swy_boot_t *boot = NULL;
    double t0 = swy_time_s();
    swy_status_t status = swy_boot_connect(&addr, 0, 1, 10.0, &boot);
    CHECK_EXIT(status == SWY_ERR_INVALID_ARG);
    CHECK_EXIT(boot == NULL);
    CHECK_EXIT(strstr(swy_err_last(), "does not know the job secret") != NULL);
    CHECK_EXIT(swy_time_s() - t0 < 5.0); /* refused, not timed out */
    pthread_join(thread, NULL);
    close(fake.listen_fd);
}

static void test_forged_lengths(void)
{
    fake_root_t fake;
    swy_boot_addr_t addr;
    pthread_t thread;
    start_fake(&fake, FAKE_FORGED_LENGTHS, &addr, &thread);
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&addr, 0, 2, 10.0, &boot), NULL);
    uint64_t mine = 7;
    void *all = NULL;
    size_t lens[2] = {0, 0};
    swy_status_t status =
        swy_boot_allgather(boot, &mine, sizeof(mine), 10.0, &all, lens);
    CHECK_EXIT(fake.saw_coll);
    CHECK_EXIT(status == SWY_ERR_REMOTE);
    CHECK_EXIT(all == NULL);
    CHECK_EXIT(strstr(swy_err_last(), "do not add up") != NULL);
    swy_boot_finalize(boot);
    pthread_join(thread, NULL);
    close(fake.listen_fd);
}

/* ---- (b) a relay: the real root's nonce, the victim's proof ---- */

typedef struct {
    swy_boot_addr_t root_addr;
    int listen_fd;
    int reject_seen;
    int proof_seen;
} relay_t;

static void *relay_main(void *arg)
{
    relay_t *relay = arg;
    int victim = accept(relay->listen_fd, NULL, NULL);
    CHECK_EXIT(victim >= 0);
    int root = connect_to(&relay->root_addr);
    uint8_t buf[1024];
    size_t len;
    CHECK_EXIT(recv_frame(root, buf, sizeof(buf), &len) ==
               SWY_BOOT_MSG_CHALLENGE);
    send_frame(victim, SWY_BOOT_MSG_CHALLENGE, buf, len);
    uint8_t proof[256], hello[1024];
    size_t proof_len, hello_len;
    CHECK_EXIT(recv_frame(victim, proof, sizeof(proof), &proof_len) ==
               SWY_BOOT_MSG_PROOF);
    CHECK_EXIT(recv_frame(victim, hello, sizeof(hello), &hello_len) ==
               SWY_BOOT_MSG_HELLO);
    CHECK_EXIT(hello_len >= 12 && swy_boot_get_u32(hello) == 0);
    /* The victim's proof, with a HELLO for rank 1 instead of 0. */
    swy_boot_put_u32(hello, 1);
    send_frame(root, SWY_BOOT_MSG_PROOF, proof, proof_len);
    send_frame(root, SWY_BOOT_MSG_HELLO, hello, hello_len);
    int type;
    while ((type = recv_frame(root, buf, sizeof(buf), &len)) >= 0) {
        if (type == SWY_BOOT_MSG_REJECT) {
            buf[len < sizeof(buf) ? len : sizeof(buf) - 1] = '\0';
            relay->reject_seen =
                strstr((char *)buf + 4, "wrong job secret") != NULL;
        }
        if (type == SWY_BOOT_MSG_PROOF)
            relay->proof_seen = 1;
    }
    close(root);
    close(victim);
    return NULL;
}

static void test_relayed_nonce(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    test_secret(secret, "relay");
    relay_t relay;
    memset(&relay, 0, sizeof(relay));
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root,
                                      &relay.root_addr), NULL);
    swy_boot_addr_t via_relay = relay.root_addr;
    relay.listen_fd = listen_any(&via_relay.port);
    pthread_t thread;
    CHECK_EXIT(pthread_create(&thread, NULL, relay_main, &relay) == 0);
    swy_boot_t *boot = NULL;
    swy_status_t status = swy_boot_connect(&via_relay, 0, 2, 3.0, &boot);
    CHECK_EXIT(status != SWY_OK);
    pthread_join(thread, NULL);
    CHECK_EXIT(relay.reject_seen);
    CHECK_EXIT(!relay.proof_seen);
    close(relay.listen_fd);
    swy_boot_root_release(root);
}

int main(void)
{
    test_fake_root_without_secret();
    test_forged_lengths();
    test_relayed_nonce();
    printf("boot auth: ok\n");
    return 0;
}
