/* The engine: one per process's job (its transports, policy, progress
 * thread and per-peer links), the communicator views on it, its settings
 * and counters (sched.h; the rest of the engine is listed in
 * engine_impl.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "sched/engine_impl.h"

static void close_fds(swy_sched_t *s)
{
    int *fds[] = {&s->wake_fd, &s->park_fd, &s->timer_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/* The view's host map (c->host_of): engine hosts renumbered in the order
 * they first appear among the view's ranks, so that every member, whose
 * engine numbers hosts alike, gets the same map. NULL when some host is
 * unknown. */
static swy_status_t comm_number_hosts(swy_sched_t *s, swy_sched_comm_t *c)
{
    size_t n = (size_t)c->nranks;
    for (size_t r = 0; r < n; r++)
        if (s->links[c->peers[r]].host < 0)
            return SWY_OK;
    c->host_of = swy_malloc(n * sizeof(int));
    if (c->host_of == NULL)
        return SWY_ERR_NO_MEMORY;
    int nhosts = 0;
    for (size_t r = 0; r < n; r++) {
        int host = s->links[c->peers[r]].host;
        c->host_of[r] = -1;
        for (size_t q = 0; q < r && c->host_of[r] < 0; q++)
            if (s->links[c->peers[q]].host == host)
                c->host_of[r] = c->host_of[q];
        if (c->host_of[r] < 0)
            c->host_of[r] = nhosts++;
    }
    return SWY_OK;
}

/* A view, under s->lock (or before the engine runs). */
static swy_status_t comm_new(swy_sched_t *s,
                             const swy_sched_comm_params_t *params,
                             swy_sched_comm_t **comm_p)
{
    size_t n = (size_t)params->nranks;
    swy_sched_comm_t *c = swy_calloc(1, sizeof(*c));
    if (c == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    c->peers = swy_malloc(n * sizeof(int));
    c->p2p_send_seq = swy_calloc(2 * n, sizeof(uint32_t));
    if (c->peers == NULL || c->p2p_send_seq == NULL) {
        swy_free(c->peers);
        swy_free(c->p2p_send_seq);
        swy_free(c);
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    }
    c->p2p_recv_seq = c->p2p_send_seq + n;
    memcpy(c->peers, params->peers, n * sizeof(int));
    c->sched = s;
    c->id = params->id;
    c->key = params->key;
    c->rank = params->rank;
    c->nranks = params->nranks;
    c->owner = params->owner;
    c->shm = params->shm;
    c->shm_a2a = params->shm_a2a;
    c->boot = params->boot;
    s->own_boot_views += c->boot != NULL;
    for (size_t r = 0; r < n; r++)
        c->multi_host |= s->links[c->peers[r]].remote;
    if (comm_number_hosts(s, c) != SWY_OK) {
        swy_free(c->peers);
        swy_free(c->p2p_send_seq);
        swy_free(c);
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    }
    swy_list_init(&c->ops);
    swy_list_init(&c->p2p_blocked);
    swy_list_init(&c->early_headers);
    swy_list_init(&c->p2p_listening);
    swy_list_push_back(&s->comms, &c->link);
    *comm_p = c;
    return SWY_OK;
}

static void comm_free(swy_sched_comm_t *c)
{
    swy_sched_lane_free(c);
    swy_sched_p2p_free(c);
    /* Its id rests until every other one was used (swy_sched_comm_ids):
     * messages of its last ops may still arrive (a peer's headers of an
     * op it posted before it heard of a failure), and must meet no
     * receive of a later communicator. */
    if (c->id != 0)
        c->sched->retired_ids[c->id / 64] |= UINT64_C(1) << (c->id % 64);
    swy_list_del(&c->link);
    if (c->failed != SWY_OK)
        c->sched->n_failed_views--;
    c->sched->own_boot_views -= c->boot != NULL;
    swy_free(c->peers);
    swy_free(c->host_of);
    swy_free(c->p2p_send_seq);
    swy_free(c);
}

swy_status_t swy_sched_create(const swy_sched_params_t *params,
                              swy_sched_t **sched_p)
{
    swy_status_t status;
    swy_sched_t *s = swy_calloc(1, sizeof(*s));
    if (s == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    s->p = *params;
    s->wake_fd = s->park_fd = s->timer_fd = -1;
    s->links = swy_calloc((size_t)params->nranks, sizeof(*s->links));
    if (s->links == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
        goto err_free;
    }
    for (int i = 0; i < params->nranks; i++) {
        swy_list_init(&s->links[i].ready);
        s->links[i].last_prio = -1;
        s->links[i].remote = params->peer_remote != NULL &&
                             params->peer_remote[i] != 0;
        s->multi_host |= s->links[i].remote;
        s->links[i].host =
            params->peer_host != NULL ? params->peer_host[i] : -1;
        s->links[i].burst_bytes = params->peer_burst_bytes != NULL
                                      ? params->peer_burst_bytes[i]
                                      : params->window_bytes;
    }
    swy_list_init(&s->ops);
    swy_list_init(&s->stream_ops);
    swy_list_init(&s->launched);
    swy_list_init(&s->completed);
    swy_list_init(&s->detached);
    swy_list_init(&s->uop_pool);
    swy_list_init(&s->comms);
    int *identity = swy_malloc((size_t)params->nranks * sizeof(int));
    if (identity == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
        goto err_links;
    }
    for (int i = 0; i < params->nranks; i++)
        identity[i] = i;
    swy_sched_comm_params_t world = {
        .id = 0, .key = 0, .rank = params->rank, .nranks = params->nranks,
        .peers = identity, .owner = params->owner, .shm = params->shm,
        .shm_a2a = params->shm_a2a};
    status = comm_new(s, &world, &s->world);
    swy_free(identity);
    if (status != SWY_OK)
        goto err_links;
    s->stats.struct_size = sizeof(s->stats);
    s->p2p_match_tag = params->p2p_match_tag;
    s->credit_auto = params->credit_bytes == 0;
    s->credit_bytes = s->credit_auto ? params->partition_bytes
                                     : params->credit_bytes;
    s->partition_auto = !params->partition_set &&
                        params->partition_bytes == params->auto_partition_bytes;
    s->auto_partition_bytes = params->auto_partition_bytes
                                  ? params->auto_partition_bytes
                                  : params->partition_bytes;
    status = swy_policy_load(params->policy ? params->policy : "lina",
                             params->rank, params->nranks, &s->policy);
    if (status != SWY_OK)
        goto err_world;
    pthread_mutex_init(&s->lock, NULL);
    s->trace = swy_trace_create(params->rank, params->nranks);
    if (params->progress_thread) {
        s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        s->park_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        s->timer_fd = timerfd_create(CLOCK_MONOTONIC,
                                     TFD_NONBLOCK | TFD_CLOEXEC);
        if (s->wake_fd < 0 || s->park_fd < 0 || s->timer_fd < 0 ||
            pthread_create(&s->thread, NULL, swy_sched_progress_thread_main,
                           s) != 0) {
            status = swy_err_set(SWY_ERR_SYSTEM, "sched", "cannot start the "
                                 "progress thread");
            goto err_policy;
        }
        s->threaded = 1;
    }
    *sched_p = s;
    return SWY_OK;

err_policy:
    close_fds(s);
    swy_trace_finish(s->trace);
    pthread_mutex_destroy(&s->lock);
    swy_policy_unload(&s->policy);
err_world:
    comm_free(s->world);
err_links:
    swy_free(s->links);
err_free:
    swy_free(s);
    return status;
}

swy_sched_comm_t *swy_sched_world(swy_sched_t *s)
{
    return s->world;
}

swy_sched_t *swy_sched_of(const swy_sched_comm_t *c)
{
    return c->sched;
}

uint32_t swy_sched_comm_id(const swy_sched_comm_t *c)
{
    return c->id;
}

void swy_sched_comm_ids(swy_sched_t *s, uint64_t used[SWY_SCHED_COMM_IDS / 64])
{
    enum { WORDS = SWY_SCHED_COMM_IDS / 64 };
    memset(used, 0, SWY_SCHED_COMM_IDS / 8);
    pthread_mutex_lock(&s->lock);
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        used[c->id / 64] |= UINT64_C(1) << (c->id % 64);
    }
    /* Retired ids count as used until no id is left; then they are free
     * again, oldest news long gone. */
    int full = 1;
    for (int w = 0; w < WORDS && full; w++)
        full = (used[w] | s->retired_ids[w] | (w == 0)) == UINT64_MAX;
    if (full)
        memset(s->retired_ids, 0, sizeof(s->retired_ids));
    for (int w = 0; w < WORDS; w++)
        used[w] |= s->retired_ids[w];
    pthread_mutex_unlock(&s->lock);
}

swy_status_t swy_sched_comm_create(swy_sched_t *s,
                                   const swy_sched_comm_params_t *params,
                                   swy_sched_comm_t **comm_p)
{
    if (params->id == 0 || params->id >= SWY_SCHED_COMM_IDS ||
        params->nranks < 1 || params->rank < 0 ||
        params->rank >= params->nranks)
        return swy_err_set(SWY_ERR_INTERNAL, "sched", "bad view: id %u, "
                           "rank %d of %d", params->id, params->rank,
                           params->nranks);
    for (int r = 0; r < params->nranks; r++)
        if (params->peers[r] < 0 || params->peers[r] >= s->p.nranks)
            return swy_err_set(SWY_ERR_INTERNAL, "sched", "bad view: peer "
                               "%d of rank %d", params->peers[r], r);
    pthread_mutex_lock(&s->lock);
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next)
        if (swy_container_of(pos, swy_sched_comm_t, link)->id == params->id) {
            pthread_mutex_unlock(&s->lock);
            return swy_err_set(SWY_ERR_INTERNAL, "sched", "communicator id "
                               "%u is in use", params->id);
        }
    swy_status_t status = comm_new(s, params, comm_p);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_comm_destroy(swy_sched_comm_t *c)
{
    if (c == NULL || c == c->sched->world)
        return;
    swy_sched_t *s = c->sched;
    swy_list_t *pos, *tmp;
    pthread_mutex_lock(&s->lock);
    swy_sched_fail_comm(c, SWY_ERR_ABORTED, "communicator destroyed", 0);
    /* What is still failing is handed over as detached (swy_sched_op_drain). */
    swy_list_for_each_safe(pos, tmp, &c->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  clink);
        swy_sched_op_drain(op, 1);
    }
    comm_free(c);
    pthread_mutex_unlock(&s->lock);
}

int swy_sched_threads(const swy_sched_t *s)
{
    return s->threaded ? 1 : 0;
}

void swy_sched_destroy(swy_sched_t *s)
{
    swy_list_t *pos, *tmp;
    if (s == NULL)
        return;
    swy_sched_stop(s);
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        swy_sched_fail_comm(c, SWY_ERR_ABORTED, "communicator destroyed", 0);
    }
    swy_list_for_each_safe(pos, tmp, &s->ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  link);
        swy_sched_op_drain(op, 1);
    }
    /* Ops still waiting for their streams get a callback that writes
     * into them and the wake fd: wait for those (the streams get there,
     * their ops' gates opened as the ops failed above), for at most the
     * timeout; past it the engine is left allocated, not freed under a
     * callback to come. */
    double give_up = swy_time_s() + s->p.timeout_s;
    while (s->n_stream_ops > 0) {
        swy_sched_stream_ops_poll(s, 0);
        if (s->n_stream_ops == 0)
            break;
        if (swy_time_s() >= give_up) {
            swy_warn("sched", "%d op(s) still wait for their CUDA streams "
                     "after %.0f s: the engine's memory is not freed",
                     s->n_stream_ops, s->p.timeout_s);
            return;
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    swy_list_for_each_safe(pos, tmp, &s->detached) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        swy_free(uop);
    }
    swy_list_for_each_safe(pos, tmp, &s->uop_pool) {
        swy_uop_t *uop = swy_container_of(pos, swy_uop_t, op_link);
        swy_free(uop);
    }
    swy_list_for_each_safe(pos, tmp, &s->comms)
        comm_free(swy_container_of(pos, swy_sched_comm_t, link));
    swy_trace_finish(s->trace);
    swy_policy_unload(&s->policy);
    close_fds(s);
    pthread_mutex_destroy(&s->lock);
    swy_free(s->links);
    swy_free(s);
}

void swy_sched_phase_hint(swy_sched_t *s, int phase)
{
    pthread_mutex_lock(&s->lock);
    s->phase = phase;
    pthread_mutex_unlock(&s->lock);
}

void swy_sched_stats(swy_sched_t *s, swy_comm_stats_t *stats)
{
    pthread_mutex_lock(&s->lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->lock);
}

static swy_status_t parse_size_setting(const char *name, const char *value,
                                       size_t auto_value, size_t *out)
{
    if (strcmp(value, "auto") == 0) {
        *out = auto_value;
        return SWY_OK;
    }
    size_t parsed;
    if (swy_config_parse_size(value, &parsed) != 0 || parsed == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "sched", "%s='%s' is not a "
                           "positive size (e.g. 256K, 4M, auto)", name, value);
    *out = parsed;
    return SWY_OK;
}

/* Whether a receive from any source (or under SWY_P2P_MATCH=tag, any
 * receive) caught the header of a send no receive took yet: each mode
 * keeps them in its own way (p2p.c). */
static int p2p_headers_waiting(swy_sched_t *s)
{
    swy_list_t *pos;
    for (pos = s->comms.next; pos != &s->comms; pos = pos->next) {
        swy_sched_comm_t *c = swy_container_of(pos, swy_sched_comm_t, link);
        if (!swy_list_empty(&c->early_headers))
            return 1;
    }
    return 0;
}

swy_status_t swy_sched_configure(swy_sched_t *s, const char *name,
                                 const char *value)
{
    swy_status_t status = SWY_OK;
    size_t size = 0;
    pthread_mutex_lock(&s->lock);
    if (!swy_list_empty(&s->ops)) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "cannot change %s "
                             "while operations are in flight: wait for them "
                             "first", name);
    } else if (strcmp(name, "SWY_POLICY") == 0) {
        swy_policy_t fresh;
        status = swy_policy_load(value, s->p.rank, s->p.nranks, &fresh);
        if (status == SWY_OK) {
            swy_policy_unload(&s->policy);
            s->policy = fresh;
            if (s->policy.ops == &fresh.table) /* a plugin's: its copy */
                s->policy.ops = &s->policy.table;
        }
    } else if (strcmp(name, "SWY_PARTITION_BYTES") == 0) {
        status = parse_size_setting(name, value, s->auto_partition_bytes,
                                    &size);
        if (status == SWY_OK) {
            s->p.partition_bytes = size;
            s->partition_auto = strcmp(value, "auto") == 0;
            if (s->credit_auto)
                s->credit_bytes = size;
        }
    } else if (strcmp(name, "SWY_CREDIT_BYTES") == 0) {
        status = parse_size_setting(name, value, s->p.partition_bytes, &size);
        if (status == SWY_OK) {
            s->credit_auto = strcmp(value, "auto") == 0;
            s->credit_bytes = size;
        }
    } else if (strcmp(name, "SWY_WINDOW_BYTES") == 0) {
        status = parse_size_setting(name, value, 8u << 20, &size);
        if (status == SWY_OK)
            s->p.window_bytes = size;
    } else if (strcmp(name, "SWY_P2P_MATCH") == 0) {
        if (strcmp(value, "order") != 0 && strcmp(value, "tag") != 0)
            status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "SWY_P2P_MATCH"
                                 "='%s' is neither order nor tag", value);
        else if (p2p_headers_waiting(s))
            status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "cannot "
                                 "change SWY_P2P_MATCH while sends that no "
                                 "receive took yet have announced "
                                 "themselves: receive them first");
        else
            s->p2p_match_tag = value[0] == 't';
    } else {
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "%s cannot be "
                             "changed on a communicator (SWY_POLICY, "
                             "SWY_PARTITION_BYTES, SWY_CREDIT_BYTES, "
                             "SWY_WINDOW_BYTES and SWY_P2P_MATCH can)", name);
    }
    pthread_mutex_unlock(&s->lock);
    return status;
}

swy_status_t swy_sched_query(swy_sched_t *s, const char *name, char *buf,
                             size_t len)
{
    swy_status_t status = SWY_OK;
    pthread_mutex_lock(&s->lock);
    if (strcmp(name, "SWY_POLICY") == 0)
        snprintf(buf, len, "%s", s->policy.ops->name);
    else if (strcmp(name, "SWY_PARTITION_BYTES") == 0)
        snprintf(buf, len, "%zu", s->p.partition_bytes);
    else if (strcmp(name, "SWY_CREDIT_BYTES") == 0)
        snprintf(buf, len, "%zu", s->credit_bytes);
    else if (strcmp(name, "SWY_WINDOW_BYTES") == 0)
        snprintf(buf, len, "%zu", s->p.window_bytes);
    else if (strcmp(name, "SWY_PROGRESS") == 0)
        snprintf(buf, len, "%s", s->threaded ? "thread" : "caller");
    else if (strcmp(name, "SWY_P2P_MATCH") == 0)
        snprintf(buf, len, "%s", s->p2p_match_tag ? "tag" : "order");
    else
        status = swy_err_set(SWY_ERR_INVALID_ARG, "sched", "unknown setting "
                             "%s", name);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void swy_sched_set_auto_partition(swy_sched_t *s, size_t bytes)
{
    pthread_mutex_lock(&s->lock);
    s->auto_partition_bytes = bytes;
    if (s->partition_auto) {
        s->p.partition_bytes = bytes;
        if (s->credit_auto)
            s->credit_bytes = bytes;
    }
    pthread_mutex_unlock(&s->lock);
}

const char *swy_sched_policy_name(const swy_sched_t *s)
{
    return s->policy.ops->name;
}

size_t swy_sched_partition_bytes(const swy_sched_t *s)
{
    return s->p.partition_bytes;
}
