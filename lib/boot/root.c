/* The root service: one libevent loop in a background thread that admits
 * ranks (secret proof, HELLO: root_handshake.c), reads and checks their
 * frames (root_loop.c), runs allgather/barrier by concatenation
 * (root_coll.c), watches heartbeats and broadcasts failures
 * (root_failure.c). This file starts the service and releases it; the
 * files share root.h.
 *
 * Everything below runs in the root thread except swy_boot_root_start
 * (before the thread exists) and swy_boot_root_release (which only flags
 * the thread and joins it before touching anything). So no state here
 * needs a lock; bufferevents are created without BEV_OPT_THREADSAFE.
 *
 * The root never trusts a peer: every frame is checked for type, state and
 * length before it is read, and a bad peer is logged, sent REJECT and
 * closed without disturbing the other connections. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "boot/root.h"
#include "util/alloc.h"
#include "util/list.h"
#include "util/log.h"
#include "util/status.h"

/* Connections that are not (or no longer) ranks: a quarter of the fd
 * limit, within these bounds; past it the oldest is dropped, so a flood
 * cannot take the fds that ranks and transports need. */
#define ROOT_UNJOINED_MIN 16
#define ROOT_UNJOINED_MAX 1024
/* swy_boot_root_release: how long the joined ranks get to leave. */
#define ROOT_RELEASE_WAIT_S 30.0

void swy_boot_root_check_exit(swy_boot_root_t *root)
{
    if (atomic_load(&root->released) && root->nlive == 0)
        event_base_loopbreak(root->base);
}

/* A job that never formed and whose ranks all left starts afresh, so a
 * relaunch against the same root is judged on its own nranks. */
void swy_boot_root_maybe_reset(swy_boot_root_t *root)
{
    if (!root->ready && root->nlive == 0 && root->nranks > 0)
        swy_boot_root_free_slots(root);
}

static void root_wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    swy_boot_root_check_exit(arg);
}

static void *root_thread_main(void *arg)
{
    swy_boot_root_t *root = arg;
    swy_boot_block_sigpipe();

    event_base_loop(root->base, EVLOOP_NO_EXIT_ON_EMPTY);

    pthread_mutex_lock(&root->done_lock);
    root->thread_done = 1;
    pthread_cond_broadcast(&root->done_cond);
    pthread_mutex_unlock(&root->done_lock);
    return NULL;
}

/* This host's first non-loopback IPv4 address, else 127.0.0.1. */
static void root_default_host(char *host, size_t host_len)
{
    snprintf(host, host_len, "127.0.0.1");
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return;
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET)
            continue;
        if (!(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct sockaddr_in *in4 =
            (const struct sockaddr_in *)ifa->ifa_addr;
        inet_ntop(AF_INET, &in4->sin_addr, host, (socklen_t)host_len);
        break;
    }
    freeifaddrs(list);
}

static int root_is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)
                                       ->sin6_addr);
}

/* Free whatever root_start set up; the thread is not running. */
static void root_destroy(swy_boot_root_t *root)
{
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &root->conns)
        swy_boot_root_conn_free(swy_container_of(pos, root_conn_t, link));
    swy_boot_root_free_slots(root);
    if (root->listener != NULL)
        evconnlistener_free(root->listener);
    if (root->heartbeat_ev != NULL)
        event_free(root->heartbeat_ev);
    if (root->wake_ev != NULL)
        event_free(root->wake_ev);
    if (root->accept_ev != NULL)
        event_free(root->accept_ev);
    if (root->base != NULL)
        event_base_free(root->base);
    pthread_cond_destroy(&root->done_cond);
    pthread_mutex_destroy(&root->done_lock);
    swy_free(root);
}

swy_status_t swy_boot_root_start(const char *bind_host, uint16_t port,
                                 const uint8_t secret[SWY_BOOT_SECRET_LEN],
                                 swy_boot_root_t **root_p,
                                 swy_boot_addr_t *addr_p)
{
    if (secret == NULL || root_p == NULL || addr_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_root_start: %s is NULL",
                           secret == NULL ? "secret"
                           : root_p == NULL ? "root_p"
                                            : "addr_p");
    SWY_CHECK(swy_boot_libevent_init());

    char default_host[64];
    root_default_host(default_host, sizeof(default_host));
    char host[64];
    if (bind_host == NULL)
        snprintf(host, sizeof(host), "%s", default_host);
    else
        SWY_CHECK(swy_boot_resolve_host(bind_host, host, sizeof(host)));

    struct sockaddr_storage ss;
    socklen_t ss_len;
    if (swy_boot_sockaddr_fill(host, port, &ss, &ss_len) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "root bind address \"%s\" is not an IPv4 or "
                           "IPv6 address",
                           host);
    char where[96];
    swy_boot_hostport_text(host, port, where, sizeof(where));

    swy_status_t status;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "root: socket() for %s failed: %s", where,
                           strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, ss_len) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: cannot bind %s: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    if (listen(fd, SOMAXCONN) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: listen on %s failed: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: getsockname on %s failed: %s", where,
                             strerror(errno));
        close(fd);
        return status;
    }
    uint16_t bound_port =
        ntohs(bound.ss_family == AF_INET
                  ? ((struct sockaddr_in *)&bound)->sin_port
                  : ((struct sockaddr_in6 *)&bound)->sin6_port);
    /* Bound to a wildcard: ranks connect to this host's own address. */
    const char *advertised = root_is_wildcard(&bound) ? default_host : host;

    swy_boot_root_t *root = swy_calloc(1, sizeof(*root));
    if (root == NULL) {
        close(fd);
        return swy_err_set(SWY_ERR_NO_MEMORY, "boot",
                           "root: out of memory");
    }
    swy_list_init(&root->conns);
    pthread_mutex_init(&root->done_lock, NULL);
    pthread_cond_init(&root->done_cond, NULL);
    atomic_init(&root->released, 0);
    memcpy(root->secret, secret, SWY_BOOT_SECRET_LEN);
    swy_boot_hostport_text(advertised, bound_port, root->addr_text,
                           sizeof(root->addr_text));
    swy_boot_liveness(&root->heartbeat_s, &root->outage_s);
    struct rlimit fds;
    rlim_t fd_limit = getrlimit(RLIMIT_NOFILE, &fds) == 0 ? fds.rlim_cur
                                                         : 1024;
    root->max_unjoined =
        fd_limit / 4 < ROOT_UNJOINED_MIN   ? ROOT_UNJOINED_MIN
        : fd_limit / 4 > ROOT_UNJOINED_MAX ? ROOT_UNJOINED_MAX
                                           : (int)(fd_limit / 4);

    root->base = event_base_new();
    if (root->base == NULL) {
        close(fd);
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: event_base_new failed");
        goto err_destroy;
    }
    root->listener = evconnlistener_new(
        root->base, swy_boot_root_accept_cb, root,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (root->listener == NULL) {
        close(fd);
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: evconnlistener_new on %s failed",
                             root->addr_text);
        goto err_destroy;
    }
    evconnlistener_set_error_cb(root->listener, swy_boot_root_accept_error_cb);
    root->heartbeat_ev =
        event_new(root->base, -1, EV_PERSIST, swy_boot_root_heartbeat_cb, root);
    root->wake_ev = event_new(root->base, -1, 0, root_wake_cb, root);
    root->accept_ev =
        evtimer_new(root->base, swy_boot_root_accept_resume_cb, root);
    if (root->heartbeat_ev == NULL || root->wake_ev == NULL ||
        root->accept_ev == NULL) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: event_new failed");
        goto err_destroy;
    }
    struct timeval period;
    period.tv_sec = (time_t)root->heartbeat_s;
    period.tv_usec =
        (suseconds_t)((root->heartbeat_s - (double)period.tv_sec) * 1e6);
    event_add(root->heartbeat_ev, &period);

    int rc = pthread_create(&root->thread, NULL, root_thread_main, root);
    if (rc != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, "boot",
                             "root: pthread_create failed: %s",
                             strerror(rc));
        goto err_destroy;
    }
    root->thread_started = 1;

    swy_boot_addr_t addr;
    memset(&addr, 0, sizeof(addr));
    snprintf(addr.host, sizeof(addr.host), "%s", advertised);
    addr.port = bound_port;
    memcpy(addr.secret, secret, SWY_BOOT_SECRET_LEN);
    swy_info("boot", "root listening on %s", root->addr_text);
    *addr_p = addr;
    *root_p = root;
    return SWY_OK;

err_destroy:
    root_destroy(root);
    return status;
}

void swy_boot_root_release(swy_boot_root_t *root)
{
    if (root == NULL)
        return;
    atomic_store(&root->released, 1);
    event_active(root->wake_ev, EV_TIMEOUT, 0);

    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)ROOT_RELEASE_WAIT_S;
    pthread_mutex_lock(&root->done_lock);
    int rc = 0;
    while (!root->thread_done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&root->done_cond, &root->done_lock,
                                    &deadline);
    int done = root->thread_done;
    pthread_mutex_unlock(&root->done_lock);
    if (!done) {
        /* The loop is running (it has been for 30 s): a break now is not
         * lost. */
        event_base_loopbreak(root->base);
    }
    pthread_join(root->thread, NULL);
    if (!done) {
        char ranks[256] = "";
        size_t used = 0;
        for (int r = 0; r < root->nranks && used + 16 < sizeof(ranks); r++)
            if (root->slots[r].state == SLOT_LIVE)
                used += (size_t)snprintf(ranks + used, sizeof(ranks) - used,
                                         "%s%d", used ? "," : "", r);
        swy_warn("boot",
                 "root %s: rank(s) %s still connected %.0f s after the "
                 "root was released; closing their connections",
                 root->addr_text, ranks, ROOT_RELEASE_WAIT_S);
    }
    root_destroy(root);
}
