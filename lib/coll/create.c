/* What every algorithm's create() does first (coll.h,
 * SWY_COLL_CREATE_BEGIN): the checks an op must pass before any state
 * exists, and the state's allocation. */
#include "coll/coll.h"
#include "transport/device.h"
#include "util/alloc.h"
#include "util/status.h"

swy_status_t swy_coll_host_only(const swy_coll_args_t *args,
                                const char *name)
{
    if (args->mem == SWY_MEM_HOST)
        return SWY_OK;
    return swy_err_set(SWY_ERR_UNSUPPORTED, "coll", "%s: buffers of %s "
                       "memory: this collective takes host buffers only",
                       name, swy_mem_type_name(args->mem));
}

swy_status_t swy_coll_create_check(const char *name,
                                   const swy_coll_args_t *args, int nranks,
                                   swy_coll_mem_need_t mem, size_t steps)
{
    if (mem == SWY_COLL_HOST_ONLY)
        SWY_CHECK(swy_coll_host_only(args, name));
    /* Each step of a chunk takes a tag of the op's 24-bit space. */
    if (steps > SWY_COLL_TAG_MAX)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "coll", "%s on %d ranks: "
                           "%zu steps, more than the %u tags of an op",
                           name, nranks, steps, SWY_COLL_TAG_MAX);
    return SWY_OK;
}

void *swy_coll_state_alloc(const char *name, size_t bytes)
{
    void *state = swy_calloc(1, bytes);
    if (state == NULL)
        swy_err_set(SWY_ERR_NO_MEMORY, "coll", "%s: no memory for the "
                    "state of an op (%zu bytes)", name, bytes);
    return state;
}
