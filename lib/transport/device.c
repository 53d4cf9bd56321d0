/* Device services for the process: the swy_device_v1 table of the nccl
 * plugin, opened once, and the helpers lib/api and lib/coll use to tell
 * and copy device memory (see device.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "transport/device.h"
#include "transport/transport.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

#define DEV_SUBSYS "transport"

static const char *device_missing_function(const swy_device_v1_t *dev)
{
    if (dev->name == NULL)
        return "name";
    if (dev->device_count == NULL)
        return "device_count";
    if (dev->mem_type == NULL)
        return "mem_type";
    if (dev->stream_sync == NULL)
        return "stream_sync";
    if (dev->copy == NULL)
        return "copy";
    if (dev->host_alloc == NULL)
        return "host_alloc";
    if (dev->host_free == NULL)
        return "host_free";
    if (dev->error_string == NULL)
        return "error_string";
    return NULL; /* isend_prio is optional: sends then go without priority */
}

int swy_device_has_streams(const swy_device_v1_t *dev)
{
    return dev != NULL && dev->stream_notify != NULL &&
           dev->stream_gate != NULL && dev->gate_open != NULL &&
           dev->stream_capturing != NULL;
}

swy_status_t swy_device_plugin_symbol(void *dl_handle, const char *path,
                                      swy_device_v1_t *table,
                                      const swy_device_v1_t **dev_p,
                                      char *why, size_t why_len)
{
    *dev_p = NULL;
    int found = swy_plugin_table(dl_handle, path, SWY_DEVICE_PLUGIN_SYMBOL_V1,
                                 SWY_DEVICE_ABI_V1, table, sizeof(*table),
                                 SWY_DEVICE_V1_SIZE_V1, why, why_len);
    if (found <= 0)
        return found == 0 ? SWY_OK : SWY_ERR_INVALID_ARG;
    const char *missing = device_missing_function(table);
    if (missing != NULL) {
        snprintf(why, why_len, "plugin %s: %s is NULL in %s", path, missing,
                 SWY_DEVICE_PLUGIN_SYMBOL_V1);
        return SWY_ERR_INVALID_ARG;
    }
    *dev_p = table;
    return SWY_OK;
}

swy_status_t swy_devcoll_plugin_symbol(void *dl_handle, const char *path,
                                       swy_devcoll_v1_t *dc,
                                       const swy_devcoll_v1_t **dc_p,
                                       char *why, size_t why_len)
{
    *dc_p = NULL;
    int found = swy_plugin_table(dl_handle, path,
                                 SWY_DEVCOLL_PLUGIN_SYMBOL_V1,
                                 SWY_DEVCOLL_ABI_V1, dc, sizeof(*dc),
                                 SWY_DEVCOLL_V1_SIZE_V1, why, why_len);
    if (found <= 0)
        return found == 0 ? SWY_OK : SWY_ERR_INVALID_ARG;
    const char *bad = NULL;
    if (dc->id_bytes == 0 || dc->id_bytes > SWY_DEVCOLL_ID_MAX)
        bad = "id_bytes out of 1..SWY_DEVCOLL_ID_MAX";
    else if (dc->name == NULL || dc->unique_id == NULL ||
             dc->comm_init == NULL || dc->comm_destroy == NULL ||
             dc->comm_abort == NULL || dc->launch == NULL ||
             dc->error_string == NULL)
        bad = "a function is NULL";
    if (bad != NULL) {
        snprintf(why, why_len, "plugin %s: %s: %s (ABI %u, %u bytes)", path,
                 SWY_DEVCOLL_PLUGIN_SYMBOL_V1, bad, dc->abi_version,
                 dc->struct_size);
        return SWY_ERR_INVALID_ARG;
    }
    *dc_p = dc;
    return SWY_OK;
}

/* swy_devmoe_plugin_v1 of an opened plugin, validated as the others:
 * SWY_OK with *dm_p NULL when it is absent. */
static swy_status_t devmoe_plugin_symbol(void *dl_handle, const char *path,
                                         swy_devmoe_v1_t *dm,
                                         const swy_devmoe_v1_t **dm_p,
                                         char *why, size_t why_len)
{
    *dm_p = NULL;
    int found = swy_plugin_table(dl_handle, path, SWY_DEVMOE_PLUGIN_SYMBOL_V1,
                                 SWY_DEVMOE_ABI_V1, dm, sizeof(*dm),
                                 SWY_DEVMOE_V1_SIZE_V1, why, why_len);
    if (found <= 0)
        return found == 0 ? SWY_OK : SWY_ERR_INVALID_ARG;
    if (dm->name == NULL || dm->alloc == NULL || dm->free_mem == NULL ||
        dm->upload == NULL || dm->download == NULL || dm->pack == NULL ||
        dm->pack_bwd == NULL || dm->gather_rows == NULL ||
        dm->combine_fwd == NULL || dm->combine_bwd == NULL ||
        dm->error_string == NULL) {
        snprintf(why, why_len, "plugin %s: %s: a function is NULL (ABI %u, "
                 "%u bytes)", path, SWY_DEVMOE_PLUGIN_SYMBOL_V1,
                 dm->abi_version, dm->struct_size);
        return SWY_ERR_INVALID_ARG;
    }
    *dm_p = dm;
    return SWY_OK;
}

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static const swy_device_v1_t *device_ops;
static const swy_devcoll_v1_t *devcoll_ops;
static const swy_devmoe_v1_t *devmoe_ops;
/* The host's copies of the plugin's tables, which the pointers above
 * point at once they are valid. */
static swy_device_v1_t device_table;
static swy_devcoll_v1_t devcoll_table;
static swy_devmoe_v1_t devmoe_table;

/* Runs once. Everything that is normal on a machine without a GPU (no
 * plugin, a plugin that cannot load for lack of CUDA libraries, no
 * device) is a debug line; only a plugin with a broken device table
 * warns. Once device_count() ran, the CUDA runtime inside the plugin is
 * initialized: the handle then stays open for the process, whatever the
 * answer, rather than unmapping a runtime that may have registered exit
 * handlers. */
static void device_open(void)
{
    char path[1024], why[2048];
    swy_status_t status = swy_plugin_find("transport", SWY_DEVICE_PLUGIN_NAME,
                                          path, sizeof(path), why,
                                          sizeof(why));
    if (status != SWY_OK) {
        swy_debug(DEV_SUBSYS, "no device services: %s", why);
        return;
    }
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *err = dlerror();
        swy_debug(DEV_SUBSYS, "no device services: plugin %s: cannot load: "
                  "%s", path, err != NULL ? err : "unknown dlopen error");
        return;
    }
    const swy_device_v1_t *dev = NULL;
    status = swy_device_plugin_symbol(handle, path, &device_table, &dev, why,
                                      sizeof(why));
    if (status != SWY_OK) {
        swy_warn(DEV_SUBSYS, "%s; device buffers are not supported", why);
        dlclose(handle);
        return;
    }
    if (dev == NULL) {
        swy_debug(DEV_SUBSYS, "no device services: plugin %s does not "
                  "export %s", path, SWY_DEVICE_PLUGIN_SYMBOL_V1);
        dlclose(handle);
        return;
    }
    int count = dev->device_count();
    if (count <= 0) {
        swy_debug(DEV_SUBSYS, "no device services: %s (%s) sees no device",
                  dev->name, path);
        return;
    }
    swy_debug(DEV_SUBSYS, "device services %s from %s: %d device(s)",
              dev->name, path, count);
    device_ops = dev;
    const swy_devcoll_v1_t *dc = NULL;
    if (swy_devcoll_plugin_symbol(handle, path, &devcoll_table, &dc, why,
                                  sizeof(why)) != SWY_OK)
        swy_warn(DEV_SUBSYS, "%s; device collectives stage through host "
                 "memory", why);
    devcoll_ops = dc;
    const swy_devmoe_v1_t *dm = NULL;
    if (devmoe_plugin_symbol(handle, path, &devmoe_table, &dm, why,
                             sizeof(why)) != SWY_OK)
        swy_warn(DEV_SUBSYS, "%s; MoE plans take host rows only", why);
    devmoe_ops = dm;
}

const swy_device_v1_t *swy_device_ops(void)
{
    pthread_once(&device_once, device_open);
    return device_ops;
}

const swy_devcoll_v1_t *swy_devcoll_ops(void)
{
    pthread_once(&device_once, device_open);
    if (devcoll_ops == NULL)
        return NULL;
    const char *mode = swy_config_get_text("SWY_DEVICE_COLL");
    return mode != NULL && strcmp(mode, "staged") == 0 ? NULL : devcoll_ops;
}

const swy_devmoe_v1_t *swy_devmoe_ops(void)
{
    pthread_once(&device_once, device_open);
    return devmoe_ops;
}

swy_mem_type_t swy_device_mem_type(const void *ptr)
{
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev == NULL || ptr == NULL)
        return SWY_MEM_HOST;
    swy_mem_type_t mem = dev->mem_type(ptr);
    return mem == SWY_MEM_CUDA ? SWY_MEM_CUDA : SWY_MEM_HOST;
}

const char *swy_mem_type_name(swy_mem_type_t mem)
{
    switch (mem) {
    case SWY_MEM_HOST: return "host";
    case SWY_MEM_CUDA: return "device";
    default: return "unknown";
    }
}

static int regions_overlap(const void *a, const void *b, size_t bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y ? y - x < bytes : x - y < bytes;
}

swy_status_t swy_device_copy(void *dst, const void *src, size_t bytes,
                             swy_mem_type_t mem)
{
    if (bytes == 0 || dst == src)
        return SWY_OK;
    if (mem == SWY_MEM_HOST) {
        memmove(dst, src, bytes);
        return SWY_OK;
    }
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev == NULL)
        return swy_err_set(SWY_ERR_UNSUPPORTED, DEV_SUBSYS,
                           "copy of %zu bytes of %s memory: no device "
                           "services", bytes, swy_mem_type_name(mem));
    if (!regions_overlap(dst, src, bytes)) {
        if (dev->copy(dst, src, bytes) != SWY_OK)
            return swy_err_set(SWY_ERR_TRANSPORT, DEV_SUBSYS,
                               "device copy of %zu bytes from %p to %p "
                               "failed: %s", bytes, src, dst,
                               dev->error_string());
        return SWY_OK;
    }
    /* Overlapping device regions (an allgather whose sendbuf straddles
     * its own block): through host memory, two copies. */
    void *bounce = swy_malloc(bytes);
    if (bounce == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, DEV_SUBSYS,
                           "device copy of %zu overlapping bytes: no host "
                           "memory to stage them", bytes);
    swy_status_t status = SWY_OK;
    if (dev->copy(bounce, src, bytes) != SWY_OK ||
        dev->copy(dst, bounce, bytes) != SWY_OK)
        status = swy_err_set(SWY_ERR_TRANSPORT, DEV_SUBSYS,
                             "device copy of %zu overlapping bytes from %p "
                             "to %p failed: %s", bytes, src, dst,
                             dev->error_string());
    swy_free(bounce);
    return status;
}
