/* The root admits ranks: accept a connection (within the bounds that keep
 * a flood from taking the fds), challenge it, check its proof of the job
 * secret and its HELLO, answer with the root's own proof, and say READY
 * once every rank joined. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "boot/root.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/list.h"
#include "util/log.h"

/* accept() failing (out of fds): wait before trying again, doubling. */
#define ROOT_ACCEPT_BACKOFF_MIN_S 0.01
#define ROOT_ACCEPT_BACKOFF_MAX_S 1.0

static const char *slot_state_name(slot_state_t state)
{
    switch (state) {
    case SLOT_EMPTY: return "not joined";
    case SLOT_LIVE: return "joined";
    case SLOT_LEFT: return "left";
    case SLOT_DEAD: return "dead";
    }
    return "?";
}

static void root_send_ready(swy_boot_root_t *root)
{
    root->ready = 1;
    root->coll_seq = 1;
    swy_info("boot", "root %s: all %d ranks joined", root->addr_text,
             root->nranks);
    for (int r = 0; r < root->nranks; r++)
        if (root->slots[r].conn != NULL)
            swy_boot_root_send(root->slots[r].conn, SWY_BOOT_MSG_READY, NULL,
                               0);
}

/* The proof covers the HELLO that follows it: kept until then. */
void swy_boot_root_handle_proof(root_conn_t *conn, const uint8_t *payload,
                                size_t len)
{
    if (len != SWY_BOOT_RANK_PROOF_LEN) {
        swy_boot_root_conn_reject(
            conn, SWY_ERR_INVALID_ARG,
            "malformed PROOF of %zu bytes (expected %d; a rank of "
            "another Switchyard version?)",
            len, SWY_BOOT_RANK_PROOF_LEN);
        return;
    }
    memcpy(conn->rank_nonce, payload, SWY_BOOT_NONCE_LEN);
    memcpy(conn->rank_digest, payload + SWY_BOOT_NONCE_LEN,
           SWY_BOOT_DIGEST_LEN);
    conn->state = CONN_PROVED;
}

/* Check the rank's proof over this HELLO; on success answer with the
 * root's own proof, so the rank knows it talks to the job's root before
 * it trusts anything else (even a REJECT that follows). */
static int hello_proven(root_conn_t *conn, const uint8_t *payload,
                        size_t len)
{
    swy_boot_root_t *root = conn->root;
    uint8_t expected[SWY_BOOT_DIGEST_LEN];
    swy_boot_proof(root->secret, SWY_BOOT_PROOF_RANK, conn->nonce,
                   conn->rank_nonce, payload, len, expected);
    if (!swy_boot_digest_equal(conn->rank_digest, expected,
                               SWY_BOOT_DIGEST_LEN)) {
        swy_boot_root_conn_reject(
            conn, SWY_ERR_INVALID_ARG,
            "wrong job secret (the proof of the secret does not "
            "match)");
        return 0;
    }
    uint8_t answer[SWY_BOOT_DIGEST_LEN];
    swy_boot_proof(root->secret, SWY_BOOT_PROOF_ROOT, conn->nonce,
                   conn->rank_nonce, payload, len, answer);
    swy_boot_root_send(conn, SWY_BOOT_MSG_PROOF, answer, sizeof(answer));
    return 1;
}

void swy_boot_root_handle_hello(root_conn_t *conn, const uint8_t *payload,
                                size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (!hello_proven(conn, payload, len))
        return;
    if (len < 12 || len - 12 > SWY_BOOT_MAX_HOSTNAME) {
        swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
                                  "malformed HELLO of %zu bytes", len);
        return;
    }
    int rank = (int32_t)swy_boot_get_u32(payload);
    int nranks = (int32_t)swy_boot_get_u32(payload + 4);
    int pid = (int32_t)swy_boot_get_u32(payload + 8);
    char hostname[SWY_BOOT_MAX_HOSTNAME + 1];
    size_t host_len = len - 12;
    for (size_t i = 0; i < host_len; i++) {
        char c = (char)payload[12 + i];
        /* The name goes into log lines and messages: keep it printable. */
        hostname[i] = (c > ' ' && c < 127) ? c : '?';
    }
    hostname[host_len] = '\0';

    if (nranks < 1 || nranks > SWY_BOOT_MAX_RANKS || rank < 0 ||
        rank >= nranks) {
        swy_boot_root_conn_reject(
            conn, SWY_ERR_INVALID_ARG,
            "rank %d of nranks %d is out of range (nranks "
            "1..%d, rank 0..nranks-1)",
            rank, nranks, SWY_BOOT_MAX_RANKS);
        return;
    }
    if (root->nranks == 0) {
        root->slots = swy_calloc((size_t)nranks, sizeof(*root->slots));
        if (root->slots == NULL) {
            swy_boot_root_conn_reject(conn, SWY_ERR_NO_MEMORY,
                                      "root out of memory for %d ranks",
                                      nranks);
            return;
        }
        root->nranks = nranks;
        root->first_rank = rank;
    } else if (nranks != root->nranks) {
        swy_boot_root_conn_reject(
            conn, SWY_ERR_MISMATCH,
            "rank %d announced nranks %d, but rank %d (the first "
            "to join) announced nranks %d",
            rank, nranks, root->first_rank, root->nranks);
        return;
    }
    root_slot_t *slot = &root->slots[rank];
    if (slot->state != SLOT_EMPTY) {
        swy_boot_root_conn_reject(
            conn, SWY_ERR_MISMATCH,
            "rank %d is already taken (%s, pid %d on %s); this "
            "connection is pid %d on %s",
            rank, slot_state_name(slot->state), slot->pid, slot->hostname, pid,
            hostname);
        return;
    }
    slot->state = SLOT_LIVE;
    slot->conn = conn;
    slot->pid = pid;
    memcpy(slot->hostname, hostname, host_len + 1);
    conn->state = CONN_JOINED;
    conn->rank = rank;
    root->nlive++;
    swy_info("boot", "root %s: rank %d of %d joined (pid %d on %s, %s)",
             root->addr_text, rank, nranks, pid, hostname, conn->peer);
    if (root->nlive == root->nranks)
        root_send_ready(root);
}

/* Keep the connections that are not ranks (handshakes, closing ones)
 * under the cap by dropping the oldest: a rank's handshake takes
 * milliseconds, so what is oldest is what idles. Returns how many
 * were dropped. */
static int root_trim_unjoined(swy_boot_root_t *root, int room)
{
    int unjoined = 0;
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &root->conns) {
        root_conn_t *conn = swy_container_of(pos, root_conn_t, link);
        unjoined += conn->state != CONN_JOINED;
    }
    int dropped = 0;
    swy_list_for_each_safe(pos, tmp, &root->conns) {
        if (unjoined + room <= root->max_unjoined)
            break;
        root_conn_t *conn = swy_container_of(pos, root_conn_t, link);
        if (conn->state == CONN_JOINED)
            continue;
        swy_boot_root_conn_free(conn);
        unjoined--;
        dropped++;
    }
    if (dropped > 0 && !root->unjoined_cap_said) {
        /* Once: a flood would otherwise write a line per connection. */
        root->unjoined_cap_said = 1;
        swy_warn("boot", "root %s: more than %d connections without a "
                 "completed handshake; dropping the oldest ones (said "
                 "once)",
                 root->addr_text, root->max_unjoined);
    }
    return dropped;
}

void swy_boot_root_accept_cb(struct evconnlistener *listener,
                             evutil_socket_t fd, struct sockaddr *sa,
                             int sa_len, void *arg)
{
    (void)listener;
    swy_boot_root_t *root = arg;
    char peer[80];
    swy_boot_sockaddr_text(sa, (socklen_t)sa_len, peer, sizeof(peer));
    root->accept_backoff_s = 0;
    root_trim_unjoined(root, 1);

    root_conn_t *conn = swy_calloc(1, sizeof(*conn));
    if (conn == NULL) {
        swy_warn("boot", "root %s: rejected connection from %s: out of "
                 "memory", root->addr_text, peer);
        evutil_closesocket(fd);
        return;
    }
    snprintf(conn->peer, sizeof(conn->peer), "%s", peer);
    conn->root = root;
    conn->rank = -1;
    conn->state = CONN_CHALLENGED;
    conn->accepted_s = conn->last_recv_s = swy_time_s();
    swy_list_init(&conn->link);
    if (getrandom(conn->nonce, sizeof(conn->nonce), 0) !=
        (ssize_t)sizeof(conn->nonce)) {
        swy_warn("boot", "root %s: rejected connection from %s: "
                 "getrandom for the challenge failed: %s",
                 root->addr_text, peer, strerror(errno));
        evutil_closesocket(fd);
        swy_free(conn);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn->bev = bufferevent_socket_new(root->base, fd, BEV_OPT_CLOSE_ON_FREE);
    conn->linger_ev =
        evtimer_new(root->base, swy_boot_root_conn_linger_cb, conn);
    if (conn->bev == NULL || conn->linger_ev == NULL) {
        swy_warn("boot", "root %s: rejected connection from %s: cannot "
                 "create its libevent objects",
                 root->addr_text, peer);
        if (conn->bev != NULL)
            bufferevent_free(conn->bev);
        else
            evutil_closesocket(fd);
        if (conn->linger_ev != NULL)
            event_free(conn->linger_ev);
        swy_free(conn);
        return;
    }
    swy_list_push_back(&root->conns, &conn->link);
    bufferevent_set_max_single_read(conn->bev, 1 << 20);
    bufferevent_setcb(conn->bev, swy_boot_root_conn_read_cb, NULL,
                      swy_boot_root_conn_event_cb, conn);
    bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
    swy_debug("boot", "root %s: connection from %s", root->addr_text, peer);
    swy_boot_root_send(conn, SWY_BOOT_MSG_CHALLENGE, conn->nonce,
                       sizeof(conn->nonce));
}

void swy_boot_root_accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_root_t *root = arg;
    evconnlistener_enable(root->listener);
}

void swy_boot_root_accept_error_cb(struct evconnlistener *listener, void *arg)
{
    swy_boot_root_t *root = arg;
    int err = EVUTIL_SOCKET_ERROR();
    /* Out of fds (or memory) the pending connection stays queued and the
     * listener would fire again at once: free an idle handshake if there
     * is one, and pause listening for a while, longer each time. */
    int freed = root_trim_unjoined(root, root->max_unjoined / 2);
    if (root->accept_backoff_s == 0)
        root->accept_backoff_s = ROOT_ACCEPT_BACKOFF_MIN_S;
    else if (root->accept_backoff_s < ROOT_ACCEPT_BACKOFF_MAX_S)
        root->accept_backoff_s = SWY_MIN(2 * root->accept_backoff_s,
                                         ROOT_ACCEPT_BACKOFF_MAX_S);
    swy_boot_root_warn_limited(root, "root %s: accept failed: %s; %s%.2f s",
                               root->addr_text, strerror(err),
                               freed > 0
                                   ? "closed idle handshakes, listening again "
                                     "in "
                                   : "listening again in ",
                               root->accept_backoff_s);
    evconnlistener_disable(listener);
    struct timeval wait;
    wait.tv_sec = (time_t)root->accept_backoff_s;
    wait.tv_usec = (suseconds_t)((root->accept_backoff_s -
                                  (double)wait.tv_sec) * 1e6);
    evtimer_add(root->accept_ev, &wait);
}
