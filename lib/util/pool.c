/* A process-wide pool of helper threads for bulk memory work (pool.h).
 *
 * A job is published in one 64-bit word: generation (24 bits), number of
 * pieces and next piece to take (20 bits each); its function and
 * argument sit in the slot of the generation's parity, written before
 * the word. A thread takes a piece by compare-and-swap on the word, so a
 * helper that read a stale job can take nothing of it: the word moved
 * on. The caller takes pieces too and returns once every piece is done;
 * a helper that wakes late finds nothing left, and the slot it may read
 * is rewritten only two jobs later, after its job's word has changed. */
#include "util/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/clock.h"

/* A helper spins this long for the next job before it sleeps: the jobs of
 * one collective come microseconds apart, and a futex wake-up costs about
 * as much as a job. */
#define HELPER_SPIN_NS (100 * 1000)

#define NEXT_BITS 20
#define PIECES_MAX ((UINT64_C(1) << NEXT_BITS) - 1)
#define WORD(gen, n, next)                                                   \
    (((uint64_t)(gen) << (2 * NEXT_BITS)) | ((uint64_t)(n) << NEXT_BITS) |   \
     (uint64_t)(next))
#define W_GEN(w) ((w) >> (2 * NEXT_BITS))
#define W_N(w) (((w) >> NEXT_BITS) & PIECES_MAX)
#define W_NEXT(w) ((w) & PIECES_MAX)

static struct {
    pthread_mutex_t start_lock; /* swy_pool_start */
    pthread_mutex_t job_lock;   /* one job at a time */
    int helpers;
    uint64_t gen;               /* the last job's (under job_lock) */
    _Atomic uint64_t word;
    struct {
        _Atomic(swy_pool_fn_t) fn;
        _Atomic(void *) arg;
    } slot[2];
    _Atomic size_t done;        /* pieces of the current job done */
    _Atomic uint32_t bell;      /* futex word: bumped per job */
    _Atomic int sleepers;
} pool = {.start_lock = PTHREAD_MUTEX_INITIALIZER,
          .job_lock = PTHREAD_MUTEX_INITIALIZER};

/* Take and run pieces of the job in w until none is left; returns the
 * last word seen. */
static uint64_t take_pieces(uint64_t w)
{
    for (;;) {
        if (W_NEXT(w) >= W_N(w))
            return w;
        int parity = (int)(W_GEN(w) & 1);
        swy_pool_fn_t fn = atomic_load_explicit(&pool.slot[parity].fn,
                                                memory_order_acquire);
        void *arg = atomic_load_explicit(&pool.slot[parity].arg,
                                         memory_order_acquire);
        if (atomic_compare_exchange_weak_explicit(
                &pool.word, &w, w + 1, memory_order_acq_rel,
                memory_order_acquire)) {
            fn(arg, (size_t)W_NEXT(w));
            atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
            w = atomic_load_explicit(&pool.word, memory_order_acquire);
        }
    }
}

static void *helper_main(void *unused)
{
    (void)unused;
    for (;;) {
        uint32_t bell = atomic_load_explicit(&pool.bell, memory_order_acquire);
        uint64_t w = atomic_load_explicit(&pool.word, memory_order_acquire);
        if (W_NEXT(w) < W_N(w)) {
            take_pieces(w);
            continue;
        }
        /* Nothing to take: spin a while for the next job, then sleep. */
        uint64_t until = swy_time_ns() + HELPER_SPIN_NS;
        int spins = 0;
        while (atomic_load_explicit(&pool.bell, memory_order_acquire) ==
               bell) {
            if (++spins < 64) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            spins = 0;
            if (swy_time_ns() < until)
                continue;
            atomic_fetch_add(&pool.sleepers, 1);
            syscall(SYS_futex, (uint32_t *)&pool.bell, FUTEX_WAIT_PRIVATE,
                    bell, NULL, NULL, 0);
            atomic_fetch_sub(&pool.sleepers, 1);
            until = swy_time_ns() + HELPER_SPIN_NS;
        }
    }
    return NULL;
}

int swy_pool_start(int helpers)
{
    pthread_mutex_lock(&pool.start_lock);
    while (pool.helpers < helpers && pool.helpers < SWY_POOL_MAX_HELPERS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&t, &attr, helper_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!ok)
            break;
        __atomic_store_n(&pool.helpers, pool.helpers + 1, __ATOMIC_RELEASE);
    }
    int n = pool.helpers;
    pthread_mutex_unlock(&pool.start_lock);
    return n;
}

int swy_pool_helpers(void)
{
    return __atomic_load_n(&pool.helpers, __ATOMIC_ACQUIRE);
}

void swy_pool_run(swy_pool_fn_t fn, void *arg, size_t npieces)
{
    /* Few pieces, no helpers, or the pool busy with another caller's
     * job: the caller does it all. */
    if (npieces < 2 || npieces > PIECES_MAX || swy_pool_helpers() == 0 ||
        pthread_mutex_trylock(&pool.job_lock) != 0) {
        for (size_t i = 0; i < npieces; i++)
            fn(arg, i);
        return;
    }
    uint64_t gen = ++pool.gen;
    int parity = (int)(gen & 1);
    atomic_store_explicit(&pool.slot[parity].fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.slot[parity].arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.word, WORD(gen & 0xFFFFFF, npieces, 0),
                          memory_order_release);
    atomic_fetch_add_explicit(&pool.bell, 1, memory_order_release);
    if (atomic_load(&pool.sleepers) > 0)
        syscall(SYS_futex, (uint32_t *)&pool.bell, FUTEX_WAKE_PRIVATE,
                INT_MAX, NULL, NULL, 0);
    take_pieces(atomic_load_explicit(&pool.word, memory_order_acquire));
    while (atomic_load_explicit(&pool.done, memory_order_acquire) < npieces) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_unlock(&pool.job_lock);
}
