/* util/copy: swy_copy and swy_copy_stream (non-temporal stores) copy
 * exactly like memcpy for every size and every distance between
 * destination and source modulo 4 KiB (the piecewise path, and the
 * streaming head, body and tail included), and touch nothing outside the
 * destination. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/copy.h"

#define SPAN (3 * 4096 + 20000)

int main(void)
{
    void *src_block = NULL, *dst_block = NULL;
    if (posix_memalign(&src_block, 4096, SPAN) != 0 ||
        posix_memalign(&dst_block, 4096, SPAN + 8192) != 0) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    unsigned char *src = src_block, *dst = dst_block;
    for (size_t i = 0; i < SPAN; i++)
        src[i] = (unsigned char)(i * 131u + 7u);
    static const size_t sizes[] = {0, 1, 31, 255, 256, 257, 300, 2047,
                                   2048, 2049, 4095, 4096, 4097, 6143, 8192,
                                   12345, 20000};
    static const size_t shifts[] = {0, 1, 8, 16, 31, 32, 33, 63, 64, 4064,
                                    4095, 4096, 4097, 4111};
    int failures = 0, checks = 0;
    for (int stream = 0; stream < 2; stream++)
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++)
        for (size_t b = 0; b < sizeof(shifts) / sizeof(shifts[0]); b++)
            for (size_t s_off = 0; s_off < 64; s_off += 13) {
                size_t n = sizes[a], d_off = s_off + shifts[b];
                memset(dst, 0xee, SPAN + 8192);
                (stream ? swy_copy_stream : swy_copy)(dst + d_off,
                                                      src + s_off, n);
                checks++;
                int bad = memcmp(dst + d_off, src + s_off, n) != 0;
                for (size_t i = 0; i < d_off && !bad; i++)
                    bad = dst[i] != 0xee;
                for (size_t i = d_off + n; i < d_off + n + 64 && !bad; i++)
                    bad = dst[i] != 0xee;
                if (bad && failures++ < 10)
                    printf("%s, size %zu, source +%zu, destination +%zu: "
                           "wrong bytes\n", stream ? "streaming" : "copy", n,
                           s_off, d_off);
            }
    free(src);
    free(dst);
    if (failures > 0) {
        printf("FAIL: %d of %d copies\n", failures, checks);
        return 1;
    }
    printf("PASS: %d copies\n", checks);
    return 0;
}
