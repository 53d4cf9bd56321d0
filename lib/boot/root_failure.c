/* The root service: one libevent loop in a background thread that admits
 * ranks (secret proof, HELLO), runs allgather/barrier by concatenation,
 * watches heartbeats, and broadcasts failures.
 *
 * Everything below runs in the root thread except swy_boot_root_start
 * (before the thread exists) and swy_boot_root_release (which only flags
 * the thread and joins it before touching anything). So no state here
 * needs a lock; bufferevents are created without BEV_OPT_THREADSAFE.
 *
 * The root never trusts a peer: every frame is checked for type, state and
 * length before it is read, and a bad peer is logged, sent REJECT and
 * closed without disturbing the other connections. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

#define ROOT_RELEASE_WAIT_S 30.0
/* A closing connection waits this long for the peer's EOF so that a
 * REJECT it was sent is not destroyed by a reset. */
#define ROOT_LINGER_S 2.0
#define ROOT_HANDSHAKE_MIN_S 10.0
#define ROOT_MAX_FAILURE_MSG 2048
/* Connections that are not (or no longer) ranks: a quarter of the fd
 * limit, within these bounds; past it the oldest is dropped, so a flood
 * cannot take the fds that ranks and transports need. */
#define ROOT_UNJOINED_MIN 16
#define ROOT_UNJOINED_MAX 1024
/* accept() failing (out of fds): wait before trying again, doubling. */
#define ROOT_ACCEPT_BACKOFF_MIN_S 0.01
#define ROOT_ACCEPT_BACKOFF_MAX_S 1.0
/* Warnings a peer can repeat (rejected connections, accept failures):
 * this many lines per period, then a count. */
#define ROOT_WARN_BURST 10
#define ROOT_WARN_PERIOD_S 10.0

typedef enum {
    CONN_CHALLENGED, /* CHALLENGE sent, waiting for PROOF */
    CONN_PROVED,     /* PROOF received, waiting for the HELLO it covers */
    CONN_JOINED,     /* a rank of the job */
    CONN_CLOSING,    /* REJECT sent; draining until EOF or linger timeout */
} conn_state_t;

typedef enum {
    SLOT_EMPTY,
    SLOT_LIVE,
    SLOT_LEFT, /* said GOODBYE */
    SLOT_DEAD,
} slot_state_t;

typedef struct root_conn {
    swy_list_t link;
    swy_boot_root_t *root;
    struct bufferevent *bev;
    struct event *linger_ev;
    char peer[80];
    conn_state_t state;
    uint8_t nonce[SWY_BOOT_NONCE_LEN];
    uint8_t rank_nonce[SWY_BOOT_NONCE_LEN];
    uint8_t rank_digest[SWY_BOOT_DIGEST_LEN];
    int rank;
    double accepted_s;
    double last_recv_s;
} root_conn_t;

typedef struct {
    slot_state_t state;
    root_conn_t *conn;
    int pid;
    char hostname[SWY_BOOT_MAX_HOSTNAME + 1];
    uint8_t *contrib_frame; /* COLL payload: u64 seq then the blob */
    size_t contrib_len;     /* blob bytes */
    int contributed;
} root_slot_t;

/* One allgather result shared by every rank's output buffer. */
typedef struct {
    atomic_int refs;
    size_t len;
    uint8_t data[];
} root_result_t;

struct swy_boot_root {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *heartbeat_ev;
    struct event *wake_ev;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    int thread_done;
    atomic_int released;

    uint8_t secret[SWY_BOOT_SECRET_LEN];
    char addr_text[96];
    double heartbeat_s;
    double outage_s; /* SWY_OUTAGE_S */

    /* Resource bounds against floods (see ROOT_UNJOINED_*). */
    int max_unjoined;
    int unjoined_cap_said;
    struct event *accept_ev; /* re-enables the listener after a back-off */
    double accept_backoff_s;
    swy_log_limit_t warn_limit;

    swy_list_t conns;
    int nranks; /* 0 until the first HELLO */
    int first_rank;
    root_slot_t *slots;
    int nlive;
    int ready;
    uint64_t coll_seq;
    int ncontrib;
};

static void conn_begin_close(root_conn_t *conn);
static void conn_free(root_conn_t *conn);

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

static void root_check_exit(swy_boot_root_t *root)
{
    if (atomic_load(&root->released) && root->nlive == 0)
        event_base_loopbreak(root->base);
}

static void root_send(root_conn_t *conn, uint32_t type, const void *payload,
                      size_t len)
{
    if (swy_boot_frame_write(conn->bev, type, payload, len) != 0)
        swy_warn("boot", "root %s: cannot queue %s for %s: out of memory",
                 conn->root->addr_text, swy_boot_msg_name(type), conn->peer);
}

static void root_send_status(root_conn_t *conn, uint32_t type,
                             swy_status_t status, const char *msg)
{
    uint8_t head[4];
    swy_boot_put_u32(head, (uint32_t)(int32_t)status);
    if (swy_boot_frame_write2(conn->bev, type, head, sizeof(head), msg,
                              strlen(msg)) != 0)
        swy_warn("boot", "root %s: cannot queue %s for %s: out of memory",
                 conn->root->addr_text, swy_boot_msg_name(type), conn->peer);
}

/* Send FAILED to every joined rank but `except` (-1: all). */
static void root_broadcast_failure(swy_boot_root_t *root, int except,
                                   swy_status_t status, const char *msg)
{
    for (int r = 0; r < root->nranks; r++) {
        root_slot_t *slot = &root->slots[r];
        if (r == except || slot->state != SLOT_LIVE || slot->conn == NULL)
            continue;
        root_send_status(slot->conn, SWY_BOOT_MSG_FAILED, status, msg);
    }
}

/* Tell every joined rank but `rank` itself that `rank` reads no other
 * rank's memory any more: it said so (gone 0), or it left or died (gone
 * 1: its transports no longer drain anything sent to it either). */
static void root_broadcast_quiesced(swy_boot_root_t *root, int rank, int gone)
{
    uint8_t payload[8];
    swy_boot_put_u32(payload, (uint32_t)rank);
    swy_boot_put_u32(payload + 4, gone ? SWY_BOOT_QUIESCED_GONE : 0);
    for (int r = 0; r < root->nranks; r++) {
        root_slot_t *slot = &root->slots[r];
        if (r == rank || slot->state != SLOT_LIVE || slot->conn == NULL)
            continue;
        root_send(slot->conn, SWY_BOOT_MSG_QUIESCED, payload,
                  sizeof(payload));
    }
}

static void slot_drop_contribution(root_slot_t *slot)
{
    swy_free(slot->contrib_frame);
    slot->contrib_frame = NULL;
    slot->contrib_len = 0;
    slot->contributed = 0;
}

static void root_free_slots(swy_boot_root_t *root)
{
    for (int r = 0; r < root->nranks; r++)
        slot_drop_contribution(&root->slots[r]);
    swy_free(root->slots);
    root->slots = NULL;
    root->nranks = 0;
    root->ncontrib = 0;
}

/* A job that never formed and whose ranks all left starts afresh, so a
 * relaunch against the same root is judged on its own nranks. */
static void root_maybe_reset(swy_boot_root_t *root)
{
    if (!root->ready && root->nlive == 0 && root->nranks > 0)
        root_free_slots(root);
}

/* A joined rank failed (status SWY_ERR_REMOTE: it is gone without
 * GOODBYE; SWY_ERR_TIMEOUT: silent past SWY_OUTAGE_S): tell everyone
 * else. */
static void root_rank_failed(swy_boot_root_t *root, int rank,
                             swy_status_t status, const char *reason)
{
    root_slot_t *slot = &root->slots[rank];
    char msg[ROOT_MAX_FAILURE_MSG];
    snprintf(msg, sizeof(msg), "rank %d (pid %d on %s) %s: %s", rank,
             slot->pid, slot->hostname,
             status == SWY_ERR_TIMEOUT ? "timed out" : "died", reason);
    swy_warn("boot", "root %s: %s", root->addr_text, msg);
    slot->state = SLOT_DEAD;
    slot->conn = NULL;
    slot_drop_contribution(slot);
    root->nlive--;
    root_broadcast_failure(root, rank, status, msg);
    root_broadcast_quiesced(root, rank, 1);
}

static void root_rank_died(swy_boot_root_t *root, int rank,
                           const char *reason)
{
    root_rank_failed(root, rank, SWY_ERR_REMOTE, reason);
}

static void root_warn_limited(swy_boot_root_t *root, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A warning that a peer without the secret can repeat at will: rate
 * limited, with the count of the ones held back. */
static void root_warn_limited(swy_boot_root_t *root, const char *fmt, ...)
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

static void conn_reject(root_conn_t *conn, swy_status_t status,
                        const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Log, tell the peer why (REJECT) and close. A joined rank that is
 * dropped this way counts as a failed rank. */
static void conn_reject(root_conn_t *conn, swy_status_t status,
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
        root_rank_died(root, conn->rank, died);
    } else {
        root_warn_limited(root, "root %s: rejected connection from %s: %s",
                          root->addr_text, conn->peer, reason);
    }
    root_send_status(conn, SWY_BOOT_MSG_REJECT, status, reason);
    conn_begin_close(conn);
}

static void root_send_ready(swy_boot_root_t *root)
{
    root->ready = 1;
    root->coll_seq = 1;
    swy_info("boot", "root %s: all %d ranks joined", root->addr_text,
             root->nranks);
    for (int r = 0; r < root->nranks; r++)
        if (root->slots[r].conn != NULL)
            root_send(root->slots[r].conn, SWY_BOOT_MSG_READY, NULL, 0);
}

/* The proof covers the HELLO that follows it: kept until then. */
static void handle_proof(root_conn_t *conn, const uint8_t *payload,
                         size_t len)
{
    if (len != SWY_BOOT_RANK_PROOF_LEN) {
        conn_reject(conn, SWY_ERR_INVALID_ARG,
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
        conn_reject(conn, SWY_ERR_INVALID_ARG,
                    "wrong job secret (the proof of the secret does not "
                    "match)");
        return 0;
    }
    uint8_t answer[SWY_BOOT_DIGEST_LEN];
    swy_boot_proof(root->secret, SWY_BOOT_PROOF_ROOT, conn->nonce,
                   conn->rank_nonce, payload, len, answer);
    root_send(conn, SWY_BOOT_MSG_PROOF, answer, sizeof(answer));
    return 1;
}

static void handle_hello(root_conn_t *conn, const uint8_t *payload,
                         size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (!hello_proven(conn, payload, len))
        return;
    if (len < 12 || len - 12 > SWY_BOOT_MAX_HOSTNAME) {
        conn_reject(conn, SWY_ERR_INVALID_ARG,
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
        conn_reject(conn, SWY_ERR_INVALID_ARG,
                    "rank %d of nranks %d is out of range (nranks "
                    "1..%d, rank 0..nranks-1)",
                    rank, nranks, SWY_BOOT_MAX_RANKS);
        return;
    }
    if (root->nranks == 0) {
        root->slots = swy_calloc((size_t)nranks, sizeof(*root->slots));
        if (root->slots == NULL) {
            conn_reject(conn, SWY_ERR_NO_MEMORY,
                        "root out of memory for %d ranks", nranks);
            return;
        }
        root->nranks = nranks;
        root->first_rank = rank;
    } else if (nranks != root->nranks) {
        conn_reject(conn, SWY_ERR_MISMATCH,
                    "rank %d announced nranks %d, but rank %d (the first "
                    "to join) announced nranks %d",
                    rank, nranks, root->first_rank, root->nranks);
        return;
    }
    root_slot_t *slot = &root->slots[rank];
    if (slot->state != SLOT_EMPTY) {
        conn_reject(conn, SWY_ERR_MISMATCH,
                    "rank %d is already taken (%s, pid %d on %s); this "
                    "connection is pid %d on %s",
                    rank, slot_state_name(slot->state), slot->pid,
                    slot->hostname, pid, hostname);
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

static void release_result(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    root_result_t *result = arg;
    if (atomic_fetch_sub(&result->refs, 1) == 1)
        swy_free(result);
}

static void root_complete_collective(swy_boot_root_t *root)
{
    int n = root->nranks;
    size_t total = 0;
    for (int r = 0; r < n; r++)
        total += root->slots[r].contrib_len;
    size_t head_len = 12 + 8 * (size_t)n;
    uint64_t seq = root->coll_seq;
    root->coll_seq++;
    root->ncontrib = 0;

    if (total > SWY_BOOT_MAX_MSG - head_len) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "control-plane allgather #%llu would return %zu bytes, "
                 "over the %u-byte message limit",
                 (unsigned long long)seq, total + head_len,
                 (unsigned)SWY_BOOT_MAX_MSG);
        swy_warn("boot", "root %s: %s", root->addr_text, msg);
        for (int r = 0; r < n; r++)
            slot_drop_contribution(&root->slots[r]);
        root_broadcast_failure(root, -1, SWY_ERR_INVALID_ARG, msg);
        return;
    }

    root_result_t *result = swy_malloc(sizeof(*result) + head_len + total);
    if (result == NULL) {
        for (int r = 0; r < n; r++)
            slot_drop_contribution(&root->slots[r]);
        root_broadcast_failure(root, -1, SWY_ERR_NO_MEMORY,
                               "the root ran out of memory assembling an "
                               "allgather result");
        return;
    }
    atomic_init(&result->refs, 1);
    result->len = head_len + total;
    swy_boot_put_u64(result->data, seq);
    swy_boot_put_u32(result->data + 8, (uint32_t)n);
    uint8_t *cursor = result->data + head_len;
    for (int r = 0; r < n; r++) {
        root_slot_t *slot = &root->slots[r];
        swy_boot_put_u64(result->data + 12 + 8 * (size_t)r,
                         slot->contrib_len);
        if (slot->contrib_len > 0)
            memcpy(cursor, slot->contrib_frame + 8, slot->contrib_len);
        cursor += slot->contrib_len;
        slot_drop_contribution(slot);
    }

    /* Every rank's output references the same bytes; the last one to
     * drain them frees the result. */
    uint8_t header[SWY_BOOT_HEADER_LEN];
    swy_boot_put_u32(header, SWY_BOOT_MSG_COLL_RESULT);
    swy_boot_put_u32(header + 4, (uint32_t)result->len);
    for (int r = 0; r < n; r++) {
        root_conn_t *conn = root->slots[r].conn;
        if (conn == NULL)
            continue;
        struct evbuffer *out = bufferevent_get_output(conn->bev);
        atomic_fetch_add(&result->refs, 1);
        if (evbuffer_add(out, header, sizeof(header)) != 0 ||
            evbuffer_add_reference(out, result->data, result->len,
                                   release_result, result) != 0) {
            atomic_fetch_sub(&result->refs, 1);
            conn_reject(conn, SWY_ERR_NO_MEMORY,
                        "cannot queue allgather #%llu result: out of memory",
                        (unsigned long long)seq);
        }
    }
    release_result(NULL, 0, result);
}

/* Takes ownership of payload. */
static void handle_coll(root_conn_t *conn, uint8_t *payload, size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 8) {
        swy_free(payload);
        conn_reject(conn, SWY_ERR_INVALID_ARG, "malformed COLL of %zu bytes",
                    len);
        return;
    }
    uint64_t seq = swy_boot_get_u64(payload);
    root_slot_t *slot = &root->slots[conn->rank];
    if (!root->ready || seq != root->coll_seq || slot->contributed) {
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "rank %d entered control-plane collective #%llu while the "
                 "job is at #%llu%s (ranks called allgather/barrier a "
                 "different number of times)",
                 conn->rank, (unsigned long long)seq,
                 (unsigned long long)root->coll_seq,
                 slot->contributed ? " and it already contributed" : "");
        swy_free(payload);
        swy_warn("boot", "root %s: %s", root->addr_text, msg);
        root_broadcast_failure(root, -1, SWY_ERR_MISMATCH, msg);
        return;
    }
    slot->contrib_frame = payload;
    slot->contrib_len = len - 8;
    slot->contributed = 1;
    root->ncontrib++;
    if (root->ncontrib == root->nranks)
        root_complete_collective(root);
}

static void handle_failed(root_conn_t *conn, const uint8_t *payload,
                          size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 4 || len - 4 >= ROOT_MAX_FAILURE_MSG) {
        conn_reject(conn, SWY_ERR_INVALID_ARG,
                    "malformed FAILED of %zu bytes", len);
        return;
    }
    swy_status_t status =
        swy_boot_status_from_wire((int32_t)swy_boot_get_u32(payload));
    char msg[ROOT_MAX_FAILURE_MSG];
    memcpy(msg, payload + 4, len - 4);
    msg[len - 4] = '\0';
    swy_info("boot", "root %s: rank %d reports failure (%s): %s",
             root->addr_text, conn->rank, swy_status_string(status), msg);
    root_broadcast_failure(root, conn->rank, status, msg);
}

/* A split communicator failed: relay to every other live rank (those
 * that hold it act on it). */
static void handle_comm_failed(root_conn_t *conn, const uint8_t *payload,
                               size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 12 || len - 12 >= ROOT_MAX_FAILURE_MSG) {
        conn_reject(conn, SWY_ERR_INVALID_ARG,
                    "malformed COMM_FAILED of %zu bytes", len);
        return;
    }
    swy_debug("boot", "root %s: rank %d reports a failed communicator "
              "(key %" PRIx64 ")", root->addr_text, conn->rank,
              swy_boot_get_u64(payload));
    for (int r = 0; r < root->nranks; r++) {
        root_slot_t *slot = &root->slots[r];
        if (r == conn->rank || slot->state != SLOT_LIVE || slot->conn == NULL)
            continue;
        root_send(slot->conn, SWY_BOOT_MSG_COMM_FAILED, payload, len);
    }
}

static void handle_missing_req(root_conn_t *conn, const uint8_t *payload,
                               size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len != 8) {
        conn_reject(conn, SWY_ERR_INVALID_ARG,
                    "malformed MISSING_REQ of %zu bytes", len);
        return;
    }
    uint64_t seq = swy_boot_get_u64(payload);
    int n = root->nranks;
    uint8_t *reply = swy_malloc(16 + 4 * (size_t)n);
    if (reply == NULL)
        return;
    uint32_t count = 0;
    for (int r = 0; r < n; r++) {
        root_slot_t *slot = &root->slots[r];
        int missing;
        if (seq == 0)
            missing = slot->state == SLOT_EMPTY;
        else
            missing = seq == root->coll_seq && !slot->contributed;
        if (missing) {
            swy_boot_put_u32(reply + 16 + 4 * (size_t)count, (uint32_t)r);
            count++;
        }
    }
    swy_boot_put_u64(reply, seq);
    /* For the join: how many ranks ever joined. */
    swy_boot_put_u32(reply + 8, seq == 0 ? (uint32_t)n - count
                                         : (uint32_t)root->nlive);
    swy_boot_put_u32(reply + 12, count);
    root_send(conn, SWY_BOOT_MSG_MISSING, reply, 16 + 4 * (size_t)count);
    swy_free(reply);
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
            conn_reject(conn, SWY_ERR_INVALID_ARG,
                        "expected PROOF of the job secret, got %s (type %u)",
                        swy_boot_msg_name(type), type);
        else
            handle_proof(conn, payload, len);
        break;
    case CONN_PROVED:
        if (type != SWY_BOOT_MSG_HELLO)
            conn_reject(conn, SWY_ERR_INVALID_ARG,
                        "expected HELLO, got %s (type %u)",
                        swy_boot_msg_name(type), type);
        else
            handle_hello(conn, payload, len);
        break;
    case CONN_JOINED:
        switch (type) {
        case SWY_BOOT_MSG_HEARTBEAT:
            break;
        case SWY_BOOT_MSG_COLL:
            handle_coll(conn, payload, len);
            return 1;
        case SWY_BOOT_MSG_FAILED:
            handle_failed(conn, payload, len);
            break;
        case SWY_BOOT_MSG_MISSING_REQ:
            handle_missing_req(conn, payload, len);
            break;
        case SWY_BOOT_MSG_COMM_FAILED:
            handle_comm_failed(conn, payload, len);
            break;
        case SWY_BOOT_MSG_QUIESCED:
            if (len != 0) {
                conn_reject(conn, SWY_ERR_INVALID_ARG,
                            "malformed QUIESCED of %zu bytes", len);
                break;
            }
            swy_debug("boot", "root %s: rank %d is quiesced",
                      root->addr_text, conn->rank);
            root_broadcast_quiesced(root, conn->rank, 0);
            break;
        case SWY_BOOT_MSG_GOODBYE: {
            root_slot_t *slot = &root->slots[conn->rank];
            swy_info("boot", "root %s: rank %d said goodbye",
                     root->addr_text, conn->rank);
            slot_drop_contribution(slot);
            slot->conn = NULL;
            /* Also before the job formed (its join timed out): the rank
             * stays "joined" for the others' missing-rank reports, and
             * the job starts afresh once every rank has left. */
            slot->state = SLOT_LEFT;
            root->nlive--;
            if (root->ready)
                root_broadcast_quiesced(root, conn->rank, 1);
            swy_free(payload);
            conn_free(conn);
            root_maybe_reset(root);
            root_check_exit(root);
            return 0;
        }
        default:
            conn_reject(conn, SWY_ERR_INVALID_ARG,
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

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
    root_conn_t *conn = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    conn->last_recv_s = swy_time_s();
    while (conn->state != CONN_CLOSING) {
        uint32_t type, len;
        if (!swy_boot_frame_peek(in, &type, &len))
            return;
        if (type == 0 || type > SWY_BOOT_MSG_LAST) {
            conn_reject(conn, SWY_ERR_INVALID_ARG,
                        "unknown message type %u (length field %u)", type,
                        len);
            break;
        }
        size_t limit = conn->state == CONN_JOINED
                           ? SWY_BOOT_MAX_MSG
                           : SWY_BOOT_MAX_HANDSHAKE_MSG;
        if (len > limit) {
            conn_reject(conn, SWY_ERR_INVALID_ARG,
                        "%s frame of %u bytes exceeds the %zu-byte limit%s",
                        swy_boot_msg_name(type), len, limit,
                        conn->state == CONN_JOINED
                            ? ""
                            : " before the handshake completes");
            break;
        }
        if (!swy_boot_frame_ready(bev, len))
            return;
        uint8_t *payload = NULL;
        if (len > 0) {
            payload = swy_malloc(len);
            if (payload == NULL) {
                conn_reject(conn, SWY_ERR_NO_MEMORY,
                            "root out of memory for a %u-byte %s", len,
                            swy_boot_msg_name(type));
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

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
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
        root_warn_limited(root,
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
        root_rank_died(root, conn->rank, reason);
        break;
    }
    case CONN_CLOSING:
        break;
    }
    conn_free(conn);
    root_maybe_reset(root);
    root_check_exit(root);
}

static void conn_closing_write_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    /* REJECT is out: half-close and wait for the peer's EOF (or the
     * linger timer) before freeing, so the peer can read it. */
    shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void conn_linger_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    root_conn_t *conn = arg;
    swy_boot_root_t *root = conn->root;
    conn_free(conn);
    root_check_exit(root);
}

static void conn_begin_close(root_conn_t *conn)
{
    if (conn->state == CONN_JOINED) {
        root_slot_t *slot = &conn->root->slots[conn->rank];
        if (slot->conn == conn)
            slot->conn = NULL;
    }
    conn->state = CONN_CLOSING;
    bufferevent_setwatermark(conn->bev, EV_READ, 0, 0);
    bufferevent_setcb(conn->bev, conn_read_cb, conn_closing_write_cb,
                      conn_event_cb, conn);
    if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0)
        shutdown(bufferevent_getfd(conn->bev), SHUT_WR);
    struct timeval linger = {(time_t)ROOT_LINGER_S, 0};
    evtimer_add(conn->linger_ev, &linger);
}

static void conn_free(root_conn_t *conn)
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
        conn_free(conn);
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

static void root_accept_cb(struct evconnlistener *listener,
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
    conn->linger_ev = evtimer_new(root->base, conn_linger_cb, conn);
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
    bufferevent_setcb(conn->bev, conn_read_cb, NULL, conn_event_cb, conn);
    bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
    swy_debug("boot", "root %s: connection from %s", root->addr_text, peer);
    root_send(conn, SWY_BOOT_MSG_CHALLENGE, conn->nonce, sizeof(conn->nonce));
}

static void root_accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_root_t *root = arg;
    evconnlistener_enable(root->listener);
}

static void root_accept_error_cb(struct evconnlistener *listener, void *arg)
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
    root_warn_limited(root, "root %s: accept failed: %s; %s%.2f s",
                      root->addr_text, strerror(err),
                      freed > 0 ? "closed idle handshakes, listening again "
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

static void root_heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_root_t *root = arg;
    double now = swy_time_s();
    double handshake_limit =
        SWY_MAX(ROOT_HANDSHAKE_MIN_S, 2 * root->heartbeat_s);
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &root->conns) {
        root_conn_t *conn = swy_container_of(pos, root_conn_t, link);
        switch (conn->state) {
        case CONN_CHALLENGED:
        case CONN_PROVED:
            if (now - conn->accepted_s > handshake_limit)
                conn_reject(conn, SWY_ERR_TIMEOUT,
                            "no complete handshake within %.0f s",
                            handshake_limit);
            break;
        case CONN_JOINED:
            if (now - conn->last_recv_s > root->outage_s) {
                char reason[200];
                snprintf(reason, sizeof(reason),
                         "silent for %.1f s, over the tolerated outage of "
                         "%.1f s (SWY_OUTAGE_S; stopped, hung or cut off)",
                         now - conn->last_recv_s, root->outage_s);
                root_rank_failed(root, conn->rank, SWY_ERR_TIMEOUT, reason);
                conn_free(conn);
            } else {
                root_send(conn, SWY_BOOT_MSG_HEARTBEAT, NULL, 0);
            }
            break;
        case CONN_CLOSING:
            break;
        }
    }
    if (root->warn_limit.suppressed > 0 &&
        now - root->warn_limit.window_start_s >= ROOT_WARN_PERIOD_S) {
        swy_warn("boot", "root %s: %u more warnings about rejected or "
                 "failed connections were not logged",
                 root->addr_text, root->warn_limit.suppressed);
        root->warn_limit.suppressed = 0;
    }
    root_maybe_reset(root);
    root_check_exit(root);
}

static void root_wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    root_check_exit(arg);
}

static void *root_thread_main(void *arg)
{
    swy_boot_root_t *root = arg;
    swy_boot_block_sigpipe();

    event_base_loop(root->base, EVLOOP_NO_EXIT_ON_EMPTY);

    pthread_mutex_lock(&root->done_lock);
    root->thread_done = 1;
    pthread_cond_broadcast(&root->done_cond);
    pthread_mutex_unlock(&root->done_lock);
    return NULL;
}

/* This host's first non-loopback IPv4 address, else 127.0.0.1. */
static void root_default_host(char *host, size_t host_len)
{
    snprintf(host, host_len, "127.0.0.1");
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return;
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET)
            continue;
        if (!(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct sockaddr_in *in4 =
            (const struct sockaddr_in *)ifa->ifa_addr;
        inet_ntop(AF_INET, &in4->sin_addr, host, (socklen_t)host_len);
        break;
    }
    freeifaddrs(list);
}

static int root_is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)
                                       ->sin6_addr);
}

/* Free whatever root_start set up; the thread is not running. */
static void root_destroy(swy_boot_root_t *root)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &root->conns)
        conn_free(swy_container_of(pos, root_conn_t, link));
    root_free_slots(root);
    if (root->listener != NULL)
        evconnlistener_free(root->listener);
    if (root->heartbeat_ev != NULL)
        event_free(root->heartbeat_ev);
    if (root->wake_ev != NULL)
        event_free(root->wake_ev);
    if (root->accept_ev != NULL)
        event_free(root->accept_ev);
    if (root->base != NULL)
        event_base_free(root->base);
    pthread_cond_destroy(&root->done_cond);
    pthread_mutex_destroy(&root->done_lock);
    swy_free(root);
}

swy_status_t swy_boot_root_start(const char *bind_host, uint16_t port,
                                 const uint8_t secret[SWY_BOOT_SECRET_LEN],
                                 swy_boot_root_t **root_p,
                                 swy_boot_addr_t *addr_p)
{
    if (secret == NULL || root_p == NULL || addr_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_root_start: %s is NULL",
                           secret == NULL ? "secret"
                           : root_p == NULL ? "root_p"
                                            : "addr_p");
    SWY_CHECK(swy_boot_libevent_init());

    char default_host[64];
    root_default_host(default_host, sizeof(default_host));
    char host[64];
    if (bind_host == NULL)
        snprintf(host, sizeof(host), "%s", default_host);
    else
        SWY_CHECK(swy_boot_resolve_host(bind_host, host, sizeof(host)));

    struct sockaddr_storage ss;
    socklen_t ss_len;
    if (swy_boot_sockaddr_fill(host, port, &ss, &ss_len) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "root bind address \"%s\" is not an IPv4 or "
                           "IPv6 address",
                           host);
    char where[96];
    swy_boot_hostport_text(host, port, where, sizeof(where));

    swy_status_t status;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "root: socket() for %s failed: %s", where,
                           strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, ss_len) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: cannot bind %s: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    if (listen(fd, SOMAXCONN) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: listen on %s failed: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: getsockname on %s failed: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    uint16_t bound_port =
        ntohs(bound.ss_family == AF_INET
                  ? ((struct sockaddr_in *)&bound)->sin_port
                  : ((struct sockaddr_in6 *)&bound)->sin6_port);
    /* Bound to a wildcard: ranks connect to this host's own address. */
    const char *advertised = root_is_wildcard(&bound) ? default_host : host;

    swy_boot_root_t *root = swy_calloc(1, sizeof(*root));
    if (root == NULL) {
        close(fd);
        return swy_err_set(SWY_ERR_NO_MEMORY, "boot",
                           "root: out of memory");
    }
    swy_list_init(&root->conns);
    pthread_mutex_init(&root->done_lock, NULL);
    pthread_cond_init(&root->done_cond, NULL);
    atomic_init(&root->released, 0);
    memcpy(root->secret, secret, SWY_BOOT_SECRET_LEN);
    swy_boot_hostport_text(advertised, bound_port, root->addr_text,
                           sizeof(root->addr_text));
    swy_boot_liveness(&root->heartbeat_s, &root->outage_s);
    struct rlimit fds;
    rlim_t fd_limit = getrlimit(RLIMIT_NOFILE, &fds) == 0 ? fds.rlim_cur
                                                         : 1024;
    root->max_unjoined =
        fd_limit / 4 < ROOT_UNJOINED_MIN   ? ROOT_UNJOINED_MIN
        : fd_limit / 4 > ROOT_UNJOINED_MAX ? ROOT_UNJOINED_MAX
                                           : (int)(fd_limit / 4);

    root->base = event_base_new();
    if (root->base == NULL) {
        close(fd);
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: event_base_new failed");
        goto err_destroy;
    }
    root->listener = evconnlistener_new(
        root->base, root_accept_cb, root,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (root->listener == NULL) {
        close(fd);
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: evconnlistener_new on %s failed",
                             root->addr_text);
        goto err_destroy;
    }
    evconnlistener_set_error_cb(root->listener, root_accept_error_cb);
    root->heartbeat_ev =
        event_new(root->base, -1, EV_PERSIST, root_heartbeat_cb, root);
    root->wake_ev = event_new(root->base, -1, 0, root_wake_cb, root);
    root->accept_ev = evtimer_new(root->base, root_accept_resume_cb, root);
    if (root->heartbeat_ev == NULL || root->wake_ev == NULL ||
        root->accept_ev == NULL) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: event_new failed");
        goto err_destroy;
    }
    struct timeval period;
    period.tv_sec = (time_t)root->heartbeat_s;
    period.tv_usec =
        (suseconds_t)((root->heartbeat_s - (double)period.tv_sec) * 1e6);
    event_add(root->heartbeat_ev, &period);

    int rc = pthread_create(&root->thread, NULL, root_thread_main, root);
    if (rc != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: pthread_create failed: %s",
                             strerror(rc));
        goto err_destroy;
    }
    root->thread_started = 1;

    swy_boot_addr_t addr;
    memset(&addr, 0, sizeof(addr));
    snprintf(addr.host, sizeof(addr.host), "%s", advertised);
    addr.port = bound_port;
    memcpy(addr.secret, secret, SWY_BOOT_SECRET_LEN);
    swy_info("boot", "root listening on %s", root->addr_text);
    *addr_p = addr;
    *root_p = root;
    return SWY_OK;

err_destroy:
    root_destroy(root);
    return status;
}

void swy_boot_root_release(swy_boot_root_t *root)
{
    if (root == NULL)
        return;
    atomic_store(&root->released, 1);
    event_active(root->wake_ev, EV_TIMEOUT, 0);

    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)ROOT_RELEASE_WAIT_S;
    pthread_mutex_lock(&root->done_lock);
    int rc = 0;
    while (!root->thread_done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&root->done_cond, &root->done_lock,
                                    &deadline);
    int done = root->thread_done;
    pthread_mutex_unlock(&root->done_lock);
    if (!done) {
        /* The loop is running (it has been for 30 s): a break now is not
         * lost. */
        event_base_loopbreak(root->base);
    }
    pthread_join(root->thread, NULL);
    if (!done) {
        char ranks[256] = "";
        size_t used = 0;
        for (int r = 0; r < root->nranks && used + 16 < sizeof(ranks); r++)
            if (root->slots[r].state == SLOT_LIVE)
                used += (size_t)snprintf(ranks + used, sizeof(ranks) - used,
                                         "%s%d", used ? "," : "", r);
        swy_warn("boot",
                 "root %s: rank(s) %s still connected %.0f s after the "
                 "root was released; closing their connections",
                 root->addr_text, ranks, ROOT_RELEASE_WAIT_S);
    }
    root_destroy(root);
}
