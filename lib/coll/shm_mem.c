/* Memory from swy_mem_alloc (coll.h, swy_coll_mem_t): each allocation is
 * a memfd of this process, mapped here, whose pages are reserved at once.
 * A peer on the same host maps it by opening /proc/<pid>/fd/<fd> (the
 * same user, one PID namespace; ranks check that they can at init) and
 * keeps the mapping for the next op that names it, up to PEER_MAPS per
 * peer. Allocations are named by a number that this process never
 * reuses, and a peer checks the file's inode and size before it maps, so
 * a stale descriptor cannot map some other file. A free is announced in
 * the owner's ring of freed numbers in the channel (swy_coll_mem_attach);
 * a peer drops its mappings of them the next time it maps anything of
 * the owner's, so the pages go back then. (Truncating the file at the
 * free would give them back at once, but a peer still inside a failed
 * op's reduction would then die of SIGBUS instead of failing cleanly.) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/status.h"

#define PEER_MAPS 64
#define PROBE_MAGIC UINT64_C(0x5357594d454d5052) /* "SWYMEMPR" */

typedef struct mem_alloc {
    struct mem_alloc *next;
    char *base;
    size_t bytes;
    int fd;
    uint64_t id, ino;
} mem_alloc_t;

typedef struct {
    uint64_t id, ino, used;
    int64_t pid;
    char *base;
    size_t bytes;
} peer_map_t;

/* A rank's ring of freed numbers, in shared memory. */
typedef struct {
    _Atomic uint64_t count;
    uint64_t ids[SWY_COLL_MEM_RING];
} freed_ring_t;
_Static_assert(sizeof(freed_ring_t) <= SWY_COLL_MEM_RING_BYTES,
               "the ring fits its place");

struct swy_coll_mem {
    pthread_mutex_t lock;
    int nranks, rank;
    uint64_t next_id, uses;
    freed_ring_t **rings; /* [nranks] or NULL: not attached */
    uint64_t *seen;       /* [nranks] frees of each peer's acted on */
    mem_alloc_t *allocs;
    peer_map_t (*peers)[PEER_MAPS]; /* [nranks] */
};

swy_status_t swy_coll_mem_create(int nranks, swy_coll_mem_t **reg_p)
{
    swy_coll_mem_t *reg = swy_calloc(1, sizeof(*reg));
    if (reg != NULL && nranks > 0)
        reg->peers = swy_calloc((size_t)nranks, sizeof(*reg->peers));
    if (reg == NULL || (nranks > 0 && reg->peers == NULL)) {
        swy_free(reg);
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "out of memory");
    }
    pthread_mutex_init(&reg->lock, NULL);
    reg->nranks = nranks;
    *reg_p = reg;
    return SWY_OK;
}

static void unmap_peer(peer_map_t *m)
{
    if (m->base != NULL)
        munmap(m->base, m->bytes);
    memset(m, 0, sizeof(*m));
}

static void release(mem_alloc_t *a)
{
    munmap(a->base, a->bytes);
    if (a->fd >= 0)
        close(a->fd);
    swy_free(a);
}

swy_status_t swy_coll_mem_attach(swy_coll_mem_t *reg, int rank,
                                 char *const *places)
{
    freed_ring_t **rings = swy_calloc((size_t)reg->nranks, sizeof(*rings));
    uint64_t *seen = swy_calloc((size_t)reg->nranks, sizeof(*seen));
    if (rings == NULL || seen == NULL) {
        swy_free(rings);
        swy_free(seen);
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "out of memory");
    }
    for (int r = 0; r < reg->nranks; r++) {
        rings[r] = (freed_ring_t *)places[r];
        seen[r] = atomic_load_explicit(&rings[r]->count,
                                       memory_order_acquire);
    }
    pthread_mutex_lock(&reg->lock);
    reg->rank = rank;
    reg->rings = rings;
    reg->seen = seen;
    pthread_mutex_unlock(&reg->lock);
    return SWY_OK;
}

/* Drop this rank's mappings of peer p's allocations that p freed since
 * the last look; all of them when the ring went round meanwhile. Under
 * the lock. */
static void sweep(swy_coll_mem_t *reg, int p)
{
    if (reg->rings == NULL)
        return;
    freed_ring_t *ring = reg->rings[p];
    uint64_t upto = atomic_load_explicit(&ring->count, memory_order_acquire);
    uint64_t from = reg->seen[p];
    int all = upto - from > SWY_COLL_MEM_RING;
    for (uint64_t c = from; !all && c < upto; c++) {
        uint64_t id = ring->ids[c % SWY_COLL_MEM_RING];
        for (int i = 0; i < PEER_MAPS; i++)
            if (reg->peers[p][i].base != NULL && reg->peers[p][i].id == id)
                unmap_peer(&reg->peers[p][i]);
    }
    /* Numbers overwritten while read: drop everything of p's. */
    if (!all && atomic_load_explicit(&ring->count, memory_order_acquire) -
                        from > SWY_COLL_MEM_RING)
        all = 1;
    for (int i = 0; all && i < PEER_MAPS; i++)
        unmap_peer(&reg->peers[p][i]);
    reg->seen[p] = upto;
}

void swy_coll_mem_destroy(swy_coll_mem_t *reg)
{
    if (reg == NULL)
        return;
    while (reg->allocs != NULL) {
        mem_alloc_t *a = reg->allocs;
        reg->allocs = a->next;
        release(a);
    }
    for (int p = 0; p < reg->nranks; p++)
        for (int i = 0; i < PEER_MAPS; i++)
            unmap_peer(&reg->peers[p][i]);
    pthread_mutex_destroy(&reg->lock);
    swy_free(reg->rings);
    swy_free(reg->seen);
    swy_free(reg->peers);
    swy_free(reg);
}

swy_status_t swy_coll_mem_alloc(swy_coll_mem_t *reg, size_t bytes,
                                void **ptr)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (bytes == 0 || bytes > SIZE_MAX - pg || bytes > (size_t)INT64_MAX / 2)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_mem_alloc: "
                           "%zu bytes (1 .. %lld)", bytes,
                           (long long)(INT64_MAX / 2));
    size_t len = (bytes + pg - 1) / pg * pg;
    /* Reserving more than the machine has would only end with the OOM
     * killer. */
    long phys = sysconf(_SC_PHYS_PAGES);
    if (phys > 0 && len / pg > (size_t)phys)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "swy_mem_alloc: %zu "
                           "bytes, more than this machine's %zu", len,
                           (size_t)phys * pg);
    mem_alloc_t *a = swy_calloc(1, sizeof(*a));
    if (a == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "api", "out of memory");
    a->fd = memfd_create("switchyard", MFD_CLOEXEC);
    int rc = 0;
    if (a->fd < 0) {
        rc = errno;
    } else if (ftruncate(a->fd, (off_t)len) != 0) {
        rc = errno;
    } else {
        /* Reserve every page now: a shortage fails this call instead of
         * raising SIGBUS at some later touch. */
        rc = posix_fallocate(a->fd, 0, (off_t)len);
    }
    struct stat st;
    if (rc == 0 && fstat(a->fd, &st) != 0)
        rc = errno;
    if (rc == 0) {
        a->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd,
                       0);
        if (a->base == MAP_FAILED)
            rc = errno;
    }
    if (rc != 0) {
        if (a->fd >= 0)
            close(a->fd);
        swy_free(a);
        return swy_err_set(rc == ENOSPC || rc == ENOMEM || rc == EFBIG
                               ? SWY_ERR_NO_MEMORY
                               : SWY_ERR_SYSTEM,
                           "api", "swy_mem_alloc of %zu bytes: %s", len,
                           strerror(rc));
    }
    a->bytes = len;
    a->ino = (uint64_t)st.st_ino;
    pthread_mutex_lock(&reg->lock);
    a->id = ++reg->next_id;
    a->next = reg->allocs;
    reg->allocs = a;
    pthread_mutex_unlock(&reg->lock);
    *ptr = a->base;
    return SWY_OK;
}

swy_status_t swy_coll_mem_free(swy_coll_mem_t *reg, void *ptr)
{
    pthread_mutex_lock(&reg->lock);
    mem_alloc_t **pp = &reg->allocs;
    while (*pp != NULL && (*pp)->base != ptr)
        pp = &(*pp)->next;
    mem_alloc_t *a = *pp;
    if (a != NULL) {
        *pp = a->next;
        if (reg->rings != NULL) { /* tell the peers */
            freed_ring_t *ring = reg->rings[reg->rank];
            uint64_t c = atomic_load_explicit(&ring->count,
                                              memory_order_relaxed);
            ring->ids[c % SWY_COLL_MEM_RING] = a->id;
            atomic_store_explicit(&ring->count, c + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&reg->lock);
    if (a == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_mem_free: %p "
                           "is not an address swy_mem_alloc returned on "
                           "this communicator (or it was freed)", ptr);
    release(a);
    return SWY_OK;
}

int swy_coll_mem_find(swy_coll_mem_t *reg, const void *ptr, size_t bytes,
                      swy_coll_mem_ref_t *ref)
{
    memset(ref, 0, sizeof(*ref));
    if (reg == NULL || ptr == NULL)
        return 0;
    const char *p = ptr;
    pthread_mutex_lock(&reg->lock);
    for (const mem_alloc_t *a = reg->allocs; a != NULL; a = a->next) {
        if (p < a->base || p > a->base + a->bytes ||
            bytes > (size_t)(a->base + a->bytes - p))
            continue;
        ref->valid = 1;
        ref->pid = (int64_t)getpid();
        ref->fd = a->fd;
        ref->id = a->id;
        ref->ino = a->ino;
        ref->size = a->bytes;
        ref->offset = (uint64_t)(p - a->base);
        break;
    }
    pthread_mutex_unlock(&reg->lock);
    return ref->valid;
}

/* Map the peer's file of ref (whole) into *m. */
static swy_status_t map_file(int peer, const swy_coll_mem_ref_t *ref,
                             peer_map_t *m)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%lld/fd/%d", (long long)ref->pid,
             ref->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return swy_err_set(err == ENOENT || err == ESRCH ? SWY_ERR_REMOTE
                                                         : SWY_ERR_SYSTEM,
                           "coll", "mapping rank %d's swy_mem_alloc memory "
                           "(%s): %s", peer, path, strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != ref->ino ||
        (uint64_t)st.st_size != ref->size) {
        close(fd);
        return swy_err_set(SWY_ERR_REMOTE, "coll", "rank %d's swy_mem_alloc "
                           "memory %llu is gone (freed while in use?)",
                           peer, (unsigned long long)ref->id);
    }
    void *base = mmap(NULL, ref->size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    close(fd);
    if (base == MAP_FAILED)
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "mapping %llu bytes of "
                           "rank %d's swy_mem_alloc memory: %s",
                           (unsigned long long)ref->size, peer,
                           strerror(err));
    m->base = base;
    m->bytes = ref->size;
    m->id = ref->id;
    m->ino = ref->ino;
    m->pid = ref->pid;
    return SWY_OK;
}

swy_status_t swy_coll_mem_map(swy_coll_mem_t *reg, int peer,
                              const swy_coll_mem_ref_t *ref, size_t bytes,
                              char **addr_p)
{
    if (!ref->valid || peer < 0 || peer >= reg->nranks ||
        ref->offset > ref->size || bytes > ref->size - ref->offset)
        return swy_err_set(SWY_ERR_INTERNAL, "coll", "rank %d's memory "
                           "descriptor is not valid", peer);
    pthread_mutex_lock(&reg->lock);
    sweep(reg, peer);
    peer_map_t *maps = reg->peers[peer], *hit = NULL, *victim = &maps[0];
    for (int i = 0; i < PEER_MAPS && hit == NULL; i++) {
        if (maps[i].base != NULL && maps[i].id == ref->id &&
            maps[i].pid == ref->pid && maps[i].ino == ref->ino)
            hit = &maps[i];
        else if (maps[i].used < victim->used)
            victim = &maps[i];
    }
    swy_status_t status = SWY_OK;
    if (hit == NULL) {
        unmap_peer(victim);
        status = map_file(peer, ref, victim);
        if (status == SWY_OK) {
            hit = victim;
            swy_debug("coll", "mapped rank %d's swy_mem_alloc memory %llu "
                      "(%llu bytes)", peer, (unsigned long long)ref->id,
                      (unsigned long long)ref->size);
        }
    }
    if (hit != NULL) {
        hit->used = ++reg->uses;
        *addr_p = hit->base + ref->offset;
    }
    pthread_mutex_unlock(&reg->lock);
    return status;
}

swy_status_t swy_coll_mem_probe_make(swy_coll_mem_t *reg, void **probe,
                                     swy_coll_mem_ref_t *ref)
{
    SWY_CHECK(swy_coll_mem_alloc(reg, sizeof(uint64_t), probe));
    *(volatile uint64_t *)*probe = PROBE_MAGIC;
    swy_coll_mem_find(reg, *probe, sizeof(uint64_t), ref);
    return SWY_OK;
}

int swy_coll_mem_probe_peer(swy_coll_mem_t *reg, int peer,
                            const swy_coll_mem_ref_t *ref)
{
    peer_map_t m = {0};
    if (!ref->valid || map_file(peer, ref, &m) != SWY_OK) {
        swy_info("coll", "cannot map rank %d's memory (%s): collectives on "
                 "swy_mem_alloc buffers copy as on any others", peer,
                 ref->valid ? swy_err_last() : "it has no memfd");
        return 0;
    }
    int ok = *(volatile uint64_t *)m.base == PROBE_MAGIC;
    unmap_peer(&m);
    return ok;
}
