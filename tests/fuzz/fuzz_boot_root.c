/* libFuzzer harness: everything the root reads from a connection, through
 * its own accept and read callbacks, which the root's files share in
 * boot/root.h; a connection is accepted over a socketpair and the input goes
 * into its bufferevent's input buffer as if the peer had sent it. The
 * first byte chooses the connection's state:
 *   0  just accepted (CHALLENGE sent): the bytes are the peer's;
 *   1  a rank of a formed job of 1 or 2 ranks (bit 2): COLL, FAILED,
 *      MISSING_REQ, QUIESCED, GOODBYE, ...;
 *   2  the harness proves the secret for a HELLO made of the next
 *      data[1] bytes, then the rest follows: the HELLO parser and what
 *      comes after it. A job size within the root's range (1..65535) is
 *      folded to 1..FUZZ_MAX_NRANKS first: the root allocates a slot per
 *      rank, and a world of 65,535 ranks runs the same code as one of 4
 *      at a hundredth of the speed; sizes out of range are kept, so the
 *      range check is still fuzzed. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot/root.h"
#include "util/alloc.h"

#define FUZZ_MAX_NRANKS 4

static swy_boot_root_t *fuzz_root;

static void fuzz_setup(void)
{
    setenv("SWY_LOG_LEVEL", "error", 1);
    if (swy_boot_libevent_init() != SWY_OK)
        abort();
    fuzz_root = swy_calloc(1, sizeof(*fuzz_root));
    swy_list_init(&fuzz_root->conns);
    atomic_init(&fuzz_root->released, 0);
    swy_boot_secret_from_text("fuzz", fuzz_root->secret);
    snprintf(fuzz_root->addr_text, sizeof(fuzz_root->addr_text), "fuzz");
    fuzz_root->heartbeat_s = 2;
    fuzz_root->outage_s = 20;
    fuzz_root->max_unjoined = 16;
    fuzz_root->base = event_base_new();
    if (fuzz_root->base == NULL)
        abort();
}

static void put_frame_header(struct evbuffer *in, uint32_t type, size_t len)
{
    uint8_t header[SWY_BOOT_HEADER_LEN];
    swy_boot_put_u32(header, type);
    swy_boot_put_u32(header + 4, (uint32_t)len);
    if (evbuffer_add(in, header, sizeof(header)) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (fuzz_root == NULL)
        fuzz_setup();
    swy_boot_root_t *root = fuzz_root;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        abort();
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    swy_boot_root_accept_cb(NULL, fds[0], (struct sockaddr *)&sin, sizeof(sin),
                            root);
    if (swy_list_empty(&root->conns))
        abort();
    root_conn_t *conn =
        swy_container_of(root->conns.prev, root_conn_t, link);
    struct evbuffer *in = bufferevent_get_input(conn->bev);

    /* libevent keeps the end of a bufferevent's input frozen outside
     * its own reads (evbuffer_add would refuse the bytes): thaw it while
     * the harness adds them, as a read does. */
    evbuffer_unfreeze(in, 0);
    int mode = data[0] % 3;
    const uint8_t *rest = data + 1;
    size_t rest_len = size - 1;
    if (mode == 1) {
        int nranks = 1 + ((data[0] >> 2) & 1);
        root->slots = swy_calloc((size_t)nranks, sizeof(*root->slots));
        root->nranks = nranks;
        for (int r = 0; r < nranks; r++)
            root->slots[r].state = SLOT_LIVE;
        root->slots[0].conn = conn;
        root->nlive = nranks;
        root->ready = 1;
        root->coll_seq = 1;
        conn->state = CONN_JOINED;
        conn->rank = 0;
    } else if (mode == 2) {
        size_t hello_len = SWY_MIN((size_t)data[1], size - 2);
        uint8_t hello[UINT8_MAX];
        memcpy(hello, data + 2, hello_len);
        if (hello_len >= 8) {
            int32_t nranks = (int32_t)swy_boot_get_u32(hello + 4);
            if (nranks >= 1 && nranks <= SWY_BOOT_MAX_RANKS)
                swy_boot_put_u32(hello + 4, (uint32_t)(
                    1 + (nranks - 1) % FUZZ_MAX_NRANKS));
        }
        uint8_t proof[SWY_BOOT_RANK_PROOF_LEN];
        memset(proof, 0x11, SWY_BOOT_NONCE_LEN);
        swy_boot_proof(root->secret, SWY_BOOT_PROOF_RANK, conn->nonce, proof,
                       hello, hello_len, proof + SWY_BOOT_NONCE_LEN);
        put_frame_header(in, SWY_BOOT_MSG_PROOF, sizeof(proof));
        if (evbuffer_add(in, proof, sizeof(proof)) != 0)
            abort();
        put_frame_header(in, SWY_BOOT_MSG_HELLO, hello_len);
        if (evbuffer_add(in, hello, hello_len) != 0)
            abort();
        rest = data + 2 + hello_len;
        rest_len = size - 2 - hello_len;
    }
    if (evbuffer_add(in, rest, rest_len) != 0)
        abort();
    evbuffer_freeze(in, 0);
    swy_boot_root_conn_read_cb(conn->bev, conn);

    /* Back to an empty root for the next input. */
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &root->conns)
        swy_boot_root_conn_free(swy_container_of(pos, root_conn_t, link));
    swy_boot_root_free_slots(root);
    root->nlive = 0;
    root->ready = 0;
    root->coll_seq = 0;
    /* swy_boot_root_conn_free closed the socket; the loop runs the
     * deferred frees. */
    event_base_loop(root->base, EVLOOP_NONBLOCK);
    close(fds[1]);
    return 0;
}
