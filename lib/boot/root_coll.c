/* The control plane's collectives at the root: every rank's contribution
 * to allgather/barrier, the result sent to all, and which ranks are
 * missing. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "boot/root.h"
#include "util/alloc.h"
#include "util/log.h"

void swy_boot_root_slot_drop(root_slot_t *slot)
{
    swy_free(slot->contrib_frame);
    slot->contrib_frame = NULL;
    slot->contrib_len = 0;
    slot->contributed = 0;
}

void swy_boot_root_free_slots(swy_boot_root_t *root)
{
    for (int r = 0; r < root->nranks; r++)
        swy_boot_root_slot_drop(&root->slots[r]);
    swy_free(root->slots);
    root->slots = NULL;
    root->nranks = 0;
    root->ncontrib = 0;
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
            swy_boot_root_slot_drop(&root->slots[r]);
        swy_boot_root_broadcast_failure(root, -1, SWY_ERR_INVALID_ARG, msg);
        return;
    }

    root_result_t *result = swy_malloc(sizeof(*result) + head_len + total);
    if (result == NULL) {
        for (int r = 0; r < n; r++)
            swy_boot_root_slot_drop(&root->slots[r]);
        swy_boot_root_broadcast_failure(
            root, -1, SWY_ERR_NO_MEMORY,
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
        swy_boot_root_slot_drop(slot);
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
            swy_boot_root_conn_reject(
                conn, SWY_ERR_NO_MEMORY,
                "cannot queue allgather #%llu result: out of memory",
                (unsigned long long)seq);
        }
    }
    release_result(NULL, 0, result);
}

/* Takes ownership of payload. */
void swy_boot_root_handle_coll(root_conn_t *conn, uint8_t *payload, size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len < 8) {
        swy_free(payload);
        swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
                                  "malformed COLL of %zu bytes", len);
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
        swy_boot_root_broadcast_failure(root, -1, SWY_ERR_MISMATCH, msg);
        return;
    }
    slot->contrib_frame = payload;
    slot->contrib_len = len - 8;
    slot->contributed = 1;
    root->ncontrib++;
    if (root->ncontrib == root->nranks)
        root_complete_collective(root);
}

void swy_boot_root_handle_missing_req(root_conn_t *conn, const uint8_t *payload,
                                      size_t len)
{
    swy_boot_root_t *root = conn->root;
    if (len != 8) {
        swy_boot_root_conn_reject(conn, SWY_ERR_INVALID_ARG,
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
    swy_boot_root_send(conn, SWY_BOOT_MSG_MISSING, reply,
                       16 + 4 * (size_t)count);
    swy_free(reply);
}
