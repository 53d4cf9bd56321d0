/* A rank's side of the control plane.
 *
 * swy_boot_connect does the handshake with plain blocking sockets (so its
 * errors reach the caller directly), then hands the socket to a libevent
 * loop in a background thread. That thread reads everything the root
 * sends (READY, collective results, FAILED, heartbeats) and keeps the
 * heartbeat going, so failures are recorded while the rank computes.
 *
 * Locking: the bufferevent is thread safe (its lock is held around every
 * frame written from a user thread, so frames never interleave, and
 * around every libevent callback). boot->lock guards the state shared
 * with waiting callers; it is always taken after the bufferevent lock,
 * never before. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

/* After a timeout, how long to wait for the root to say who is missing. */
#define CLIENT_MISSING_WAIT_S 1.0
/* finalize: how long to wait for the root to close after GOODBYE. */
#define CLIENT_CLOSE_WAIT_S 2.0
#define CLIENT_RETRY_US 50000
#define CLIENT_MSG_MAX 1024
/* Scoped failures remembered (swy_boot_report_comm_failure): the oldest
 * gives way beyond this many; a communicator learns of its own failure
 * within a progress pass, long before. */
#define CLIENT_COMM_FAILURES 64

struct swy_boot {
    int rank;
    int nranks;
    char root_text[96];
    double heartbeat_s;
    double outage_s; /* SWY_OUTAGE_S */

    struct event_base *base;
    struct bufferevent *bev;
    struct event *heartbeat_ev;
    struct event *close_ev;
    struct event *guard_ev;
    pthread_t thread;
    int thread_started;
    int event_fd;

    /* Loop thread only. */
    double last_recv_s;
    int shut_wr;

    /* Set under the bufferevent lock; read anywhere. */
    atomic_int conn_lost;
    atomic_int closing;

    /* User thread only (one collective at a time). */
    uint64_t next_seq;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;
    swy_status_t join_status; /* REJECT from the root */
    char join_msg[CLIENT_MSG_MAX];
    uint64_t result_seq; /* 0: none */
    uint8_t *result_data;
    uint64_t *result_lens;
    int missing_valid;
    uint64_t missing_seq;
    char missing_text[CLIENT_MSG_MAX];
    char failure_msg[SWY_ERRMSG_MAX];
    uint8_t *quiesced; /* by rank: 1 the root said it is quiesced, 2 gone */
    void (*failure_cb)(void *arg);
    void *failure_cb_arg;

    atomic_int failure_status;
    atomic_int failure_cb_called;

    /* Scoped failures (COMM_FAILED), the first per key; under lock. */
    struct client_comm_failure {
        uint64_t key;
        swy_status_t status;
        char msg[SWY_ERRMSG_MAX];
    } comm_failures[CLIENT_COMM_FAILURES];
    int n_comm_failures;
    int comm_event_fd; /* written at each scoped failure */
    atomic_uint_least64_t comm_failures_seen;
};

static void client_lock_wait(swy_boot_t *boot, double deadline_s)
{
    /* boot->lock held. The condition uses CLOCK_MONOTONIC like
     * swy_time_s, so a wall-clock jump changes no timeout. */
    double remaining = deadline_s - swy_time_s();
    if (remaining <= 0)
        return;
    /* A deadline days away (or infinite) waits in pieces: the callers
     * loop, and a timespec never overflows. */
    if (remaining > 3600.0)
        remaining = 3600.0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)remaining;
    ts.tv_sec += (time_t)remaining;
    ts.tv_nsec += (long)((remaining - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&boot->cond, &boot->lock, &ts);
}

/* Record the job's first failure; later ones are ignored. */
static void client_record_failure(swy_boot_t *boot, swy_status_t status,
                                  const char *msg)
{
    int first = 0;
    void (*cb)(void *) = NULL;
    void *cb_arg = NULL;
    pthread_mutex_lock(&boot->lock);
    if (atomic_load(&boot->failure_status) == SWY_OK) {
        snprintf(boot->failure_msg, sizeof(boot->failure_msg), "%s", msg);
        atomic_store(&boot->failure_status, status);
        first = 1;
        cb = boot->failure_cb;
        cb_arg = boot->failure_cb_arg;
    }
    pthread_cond_broadcast(&boot->cond);
    pthread_mutex_unlock(&boot->lock);
    if (!first)
        return;
    swy_info("boot", "rank %d: job failed (%s): %s", boot->rank,
             swy_status_string(status), msg);
    uint64_t one = 1;
    if (write(boot->event_fd, &one, sizeof(one)) < 0)
        swy_warn("boot", "rank %d: cannot signal the failure eventfd: %s",
                 boot->rank, strerror(errno));
    if (cb != NULL && !atomic_exchange(&boot->failure_cb_called, 1))
        cb(cb_arg);
}

/* Record a communicator's failure (the first per key). */
static void client_record_comm_failure(swy_boot_t *boot, uint64_t key,
                                       swy_status_t status, const char *msg)
{
    pthread_mutex_lock(&boot->lock);
    for (int i = 0; i < boot->n_comm_failures; i++)
        if (boot->comm_failures[i].key == key) {
            pthread_mutex_unlock(&boot->lock);
            return;
        }
    if (boot->n_comm_failures == CLIENT_COMM_FAILURES) {
        memmove(&boot->comm_failures[0], &boot->comm_failures[1],
                (CLIENT_COMM_FAILURES - 1) * sizeof(boot->comm_failures[0]));
        boot->n_comm_failures--;
    }
    struct client_comm_failure *f =
        &boot->comm_failures[boot->n_comm_failures++];
    f->key = key;
    f->status = status;
    snprintf(f->msg, sizeof(f->msg), "%s", msg);
    atomic_fetch_add(&boot->comm_failures_seen, 1);
    pthread_mutex_unlock(&boot->lock);
    /* Wake a progress loop asleep on the transports. */
    uint64_t one = 1;
    if (write(boot->comm_event_fd, &one, sizeof(one)) < 0)
        swy_warn("boot", "rank %d: cannot signal the communicator-failure "
                 "eventfd: %s", boot->rank, strerror(errno));
}

/* The connection to the root is over: SWY_ERR_REMOTE when it closed or
 * sent nonsense, SWY_ERR_TIMEOUT when it fell silent. */
static void client_lost_status(swy_boot_t *boot, swy_status_t status,
                               const char *detail)
{
    char msg[CLIENT_MSG_MAX];
    snprintf(msg, sizeof(msg),
             "lost the control connection to the root at %s%s",
             boot->root_text, detail);
    atomic_store(&boot->conn_lost, 1);
    bufferevent_disable(boot->bev, EV_READ | EV_WRITE);
    client_record_failure(boot, status, msg);
}

static void client_lost(swy_boot_t *boot, const char *detail)
{
    client_lost_status(boot, SWY_ERR_REMOTE, detail);
}

/* Queue a frame from any thread. Returns -1 when the connection is gone
 * or closing (the caller then reports the recorded failure). */
static int client_send(swy_boot_t *boot, uint32_t type, const void *part1,
                       size_t len1, const void *part2, size_t len2)
{
    int rc = -1;
    bufferevent_lock(boot->bev);
    if (!atomic_load(&boot->conn_lost) && !atomic_load(&boot->closing))
        rc = swy_boot_frame_write2(boot->bev, type, part1, len1, part2,
                                   len2);
    bufferevent_unlock(boot->bev);
    return rc;
}

static void format_rank_list(const uint8_t *ranks_be, uint32_t count,
                             char *text, size_t text_len)
{
    size_t used = 0;
    text[0] = '\0';
    uint32_t i = 0;
    while (i < count) {
        /* 64-bit: ranks come from the wire, and a run ending at
         * INT_MAX must not overflow (found by fuzz_boot_client). */
        int64_t first =
            (int32_t)swy_boot_get_u32(ranks_be + 4 * (size_t)i);
        uint32_t j = i;
        while (j + 1 < count &&
               (int32_t)swy_boot_get_u32(ranks_be + 4 * (size_t)(j + 1)) ==
                   first + (int64_t)(j + 1 - i))
            j++;
        int64_t last = first + (int64_t)(j - i);
        char piece[32];
        if (last == first)
            snprintf(piece, sizeof(piece), "%s%" PRId64, i ? "," : "",
                     first);
        else
            snprintf(piece, sizeof(piece), "%s%" PRId64 "-%" PRId64,
                     i ? "," : "", first, last);
        if (used + strlen(piece) + 24 >= text_len) {
            snprintf(text + used, text_len - used, ",... (%u in all)",
                     count);
            return;
        }
        used += (size_t)snprintf(text + used, text_len - used, "%s", piece);
        i = j + 1;
    }
}

static int client_handle_status_msg(const uint8_t *payload, size_t len,
                                    swy_status_t *status_p, char *msg,
                                    size_t msg_len)
{
    if (len < 4)
        return -1;
    *status_p = swy_boot_status_from_wire((int32_t)swy_boot_get_u32(payload));
    size_t text_len = SWY_MIN(len - 4, msg_len - 1);
    memcpy(msg, payload + 4, text_len);
    msg[text_len] = '\0';
    return 0;
}

/* A COLL_RESULT still in the input buffer: read it straight into its
 * final allocation. Returns NULL or a description of what is wrong. */
static const char *client_take_result(swy_boot_t *boot, struct evbuffer *in,
                                      size_t len)
{
    size_t n = (size_t)boot->nranks;
    size_t head_len = 12 + 8 * n;
    if (len < head_len) {
        evbuffer_drain(in, len);
        return "COLL_RESULT shorter than its header";
    }
    uint8_t *head = swy_malloc(head_len);
    uint64_t *lens = swy_calloc(n, sizeof(*lens));
    if (head == NULL || lens == NULL) {
        swy_free(head);
        swy_free(lens);
        evbuffer_drain(in, len);
        return "out of memory for a collective result";
    }
    evbuffer_remove(in, head, head_len);
    uint64_t seq = swy_boot_get_u64(head);
    uint32_t count = swy_boot_get_u32(head + 8);
    /* Each length is checked against what is left of the frame before
     * it is added, so no sum can wrap around (forged lengths such as
     * [2^64-8, L+8] add up to L modulo 2^64). */
    uint64_t left = len - head_len;
    int lens_ok = 1;
    for (size_t r = 0; r < n; r++) {
        lens[r] = swy_boot_get_u64(head + 12 + 8 * r);
        if (lens[r] > left)
            lens_ok = 0;
        else
            left -= lens[r];
    }
    uint64_t total = len - head_len;
    swy_free(head);
    if (count != n || !lens_ok || left != 0) {
        swy_free(lens);
        evbuffer_drain(in, len - head_len);
        return "COLL_RESULT whose rank count or lengths do not add up";
    }
    /* One byte at least so that an all-empty allgather still returns an
     * allocation the caller can swy_free. */
    uint8_t *data = swy_malloc(total > 0 ? total : 1);
    if (data == NULL) {
        swy_free(lens);
        evbuffer_drain(in, total);
        return "out of memory for a collective result";
    }
    if (total > 0)
        evbuffer_remove(in, data, total);

    pthread_mutex_lock(&boot->lock);
    swy_free(boot->result_data); /* a late result nobody waits for */
    swy_free(boot->result_lens);
    boot->result_seq = seq;
    boot->result_data = data;
    boot->result_lens = lens;
    pthread_cond_broadcast(&boot->cond);
    pthread_mutex_unlock(&boot->lock);
    return NULL;
}

/* Returns NULL or what is wrong with the message. */
static const char *client_handle(swy_boot_t *boot, uint32_t type,
                                 const uint8_t *payload, size_t len)
{
    switch (type) {
    case SWY_BOOT_MSG_HEARTBEAT:
        return NULL;
    case SWY_BOOT_MSG_READY:
        pthread_mutex_lock(&boot->lock);
        boot->ready = 1;
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
        return NULL;
    case SWY_BOOT_MSG_REJECT: {
        swy_status_t status;
        char msg[CLIENT_MSG_MAX];
        if (client_handle_status_msg(payload, len, &status, msg,
                                     sizeof(msg)) != 0)
            return "malformed REJECT";
        pthread_mutex_lock(&boot->lock);
        int was_ready = boot->ready;
        if (boot->join_status == SWY_OK) {
            boot->join_status = status;
            snprintf(boot->join_msg, sizeof(boot->join_msg), "%s", msg);
        }
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
        if (was_ready) {
            char failure[CLIENT_MSG_MAX + 192];
            snprintf(failure, sizeof(failure),
                     "the root at %s dropped rank %d: %s", boot->root_text,
                     boot->rank, msg);
            client_record_failure(boot, status, failure);
        }
        return NULL;
    }
    case SWY_BOOT_MSG_FAILED: {
        swy_status_t status;
        char msg[CLIENT_MSG_MAX];
        if (client_handle_status_msg(payload, len, &status, msg,
                                     sizeof(msg)) != 0)
            return "malformed FAILED";
        client_record_failure(boot, status, msg);
        return NULL;
    }
    case SWY_BOOT_MSG_COMM_FAILED: {
        swy_status_t status;
        char msg[CLIENT_MSG_MAX];
        if (len < 12 || client_handle_status_msg(payload + 8, len - 8,
                                                 &status, msg,
                                                 sizeof(msg)) != 0)
            return "malformed COMM_FAILED";
        client_record_comm_failure(boot, swy_boot_get_u64(payload), status,
                                   msg);
        return NULL;
    }
    case SWY_BOOT_MSG_QUIESCED: {
        if (len != 8)
            return "malformed QUIESCED";
        uint32_t rank = swy_boot_get_u32(payload);
        uint32_t flags = swy_boot_get_u32(payload + 4);
        if (rank >= (uint32_t)boot->nranks)
            return "QUIESCED names a rank out of range";
        if ((flags & ~(uint32_t)SWY_BOOT_QUIESCED_GONE) != 0)
            return "QUIESCED with unknown flags";
        pthread_mutex_lock(&boot->lock);
        /* 1 quiesced, 2 gone; a rank that said it first and left later
         * ends gone. */
        if (boot->quiesced[rank] < 2)
            boot->quiesced[rank] = flags & SWY_BOOT_QUIESCED_GONE ? 2 : 1;
        pthread_mutex_unlock(&boot->lock);
        return NULL;
    }
    case SWY_BOOT_MSG_MISSING: {
        if (len < 16)
            return "malformed MISSING";
        uint32_t count = swy_boot_get_u32(payload + 12);
        if (len != 16 + 4 * (size_t)count)
            return "malformed MISSING";
        char list[CLIENT_MSG_MAX - 64];
        format_rank_list(payload + 16, count, list, sizeof(list));
        pthread_mutex_lock(&boot->lock);
        boot->missing_seq = swy_boot_get_u64(payload);
        snprintf(boot->missing_text, sizeof(boot->missing_text),
                 "%u of %d ranks joined; missing ranks: %s",
                 swy_boot_get_u32(payload + 8), boot->nranks,
                 count > 0 ? list : "none");
        if (boot->missing_seq != 0)
            snprintf(boot->missing_text, sizeof(boot->missing_text),
                     "ranks that have not entered it: %s",
                     count > 0 ? list : "none (it just completed)");
        boot->missing_valid = 1;
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
        return NULL;
    }
    default:
        return "unexpected message type";
    }
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
    swy_boot_t *boot = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    boot->last_recv_s = swy_time_s();
    while (!atomic_load(&boot->conn_lost)) {
        uint32_t type, len;
        if (!swy_boot_frame_peek(in, &type, &len))
            return;
        const char *problem = NULL;
        char detail[160];
        if (type == 0 || type > SWY_BOOT_MSG_LAST)
            problem = "unknown message type";
        else if (len > SWY_BOOT_MAX_MSG)
            problem = "oversized frame";
        if (problem != NULL) {
            snprintf(detail, sizeof(detail),
                     ": %s (type %u, %u bytes) from the root", problem, type,
                     len);
            client_lost(boot, detail);
            return;
        }
        if (!swy_boot_frame_ready(bev, len))
            return;
        if (type == SWY_BOOT_MSG_COLL_RESULT) {
            problem = client_take_result(boot, in, len);
        } else {
            uint8_t small[256];
            uint8_t *payload = len <= sizeof(small) ? small : swy_malloc(len);
            if (payload == NULL) {
                evbuffer_drain(in, len);
                problem = "out of memory for a message";
            } else {
                evbuffer_remove(in, payload, len);
                problem = client_handle(boot, type, payload, len);
                if (payload != small)
                    swy_free(payload);
            }
        }
        if (problem != NULL) {
            snprintf(detail, sizeof(detail), ": %s (%s, %u bytes)", problem,
                     swy_boot_msg_name(type), len);
            client_lost(boot, detail);
            return;
        }
    }
}

static void client_shutdown_if_drained(swy_boot_t *boot)
{
    if (boot->shut_wr ||
        evbuffer_get_length(bufferevent_get_output(boot->bev)) > 0)
        return;
    /* Half-close: GOODBYE is out; the root closes in turn, and reading on
     * until its EOF means no reset can destroy GOODBYE in flight. */
    shutdown(bufferevent_getfd(boot->bev), SHUT_WR);
    boot->shut_wr = 1;
}

static void client_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    swy_boot_t *boot = arg;
    if (atomic_load(&boot->closing))
        client_shutdown_if_drained(boot);
}

static void client_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    swy_boot_t *boot = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    if (atomic_load(&boot->closing)) {
        atomic_store(&boot->conn_lost, 1);
        event_base_loopbreak(boot->base);
        return;
    }
    if (atomic_load(&boot->conn_lost))
        return;
    char detail[160] = "";
    if (what & BEV_EVENT_ERROR)
        snprintf(detail, sizeof(detail), " (%s)",
                 strerror(EVUTIL_SOCKET_ERROR()));
    client_lost(boot, detail);
}

static void client_heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_t *boot = arg;
    bufferevent_lock(boot->bev);
    if (!atomic_load(&boot->conn_lost) && !atomic_load(&boot->closing)) {
        double silent = swy_time_s() - boot->last_recv_s;
        if (silent > boot->outage_s) {
            char detail[200];
            snprintf(detail, sizeof(detail),
                     ": silent for %.1f s, over the tolerated outage of "
                     "%.1f s (SWY_OUTAGE_S; stopped, hung or cut off)",
                     silent, boot->outage_s);
            client_lost_status(boot, SWY_ERR_TIMEOUT, detail);
        } else {
            swy_boot_frame_write(boot->bev, SWY_BOOT_MSG_HEARTBEAT, NULL, 0);
        }
    }
    bufferevent_unlock(boot->bev);
}

static void client_close_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_t *boot = arg;
    if (atomic_load(&boot->conn_lost)) {
        event_base_loopbreak(boot->base);
        return;
    }
    bufferevent_lock(boot->bev);
    client_shutdown_if_drained(boot);
    bufferevent_unlock(boot->bev);
    struct timeval wait = {(time_t)CLIENT_CLOSE_WAIT_S, 0};
    evtimer_add(boot->guard_ev, &wait);
}

static void client_guard_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_t *boot = arg;
    swy_debug("boot", "rank %d: the root at %s did not close within %.0f s "
              "of GOODBYE",
              boot->rank, boot->root_text, CLIENT_CLOSE_WAIT_S);
    event_base_loopbreak(boot->base);
}

static void *client_thread_main(void *arg)
{
    swy_boot_t *boot = arg;
    swy_boot_block_sigpipe();
    event_base_loop(boot->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* ---- handshake with blocking sockets ---- */

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
static swy_status_t client_handshake(const swy_boot_addr_t *addr, int rank,
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
        client_handle_status_msg(answer + SWY_BOOT_HEADER_LEN, len,
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

/* Stop the loop (after GOODBYE when say_goodbye) and free everything. */
static void client_destroy(swy_boot_t *boot, int say_goodbye)
{
    if (boot->thread_started) {
        bufferevent_lock(boot->bev);
        if (say_goodbye && !atomic_load(&boot->conn_lost) &&
            !atomic_load(&boot->closing))
            swy_boot_frame_write(boot->bev, SWY_BOOT_MSG_GOODBYE, NULL, 0);
        atomic_store(&boot->closing, 1);
        bufferevent_unlock(boot->bev);
        event_active(boot->close_ev, EV_TIMEOUT, 0);
        pthread_join(boot->thread, NULL);
    }
    if (boot->heartbeat_ev != NULL)
        event_free(boot->heartbeat_ev);
    if (boot->close_ev != NULL)
        event_free(boot->close_ev);
    if (boot->guard_ev != NULL)
        event_free(boot->guard_ev);
    if (boot->bev != NULL)
        bufferevent_free(boot->bev); /* closes the socket */
    if (boot->base != NULL)
        event_base_free(boot->base);
    if (boot->event_fd >= 0)
        close(boot->event_fd);
    if (boot->comm_event_fd >= 0)
        close(boot->comm_event_fd);
    swy_free(boot->result_data);
    swy_free(boot->result_lens);
    swy_free(boot->quiesced);
    pthread_cond_destroy(&boot->cond);
    pthread_mutex_destroy(&boot->lock);
    swy_free(boot);
}

static swy_status_t client_start_loop(swy_boot_t *boot, int fd)
{
    boot->base = event_base_new();
    if (boot->base == NULL) {
        close(fd);
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: event_base_new failed", boot->rank);
    }
    boot->bev = bufferevent_socket_new(
        boot->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_THREADSAFE);
    if (boot->bev == NULL) {
        close(fd);
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: bufferevent_socket_new failed",
                           boot->rank);
    }
    boot->heartbeat_ev =
        event_new(boot->base, -1, EV_PERSIST, client_heartbeat_cb, boot);
    boot->close_ev = event_new(boot->base, -1, 0, client_close_cb, boot);
    boot->guard_ev = evtimer_new(boot->base, client_guard_cb, boot);
    if (boot->heartbeat_ev == NULL || boot->close_ev == NULL ||
        boot->guard_ev == NULL)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: event_new failed", boot->rank);
    boot->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    boot->comm_event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (boot->event_fd < 0 || boot->comm_event_fd < 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: eventfd failed: %s", boot->rank,
                           strerror(errno));

    boot->last_recv_s = swy_time_s();
    bufferevent_set_max_single_read(boot->bev, 1 << 20);
    bufferevent_setcb(boot->bev, client_read_cb, client_write_cb,
                      client_event_cb, boot);
    bufferevent_enable(boot->bev, EV_READ | EV_WRITE);
    struct timeval period;
    period.tv_sec = (time_t)boot->heartbeat_s;
    period.tv_usec =
        (suseconds_t)((boot->heartbeat_s - (double)period.tv_sec) * 1e6);
    event_add(boot->heartbeat_ev, &period);

    int rc = pthread_create(&boot->thread, NULL, client_thread_main, boot);
    if (rc != 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: pthread_create failed: %s", boot->rank,
                           strerror(rc));
    boot->thread_started = 1;
    return SWY_OK;
}

/* Ask the root who is missing from collective seq (0: the join) and wait
 * briefly for the answer; fills text ("" if the root did not answer). */
static void client_ask_missing(swy_boot_t *boot, uint64_t seq, char *text,
                               size_t text_len)
{
    text[0] = '\0';
    uint8_t payload[8];
    swy_boot_put_u64(payload, seq);
    pthread_mutex_lock(&boot->lock);
    boot->missing_valid = 0;
    pthread_mutex_unlock(&boot->lock);
    if (client_send(boot, SWY_BOOT_MSG_MISSING_REQ, payload, sizeof(payload),
                    NULL, 0) != 0)
        return;
    double deadline = swy_time_s() + CLIENT_MISSING_WAIT_S;
    pthread_mutex_lock(&boot->lock);
    while (!(boot->missing_valid && boot->missing_seq == seq) &&
           swy_time_s() < deadline && !atomic_load(&boot->conn_lost))
        client_lock_wait(boot, deadline);
    if (boot->missing_valid && boot->missing_seq == seq)
        snprintf(text, text_len, "%s", boot->missing_text);
    pthread_mutex_unlock(&boot->lock);
}

static swy_status_t client_failure_error(swy_boot_t *boot)
{
    char msg[SWY_ERRMSG_MAX];
    swy_status_t status = swy_boot_failure(boot, msg, sizeof(msg));
    return swy_err_set(status, "boot", "%s", msg);
}

swy_status_t swy_boot_connect(const swy_boot_addr_t *addr, int rank,
                              int nranks, double timeout_s,
                              swy_boot_t **boot_p)
{
    if (addr == NULL || boot_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_connect: %s is NULL",
                           addr == NULL ? "addr" : "boot_p");
    if (nranks < 1 || nranks > SWY_BOOT_MAX_RANKS || rank < 0 ||
        rank >= nranks)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_connect: rank %d of nranks %d is out "
                           "of range (nranks 1..%d, rank 0..nranks-1)",
                           rank, nranks, SWY_BOOT_MAX_RANKS);
    if (!(timeout_s > 0))
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_connect: timeout %g s is not positive",
                           timeout_s);
    SWY_CHECK(swy_boot_libevent_init());

    double deadline = swy_time_s() + timeout_s;
    char root_text[96];
    swy_boot_hostport_text(addr->host, addr->port, root_text,
                           sizeof(root_text));
    int fd = -1;
    SWY_CHECK(client_handshake(addr, rank, nranks, root_text, timeout_s,
                               deadline, &fd));

    swy_status_t status;
    swy_boot_t *boot = swy_calloc(1, sizeof(*boot));
    if (boot != NULL &&
        (boot->quiesced = swy_calloc((size_t)nranks, 1)) == NULL) {
        swy_free(boot);
        boot = NULL;
    }
    if (boot == NULL) {
        close(fd);
        return swy_err_set(SWY_ERR_NO_MEMORY, "boot",
                           "rank %d: out of memory", rank);
    }
    boot->rank = rank;
    boot->nranks = nranks;
    boot->event_fd = -1;
    boot->comm_event_fd = -1;
    boot->next_seq = 1;
    snprintf(boot->root_text, sizeof(boot->root_text), "%s", root_text);
    swy_boot_liveness(&boot->heartbeat_s, &boot->outage_s);
    pthread_mutex_init(&boot->lock, NULL);
    pthread_condattr_t cond_attr;
    pthread_condattr_init(&cond_attr);
    pthread_condattr_setclock(&cond_attr, CLOCK_MONOTONIC);
    pthread_cond_init(&boot->cond, &cond_attr);
    pthread_condattr_destroy(&cond_attr);
    atomic_init(&boot->conn_lost, 0);
    atomic_init(&boot->closing, 0);
    atomic_init(&boot->failure_status, SWY_OK);
    atomic_init(&boot->failure_cb_called, 0);

    status = client_start_loop(boot, fd);
    if (status != SWY_OK)
        goto err_destroy;

    pthread_mutex_lock(&boot->lock);
    while (!boot->ready && boot->join_status == SWY_OK &&
           atomic_load(&boot->failure_status) == SWY_OK &&
           swy_time_s() < deadline)
        client_lock_wait(boot, deadline);
    int ready = boot->ready;
    swy_status_t join_status = boot->join_status;
    char join_msg[CLIENT_MSG_MAX];
    snprintf(join_msg, sizeof(join_msg), "%s", boot->join_msg);
    pthread_mutex_unlock(&boot->lock);

    if (join_status != SWY_OK) {
        status = swy_err_set(join_status, "boot",
                             "the root at %s rejected rank %d: %s",
                             root_text, rank, join_msg);
        goto err_destroy;
    }
    if (atomic_load(&boot->failure_status) != SWY_OK) {
        status = client_failure_error(boot);
        goto err_destroy;
    }
    if (!ready) {
        char missing[CLIENT_MSG_MAX];
        client_ask_missing(boot, 0, missing, sizeof(missing));
        status = swy_err_set(SWY_ERR_TIMEOUT, "boot",
                             "rank %d timed out after %.1f s waiting for "
                             "all %d ranks to join at the root %s: %s",
                             rank, timeout_s, nranks, root_text,
                             missing[0] ? missing
                                        : "the root did not say which "
                                          "ranks are missing");
        goto err_destroy;
    }
    swy_debug("boot", "rank %d of %d joined the job at %s", rank, nranks,
              root_text);
    *boot_p = boot;
    return SWY_OK;

err_destroy:
    /* GOODBYE: giving up on the join is not a death the others must be
     * told about; they run into their own timeout or rejection. */
    client_destroy(boot, 1);
    return status;
}

int swy_boot_rank(const swy_boot_t *boot)
{
    return boot->rank;
}

int swy_boot_nranks(const swy_boot_t *boot)
{
    return boot->nranks;
}

swy_status_t swy_boot_allgather(swy_boot_t *boot, const void *mine,
                                size_t len, double timeout_s, void **all_p,
                                size_t *lens_p)
{
    if (boot == NULL || all_p == NULL || lens_p == NULL ||
        (mine == NULL && len > 0))
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_allgather: NULL argument");
    if (len > SWY_BOOT_MAX_MSG - 8)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "rank %d: allgather blob of %zu bytes exceeds "
                           "the control plane's %u-byte message limit",
                           boot->rank, len, (unsigned)SWY_BOOT_MAX_MSG);
    if (atomic_load(&boot->failure_status) != SWY_OK)
        return client_failure_error(boot);

    uint64_t seq = boot->next_seq++;
    uint8_t seq_be[8];
    swy_boot_put_u64(seq_be, seq);
    if (client_send(boot, SWY_BOOT_MSG_COLL, seq_be, sizeof(seq_be), mine,
                    len) != 0) {
        if (atomic_load(&boot->failure_status) != SWY_OK)
            return client_failure_error(boot);
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: cannot queue allgather #%llu for the "
                           "root at %s",
                           boot->rank, (unsigned long long)seq,
                           boot->root_text);
    }

    double deadline = swy_time_s() + timeout_s;
    pthread_mutex_lock(&boot->lock);
    while (boot->result_seq != seq &&
           atomic_load(&boot->failure_status) == SWY_OK &&
           swy_time_s() < deadline)
        client_lock_wait(boot, deadline);
    uint8_t *data = NULL;
    uint64_t *lens = NULL;
    if (boot->result_seq == seq) {
        data = boot->result_data;
        lens = boot->result_lens;
        boot->result_data = NULL;
        boot->result_lens = NULL;
        boot->result_seq = 0;
    }
    pthread_mutex_unlock(&boot->lock);

    if (data == NULL) {
        if (atomic_load(&boot->failure_status) != SWY_OK)
            return client_failure_error(boot);
        char missing[CLIENT_MSG_MAX];
        client_ask_missing(boot, seq, missing, sizeof(missing));
        return swy_err_set(SWY_ERR_TIMEOUT, "boot",
                           "rank %d: control-plane allgather #%llu timed "
                           "out after %.1f s; %s",
                           boot->rank, (unsigned long long)seq, timeout_s,
                           missing[0] ? missing
                                      : "the root did not say which ranks "
                                        "are missing");
    }
    for (int r = 0; r < boot->nranks; r++)
        lens_p[r] = (size_t)lens[r];
    swy_free(lens);
    *all_p = data;
    return SWY_OK;
}

swy_status_t swy_boot_barrier(swy_boot_t *boot, double timeout_s)
{
    if (boot == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_barrier: boot is NULL");
    size_t *lens = swy_calloc((size_t)boot->nranks, sizeof(*lens));
    if (lens == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "boot",
                           "rank %d: out of memory for a barrier",
                           boot->rank);
    void *all = NULL;
    swy_status_t status =
        swy_boot_allgather(boot, NULL, 0, timeout_s, &all, lens);
    swy_free(all);
    swy_free(lens);
    return status;
}

void swy_boot_report_failure(swy_boot_t *boot, swy_status_t status,
                             const char *msg)
{
    if (boot == NULL)
        return;
    if (status >= SWY_OK)
        status = SWY_ERR_REMOTE;
    if (msg == NULL)
        msg = "";
    client_record_failure(boot, status, msg);
    uint8_t head[4];
    swy_boot_put_u32(head, (uint32_t)(int32_t)status);
    size_t len = strnlen(msg, CLIENT_MSG_MAX - 1);
    if (client_send(boot, SWY_BOOT_MSG_FAILED, head, sizeof(head), msg,
                    len) != 0)
        swy_debug("boot", "rank %d: could not relay a failure to the "
                  "root at %s (connection gone)",
                  boot->rank, boot->root_text);
}

void swy_boot_report_comm_failure(swy_boot_t *boot, uint64_t key,
                                  swy_status_t status, const char *msg)
{
    if (boot == NULL)
        return;
    if (status >= SWY_OK)
        status = SWY_ERR_REMOTE;
    if (msg == NULL)
        msg = "";
    client_record_comm_failure(boot, key, status, msg);
    uint8_t head[12];
    swy_boot_put_u64(head, key);
    swy_boot_put_u32(head + 8, (uint32_t)(int32_t)status);
    size_t len = strnlen(msg, CLIENT_MSG_MAX - 1);
    if (client_send(boot, SWY_BOOT_MSG_COMM_FAILED, head, sizeof(head), msg,
                    len) != 0)
        swy_debug("boot", "rank %d: could not relay a communicator's "
                  "failure to the root at %s (connection gone)",
                  boot->rank, boot->root_text);
}

int swy_boot_comm_failure_fd(swy_boot_t *boot)
{
    return boot != NULL ? boot->comm_event_fd : -1;
}

uint64_t swy_boot_comm_failures(swy_boot_t *boot)
{
    return boot != NULL ? atomic_load(&boot->comm_failures_seen) : 0;
}

swy_status_t swy_boot_comm_failure(swy_boot_t *boot, uint64_t key, char *msg,
                                   size_t len)
{
    swy_status_t status = SWY_OK;
    if (boot == NULL)
        return SWY_OK;
    pthread_mutex_lock(&boot->lock);
    for (int i = 0; i < boot->n_comm_failures; i++)
        if (boot->comm_failures[i].key == key) {
            status = boot->comm_failures[i].status;
            if (msg != NULL && len > 0)
                snprintf(msg, len, "%s", boot->comm_failures[i].msg);
            break;
        }
    pthread_mutex_unlock(&boot->lock);
    return status;
}

swy_status_t swy_boot_failure(swy_boot_t *boot, char *msg, size_t len)
{
    if (boot == NULL)
        return SWY_OK;
    swy_status_t status = atomic_load(&boot->failure_status);
    if (status == SWY_OK)
        return SWY_OK;
    if (msg != NULL && len > 0) {
        pthread_mutex_lock(&boot->lock);
        snprintf(msg, len, "%s", boot->failure_msg);
        pthread_mutex_unlock(&boot->lock);
    }
    return status;
}

void swy_boot_set_failure_callback(swy_boot_t *boot, void (*cb)(void *arg),
                                   void *arg)
{
    if (boot == NULL)
        return;
    pthread_mutex_lock(&boot->lock);
    boot->failure_cb = cb;
    boot->failure_cb_arg = arg;
    int failed = atomic_load(&boot->failure_status) != SWY_OK;
    pthread_mutex_unlock(&boot->lock);
    /* A failure that arrived before the callback was set still calls it
     * (once), so nobody sleeps through it. */
    if (failed && cb != NULL && !atomic_exchange(&boot->failure_cb_called, 1))
        cb(arg);
}

void swy_boot_report_quiesced(swy_boot_t *boot)
{
    if (boot == NULL)
        return;
    if (client_send(boot, SWY_BOOT_MSG_QUIESCED, NULL, 0, NULL, 0) != 0)
        swy_debug("boot", "rank %d: could not tell the root at %s that it "
                  "is quiesced (connection gone)", boot->rank,
                  boot->root_text);
}

/* boot->quiesced[rank]: 0, 1 quiesced, 2 gone; 0 out of range. */
static int peer_quiesce_state(swy_boot_t *boot, int rank)
{
    if (boot == NULL || rank < 0 || rank >= boot->nranks)
        return 0;
    pthread_mutex_lock(&boot->lock);
    int state = boot->quiesced[rank];
    pthread_mutex_unlock(&boot->lock);
    return state;
}

int swy_boot_peer_quiesced(swy_boot_t *boot, int rank)
{
    return peer_quiesce_state(boot, rank) != 0;
}

int swy_boot_peer_gone(swy_boot_t *boot, int rank)
{
    return peer_quiesce_state(boot, rank) == 2;
}

int swy_boot_lost(swy_boot_t *boot)
{
    return boot != NULL && atomic_load(&boot->conn_lost);
}

int swy_boot_failure_fd(swy_boot_t *boot)
{
    return boot == NULL ? -1 : boot->event_fd;
}

void swy_boot_finalize(swy_boot_t *boot)
{
    if (boot == NULL)
        return;
    client_destroy(boot, 1);
}

void swy_boot_abort(swy_boot_t *boot, const char *why)
{
    if (boot == NULL)
        return;
    char msg[CLIENT_MSG_MAX];
    char own_prefix[32];
    snprintf(own_prefix, sizeof(own_prefix), "rank %d ", boot->rank);
    if (why != NULL && strncmp(why, own_prefix, strlen(own_prefix)) == 0)
        snprintf(msg, sizeof(msg), "%s", why); /* already names the rank */
    else
        snprintf(msg, sizeof(msg), "rank %d aborted%s%s", boot->rank,
                 why != NULL && why[0] ? ": " : "", why != NULL ? why : "");
    swy_boot_report_failure(boot, SWY_ERR_REMOTE, msg);
    /* FAILED went first; GOODBYE then keeps the root from announcing a
     * second, less precise failure for the closed connection. */
    client_destroy(boot, 1);
}
