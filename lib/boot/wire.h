/* lib/boot internal: the control-plane wire format and helpers shared by
 * the root (root*.c) and the client (client*.c).
 *
 * A frame is an 8-byte header, type then payload length (both u32, network
 * byte order), followed by the payload. Multi-byte payload fields are big
 * endian as well. Conversation:
 *
 *   root -> client  CHALLENGE  root nonce[32]
 *   client -> root  PROOF      rank nonce[32], HMAC (swy_boot_proof, rank)
 *   client -> root  HELLO      i32 rank, i32 nranks, i32 pid, hostname
 *   root -> client  PROOF      HMAC (swy_boot_proof, root), once the
 *                              rank's proof checked; a rank trusts no
 *                              frame before it (a REJECT before it only
 *                              ends the join)
 *   root -> client  READY      (all nranks joined)   or REJECT, then close
 *   both ways       HEARTBEAT  every SWY_HEARTBEAT_S seconds
 *   client -> root  COLL       u64 seq, blob (allgather; barrier = empty)
 *   root -> client  COLL_RESULT u64 seq, u32 nranks, u64 lens[], blobs
 *   both ways       FAILED     i32 status, message (relay / broadcast)
 *   client -> root  MISSING_REQ u64 seq (0: the join) -> MISSING reply
 *   root -> client  MISSING    u64 seq, u32 njoined, u32 count, i32 ranks[]
 *   client -> root  GOODBYE    (clean exit; the client then half-closes)
 *   both ways       COMM_FAILED u64 comm key, i32 status, message
 *
 * Only lib/boot includes libevent headers. */
#ifndef SWY_BOOT_WIRE_H
#define SWY_BOOT_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "boot/boot.h"

#define SWY_BOOT_HEADER_LEN 8
#define SWY_BOOT_NONCE_LEN 32
#define SWY_BOOT_DIGEST_LEN 32
#define SWY_BOOT_MAX_RANKS 65535
#define SWY_BOOT_MAX_HOSTNAME 255
/* Frames before the peer proved the secret are tiny; a peer without the
 * secret must not make the root buffer megabytes. */
#define SWY_BOOT_MAX_HANDSHAKE_MSG 1024
/* SWY_OUTAGE_S=auto is at least this many heartbeats. */
#define SWY_BOOT_HEARTBEAT_MISSES 5

typedef enum {
    SWY_BOOT_MSG_CHALLENGE = 1,
    SWY_BOOT_MSG_PROOF = 2,
    SWY_BOOT_MSG_HELLO = 3,
    SWY_BOOT_MSG_READY = 4,
    SWY_BOOT_MSG_REJECT = 5,
    SWY_BOOT_MSG_FAILED = 6,
    SWY_BOOT_MSG_GOODBYE = 7,
    SWY_BOOT_MSG_HEARTBEAT = 8,
    SWY_BOOT_MSG_COLL = 9,
    SWY_BOOT_MSG_COLL_RESULT = 10,
    SWY_BOOT_MSG_MISSING_REQ = 11,
    SWY_BOOT_MSG_MISSING = 12,
    /* rank -> root (empty): I read no other rank's memory any more;
     * root -> ranks (u32 rank, u32 flags): that rank did, or left or
     * died (flag SWY_BOOT_QUIESCED_GONE). */
    SWY_BOOT_MSG_QUIESCED = 13,
    /* both ways: u64 comm key, i32 status, message: a communicator other
     * than the job's own failed (a mismatch, timeout or abort on a split
     * communicator); the root relays it to every other rank, and only
     * the ranks holding that communicator act on it. */
    SWY_BOOT_MSG_COMM_FAILED = 14,
    SWY_BOOT_MSG_LAST = SWY_BOOT_MSG_COMM_FAILED,
} swy_boot_msg_type_t;

#define SWY_BOOT_QUIESCED_GONE 1u

static inline void swy_boot_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t swy_boot_get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void swy_boot_put_u64(uint8_t *p, uint64_t v)
{
    swy_boot_put_u32(p, (uint32_t)(v >> 32));
    swy_boot_put_u32(p + 4, (uint32_t)v);
}

static inline uint64_t swy_boot_get_u64(const uint8_t *p)
{
    return ((uint64_t)swy_boot_get_u32(p) << 32) | swy_boot_get_u32(p + 4);
}

/* Name of a message type for logs ("type 77" style for unknown ones is
 * produced by the caller). */
const char *swy_boot_msg_name(uint32_t type);

/* Whether a received status value is a real failure status; anything else
 * from the wire is treated as SWY_ERR_REMOTE. */
swy_status_t swy_boot_status_from_wire(int32_t value);

/* Append one frame (header + payload) to a bufferevent's output. Callers
 * writing from a thread other than the loop's lock the bufferevent around
 * it so that frames never interleave. Returns 0, -1 on allocation failure. */
int swy_boot_frame_write(struct bufferevent *bev, uint32_t type,
                         const void *payload, size_t len);
/* Reading frames, for the read callbacks of root and client. frame_peek:
 * 1 and the header's type and length when a whole header is buffered in
 * `in`, else 0 (nothing is consumed). frame_ready, once the caller has
 * accepted that header: 1 when the whole frame is buffered (the header
 * is drained, so the payload comes next in the input), else 0 after
 * asking libevent to call back only once it is. */
int swy_boot_frame_peek(struct evbuffer *in, uint32_t *type_p,
                        uint32_t *len_p);
int swy_boot_frame_ready(struct bufferevent *bev, uint32_t len);
/* As above with a payload in two pieces (a fixed part, then a blob). */
int swy_boot_frame_write2(struct bufferevent *bev, uint32_t type,
                          const void *part1, size_t len1, const void *part2,
                          size_t len2);

/* SHA-256 (FIPS 180-4), implemented in secret.c. */
typedef struct {
    uint32_t state[8];
    uint64_t total_bytes;
    uint8_t block[64];
    size_t block_len;
} swy_boot_sha256_t;

void swy_boot_sha256_init(swy_boot_sha256_t *ctx);
void swy_boot_sha256_update(swy_boot_sha256_t *ctx, const void *data,
                            size_t len);
void swy_boot_sha256_final(swy_boot_sha256_t *ctx,
                           uint8_t digest[SWY_BOOT_DIGEST_LEN]);

/* The proofs of the job secret, both ways: HMAC-SHA256 keyed with the
 * secret over a role label, the root's nonce, the rank's nonce and the
 * rank's HELLO payload. Both nonces make a recorded or relayed proof
 * useless elsewhere; the HELLO binds it to one rank. */
typedef enum {
    SWY_BOOT_PROOF_RANK, /* PROOF from a rank: it knows the secret */
    SWY_BOOT_PROOF_ROOT, /* PROOF from the root, in answer */
} swy_boot_proof_role_t;

#define SWY_BOOT_RANK_PROOF_LEN (SWY_BOOT_NONCE_LEN + SWY_BOOT_DIGEST_LEN)

void swy_boot_proof(const uint8_t secret[SWY_BOOT_SECRET_LEN],
                    swy_boot_proof_role_t role,
                    const uint8_t root_nonce[SWY_BOOT_NONCE_LEN],
                    const uint8_t rank_nonce[SWY_BOOT_NONCE_LEN],
                    const void *hello, size_t hello_len,
                    uint8_t digest_p[SWY_BOOT_DIGEST_LEN]);
/* Constant-time comparison; 1 when equal. */
int swy_boot_digest_equal(const uint8_t *a, const uint8_t *b, size_t len);

/* The control plane's liveness settings, read from the configuration:
 * the heartbeat period (SWY_HEARTBEAT_S) and the silence after which a
 * peer is declared failed with SWY_ERR_TIMEOUT (SWY_OUTAGE_S: auto is
 * SWY_TIMEOUT_S/10 and at least SWY_BOOT_HEARTBEAT_MISSES heartbeats;
 * never above SWY_TIMEOUT_S nor below two heartbeats). */
void swy_boot_liveness(double *heartbeat_s_p, double *outage_s_p);

/* Make libevent thread safe (evthread_use_pthreads) exactly once. */
swy_status_t swy_boot_libevent_init(void);

/* In the calling (boot) thread: a peer that vanished makes writev raise
 * SIGPIPE; it must only show up as EPIPE. The process's signal settings
 * stay untouched. */
void swy_boot_block_sigpipe(void);

/* "a.b.c.d:port" / "[v6]:port" of a socket address, for logs. */
void swy_boot_sockaddr_text(const struct sockaddr *sa, socklen_t sa_len,
                            char *text, size_t text_len);
/* Fill a sockaddr from a numeric host and a port; 0 or -1 if the host is
 * not a numeric IPv4/IPv6 address. */
int swy_boot_sockaddr_fill(const char *host, uint16_t port,
                           struct sockaddr_storage *ss, socklen_t *len_p);
/* Resolve a host name or numeric address to a numeric address (IPv4
 * preferred); SWY_ERR_INVALID_ARG naming the host when it does not
 * resolve. */
swy_status_t swy_boot_resolve_host(const char *name, char *numeric,
                                   size_t numeric_len);
/* "host:port" or "[host]:port" for messages. */
void swy_boot_hostport_text(const char *host, uint16_t port, char *text,
                            size_t text_len);

#endif
