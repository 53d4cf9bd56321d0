/* A TEST DOUBLE of the nccl plugin's device services (swy_device_v1), for
 * machines without a GPU, where the real plugin sees no device and the
 * library's device paths would never run. "Device memory" here is one
 * arena of ordinary host memory that this double calls device memory;
 * copies are memmove. It moves nothing between ranks (no transport): it
 * serves the paths that stay inside one rank, such as the host staging
 * of device buffers (lib/coll/staged.c). The gpu suite runs the same
 * paths on a real GPU where one is lent.
 *
 * Built as swy-transport-nccl.so in a directory of its own, put first on
 * SWY_PLUGIN_PATH by the test that uses it. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "switchyard/swy_device_v1.h"

#define ARENA_BYTES ((size_t)64 << 20)

static char *arena;
static atomic_size_t stage_bytes_live;

void *swy_fake_device_arena(size_t *bytes_p);
size_t swy_fake_device_stage_live(void);

/* The arena (created on first use): what the test allocates its "device"
 * buffers from. */
__attribute__((visibility("default"))) void *
swy_fake_device_arena(size_t *bytes_p)
{
    if (arena == NULL) {
        void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        arena = p == MAP_FAILED ? NULL : p;
    }
    *bytes_p = arena != NULL ? ARENA_BYTES : 0;
    return arena;
}

/* Staging memory handed out and not yet returned (a leak check). */
__attribute__((visibility("default"))) size_t
swy_fake_device_stage_live(void)
{
    return atomic_load(&stage_bytes_live);
}

static int device_count(void)
{
    return 1;
}

static swy_mem_type_t mem_type(const void *ptr)
{
    const char *p = ptr;
    return arena != NULL && p >= arena && p < arena + ARENA_BYTES
               ? SWY_MEM_CUDA
               : SWY_MEM_HOST;
}

static swy_status_t stream_sync(void *stream)
{
    (void)stream;
    return SWY_OK;
}

static swy_status_t copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
    return SWY_OK;
}

/* A size header in front, so that host_free can account for it. */
static void *host_alloc(size_t bytes)
{
    size_t *p = malloc(sizeof(size_t) * 2 + bytes);
    if (p == NULL)
        return NULL;
    p[0] = bytes;
    atomic_fetch_add(&stage_bytes_live, bytes);
    memset(p + 2, 0xA5, bytes); /* what the op must not leak out */
    return p + 2;
}

static void host_free(void *ptr)
{
    if (ptr == NULL)
        return;
    size_t *p = (size_t *)ptr - 2;
    atomic_fetch_sub(&stage_bytes_live, p[0]);
    free(p);
}

static const char *error_string(void)
{
    return "no error (fake device)";
}

__attribute__((visibility("default"))) const swy_device_v1_t
    swy_device_plugin_v1 = {
        .abi_version = SWY_DEVICE_ABI_V1,
        .struct_size = sizeof(swy_device_v1_t),
        .name = "fake",
        .device_count = device_count,
        .mem_type = mem_type,
        .stream_sync = stream_sync,
        .copy = copy,
        .host_alloc = host_alloc,
        .host_free = host_free,
        .error_string = error_string,
};
