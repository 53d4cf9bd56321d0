/* Ranks with different SWY_ALLREDUCE_ALGO: where the algorithms they
 * resolve to differ, every rank fails with SWY_ERR_MISMATCH naming both
 * choices within a few seconds (never a hang); where different settings
 * resolve to the same algorithm, the allreduce succeeds. One rank of a
 * job started by swy-run, which sets SWY_RANK and SWY_WORLD_SIZE; the
 * variable is set here, before init, because it differs between ranks.
 * Usage: test_allreduce_algo ALGO_OTHERS ALGO_LAST COUNT mismatch|ok */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_swy.h"
#include "switchyard/switchyard.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int expect_mismatch(swy_comm_t comm, swy_status_t got, double t0,
                           const char *algo_a, const char *algo_b)
{
    const char *msg = swy_last_error(comm);
    double took = now_s() - t0;
    fprintf(stderr, "%s after %.2f s: %s\n", swy_status_string(got), took,
            msg);
    CHECK_RET(got == SWY_ERR_MISMATCH, "got %s, expected SWY_ERR_MISMATCH",
              swy_status_string(got));
    CHECK_RET(strstr(msg, algo_a) != NULL && strstr(msg, algo_b) != NULL &&
                  strstr(msg, "SWY_ALLREDUCE_ALGO") != NULL,
              "message does not name both choices (%s, %s)", algo_a, algo_b);
    CHECK_RET(took <= 10, "took %.1f s", took);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK_RET(argc == 5, "usage: %s ALGO_OTHERS ALGO_LAST COUNT mismatch|ok",
              argv[0]);
    const char *rank_s = getenv("SWY_RANK"), *size_s = getenv("SWY_WORLD_SIZE");
    CHECK_RET(rank_s != NULL && size_s != NULL, "start me with swy-run");
    int rank = atoi(rank_s), w = atoi(size_s);
    const char *mine = rank == w - 1 ? argv[2] : argv[1];
    size_t count = strtoull(argv[3], NULL, 10);
    int want_ok = strcmp(argv[4], "ok") == 0;
    setenv("SWY_ALLREDUCE_ALGO", mine, 1);

    swy_comm_t comm;
    CHECK_OK_RET(swy_comm_init_env(&comm), NULL);
    float *buf = malloc(count * sizeof(float));
    CHECK_RET(buf != NULL, "out of memory");
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(rank + 1) * (float)(i % 5);
    double t0 = now_s();
    swy_request_t req;
    swy_status_t got = swy_allreduce(buf, buf, count, SWY_FLOAT32, SWY_SUM,
                                     comm, NULL, &req);
    if (got == SWY_OK) {
        got = swy_wait(req);
        swy_request_free(req);
    }
    /* A failed op returns the buffer only once no peer reads it any more
     * (UCX's CMA rendezvous reads a sender's buffer in place, and a read
     * from an unmapped one aborts the reader): give it back at once. */
    float *kept = NULL;
    if (got != SWY_OK) {
        free(buf);
        buf = NULL;
    } else {
        kept = buf;
    }
    int rc = 0;
    if (want_ok) {
        CHECK_RET(got == SWY_OK, "allreduce failed: %s", swy_last_error(comm));
        float scale = (float)w * (float)(w + 1) / 2;
        for (size_t i = 0; i < count; i++)
            CHECK_RET(kept[i] == scale * (float)(i % 5),
                      "element %zu is %g, expected %g", i, kept[i],
                      scale * (float)(i % 5));
        printf("rank %d (%s): ok\n", rank, mine);
    } else {
        /* A rank outside the disagreement may finish its part; the comm is
         * failed all the same, and its next call says so. */
        if (got == SWY_OK)
            got = swy_barrier(comm);
        rc = expect_mismatch(comm, got, t0, argv[1], argv[2]);
        if (rc == 0)
            printf("rank %d (%s): mismatch reported\n", rank, mine);
    }
    /* Give the failure time to reach every rank before this process
     * leaves (a peer whose send to a vanished process fails first would
     * report a transport error instead of the mismatch under test). */
    if (!want_ok)
        sleep(1);
    swy_status_t destroyed = swy_comm_destroy(comm);
    CHECK_RET(destroyed == SWY_OK || !want_ok, "destroy failed: %s",
              swy_status_string(destroyed));
    free(kept);
    return rc;
}
