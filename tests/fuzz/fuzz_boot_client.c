/* libFuzzer harness: everything a rank reads from its root after the
 * handshake (COLL_RESULT, MISSING, QUIESCED, FAILED, REJECT, ...),
 * through the rank's own read callback. The harness includes client_loop.c
 * to reach it: the input goes into the input buffer of a rank's bufferevent
 * (over a socketpair nobody writes to) as if the root had sent it.
 * Input: a byte choosing nranks (1-4), then the bytes from the root. */
#include <stdlib.h>
#include <sys/socket.h>

#include "boot/client_loop.c"

static struct event_base *fuzz_base;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (fuzz_base == NULL) {
        setenv("SWY_LOG_LEVEL", "error", 1);
        if (swy_boot_libevent_init() != SWY_OK ||
            (fuzz_base = event_base_new()) == NULL)
            abort();
    }
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        abort();
    swy_boot_t *boot = swy_calloc(1, sizeof(*boot));
    boot->rank = 0;
    boot->nranks = 1 + data[0] % 4;
    boot->quiesced = swy_calloc((size_t)boot->nranks, 1);
    boot->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    boot->heartbeat_s = 2;
    boot->outage_s = 20;
    boot->next_seq = 1;
    snprintf(boot->root_text, sizeof(boot->root_text), "fuzz");
    pthread_mutex_init(&boot->lock, NULL);
    pthread_cond_init(&boot->cond, NULL);
    atomic_init(&boot->conn_lost, 0);
    atomic_init(&boot->closing, 0);
    atomic_init(&boot->failure_status, SWY_OK);
    atomic_init(&boot->failure_cb_called, 0);
    boot->base = fuzz_base;
    boot->bev = bufferevent_socket_new(
        fuzz_base, fds[0], BEV_OPT_CLOSE_ON_FREE | BEV_OPT_THREADSAFE);
    if (boot->quiesced == NULL || boot->event_fd < 0 || boot->bev == NULL)
        abort();

    /* libevent keeps the end of a bufferevent's input frozen outside
     * its own reads (evbuffer_add would refuse the bytes): thaw it for
     * the add, as a read does. */
    struct evbuffer *in = bufferevent_get_input(boot->bev);
    evbuffer_unfreeze(in, 0);
    if (evbuffer_add(in, data + 1, size - 1) != 0)
        abort();
    evbuffer_freeze(in, 0);
    bufferevent_lock(boot->bev);
    client_read_cb(boot->bev, boot);
    bufferevent_unlock(boot->bev);
    /* What a result handed out says must fit what was received. */
    if (boot->result_seq != 0) {
        uint64_t total = 0;
        for (int r = 0; r < boot->nranks; r++) {
            if (boot->result_lens[r] > size)
                abort();
            total += boot->result_lens[r];
        }
        if (total > size)
            abort();
    }

    /* libevent closes the socket and frees the bufferevent in deferred
     * callbacks: close it here, and let the loop run them. */
    bufferevent_setfd(boot->bev, -1);
    bufferevent_free(boot->bev);
    event_base_loop(fuzz_base, EVLOOP_NONBLOCK);
    close(fds[0]);
    close(fds[1]);
    close(boot->event_fd);
    swy_free(boot->result_data);
    swy_free(boot->result_lens);
    swy_free(boot->quiesced);
    pthread_cond_destroy(&boot->cond);
    pthread_mutex_destroy(&boot->lock);
    swy_free(boot);
    return 0;
}
