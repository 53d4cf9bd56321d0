/* Failures at the root: a rank that died, fell silent or reported a
 * failure, told to every other rank, with the quiescence of each. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "boot/root.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

#define ROOT_HANDSHAKE_MIN_S 10.0
#define ROOT_MAX_FAILURE_MSG 2048

/* Send FAILED to every joined rank but `except` (-1: all). */
void swy_boot_root_broadcast_failure(swy_boot_root_t *root, int except,
                                     swy_status_t status, const char *msg)
{
    for (int r = 0; r < root->nranks; r++) {
        root_slot_t *slot = &root->slots[r];
        if (r == except || slot->state != SLOT_LIVE || slot->conn == NULL)
            continue;
        swy_boot_root_send_status(slot->conn, SWY_BOOT_MSG_FAILED, status, msg);
    }
}

/* Tell every joined rank but `rank` itself that `rank` reads no other
 * rank's memory any more: it said so (gone 0), or it left or died (gone
 * 1: its transports no longer drain anything sent to it either). */
void swy_boot_root_broadcast_quiesced(swy_boot_root_t *root, int rank, int gone)
{
    uint8_t payload[8];
    swy_boot_put_u32(payload, (uint32_t)rank);
    swy_boot_put_u32(payload + 4, gone ? SWY_BOOT_QUIESCED_GONE : 0);
    for (int r = 0; r < root->nranks; r++) {
        root_slot_t *slot = &root->slots[r];
        if (r == rank || slot->state != SLOT_LIVE || slot->conn == NULL)
            continue;
        swy_boot_root_send(slot->conn, SWY_BOOT_MSG_QUIESCED, payload,
                           sizeof(payload));
    }
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
    swy_boot_root_slot_drop(slot);
    root->nlive--;
    swy_boot_root_broadcast_failure(root, rank, status, msg);
    swy_boot_root_broadcast_quiesced(root, rank, 1);
}

void swy_boot_root_rank_died(swy_boot_root_t *root, int rank,
                             const char *reason)
{
    root_rank_failed(root, rank, SWY_ERR_REMOTE, reason);
}

void swy_boot_root_handle_failed(root_conn_t *conn, const uint8_t *payload,
                                 size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 4 || len - 4 >= ROOT_MAX_FAILURE_MSG) {
        swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
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
    swy_boot_root_broadcast_failure(root, conn->rank, status, msg);
}

/* A split communicator failed: relay to every other live rank (those
 * that hold it act on it). */
void swy_boot_root_handle_comm_failed(root_conn_t *conn, const uint8_t *payload,
                                      size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 12 || len - 12 >= ROOT_MAX_FAILURE_MSG) {
        swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
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
        swy_boot_root_send(slot->conn, SWY_BOOT_MSG_COMM_FAILED, payload, len);
    }
}

void swy_boot_root_heartbeat_cb(evutil_socket_t fd, short what, void *arg)
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
                swy_boot_root_conn_reject(conn, SWY_ERR_TIMEOUT,
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
                swy_boot_root_conn_free(conn);
            } else {
                swy_boot_root_send(conn, SWY_BOOT_MSG_HEARTBEAT, NULL, 0);
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
    swy_boot_root_maybe_reset(root);
    swy_boot_root_check_exit(root);
}
