/* lib/boot internal: the root service (root*.c) shares this state and
 * these calls between its files. Everything runs in the root thread (see
 * root.c). */
#ifndef SWY_BOOT_ROOT_H
#define SWY_BOOT_ROOT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

/* Warnings a peer can repeat (rejected connections, accept failures):
 * this many lines per period, then a count. */
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

/* root.c: the service's life. */
/* The loop stops once the root was released and no rank is live. */
void swy_boot_root_check_exit(swy_boot_root_t *root);
/* A job that never formed and whose ranks all left starts afresh. */
void swy_boot_root_maybe_reset(swy_boot_root_t *root);

/* root_handshake.c: admission. */
void swy_boot_root_accept_cb(struct evconnlistener *listener,
                             evutil_socket_t fd, struct sockaddr *sa,
                             int sa_len, void *arg);
void swy_boot_root_accept_error_cb(struct evconnlistener *listener, void *arg);
void swy_boot_root_accept_resume_cb(evutil_socket_t fd, short what, void *arg);
void swy_boot_root_handle_proof(root_conn_t *conn, const uint8_t *payload,
                                size_t len);
void swy_boot_root_handle_hello(root_conn_t *conn, const uint8_t *payload,
                                size_t len);

/* root_loop.c: the connections. */
void swy_boot_root_send(root_conn_t *conn, uint32_t type, const void *payload,
                        size_t len);
/* A status and its message (REJECT, FAILED). */
void swy_boot_root_send_status(root_conn_t *conn, uint32_t type,
                               swy_status_t status, const char *msg);
/* A warning a peer can repeat at will: rate limited. */
void swy_boot_root_warn_limited(swy_boot_root_t *root, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Log, tell the peer why (REJECT) and close; a joined rank dropped so
 * counts as failed. */
void swy_boot_root_conn_reject(root_conn_t *conn, swy_status_t status,
                               const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Close after what was queued is out (the peer can read a REJECT). */
void swy_boot_root_conn_close(root_conn_t *conn);
void swy_boot_root_conn_free(root_conn_t *conn);
void swy_boot_root_conn_read_cb(struct bufferevent *bev, void *arg);
void swy_boot_root_conn_event_cb(struct bufferevent *bev, short what,
                                 void *arg);
void swy_boot_root_conn_linger_cb(evutil_socket_t fd, short what, void *arg);

/* root_coll.c: collectives. */
void swy_boot_root_handle_coll(root_conn_t *conn, uint8_t *payload, size_t len);
void swy_boot_root_handle_missing_req(root_conn_t *conn, const uint8_t *payload,
                                      size_t len);
/* A rank's contribution to the collective under way, dropped. */
void swy_boot_root_slot_drop(root_slot_t *slot);
void swy_boot_root_free_slots(swy_boot_root_t *root);

/* root_failure.c: failures. */
/* FAILED to every joined rank but except (-1: all). */
void swy_boot_root_broadcast_failure(swy_boot_root_t *root, int except,
                                     swy_status_t status, const char *msg);
/* Rank reads no other rank's memory any more (gone: it left or died). */
void swy_boot_root_broadcast_quiesced(swy_boot_root_t *root, int rank,
                                      int gone);
/* A joined rank gone without GOODBYE: tell everyone else. */
void swy_boot_root_rank_died(swy_boot_root_t *root, int rank,
                             const char *reason);
void swy_boot_root_handle_failed(root_conn_t *conn, const uint8_t *payload,
                                 size_t len);
void swy_boot_root_handle_comm_failed(root_conn_t *conn, const uint8_t *payload,
                                      size_t len);
/* Handshake timeouts, outages, and the heartbeats the ranks get. */
void swy_boot_root_heartbeat_cb(evutil_socket_t fd, short what, void *arg);

#endif
