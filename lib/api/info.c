/* Introspection for tools (swy-info) and frameworks: a communicator's
 * view of a peer (swy_comm_peer_info), and the texts of this host's
 * topology, the transports and the configuration (swy_describe). */
#include <stdio.h>
#include <string.h>

#include "api/comm_impl.h"
#include "util/abi.h"
#include "util/config.h"

swy_status_t swy_comm_peer_info(swy_comm_t comm, int peer,
                                swy_peer_info_t *given)
{
    static const char fn[] = "swy_comm_peer_info";
    swy_err_clear();
    if (comm == NULL || given == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "%s: %s is NULL", fn,
                           comm == NULL ? "comm" : "info");
    if (given->struct_size < SWY_PEER_INFO_SIZE_V1)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: struct_size %zu is below the %zu bytes of "
                            "swy_peer_info_t's first release (set it to "
                            "sizeof(swy_peer_info_t))", fn,
                            given->struct_size,
                            (size_t)SWY_PEER_INFO_SIZE_V1));
    /* Filled in whole here; the caller gets what its struct_size covers. */
    swy_peer_info_t all, *info = &all;
    if (peer < 0 || peer >= comm->nranks)
        return swy_api_fail(comm, swy_err_set(SWY_ERR_INVALID_ARG, "api",
                            "%s: peer %d out of range 0..%d", fn, peer,
                            comm->nranks - 1));
    const swy_topo_local_t *them = swy_topo_rank_info(comm->topo, peer);
    memset(info, 0, sizeof(*info));
    info->struct_size = given->struct_size;
    snprintf(info->hostname, sizeof(info->hostname), "%s", them->hostname);
    info->node = swy_topo_node_of(comm->topo, peer);
    info->numa = them->numa;
    snprintf(info->link_class, sizeof(info->link_class), "%s",
             swy_topo_link_class_name(
                 swy_topo_link_class(comm->topo, comm->rank, peer)));
    info->bandwidth = swy_topo_bandwidth(comm->topo, comm->rank, peer);
    info->latency = swy_topo_latency(comm->topo, comm->rank, peer);
    /* The transports are the engine's, indexed by its peers. */
    int lpeer = swy_api_peer(comm, peer);
    swy_transport_t *tp =
        swy_transport_for_peer(comm->transports, lpeer, SWY_MEM_HOST);
    if (tp != NULL) {
        snprintf(info->transport, sizeof(info->transport), "%s",
                 tp->ops->name);
        if (tp->ops->describe_peer != NULL)
            tp->ops->describe_peer(tp->ctx, lpeer, info->path,
                                   sizeof(info->path));
    }
    swy_struct_export(given, given->struct_size, info, sizeof(*info),
                      SWY_PEER_INFO_SIZE_V1);
    return SWY_OK;
}

typedef struct {
    char *buf;
    size_t len, at;
} text_t;

static void config_line(const swy_config_entry_t *e, const char *value,
                        void *arg)
{
    text_t *t = arg;
    char range[128] = "";
    if (e->type == SWY_CONFIG_INT || e->type == SWY_CONFIG_SIZE)
        snprintf(range, sizeof(range), " %.0f..%.0f", e->min, e->max);
    else if (e->type == SWY_CONFIG_DOUBLE)
        snprintf(range, sizeof(range), " %g..%g", e->min, e->max);
    else if (e->values != NULL)
        snprintf(range, sizeof(range), " of %s", e->values);
    /* A text that is not one of its values: what the library uses. */
    char shown[192];
    snprintf(shown, sizeof(shown), "%s", value ? value : "(unset)");
    if (!swy_config_text_ok(e->name, value))
        snprintf(shown, sizeof(shown), "%.120s (not one of them: %s used)",
                 value, e->default_value ? e->default_value : "unset");
    if (t->at < t->len)
        t->at += (size_t)snprintf(
            t->buf + t->at, t->len - t->at,
            "%-22s = %-10s (default: %s; %s%s)\n    %s\n", e->name, shown,
            e->default_value ? e->default_value : "unset",
            swy_config_type_name(e->type), range, e->help);
}

/* One variable as a Markdown section of docs/configuration.md: defaults
 * only, so that the page does not depend on the environment it was made
 * in. */
static void config_markdown(const swy_config_entry_t *e, const char *value,
                            void *arg)
{
    text_t *t = arg;
    (void)value;
    char range[512] = "";
    if (e->type == SWY_CONFIG_INT || e->type == SWY_CONFIG_SIZE)
        snprintf(range, sizeof(range), ", %.0f to %.0f", e->min, e->max);
    else if (e->type == SWY_CONFIG_DOUBLE)
        snprintf(range, sizeof(range), ", %g to %g", e->min, e->max);
    else if (e->values != NULL) {
        /* ", one of `a`, `b`, `c`" */
        size_t at = (size_t)snprintf(range, sizeof(range), ", one of `");
        for (const char *v = e->values; *v != '\0' && at + 6 < sizeof(range);
             v++) {
            if (*v == ',')
                at += (size_t)snprintf(range + at, sizeof(range) - at, "`, `");
            else
                range[at++] = *v;
        }
        snprintf(range + at, sizeof(range) - at, "`");
    }
    char dflt[96] = "unset";
    if (e->default_value != NULL)
        snprintf(dflt, sizeof(dflt), "`%s`", e->default_value);
    if (t->at < t->len)
        t->at += (size_t)snprintf(t->buf + t->at, t->len - t->at,
                                  "### `%s`\n\nDefault %s; %s%s.\n\n%s\n\n",
                                  e->name, dflt,
                                  swy_config_type_name(e->type), range,
                                  e->help);
}

swy_status_t swy_describe(const char *what, char *buf, size_t len)
{
    swy_err_clear();
    if (what == NULL || buf == NULL || len == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_describe: %s",
                           what == NULL ? "what is NULL"
                           : buf == NULL ? "buf is NULL"
                                         : "len is 0");
    buf[0] = '\0';
    if (strcmp(what, "config") == 0) {
        /* The plugins' variables too: they are known once loaded. */
        swy_transport_plugins_config();
        text_t t = {buf, len, 0};
        t.at = (size_t)snprintf(buf, len, "%s\n\n", SWY_CONFIG_RULE);
        swy_config_foreach(config_line, &t);
        return SWY_OK;
    }
    if (strcmp(what, "config-markdown") == 0) {
        swy_transport_plugins_config();
        text_t t = {buf, len, 0};
        t.at = (size_t)snprintf(
            buf, len,
            "# Configuration variables\n\n"
            "Every `SWY_*` variable that Switchyard %s reads, with its "
            "default and what it does. Generated by `swy-info -c "
            "--markdown`; a test fails when this file differs from what "
            "the library says, so edit the table in the code, not this "
            "page.\n\nPrecedence: the environment, then the file that "
            "`SWY_CONFIG` names (written by `swy-tune`), then the "
            "default. %s\n\n",
            swy_version(), SWY_CONFIG_RULE);
        swy_config_foreach(config_markdown, &t);
        if (t.at >= len)
            return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_describe: "
                               "config-markdown needs more than %zu bytes",
                               len);
        return SWY_OK;
    }
    if (strcmp(what, "host") == 0) {
        swy_topo_local_t local;
        SWY_CHECK(swy_topo_discover(&local));
        swy_topo_describe_local(&local, buf, len);
        return SWY_OK;
    }
    if (strcmp(what, "transports") == 0) {
        swy_transport_set_t *set;
        SWY_CHECK(swy_transport_set_create(0, 1, &set));
        swy_transport_set_describe(set, buf, len);
        swy_transport_set_destroy(set);
        return SWY_OK;
    }
    return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_describe: what is "
                       "'%s'; use host, transports, config or "
                       "config-markdown", what);
}
