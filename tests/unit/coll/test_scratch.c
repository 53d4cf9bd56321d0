/* lib/coll scratch: blocks are page-aligned and kept between ops, and
 * swy_coll_slot_place lays slots out at the page offset of the data they
 * receive, without overlap, and reports overflow. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"

#define PAGE 4096u

static void test_blocks(void)
{
    size_t sizes[] = {1, 100, 4096, 65535, 65536, 1u << 20, 3u << 20};
    void *kept[sizeof(sizes) / sizeof(sizes[0])];
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        kept[i] = swy_coll_scratch_get(sizes[i]);
        CHECK(kept[i] != NULL, "get(%zu)", sizes[i]);
        CHECK(((uintptr_t)kept[i] & (PAGE - 1)) == 0,
              "get(%zu) = %p is not page-aligned", sizes[i], kept[i]);
        if (kept[i] != NULL)
            memset(kept[i], 0x5a, sizes[i]); /* all of it is ours */
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        swy_coll_scratch_put(kept[i], sizes[i]);
    /* A kept block comes back, still aligned. */
    void *again = swy_coll_scratch_get(1u << 20);
    CHECK(again != NULL && ((uintptr_t)again & (PAGE - 1)) == 0,
          "reused block %p", again);
    swy_coll_scratch_put(again, 1u << 20);
    swy_coll_scratch_put(NULL, 123);
}

static void test_place(void)
{
    /* Mirrors at every page offset class, slots of awkward sizes. */
    static const size_t offsets[] = {0, 4, 16, 60, 64, 100, 2048, 4080, 4095};
    static const size_t sizes[] = {0, 1, 4, 4095, 4096, 4097, 262148};
    char base[1];
    for (size_t a = 0; a < sizeof(offsets) / sizeof(offsets[0]); a++) {
        size_t end = 0, prev_end = 0;
        for (size_t b = 0; b < sizeof(sizes) / sizeof(sizes[0]); b++) {
            /* The mirror's page offset is what counts, not the address. */
            const char *mirror =
                (const char *)(((uintptr_t)base & ~(uintptr_t)(PAGE - 1)) +
                               3 * PAGE + offsets[a]);
            size_t at = SIZE_MAX;
            int rc = swy_coll_slot_place(&end, sizes[b], mirror, &at);
            CHECK(rc == 0, "place(%zu, offset %zu)", sizes[b], offsets[a]);
            /* Below 4 KiB a slot only starts on a 64-byte line. */
            size_t align = sizes[b] < 4096 ? 64 : PAGE;
            size_t want = sizes[b] < 4096 ? 0 : offsets[a];
            CHECK(at % align == want, "slot of %zu at %zu for page offset "
                  "%zu", sizes[b], at, offsets[a]);
            CHECK(at >= prev_end, "slot at %zu overlaps the one ending at "
                  "%zu", at, prev_end);
            CHECK(at - prev_end < align, "slot at %zu wastes %zu bytes", at,
                  at - prev_end);
            CHECK(end == at + sizes[b], "end %zu after slot at %zu of %zu",
                  end, at, sizes[b]);
            prev_end = end;
        }
    }
    /* Overflow of the padding or of the size: -1, *end unchanged. */
    size_t end = SIZE_MAX - 10, at = 7;
    CHECK(swy_coll_slot_place(&end, 1, (const void *)(uintptr_t)100, &at) ==
              -1,
          "padding past SIZE_MAX");
    CHECK(end == SIZE_MAX - 10 && at == 7, "end %zu at %zu after overflow",
          end, at);
    end = 0;
    CHECK(swy_coll_slot_place(&end, SIZE_MAX, (const void *)(uintptr_t)16,
                              &at) == -1,
          "size past SIZE_MAX");
    CHECK(end == 0 && at == 7, "end %zu at %zu after overflow", end, at);
}

int main(void)
{
    test_blocks();
    test_place();
    if (check_failures > 0) {
        printf("FAIL: %d checks\n", check_failures);
        return 1;
    }
    printf("PASS: scratch blocks and slot placement\n");
    return 0;
}
