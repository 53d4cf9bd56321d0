/* lib/boot: the job's control plane on libevent.
 *
 * One process (the one that called swy_get_unique_id, or rank 0 under
 * swy_comm_init_env) runs the root service in a background thread. Every
 * rank, the root's own included, connects to it over TCP, proves the job
 * secret, and then uses the connection for allgather, barrier, and
 * failure notification. The root never crashes on bad input: connections
 * without the secret, malformed or oversized messages are logged and
 * dropped.
 *
 * Failure notification: when a rank's connection closes without a clean
 * goodbye, or a rank reports a failure (abort, mismatch), the root tells
 * every other rank; each rank's boot thread records the first failure
 * (status + message) and calls the failure callback. Each client also runs
 * a background thread (libevent) that keeps reading its connection, so a
 * failure is known within milliseconds even while the rank computes.
 *
 * Thread safety: every client call may be made from any thread, one
 * collective call (allgather/barrier) at a time per client.
 */
#ifndef SWY_BOOT_BOOT_H
#define SWY_BOOT_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"

#define SWY_BOOT_SECRET_LEN 32
#define SWY_BOOT_MAX_MSG (64u << 20) /* larger frames are rejected */

/* Decoded content of a swy_unique_id_t. */
typedef struct {
    char host[64];   /* numeric IPv4/IPv6 address of the root */
    uint16_t port;
    uint8_t secret[SWY_BOOT_SECRET_LEN];
} swy_boot_addr_t;

typedef struct swy_boot_root swy_boot_root_t;
typedef struct swy_boot swy_boot_t;

/* Encode/decode the 128-byte id (magic, version, address, secret);
 * decode fails with SWY_ERR_INVALID_ARG on a bad magic/version. */
swy_status_t swy_boot_id_encode(const swy_boot_addr_t *addr,
                                swy_unique_id_t *id);
swy_status_t swy_boot_id_decode(const swy_unique_id_t *id,
                                swy_boot_addr_t *addr_p);

/* Parse "host:port" / "[v6]:port" (host may be a name; resolved to a
 * numeric address). */
swy_status_t swy_boot_parse_hostport(const char *text, char *host,
                                     size_t host_len, uint16_t *port_p);

/* Derive a secret from a text (SWY_JOB_KEY or launcher job id) with a
 * cryptographic-quality mix (e.g. SHA-256 implemented here or FNV-based
 * expansion; both sides derive the same bytes). */
void swy_boot_secret_from_text(const char *text,
                               uint8_t secret[SWY_BOOT_SECRET_LEN]);
/* 32 random bytes from getrandom(2). */
swy_status_t swy_boot_secret_random(uint8_t secret[SWY_BOOT_SECRET_LEN]);

/* Start the root service. bind_host NULL: this host's first non-loopback
 * IPv4 address, else 127.0.0.1; otherwise a numeric IPv4/IPv6 address or
 * a name (resolved); port 0: ephemeral. On success fills *addr_p with the
 * address ranks must connect to and the secret. The root serves until
 * swy_boot_root_release() (or the process exits). Errors:
 * SWY_ERR_INVALID_ARG, SWY_ERR_SYSTEM (e.g. the port is taken). */
swy_status_t swy_boot_root_start(const char *bind_host, uint16_t port,
                                 const uint8_t secret[SWY_BOOT_SECRET_LEN],
                                 swy_boot_root_t **root_p,
                                 swy_boot_addr_t *addr_p);
/* The owner drops its reference and waits (at most 30 s) until every
 * joined rank has said goodbye or died, then stops the root thread and
 * frees everything; at once if no rank is connected. A process that is
 * also a rank finalizes its own swy_boot_t first. Accepts NULL. */
void swy_boot_root_release(swy_boot_root_t *root);

/* Join the job: connect (retrying until timeout_s, since the root may not
 * be up yet), prove the secret, announce (rank, nranks), wait until all
 * nranks ranks joined. Errors: SWY_ERR_TIMEOUT (names the missing ranks
 * when the root knows them), SWY_ERR_MISMATCH (nranks differs from the
 * first rank's, or the rank is taken), SWY_ERR_INVALID_ARG,
 * SWY_ERR_SYSTEM. */
swy_status_t swy_boot_connect(const swy_boot_addr_t *addr, int rank,
                              int nranks, double timeout_s,
                              swy_boot_t **boot_p);

int swy_boot_rank(const swy_boot_t *boot);
int swy_boot_nranks(const swy_boot_t *boot);

/* Allgather a blob of len bytes per rank (len may differ between ranks):
 * *all_p is one allocation (swy_free; at least 1 byte even when every
 * blob is empty) of the blobs in rank order, lens_p[r] each blob's length
 * (caller supplies nranks slots), offsets in rank order. The total must
 * fit SWY_BOOT_MAX_MSG. Every allgather/barrier carries a sequence number;
 * ranks that call them a different number of times fail with
 * SWY_ERR_MISMATCH on every rank. Fails with the recorded failure status
 * (promptly) if the job failed, SWY_ERR_TIMEOUT after timeout_s naming
 * the ranks that have not entered the call. A barrier is an allgather of
 * empty blobs. */
swy_status_t swy_boot_allgather(swy_boot_t *boot, const void *mine,
                                size_t len, double timeout_s, void **all_p,
                                size_t *lens_p);
swy_status_t swy_boot_barrier(swy_boot_t *boot, double timeout_s);

/* Report a failure to every rank (through the root): they record status
 * and msg (e.g. SWY_ERR_MISMATCH with the message naming op, peer and
 * counts; SWY_ERR_REMOTE for "rank r aborted"). Local failure state is set
 * too. Returns at once. */
void swy_boot_report_failure(swy_boot_t *boot, swy_status_t status,
                             const char *msg);

/* A failure scoped to one communicator (swy_comm_split's), named job-wide
 * by key: every rank records it (the first per key), and those holding
 * that communicator fail it; the job goes on. Returns at once. */
void swy_boot_report_comm_failure(swy_boot_t *boot, uint64_t key,
                                  swy_status_t status, const char *msg);
/* How many scoped failures this rank has recorded: cheap, for a progress
 * loop to see that something new arrived. */
uint64_t swy_boot_comm_failures(swy_boot_t *boot);
/* An eventfd written at each scoped failure, for poll()ing beside the
 * transports' fds; the poller reads it empty. */
int swy_boot_comm_failure_fd(swy_boot_t *boot);
/* SWY_OK, or the status of the scoped failure recorded for key (its
 * message copied to msg, which may be NULL). */
swy_status_t swy_boot_comm_failure(swy_boot_t *boot, uint64_t key,
                                   char *msg, size_t len);

/* SWY_OK while nobody failed; else the first failure's status, its
 * message copied to msg (may be NULL). Cheap (atomic read first). */
swy_status_t swy_boot_failure(swy_boot_t *boot, char *msg, size_t len);

/* Called once from the boot thread when the first failure is recorded
 * (to wake a sleeping progress loop); it must not block. Set it right
 * after swy_boot_connect; if a failure was recorded before, cb is called
 * at once from the setting thread (still only once). */
void swy_boot_set_failure_callback(swy_boot_t *boot,
                                   void (*cb)(void *arg), void *arg);
/* A file descriptor readable once a failure was recorded (eventfd), for
 * poll()ing beside transport fds. */
int swy_boot_failure_fd(swy_boot_t *boot);

/* Quiescence, for a failed job: a rank whose communicator failed cancels
 * its receives and, once none is left in flight, reports itself quiesced:
 * from then on it reads no other rank's memory (a transport may read a
 * sender's buffer in place, as UCX's CMA rendezvous does), so a rank may
 * give the buffers of its failed sends back to the caller once their
 * receivers are quiesced. A rank that left or died counts as quiesced.
 * report: returns at once (nothing if the connection is gone). */
void swy_boot_report_quiesced(swy_boot_t *boot);
/* 1 when rank reported itself quiesced, left or died (as the root last
 * told this rank); 0 otherwise or when rank is out of range. */
int swy_boot_peer_quiesced(swy_boot_t *boot, int rank);
/* 1 when rank left or died: nothing of it drains what was sent to it any
 * more (a send it never took stays queued, and reads nothing); 0
 * otherwise, also for a rank that only reported itself quiesced. */
int swy_boot_peer_gone(swy_boot_t *boot, int rank);
/* 1 once the connection to the root is gone: no more news from anyone. */
int swy_boot_lost(swy_boot_t *boot);

/* Leave cleanly: tell the root goodbye (not a failure), close, free.
 * Accepts NULL. */
void swy_boot_finalize(swy_boot_t *boot);
/* Leave as failed: report "rank r aborted" to all, close, free. */
void swy_boot_abort(swy_boot_t *boot, const char *why);

#endif
