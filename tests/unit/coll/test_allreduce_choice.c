/* The allreduce algorithm choice: the automatic rule by size and number
 * of ranks, the fall-backs to the ring where an algorithm cannot run the
 * op, the header and data peers of each choice, and the header check that
 * names both choices when ranks disagree. Usage: test_allreduce_choice */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"

static swy_coll_args_t allreduce(size_t bytes, swy_coll_ar_algo_t algo)
{
    swy_coll_args_t a = {.kind = SWY_COLL_ALLREDUCE, .dtype = SWY_FLOAT32,
                         .redop = SWY_SUM, .mem = SWY_MEM_HOST,
                         .count = bytes / 4, .root = -1,
                         .partition_bytes = 1u << 20,
                         .allreduce_algo = (uint8_t)algo};
    return a;
}

static swy_coll_ar_algo_t choose(size_t bytes, swy_coll_ar_algo_t wanted,
                                 int nranks)
{
    swy_coll_args_t a = allreduce(bytes, wanted);
    return swy_coll_allreduce_choose(&a, wanted, nranks);
}

static void test_auto(void)
{
    /* halving/doubling for small ops on a power of two >= 4 */
    CHECK(choose(16, SWY_COLL_AR_AUTO, 4) == SWY_COLL_AR_RHD);
    CHECK(choose(12, SWY_COLL_AR_AUTO, 4) == SWY_COLL_AR_DIRECT); /* 3 < 4 */
    CHECK(choose(256u << 10, SWY_COLL_AR_AUTO, 4) == SWY_COLL_AR_RHD);
    CHECK(choose(256u << 10, SWY_COLL_AR_AUTO, 16) == SWY_COLL_AR_RHD);
    /* above it, direct up to 64 MiB on at most 8 ranks */
    CHECK(choose((256u << 10) + 4, SWY_COLL_AR_AUTO, 4) ==
          SWY_COLL_AR_DIRECT);
    CHECK(choose(2u << 20, SWY_COLL_AR_AUTO, 8) == SWY_COLL_AR_DIRECT);
    CHECK(choose(64u << 20, SWY_COLL_AR_AUTO, 4) == SWY_COLL_AR_DIRECT);
    CHECK(choose(4, SWY_COLL_AR_AUTO, 3) == SWY_COLL_AR_DIRECT);
    CHECK(choose(4, SWY_COLL_AR_AUTO, 2) == SWY_COLL_AR_DIRECT);
    /* then the ring; and on more than 8 ranks past halving/doubling */
    CHECK(choose((64u << 20) + 4, SWY_COLL_AR_AUTO, 4) == SWY_COLL_AR_RING);
    CHECK(choose(1u << 20, SWY_COLL_AR_AUTO, 16) == SWY_COLL_AR_RING);
    CHECK(choose(4, SWY_COLL_AR_AUTO, 12) == SWY_COLL_AR_RING);
}

/* Ranks on several hosts: halving/doubling (nearest partners first, the
 * fewest bytes through the uplink) at every size on a power of two, else
 * the ring; never the direct algorithm. */
static void test_multi_host(void)
{
    static const size_t sizes[] = {16, 1u << 20, 4u << 20, 64u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        swy_coll_args_t a = allreduce(sizes[i], SWY_COLL_AR_AUTO);
        a.multi_host = 1;
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, 4) ==
              SWY_COLL_AR_RHD);
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, 6) ==
              SWY_COLL_AR_RING);
        /* asked for explicitly, the direct algorithm still runs */
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_DIRECT, 4) ==
              SWY_COLL_AR_DIRECT);
    }
    swy_coll_args_t few = allreduce(8, SWY_COLL_AR_AUTO); /* 2 < 4 */
    few.multi_host = 1;
    CHECK(swy_coll_allreduce_choose(&few, SWY_COLL_AR_AUTO, 4) ==
          SWY_COLL_AR_RING);
}

static void test_forced(void)
{
    CHECK(choose(64u << 20, SWY_COLL_AR_DIRECT, 16) == SWY_COLL_AR_DIRECT);
    CHECK(choose(4, SWY_COLL_AR_RING, 4) == SWY_COLL_AR_RING);
    CHECK(choose(64u << 20, SWY_COLL_AR_RHD, 2) == SWY_COLL_AR_RHD);
    /* what cannot run gives way to the ring */
    CHECK(choose(1u << 20, SWY_COLL_AR_RHD, 3) == SWY_COLL_AR_RING);
    CHECK(choose(8, SWY_COLL_AR_RHD, 4) == SWY_COLL_AR_RING); /* 2 < 4 */
    CHECK(choose(4, SWY_COLL_AR_DIRECT, 1) == SWY_COLL_AR_RING);
    CHECK(choose(0, SWY_COLL_AR_DIRECT, 4) == SWY_COLL_AR_RING);
    swy_coll_args_t dev = allreduce(1u << 20, SWY_COLL_AR_DIRECT);
    dev.mem = SWY_MEM_CUDA;
    CHECK(swy_coll_allreduce_choose(&dev, SWY_COLL_AR_DIRECT, 4) ==
          SWY_COLL_AR_RING);
    /* the op's field decides which algorithm runs */
    swy_coll_args_t a = allreduce(1u << 20, SWY_COLL_AR_DIRECT);
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "allreduce/direct") == 0);
    a.allreduce_algo = SWY_COLL_AR_RING;
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "allreduce/ring") == 0);
    a.allreduce_algo = SWY_COLL_AR_RHD;
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "allreduce/rhd") == 0);
}

static int has(const int *peers, int n, int p)
{
    for (int i = 0; i < n; i++)
        if (peers[i] == p)
            return 1;
    return 0;
}

/* Direct talks to everyone: its header and data peers are all others. */
static void test_peers(void)
{
    int peers[8];
    swy_coll_args_t a = allreduce(1u << 20, SWY_COLL_AR_DIRECT);
    int n = swy_coll_header_peers(&a, 2, 6, peers);
    CHECK(n == 5);
    for (int p = 0; p < 6; p++)
        CHECK(has(peers, n, p) == (p != 2));
    n = swy_coll_data_peers(&a, 2, 6, peers);
    CHECK(n == 5 && !has(peers, n, 2));
    a.allreduce_algo = SWY_COLL_AR_RING;
    n = swy_coll_header_peers(&a, 2, 6, peers);
    CHECK(n == 2 && has(peers, n, 1) && has(peers, n, 3));
}

/* With the comm's shared-memory channel (one host): allreduce/shm above
 * SWY_COLL_ALLREDUCE_SHM_MIN_BYTES whatever the number of ranks, the
 * rules above below it; without one, asking for it gives the automatic
 * choice; device buffers take the ring. */
static void test_shm(void)
{
    swy_coll_shm_t channel = {.nranks = 4};
    static const int ranks[] = {2, 3, 4, 8, 16};
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
        swy_coll_args_t a = allreduce(SWY_COLL_ALLREDUCE_SHM_MIN_BYTES + 4,
                                      SWY_COLL_AR_AUTO);
        a.shm = &channel;
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, ranks[i]) ==
              SWY_COLL_AR_SHM);
        a.count = (128u << 20) / 4;
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, ranks[i]) ==
              SWY_COLL_AR_SHM);
        a.count = SWY_COLL_ALLREDUCE_SHM_MIN_BYTES / 4;
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, ranks[i]) ==
              (ranks[i] >= 4 && (ranks[i] & (ranks[i] - 1)) == 0
                   ? SWY_COLL_AR_RHD
                   : ranks[i] <= 8 ? SWY_COLL_AR_DIRECT : SWY_COLL_AR_RING));
        /* forced: at any size, a single element included */
        a.count = 1;
        CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_SHM, ranks[i]) ==
              SWY_COLL_AR_SHM);
    }
    swy_coll_args_t a = allreduce(1u << 20, SWY_COLL_AR_SHM);
    CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_SHM, 4) ==
          SWY_COLL_AR_DIRECT); /* no channel: the automatic rule */
    a.shm = &channel;
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "allreduce/shm") == 0);
    int peers[8];
    int n = swy_coll_header_peers(&a, 1, 4, peers);
    CHECK(n == 3 && !has(peers, n, 1));
    n = swy_coll_data_peers(&a, 1, 4, peers);
    CHECK(n == 3 && !has(peers, n, 1));
    a.mem = SWY_MEM_CUDA;
    CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_SHM, 4) ==
          SWY_COLL_AR_RING);
    CHECK(swy_coll_allreduce_choose(&a, SWY_COLL_AR_AUTO, 4) ==
          SWY_COLL_AR_RING);
}

/* Alltoallv: through the alltoallv channel where every rank has fewer
 * CPUs than there are ranks (auto) or when asked; else pairwise; the
 * header names both choices and SWY_ALLTOALLV_ALGO on a disagreement. */
static void test_alltoallv(void)
{
    size_t counts[4] = {1, 2, 3, 4}, displs[4] = {0, 1, 3, 6};
    swy_coll_args_t a = {.kind = SWY_COLL_ALLTOALLV, .dtype = SWY_FLOAT32,
                         .mem = SWY_MEM_HOST, .root = -1,
                         .sendcounts = counts, .sdispls = displs,
                         .recvcounts = counts, .rdispls = displs};
    swy_coll_shm_t channel = {.nranks = 4, .ranks_share_cpus = 1};
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_AUTO) ==
          SWY_COLL_A2A_PAIRWISE);
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_SHM) ==
          SWY_COLL_A2A_PAIRWISE); /* no channel */
    a.shm_a2a = &channel;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_AUTO) ==
          SWY_COLL_A2A_SHM);
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_PAIRWISE) ==
          SWY_COLL_A2A_PAIRWISE);
    a.alltoallv_algo = SWY_COLL_A2A_SHM;
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "alltoallv/shm") == 0);
    channel.ranks_share_cpus = 0;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_AUTO) ==
          SWY_COLL_A2A_PAIRWISE);
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_SHM) ==
          SWY_COLL_A2A_SHM);
    a.mem = SWY_MEM_CUDA;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_SHM) ==
          SWY_COLL_A2A_PAIRWISE);
    a.mem = SWY_MEM_HOST;
    swy_coll_args_t theirs = a;
    theirs.alltoallv_algo = SWY_COLL_A2A_PAIRWISE;
    swy_coll_header_t hdr;
    char msg[512];
    swy_coll_header_make(&theirs, 5, 0, &hdr);
    CHECK(swy_coll_header_check(&a, 5, "dispatch", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 chose the shm algorithm, rank 1 the pairwise "
                      "algorithm") != NULL);
    CHECK(strstr(msg, "SWY_ALLTOALLV_ALGO") != NULL);

    /* Across hosts with a host map: hier when asked for (auto stays
     * pairwise: docs/performance.md, "hier"); without the map, or on one
     * host, hier gives way to the automatic rule; device buffers stay
     * pairwise. */
    int hosts[4] = {0, 0, 1, 1};
    a.shm_a2a = NULL;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_HIER) ==
          SWY_COLL_A2A_PAIRWISE); /* one host */
    a.multi_host = 1;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_HIER) ==
          SWY_COLL_A2A_PAIRWISE); /* no host map */
    a.host_of = hosts;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_AUTO) ==
          SWY_COLL_A2A_PAIRWISE);
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_HIER) ==
          SWY_COLL_A2A_HIER);
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_PAIRWISE) ==
          SWY_COLL_A2A_PAIRWISE);
    a.alltoallv_algo = SWY_COLL_A2A_HIER;
    CHECK(strcmp(swy_coll_algo_for(&a, 4)->name, "alltoallv/hier") == 0);
    a.mem = SWY_MEM_CUDA;
    CHECK(swy_coll_alltoallv_choose(&a, SWY_COLL_A2A_HIER) ==
          SWY_COLL_A2A_PAIRWISE);
}

static void test_header(void)
{
    swy_coll_args_t mine = allreduce(1u << 20, SWY_COLL_AR_DIRECT);
    swy_coll_args_t theirs = allreduce(1u << 20, SWY_COLL_AR_RING);
    swy_coll_header_t hdr;
    char msg[512];
    swy_coll_header_make(&theirs, 3, 0, &hdr);
    CHECK(swy_coll_header_check(&mine, 3, "grads", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 chose the direct algorithm, rank 1 the ring "
                      "algorithm") != NULL);
    CHECK(strstr(msg, "SWY_ALLREDUCE_ALGO") != NULL);
    CHECK(strstr(msg, "'grads'") != NULL);
    swy_coll_header_make(&mine, 3, 0, &hdr);
    CHECK(swy_coll_header_check(&mine, 3, "grads", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_OK);
    /* a count that differs is named as such, before the algorithm */
    theirs = allreduce(2u << 20, SWY_COLL_AR_DIRECT);
    swy_coll_header_make(&theirs, 3, 0, &hdr);
    CHECK(swy_coll_header_check(&mine, 3, "grads", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "count") != NULL && strstr(msg, "algorithm") == NULL);
}

int main(void)
{
    test_auto();
    test_multi_host();
    test_forced();
    test_peers();
    test_shm();
    test_alltoallv();
    test_header();
    printf("%s (%d failed checks)\n", check_failures ? "FAIL" : "PASS", check_failures);
    return check_failures != 0;
}
