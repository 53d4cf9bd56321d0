/* lib/transport: device-memory services (swy_device_v1, exported by a
 * transport plugin next to swy_transport_plugin_v1) for the whole library.
 *
 * Two ways in:
 *  - per transport: the loader keeps a plugin's swy_device_plugin_v1 in
 *    swy_transport_t.dev (isend_prio for sends with a priority);
 *  - process-wide: swy_device_ops() opens swy-transport-nccl.so along the
 *    plugin search path once and keeps its services only if the plugin
 *    sees a device. lib/api classifies user buffers with it, lib/coll
 *    copies and stages device memory with it. NULL on machines without a
 *    GPU (or without the plugin): every buffer is then host memory and no
 *    CUDA call is made after the first look.
 *
 * lib/ includes no CUDA header; everything device-side goes through the
 * plugin's table. */
#ifndef SWY_TRANSPORT_DEVICE_H
#define SWY_TRANSPORT_DEVICE_H

#include <stddef.h>

#include "switchyard/swy_device_v1.h"

#include "switchyard/swy_devcoll_v1.h"
#include "switchyard/swy_devmoe_v1.h"

/* Name of the plugin whose device services the process uses. */
#define SWY_DEVICE_PLUGIN_NAME "nccl"

/* The process's device services, or NULL when there are none (no plugin,
 * no driver, no device). The first call does the work (thread-safe, once);
 * later calls are a load. */
const swy_device_v1_t *swy_device_ops(void);

/* The plugin's device collectives (swy_devcoll_plugin_v1, from the same
 * plugin as swy_device_ops), or NULL: none there, no device services, or
 * SWY_DEVICE_COLL=staged. Device collectives then stage through host
 * memory. */
const swy_devcoll_v1_t *swy_devcoll_ops(void);

/* The plugin's row kernels of the MoE exchange (swy_devmoe_plugin_v1,
 * from the same plugin as swy_device_ops), or NULL: none there, or no
 * device services. lib/moe then refuses plans with device rows. */
const swy_devmoe_v1_t *swy_devmoe_ops(void);

/* Look for swy_devcoll_plugin_v1 in an opened plugin and validate it, as
 * swy_device_plugin_symbol does. */
swy_status_t swy_devcoll_plugin_symbol(void *dl_handle, const char *path,
                                       swy_devcoll_v1_t *table,
                                       const swy_devcoll_v1_t **dc_p,
                                       char *why, size_t why_len);

/* Look for swy_device_plugin_v1 in an opened plugin and validate it.
 * SWY_OK with *dev_p NULL when the plugin does not export it; SWY_OK with
 * *dev_p = table (the plugin's table read into it by the struct_size
 * rule) when it is valid; SWY_ERR_INVALID_ARG with *why set when it
 * is there but of the wrong ABI version or struct size, or lacks a
 * function. */
swy_status_t swy_device_plugin_symbol(void *dl_handle, const char *path,
                                      swy_device_v1_t *table,
                                      const swy_device_v1_t **dev_p,
                                      char *why, size_t why_len);

/* Does dev have the optional stream functions (none NULL)? Without them
 * an op on device memory waits for its stream with stream_sync, blocking
 * the caller. */
int swy_device_has_streams(const swy_device_v1_t *dev);

/* Memory type of a user buffer: the plugin's verdict when there are
 * device services, SWY_MEM_HOST otherwise (and for NULL). */
swy_mem_type_t swy_device_mem_type(const void *ptr);

/* Name of a memory type for messages: "host", "device", "unknown". */
const char *swy_mem_type_name(swy_mem_type_t mem);

/* Copy bytes inside one rank: memmove for host memory, the plugin's copy
 * for device memory (overlapping device regions go through a host bounce
 * buffer, since the plugin's copy forbids overlap). Returns when the data
 * is in dst. On failure the per-thread error names the copy and the
 * plugin's reason. */
swy_status_t swy_device_copy(void *dst, const void *src, size_t bytes,
                             swy_mem_type_t mem);

#endif
