#ifndef SWY_UTIL_COPY_H
#define SWY_UTIL_COPY_H

#include <stddef.h>

/* memcpy for bulk data (the regions must not overlap), avoiding a slow
 * path of rep movsb: on the AMD EPYC of the test VM a copy between 4 KiB
 * and the L2 size (where glibc's memcpy uses rep movsb) whose destination
 * lies 1 to 31 bytes past its source modulo 4 KiB ran an order of
 * magnitude slower (docs/performance.md, "coll"). Such copies go in 2 KiB
 * pieces, which glibc moves with vector loads and stores; the others are
 * one memcpy. A user's receive buffer from malloc (16 bytes into a page)
 * and a page-aligned send buffer are 16 bytes apart. */
void swy_copy(void *dst, const void *src, size_t bytes);

/* The same with non-temporal stores (x86-64; elsewhere swy_copy): for a
 * destination that will not be read again soon, in an op far larger than
 * the caches, where it saves reading every destination line first. */
void swy_copy_stream(void *dst, const void *src, size_t bytes);

#endif
