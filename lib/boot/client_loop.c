/* A rank's libevent loop in its background thread: it reads every frame
 * the root sends, hands each to its handler, and closes the connection
 * (after GOODBYE) when the rank leaves. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "boot/client.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* finalize: how long to wait for the root to close after GOODBYE. */
#define CLIENT_CLOSE_WAIT_S 2.0

void swy_boot_client_wait(swy_boot_t *boot, double deadline_s)
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

/* Queue a frame from any thread. Returns -1 when the connection is gone
 * or closing (the caller then reports the recorded failure). */
int swy_boot_client_send(swy_boot_t *boot, uint32_t type, const void *part1,
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

void swy_boot_client_flush(swy_boot_t *boot, double timeout_s)
{
    if (boot->thread_started && pthread_equal(pthread_self(), boot->thread))
        return;
    double end = swy_time_s() + timeout_s;
    for (;;) {
        bufferevent_lock(boot->bev);
        size_t queued =
            evbuffer_get_length(bufferevent_get_output(boot->bev));
        bufferevent_unlock(boot->bev);
        if (queued == 0 || atomic_load(&boot->conn_lost) ||
            swy_time_s() >= end)
            return;
        struct timespec pause = {0, 100 * 1000};
        nanosleep(&pause, NULL);
    }
}

int swy_boot_client_status_msg(const uint8_t *payload, size_t len,
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
        if (swy_boot_client_status_msg(payload, len, &status, msg,
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
            swy_boot_client_record_failure(boot, status, failure);
        }
        return NULL;
    }
    case SWY_BOOT_MSG_FAILED: {
        swy_status_t status;
        char msg[CLIENT_MSG_MAX];
        if (swy_boot_client_status_msg(payload, len, &status, msg,
                                       sizeof(msg)) != 0)
            return "malformed FAILED";
        swy_boot_client_record_failure(boot, status, msg);
        return NULL;
    }
    case SWY_BOOT_MSG_COMM_FAILED: {
        swy_status_t status;
        char msg[CLIENT_MSG_MAX];
        if (len < 12 ||
            swy_boot_client_status_msg(payload + 8, len - 8, &status, msg,
                                       sizeof(msg)) != 0)
            return "malformed COMM_FAILED";
        swy_boot_client_record_comm_failure(boot, swy_boot_get_u64(payload),
                                            status, msg);
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
        swy_boot_client_format_ranks(payload + 16, count, list, sizeof(list));
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
            swy_boot_client_lost(boot, detail);
            return;
        }
        if (!swy_boot_frame_ready(bev, len))
            return;
        if (type == SWY_BOOT_MSG_COLL_RESULT) {
            problem = swy_boot_client_take_result(boot, in, len);
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
            swy_boot_client_lost(boot, detail);
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
    swy_boot_client_lost(boot, detail);
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

/* Stop the loop (after GOODBYE when say_goodbye) and free everything. */
void swy_boot_client_destroy(swy_boot_t *boot, int say_goodbye)
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

swy_status_t swy_boot_client_loop_start(swy_boot_t *boot, int fd)
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
    boot->heartbeat_ev = event_new(boot->base, -1, EV_PERSIST,
                                   swy_boot_client_heartbeat_cb, boot);
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
