/* A transport and a policy plugin built against one layout of the plugin
 * ABI: the first release's (layouts_v1.h, the default) or, with
 * ABI_NEWER, a later release's whose tables are larger than this
 * library's (fields it does not know, set to values it must ignore).
 * Built as swy-transport-<name>.so and swy-policy-<name>.so (PLUGIN_NAME).
 *
 * The transport serves no peer (every score 0): loading, init, query,
 * the address exchange, connect and finalize run, and the library sends
 * nothing through it. The policy is first come, first served. Each
 * reports what it saw of the host's tables through the environment
 * (ABI_TEST_TRANSPORT, ABI_TEST_POLICY) for test_abi to check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layouts_v1.h"

#define VISIBLE __attribute__((visibility("default")))

#ifdef ABI_NEWER
/* A later release: one more field in each table, of the plugin's and of
 * the host's. */
typedef struct {
    swy_transport_v1_t base;
    void *(*future_entry)(void);
} transport_table_t;
typedef struct {
    swy_policy_v1_t base;
    void *(*future_entry)(void);
} policy_table_t;
typedef struct {
    swy_transport_host_v1_t base;
    void *(*future_service)(void);
} transport_host_t;
typedef struct {
    swy_policy_host_v1_t base;
    void *(*future_service)(void);
} policy_host_t;
typedef struct {
    swy_config_var_v1_t base;
    const char *future_text;
} config_var_t;
typedef struct {
    swy_transport_caps_v1_t base;
    uint64_t future_cap; /* past the host's caps: never written there */
} caps_t;
#define BASE(x) (x).base
#define TABLE_INIT(...)                                                       \
    {.base = {__VA_ARGS__}, .future_entry = future_entry}
#define VAR_INIT(...) {.base = {__VA_ARGS__}, .future_text = "ignored"}
static void *future_entry(void)
{
    abort(); /* the library must never call what it does not know */
}
#else
typedef abi_v1_transport_v1_t transport_table_t;
typedef abi_v1_policy_v1_t policy_table_t;
typedef abi_v1_transport_host_v1_t transport_host_t;
typedef abi_v1_policy_host_v1_t policy_host_t;
typedef swy_config_var_v1_t config_var_t;
typedef swy_transport_caps_v1_t caps_t;
#define BASE(x) (x)
#define TABLE_INIT(...) {__VA_ARGS__}
#define VAR_INIT(...) {__VA_ARGS__}
#endif

#define STR_(x) #x
#define STR(x) STR_(x)
#define NAME STR(PLUGIN_NAME)

/* ---- the transport ---- */

static int transport_ctx;

static swy_status_t t_init(const swy_transport_host_v1_t *given, void **ctx_p)
{
    /* The host's table, read by the rule: a field past its struct_size
     * (this plugin newer than the host) reads as zero. */
    transport_host_t host;
    if (swy_struct_import(&host, sizeof(host), given, given->struct_size,
                          SWY_STRUCT_END(swy_transport_host_v1_t,
                                         size_parse)) != 0)
        return SWY_ERR_INVALID_ARG;
    size_t size = 0;
    int parsed = BASE(host).size_parse != NULL &&
                 BASE(host).size_parse("64K", &size) == 0;
    const char *depth = BASE(host).config_get("SWY_" STR(PLUGIN_UPPER)
                                              "_DEPTH");
    char report[256];
    snprintf(report, sizeof(report), "rank=%d nranks=%d size=%zu depth=%s "
             "future=%s", BASE(host).rank, BASE(host).nranks,
             parsed ? size : (size_t)0, depth != NULL ? depth : "(null)",
#ifdef ABI_NEWER
             host.future_service == NULL ? "zero" : "set"
#else
             "none"
#endif
    );
    setenv("ABI_TEST_TRANSPORT", report, 1);
    *ctx_p = &transport_ctx;
    return SWY_OK;
}

static swy_status_t t_query(void *ctx, swy_transport_caps_v1_t *caps)
{
    (void)ctx;
    caps_t mine;
    memset(&mine, 0xff, sizeof(mine)); /* what the host must not get */
    BASE(mine).struct_size = caps->struct_size;
    BASE(mine).mem_types = 1u << SWY_MEM_HOST;
    for (int c = 0; c < SWY_LINK_NCLASSES; c++)
        BASE(mine).score[c] = 0; /* reaches no one: never chosen */
    BASE(mine).max_address_len = 1;
    if (swy_struct_export(caps, caps->struct_size, &mine, sizeof(mine),
                          SWY_STRUCT_END(swy_transport_caps_v1_t,
                                         max_address_len)) != 0)
        return SWY_ERR_INVALID_ARG;
    return SWY_OK;
}

static swy_status_t t_get_address(void *ctx, void *addr, size_t *len_p)
{
    (void)ctx;
    *(unsigned char *)addr = 0x5a;
    *len_p = 1;
    return SWY_OK;
}

static swy_status_t t_connect(void *ctx, const void *const *addrs,
                              const size_t *lens, const uint8_t *reachable)
{
    (void)ctx, (void)addrs, (void)lens, (void)reachable;
    return SWY_OK;
}

static swy_status_t t_isend(void *ctx, int peer, uint64_t tag,
                            const void *buf, size_t len, swy_mem_type_t mem,
                            swy_transport_complete_cb_v1_t cb, void *cb_arg,
                            void **handle_p)
{
    (void)ctx, (void)peer, (void)tag, (void)buf, (void)len, (void)mem;
    (void)cb, (void)cb_arg, (void)handle_p;
    return SWY_ERR_UNSUPPORTED;
}

static swy_status_t t_irecv(void *ctx, int peer, uint64_t tag, void *buf,
                            size_t len, swy_mem_type_t mem,
                            swy_transport_complete_cb_v1_t cb, void *cb_arg,
                            void **handle_p)
{
    (void)ctx, (void)peer, (void)tag, (void)buf, (void)len, (void)mem;
    (void)cb, (void)cb_arg, (void)handle_p;
    return SWY_ERR_UNSUPPORTED;
}

static void t_cancel(void *ctx, void *handle)
{
    (void)ctx, (void)handle;
}

static int t_progress(void *ctx)
{
    (void)ctx;
    return 0;
}

static void t_finalize(void *ctx)
{
    (void)ctx;
}

static const config_var_t t_config[] = {
    VAR_INIT("SWY_" STR(PLUGIN_UPPER) "_DEPTH", "3",
             "ABI test plugin: a number it reads back", SWY_CONFIG_INT, 1,
             10, NULL),
};

VISIBLE const transport_table_t swy_transport_plugin_v1 = TABLE_INIT(
    .abi_version = SWY_TRANSPORT_ABI_V1,
    .struct_size = sizeof(transport_table_t), .name = NAME,
    .config = (const swy_config_var_v1_t *)t_config,
    .config_count = sizeof(t_config) / sizeof(t_config[0]),
    .config_var_size = sizeof(config_var_t), .init = t_init,
    .query = t_query, .get_address = t_get_address, .connect = t_connect,
    .isend = t_isend, .irecv = t_irecv, .cancel = t_cancel,
    .progress = t_progress, .finalize = t_finalize);

/* ---- the policy ---- */

static int policy_ctx;

static swy_status_t p_init(const swy_policy_host_v1_t *given, void **ctx_p)
{
    policy_host_t host;
    if (swy_struct_import(&host, sizeof(host), given, given->struct_size,
                          SWY_STRUCT_END(swy_policy_host_v1_t, nranks)) != 0)
        return SWY_ERR_INVALID_ARG;
    char report[128];
    snprintf(report, sizeof(report), "rank=%d nranks=%d policy=%s",
             BASE(host).rank, BASE(host).nranks,
             BASE(host).config_get("SWY_POLICY"));
    setenv("ABI_TEST_POLICY", report, 1);
    *ctx_p = &policy_ctx;
    return SWY_OK;
}

static int p_compare(void *ctx, const swy_policy_uop_v1_t *a,
                     const swy_policy_uop_v1_t *b)
{
    (void)ctx;
    return a->ready_index < b->ready_index ? -1
           : a->ready_index > b->ready_index ? 1
                                             : 0;
}

static int p_admit(void *ctx, const swy_policy_link_v1_t *link,
                   const swy_policy_uop_v1_t *uop)
{
    (void)ctx;
    /* Per-call structs carry the host's struct_size: at least the first
     * release's. */
    if (SWY_STRUCT_HAS(swy_policy_link_v1_t, link->struct_size,
                       uplink_inflight_le_bytes) &&
        SWY_STRUCT_HAS(swy_policy_uop_v1_t, uop->struct_size, fair_key))
        setenv("ABI_TEST_POLICY_ADMIT", "1", 1);
    return SWY_POLICY_ISSUE;
}

static void p_finalize(void *ctx)
{
    (void)ctx;
}

VISIBLE const policy_table_t swy_policy_plugin_v1 = TABLE_INIT(
    .abi_version = SWY_POLICY_ABI_V1, .struct_size = sizeof(policy_table_t),
    .name = NAME, .description = "ABI test: first come, first served",
    .init = p_init, .compare = p_compare, .admit = p_admit,
    .finalize = p_finalize);
