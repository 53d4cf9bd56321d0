/* The transport set of one communicator: built-in self plus the plugins
 * that load and initialize, the address exchange over boot, and the choice
 * of a transport per (memory type, peer). */
#include <stdio.h>
#include <string.h>

#include <dlfcn.h>

#include "transport/device.h"
#include "transport/transport.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#define TP_SUBSYS "transport"

static swy_status_t set_add(swy_transport_set_t *set,
                            const swy_transport_v1_t *ops,
                            const swy_device_v1_t *dev,
                            const swy_send_hints_v1_t *hints,
                            void *dl_handle, const char *path)
{
    swy_transport_t *tp = &set->tps[set->count];
    memset(tp, 0, sizeof(*tp));
    /* The set keeps its own copies: the caller's tables are on its
     * stack. */
    tp->ops_table = *ops;
    ops = &tp->ops_table;
    if (dev != NULL) {
        tp->dev_table = *dev;
        dev = &tp->dev_table;
    }
    if (hints != NULL) {
        tp->hints_table = *hints;
        hints = &tp->hints_table;
    }
    swy_status_t status = ops->init(&set->host, &tp->ctx);
    if (status != SWY_OK) {
        /* UNSUPPORTED: nothing for it to do here (the nccl plugin on a
         * machine without a GPU), which is normal, not a warning. */
        SWY_LOG_AT(status == SWY_ERR_UNSUPPORTED ? SWY_LOG_INFO
                                                 : SWY_LOG_WARN,
                   TP_SUBSYS, "transport %s (%s): init failed (%s); not used",
                   ops->name, path, swy_status_string(status));
        return status;
    }
    tp->caps = (swy_transport_caps_v1_t){.struct_size = sizeof(tp->caps)};
    status = ops->query(tp->ctx, &tp->caps);
    if (status != SWY_OK) {
        swy_warn(TP_SUBSYS, "transport %s (%s): query failed (%s); not used",
                 ops->name, path, swy_status_string(status));
        ops->finalize(tp->ctx);
        return status;
    }
    tp->ops = ops;
    tp->dev = dev;
    tp->hints = hints;
    tp->dl_handle = dl_handle;
    snprintf(tp->path, sizeof(tp->path), "%s", path);
    set->count++;
    swy_debug(TP_SUBSYS,
              "transport %s from %s: mem types 0x%x, scores self %d "
              "same_numa %d same_node %d cross_node %d",
              ops->name, path, tp->caps.mem_types,
              tp->caps.score[SWY_LINK_SELF], tp->caps.score[SWY_LINK_SAME_NUMA],
              tp->caps.score[SWY_LINK_SAME_NODE],
              tp->caps.score[SWY_LINK_CROSS_NODE]);
    return SWY_OK;
}

static int set_find(const swy_transport_set_t *set, const char *name)
{
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->tps[i].ops->name, name) == 0)
            return i;
    return -1;
}

/* Load one plugin by name; every failure is logged and leaves the set as
 * it was (a missing plugin at info level, a broken one at warn). */
static void set_load_plugin(swy_transport_set_t *set, const char *name)
{
    char path[sizeof(set->tps[0].path)];
    char why[2048];
    if (set_find(set, name) >= 0) {
        swy_debug(TP_SUBSYS, "transport %s listed twice; loaded once", name);
        return;
    }
    if (set->count >= SWY_TRANSPORT_MAX) {
        swy_warn(TP_SUBSYS, "transport %s skipped: at most %d transports",
                 name, SWY_TRANSPORT_MAX);
        return;
    }
    swy_status_t status = swy_transport_plugin_find(name, path, sizeof(path),
                                                    why, sizeof(why));
    if (status != SWY_OK)
        /* No plugin to know its SWY_<NAME>_* names: they are typos. */
        swy_config_register(name, NULL, 0, 0);
    if (status != SWY_OK) {
        if (status == SWY_ERR_UNSUPPORTED)
            swy_info(TP_SUBSYS, "%s", why);
        else
            swy_warn(TP_SUBSYS, "%s", why);
        return;
    }
    swy_transport_v1_t ops_table;
    const swy_transport_v1_t *ops;
    void *dl_handle;
    status = swy_transport_plugin_open(path, &ops_table, &ops, &dl_handle,
                                       why, sizeof(why));
    if (status != SWY_OK) {
        if (status == SWY_ERR_UNSUPPORTED)
            swy_info(TP_SUBSYS, "%s", why);
        else
            swy_warn(TP_SUBSYS, "%s; not used", why);
        return;
    }
    /* A transport that moves device memory also offers device services;
     * a broken table costs only those (sends without priority). */
    swy_device_v1_t dev_table;
    const swy_device_v1_t *dev = NULL;
    if (swy_device_plugin_symbol(dl_handle, path, &dev_table, &dev, why,
                                 sizeof(why)) != SWY_OK) {
        swy_warn(TP_SUBSYS, "%s; its device services are not used", why);
        dev = NULL;
    }
    /* Likewise hinted sends: without them every send goes plain. */
    swy_send_hints_v1_t hints_table;
    const swy_send_hints_v1_t *hints = NULL;
    if (swy_send_hints_plugin_symbol(dl_handle, path, &hints_table, &hints,
                                     why, sizeof(why)) != SWY_OK) {
        swy_warn(TP_SUBSYS, "%s; its send hints are not used", why);
        hints = NULL;
    }
    /* The plugin's own name is what peers and SWY_TRANSPORT refer to. */
    if (strcmp(ops->name, name) != 0 && set_find(set, ops->name) >= 0) {
        swy_warn(TP_SUBSYS, "plugin %s calls itself %s, already loaded; not "
                            "used", path, ops->name);
        dlclose(dl_handle);
        return;
    }
    if (set_add(set, ops, dev, hints, dl_handle, path) != SWY_OK) {
        dlclose(dl_handle);
        return;
    }
    swy_info(TP_SUBSYS, "transport %s loaded from %s%s%s%s", ops->name, path,
             dev != NULL ? " with device services " : "",
             dev != NULL ? dev->name : "",
             hints == NULL ? "" : dev != NULL ? " and send hints"
                                              : " with send hints");
}

static swy_status_t set_create(int rank, int nranks,
                               const swy_transport_v1_t *given,
                               swy_transport_set_t **set_p)
{
    if (nranks <= 0 || rank < 0 || rank >= nranks)
        return swy_err_set(SWY_ERR_INVALID_ARG, TP_SUBSYS,
                           "transport set: rank %d of %d ranks", rank,
                           nranks);
    swy_transport_set_t *set = swy_calloc(1, sizeof(*set));
    if (set == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, TP_SUBSYS,
                           "transport set: out of memory");
    swy_status_t status = SWY_ERR_NO_MEMORY;
    set->rank = rank;
    set->nranks = nranks;
    set->host = (swy_transport_host_v1_t){
        .abi_version = SWY_TRANSPORT_ABI_V1,
        .struct_size = sizeof(swy_transport_host_v1_t),
        .log = swy_log,
        .config_get = swy_config_get,
        .alloc = swy_malloc,
        .free = swy_free,
        .rank = rank,
        .nranks = nranks,
        .size_parse = swy_config_parse_size,
    };
    for (int m = 0; m < SWY_MEM_NTYPES; m++) {
        set->peer_tp[m] = swy_malloc(sizeof(int) * (size_t)nranks);
        if (set->peer_tp[m] == NULL)
            goto err;
        for (int r = 0; r < nranks; r++)
            set->peer_tp[m][r] = -1;
    }

    status = set_add(set, swy_transport_self_ops(), NULL, NULL, NULL,
                     "built-in");
    if (status != SWY_OK) {
        swy_err_set(status, TP_SUBSYS, "built-in self transport: init failed");
        goto err;
    }

    if (given != NULL) {
        status = set_add(set, given, NULL, NULL, NULL, "given");
        if (status != SWY_OK) {
            swy_err_set(status, TP_SUBSYS, "transport %s: init failed for "
                        "rank %d", given->name, rank);
            goto err;
        }
        *set_p = set;
        return SWY_OK;
    }
    const char *list = swy_config_get_text("SWY_TRANSPORT_PLUGINS");
    char *names = swy_strdup(list != NULL ? list : "");
    if (names == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, TP_SUBSYS,
                             "transport set: out of memory");
        goto err;
    }
    for (char *save = NULL, *name = strtok_r(names, ", \t", &save);
         name != NULL; name = strtok_r(NULL, ", \t", &save))
        if (strcmp(name, "self") != 0)
            set_load_plugin(set, name);
    swy_free(names);
    *set_p = set;
    return SWY_OK;

err:
    swy_transport_set_destroy(set);
    return status;
}

swy_status_t swy_transport_set_create(int rank, int nranks,
                                      swy_transport_set_t **set_p)
{
    return set_create(rank, nranks, NULL, set_p);
}

swy_status_t swy_transport_set_create_given(int rank, int nranks,
                                            const swy_transport_v1_t *ops,
                                            swy_transport_set_t **set_p)
{
    if (ops == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, TP_SUBSYS,
                           "transport set: no transport given");
    return set_create(rank, nranks, ops, set_p);
}

/* The allgathered blob of one rank: per transport,
 *   u8 name_len, name, u32 addr_len, addr
 * Peers may have loaded other plugins; names pair them up. */
typedef struct {
    const void **addrs; /* [tp * nranks + rank] */
    size_t *lens;
    uint8_t *has;
} peer_addrs_t;

static swy_status_t blob_build(swy_transport_set_t *set, void **blob_p,
                               size_t *len_p)
{
    size_t total = 0;
    for (int t = 0; t < set->count; t++)
        total += 1 + strlen(set->tps[t].ops->name) + 4 +
                 set->tps[t].caps.max_address_len;
    uint8_t *blob = swy_malloc(total);
    if (blob == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, TP_SUBSYS,
                           "address exchange: out of memory");
    size_t off = 0;
    for (int t = 0; t < set->count; t++) {
        swy_transport_t *tp = &set->tps[t];
        size_t name_len = strlen(tp->ops->name);
        if (name_len > 255) {
            swy_free(blob);
            return swy_err_set(SWY_ERR_INVALID_ARG, TP_SUBSYS,
                               "transport name %.40s... is too long",
                               tp->ops->name);
        }
        blob[off++] = (uint8_t)name_len;
        memcpy(blob + off, tp->ops->name, name_len);
        off += name_len;
        size_t addr_len = tp->caps.max_address_len;
        swy_status_t status = tp->ops->get_address(tp->ctx, blob + off + 4,
                                                   &addr_len);
        if (status != SWY_OK || addr_len > tp->caps.max_address_len ||
            addr_len > UINT32_MAX) {
            swy_free(blob);
            return swy_err_set(status != SWY_OK ? status : SWY_ERR_INTERNAL,
                               TP_SUBSYS,
                               "transport %s: get_address failed (%s, %zu "
                               "bytes of at most %zu)",
                               tp->ops->name, swy_status_string(status),
                               addr_len, tp->caps.max_address_len);
        }
        uint32_t len32 = (uint32_t)addr_len;
        memcpy(blob + off, &len32, 4);
        off += 4 + addr_len;
    }
    *blob_p = blob;
    *len_p = off;
    return SWY_OK;
}

static swy_status_t blob_parse(swy_transport_set_t *set, int rank,
                               const uint8_t *blob, size_t len,
                               peer_addrs_t *pa)
{
    size_t off = 0;
    while (off < len) {
        size_t name_len = blob[off++];
        if (off + name_len + 4 > len)
            goto malformed;
        char name[256];
        memcpy(name, blob + off, name_len);
        name[name_len] = '\0';
        off += name_len;
        uint32_t addr_len;
        memcpy(&addr_len, blob + off, 4);
        off += 4;
        if (addr_len > len - off)
            goto malformed;
        int t = set_find(set, name);
        if (t >= 0) {
            size_t i = (size_t)t * (size_t)set->nranks + (size_t)rank;
            pa->addrs[i] = blob + off;
            pa->lens[i] = addr_len;
            pa->has[i] = 1;
        }
        off += addr_len;
    }
    return SWY_OK;
malformed:
    return swy_err_set(SWY_ERR_INTERNAL, TP_SUBSYS,
                       "address exchange: rank %d sent a malformed address "
                       "list (%zu bytes)",
                       rank, len);
}

static swy_link_class_t set_link_class(const swy_transport_set_t *set,
                                       const swy_topo_t *topo, int peer)
{
    if (topo != NULL)
        return swy_topo_link_class(topo, set->rank, peer);
    /* Without a topology only "self or not" is known; the farthest class
     * is the one every network transport serves. */
    return peer == set->rank ? SWY_LINK_SELF : SWY_LINK_CROSS_NODE;
}

static int set_serves(const swy_transport_set_t *set, const peer_addrs_t *pa,
                      int t, swy_mem_type_t mem, swy_link_class_t cls,
                      int peer)
{
    const swy_transport_t *tp = &set->tps[t];
    return (tp->caps.mem_types & (1u << mem)) != 0 && tp->caps.score[cls] > 0 &&
           pa->has[(size_t)t * (size_t)set->nranks + (size_t)peer];
}

/* SWY_TRANSPORT's transport, or -1 (with a warning when it names none). */
static int set_forced(const swy_transport_set_t *set)
{
    const char *forced = swy_config_get_text("SWY_TRANSPORT");
    int forced_t = -1;
    if (forced != NULL && forced[0] != '\0') {
        forced_t = set_find(set, forced);
        if (forced_t < 0)
            swy_warn(TP_SUBSYS, "SWY_TRANSPORT=%s: no such transport loaded; "
                                "choosing by score", forced);
    }
    return forced_t;
}

/* The transport for memory mem to peer over a link of class cls: the
 * highest score among those that serve it, ties to the earlier one
 * (self, then the plugin list's order, which every rank shares);
 * forced_t wins where it serves. pa NULL: every transport reaches the
 * peer (what swy_transport_set_describe shows). -1: none. */
static int set_pick(const swy_transport_set_t *set, int forced_t,
                    swy_mem_type_t mem, swy_link_class_t cls,
                    const peer_addrs_t *pa, int peer)
{
    int best = -1, best_score = 0;
    for (int t = 0; t < set->count; t++) {
        const swy_transport_t *tp = &set->tps[t];
        int serves = pa != NULL ? set_serves(set, pa, t, mem, cls, peer)
                                : (tp->caps.mem_types & (1u << mem)) != 0 &&
                                      tp->caps.score[cls] > 0;
        if (!serves)
            continue;
        if (t == forced_t)
            return t;
        if (tp->caps.score[cls] > best_score) {
            best = t;
            best_score = tp->caps.score[cls];
        }
    }
    return best;
}

static void set_choose(swy_transport_set_t *set, const swy_topo_t *topo,
                       const peer_addrs_t *pa)
{
    int forced_t = set_forced(set);
    for (int m = 0; m < SWY_MEM_NTYPES; m++)
        for (int peer = 0; peer < set->nranks; peer++)
            set->peer_tp[m][peer] =
                set_pick(set, forced_t, (swy_mem_type_t)m,
                         set_link_class(set, topo, peer), pa, peer);
}

void swy_transport_set_describe(const swy_transport_set_t *set, char *buf,
                                size_t len)
{
    size_t at = 0;
#define PUT(...)                                                              \
    do {                                                                      \
        if (at < len)                                                         \
            at += (size_t)snprintf(buf + at, len - at, __VA_ARGS__);          \
    } while (0)
    buf[0] = '\0';
    for (int i = 0; i < set->count; i++) {
        const swy_transport_t *tp = &set->tps[i];
        PUT("  %-6s %s\n         memory:%s%s  score self/numa/node/cross: "
            "%d/%d/%d/%d\n", tp->ops->name, tp->path,
            tp->caps.mem_types & (1u << SWY_MEM_HOST) ? " host" : "",
            tp->caps.mem_types & (1u << SWY_MEM_CUDA) ? " cuda" : "",
            tp->caps.score[SWY_LINK_SELF], tp->caps.score[SWY_LINK_SAME_NUMA],
            tp->caps.score[SWY_LINK_SAME_NODE],
            tp->caps.score[SWY_LINK_CROSS_NODE]);
    }
    const char *forced = swy_config_get_text("SWY_TRANSPORT");
    int forced_t = set_forced(set);
    PUT("\nChosen for host memory, per link class%s%s%s:\n",
        forced ? " (SWY_TRANSPORT=" : "", forced ? forced : "",
        forced ? ")" : "");
    for (int cls = 0; cls < SWY_LINK_NCLASSES; cls++) {
        int best = set_pick(set, forced_t, SWY_MEM_HOST,
                            (swy_link_class_t)cls, NULL, 0);
        PUT("  %-11s -> %s\n",
            swy_topo_link_class_name((swy_link_class_t)cls),
            best >= 0 ? set->tps[best].ops->name : "(none)");
    }
#undef PUT
}

swy_status_t swy_transport_set_address(swy_transport_set_t *set,
                                       void **blob_p, size_t *len_p)
{
    return blob_build(set, blob_p, len_p);
}

swy_status_t swy_transport_set_connect_all(swy_transport_set_t *set,
                                           const void *all,
                                           const size_t *rank_lens,
                                           const swy_topo_t *topo)
{
    size_t nr = (size_t)set->nranks;
    peer_addrs_t pa = {
        .addrs = swy_calloc(nr * (size_t)set->count, sizeof(void *)),
        .lens = swy_calloc(nr * (size_t)set->count, sizeof(size_t)),
        .has = swy_calloc(nr * (size_t)set->count, 1),
    };
    uint8_t *reachable = swy_calloc(nr, 1);
    swy_status_t status;
    if (pa.addrs == NULL || pa.lens == NULL || pa.has == NULL ||
        reachable == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, TP_SUBSYS,
                             "address exchange: out of memory");
        goto out;
    }
    size_t off = 0;
    for (int r = 0; r < set->nranks; r++) {
        SWY_CHECK_GOTO(blob_parse(set, r, (const uint8_t *)all + off,
                                  rank_lens[r], &pa),
                       status, out);
        off += rank_lens[r];
    }

    set_choose(set, topo, &pa);
    for (int peer = 0; peer < set->nranks; peer++) {
        if (set->peer_tp[SWY_MEM_HOST][peer] >= 0)
            continue;
        swy_link_class_t cls = set_link_class(set, topo, peer);
        char names[256];
        swy_transport_set_names(set, names, sizeof(names));
        status = swy_err_set(SWY_ERR_UNSUPPORTED, TP_SUBSYS,
                             "no transport reaches rank %d (link class %s) "
                             "for host memory from rank %d; loaded here: %s",
                             peer, swy_topo_link_class_name(cls), set->rank,
                             names);
        goto out;
    }

    for (int t = 0; t < set->count; t++) {
        swy_transport_t *tp = &set->tps[t];
        for (int peer = 0; peer < set->nranks; peer++) {
            reachable[peer] = 0;
            for (int m = 0; m < SWY_MEM_NTYPES; m++)
                if (set->peer_tp[m][peer] == t)
                    reachable[peer] = 1;
        }
        status = tp->ops->connect(tp->ctx, pa.addrs + (size_t)t * nr,
                                  pa.lens + (size_t)t * nr, reachable);
        if (status != SWY_OK) {
            status = swy_err_set(status, TP_SUBSYS,
                                 "transport %s: connect failed (%s)",
                                 tp->ops->name, swy_status_string(status));
            goto out;
        }
    }

    if (swy_log_enabled(SWY_LOG_DEBUG, TP_SUBSYS)) {
        for (int peer = 0; peer < set->nranks; peer++) {
            swy_transport_t *tp = swy_transport_for_peer(set, peer,
                                                         SWY_MEM_HOST);
            char desc[128] = "";
            if (tp->ops->describe_peer == NULL ||
                tp->ops->describe_peer(tp->ctx, peer, desc, sizeof(desc)) !=
                    SWY_OK)
                snprintf(desc, sizeof(desc), "%s", tp->ops->name);
            swy_debug(TP_SUBSYS, "rank %d -> %d (%s): %s", set->rank, peer,
                      swy_topo_link_class_name(set_link_class(set, topo,
                                                              peer)),
                      desc);
        }
    }
    status = SWY_OK;

out:
    swy_free(reachable);
    swy_free(pa.has);
    swy_free(pa.lens);
    swy_free(pa.addrs);
    return status;
}

swy_transport_t *swy_transport_for_peer(swy_transport_set_t *set, int peer,
                                        swy_mem_type_t mem)
{
    if (peer < 0 || peer >= set->nranks || (int)mem < 0 ||
        mem >= SWY_MEM_NTYPES)
        return NULL;
    int t = set->peer_tp[mem][peer];
    return t >= 0 ? &set->tps[t] : NULL;
}

void swy_transport_set_names(const swy_transport_set_t *set, char *buf,
                             size_t len)
{
    size_t n = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int t = 0; t < set->count && n < len; t++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", t > 0 ? ", " : "",
                              set->tps[t].ops->name);
}

int swy_transport_set_progress(swy_transport_set_t *set)
{
    int events = 0;
    for (int t = 0; t < set->count; t++)
        events += set->tps[t].ops->progress(set->tps[t].ctx);
    return events;
}

int swy_transport_set_arm(swy_transport_set_t *set, int *fds, int max)
{
    int n = 0;
    for (int t = 0; t < set->count; t++) {
        swy_transport_t *tp = &set->tps[t];
        if (tp->ops->event_fd == NULL || tp->ops->arm == NULL)
            return -1;
        int fd = tp->ops->event_fd(tp->ctx);
        if (fd < 0 || n >= max)
            return -1;
        if (tp->ops->arm(tp->ctx) != SWY_OK)
            return -1; /* events pending, or it cannot sleep */
        fds[n++] = fd;
    }
    return n;
}

void swy_transport_set_destroy(swy_transport_set_t *set)
{
    if (set == NULL)
        return;
    /* Reverse order; a plugin's code stays mapped until its finalize. */
    for (int t = set->count - 1; t >= 0; t--) {
        swy_transport_t *tp = &set->tps[t];
        tp->ops->finalize(tp->ctx);
        if (tp->dl_handle != NULL)
            dlclose(tp->dl_handle);
    }
    for (int m = 0; m < SWY_MEM_NTYPES; m++)
        swy_free(set->peer_tp[m]);
    swy_free(set);
}

swy_status_t swy_transport_isend(swy_transport_t *tp, int peer, uint64_t tag,
                                 const void *buf, size_t bytes,
                                 swy_mem_type_t mem, int prio, uint32_t hints,
                                 swy_transport_complete_cb_v1_t cb,
                                 void *cb_arg, void **handle_p)
{
    if (prio >= 0 && tp->dev != NULL && tp->dev->isend_prio != NULL)
        return tp->dev->isend_prio(tp->ctx, peer, tag, buf, bytes, mem, prio,
                                   cb, cb_arg, handle_p);
    if (hints != 0 && tp->hints != NULL)
        return tp->hints->isend_hinted(tp->ctx, peer, tag, buf, bytes, mem,
                                       hints, cb, cb_arg, handle_p);
    return tp->ops->isend(tp->ctx, peer, tag, buf, bytes, mem, cb, cb_arg,
                          handle_p);
}
