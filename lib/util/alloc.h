#ifndef SWY_UTIL_ALLOC_H
#define SWY_UTIL_ALLOC_H

#include <stddef.h>

/* Allocation helpers: NULL on failure (callers return SWY_ERR_NO_MEMORY);
 * overflow-checked array variants. swy_free accepts NULL. */
void *swy_malloc(size_t bytes);
void *swy_calloc(size_t count, size_t size);
void *swy_realloc_array(void *ptr, size_t count, size_t size);
void *swy_aligned_alloc(size_t alignment, size_t bytes);
void swy_free(void *ptr);
char *swy_strdup(const char *text);

/* a*b into *out; returns 0 on success, -1 on overflow. */
static inline int swy_mul_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int swy_add_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

#define SWY_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SWY_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SWY_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
