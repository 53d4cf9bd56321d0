/* The shared-memory channel of a one-host communicator (see coll.h):
 * creating, attaching and releasing its segment. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/status.h"

/* Slot size: 256 KiB (the pipelined chunk, SWY_COLL_PIPELINE_BYTES) while
 * the whole segment stays within SEGMENT_MAX, else the largest power of
 * two that keeps it there (4 ranks: 10 MiB; 8: 64 KiB slots, 9 MiB; 32:
 * 4 KiB slots, 8.3 MiB), never below a page; then one descriptor page
 * per rank (swy_coll_shm_desc). Docker's default /dev/shm is 64 MiB. */
#ifndef SWY_COLL_SHM_SEGMENT_MAX /* -D for experiments only */
#define SWY_COLL_SHM_SEGMENT_MAX ((size_t)16 << 20)
#endif
#ifndef SWY_COLL_SHM_SLOT_MAX
#define SWY_COLL_SHM_SLOT_MAX SWY_COLL_PIPELINE_BYTES
#endif
#define SEGMENT_MAX SWY_COLL_SHM_SEGMENT_MAX
#define SLOT_MIN ((size_t)4096)

static size_t slot_bytes_for(int nranks)
{
    size_t slots = 2 * (size_t)nranks * (size_t)(nranks + 1);
    size_t slot = SWY_COLL_SHM_SLOT_MAX;
    while (slot > SLOT_MIN && slot * slots > SEGMENT_MAX)
        slot >>= 1;
    return slot;
}

static swy_status_t map_segment(int fd, int rank, int nranks,
                                swy_coll_shm_t **shm_p)
{
    swy_coll_shm_t *shm = swy_calloc(1, sizeof(*shm));
    if (shm == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "out of memory");
    shm->rank = rank;
    shm->nranks = nranks;
    shm->slot_bytes = slot_bytes_for(nranks);
    shm->region_bytes = 2 * (size_t)(nranks + 1) * shm->slot_bytes;
    shm->bytes = (shm->region_bytes + SWY_COLL_SHM_DESC_BYTES) *
                 (size_t)nranks;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != shm->bytes) {
        swy_free(shm);
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "shared-memory channel: "
                           "the segment has %lld bytes, %zu expected",
                           (long long)st.st_size, shm->bytes);
    }
    void *base = mmap(NULL, shm->bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                      fd, 0);
    if (base == MAP_FAILED) {
        int err = errno;
        swy_free(shm);
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "shared-memory channel: "
                           "mmap of %zu bytes: %s", shm->bytes,
                           strerror(err));
    }
    shm->base = base;
    *shm_p = shm;
    return SWY_OK;
}

swy_status_t swy_coll_shm_create(int rank, int nranks, char *name_out,
                                 size_t name_len, swy_coll_shm_t **shm_p)
{
    if (nranks < 2 || nranks > SWY_COLL_SHM_MAX_RANKS || name_len < 2)
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "shared-memory "
                           "channel: %d ranks (2..%d)", nranks,
                           SWY_COLL_SHM_MAX_RANKS);
    size_t bytes = (2 * (size_t)(nranks + 1) * slot_bytes_for(nranks) +
                    SWY_COLL_SHM_DESC_BYTES) *
                   (size_t)nranks;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        snprintf(name_out, name_len, "/swy-%ld-%lx-%d", (long)getpid(),
                 (unsigned long)(ts.tv_nsec ^ ts.tv_sec), attempt);
        fd = shm_open(name_out, O_RDWR | O_CREAT | O_EXCL, 0600);
        err = errno;
        if (fd < 0 && err != EEXIST)
            break;
    }
    if (fd < 0) {
        name_out[0] = '\0';
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "shared-memory channel: "
                           "shm_open: %s", strerror(err));
    }
    /* Reserve the pages now: a tmpfs that is too small fails here. */
    int rc = ftruncate(fd, (off_t)bytes);
    if (rc == 0)
        rc = posix_fallocate(fd, 0, (off_t)bytes);
    else
        rc = errno;
    if (rc != 0) {
        close(fd);
        shm_unlink(name_out);
        name_out[0] = '\0';
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "shared-memory channel: "
                           "cannot reserve %zu bytes in /dev/shm: %s", bytes,
                           strerror(rc));
    }
    swy_status_t status = map_segment(fd, rank, nranks, shm_p);
    close(fd);
    if (status != SWY_OK) {
        shm_unlink(name_out);
        name_out[0] = '\0';
    }
    return status;
}

swy_status_t swy_coll_shm_attach(const char *name, int rank, int nranks,
                                 swy_coll_shm_t **shm_p)
{
    if (name == NULL || name[0] != '/' || nranks < 2 ||
        nranks > SWY_COLL_SHM_MAX_RANKS)
        return swy_err_set(SWY_ERR_INVALID_ARG, "coll", "shared-memory "
                           "channel: bad name or %d ranks", nranks);
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0)
        return swy_err_set(SWY_ERR_SYSTEM, "coll", "shared-memory channel: "
                           "shm_open %s: %s", name, strerror(errno));
    swy_status_t status = map_segment(fd, rank, nranks, shm_p);
    close(fd);
    return status;
}

void swy_coll_shm_unlink(const char *name)
{
    if (name != NULL && name[0] == '/')
        shm_unlink(name);
}

void swy_coll_shm_allow_pull(void)
{
#ifdef PR_SET_PTRACER
    /* Fails (EINVAL) where Yama is not built in: nothing stops the
     * reads then but the usual same-user rule. */
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

void swy_coll_shm_probe_pull(swy_coll_shm_t *shm, const int64_t *pids,
                             const uint64_t *addrs)
{
    int ok = 1;
    for (int r = 0; r < shm->nranks && ok; r++) {
        if (r == shm->rank)
            continue;
        uint64_t word = 0;
        struct iovec local = {&word, sizeof(word)};
        struct iovec remote = {(void *)(uintptr_t)addrs[r], sizeof(word)};
        ssize_t got = process_vm_readv((pid_t)pids[r], &local, 1, &remote,
                                       1, 0);
        if (got != (ssize_t)sizeof(word) || word != SWY_COLL_PULL_PROBE) {
            swy_info("coll", "alltoallv/shm: rank %d cannot read rank %d's "
                     "memory (pid %lld): %s; blocks go by copy", shm->rank,
                     r, (long long)pids[r],
                     got < 0 ? strerror(errno) : "wrong contents");
            ok = 0;
        }
    }
    atomic_store_explicit(&swy_coll_shm_ctl(shm, shm->rank)->can_pull,
                          (uint32_t)ok, memory_order_release);
}

void swy_coll_shm_destroy(swy_coll_shm_t *shm)
{
    if (shm == NULL)
        return;
    munmap(shm->base, shm->bytes);
    swy_free(shm);
}

int swy_coll_shm_enqueue(swy_coll_shm_t *shm, swy_coll_shm_user_t *user)
{
    user->next = NULL;
    if (shm->holder == NULL && shm->wait_head == NULL) {
        shm->holder = user;
        user->holding = 1;
        user->out_of_step = shm->broken;
        return !shm->broken;
    }
    user->waiting = 1;
    if (shm->wait_tail != NULL)
        shm->wait_tail->next = user;
    else
        shm->wait_head = user;
    shm->wait_tail = user;
    return 0;
}

void swy_coll_shm_leave(swy_coll_shm_t *shm, swy_coll_shm_user_t *user,
                        int broken)
{
    if (user->waiting) {
        swy_coll_shm_user_t **pp = &shm->wait_head, *prev = NULL;
        while (*pp != NULL && *pp != user) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp == user) {
            *pp = user->next;
            if (shm->wait_tail == user)
                shm->wait_tail = prev;
        }
        user->next = NULL;
        user->waiting = 0;
        return;
    }
    if (!user->holding)
        return;
    if (broken)
        shm->broken = 1;
    user->holding = 0;
    shm->holder = NULL;
    swy_coll_shm_user_t *next = shm->wait_head;
    if (next == NULL)
        return;
    shm->wait_head = next->next;
    if (shm->wait_tail == next)
        shm->wait_tail = NULL;
    next->next = NULL;
    next->waiting = 0;
    next->holding = 1;
    shm->holder = next;
    next->out_of_step = shm->broken;
    if (!shm->broken)
        next->acquired(next);
}

swy_status_t swy_coll_shm_check(const swy_coll_shm_user_t *user,
                                const char *name)
{
    if (!user->out_of_step)
        return SWY_OK;
    return swy_err_set(SWY_ERR_TRANSPORT, "coll", "%s: the shared-memory "
                       "channel is out of step since an earlier op on it "
                       "failed on this rank", name);
}
