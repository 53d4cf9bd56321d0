/* swy_transport_set_connect: the address exchange over lib/boot. Kept apart
 * from registry.c so that the registry can be tested (and used) with
 * addresses gathered some other way. */
#include "transport/transport.h"
#include "util/alloc.h"
#include "util/status.h"

swy_status_t swy_transport_set_connect(swy_transport_set_t *set,
                                       swy_boot_t *boot,
                                       const swy_topo_t *topo,
                                       double timeout_s)
{
    void *blob = NULL, *all = NULL;
    size_t blob_len = 0;
    size_t *rank_lens = swy_calloc((size_t)set->nranks, sizeof(size_t));
    if (rank_lens == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "transport",
                           "address exchange: out of memory");
    swy_status_t status;
    SWY_CHECK_GOTO(swy_transport_set_address(set, &blob, &blob_len), status,
                   out);
    /* One allgather for every transport: peers that loaded other plugins
     * still agree on the number of collective calls. */
    SWY_CHECK_GOTO(swy_boot_allgather(boot, blob, blob_len, timeout_s, &all,
                                      rank_lens),
                   status, out);
    status = swy_transport_set_connect_all(set, all, rank_lens, topo);
out:
    swy_free(all);
    swy_free(blob);
    swy_free(rank_lens);
    return status;
}
