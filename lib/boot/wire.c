/* Frame writing, message names and socket-address helpers shared by the
 * root and the client (see wire.h for the format). */
#include <signal.h>
#include "boot/wire.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "util/config.h"
#include "util/status.h"

const char *swy_boot_msg_name(uint32_t type)
{
    switch (type) {
    case SWY_BOOT_MSG_CHALLENGE: return "CHALLENGE";
    case SWY_BOOT_MSG_PROOF: return "PROOF";
    case SWY_BOOT_MSG_HELLO: return "HELLO";
    case SWY_BOOT_MSG_READY: return "READY";
    case SWY_BOOT_MSG_REJECT: return "REJECT";
    case SWY_BOOT_MSG_FAILED: return "FAILED";
    case SWY_BOOT_MSG_GOODBYE: return "GOODBYE";
    case SWY_BOOT_MSG_HEARTBEAT: return "HEARTBEAT";
    case SWY_BOOT_MSG_COLL: return "COLL";
    case SWY_BOOT_MSG_COLL_RESULT: return "COLL_RESULT";
    case SWY_BOOT_MSG_MISSING_REQ: return "MISSING_REQ";
    case SWY_BOOT_MSG_MISSING: return "MISSING";
    case SWY_BOOT_MSG_QUIESCED: return "QUIESCED";
    case SWY_BOOT_MSG_COMM_FAILED: return "COMM_FAILED";
    }
    return "unknown";
}

swy_status_t swy_boot_status_from_wire(int32_t value)
{
    if (value <= SWY_ERR_INVALID_ARG && value >= SWY_ERR_INTERNAL)
        return (swy_status_t)value;
    return SWY_ERR_REMOTE;
}

int swy_boot_frame_write2(struct bufferevent *bev, uint32_t type,
                          const void *part1, size_t len1, const void *part2,
                          size_t len2)
{
    uint8_t header[SWY_BOOT_HEADER_LEN];
    swy_boot_put_u32(header, type);
    swy_boot_put_u32(header + 4, (uint32_t)(len1 + len2));
    /* One evbuffer_add per piece; the caller holds the bufferevent lock
     * when other threads may write, so the pieces stay together. */
    struct evbuffer *out = bufferevent_get_output(bev);
    if (evbuffer_add(out, header, sizeof(header)) != 0)
        return -1;
    if (len1 > 0 && evbuffer_add(out, part1, len1) != 0)
        return -1;
    if (len2 > 0 && evbuffer_add(out, part2, len2) != 0)
        return -1;
    return 0;
}

int swy_boot_frame_peek(struct evbuffer *in, uint32_t *type_p,
                        uint32_t *len_p)
{
    uint8_t header[SWY_BOOT_HEADER_LEN];
    if (evbuffer_get_length(in) < SWY_BOOT_HEADER_LEN)
        return 0;
    evbuffer_copyout(in, header, sizeof(header));
    *type_p = swy_boot_get_u32(header);
    *len_p = swy_boot_get_u32(header + 4);
    return 1;
}

int swy_boot_frame_ready(struct bufferevent *bev, uint32_t len)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t whole = SWY_BOOT_HEADER_LEN + (size_t)len;
    if (evbuffer_get_length(in) < whole) {
        /* Wake up only once the whole frame is here. */
        bufferevent_setwatermark(bev, EV_READ, whole, 0);
        return 0;
    }
    bufferevent_setwatermark(bev, EV_READ, 0, 0);
    evbuffer_drain(in, SWY_BOOT_HEADER_LEN);
    return 1;
}

int swy_boot_frame_write(struct bufferevent *bev, uint32_t type,
                         const void *payload, size_t len)
{
    return swy_boot_frame_write2(bev, type, payload, len, NULL, 0);
}

static pthread_once_t libevent_once = PTHREAD_ONCE_INIT;
static int libevent_init_rc;

static void libevent_init_once(void)
{
    libevent_init_rc = evthread_use_pthreads();
}

swy_status_t swy_boot_libevent_init(void)
{
    pthread_once(&libevent_once, libevent_init_once);
    if (libevent_init_rc != 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "evthread_use_pthreads failed: libevent cannot "
                           "be used from several threads");
    return SWY_OK;
}

void swy_boot_hostport_text(const char *host, uint16_t port, char *text,
                            size_t text_len)
{
    if (strchr(host, ':') != NULL)
        snprintf(text, text_len, "[%s]:%u", host, (unsigned)port);
    else
        snprintf(text, text_len, "%s:%u", host, (unsigned)port);
}

void swy_boot_sockaddr_text(const struct sockaddr *sa, socklen_t sa_len,
                            char *text, size_t text_len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (sa->sa_family == AF_INET && sa_len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, host, sizeof(host));
        port = ntohs(in4->sin_port);
    } else if (sa->sa_family == AF_INET6 &&
               sa_len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    swy_boot_hostport_text(host, port, text, text_len);
}

int swy_boot_sockaddr_fill(const char *host, uint16_t port,
                           struct sockaddr_storage *ss, socklen_t *len_p)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        *len_p = sizeof(*in4);
        return 0;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    /* A scope suffix ("fe80::1%eth0") is not understood by inet_pton. */
    char plain[64];
    snprintf(plain, sizeof(plain), "%s", host);
    char *percent = strchr(plain, '%');
    if (percent != NULL) {
        *percent = '\0';
        in6->sin6_scope_id = if_nametoindex(percent + 1);
    }
    if (inet_pton(AF_INET6, plain, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        *len_p = sizeof(*in6);
        return 0;
    }
    return -1;
}

void swy_boot_block_sigpipe(void)
{
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
}

void swy_boot_liveness(double *heartbeat_s_p, double *outage_s_p)
{
    /* The getters clamp each value to its range (config_table.c), so
     * every period here is finite and fits a timeval. */
    double timeout_s = swy_config_double("SWY_TIMEOUT_S");
    double heartbeat_s = swy_config_double("SWY_HEARTBEAT_S");
    double auto_s = timeout_s / 10;
    if (auto_s < SWY_BOOT_HEARTBEAT_MISSES * heartbeat_s)
        auto_s = SWY_BOOT_HEARTBEAT_MISSES * heartbeat_s;
    double outage_s = swy_config_get_double("SWY_OUTAGE_S", auto_s);
    /* Tolerating a longer outage than any operation waits would only
     * turn a clear error into a timeout of whatever waits on the peer. */
    if (outage_s > timeout_s)
        outage_s = timeout_s;
    /* Silence is checked once a heartbeat: less than two would declare
     * a live peer dead between two of its heartbeats. */
    if (outage_s < 2 * heartbeat_s)
        outage_s = 2 * heartbeat_s;
    *heartbeat_s_p = heartbeat_s;
    *outage_s_p = outage_s;
}
