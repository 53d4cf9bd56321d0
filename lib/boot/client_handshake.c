/* A rank joins the control plane: connect to the root, prove the job
 * secret and check the root's proof, with plain blocking sockets so that
 * every error reaches the caller of swy_boot_connect directly. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "boot/client.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define CLIENT_RETRY_US 50000

static int wait_fd(int fd, short events, double deadline_s)
{
    for (;;) {
        /* Past the deadline, still look once: a connect that already
         * failed reports its real error rather than a timeout. */
        double remaining = deadline_s - swy_time_s();
        if (remaining > 3600.0)
            remaining = 3600.0; /* fits the int of poll; the loop goes on */
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, remaining > 0 ? (int)(remaining * 1000) + 1
                                             : 0);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc == 0 && remaining <= 0)
            return 0;
    }
}

/* Connect once; returns the fd or -1 with errno set. */
static int try_connect(const struct sockaddr_storage *ss, socklen_t ss_len,
                       double deadline_s)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)ss, ss_len) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int rc = wait_fd(fd, POLLOUT, deadline_s);
    if (rc <= 0) {
        close(fd);
        errno = rc == 0 ? ETIMEDOUT : errno;
        return -1;
    }
    int err = 0;
    socklen_t err_len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
    if (err != 0) {
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* 1 done, 0 deadline, -1 error (errno; 0 for EOF). */
static int recv_exact(int fd, void *buf, size_t len, double deadline_s)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = 0;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        int rc = wait_fd(fd, POLLIN, deadline_s);
        if (rc <= 0)
            return rc;
    }
    return 1;
}

static int send_all(int fd, const void *buf, size_t len, double deadline_s)
{
    size_t sent = 0;
    while (sent < len) {
        ssize_t n = send(fd, (const char *)buf + sent, len - sent,
                         MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        int rc = wait_fd(fd, POLLOUT, deadline_s);
        if (rc <= 0)
            return rc;
    }
    return 1;
}

/* Connect (retrying while the root is not up yet, or when it drops the
 * handshake as it does under a flood), answer the challenge, send HELLO,
 * check the root's own proof. Returns the connected fd in *fd_p. */
swy_status_t swy_boot_client_handshake(const swy_boot_addr_t *addr, int rank,
                                       int nranks, const char *root_text,
                                       double timeout_s, double deadline_s,
                                       int *fd_p)
{
    struct sockaddr_storage ss;
    socklen_t ss_len;
    if (swy_boot_sockaddr_fill(addr->host, addr->port, &ss, &ss_len) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "root host \"%s\" is not a numeric IPv4/IPv6 "
                           "address",
                           addr->host);
    int fd = -1;
    int last_errno = 0;
    int attempts = 0;
retry:
    for (;;) {
        attempts++;
        fd = try_connect(&ss, ss_len, deadline_s);
        if (fd >= 0)
            break;
        last_errno = errno;
        double remaining = deadline_s - swy_time_s();
        if (remaining <= 0)
            return swy_err_set(SWY_ERR_TIMEOUT, "boot",
                               "rank %d could not connect to the root at %s "
                               "within %.1f s (%d attempts; last error: %s)",
                               rank, root_text, timeout_s, attempts,
                               strerror(last_errno));
        swy_sleep_us((uint64_t)SWY_MIN(remaining * 1e6,
                                       (double)CLIENT_RETRY_US));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    swy_status_t status;
    uint8_t challenge[SWY_BOOT_HEADER_LEN + SWY_BOOT_NONCE_LEN];
    int rc = recv_exact(fd, challenge, sizeof(challenge), deadline_s);
    if (rc <= 0) {
        if (rc == 0)
            status = swy_err_set(SWY_ERR_TIMEOUT, "boot",
                                 "rank %d: the root at %s sent no challenge "
                                 "within %.1f s",
                                 rank, root_text, timeout_s);
        else
            status = swy_err_set(SWY_ERR_REMOTE, "boot",
                                 "rank %d: the root at %s closed the "
                                 "connection before its challenge%s%s",
                                 rank, root_text, errno ? ": " : "",
                                 errno ? strerror(errno) : "");
        goto err_close;
    }
    if (swy_boot_get_u32(challenge) != SWY_BOOT_MSG_CHALLENGE ||
        swy_boot_get_u32(challenge + 4) != SWY_BOOT_NONCE_LEN) {
        status = swy_err_set(SWY_ERR_REMOTE, "boot",
                             "rank %d: %s is not a Switchyard root (its "
                             "first message is type %u, %u bytes)",
                             rank, root_text, swy_boot_get_u32(challenge),
                             swy_boot_get_u32(challenge + 4));
        goto err_close;
    }

    char hostname[SWY_BOOT_MAX_HOSTNAME + 1] = "?";
    gethostname(hostname, sizeof(hostname) - 1);
    hostname[SWY_BOOT_MAX_HOSTNAME] = '\0';
    size_t host_len = strlen(hostname);
    uint8_t hello[12 + SWY_BOOT_MAX_HOSTNAME];
    size_t hello_len = 12 + host_len;
    swy_boot_put_u32(hello, (uint32_t)rank);
    swy_boot_put_u32(hello + 4, (uint32_t)nranks);
    swy_boot_put_u32(hello + 8, (uint32_t)getpid());
    memcpy(hello + 12, hostname, host_len);
    const uint8_t *root_nonce = challenge + SWY_BOOT_HEADER_LEN;
    uint8_t rank_nonce[SWY_BOOT_NONCE_LEN];
    status = swy_boot_secret_random(rank_nonce);
    if (status != SWY_OK)
        goto err_close;

    /* PROOF and HELLO in one send. */
    uint8_t out[2 * SWY_BOOT_HEADER_LEN + SWY_BOOT_RANK_PROOF_LEN +
                sizeof(hello)];
    uint8_t *p = out;
    swy_boot_put_u32(p, SWY_BOOT_MSG_PROOF);
    swy_boot_put_u32(p + 4, SWY_BOOT_RANK_PROOF_LEN);
    memcpy(p + SWY_BOOT_HEADER_LEN, rank_nonce, SWY_BOOT_NONCE_LEN);
    swy_boot_proof(addr->secret, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce,
                   hello, hello_len,
                   p + SWY_BOOT_HEADER_LEN + SWY_BOOT_NONCE_LEN);
    p += SWY_BOOT_HEADER_LEN + SWY_BOOT_RANK_PROOF_LEN;
    swy_boot_put_u32(p, SWY_BOOT_MSG_HELLO);
    swy_boot_put_u32(p + 4, (uint32_t)hello_len);
    memcpy(p + SWY_BOOT_HEADER_LEN, hello, hello_len);
    p += SWY_BOOT_HEADER_LEN + hello_len;
    rc = send_all(fd, out, (size_t)(p - out), deadline_s);
    if (rc <= 0) {
        status = swy_err_set(rc == 0 ? SWY_ERR_TIMEOUT : SWY_ERR_REMOTE,
                             "boot",
                             "rank %d: sending HELLO to the root at %s "
                             "failed: %s",
                             rank, root_text,
                             rc == 0 ? "timed out" : strerror(errno));
        goto err_close;
    }

    /* Nothing from the root is trusted before its proof: a listener at
     * SWY_ROOT without the secret cannot feed this rank any frame. */
    uint8_t answer[SWY_BOOT_HEADER_LEN + SWY_BOOT_MAX_HANDSHAKE_MSG];
    rc = recv_exact(fd, answer, SWY_BOOT_HEADER_LEN, deadline_s);
    if (rc < 0 && errno == 0 && swy_time_s() < deadline_s) {
        /* Closed before answering: a root that sheds idle handshakes
         * under a flood; try again while time is left. */
        swy_debug("boot", "rank %d: the root at %s closed the handshake; "
                  "connecting again", rank, root_text);
        close(fd);
        fd = -1;
        swy_sleep_us(CLIENT_RETRY_US);
        goto retry;
    }
    if (rc <= 0) {
        if (rc == 0)
            status = swy_err_set(SWY_ERR_TIMEOUT, "boot",
                                 "rank %d: the root at %s did not answer "
                                 "its proof within %.1f s",
                                 rank, root_text, timeout_s);
        else
            status = swy_err_set(SWY_ERR_REMOTE, "boot",
                                 "rank %d: the root at %s closed the "
                                 "connection during the handshake%s%s",
                                 rank, root_text, errno ? ": " : "",
                                 errno ? strerror(errno) : "");
        goto err_close;
    }
    uint32_t type = swy_boot_get_u32(answer);
    uint32_t len = swy_boot_get_u32(answer + 4);
    int expected_answer =
        (type == SWY_BOOT_MSG_PROOF && len == SWY_BOOT_DIGEST_LEN) ||
        (type == SWY_BOOT_MSG_REJECT && len >= 4 &&
         len <= SWY_BOOT_MAX_HANDSHAKE_MSG);
    if (!expected_answer) {
        status = swy_err_set(SWY_ERR_REMOTE, "boot",
                             "rank %d: %s answered its proof with %s (type "
                             "%u, %u bytes) instead of the root's proof: "
                             "not this job's root",
                             rank, root_text, swy_boot_msg_name(type), type,
                             len);
        goto err_close;
    }
    rc = recv_exact(fd, answer + SWY_BOOT_HEADER_LEN, len, deadline_s);
    if (rc <= 0) {
        status = swy_err_set(rc == 0 ? SWY_ERR_TIMEOUT : SWY_ERR_REMOTE,
                             "boot",
                             "rank %d: the root at %s sent half a %s during "
                             "the handshake",
                             rank, root_text, swy_boot_msg_name(type));
        goto err_close;
    }
    if (type == SWY_BOOT_MSG_REJECT) {
        /* Unproven, but it can only end the join, as closing would. */
        swy_status_t reject_status;
        char msg[CLIENT_MSG_MAX];
        swy_boot_client_status_msg(answer + SWY_BOOT_HEADER_LEN, len,
                                   &reject_status, msg, sizeof(msg));
        status = swy_err_set(reject_status, "boot",
                             "the root at %s rejected rank %d: %s",
                             root_text, rank, msg);
        goto err_close;
    }
    uint8_t expected[SWY_BOOT_DIGEST_LEN];
    swy_boot_proof(addr->secret, SWY_BOOT_PROOF_ROOT, root_nonce, rank_nonce,
                   hello, hello_len, expected);
    if (!swy_boot_digest_equal(answer + SWY_BOOT_HEADER_LEN, expected,
                               SWY_BOOT_DIGEST_LEN)) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                             "rank %d: %s does not know the job secret (its "
                             "proof does not match): not this job's root, "
                             "or started with another SWY_JOB_KEY",
                             rank, root_text);
        goto err_close;
    }
    *fd_p = fd;
    return SWY_OK;

err_close:
    close(fd);
    return status;
}
