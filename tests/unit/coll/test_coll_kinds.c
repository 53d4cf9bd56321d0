/* reduce_scatter, allgatherv, reduce, gather and scatter inside lib/coll:
 * the algorithm of each kind, its header and data peers, the header
 * check that names both sides of a disagreement, and the refusal of
 * device buffers (checked here, where no GPU is needed).
 * Usage: test_coll_kinds */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"
#include "util/status.h"

#define W 6

static size_t recvcounts[W] = {3, 0, 5, 1, 0, 2}, rdispls[W];

static swy_coll_args_t op(swy_coll_kind_t kind, size_t count, int root)
{
    swy_coll_args_t a = {.kind = kind, .dtype = SWY_FLOAT32,
                         .redop = SWY_SUM, .mem = SWY_MEM_HOST,
                         .count = count, .root = root,
                         .partition_bytes = 1u << 20};
    if (kind == SWY_COLL_ALLGATHERV) {
        a.recvcounts = recvcounts;
        a.rdispls = rdispls;
    }
    return a;
}

/* A list of peers as a bit mask (all ones if a peer repeats). */
static unsigned mask(const int *peers, int n)
{
    unsigned m = 0;
    for (int i = 0; i < n; i++)
        m |= 1u << peers[i];
    return n == __builtin_popcount(m) ? m : ~0u; /* no duplicates */
}

static void test_algos(void)
{
    static const struct {
        swy_coll_kind_t kind;
        const char *name;
    } algos[] = {{SWY_COLL_REDUCE_SCATTER, "reduce_scatter/ring"},
                 {SWY_COLL_ALLGATHERV, "allgatherv/ring"},
                 {SWY_COLL_REDUCE, "reduce/chain"},
                 {SWY_COLL_GATHER, "gather/direct"},
                 {SWY_COLL_SCATTER, "scatter/direct"}};
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        swy_coll_args_t a = op(algos[i].kind, 4, 0);
        const swy_coll_algo_t *algo = swy_coll_algo_for(&a, W);
        CHECK(algo != NULL && strcmp(algo->name, algos[i].name) == 0);
        /* Device buffers: refused by create(), naming the algorithm. */
        swy_coll_state_t *st = NULL;
        a.mem = SWY_MEM_CUDA;
        swy_err_clear();
        CHECK(algo->create(&a, 2, W, a.partition_bytes, &st) ==
              SWY_ERR_UNSUPPORTED);
        CHECK(st == NULL);
        CHECK(strstr(swy_err_last(), algos[i].name) != NULL &&
              strstr(swy_err_last(), "host buffers only") != NULL);
    }
}

static void test_peers(void)
{
    int peers[W];
    const unsigned ring = 1u << 1 | 1u << 3, all = 0x3fu & ~(1u << 2);
    swy_coll_args_t a = op(SWY_COLL_REDUCE_SCATTER, 4, -1);
    CHECK(mask(peers, swy_coll_header_peers(&a, 2, W, peers)) == ring);
    CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == ring);
    a.count = 0;
    CHECK(swy_coll_data_peers(&a, 2, W, peers) == 0);
    /* allgatherv: every pair compares its counts; data on the ring */
    a = op(SWY_COLL_ALLGATHERV, 5, -1);
    CHECK(mask(peers, swy_coll_header_peers(&a, 2, W, peers)) == all);
    CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == ring);
    /* reduce: the chain ..., 3 -> 2 -> 1 -> root 0; rank 2 at its end
     * when the root is 3 */
    a = op(SWY_COLL_REDUCE, 4, 0);
    CHECK(mask(peers, swy_coll_header_peers(&a, 2, W, peers)) == ring);
    CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == ring);
    a.root = 3;
    CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == 1u << 1);
    a.root = 2;
    CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == 1u << 3);
    /* gather, scatter: the ring and the root; the root hears everyone */
    for (int k = 0; k < 2; k++) {
        a = op(k ? SWY_COLL_SCATTER : SWY_COLL_GATHER, 4, 5);
        CHECK(mask(peers, swy_coll_header_peers(&a, 2, W, peers)) ==
              (ring | 1u << 5));
        CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == 1u << 5);
        a.root = 2;
        CHECK(mask(peers, swy_coll_header_peers(&a, 2, W, peers)) == all);
        CHECK(mask(peers, swy_coll_data_peers(&a, 2, W, peers)) == all);
        a.count = 0;
        CHECK(swy_coll_data_peers(&a, 2, W, peers) == 0);
    }
    a = op(SWY_COLL_GATHER, 4, 0);
    CHECK(swy_coll_header_peers(&a, 0, 1, peers) == 0);
}

/* Rank 0's check of rank 1's header for the same op with `theirs`. */
static swy_status_t check(const swy_coll_args_t *mine,
                          const swy_coll_args_t *theirs, char *msg,
                          size_t len)
{
    swy_coll_header_t hdr;
    swy_coll_header_make(theirs, 7, 0, &hdr);
    return swy_coll_header_check(mine, 7, "op", 0, 1, &hdr, msg, len);
}

static void test_header(void)
{
    char msg[512];
    swy_coll_args_t mine = op(SWY_COLL_REDUCE_SCATTER, 4, -1), theirs = mine;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_OK);
    theirs.count = 5;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 posted reduce_scatter(float32, sum, "
                      "recvcount 4), rank 1 posted reduce_scatter(float32, "
                      "sum, recvcount 5)") != NULL);
    mine = op(SWY_COLL_REDUCE, 4, 0);
    theirs = mine;
    theirs.redop = SWY_MAX;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "reduce(float32, max, count 4, root 0)") != NULL);
    theirs = mine;
    theirs.root = 1;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "reduce(float32, sum, count 4, root 1)") != NULL);
    /* gather and scatter compare count and root, not the op */
    mine = op(SWY_COLL_GATHER, 4, 0);
    theirs = mine;
    theirs.redop = SWY_MAX;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_OK);
    theirs.count = 3;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "gather(float32, count 3, root 0)") != NULL);
    mine = op(SWY_COLL_SCATTER, 4, 0);
    theirs = mine;
    theirs.root = 4;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "scatter(float32, count 4, root 4)") != NULL);
    theirs = op(SWY_COLL_GATHER, 4, 0);
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "disagree") != NULL);

    /* allgatherv: rank 0 sends 3 (recvcounts[0]); rank 1 sends 0 */
    mine = op(SWY_COLL_ALLGATHERV, 3, -1);
    theirs = op(SWY_COLL_ALLGATHERV, 0, -1);
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_OK);
    theirs.count = 2; /* rank 1 sends 2, rank 0 expects 0 */
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 1 sends 2 elements (its sendcount) to rank 0, "
                      "which expects 0 (recvcounts[1] on rank 0)") != NULL);
    size_t other[W];
    memcpy(other, recvcounts, sizeof(other));
    other[0] = 4; /* rank 1 expects 4 of rank 0, which sends 3 */
    theirs = op(SWY_COLL_ALLGATHERV, 0, -1);
    theirs.recvcounts = other;
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 sends 3 elements (its sendcount) to rank 1, "
                      "which expects 4 (recvcounts[0] on rank 1)") != NULL);
    mine.count = 2; /* against our own recvcounts[0] */
    theirs = op(SWY_COLL_ALLGATHERV, 0, -1);
    CHECK(check(&mine, &theirs, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 sends 2 elements (its sendcount) but expects "
                      "3 of its own (recvcounts[0])") != NULL);
}

int main(void)
{
    test_algos();
    test_peers();
    test_header();
    printf("%s: coll kinds\n", check_failures ? "FAIL" : "PASS");
    return check_failures != 0;
}
