/* One rank of the fault tests (tests/emu/emu.sh, fault_* cases): STEPS
 * steps of an allreduce and an alltoallv, each result checked against its
 * serial value, about PACE_MS apart so that a fault can land in the
 * middle. Prints "rank R: started" once the communicator is up, then
 * either "rank R: ok S steps" (exit 0) or "rank R: error STATUS at step
 * K: MESSAGE" (exit 3, after destroying the communicator) for an error
 * the library returned, or "WRONG" (exit 1) for a wrong result.
 * SIGTERM (swy-run stopping the other ranks once one failed) is noted and
 * otherwise ignored, so that every rank reports what the library told it;
 * swy-run's --grace bounds how long that may take.
 * Usage: fault_rank STEPS PACE_MS */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "switchyard/switchyard.h"

#define AR_COUNT 65536 /* 256 KiB of int32 */
#define A2A_COUNT 4096 /* elements to each peer */

static int32_t a2a_value(int src, int dst, size_t i)
{
    return (int32_t)((src * 7919 + dst * 104729 + (int)i) & 0xffffff);
}

/* Report the library's error, then destroy the communicator as the
 * README asks after a failure (rank 0's destroy lets its root finish
 * telling the other ranks why before the process goes). */
static int report(int rank, swy_status_t status, int step, swy_comm_t comm)
{
    printf("rank %d: error %s at step %d: %s\n", rank,
           swy_status_string(status), step, swy_last_error(comm));
    fflush(stdout);
    if (comm != NULL)
        swy_comm_destroy(comm);
    return 3;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 100;
    int pace_ms = argc > 2 ? atoi(argv[2]) : 50;
    signal(SIGTERM, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    swy_comm_t comm;
    swy_status_t status = swy_comm_init_env(&comm);
    if (status != SWY_OK) {
        printf("rank ?: error %s at init: %s\n", swy_status_string(status),
               swy_last_error(NULL));
        return 3;
    }
    int rank = swy_comm_rank(comm), n = swy_comm_size(comm);
    printf("rank %d: started\n", rank);

    int32_t *ar = malloc(AR_COUNT * sizeof(int32_t));
    int32_t *send = malloc((size_t)n * A2A_COUNT * sizeof(int32_t));
    int32_t *recv = malloc((size_t)n * A2A_COUNT * sizeof(int32_t));
    size_t *counts = malloc((size_t)n * sizeof(size_t));
    size_t *displs = malloc((size_t)n * sizeof(size_t));
    for (int p = 0; p < n; p++) {
        counts[p] = A2A_COUNT;
        displs[p] = (size_t)p * A2A_COUNT;
        for (size_t i = 0; i < A2A_COUNT; i++)
            send[displs[p] + i] = a2a_value(rank, p, i);
    }
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < AR_COUNT; i++)
            ar[i] = (int32_t)(rank + 1) * (int32_t)((i + (size_t)step) % 97);
        status = swy_allreduce(ar, ar, AR_COUNT, SWY_INT32, SWY_SUM, comm,
                               NULL, NULL);
        if (status != SWY_OK)
            return report(rank, status, step, comm);
        int32_t ranks_sum = (int32_t)n * (n + 1) / 2;
        for (size_t i = 0; i < AR_COUNT; i++)
            if (ar[i] != ranks_sum * (int32_t)((i + (size_t)step) % 97)) {
                printf("rank %d: WRONG allreduce at step %d, element %zu\n",
                       rank, step, i);
                return 1;
            }
        status = swy_alltoallv(send, counts, displs, recv, counts, displs,
                               SWY_INT32, comm, NULL, NULL);
        if (status != SWY_OK)
            return report(rank, status, step, comm);
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < A2A_COUNT; i++)
                if (recv[displs[p] + i] != a2a_value(p, rank, i)) {
                    printf("rank %d: WRONG alltoallv at step %d from %d\n",
                           rank, step, p);
                    return 1;
                }
        struct timespec pause = {pace_ms / 1000,
                                 (long)(pace_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    printf("rank %d: ok %d steps\n", rank, steps);
    status = swy_comm_destroy(comm);
    if (status != SWY_OK)
        return report(rank, status, steps, NULL);
    return 0;
}
