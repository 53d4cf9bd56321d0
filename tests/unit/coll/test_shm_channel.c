/* lib/coll/shm.c: the shared-memory channel.
 *   segment  rank 0's segment, attached a second time as rank 1: what one
 *            mapping writes the other reads; every slot lies inside the
 *            segment, page-aligned, and no two overlap (2 to 32 ranks);
 *            attaching a name that is gone fails cleanly.
 *   line     ops take the channel in post order: the first at once, the
 *            others when the one before leaves (acquired() runs then,
 *            once); one that leaves while waiting drops out of the line;
 *            one that fails while holding it breaks the channel, and every
 *            later op holds it out of step (acquired() does not run, the
 *            check fails with SWY_ERR_TRANSPORT naming the algorithm).
 * Usage: test_shm_channel */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "coll/coll.h"
#include "util/status.h"

static void test_segment(int nranks)
{
    char name[64];
    swy_coll_shm_t *a = NULL, *b = NULL;
    CHECK(swy_coll_shm_create(0, nranks, name, sizeof(name), &a) == SWY_OK);
    CHECK(swy_coll_shm_attach(name, 1, nranks, &b) == SWY_OK);
    swy_coll_shm_unlink(name);
    if (a == NULL || b == NULL) {
        swy_coll_shm_destroy(a);
        swy_coll_shm_destroy(b);
        return;
    }
    CHECK(a->bytes == b->bytes && a->slot_bytes == b->slot_bytes);
    CHECK(a->slot_bytes % 4096 == 0 && a->bytes <= ((size_t)16 << 20));
    /* Slots in order: each inside the segment, right after the last. */
    size_t expect = 0;
    for (int o = 0; o < nranks; o++)
        for (int par = 0; par < 2; par++)
            for (int d = 0; d <= nranks; d++) {
                char *slot = d < nranks
                                 ? swy_coll_shm_in_slot(a, o, par, d)
                                 : swy_coll_shm_out_slot(a, o, par);
                CHECK((size_t)(slot - a->base) == expect);
                expect += a->slot_bytes;
            }
    /* Then one descriptor page per rank. */
    for (int o = 0; o < nranks; o++) {
        CHECK((size_t)(swy_coll_shm_desc(a, o) - a->base) == expect);
        expect += SWY_COLL_SHM_DESC_BYTES;
    }
    CHECK(expect == a->bytes);
    /* One mapping writes, the other reads the same bytes. */
    char *w = swy_coll_shm_in_slot(a, nranks - 1, 1, 0);
    char *r = swy_coll_shm_in_slot(b, nranks - 1, 1, 0);
    for (size_t i = 0; i < a->slot_bytes; i++)
        w[i] = (char)(i * 7 + (size_t)nranks);
    int same = 1;
    for (size_t i = 0; i < a->slot_bytes && same; i++)
        same = r[i] == (char)(i * 7 + (size_t)nranks);
    CHECK(same);
    swy_coll_shm_destroy(a);
    swy_coll_shm_destroy(b);
    /* The name is gone: a late rank cannot attach. */
    swy_coll_shm_t *late = NULL;
    CHECK(swy_coll_shm_attach(name, 2, nranks, &late) == SWY_ERR_SYSTEM &&
          late == NULL);
}

typedef struct {
    swy_coll_shm_user_t user;
    int acquired;
} op_t;

static void on_acquired(swy_coll_shm_user_t *user)
{
    ((op_t *)user)->acquired++;
}

static void test_line(void)
{
    swy_coll_shm_t ch = {.nranks = 4};
    op_t ops[5];
    memset(ops, 0, sizeof(ops));
    for (int i = 0; i < 5; i++)
        ops[i].user.acquired = on_acquired;
    CHECK(swy_coll_shm_enqueue(&ch, &ops[0].user) == 1);
    for (int i = 1; i < 5; i++)
        CHECK(swy_coll_shm_enqueue(&ch, &ops[i].user) == 0);
    CHECK(ops[0].user.holding && ops[1].user.waiting);
    /* op 2 gives up while waiting; op 0 passes the channel to op 1. */
    swy_coll_shm_leave(&ch, &ops[2].user, 1);
    CHECK(!ops[2].user.waiting && !ch.broken);
    swy_coll_shm_leave(&ch, &ops[0].user, 0);
    CHECK(ops[1].user.holding && ops[1].acquired == 1 &&
          ops[2].acquired == 0 && ops[3].acquired == 0);
    CHECK(swy_coll_shm_check(&ops[1].user, "x/shm") == SWY_OK);
    /* op 1 fails holding it: op 3 holds a broken channel. */
    swy_coll_shm_leave(&ch, &ops[1].user, 1);
    CHECK(ch.broken && ops[3].user.holding && ops[3].acquired == 0);
    CHECK(swy_coll_shm_check(&ops[3].user, "x/shm") == SWY_ERR_TRANSPORT);
    CHECK(strstr(swy_err_last(), "x/shm") != NULL &&
          strstr(swy_err_last(), "out of step") != NULL);
    swy_coll_shm_leave(&ch, &ops[3].user, 1);
    CHECK(ops[4].user.holding && ops[4].user.out_of_step);
    swy_coll_shm_leave(&ch, &ops[4].user, 1);
    CHECK(ch.holder == NULL && ch.wait_head == NULL && ch.wait_tail == NULL);
    /* A new op on a broken channel holds it out of step at once. */
    op_t late = {.user.acquired = on_acquired};
    CHECK(swy_coll_shm_enqueue(&ch, &late.user) == 0 &&
          late.user.holding && late.user.out_of_step && late.acquired == 0);
    swy_coll_shm_leave(&ch, &late.user, 1);
    /* Leaving twice, or without ever queueing, changes nothing. */
    swy_coll_shm_leave(&ch, &late.user, 1);
    CHECK(ch.holder == NULL);
}

int main(void)
{
    static const int ranks[] = {2, 4, 8, 32};
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++)
        test_segment(ranks[i]);
    char name[64];
    swy_coll_shm_t *none = NULL;
    CHECK(swy_coll_shm_create(0, 33, name, sizeof(name), &none) ==
              SWY_ERR_INVALID_ARG && none == NULL);
    test_line();
    printf("%s (%d failed checks)\n", check_failures ? "FAIL" : "PASS", check_failures);
    return check_failures != 0;
}
