/* Deliberately broken transport plugins for the loader's tests; one
 * source, one defect per build (BAD_ABI, BAD_SIZE: smaller than the
 * table's first release, NULL_FN, NO_SYMBOL; HINTS_BAD_ABI,
 * HINTS_NULL_FN: a broken send-hints table). HINTS_NEWER is no defect: a
 * send-hints table of a later release, larger than this host's, which
 * the loader accepts. Nothing here is ever called: the loader must
 * reject each broken table before. */
#include <stddef.h>

#include "switchyard/swy_send_hints_v1.h"
#include "switchyard/swy_transport_v1.h"

__attribute__((unused)) static swy_status_t bad_init(const swy_transport_host_v1_t *host,
                             void **ctx_p)
{
    (void)host;
    *ctx_p = NULL;
    return SWY_ERR_INTERNAL;
}

#ifdef NO_SYMBOL
/* The right structure under a wrong name. */
#define PLUGIN_SYMBOL swy_transport_plugin
#else
#define PLUGIN_SYMBOL swy_transport_plugin_v1
#endif

#ifdef BAD_ABI
#define PLUGIN_ABI 99u
#else
#define PLUGIN_ABI SWY_TRANSPORT_ABI_V1
#endif

#ifdef BAD_SIZE
#define PLUGIN_SIZE (sizeof(swy_transport_v1_t) - sizeof(void *))
#else
#define PLUGIN_SIZE sizeof(swy_transport_v1_t)
#endif

__attribute__((visibility("default"))) const swy_transport_v1_t
    PLUGIN_SYMBOL = {
        .abi_version = PLUGIN_ABI,
        .struct_size = (uint32_t)PLUGIN_SIZE,
        .name = "bad",
#ifndef NULL_FN
        .init = bad_init,
#endif
};

#if defined(HINTS_BAD_ABI) || defined(HINTS_NEWER) || defined(HINTS_NULL_FN)
__attribute__((unused)) static swy_status_t bad_isend_hinted(
    void *ctx, int peer, uint64_t tag, const void *buf, size_t len,
    swy_mem_type_t mem, uint32_t hints, swy_transport_complete_cb_v1_t cb,
    void *cb_arg, void **handle_p)
{
    return SWY_ERR_INTERNAL;
}

__attribute__((visibility("default"))) const swy_send_hints_v1_t
    swy_send_hints_plugin_v1 = {
#ifdef HINTS_BAD_ABI
        .abi_version = 7u,
#else
        .abi_version = SWY_SEND_HINTS_ABI_V1,
#endif
#ifdef HINTS_NEWER
        .struct_size = (uint32_t)(sizeof(swy_send_hints_v1_t) + 8),
#else
        .struct_size = (uint32_t)sizeof(swy_send_hints_v1_t),
#endif
#ifndef HINTS_NULL_FN
        .isend_hinted = bad_isend_hinted,
#endif
};
#endif
