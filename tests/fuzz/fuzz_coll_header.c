/* libFuzzer harness: a peer's op header (swy_coll_header_check) against
 * this rank's op. Input: the op's fields, then the peer's header bytes. A
 * check must end in SWY_OK or SWY_ERR_MISMATCH with a message, nothing
 * else, and never read past the header. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 16 + sizeof(swy_coll_header_t))
        return 0;
    swy_coll_args_t args;
    memset(&args, 0, sizeof(args));
    args.kind = (swy_coll_kind_t)(data[0] % 8);
    args.dtype = (swy_dtype_t)(data[1] % 12);
    args.redop = (swy_redop_t)(data[2] % 6);
    memcpy(&args.count, data + 3, 4);
    args.root = data[7] % 4;
    memcpy(&args.partition_bytes, data + 8, 4);
    size_t counts[4][4];
    memset(counts, 0, sizeof(counts));
    counts[0][data[12] % 4] = data[13];
    args.sendcounts = counts[0];
    args.sdispls = counts[1];
    args.recvcounts = counts[2];
    args.rdispls = counts[3];
    swy_coll_header_t hdr;
    memcpy(&hdr, data + 16, sizeof(hdr));
    char msg[512];
    msg[0] = '\0';
    swy_status_t status = swy_coll_header_check(&args, hdr.seq, "fuzz", 0,
                                                data[14] % 4, &hdr, msg,
                                                sizeof(msg));
    if (status != SWY_OK && (status != SWY_ERR_MISMATCH || msg[0] == '\0'))
        abort();
    return 0;
}
