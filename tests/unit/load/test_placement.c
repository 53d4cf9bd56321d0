/* swy_load_placement_plan against hand-computed plans. Most cases use
 * H = F = b = BW = 1 and P = 12, so the latency model's costs are round:
 * 3 x 4 a H^2 / P = 1 s per computed row, 4 H b / BW = 4 s per
 * dispatched row, 2 a H^2 b / BW = 2 s per shadowed expert; the expected
 * values in the comments are worked out by hand from load.h's formulas.
 * Usage: test_placement CASE. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_test.h"

enum { MAX_E = 16 };

typedef struct {
    int shadow[MAX_E], home[MAX_E], cold[MAX_E];
    swy_load_placement_t p;
} plan_t;

/* Unit costs: 1 per computed row, 4 per dispatched row, 2 per shadow. */
static swy_load_placement_config_t unit_config(int W, int epr)
{
    swy_load_placement_config_t c = SWY_LOAD_PLACEMENT_CONFIG_INIT;
    c.n_ranks = W;
    c.experts_per_rank = epr;
    c.hidden = 1;
    c.ffn = 1;
    c.bytes_per_param = 1;
    c.link_bandwidth = 1.0;
    c.flops = 12.0;
    c.max_shadow = W * epr;
    c.horizon_steps = 0; /* moves free, except in test_move_cost */
    return c;
}

static void plan(const swy_load_placement_config_t *c, const double *load,
                 plan_t *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->p.struct_size = sizeof(pl->p);
    pl->p.shadow = pl->shadow;
    pl->p.home = pl->home;
    pl->p.cold = pl->cold;
    CHECK_OK_EXIT(swy_load_placement_plan(c, load, &pl->p), NULL);
}

static void check_ints(const char *what, const int *got, const int *want,
                       int n)
{
    for (int i = 0; i < n; i++)
        CHECK(got[i] == want[i], "%s[%d] = %d, expected %d", what, i,
              got[i], want[i]);
}

/* Equal loads: shadowing one expert cannot lower the busiest rank (the
 * others stay as busy) and costs a replica, so nothing is shadowed and
 * nothing moves. */
static void test_uniform(void)
{
    swy_load_placement_config_t c = unit_config(2, 2);
    double load[4] = {10, 10, 10, 10};
    plan_t pl;
    plan(&c, load, &pl);
    int none[4] = {0}, home[4] = {0, 0, 1, 1};
    check_ints("shadow", pl.shadow, none, 4);
    check_ints("home", pl.home, home, 4);
    CHECK(pl.p.n_shadowed == 0 && pl.p.n_moved == 0 && pl.p.n_cold == 0,
          "shadowed %d, moved %d, cold %d", pl.p.n_shadowed, pl.p.n_moved,
          pl.p.n_cold);
    /* Busiest rank 20 rows: 20 x 1 + 20 x 4 = 100. */
    CHECK_NEAR(pl.p.busiest_before, 20, 0);
    CHECK_NEAR(pl.p.latency_before_s, 100, 1e-12);
    CHECK_NEAR(pl.p.latency_shadow_s, 100, 1e-12);
    CHECK_NEAR(pl.p.latency_after_s, 100, 1e-12);

    /* The same in real units: H 128, F 256, fp32, 1 gbit, 20 Gflop/s,
     * 4 ranks x 2 experts of 512 rows. Per row 12 x 128 x 256 / 2e10 =
     * 1.96608e-5 s computing and 4 x 128 x 4 / 1.25e8 = 1.6384e-5 s on
     * the link; the busiest rank has 1024 rows. */
    swy_load_placement_config_t r = SWY_LOAD_PLACEMENT_CONFIG_INIT;
    r.n_ranks = 4;
    r.experts_per_rank = 2;
    r.hidden = 128;
    r.ffn = 256;
    r.bytes_per_param = 4;
    r.link_bandwidth = 1.25e8;
    r.flops = 2e10;
    double even[8] = {512, 512, 512, 512, 512, 512, 512, 512};
    plan(&r, even, &pl);
    CHECK(pl.p.n_shadowed == 0 && pl.p.n_moved == 0,
          "real units: shadowed %d, moved %d", pl.p.n_shadowed,
          pl.p.n_moved);
    CHECK_NEAR(pl.p.latency_before_s, 1024 * (1.96608e-5 + 1.6384e-5),
               1e-15);
}

/* One very hot expert. Before: rank 0 has 110 rows -> 110 + 440 = 550.
 * Shadow e0: rank 0 keeps 10 and rank 1 20 rows to receive, and each
 * rank computes 100 / 2 = 50 shadowed rows: B_comp 70, B_comm 20 ->
 * 70 + 80 + 2 = 152. Shadow e1 too: B_comm 20, B_comp 20 + 55 = 75 ->
 * 75 + 80 + 4 = 159 > 152: stop. */
static void test_hot(void)
{
    swy_load_placement_config_t c = unit_config(2, 2);
    c.cold_fraction = 0.5; /* below 16.25 rows: e1, e2, e3 */
    c.pack_slack = 0.1;
    double load[4] = {100, 10, 10, 10};
    plan_t pl;
    plan(&c, load, &pl);
    int shadow[4] = {1, 0, 0, 0}, cold[4] = {0, 1, 1, 1};
    check_ints("shadow", pl.shadow, shadow, 4);
    check_ints("cold", pl.cold, cold, 4);
    CHECK(pl.p.n_shadowed == 1 && pl.p.n_cold == 3, "shadowed %d, cold %d",
          pl.p.n_shadowed, pl.p.n_cold);
    CHECK_NEAR(pl.p.busiest_before, 110, 0);
    CHECK_NEAR(pl.p.latency_before_s, 550, 1e-9);
    CHECK_NEAR(pl.p.latency_shadow_s, 152, 1e-9);
    /* Packing 30 rows into bins of 15 x 1.1 = 16.5, cold experts first
     * fit in rank order: e1 -> 0 (10), e2 -> 1 (10), e3 fits nowhere ->
     * the least loaded, rank 0 on the tie. e0 keeps its rank. After:
     * B_comm 20, B_comp 70: 152 again. */
    int home[4] = {0, 0, 1, 0};
    check_ints("home", pl.home, home, 4);
    CHECK(pl.p.n_moved == 1, "moved %d", pl.p.n_moved);
    CHECK_NEAR(pl.p.busiest_after, 70, 0);
    CHECK_NEAR(pl.p.latency_after_s, 152, 1e-9);
}

/* max_shadow caps the greedy. Two hot experts on rank 0 (190 rows):
 * 950 before; e0 -> B_comm 90, B_comp 140: 140 + 360 + 2 = 502; e1 ->
 * 20, 115: 199; e2 -> 10, 110: 156; e3 -> 0, 105: 113 (with 4 s per
 * dispatched row, replicating everything wins). */
static void test_max_shadow(void)
{
    swy_load_placement_config_t c = unit_config(2, 2);
    double load[4] = {100, 90, 10, 10};
    plan_t pl;
    const double want[5] = {950, 502, 199, 156, 113};
    for (int m = 0; m <= 4; m++) {
        c.max_shadow = m;
        plan(&c, load, &pl);
        CHECK(pl.p.n_shadowed == m, "max_shadow %d: shadowed %d", m,
              pl.p.n_shadowed);
        CHECK_NEAR(pl.p.latency_shadow_s, want[m], 1e-9);
        CHECK_NEAR(pl.p.latency_before_s, 950, 1e-9);
        for (int e = 0; e < 4; e++)
            CHECK(pl.shadow[e] == (e < m), "max_shadow %d: shadow[%d] %d",
                  m, e, pl.shadow[e]);
    }
    /* Ties go to the lower id: of three equal experts e0 is taken
     * first (500 -> B_comm 55, B_comp 80: 302; e1 next would give
     * 105 + 220 + 4 = 329, so it stops there). */
    double tie[4] = {50, 50, 50, 5};
    c.max_shadow = 2;
    plan(&c, tie, &pl);
    int shadow[4] = {1, 0, 0, 0};
    CHECK_NEAR(pl.p.latency_shadow_s, 302, 1e-9);
    check_ints("tie shadow", pl.shadow, shadow, 4);
}

/* First-fit decreasing on a known instance: 3 ranks x 2 experts, no
 * shadowing, no slack: 24 rows, bins of 8; cold below 0.5 x 4 = 2.
 * Order e0 7, e2 5, e3 5, e4 4, e5 2, e1 1 (cold):
 *   e0 home r0 [7,0,0]; e2 home r1 [7,5,0]; e3 home r1 full -> r2
 *   [7,5,5]; e4 fits nowhere -> least loaded r1 (tie with r2)
 *   [7,9,5]; e5 home r2 [7,9,7]; e1 cold, first fit r0 [8,9,7].
 * Busiest rank 10 rows before (r1: e2 + e3), 9 after: 50 -> 45. */
static void test_ffd(void)
{
    swy_load_placement_config_t c = unit_config(3, 2);
    c.max_shadow = 0;
    c.cold_fraction = 0.5;
    c.pack_slack = 0.0;
    double load[6] = {7, 1, 5, 5, 4, 2};
    plan_t pl;
    plan(&c, load, &pl);
    int home[6] = {0, 0, 1, 2, 1, 2}, cold[6] = {0, 1, 0, 0, 0, 0};
    int none[6] = {0};
    check_ints("home", pl.home, home, 6);
    check_ints("cold", pl.cold, cold, 6);
    check_ints("shadow", pl.shadow, none, 6);
    CHECK(pl.p.n_moved == 2 && pl.p.n_cold == 1, "moved %d, cold %d",
          pl.p.n_moved, pl.p.n_cold);
    CHECK_NEAR(pl.p.busiest_before, 10, 0);
    CHECK_NEAR(pl.p.busiest_after, 9, 0);
    CHECK_NEAR(pl.p.latency_before_s, 50, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 45, 1e-9);
    /* Outputs may be NULL. */
    swy_load_placement_t bare = {.struct_size = sizeof(bare),
                                 .n_shadowed = -1, .n_cold = -1,
                                 .n_moved = -1};
    CHECK_OK_EXIT(swy_load_placement_plan(&c, load, &bare), NULL);
    CHECK(bare.n_moved == 2, "moved %d without arrays", bare.n_moved);
}

/* Bad input fails with SWY_ERR_INVALID_ARG and a message, and leaves
 * the output alone. */
static void test_bad_input(void)
{
    double load[4] = {1, 2, 3, 4};
    plan_t pl;
    memset(&pl, 0, sizeof(pl));
    for (int e = 0; e < 4; e++)
        pl.shadow[e] = pl.home[e] = 7;
    pl.p.struct_size = sizeof(pl.p);
    pl.p.shadow = pl.shadow;
    pl.p.home = pl.home;
    pl.p.n_shadowed = 42;
    swy_load_placement_config_t good = unit_config(2, 2);

#define EXPECT_BAD(cfgp, loadp, outp, what)                                 \
    do {                                                                    \
        swy_status_t st_ = swy_load_placement_plan(cfgp, loadp, outp);      \
        const char *m_ = swy_last_error(NULL);                              \
        CHECK(st_ == SWY_ERR_INVALID_ARG, "%s: status %d", what, st_);      \
        CHECK(m_ != NULL && strstr(m_, "swy_load_placement_plan") != NULL, \
              "%s: message '%s'", what, m_ ? m_ : "(null)");                \
    } while (0)

    EXPECT_BAD(NULL, load, &pl.p, "cfg NULL");
    EXPECT_BAD(&good, NULL, &pl.p, "load NULL");
    EXPECT_BAD(&good, load, NULL, "out NULL");
    swy_load_placement_config_t c = good;
    c.struct_size = 8;
    EXPECT_BAD(&c, load, &pl.p, "cfg struct_size");
    c = good;
    c.n_ranks = 0;
    EXPECT_BAD(&c, load, &pl.p, "n_ranks 0");
    c = good;
    c.hidden = 0;
    EXPECT_BAD(&c, load, &pl.p, "hidden 0");
    c = good;
    c.link_bandwidth = 0;
    EXPECT_BAD(&c, load, &pl.p, "bandwidth 0");
    c = good;
    c.flops = NAN;
    EXPECT_BAD(&c, load, &pl.p, "flops NaN");
    c = good;
    c.max_shadow = 5;
    EXPECT_BAD(&c, load, &pl.p, "max_shadow > E");
    c = good;
    c.cold_fraction = -1;
    EXPECT_BAD(&c, load, &pl.p, "cold_fraction < 0");
    c = good;
    c.pack_slack = INFINITY;
    EXPECT_BAD(&c, load, &pl.p, "pack_slack inf");
    double neg[4] = {1, -2, 3, 4}, nan_load[4] = {1, 2, NAN, 4};
    EXPECT_BAD(&good, neg, &pl.p, "negative load");
    EXPECT_BAD(&good, nan_load, &pl.p, "NaN load");
    const char *m = swy_last_error(NULL);
    CHECK(m != NULL && strstr(m, "load[2]") != NULL,
          "the message names the load: '%s'", m ? m : "(null)");
    swy_load_placement_t wrong = pl.p;
    wrong.struct_size = 3;
    EXPECT_BAD(&good, load, &wrong, "out struct_size");
    for (int e = 0; e < 4; e++)
        CHECK(pl.shadow[e] == 7 && pl.home[e] == 7,
              "output written on failure at %d", e);
    CHECK(pl.p.n_shadowed == 42, "n_shadowed written on failure");
#undef EXPECT_BAD
}

/* fixed_slots: exactly experts_per_rank per rank. W 2 x 2, nothing
 * shadowed, loads 100 90 5 5 (ranks 0 0 1 1), capacity 200 / 2 x 1.1 =
 * 110. By load: e0 stays on rank 0 (100 <= 110); e1 would make rank 0
 * 190: to the least loaded, rank 1 (90); e2 stays on rank 1 (95); e3
 * finds rank 1 full and takes rank 0's last slot (105). Before: rank 0
 * has 190 rows -> 190 + 760 = 950; after: 105 -> 105 + 420 = 525. */
static void test_slots(void)
{
    swy_load_placement_config_t c = unit_config(2, 2);
    c.max_shadow = 0;
    c.fixed_slots = 1;
    double load[4] = {100, 90, 5, 5};
    plan_t pl;
    plan(&c, load, &pl);
    int home[4] = {0, 1, 1, 0};
    check_ints("home", pl.home, home, 4);
    CHECK(pl.p.n_moved == 2 && pl.p.n_cold == 2 && pl.p.n_shadowed == 0,
          "moved %d, cold %d, shadowed %d", pl.p.n_moved, pl.p.n_cold,
          pl.p.n_shadowed);
    CHECK_NEAR(pl.p.busiest_before, 190, 0);
    CHECK_NEAR(pl.p.busiest_after, 105, 0);
    CHECK_NEAR(pl.p.latency_before_s, 950, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 525, 1e-9);

    /* 3 ranks x 2, loads 60 50 40 3 2 1, capacity 156 / 3 x 1.1 = 57.2:
     * e0 over capacity anyway, every rank at 0: the tie keeps it on rank
     * 0 (60); e1 (rank 0 would be 110) to rank 1, idle, lower than rank
     * 2 on the tie; e2 (rank 1 would be 90) to the idle rank 2 (40); e3
     * stays on rank 1 (53); e4 stays on rank 2 (42); e5's rank 2 is full:
     * rank 0's last slot (61). Before: rank 0 110 -> 550; after 61 ->
     * 305. */
    swy_load_placement_config_t c3 = unit_config(3, 2);
    c3.max_shadow = 0;
    c3.fixed_slots = 1;
    double load3[6] = {60, 50, 40, 3, 2, 1};
    plan(&c3, load3, &pl);
    int home3[6] = {0, 1, 2, 1, 2, 0}, count[3] = {0, 0, 0};
    check_ints("home", pl.home, home3, 6);
    for (int e = 0; e < 6; e++)
        count[pl.home[e]]++;
    for (int r = 0; r < 3; r++)
        CHECK(count[r] == 2, "rank %d holds %d experts", r, count[r]);
    CHECK(pl.p.n_moved == 3, "moved %d", pl.p.n_moved);
    CHECK_NEAR(pl.p.latency_before_s, 550, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 305, 1e-9);

    /* Already packed (current_rank 1 0 0 1): every expert stays within
     * capacity on its rank: nothing moves; rank 1 has 105 rows -> 525
     * before and after. */
    int now[4] = {1, 0, 0, 1};
    c.current_rank = now;
    plan(&c, load, &pl);
    check_ints("home", pl.home, now, 4);
    CHECK(pl.p.n_moved == 0, "moved %d", pl.p.n_moved);
    CHECK_NEAR(pl.p.latency_before_s, 525, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 525, 1e-9);

    /* Uniform loads: every expert stays (within capacity on its rank). */
    double even[6] = {7, 7, 7, 7, 7, 7};
    c3.max_shadow = 6;
    plan(&c3, even, &pl);
    int same[6] = {0, 0, 1, 1, 2, 2};
    check_ints("home", pl.home, same, 6);
    CHECK(pl.p.n_moved == 0 && pl.p.n_shadowed == 0,
          "uniform: moved %d, shadowed %d", pl.p.n_moved, pl.p.n_shadowed);

    /* A shadowed expert keeps its slot: test_hot's loads shadow e0 (on
     * rank 0), leaving rank 0 one slot: e1 keeps it, e2 stays on rank 1
     * and e3, over capacity (20 > 30 / 2 x 1.1), finds only rank 1 with
     * a free slot. */
    swy_load_placement_config_t ch = unit_config(2, 2);
    ch.fixed_slots = 1;
    double hot[4] = {100, 10, 10, 10};
    plan(&ch, hot, &pl);
    int hhome[4] = {0, 0, 1, 1};
    check_ints("home", pl.home, hhome, 4);
    CHECK(pl.shadow[0] == 1 && pl.p.n_shadowed == 1 && pl.p.n_moved == 0,
          "hot: shadow[0] %d, shadowed %d, moved %d", pl.shadow[0],
          pl.p.n_shadowed, pl.p.n_moved);

    /* A current_rank that does not fill every rank is refused. */
    int bad[4] = {0, 0, 0, 1};
    c.current_rank = bad;
    swy_load_placement_t out = {.struct_size = sizeof(out)};
    CHECK(swy_load_placement_plan(&c, load, &out) == SWY_ERR_INVALID_ARG,
          "unbalanced current_rank accepted");
    int out_of_range[4] = {0, 2, 1, 1};
    c.current_rank = out_of_range;
    CHECK(swy_load_placement_plan(&c, load, &out) == SWY_ERR_INVALID_ARG,
          "current_rank out of range accepted");
    c.current_rank = NULL;
    c.fixed_slots = 2;
    CHECK(swy_load_placement_plan(&c, load, &out) == SWY_ERR_INVALID_ARG,
          "fixed_slots 2 accepted");
}

/* Moves charged their bytes (horizon_steps > 0) on test_slots' first
 * case: packing proposes 2 moves that take the modeled latency from 950
 * to 525 s a step, a gain of 425 s per step of the horizon. */
static void test_move_cost(void)
{
    swy_load_placement_config_t c = unit_config(2, 2);
    c.max_shadow = 0;
    c.fixed_slots = 1;
    double load[4] = {100, 90, 5, 5};
    int stay[4] = {0, 0, 1, 1}, moved[4] = {0, 1, 1, 0};
    plan_t pl;

    /* 300 bytes a move at 1 B/s: 600 s for both, more than one step's
     * 425 s: nothing moves, and the plan says what it kept back. */
    c.horizon_steps = 1;
    c.move_bytes = 300;
    plan(&c, load, &pl);
    check_ints("home", pl.home, stay, 4);
    CHECK(pl.p.n_moved == 0 && pl.p.moves_kept_back == 2,
          "gain below cost: moved %d, kept back %d", pl.p.n_moved,
          pl.p.moves_kept_back);
    CHECK_NEAR(pl.p.move_cost_s, 600, 1e-9);
    CHECK_NEAR(pl.p.move_gain_s, 425, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 950, 1e-9);
    CHECK_NEAR(pl.p.busiest_after, 190, 0);

    /* A gain equal to the cost does not move either (212.5 x 2 = 425). */
    c.move_bytes = 212.5;
    plan(&c, load, &pl);
    CHECK(pl.p.n_moved == 0 && pl.p.moves_kept_back == 2,
          "gain = cost: moved %d", pl.p.n_moved);

    /* Two steps gain 850 s > 600 s: the moves are made. */
    c.move_bytes = 300;
    c.horizon_steps = 2;
    plan(&c, load, &pl);
    check_ints("home", pl.home, moved, 4);
    CHECK(pl.p.n_moved == 2 && pl.p.moves_kept_back == 0,
          "gain above cost: moved %d, kept back %d", pl.p.n_moved,
          pl.p.moves_kept_back);
    CHECK_NEAR(pl.p.move_gain_s, 850, 1e-9);
    CHECK_NEAR(pl.p.latency_after_s, 525, 1e-9);

    /* The default move: parameters and Adam's two moments,
     * 3 x (2 H F + H + F) x b = 12 bytes, 24 s for both. */
    c.move_bytes = 0;
    c.horizon_steps = 1;
    plan(&c, load, &pl);
    CHECK(pl.p.n_moved == 2, "default move bytes: moved %d", pl.p.n_moved);
    CHECK_NEAR(pl.p.move_cost_s, 24, 1e-9);

    /* A config that ends before move_bytes is not one of any release
     * (the struct_size rule: tests/abi covers older and newer layouts). */
    c.struct_size = offsetof(swy_load_placement_config_t, move_bytes);
    swy_load_placement_t short_out = {.struct_size = sizeof(short_out)};
    CHECK(swy_load_placement_plan(&c, load, &short_out) ==
              SWY_ERR_INVALID_ARG, "a config short of its first release "
          "accepted");
    c.struct_size = sizeof(c);

    /* Bad horizon or move size. */
    swy_load_placement_t out = {.struct_size = sizeof(out)};
    c.horizon_steps = -1;
    CHECK(swy_load_placement_plan(&c, load, &out) == SWY_ERR_INVALID_ARG,
          "horizon_steps -1 accepted");
    c.horizon_steps = 1;
    c.move_bytes = NAN;
    CHECK(swy_load_placement_plan(&c, load, &out) == SWY_ERR_INVALID_ARG,
          "move_bytes NaN accepted");
    CHECK(strstr(swy_last_error(NULL), "move_bytes") != NULL,
          "message lacks the argument: %s", swy_last_error(NULL));
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"uniform", test_uniform}, {"hot", test_hot},
                 {"max_shadow", test_max_shadow}, {"ffd", test_ffd},
                 {"bad_input", test_bad_input},
                 {"slots", test_slots}, {"move_cost", test_move_cost}};
    if (argc != 2) {
        fprintf(stderr, "usage: test_placement CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            if (check_failures == 0)
                printf("ok %s\n", argv[1]);
            return check_failures ? 1 : 0;
        }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
