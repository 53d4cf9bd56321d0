/* swy_mem_alloc and swy_mem_free: memory the ranks of a one-host comm
 * reach directly (switchyard.h). The allocations live in the comm's
 * registry (coll/shm_mem.c), where the shm algorithms look up the
 * buffers of each op. */
#include <stddef.h>

#include "api/comm_impl.h"
#include "coll/coll.h"

swy_status_t swy_mem_alloc(swy_comm_t comm, size_t bytes, void **ptr)
{
    swy_err_clear();
    if (comm == NULL || ptr == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_mem_alloc: %s "
                           "is NULL", comm == NULL ? "comm" : "ptr");
    *ptr = NULL;
    return swy_api_fail(comm, swy_coll_mem_alloc(comm->mem, bytes, ptr));
}

swy_status_t swy_mem_free(swy_comm_t comm, void *ptr)
{
    swy_err_clear();
    if (comm == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "api", "swy_mem_free: comm "
                           "is NULL");
    if (ptr == NULL)
        return SWY_OK;
    return swy_api_fail(comm, swy_coll_mem_free(comm->mem, ptr));
}
