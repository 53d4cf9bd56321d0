/* Scratch buffers of the allreduce algorithms, kept between ops.
 *
 * An allreduce needs scratch about the size of its buffer, per op. Fresh
 * memory costs a page fault (and zeroing) per page on first touch, and
 * malloc does not reliably hand back warm pages: above glibc's mmap
 * threshold every block is fresh, the threshold moves with what was freed
 * before, and the progress thread allocates from an arena of its own that
 * gives pages back when trimmed: an allreduce after a large alltoallv,
 * or with every scratch block mmapped (MALLOC_MMAP_THRESHOLD_=131072),
 * ran markedly slower than on a fresh communicator (docs/performance.md,
 * "coll", points to the runs). So the algorithms take their scratch from
 * here: the last few blocks of at least SCRATCH_MIN bytes are kept,
 * process-wide, up to SCRATCH_KEEP_BYTES in all, and a request takes the
 * smallest kept block that fits and is not wastefully large. Blocks are
 * page-aligned, so that swy_coll_slot_place() can choose page offsets. */
#include <pthread.h>
#include <stdint.h>

#include "coll/coll.h"
#include "util/alloc.h"

#define SCRATCH_MIN (64u << 10)
#define SCRATCH_SLOTS 8
#define SCRATCH_KEEP_BYTES ((size_t)256 << 20)
#define SCRATCH_PAGE ((size_t)4096)
/* Slots below this size are copied without rep movsb (and go eagerly):
 * they are only aligned to a cache line, not padded to a page offset. */
#define SLOT_MIRROR_MIN ((size_t)4096)
#define SLOT_LINE ((size_t)64)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *ptr;
    size_t bytes;
} kept[SCRATCH_SLOTS];

void *swy_coll_scratch_get(size_t bytes)
{
    if (bytes < SCRATCH_MIN)
        return swy_aligned_alloc(SCRATCH_PAGE, bytes);
    void *ptr = NULL;
    pthread_mutex_lock(&lock);
    int best = -1;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        if (kept[i].ptr != NULL && kept[i].bytes >= bytes &&
            kept[i].bytes <= 4 * bytes + (1u << 20) &&
            (best < 0 || kept[i].bytes < kept[best].bytes))
            best = i;
    if (best >= 0) {
        ptr = kept[best].ptr;
        kept[best].ptr = NULL;
    }
    pthread_mutex_unlock(&lock);
    return ptr != NULL ? ptr : swy_aligned_alloc(SCRATCH_PAGE, bytes);
}

int swy_coll_slot_place(size_t *end, size_t bytes, const void *mirror,
                        size_t *at)
{
    int small = bytes < SLOT_MIRROR_MIN;
    size_t align = small ? SLOT_LINE : SCRATCH_PAGE;
    size_t want = small ? 0 : (uintptr_t)mirror & (align - 1);
    size_t start, stop;
    if (swy_add_overflow(*end, (want - *end) & (align - 1), &start) != 0 ||
        swy_add_overflow(start, bytes, &stop) != 0)
        return -1;
    *at = start;
    *end = stop;
    return 0;
}

void swy_coll_scratch_put(void *ptr, size_t bytes)
{
    if (ptr == NULL)
        return;
    if (bytes < SCRATCH_MIN || bytes > SCRATCH_KEEP_BYTES) {
        swy_free(ptr);
        return;
    }
    pthread_mutex_lock(&lock);
    /* An empty slot, else evict the oldest-smallest: the smallest block
     * (large ones cost the most to fault in again). */
    int slot = -1;
    size_t total = bytes;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        total += kept[i].ptr != NULL ? kept[i].bytes : 0;
    for (int i = 0; i < SCRATCH_SLOTS && slot < 0; i++)
        if (kept[i].ptr == NULL)
            slot = i;
    void *evicted[SCRATCH_SLOTS + 1];
    int n_evicted = 0;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < SCRATCH_SLOTS; i++)
            if (kept[i].bytes < kept[slot].bytes)
                slot = i;
        total -= kept[slot].bytes;
        evicted[n_evicted++] = kept[slot].ptr;
    }
    kept[slot].ptr = ptr;
    kept[slot].bytes = bytes;
    /* Over the cap: drop the smallest others until under it. */
    while (total > SCRATCH_KEEP_BYTES) {
        int victim = -1;
        for (int i = 0; i < SCRATCH_SLOTS; i++)
            if (i != slot && kept[i].ptr != NULL &&
                (victim < 0 || kept[i].bytes < kept[victim].bytes))
                victim = i;
        if (victim < 0)
            break;
        total -= kept[victim].bytes;
        evicted[n_evicted++] = kept[victim].ptr;
        kept[victim].ptr = NULL;
    }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n_evicted; i++)
        swy_free(evicted[i]);
}
