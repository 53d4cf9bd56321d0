/* The root's connections on its libevent loop: frames read and checked,
 * each handed to its handler by the connection's state, REJECT and the
 * closing of a connection. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "boot/root.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/list.h"
#include "util/log.h"

/* A closing connection waits this long for the peer's EOF so that a
 * REJECT it was sent is not destroyed by a reset. */
#define ROOT_LINGER_S 2.0
/* Warnings a peer can repeat: this many lines per ROOT_WARN_PERIOD_S. */
#define ROOT_WARN_BURST 10

void swy_boot_root_send(root_conn_t *conn, uint32_t type, const void *payload,
                        size_t len)
{
    if (swy_boot_frame_write(conn->bev, type, payload, len) != 0)
        swy_warn("boot", "root %s: cannot queue %s for %s: out of memory",
                 conn->root->addr_text, swy_boot_msg_name(type), conn->peer);
}

void swy_boot_root_send_status(root_conn_t *conn, uint32_t type,
                               swy_status_t status, const char *msg)
{
    uint8_t head[4];
    swy_boot_put_u32(head, (uint32_t)(int32_t)status);
    if (swy_boot_frame_write2(conn->bev, type, head, sizeof(head), msg,
                              strlen(msg)) != 0)
        swy_warn("boot", "root %s: cannot queue %s for %s: out of memory",
                 conn->root->addr_text, swy_boot_msg_name(type), conn->peer);
}

/* A warning that a peer without the secret can repeat at will: rate
 * limited, with the count of the ones held back. */
void swy_boot_root_warn_limited(swy_boot_root_t *root, const char *fmt, ...)
{
    unsigned suppressed = 0;
    if (!swy_log_enabled(SWY_LOG_WARN, "boot") ||
        !swy_log_limit(&root->warn_limit, ROOT_WARN_PERIOD_S,
                       ROOT_WARN_BURST, &suppressed))
        return;
    char text[1280];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (suppressed > 0)
        swy_warn("boot", "%s (%u similar warnings not logged before this "
                 "one)", text, suppressed);
    else
        swy_warn("boot", "%s", text);
}

/* Log, tell the peer why (REJECT) and close. A joined rank that is
 * dropped this way counts as a failed rank. */
void swy_boot_root_conn_reject(root_conn_t *conn, swy_status_t status,
                               const char *fmt, ...)
{
    swy_boot_root_t *root = conn->root;
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);

    if (conn->state == CONN_JOINED) {
        swy_warn("boot", "root %s: dropping rank %d at %s: %s",
                 root->addr_text, conn->rank, conn->peer, reason);
        char died[1200];
        snprintf(died, sizeof(died), "dropped by the root: %s", reason);
        swy_boot_root_rank_died(root, conn->rank, died);
    } else {
        swy_boot_root_warn_limited(root,
                                   "root %s: rejected connection from %s: %s",
                                   root->addr_text, conn->peer, reason);
    }
    swy_boot_root_send_status(conn, SWY_BOOT_MSG_REJECT, status, reason);
    swy_boot_root_conn_close(conn);
}

/* Returns 0 when the connection was freed (the caller must stop). Takes
 * ownership of payload. */
static int conn_handle(root_conn_t *conn, uint32_t type, uint8_t *payload,
                       size_t len)
{
    swy_boot_root_t *root = conn->root;
    switch (conn->state) {
    case CONN_CHALLENGED:
        if (type != SWY_BOOT_MSG_PROOF)
            swy_boot_root_conn_reject(
                conn, SWY_ERR_INVALID_ARG,
                "expected PROOF of the job secret, got %s (type %u)",
                swy_boot_msg_name(type), type);
        else
            swy_boot_root_handle_proof(conn, payload, len);
        break;
    case CONN_PROVED:
        if (type != SWY_BOOT_MSG_HELLO)
            swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
                                      "expected HELLO, got %s (type %u)",
                                      swy_boot_msg_name(type), type);
        else
            swy_boot_root_handle_hello(conn, payload, len);
        break;
    case CONN_JOINED:
        switch (type) {
        case SWY_BOOT_MSG_HEARTBEAT:
            break;
        case SWY_BOOT_MSG_COLL:
            swy_boot_root_handle_coll(conn, payload, len);
            return 1;
        case SWY_BOOT_MSG_FAILED:
            swy_boot_root_handle_failed(conn, payload, len);
            break;
        case SWY_BOOT_MSG_MISSING_REQ:
            swy_boot_root_handle_missing_req(conn, payload, len);
            break;
        case SWY_BOOT_MSG_COMM_FAILED:
            swy_boot_root_handle_comm_failed(conn, payload, len);
            break;
        case SWY_BOOT_MSG_QUIESCED:
            if (len != 0) {
                swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
                                          "malformed QUIESCED of %zu bytes",
                                          len);
                break;
            }
            swy_debug("boot", "root %s: rank %d is quiesced",
                      root->addr_text, conn->rank);
            swy_boot_root_broadcast_quiesced(root, conn->rank, 0);
            break;
        case SWY_BOOT_MSG_GOODBYE: {
            root_slot_t *slot = &root->slots[conn->rank];
            swy_info("boot", "root %s: rank %d said goodbye",
                     root->addr_text, conn->rank);
            swy_boot_root_slot_drop(slot);
            slot->conn = NULL;
            /* Also before the job formed (its join timed out): the rank
             * stays "joined" for the others' missing-rank reports, and
             * the job starts afresh once every rank has left. */
            slot->state = SLOT_LEFT;
            root->nlive--;
            if (root->ready)
                swy_boot_root_broadcast_quiesced(root, conn->rank, 1);
            swy_free(payload);
            swy_boot_root_conn_free(conn);
            swy_boot_root_maybe_reset(root);
            swy_boot_root_check_exit(root);
            return 0;
        }
        default:
            swy_boot_root_conn_reject(
                conn, SWY_ERR_INVALID_ARG,
                "unexpected %s (type %u) from a joined rank",
                swy_boot_msg_name(type), type);
            break;
        }
        break;
    case CONN_CLOSING:
        break;
    }
    swy_free(payload);
    return 1;
}

void swy_boot_root_conn_read_cb(struct bufferevent *bev, void *arg)
{
    root_conn_t *conn = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    conn->last_recv_s = swy_time_s();
    while (conn->state != CONN_CLOSING) {
        uint32_t type, len;
        if (!swy_boot_frame_peek(in, &type, &len))
            return;
        if (type == 0 || type > SWY_BOOT_MSG_LAST) {
            swy_boot_root_conn_reject(
                conn, SWY_ERR_INVALID_ARG,
                "unknown message type %u (length field %u)", type, len);
            break;
        }
        size_t limit = conn->state == CONN_JOINED
                           ? SWY_BOOT_MAX_MSG
                           : SWY_BOOT_MAX_HANDSHAKE_MSG;
        if (len > limit) {
            swy_boot_root_conn_reject(
                conn, SWY_ERR_INVALID_ARG,
                "%s frame of %u bytes exceeds the %zu-byte limit%s",
                swy_boot_msg_name(type), len, limit,
                conn->state == CONN_JOINED ? ""
                                           : " before the handshake completes");
            break;
        }
        if (!swy_boot_frame_ready(bev, len))
            return;
        uint8_t *payload = NULL;
        if (len > 0) {
            payload = swy_malloc(len);
            if (payload == NULL) {
                swy_boot_root_conn_reject(conn, SWY_ERR_NO_MEMORY,
                                          "root out of memory for a %u-byte %s",
                                          len, swy_boot_msg_name(type));
                break;
            }
            evbuffer_remove(in, payload, len);
        }
        if (!conn_handle(conn, type, payload, len))
            return;
    }
    /* Closing: whatever else the peer sends is discarded. */
    evbuffer_drain(in, evbuffer_get_length(in));
}

void swy_boot_root_conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    root_conn_t *conn = arg;
    swy_boot_root_t *root = conn->root;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    size_t partial = evbuffer_get_length(bufferevent_get_input(bev));
    char detail[160] = "";
    if (what & BEV_EVENT_ERROR)
        snprintf(detail, sizeof(detail), " (%s)",
                 strerror(EVUTIL_SOCKET_ERROR()));
    if (partial > 0 && conn->state != CONN_CLOSING)
        snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
                 " in the middle of a frame (%zu bytes of it received)",
                 partial);

    switch (conn->state) {
    case CONN_CHALLENGED:
    case CONN_PROVED:
        swy_boot_root_warn_limited(
            root,
            "root %s: rejected connection from %s: closed "
            "before completing the handshake%s",
            root->addr_text, conn->peer, detail);
        break;
    case CONN_JOINED: {
        char reason[256];
        snprintf(reason, sizeof(reason),
                 "control connection closed without goodbye");
        if (detail[0] != '\0')
            swy_warn("boot", "root %s: rank %d at %s: connection lost%s",
                     root->addr_text, conn->rank, conn->peer, detail);
        swy_boot_root_rank_died(root, conn->rank, reason);
        break;
    }
    case CONN_CLOSING:
        break;
    }
    swy_boot_root_conn_free(conn);
    swy_boot_root_maybe_reset(root);
    swy_boot_root_check_exit(root);
}

static void conn_closing_write_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    /* REJECT is out: half-close and wait for the peer's EOF (or the
     * linger timer) before freeing, so the peer can read it. */
    shutdown(bufferevent_getfd(bev), SHUT_WR);
}

void swy_boot_root_conn_linger_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    root_conn_t *conn = arg;
    swy_boot_root_t *root = conn->root;
    swy_boot_root_conn_free(conn);
    swy_boot_root_check_exit(root);
}

void swy_boot_root_conn_close(root_conn_t *conn)
{
    if (conn->state == CONN_JOINED) {
        root_slot_t *slot = &conn->root->slots[conn->rank];
        if (slot->conn == conn)
            slot->conn = NULL;
    }
    conn->state = CONN_CLOSING;
    bufferevent_setwatermark(conn->bev, EV_READ, 0, 0);
    bufferevent_setcb(conn->bev, swy_boot_root_conn_read_cb,
                      conn_closing_write_cb, swy_boot_root_conn_event_cb, conn);
    if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0)
        shutdown(bufferevent_getfd(conn->bev), SHUT_WR);
    struct timeval linger = {(time_t)ROOT_LINGER_S, 0};
    evtimer_add(conn->linger_ev, &linger);
}

void swy_boot_root_conn_free(root_conn_t *conn)
{
    if (conn == NULL)
        return;
    swy_boot_root_t *root = conn->root;
    if (conn->state == CONN_JOINED && root->slots != NULL &&
        root->slots[conn->rank].conn == conn)
        root->slots[conn->rank].conn = NULL;
    swy_list_del(&conn->link);
    /* Close the socket now: libevent would close it in a deferred
     * callback, after a flood of accepts has run out of fds. */
    evutil_socket_t fd = bufferevent_getfd(conn->bev);
    bufferevent_setfd(conn->bev, -1);
    bufferevent_free(conn->bev);
    if (fd >= 0)
        evutil_closesocket(fd);
    event_free(conn->linger_ev);
    swy_free(conn);
}
