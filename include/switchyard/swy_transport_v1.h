/**
 * @file swy_transport_v1.h
 * @brief Transport plugin ABI, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_transport_v2.h) with a new symbol.
 *
 * A plugin is a shared object named `swy-transport-<name>.so` that exports
 * `const swy_transport_v1_t swy_transport_plugin_v1`. It does not link
 * libswitchyard: everything it needs from the host (logging, configuration,
 * allocation) comes through swy_transport_host_v1_t.
 *
 * Threading: the host calls every entry point of one context under one
 * lock (never concurrently). Completion callbacks are called only from
 * progress() or cancel(), never from isend()/irecv() themselves.
 *
 * Tags: the host gives 48-bit tags (bits 0..47); matching is on
 * (source peer, tag). A plugin may use bits 48..63 to carry the source.
 */
#ifndef SWY_TRANSPORT_V1_H
#define SWY_TRANSPORT_V1_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard.h"
#include "swy_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_TRANSPORT_ABI_V1 1u
#define SWY_TRANSPORT_PLUGIN_SYMBOL_V1 "swy_transport_plugin_v1"
#define SWY_TRANSPORT_TAG_BITS 48
#define SWY_TRANSPORT_TAG_MASK ((UINT64_C(1) << SWY_TRANSPORT_TAG_BITS) - 1)

/** What the host offers a plugin. Valid until finalize(). */
typedef struct {
    uint32_t abi_version; /**< SWY_TRANSPORT_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_transport_host_v1_t) */
    /** Log a message under the plugin's subsystem name. */
    void (*log)(swy_log_level_t level, const char *subsys, const char *fmt,
                ...) __attribute__((format(printf, 3, 4)));
    /** Value of a configuration variable (SWY_* from the config table,
     *  with its default), or NULL if the name is unknown. */
    const char *(*config_get)(const char *name);
    void *(*alloc)(size_t bytes);
    void (*free)(void *ptr);
    int rank;   /**< this rank in the communicator */
    int nranks; /**< communicator size */
    /** The library's parser of sizes ("512K", "63KiB", "1M": powers of
     *  1024): 0 with *value_p set, or -1 when text is not a size. */
    int (*size_parse)(const char *text, size_t *value_p);
} swy_transport_host_v1_t;

/** What a transport can do: the host sets struct_size (and zeroes the
 *  rest), query() writes what that covers (swy_struct_export()). */
typedef struct {
    uint32_t struct_size;               /**< the host's sizeof */
    uint32_t mem_types;                 /**< bit mask of 1u << swy_mem_type_t */
    int score[SWY_LINK_NCLASSES];       /**< preference per link class; <= 0:
                                             cannot reach that class */
    size_t max_address_len;             /**< upper bound of get_address() */
} swy_transport_caps_v1_t;

/** Completion of an isend/irecv: status, and bytes actually moved. */
typedef void (*swy_transport_complete_cb_v1_t)(void *cb_arg,
                                                swy_status_t status,
                                                size_t bytes);

typedef struct swy_transport_v1 {
    uint32_t abi_version; /**< SWY_TRANSPORT_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_transport_v1_t) */
    const char *name;     /**< e.g. "ucx" */
    /** The plugin's own SWY_<NAME>_* variables, config_count entries of
     *  config_var_size bytes (sizeof(swy_config_var_v1_t)), or NULL. The
     *  host adds them to its table when it loads the plugin, before
     *  init(): config_get() then knows them, swy-info -c lists them, and
     *  an unknown SWY_<NAME>_* variable warns. */
    const swy_config_var_v1_t *config;
    uint32_t config_count;
    uint32_t config_var_size;

    /** Create a context for one communicator. */
    swy_status_t (*init)(const swy_transport_host_v1_t *host, void **ctx_p);
    /** Capabilities; may depend on what init() found. */
    swy_status_t (*query)(void *ctx, swy_transport_caps_v1_t *caps);
    /** This rank's address, at most caps.max_address_len bytes. */
    swy_status_t (*get_address)(void *ctx, void *addr, size_t *len_p);
    /** Connect to the peers given all ranks' addresses (index = rank);
     *  reachable[r] is nonzero for ranks this transport will serve. */
    swy_status_t (*connect)(void *ctx, const void *const *addrs,
                            const size_t *lens, const uint8_t *reachable);
    /** Post a send; returns a handle for cancel() in *handle_p. */
    swy_status_t (*isend)(void *ctx, int peer, uint64_t tag, const void *buf,
                          size_t len, swy_mem_type_t mem,
                          swy_transport_complete_cb_v1_t cb, void *cb_arg,
                          void **handle_p);
    /** Post a receive of at most len bytes from peer with tag. A longer
     *  message completes with SWY_ERR_MISMATCH and writes at most len. */
    swy_status_t (*irecv)(void *ctx, int peer, uint64_t tag, void *buf,
                          size_t len, swy_mem_type_t mem,
                          swy_transport_complete_cb_v1_t cb, void *cb_arg,
                          void **handle_p);
    /** Try to cancel a posted operation; its callback then runs (with
     *  SWY_ERR_ABORTED if cancelled) from cancel() or a later progress(). */
    void (*cancel)(void *ctx, void *handle);
    /** Make progress; returns the number of events handled (>= 0). */
    int (*progress)(void *ctx);
    /** A file descriptor that becomes readable when progress is needed,
     *  or -1 if the transport cannot sleep (the host then polls). */
    int (*event_fd)(void *ctx);
    /** Prepare to sleep on event_fd(): SWY_OK when armed, SWY_INPROGRESS
     *  when events are already pending (call progress() instead). */
    swy_status_t (*arm)(void *ctx);
    /** Describe how a peer is reached (e.g. "ucx:posix/memory"). */
    swy_status_t (*describe_peer)(void *ctx, int peer, char *buf,
                                  size_t len);
    /** Release everything; posted operations are dropped silently. */
    void (*finalize)(void *ctx);
} swy_transport_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_TRANSPORT_V1_H */
