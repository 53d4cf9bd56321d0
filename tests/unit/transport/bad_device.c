/* Deliberately broken device-service tables (swy_device_plugin_v1) for
 * the loader's checks; one source, one defect per build (DEV_BAD_ABI,
 * DEV_BAD_SIZE, DEV_NULL_FN). Nothing here is ever called: the loader
 * must reject each table before calling into it. */
#include <stddef.h>

#include "switchyard/swy_device_v1.h"

__attribute__((unused)) static int bad_device_count(void)
{
    return 0;
}

#ifdef DEV_BAD_ABI
#define DEV_ABI 99u
#else
#define DEV_ABI SWY_DEVICE_ABI_V1
#endif

/* Shorter than the table's first release (a larger one is a later,
 * appended table, which is valid). */
#ifdef DEV_BAD_SIZE
#define DEV_SIZE offsetof(swy_device_v1_t, isend_prio)
#else
#define DEV_SIZE sizeof(swy_device_v1_t)
#endif

__attribute__((visibility("default"))) const swy_device_v1_t
    swy_device_plugin_v1 = {
        .abi_version = DEV_ABI,
        .struct_size = (uint32_t)DEV_SIZE,
        .name = "bad",
#ifndef DEV_NULL_FN
        .device_count = bad_device_count,
#endif
};
