/* libFuzzer harness: one rank's transport address list as the address
 * exchange receives it (blob_parse: u8 name length, name, u32 address
 * length, address; repeated). The harness includes registry.c to reach
 * it, with a set of two named transports over 4 ranks. Every address it
 * records must lie inside the blob. */
#include <stdlib.h>

#include "transport/registry.c"

static swy_transport_v1_t fuzz_ops[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static swy_transport_set_t set;
    if (set.count == 0) {
        setenv("SWY_LOG_LEVEL", "error", 1);
        fuzz_ops[0].name = "ucx";
        fuzz_ops[1].name = "nccl";
        set.nranks = 4;
        set.count = 2;
        set.tps[0].ops = &fuzz_ops[0];
        set.tps[1].ops = &fuzz_ops[1];
    }
    const void *addrs[8] = {NULL};
    size_t lens[8] = {0};
    uint8_t has[8] = {0};
    peer_addrs_t pa = {addrs, lens, has};
    int rank = size > 0 ? data[0] % 4 : 0;
    if (blob_parse(&set, rank, data, size, &pa) == SWY_OK) {
        for (int i = 0; i < 8; i++) {
            if (!has[i])
                continue;
            const uint8_t *addr = addrs[i];
            if (addr < data || addr + lens[i] > data + size)
                abort();
        }
    }
    return 0;
}
