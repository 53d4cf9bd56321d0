/* A rank's side of the control plane: joining the job and leaving it.
 *
 * swy_boot_connect does the handshake with plain blocking sockets (so its
 * errors reach the caller directly: client_handshake.c), then hands the
 * socket to a libevent loop in a background thread (client_loop.c). That
 * thread reads everything the root sends (READY, collective results:
 * client_coll.c, FAILED, heartbeats: client_failure.c) and keeps the
 * heartbeat going, so failures are recorded while the rank computes. The
 * files share client.h.
 *
 * Locking: the bufferevent is thread safe (its lock is held around every
 * frame written from a user thread, so frames never interleave, and
 * around every libevent callback). boot->lock guards the state shared
 * with waiting callers; it is always taken after the bufferevent lock,
 * never before. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "boot/client.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

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
    SWY_CHECK(swy_boot_client_handshake(addr, rank, nranks, root_text,
                                        timeout_s, deadline, &fd));

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

    status = swy_boot_client_loop_start(boot, fd);
    if (status != SWY_OK)
        goto err_destroy;

    pthread_mutex_lock(&boot->lock);
    while (!boot->ready && boot->join_status == SWY_OK &&
           atomic_load(&boot->failure_status) == SWY_OK &&
           swy_time_s() < deadline)
        swy_boot_client_wait(boot, deadline);
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
        status = swy_boot_client_failure_error(boot);
        goto err_destroy;
    }
    if (!ready) {
        char missing[CLIENT_MSG_MAX];
        swy_boot_client_ask_missing(boot, 0, missing, sizeof(missing));
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
    swy_boot_client_destroy(boot, 1);
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

void swy_boot_finalize(swy_boot_t *boot)
{
    if (boot == NULL)
        return;
    swy_boot_client_destroy(boot, 1);
}
