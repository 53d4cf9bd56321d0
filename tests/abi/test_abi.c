/* A caller built against one layout of every public struct: the first
 * release's (layouts_v1.h, the default) or, with ABI_NEWER, a later
 * release's, each struct larger than this library's by a trailing field.
 * It runs one rank against the library with the ABI test plugins of the
 * same layout (SWY_TRANSPORT_PLUGINS, SWY_POLICY: abi_plugin.c) and
 * checks that
 *  - every struct it passes in is read field by field as it meant them
 *    (results against values computed here), whatever its trailing
 *    fields hold;
 *  - every struct the library fills in is filled up to its struct_size
 *    and not one byte further (a guard after the last known field);
 *  - a struct_size below the first release is refused;
 *  - the plugins' tables were read (their config variable, their init,
 *    the policy's admit) and they read the host's tables (rank, the
 *    library's size parser; a newer plugin sees zero past the host's
 *    table). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layouts_v1.h"
#include "switchyard/load.h"
#include "switchyard/moe.h"
#include "switchyard/switchyard.h"

#define GUARD UINT64_C(0xa5a5a5a5a5a5a5a5)

#ifdef ABI_NEWER
/* A later release: each struct has one more trailing field. For inputs
 * it holds GUARD, which this library must not read as anything; for
 * outputs it must still hold GUARD afterwards. */
#define LATER(name, type)                                                     \
    typedef struct {                                                          \
        type base;                                                            \
        uint64_t later;                                                       \
    } name
LATER(op_attr_t, swy_op_attr_t);
LATER(comm_stats_t, swy_comm_stats_t);
LATER(peer_info_t, swy_peer_info_t);
LATER(moe_config_t, swy_moe_config_t);
LATER(moe_layout_t, swy_moe_layout_t);
LATER(state_config_t, swy_load_state_config_t);
LATER(predictor_config_t, swy_load_predictor_config_t);
LATER(placement_config_t, swy_load_placement_config_t);
LATER(placement_t, swy_load_placement_t);
#define BASE(x) (x).base
#define SET_LATER(x) ((x).later = GUARD)
#define LATER_INTACT(x) ((x).later == GUARD)
#else
typedef abi_v1_op_attr_t op_attr_t;
typedef abi_v1_comm_stats_t comm_stats_t;
typedef abi_v1_peer_info_t peer_info_t;
typedef abi_v1_moe_config_t moe_config_t;
typedef abi_v1_moe_layout_t moe_layout_t;
typedef abi_v1_load_state_config_t state_config_t;
typedef abi_v1_load_predictor_config_t predictor_config_t;
typedef abi_v1_load_placement_config_t placement_config_t;
typedef abi_v1_load_placement_t placement_t;
#define BASE(x) (x)
#define SET_LATER(x) ((void)0)
#define LATER_INTACT(x) 1
#endif

/* Outputs: the caller's struct sits in a buffer with a guard after it. */
#define WITH_GUARD(type, var)                                                 \
    struct {                                                                  \
        type s;                                                               \
        uint64_t guard;                                                       \
    } var##_buf;                                                              \
    memset(&var##_buf, 0, sizeof(var##_buf));                               \
    var##_buf.guard = GUARD;                                                  \
    type *var = &var##_buf.s;                                                 \
    BASE(*var).struct_size = sizeof(type);                                    \
    SET_LATER(*var)


static swy_comm_t comm;

static void test_op_attr(void)
{
    op_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    BASE(attr).struct_size = sizeof(attr);
    BASE(attr).priority = 7;
    BASE(attr).order = 3;
    BASE(attr).name = "abi";
    SET_LATER(attr);
    const swy_op_attr_t *a = (const swy_op_attr_t *)(const void *)&attr;
    double in[4] = {1, 2, 3, 4}, out[4] = {0};
    CHECK(swy_allreduce(in, out, 4, SWY_FLOAT64, SWY_SUM, comm, a, NULL) ==
              SWY_OK,
          "allreduce with attr: %s", swy_last_error(NULL));
    CHECK(out[0] == 1 && out[3] == 4, "allreduce result %g %g", out[0],
          out[3]);
    /* The priority is read where the caller put it: out of range is
     * refused. */
    BASE(attr).priority = 1001;
    CHECK(swy_allreduce(in, out, 4, SWY_FLOAT64, SWY_SUM, comm, a, NULL) ==
              SWY_ERR_INVALID_ARG,
          "priority 1001 accepted");
    BASE(attr).priority = 7;
    /* Not made from SWY_OP_ATTR_INIT: refused, naming the initializer. */
    size_t first = SWY_STRUCT_END(abi_v1_op_attr_t, name);
    BASE(attr).struct_size = first - 1;
    CHECK(swy_allreduce(in, out, 4, SWY_FLOAT64, SWY_SUM, comm, a, NULL) ==
              SWY_ERR_INVALID_ARG,
          "attr struct_size %zu accepted", first - 1);
    CHECK(strstr(swy_last_error(NULL), "SWY_OP_ATTR_INIT") != NULL,
          "message: %s", swy_last_error(NULL));
    BASE(attr).struct_size = 0;
    CHECK(swy_allreduce(in, out, 4, SWY_FLOAT64, SWY_SUM, comm, a, NULL) ==
              SWY_ERR_INVALID_ARG,
          "attr struct_size 0 accepted");
    /* NULL still means the defaults. */
    CHECK(swy_allreduce(in, out, 4, SWY_FLOAT64, SWY_SUM, comm, NULL,
                        NULL) == SWY_OK,
          "allreduce with NULL attr: %s", swy_last_error(NULL));
}

static void test_outputs(void)
{
    WITH_GUARD(comm_stats_t, stats);
    CHECK(swy_comm_stats(comm, (swy_comm_stats_t *)(void *)stats) ==
              SWY_OK,
          "stats: %s", swy_last_error(NULL));
    CHECK(BASE(*stats).ops_completed >= 2, "ops_completed %llu",
          (unsigned long long)BASE(*stats).ops_completed);
    CHECK(BASE(*stats).struct_size == sizeof(comm_stats_t),
          "stats struct_size changed to %zu", BASE(*stats).struct_size);
    CHECK(LATER_INTACT(*stats) && stats_buf.guard == GUARD,
          "stats written past its struct_size");
    BASE(*stats).struct_size = SWY_STRUCT_END(abi_v1_comm_stats_t,
                                              headers_sent) - 1;
    CHECK(swy_comm_stats(comm, (swy_comm_stats_t *)(void *)stats) ==
              SWY_ERR_INVALID_ARG,
          "stats struct_size below the first release accepted");

    WITH_GUARD(peer_info_t, info);
    CHECK(swy_comm_peer_info(comm, 0, (swy_peer_info_t *)(void *)info) ==
              SWY_OK,
          "peer_info: %s", swy_last_error(NULL));
    CHECK(strcmp(BASE(*info).link_class, "self") == 0 &&
              strcmp(BASE(*info).transport, "self") == 0 &&
              BASE(*info).hostname[0] != '\0',
          "peer_info: link %s transport %s", BASE(*info).link_class,
          BASE(*info).transport);
    CHECK(LATER_INTACT(*info) && info_buf.guard == GUARD,
          "peer_info written past its struct_size");
}

static void test_moe(void)
{
    moe_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    BASE(cfg).struct_size = sizeof(cfg);
    BASE(cfg).experts_per_rank = 2;
    BASE(cfg).hidden = 4;
    BASE(cfg).dtype = SWY_FLOAT32;
    BASE(cfg).top_k = 1;
    BASE(cfg).pipeline_degree = 1;
    BASE(cfg).packing_factor = 1;
    BASE(cfg).rows_mem = SWY_MOE_ROWS_HOST;
    SET_LATER(cfg);
    swy_moe_plan_t plan = NULL;
    CHECK(swy_moe_plan_create(comm, (const swy_moe_config_t *)(void *)&cfg,
                              &plan) == SWY_OK,
          "plan: %s", swy_last_error(NULL));
    if (plan == NULL)
        return;
    int topk[3] = {1, 0, 1};
    swy_moe_route_t route = NULL;
    CHECK(swy_moe_route(plan, topk, 3, &route) == SWY_OK, "route: %s",
          swy_last_error(NULL));
    if (route != NULL) {
        WITH_GUARD(moe_layout_t, layout);
        CHECK(swy_moe_route_layout(route,
                                   (swy_moe_layout_t *)(void *)layout) ==
                  SWY_OK,
              "layout: %s", swy_last_error(NULL));
        /* Expert 0 gets token 1, expert 1 tokens 0 and 2. */
        CHECK(BASE(*layout).num_experts == 2 && BASE(*layout).hidden == 4 &&
                  BASE(*layout).num_tokens == 3 &&
                  BASE(*layout).send_rows == 3 &&
                  BASE(*layout).expert_offset != NULL &&
                  BASE(*layout).expert_offset[1] == 1 &&
                  BASE(*layout).expert_offset[2] == 3,
              "layout: experts %d hidden %d tokens %d rows %lld",
              BASE(*layout).num_experts, BASE(*layout).hidden,
              BASE(*layout).num_tokens,
              (long long)BASE(*layout).send_rows);
        CHECK(LATER_INTACT(*layout) && layout_buf.guard == GUARD,
              "layout written past its struct_size");
        swy_moe_route_destroy(route);
    }
    swy_moe_plan_destroy(plan);
    BASE(cfg).struct_size = SWY_STRUCT_END(abi_v1_moe_config_t, stream) - 1;
    plan = NULL;
    CHECK(swy_moe_plan_create(comm, (const swy_moe_config_t *)(void *)&cfg,
                              &plan) == SWY_ERR_INVALID_ARG,
          "moe config struct_size below the first release accepted");
    swy_moe_plan_destroy(plan);
}

static void test_load(void)
{
    /* Ten steps of two experts, calm: every step stable once a window
     * of 2 fills, with window 2 and 1 calm window in a row. */
    double series[20];
    for (int t = 0; t < 10; t++)
        series[2 * t] = series[2 * t + 1] = 0.5;
    state_config_t sc;
    memset(&sc, 0, sizeof(sc));
    BASE(sc).struct_size = sizeof(sc);
    BASE(sc).window = 2;
    BASE(sc).consecutive = 1;
    BASE(sc).smooth = 1;
    BASE(sc).max_range = 0.02;
    BASE(sc).max_variance = -1;
    SET_LATER(sc);
    swy_load_state_t state[10]; /* one per step */
    CHECK(swy_load_state((const swy_load_state_config_t *)(void *)&sc,
                         series, 10, 2, state) == SWY_OK,
          "state: %s", swy_last_error(NULL));
    BASE(sc).window = 1; /* read where it was put: below 2 is refused */
    CHECK(swy_load_state((const swy_load_state_config_t *)(void *)&sc,
                         series, 10, 2, state) == SWY_ERR_INVALID_ARG,
          "state window 1 accepted");

    predictor_config_t pc;
    memset(&pc, 0, sizeof(pc));
    BASE(pc).struct_size = sizeof(pc);
    BASE(pc).kind = SWY_LOAD_PRED_WINDOW;
    BASE(pc).normalize = 1;
    BASE(pc).window = 4;
    SET_LATER(pc);
    swy_load_predictor_t pred = NULL;
    CHECK(swy_load_predictor_create(
              (const swy_load_predictor_config_t *)(void *)&pc, 2, &pred) ==
              SWY_OK,
          "predictor: %s", swy_last_error(NULL));
    if (pred != NULL) {
        double next[2] = {0, 0};
        CHECK(swy_load_predictor_predict(pred, series, 10, 1, next) ==
                  SWY_OK,
              "predict: %s", swy_last_error(NULL));
        CHECK(next[0] == 0.5 && next[1] == 0.5, "predicted %g %g", next[0],
              next[1]);
        swy_load_predictor_destroy(pred);
    }

    /* Two ranks, one expert each; expert 0 hot: with max_shadow 1 it is
     * shadowed. */
    placement_config_t pl;
    memset(&pl, 0, sizeof(pl));
    BASE(pl).struct_size = sizeof(pl);
    BASE(pl).n_ranks = 2;
    BASE(pl).experts_per_rank = 1;
    BASE(pl).hidden = 4;
    BASE(pl).ffn = 8;
    BASE(pl).bytes_per_param = 4;
    BASE(pl).link_bandwidth = 1e9;
    BASE(pl).flops = 1e12;
    BASE(pl).max_shadow = 1;
    BASE(pl).cold_fraction = 0.25;
    BASE(pl).pack_slack = 0.1;
    BASE(pl).horizon_steps = 10;
    SET_LATER(pl);
    double load[2] = {1000, 1};
    int shadow[2] = {-1, -1};
    WITH_GUARD(placement_t, out);
    BASE(*out).shadow = shadow;
    CHECK(swy_load_placement_plan(
              (const swy_load_placement_config_t *)(void *)&pl, load,
              (swy_load_placement_t *)(void *)out) == SWY_OK,
          "placement: %s", swy_last_error(NULL));
    CHECK(shadow[0] == 1 && shadow[1] == 0 && BASE(*out).n_shadowed == 1 &&
              BASE(*out).n_cold == 1,
          "placement: shadow %d %d, %d shadowed, %d cold", shadow[0],
          shadow[1], BASE(*out).n_shadowed, BASE(*out).n_cold);
    CHECK(BASE(*out).struct_size == sizeof(placement_t) &&
              BASE(*out).shadow == shadow,
          "placement changed the caller's struct_size or pointers");
    CHECK(LATER_INTACT(*out) && out_buf.guard == GUARD,
          "placement written past its struct_size");
}

static void test_plugins(const char *name)
{
    const char *t = getenv("ABI_TEST_TRANSPORT");
    char want[256];
    snprintf(want, sizeof(want), "rank=0 nranks=1 size=65536 depth=3 "
             "future=%s",
#ifdef ABI_NEWER
             "zero"
#else
             "none"
#endif
    );
    CHECK(t != NULL && strcmp(t, want) == 0,
          "transport plugin saw: %s (want %s)", t ? t : "(not loaded)",
          want);
    const char *p = getenv("ABI_TEST_POLICY");
    snprintf(want, sizeof(want), "rank=0 nranks=1 policy=%s", name);
    CHECK(p != NULL && strcmp(p, want) == 0,
          "policy plugin saw: %s (want %s)", p ? p : "(not loaded)", want);
    CHECK(getenv("ABI_TEST_POLICY_ADMIT") != NULL,
          "the policy plugin's admit was never called, or with a "
          "struct_size short of the first release");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN_NAME\n", argv[0]);
        return 2;
    }
    swy_unique_id_t id;
    if (swy_get_unique_id(&id) != SWY_OK ||
        swy_comm_init_rank(&comm, 1, &id, 0) != SWY_OK) {
        fprintf(stderr, "init: %s\n", swy_last_error(NULL));
        return 1;
    }
    test_op_attr();
    test_outputs();
    test_moe();
    test_load();
    test_plugins(argv[1]);
    CHECK(swy_comm_destroy(comm) == SWY_OK, "destroy");
    printf("%s (%s layout): %d failure(s)\n",
           check_failures ? "FAIL" : "PASS",
#ifdef ABI_NEWER
           "newer",
#else
           "first release",
#endif
           (int)check_failures);
    return check_failures != 0;
}
