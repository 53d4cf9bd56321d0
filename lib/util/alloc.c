#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

void *swy_malloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

void *swy_calloc(size_t count, size_t size)
{
    return calloc(count ? count : 1, size ? size : 1);
}

void *swy_realloc_array(void *ptr, size_t count, size_t size)
{
    size_t bytes;
    if (swy_mul_overflow(count, size, &bytes) != 0)
        return NULL;
    return realloc(ptr, bytes ? bytes : 1);
}

void *swy_aligned_alloc(size_t alignment, size_t bytes)
{
    void *ptr = NULL;
    if (posix_memalign(&ptr, alignment, bytes ? bytes : 1) != 0)
        return NULL;
    return ptr;
}

void swy_free(void *ptr)
{
    free(ptr);
}

char *swy_strdup(const char *text)
{
    return text ? strdup(text) : NULL;
}
