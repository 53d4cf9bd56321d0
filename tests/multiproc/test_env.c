/* One rank of a job started by an external launcher: swy_comm_init_env
 * must find rank, size and root in the launcher's variables. Checks an
 * allreduce and an allgather against their known results. */
#include <stdio.h>
#include <stdlib.h>

#include "switchyard/switchyard.h"

int main(void)
{
    swy_comm_t comm;
    if (swy_comm_init_env(&comm) != SWY_OK) {
        fprintf(stderr, "init_env failed: %s\n", swy_last_error(NULL));
        return 1;
    }
    int rank = swy_comm_rank(comm), n = swy_comm_size(comm);
    int64_t value = rank + 1, *all = calloc((size_t)n, sizeof(int64_t));
    if (swy_allreduce(&value, &value, 1, SWY_INT64, SWY_SUM, comm, NULL,
                      NULL) != SWY_OK ||
        swy_allgather(&rank, all, 1, SWY_INT32, comm, NULL, NULL) != SWY_OK) {
        fprintf(stderr, "collective failed: %s\n", swy_last_error(comm));
        return 1;
    }
    int ok = value == (int64_t)n * (n + 1) / 2;
    for (int r = 0; r < n; r++)
        ok = ok && ((int32_t *)all)[r] == r;
    printf("rank %d of %d: %s\n", rank, n, ok ? "ok" : "WRONG");
    free(all);
    if (swy_comm_destroy(comm) != SWY_OK)
        return 1;
    return ok ? 0 : 1;
}
