#include "util/copy.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* From this size on glibc's memcpy takes rep movsb here... */
#define COPY_PIECEWISE_MIN ((size_t)4096)
/* ...up to about the L2 cache size (512 KiB on the test VM), where it
 * switches to vector and non-temporal stores, which a piecewise copy
 * would lose (docs/performance.md, "coll"). */
#define COPY_STOP_DEFAULT ((size_t)512 << 10)
#define COPY_STOP_MAX ((size_t)4 << 20)
#define COPY_PIECE ((size_t)2048)
/* The destination's distance past the source, modulo 4 KiB, below which
 * rep movsb is slow (1..31; 0 and 32..4095 are not). */
#define COPY_SLOW_DISTANCE ((uintptr_t)32)

static size_t copy_stop(void)
{
    /* Racing first calls compute and store the same value. */
    static size_t stop;
    size_t value = __atomic_load_n(&stop, __ATOMIC_RELAXED);
    if (value == 0) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        value = l2 > 0 ? (size_t)l2 : COPY_STOP_DEFAULT;
        value = value < COPY_STOP_MAX ? value : COPY_STOP_MAX;
        __atomic_store_n(&stop, value, __ATOMIC_RELAXED);
    }
    return value;
}

void swy_copy(void *dst, const void *src, size_t bytes)
{
    uintptr_t distance = ((uintptr_t)dst - (uintptr_t)src) & 4095u;
    if (bytes < COPY_PIECEWISE_MIN || distance == 0 ||
        distance >= COPY_SLOW_DISTANCE || bytes >= copy_stop()) {
        memcpy(dst, src, bytes);
        return;
    }
    char *d = dst;
    const char *s = src;
    for (size_t off = 0; off < bytes; off += COPY_PIECE) {
        size_t n = bytes - off < COPY_PIECE ? bytes - off : COPY_PIECE;
        memcpy(d + off, s + off, n);
    }
}

#if defined(__x86_64__)
#include <emmintrin.h>

void swy_copy_stream(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (bytes < 256 || head > bytes) {
        swy_copy(dst, src, bytes);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    size_t body = bytes & ~(size_t)63;
    for (size_t off = 0; off < body; off += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + off));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + off + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + off + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + off + 48));
        _mm_stream_si128((__m128i *)(d + off), a);
        _mm_stream_si128((__m128i *)(d + off + 16), b);
        _mm_stream_si128((__m128i *)(d + off + 32), c);
        _mm_stream_si128((__m128i *)(d + off + 48), e);
    }
    memcpy(d + body, s + body, bytes - body);
    _mm_sfence(); /* ordered before whatever says the copy is done */
}
#else
void swy_copy_stream(void *dst, const void *src, size_t bytes)
{
    swy_copy(dst, src, bytes);
}
#endif
