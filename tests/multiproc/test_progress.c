/* The progress thread moves ops that nobody waits for: each rank posts an
 * alltoallv and an allreduce of 1 MiB (large enough to go by rendezvous,
 * which needs the receiver's progress), then "computes" in 1 ms sleeps
 * without entering the library except for swy_test, which in thread mode
 * only looks. Both must complete meanwhile and match a serial reference;
 * so must a broadcast posted after the ranks were idle.
 * A post hands its op to the thread when the caller does not wait within
 * the hand-off grace (lib/sched/progress.c): the times it took are printed,
 * not asserted (performance belongs to the benchmarks). */
#include <time.h>

#include "harness.h"

#define ELEMS_PER_PEER 65536 /* 256 KiB of float32 to each rank */
#define TRIALS 5
#define GIVE_UP_MS 5000

static float value(int src, int dst, size_t i)
{
    return (float)(src * 1000 + dst) + (float)(i % 977) * 0.5f;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int rank_main(swy_comm_t comm, int rank, int nranks, void *arg)
{
    size_t n = (size_t)nranks * ELEMS_PER_PEER;
    float *sbuf = malloc(n * sizeof(float));
    float *rbuf = malloc(n * sizeof(float));
    float *ar_in = malloc(n * sizeof(float));
    float *ar_out = malloc(n * sizeof(float));
    size_t *counts = malloc((size_t)nranks * sizeof(size_t));
    size_t *displs = malloc((size_t)nranks * sizeof(size_t));
    CHECK_RET(sbuf && rbuf && ar_in && ar_out && counts && displs,
              "out of memory");
    for (int p = 0; p < nranks; p++) {
        counts[p] = ELEMS_PER_PEER;
        displs[p] = (size_t)p * ELEMS_PER_PEER;
    }
    for (int trial = 0; trial < TRIALS; trial++) {
        for (int p = 0; p < nranks; p++)
            for (size_t i = 0; i < ELEMS_PER_PEER; i++)
                sbuf[displs[p] + i] = value(rank, p, i + (size_t)trial);
        for (size_t i = 0; i < n; i++)
            ar_in[i] = value(rank, trial, i);
        memset(rbuf, 0, n * sizeof(float));
        memset(ar_out, 0, n * sizeof(float));
        /* Blocking: the caller waits, so the grace starts when it ends. */
        CHECK_OK_RET(swy_barrier(comm), comm);
        swy_request_t reqs[2];
        double t0 = now_ms();
        CHECK_OK_RET(swy_alltoallv(sbuf, counts, displs, rbuf, counts, displs,
                                   SWY_FLOAT32, comm, NULL, &reqs[0]),
                     comm);
        CHECK_OK_RET(swy_allreduce(ar_in, ar_out, n, SWY_FLOAT32, SWY_SUM, comm,
                                   NULL, &reqs[1]),
                     comm);
        int done[2] = {0, 0};
        double took = -1.0;
        while (now_ms() - t0 < GIVE_UP_MS) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL); /* compute, outside the library */
            for (int r = 0; r < 2; r++)
                if (!done[r])
                    CHECK_OK_RET(swy_test(reqs[r], &done[r]), comm);
            if (done[0] && done[1]) {
                took = now_ms() - t0;
                break;
            }
        }
        CHECK_RET(done[0] && done[1],
                  "rank %d trial %d: alltoallv %s, allreduce "
                  "%s after %d ms of compute",
                  rank, trial, done[0] ? "done" : "not done",
                  done[1] ? "done" : "not done", GIVE_UP_MS);
        for (int r = 0; r < 2; r++)
            swy_request_free(reqs[r]);
        for (int p = 0; p < nranks; p++)
            for (size_t i = 0; i < ELEMS_PER_PEER; i++)
                CHECK_RET(
                    rbuf[displs[p] + i] == value(p, rank, i + (size_t)trial),
                    "rank %d trial %d: alltoallv element %zu from rank %d",
                    rank, trial, i, p);
        for (size_t i = 0; i < n; i++) {
            /* Small integers and halves: the sum is exact in any order. */
            float ref = 0.0f;
            for (int p = 0; p < nranks; p++)
                ref += value(p, trial, i);
            CHECK_RET(ar_out[i] == ref, "rank %d trial %d: allreduce element "
                      "%zu is %g, expected %g", rank, trial, i, ar_out[i], ref);
        }
        if (rank == 0)
            printf("trial %d: both ops done after %.1f ms of compute\n",
                   trial, took);
        fflush(stdout);
    }
    /* After an idle spell past the grace the thread sleeps on the
     * transports' fds (up to 500 ms); a broadcast posted then, in 64 KiB
     * chunks with two in flight per link, must still complete while the
     * callers compute. */
    for (int trial = 0; trial < 3; trial++) {
        float *bbuf = ar_out; /* n floats */
        for (size_t i = 0; i < n; i++)
            bbuf[i] = rank == 0 ? value(0, trial + 7, i) : -1.0f;
        CHECK_OK_RET(swy_barrier(comm), comm);
        struct timespec idle = {0, 20 * 1000000};
        nanosleep(&idle, NULL); /* past the grace: the thread goes idle */
        swy_request_t req;
        double t0 = now_ms();
        CHECK_OK_RET(swy_broadcast(bbuf, n, SWY_FLOAT32, 0, comm, NULL, &req),
                     comm);
        int done = 0;
        double took = -1.0;
        while (!done && now_ms() - t0 < GIVE_UP_MS) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            CHECK_OK_RET(swy_test(req, &done), comm);
            if (done)
                took = now_ms() - t0;
        }
        CHECK_RET(done, "rank %d broadcast trial %d: not done after %d ms of "
                  "compute", rank, trial, GIVE_UP_MS);
        swy_request_free(req);
        for (size_t i = 0; i < n; i++)
            CHECK_RET(bbuf[i] == value(0, trial + 7, i), "rank %d broadcast "
                      "trial %d: element %zu is %g", rank, trial, i, bbuf[i]);
        printf("rank %d: broadcast %d done after %.1f ms of compute\n",
               rank, trial, took);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    free(ar_in);
    free(ar_out);
    free(counts);
    free(displs);
    return 0;
}

int main(int argc, char **argv)
{
    int w = argc > 1 ? atoi(argv[1]) : 4;
    /* The thread's hand-off is what is tested. */
    setenv("SWY_PROGRESS", "thread", 1);
    /* Many small chunks, few in flight: the root must be progressed
     * again and again while its caller computes. */
    setenv("SWY_PARTITION_BYTES", "64K", 1);
    setenv("SWY_WINDOW_BYTES", "128K", 1);
    int rc = swy_test_spawn(w, rank_main, NULL, 120, NULL);
    printf("%s: ops progress while %d ranks compute\n", rc ? "FAIL" : "PASS",
           w);
    return rc;
}
