/* The control plane's collectives on a rank: allgather and barrier by
 * sequence number, their results read off the connection, and which ranks
 * are missing when one times out. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "boot/client.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/status.h"

/* After a timeout, how long to wait for the root to say who is missing. */
#define CLIENT_MISSING_WAIT_S 1.0

void swy_boot_client_format_ranks(const uint8_t *ranks_be, uint32_t count,
                                  char *text, size_t text_len)
{
    size_t used = 0;
    text[0] = '\0';
    uint32_t i = 0;
    while (i < count) {
        /* 64-bit: ranks come from the wire, and a run ending at
         * INT_MAX must not overflow (found by fuzz_boot_client). */
        int64_t first =
            (int32_t)swy_boot_get_u32(ranks_be + 4 * (size_t)i);
        uint32_t j = i;
        while (j + 1 < count &&
               (int32_t)swy_boot_get_u32(ranks_be + 4 * (size_t)(j + 1)) ==
                   first + (int64_t)(j + 1 - i))
            j++;
        int64_t last = first + (int64_t)(j - i);
        char piece[32];
        if (last == first)
            snprintf(piece, sizeof(piece), "%s%" PRId64, i ? "," : "",
                     first);
        else
            snprintf(piece, sizeof(piece), "%s%" PRId64 "-%" PRId64,
                     i ? "," : "", first, last);
        if (used + strlen(piece) + 24 >= text_len) {
            snprintf(text + used, text_len - used, ",... (%u in all)",
                     count);
            return;
        }
        used += (size_t)snprintf(text + used, text_len - used, "%s", piece);
        i = j + 1;
    }
}

/* A COLL_RESULT still in the input buffer: read it straight into its
 * final allocation. Returns NULL or a description of what is wrong. */
const char *swy_boot_client_take_result(swy_boot_t *boot, struct evbuffer *in,
                                        size_t len)
{
    size_t n = (size_t)boot->nranks;
    size_t head_len = 12 + 8 * n;
    if (len < head_len) {
        evbuffer_drain(in, len);
        return "COLL_RESULT shorter than its header";
    }
    uint8_t *head = swy_malloc(head_len);
    uint64_t *lens = swy_calloc(n, sizeof(*lens));
    if (head == NULL || lens == NULL) {
        swy_free(head);
        swy_free(lens);
        evbuffer_drain(in, len);
        return "out of memory for a collective result";
    }
    evbuffer_remove(in, head, head_len);
    uint64_t seq = swy_boot_get_u64(head);
    uint32_t count = swy_boot_get_u32(head + 8);
    /* Each length is checked against what is left of the frame before
     * it is added, so no sum can wrap around (forged lengths such as
     * [2^64-8, L+8] add up to L modulo 2^64). */
    uint64_t left = len - head_len;
    int lens_ok = 1;
    for (size_t r = 0; r < n; r++) {
        lens[r] = swy_boot_get_u64(head + 12 + 8 * r);
        if (lens[r] > left)
            lens_ok = 0;
        else
            left -= lens[r];
    }
    uint64_t total = len - head_len;
    swy_free(head);
    if (count != n || !lens_ok || left != 0) {
        swy_free(lens);
        evbuffer_drain(in, len - head_len);
        return "COLL_RESULT whose rank count or lengths do not add up";
    }
    /* One byte at least so that an all-empty allgather still returns an
     * allocation the caller can swy_free. */
    uint8_t *data = swy_malloc(total > 0 ? total : 1);
    if (data == NULL) {
        swy_free(lens);
        evbuffer_drain(in, total);
        return "out of memory for a collective result";
    }
    if (total > 0)
        evbuffer_remove(in, data, total);

    pthread_mutex_lock(&boot->lock);
    swy_free(boot->result_data); /* a late result nobody waits for */
    swy_free(boot->result_lens);
    boot->result_seq = seq;
    boot->result_data = data;
    boot->result_lens = lens;
    pthread_cond_broadcast(&boot->cond);
    pthread_mutex_unlock(&boot->lock);
    return NULL;
}

/* Ask the root who is missing from collective seq (0: the join) and wait
 * briefly for the answer; fills text ("" if the root did not answer). */
void swy_boot_client_ask_missing(swy_boot_t *boot, uint64_t seq, char *text,
                                 size_t text_len)
{
    text[0] = '\0';
    uint8_t payload[8];
    swy_boot_put_u64(payload, seq);
    pthread_mutex_lock(&boot->lock);
    boot->missing_valid = 0;
    pthread_mutex_unlock(&boot->lock);
    if (swy_boot_client_send(boot, SWY_BOOT_MSG_MISSING_REQ, payload,
                             sizeof(payload), NULL, 0) != 0)
        return;
    double deadline = swy_time_s() + CLIENT_MISSING_WAIT_S;
    pthread_mutex_lock(&boot->lock);
    while (!(boot->missing_valid && boot->missing_seq == seq) &&
           swy_time_s() < deadline && !atomic_load(&boot->conn_lost))
        swy_boot_client_wait(boot, deadline);
    if (boot->missing_valid && boot->missing_seq == seq)
        snprintf(text, text_len, "%s", boot->missing_text);
    pthread_mutex_unlock(&boot->lock);
}

swy_status_t swy_boot_allgather(swy_boot_t *boot, const void *mine,
                                size_t len, double timeout_s, void **all_p,
                                size_t *lens_p)
{
    if (boot == NULL || all_p == NULL || lens_p == NULL ||
        (mine == NULL && len > 0))
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_allgather: NULL argument");
    if (len > SWY_BOOT_MAX_MSG - 8)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "rank %d: allgather blob of %zu bytes exceeds "
                           "the control plane's %u-byte message limit",
                           boot->rank, len, (unsigned)SWY_BOOT_MAX_MSG);
    if (atomic_load(&boot->failure_status) != SWY_OK)
        return swy_boot_client_failure_error(boot);

    uint64_t seq = boot->next_seq++;
    uint8_t seq_be[8];
    swy_boot_put_u64(seq_be, seq);
    if (swy_boot_client_send(boot, SWY_BOOT_MSG_COLL, seq_be, sizeof(seq_be),
                             mine, len) != 0) {
        if (atomic_load(&boot->failure_status) != SWY_OK)
            return swy_boot_client_failure_error(boot);
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "rank %d: cannot queue allgather #%llu for the "
                           "root at %s",
                           boot->rank, (unsigned long long)seq,
                           boot->root_text);
    }

    double deadline = swy_time_s() + timeout_s;
    pthread_mutex_lock(&boot->lock);
    while (boot->result_seq != seq &&
           atomic_load(&boot->failure_status) == SWY_OK &&
           swy_time_s() < deadline)
        swy_boot_client_wait(boot, deadline);
    uint8_t *data = NULL;
    uint64_t *lens = NULL;
    if (boot->result_seq == seq) {
        data = boot->result_data;
        lens = boot->result_lens;
        boot->result_data = NULL;
        boot->result_lens = NULL;
        boot->result_seq = 0;
    }
    pthread_mutex_unlock(&boot->lock);

    if (data == NULL) {
        if (atomic_load(&boot->failure_status) != SWY_OK)
            return swy_boot_client_failure_error(boot);
        char missing[CLIENT_MSG_MAX];
        swy_boot_client_ask_missing(boot, seq, missing, sizeof(missing));
        return swy_err_set(SWY_ERR_TIMEOUT, "boot",
                           "rank %d: control-plane allgather #%llu timed "
                           "out after %.1f s; %s",
                           boot->rank, (unsigned long long)seq, timeout_s,
                           missing[0] ? missing
                                      : "the root did not say which ranks "
                                        "are missing");
    }
    for (int r = 0; r < boot->nranks; r++)
        lens_p[r] = (size_t)lens[r];
    swy_free(lens);
    *all_p = data;
    return SWY_OK;
}

swy_status_t swy_boot_barrier(swy_boot_t *boot, double timeout_s)
{
    if (boot == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_barrier: boot is NULL");
    size_t *lens = swy_calloc((size_t)boot->nranks, sizeof(*lens));
    if (lens == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "boot",
                           "rank %d: out of memory for a barrier",
                           boot->rank);
    void *all = NULL;
    swy_status_t status =
        swy_boot_allgather(boot, NULL, 0, timeout_s, &all, lens);
    swy_free(all);
    swy_free(lens);
    return status;
}
