/* Failures as a rank sees them: the job's first failure and each
 * communicator's, the root falling silent or closing, the reports this
 * rank sends, and the quiescence of its peers. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "boot/client.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* Record the job's first failure; later ones are ignored. */
void swy_boot_client_record_failure(swy_boot_t *boot, swy_status_t status,
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
void swy_boot_client_record_comm_failure(swy_boot_t *boot, uint64_t key,
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
    swy_boot_client_record_failure(boot, status, msg);
}

void swy_boot_client_lost(swy_boot_t *boot, const char *detail)
{
    client_lost_status(boot, SWY_ERR_REMOTE, detail);
}

void swy_boot_client_heartbeat_cb(evutil_socket_t fd, short what, void *arg)
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

swy_status_t swy_boot_client_failure_error(swy_boot_t *boot)
{
    char msg[SWY_ERRMSG_MAX];
    swy_status_t status = swy_boot_failure(boot, msg, sizeof(msg));
    return swy_err_set(status, "boot", "%s", msg);
}

/* A failure report leaves the process before the failing call returns to
 * the user: a rank that then exits at once, without swy_comm_destroy,
 * would otherwise be reported to its peers as dead (SWY_ERR_REMOTE)
 * instead of with the failure it saw (a timeout, a mismatch). */
void swy_boot_report_failure(swy_boot_t *boot, swy_status_t status,
                             const char *msg)
{
    if (boot == NULL)
        return;
    if (status >= SWY_OK)
        status = SWY_ERR_REMOTE;
    if (msg == NULL)
        msg = "";
    swy_boot_client_record_failure(boot, status, msg);
    uint8_t head[4];
    swy_boot_put_u32(head, (uint32_t)(int32_t)status);
    size_t len = strnlen(msg, CLIENT_MSG_MAX - 1);
    if (swy_boot_client_send(boot, SWY_BOOT_MSG_FAILED, head, sizeof(head), msg,
                             len) != 0)
        swy_debug("boot", "rank %d: could not relay a failure to the "
                  "root at %s (connection gone)",
                  boot->rank, boot->root_text);
    else
        swy_boot_client_flush(boot, CLIENT_FLUSH_S);
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
    swy_boot_client_record_comm_failure(boot, key, status, msg);
    uint8_t head[12];
    swy_boot_put_u64(head, key);
    swy_boot_put_u32(head + 8, (uint32_t)(int32_t)status);
    size_t len = strnlen(msg, CLIENT_MSG_MAX - 1);
    if (swy_boot_client_send(boot, SWY_BOOT_MSG_COMM_FAILED, head, sizeof(head),
                             msg, len) != 0)
        swy_debug("boot", "rank %d: could not relay a communicator's "
                  "failure to the root at %s (connection gone)",
                  boot->rank, boot->root_text);
    else
        swy_boot_client_flush(boot, CLIENT_FLUSH_S);
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
    if (swy_boot_client_send(boot, SWY_BOOT_MSG_QUIESCED, NULL, 0, NULL, 0) !=
        0)
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
    swy_boot_client_destroy(boot, 1);
}
