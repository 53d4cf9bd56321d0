/* lib/boot internal: the rank's side of the control plane (client*.c)
 * shares this state and these calls between its files. */
#ifndef SWY_BOOT_CLIENT_H
#define SWY_BOOT_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/status.h"

#define CLIENT_MSG_MAX 1024
/* Scoped failures remembered (swy_boot_report_comm_failure): the oldest
 * gives way beyond this many; a communicator learns of its own failure
 * within a progress pass, long before. */
#define CLIENT_COMM_FAILURES 64
/* How long a failure report may wait to leave the process
 * (swy_boot_client_flush): a connection that takes longer is as good as
 * lost. */
#define CLIENT_FLUSH_S 1.0

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

/* client_handshake.c: connect, prove the secret, check the root's proof
 * (blocking sockets, until deadline_s); the connected fd in *fd_p. */
swy_status_t swy_boot_client_handshake(const swy_boot_addr_t *addr, int rank,
                                       int nranks, const char *root_text,
                                       double timeout_s, double deadline_s,
                                       int *fd_p);

/* client_loop.c: the loop thread and the frames. */
/* Under boot->lock: wait on boot->cond until deadline_s at the latest. */
void swy_boot_client_wait(swy_boot_t *boot, double deadline_s);
/* Queue a frame from any thread; -1 when the connection is gone or
 * closing. */
int swy_boot_client_send(swy_boot_t *boot, uint32_t type, const void *part1,
                         size_t len1, const void *part2, size_t len2);
/* Wait, at most timeout_s, until the frames queued so far have gone to
 * the kernel (not on the loop thread, which writes them). */
void swy_boot_client_flush(swy_boot_t *boot, double timeout_s);
/* Decode a status and its message (REJECT, FAILED); -1 if malformed. */
int swy_boot_client_status_msg(const uint8_t *payload, size_t len,
                               swy_status_t *status_p, char *msg,
                               size_t msg_len);
/* Start the loop thread on the handshaken fd (owned from here on). */
swy_status_t swy_boot_client_loop_start(swy_boot_t *boot, int fd);
/* Stop the loop (after GOODBYE when say_goodbye) and free everything. */
void swy_boot_client_destroy(swy_boot_t *boot, int say_goodbye);

/* client_coll.c: collectives. */
/* "0-3,7" from a wire list of ranks. */
void swy_boot_client_format_ranks(const uint8_t *ranks_be, uint32_t count,
                                  char *text, size_t text_len);
/* A COLL_RESULT of len bytes in the input buffer, taken for its waiter;
 * NULL or what is wrong with it. */
const char *swy_boot_client_take_result(swy_boot_t *boot, struct evbuffer *in,
                                        size_t len);
/* Ask the root who is missing from collective seq (0: the join). */
void swy_boot_client_ask_missing(swy_boot_t *boot, uint64_t seq, char *text,
                                 size_t text_len);

/* client_failure.c: failures. */
/* The job's first failure (later ones are ignored). */
void swy_boot_client_record_failure(swy_boot_t *boot, swy_status_t status,
                                    const char *msg);
/* A communicator's failure, the first per key. */
void swy_boot_client_record_comm_failure(swy_boot_t *boot, uint64_t key,
                                         swy_status_t status, const char *msg);
/* The connection to the root closed or carried nonsense. */
void swy_boot_client_lost(swy_boot_t *boot, const char *detail);
/* The loop's heartbeat: sends one, or finds the root silent too long. */
void swy_boot_client_heartbeat_cb(evutil_socket_t fd, short what, void *arg);
/* The recorded failure as this call's error. */
swy_status_t swy_boot_client_failure_error(swy_boot_t *boot);

#endif
