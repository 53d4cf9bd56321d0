/* MoE dispatch/combine and their backward against a serial reference.
 *
 * Every rank regenerates the seeded inputs of all ranks, so it can build
 * the serial reference of the whole layer in-process: which rows each of
 * its experts must receive (in the documented layout order), the combined
 * outputs of its tokens, and the gradients. The "experts" are toys with a
 * known Jacobian: global expert g maps a row x to (g+1)*x + g.
 *
 * Usage: test_moe NRANKS TOPK PIPELINE PACKING [SCALE]  (correctness;
 *                        SCALE multiplies the tokens per rank)
 *        test_moe NRANKS dtype16   (fp16 and bf16 rows)
 *        test_moe NRANKS dtype64   (fp64 rows and gate weights)
 *        test_moe NRANKS errors    (bad input on one rank)
 *        test_moe NRANKS diverge   (one rank posts another collective
 *                                   instead of the dispatch)             */
#include <math.h>
#include <string.h>
#include <time.h>

#include "../harness.h"
#include "moe_check.h"
#include "switchyard/moe.h"

#define E_LOC 2
#define HIDDEN 5
#define SEED 2024

typedef struct {
    int k, d, p;
} params_t;

static int token_scale = 1;

typedef struct {
    int S;
    float *tokens;   /* [S][H] */
    int *idx;        /* [S][k] */
    float *w;        /* [S][k] */
    float *grad_out; /* [S][H]: dL/d tokens_out */
} rank_input_t;

static int tokens_of(int r, int nranks)
{
    /* One rank has no tokens. */
    return r == 1 && nranks > 2 ? 0 : (24 + 5 * r) * token_scale;
}

static float unit(uint64_t *st) /* in [-1, 1) */
{
    return (float)((double)(swy_test_rand(st) >> 11) / 9007199254740992.0 *
                   2.0 - 1.0);
}

/* Rank r's inputs for iteration iter: distinct experts per token, about
 * one slot in six dropped. */
static void gen_input(int r, int nranks, int E, int k, int iter,
                      rank_input_t *in)
{
    uint64_t st = SEED ^ ((uint64_t)r << 32) ^ ((uint64_t)iter << 48);
    in->S = tokens_of(r, nranks);
    size_t S = (size_t)in->S;
    in->tokens = malloc((S * HIDDEN + 1) * sizeof(float));
    in->grad_out = malloc((S * HIDDEN + 1) * sizeof(float));
    in->idx = malloc((S * k + 1) * sizeof(int));
    in->w = malloc((S * k + 1) * sizeof(float));
    for (size_t i = 0; i < S * HIDDEN; i++) {
        in->tokens[i] = unit(&st);
        in->grad_out[i] = unit(&st);
    }
    for (size_t t = 0; t < S; t++)
        for (int s = 0; s < k; s++) {
            int g;
            int again;
            do { /* distinct experts within a token, as a top-k gate gives */
                g = (int)(swy_test_rand(&st) % (uint64_t)E);
                again = 0;
                for (int q = 0; q < s; q++)
                    again |= in->idx[t * k + q] == g;
            } while (again);
            if (swy_test_rand(&st) % 6 == 0)
                g = -1;
            in->idx[t * k + s] = g;
            in->w[t * k + s] = 0.25f + 0.5f * (unit(&st) + 1.0f) / 2.0f;
        }
}

static void free_input(rank_input_t *in)
{
    free(in->tokens);
    free(in->grad_out);
    free(in->idx);
    free(in->w);
}

static int close_enough(double got, double ref)
{
    return fabs(got - ref) <= 1e-5 * fmax(1.0, fabs(ref));
}

/* The toy expert on rows [begin, end) of local expert e. */
static void toy_expert(float *out, const float *in, int64_t begin,
                       int64_t end, int g)
{
    for (int64_t i = begin * HIDDEN; i < end * HIDDEN; i++)
        out[i] = (float)(g + 1) * in[i] + (float)g;
}
static void toy_expert_backward(float *grad_in, const float *grad_out,
                                int64_t begin, int64_t end, int g)
{
    for (int64_t i = begin * HIDDEN; i < end * HIDDEN; i++)
        grad_in[i] = (float)(g + 1) * grad_out[i];
}

/* Rows source rank r sends to global expert g, in token order. */
static int64_t rows_to(const rank_input_t *in, int k, int g, int64_t *tok)
{
    int64_t n = 0;
    for (int t = 0; t < in->S; t++)
        for (int s = 0; s < k; s++)
            if (in->idx[t * k + s] == g) {
                if (tok != NULL)
                    tok[n] = t;
                n++;
            }
    return n;
}

/* expert_in must hold, per local expert, chunk, source rank, the rows of
 * that rank's part j in token order: checked against all ranks' inputs. */
static int check_expert_in(const float *expert_in, const swy_moe_layout_t *L,
                           const rank_input_t *all, int k)
{
    int W = L->nranks, d = L->pipeline_degree, nl = L->num_local_experts;
    int64_t *tok = malloc((size_t)(all[W - 1].S + 1) * k *
                          sizeof(int64_t));
    int64_t total = 0;
    for (int e = 0; e < nl; e++) {
        int g = L->first_expert + e;
        for (int j = 0; j < d; j++)
            for (int r = 0; r < W; r++) {
                int64_t n = rows_to(&all[r], k, g, tok);
                int64_t b = n * j / d, len = n * (j + 1) / d - b;
                int64_t i = ((int64_t)e * d + j) * W + r;
                int64_t off = L->block_offset[i];
                CHECK_RET(L->block_offset[i + 1] - off == len,
                          "expert %d chunk "
                          "%d from rank %d: %lld rows, expected %lld",
                          g, j, r, (long long)(L->block_offset[i + 1] - off),
                          (long long)len);
                for (int64_t q = 0; q < len; q++)
                    CHECK_RET(memcmp(expert_in + (off + q) * HIDDEN,
                                     all[r].tokens + tok[b + q] * HIDDEN,
                                     HIDDEN * sizeof(float)) == 0,
                              "expert %d chunk %d from rank %d row %lld is not "
                              "token %lld", g, j, r, (long long)q,
                              (long long)tok[b + q]);
                total += len;
            }
        CHECK_RET(L->chunk_offset[e * (d + 1)] == L->expert_offset[e] &&
                  L->chunk_offset[e * (d + 1) + d] == L->expert_offset[e + 1],
                  "chunk offsets of expert %d do not span it", g);
    }
    CHECK_RET(total == L->recv_rows, "recv_rows %lld, expected %lld",
              (long long)L->recv_rows, (long long)total);
    free(tok);
    return 0;
}

/* One layer, forward and backward; `pipelined` uses the chunk-by-chunk
 * calls, else the blocking ones. */
static int run_layer(swy_comm_t comm, swy_moe_plan_t plan, int rank, int W,
                     const params_t *P, int iter, int pipelined)
{
    int k = P->k, E = W * E_LOC * P->p;
    rank_input_t all[8];
    for (int r = 0; r < W; r++)
        gen_input(r, W, E, k, iter, &all[r]);
    const rank_input_t *me = &all[rank];
    size_t S = (size_t)me->S;

    swy_moe_route_t route;
    swy_status_t st = swy_moe_route(plan, me->idx, me->S, &route);
    CHECK_RET(st == SWY_OK, "route: %s: %s", swy_status_string(st),
              swy_last_error(NULL));
    swy_moe_layout_t L = {.struct_size = sizeof(L)};
    CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
    CHECK_RET(L.num_local_experts == E_LOC * P->p && L.num_experts == E &&
              L.first_expert == rank * E_LOC * P->p, "layout experts");

    /* Load counts against the inputs. */
    int64_t sent[64], recvd[16];
    CHECK_RET(swy_moe_route_counts(route, sent, recvd) == SWY_OK, "counts");
    int64_t send_total = 0;
    for (int g = 0; g < E; g++) {
        CHECK_RET(sent[g] == rows_to(me, k, g, NULL), "sent to expert %d", g);
        send_total += sent[g];
    }
    CHECK_RET(send_total == L.send_rows, "send_rows");
    for (int e = 0; e < L.num_local_experts; e++) {
        int64_t n = 0;
        for (int r = 0; r < W; r++)
            n += rows_to(&all[r], k, L.first_expert + e, NULL);
        CHECK_RET(recvd[e] == n, "expert %d received %lld rows, expected %lld",
                  L.first_expert + e, (long long)recvd[e], (long long)n);
    }

    size_t R = (size_t)L.recv_rows;
    float *expert_in = malloc((R * HIDDEN + 1) * sizeof(float));
    float *expert_out = malloc((R * HIDDEN + 1) * sizeof(float));
    float *grad_eout = malloc((R * HIDDEN + 1) * sizeof(float));
    float *grad_ein = malloc((R * HIDDEN + 1) * sizeof(float));
    float *tokens_out = malloc((S * HIDDEN + 1) * sizeof(float));
    float *grad_tokens = malloc((S * HIDDEN + 1) * sizeof(float));
    float *grad_w = malloc((S * k + 1) * sizeof(float));
    int nl = L.num_local_experts, d = L.pipeline_degree;
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = "test";
    attr.order = iter;

    /* Every exchange checks its arguments across ranks once, however many
     * chunks it is cut into: one op header to each peer per exchange. */
    swy_comm_stats_t st0 = {.struct_size = sizeof(st0)};
    CHECK_RET(swy_comm_stats(comm, &st0) == SWY_OK, "stats");

    /* Forward. */
    if (!pipelined) {
        st = swy_moe_dispatch(route, me->tokens, expert_in, &attr,
                              SWY_MOE_BLOCKING);
        CHECK_RET(st == SWY_OK, "dispatch: %s", swy_last_error(NULL));
        for (int e = 0; e < nl; e++)
            toy_expert(expert_out, expert_in, L.expert_offset[e],
                       L.expert_offset[e + 1], L.first_expert + e);
        st = swy_moe_combine(route, expert_out, me->w, tokens_out, &attr);
        CHECK_RET(st == SWY_OK, "combine: %s", swy_last_error(NULL));
    } else {
        st = swy_moe_dispatch(route, me->tokens, expert_in, &attr,
                              SWY_MOE_ASYNC);
        CHECK_RET(st == SWY_OK, "dispatch async: %s", swy_last_error(NULL));
        for (int j = 0; j < d; j++) {
            int done = 0;
            CHECK_RET(swy_moe_test_chunk(route, j, &done) == SWY_OK, "test");
            CHECK_RET(swy_moe_wait_chunk(route, j) == SWY_OK, "wait chunk %d: "
                      "%s", j, swy_last_error(NULL));
            for (int e = 0; e < nl; e++)
                toy_expert(expert_out, expert_in,
                           L.chunk_offset[e * (d + 1) + j],
                           L.chunk_offset[e * (d + 1) + j + 1],
                           L.first_expert + e);
            st = swy_moe_combine_post_chunk(route, j, expert_out, &attr);
            CHECK_RET(st == SWY_OK, "combine chunk %d: %s", j,
                      swy_last_error(NULL));
        }
        st = swy_moe_combine_finish(route, me->w, tokens_out);
        CHECK_RET(st == SWY_OK, "combine finish: %s", swy_last_error(NULL));
    }
    if (check_expert_in(expert_in, &L, all, k))
        return 1;

    /* Backward. */
    if (!pipelined) {
        st = swy_moe_combine_backward(route, me->grad_out, me->w, grad_eout,
                                      grad_w, &attr, SWY_MOE_BLOCKING);
        CHECK_RET(st == SWY_OK, "combine backward: %s", swy_last_error(NULL));
        for (int e = 0; e < nl; e++)
            toy_expert_backward(grad_ein, grad_eout, L.expert_offset[e],
                                L.expert_offset[e + 1], L.first_expert + e);
        st = swy_moe_dispatch_backward(route, grad_ein, grad_tokens, &attr);
        CHECK_RET(st == SWY_OK, "dispatch backward: %s", swy_last_error(NULL));
    } else {
        st = swy_moe_combine_backward(route, me->grad_out, me->w, grad_eout,
                                      grad_w, &attr, SWY_MOE_ASYNC);
        CHECK_RET(st == SWY_OK, "combine backward: %s", swy_last_error(NULL));
        for (int j = d - 1; j >= 0; j--) /* any order may be completed... */
            CHECK_RET(swy_moe_wait_chunk(route, j) == SWY_OK, "wait %d", j);
        for (int j = 0; j < d; j++) { /* ...but posted only in order */
            for (int e = 0; e < nl; e++)
                toy_expert_backward(grad_ein, grad_eout,
                                    L.chunk_offset[e * (d + 1) + j],
                                    L.chunk_offset[e * (d + 1) + j + 1],
                                    L.first_expert + e);
            st = swy_moe_dispatch_backward_post_chunk(route, j, grad_ein,
                                                      &attr);
            CHECK_RET(st == SWY_OK, "dispatch backward chunk %d: %s", j,
                      swy_last_error(NULL));
        }
        st = swy_moe_dispatch_backward_finish(route, grad_tokens);
        CHECK_RET(st == SWY_OK, "dispatch backward finish: %s",
                  swy_last_error(NULL));
    }

    swy_comm_stats_t st1 = {.struct_size = sizeof(st1)};
    CHECK_RET(swy_comm_stats(comm, &st1) == SWY_OK, "stats");
    CHECK_RET(st1.headers_sent - st0.headers_sent == 4 * (uint64_t)(W - 1),
              "4 exchanges of %d chunks sent %llu op headers, want %d (one per "
              "peer per exchange)", d,
              (unsigned long long)(st1.headers_sent - st0.headers_sent),
              4 * (W - 1));

    /* Serial reference for this rank's tokens. */
    for (size_t t = 0; t < S; t++)
        for (int h = 0; h < HIDDEN; h++) {
            double y = 0, gx = 0;
            float x = me->tokens[t * HIDDEN + h];
            float gy = me->grad_out[t * HIDDEN + h];
            for (int s = 0; s < k; s++) {
                int g = me->idx[t * k + s];
                if (g < 0)
                    continue;
                y += me->w[t * k + s] * ((g + 1.0) * x + g);
                gx += (g + 1.0) * me->w[t * k + s] * gy;
            }
            CHECK_RET(close_enough(tokens_out[t * HIDDEN + h], y),
                      "tokens_out[%zu][%d] = %.7g, reference %.7g", t, h,
                      tokens_out[t * HIDDEN + h], y);
            CHECK_RET(close_enough(grad_tokens[t * HIDDEN + h], gx),
                      "grad_tokens[%zu][%d] = %.7g, reference %.7g", t, h,
                      grad_tokens[t * HIDDEN + h], gx);
        }
    for (size_t t = 0; t < S; t++)
        for (int s = 0; s < k; s++) {
            int g = me->idx[t * k + s];
            double ref = 0;
            for (int h = 0; g >= 0 && h < HIDDEN; h++)
                ref += (double)me->grad_out[t * HIDDEN + h] *
                       ((g + 1.0) * me->tokens[t * HIDDEN + h] + g);
            CHECK_RET(close_enough(grad_w[t * k + s], ref),
                      "grad_topk_w[%zu][%d]"
                      " = %.7g, reference %.7g",
                      t, s, grad_w[t * k + s], ref);
        }

    swy_moe_route_destroy(route);
    free(expert_in);
    free(expert_out);
    free(grad_eout);
    free(grad_ein);
    free(tokens_out);
    free(grad_tokens);
    free(grad_w);
    for (int r = 0; r < W; r++)
        free_input(&all[r]);
    return 0;
}

static int rank_correct(swy_comm_t comm, int rank, int W, void *arg)
{
    const params_t *P = arg;
    swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
    cfg.experts_per_rank = E_LOC;
    cfg.hidden = HIDDEN;
    cfg.top_k = P->k;
    cfg.capacity_factor = 1.2;
    cfg.pipeline_degree = P->d;
    cfg.packing_factor = P->p;
    swy_moe_plan_t plan;
    swy_status_t st = swy_moe_plan_create(comm, &cfg, &plan);
    CHECK_RET(st == SWY_OK, "plan: %s: %s", swy_status_string(st),
              swy_last_error(NULL));
    for (int iter = 0; iter < 4; iter++)
        if (run_layer(comm, plan, rank, W, P, iter, iter % 2))
            return 1;
    swy_moe_plan_destroy(plan);
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

static int rank_errors(swy_comm_t comm, int rank, int W, void *arg)
{
    (void)arg;
    swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
    cfg.experts_per_rank = E_LOC;
    cfg.hidden = HIDDEN;
    cfg.top_k = 2;
    cfg.pipeline_degree = 2;

    /* Hidden size differs on the last rank: every rank sees MISMATCH. */
    swy_moe_config_t c = cfg;
    if (rank == W - 1)
        c.hidden = HIDDEN + 3;
    if (expect_plan(comm, &c, SWY_ERR_MISMATCH, "hidden"))
        return 1;
    /* Pipeline degree differs on rank 0 only. */
    c = cfg;
    if (rank == 0)
        c.pipeline_degree = 3;
    if (expect_plan(comm, &c, SWY_ERR_MISMATCH, "pipeline_degree"))
        return 1;
    /* An invalid field on one rank: every rank gets INVALID_ARG. */
    c = cfg;
    if (rank == W - 1)
        c.top_k = 0;
    if (expect_plan(comm, &c, SWY_ERR_INVALID_ARG, "top_k"))
        return 1;
    /* A wrong struct_size (another header version) on one rank. */
    c = cfg;
    if (rank == 0)
        c.struct_size = sizeof(c) - 8;
    if (expect_plan(comm, &c, SWY_ERR_INVALID_ARG, "struct_size"))
        return 1;
    /* Unsupported dtype everywhere. */
    c = cfg;
    c.dtype = SWY_INT32;
    if (expect_plan(comm, &c, SWY_ERR_UNSUPPORTED, "dtype"))
        return 1;

    swy_moe_plan_t plan;
    CHECK_RET(swy_moe_plan_create(comm, &cfg, &plan) == SWY_OK, "plan: %s",
              swy_last_error(NULL));
    int E = W * E_LOC, k = 2;
    rank_input_t in;
    gen_input(rank, W, E, k, 7, &in);

    /* A top-k index out of range on the last rank only: all fail, none
     * hangs, and the message names the rank, token, slot and value. */
    int saved = 0;
    if (rank == W - 1) { /* the last rank has tokens */
        saved = in.idx[3 * k + 1];
        in.idx[3 * k + 1] = E + 5;
    }
    swy_moe_route_t route = NULL;
    swy_status_t st = swy_moe_route(plan, in.idx, in.S, &route);
    CHECK_RET(st == SWY_ERR_INVALID_ARG && route == NULL, "route with a bad "
              "index on rank %d gave %s", W - 1, swy_status_string(st));
    char want[128];
    snprintf(want, sizeof(want), rank == W - 1 ? "topk_idx[3][1] = %d"
             : "rank %d passed invalid routing input (token 3, slot 1, "
               "value %d", rank == W - 1 ? E + 5 : W - 1, E + 5);
    CHECK_RET(strstr(swy_last_error(NULL), want) != NULL, "message '%s' lacks "
              "'%s'", swy_last_error(NULL), want);
    if (rank == W - 1)
        in.idx[3 * k + 1] = saved;
    /* -2 is not "dropped". */
    if (rank == 0) {
        saved = in.idx[0];
        in.idx[0] = -2;
    }
    st = swy_moe_route(plan, in.idx, in.S, &route);
    CHECK_RET(st == SWY_ERR_INVALID_ARG, "route with -2 gave %s",
              swy_status_string(st));
    if (rank == 0)
        in.idx[0] = saved;
    /* A negative S on rank 0. */
    st = swy_moe_route(plan, in.idx, rank == 0 ? -1 : in.S, &route);
    CHECK_RET(st == SWY_ERR_INVALID_ARG, "route with S = -1 gave %s",
              swy_status_string(st));

    /* The comm is still usable: a good route and misuse of its calls. */
    st = swy_moe_route(plan, in.idx, in.S, &route);
    CHECK_RET(st == SWY_OK, "route after errors: %s", swy_last_error(NULL));
    swy_moe_layout_t L = {.struct_size = 4};
    CHECK_RET(swy_moe_route_layout(route, &L) == SWY_ERR_INVALID_ARG,
              "layout with a bad struct_size");
    L.struct_size = sizeof(L);
    CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
    size_t R = (size_t)L.recv_rows, S = (size_t)in.S;
    float *ein = malloc((R * HIDDEN + 1) * sizeof(float));
    float *out = malloc((S * HIDDEN + 1) * sizeof(float));
    float *gw = malloc((S * k + 1) * sizeof(float));
    CHECK_RET(swy_moe_wait_chunk(route, 0) == SWY_ERR_INVALID_ARG,
              "wait_chunk with nothing in flight");
    CHECK_RET(swy_moe_combine_backward(route, in.grad_out, in.w, ein, gw, NULL,
                                       SWY_MOE_BLOCKING) == SWY_ERR_INVALID_ARG,
              "combine_backward before combine");
    CHECK_RET(swy_moe_combine_post_chunk(route, 1, ein, NULL) ==
              SWY_ERR_INVALID_ARG, "combine chunk 1 before chunk 0");
    CHECK_RET(swy_moe_combine_finish(route, in.w, out) == SWY_ERR_INVALID_ARG,
              "combine_finish with nothing posted");
    CHECK_RET(swy_moe_dispatch(route, in.tokens, ein, NULL, 7) ==
              SWY_ERR_INVALID_ARG, "dispatch with bad flags");
    CHECK_RET(swy_moe_dispatch(NULL, in.tokens, ein, NULL, 0) ==
              SWY_ERR_INVALID_ARG, "dispatch without a route");
    st = swy_moe_dispatch(route, in.tokens, ein, NULL, SWY_MOE_ASYNC);
    CHECK_RET(st == SWY_OK, "dispatch: %s", swy_last_error(NULL));
    CHECK_RET(swy_moe_combine(route, ein, in.w, out, NULL) ==
              SWY_ERR_INVALID_ARG, "combine while a dispatch is in flight");
    CHECK_RET(swy_moe_wait_chunk(route, 2) == SWY_ERR_INVALID_ARG,
              "wait_chunk out of range");
    CHECK_RET(swy_moe_wait_chunk(route, 1) == SWY_OK, "wait 1");
    CHECK_RET(swy_moe_wait_chunk(route, 1) == SWY_OK, "wait 1 again");
    CHECK_RET(swy_moe_wait_chunk(route, 0) == SWY_OK, "wait 0");
    CHECK_RET(swy_moe_combine(route, ein, in.w, out, NULL) == SWY_OK,
              "combine: %s", swy_last_error(NULL));
    swy_moe_route_destroy(route);
    swy_moe_route_destroy(NULL);
    swy_moe_plan_destroy(plan);
    swy_moe_plan_destroy(NULL);
    free(ein);
    free(out);
    free(gw);
    free_input(&in);
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

/* Rank W-1 posts an allreduce where the others dispatch: the dispatch
 * must fail with SWY_ERR_MISMATCH (surfaced through the chunk waits) on
 * the ranks that disagree, promptly, and none may hang. */
static int rank_diverge(swy_comm_t comm, int rank, int W, void *arg)
{
    (void)arg;
    swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
    cfg.experts_per_rank = E_LOC;
    cfg.hidden = HIDDEN;
    cfg.top_k = 2;
    cfg.pipeline_degree = 2;
    swy_moe_plan_t plan;
    CHECK_RET(swy_moe_plan_create(comm, &cfg, &plan) == SWY_OK, "plan");
    rank_input_t in;
    gen_input(rank, W, W * E_LOC, 2, 3, &in);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* The route's count exchange may itself fail: the ranks that are done
     * with it can post the diverging ops and fail the comm before a slow
     * rank's exchange completes. */
    swy_moe_route_t route = NULL;
    float *ein = NULL;
    swy_status_t st = swy_moe_route(plan, in.idx, in.S, &route);
    if (st == SWY_OK) {
        swy_moe_layout_t L = {.struct_size = sizeof(L)};
        CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
        ein = malloc(((size_t)L.recv_rows * HIDDEN + 1) * sizeof(float));
        if (rank == W - 1) {
            float x[16] = {0};
            st = swy_allreduce(x, x, 16, SWY_FLOAT32, SWY_SUM, comm, NULL,
                               NULL);
        } else {
            st = swy_moe_dispatch(route, in.tokens, ein, NULL,
                                  SWY_MOE_BLOCKING);
        }
    } else {
        CHECK_RET(route == NULL, "a failed route handed out a route");
    }
    /* A rank not involved in the disagreement may finish its part; the
     * comm is poisoned all the same, so its next call fails. */
    if (st == SWY_OK)
        st = swy_barrier(comm);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank,
            swy_status_string(st), took, swy_last_error(NULL));
    CHECK_RET(st == SWY_ERR_MISMATCH, "got %s, expected a mismatch",
              swy_status_string(st));
    CHECK_RET(took < 20, "took %.1f s", took);
    swy_moe_route_destroy(route); /* nothing left in flight: no wait */
    swy_moe_plan_destroy(plan);
    free(ein);
    free_input(&in);
    CHECK_RET(swy_comm_destroy(comm) == SWY_OK, "destroy of a failed comm");
    return 200;
}

/* ---- 16-bit rows --------------------------------------------------------
 * Decoders written here, independently of the library's conversions. The
 * inputs are multiples of 1/8 in [-1, 1] and the toy expert's outputs
 * multiples of 1/8 below 32: exact in fp16 and bf16, so only combine's
 * rounding of its fp32 sum (and the weight gradient's inputs) differ from
 * the double reference. */
static float dec16(uint16_t b, swy_dtype_t dt)
{
    if (dt == SWY_BFLOAT16) {
        uint32_t u = (uint32_t)b << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int sign = b >> 15, e = (b >> 10) & 31, m = b & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (float)(sign ? -v : v);
}

/* Exact values only (multiples of 1/8 below 64 in magnitude). */
static uint16_t enc16(float f, swy_dtype_t dt)
{
    if (dt == SWY_BFLOAT16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    if (f == 0.0f)
        return 0;
    int e;
    double m = frexp(fabs(f), &e); /* f = m 2^e, m in [0.5, 1) */
    uint16_t b = (uint16_t)(((e + 14) << 10) | ((int)(m * 2048) - 1024));
    return f < 0 ? (uint16_t)(b | 0x8000) : b;
}

static int rank_dtype16(swy_comm_t comm, int rank, int W, void *arg)
{
    static const swy_dtype_t types[2] = {SWY_FLOAT16, SWY_BFLOAT16};
    const int k = 2;
    for (int ti = 0; ti < 2; ti++) {
        swy_dtype_t dt = types[ti];
        double tol = dt == SWY_BFLOAT16 ? 1e-2 : 2e-3;
        swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
        cfg.experts_per_rank = E_LOC;
        cfg.hidden = HIDDEN;
        cfg.top_k = k;
        cfg.dtype = dt;
        swy_moe_plan_t plan;
        swy_status_t st = swy_moe_plan_create(comm, &cfg, &plan);
        CHECK_RET(st == SWY_OK, "plan (dtype %d): %s", dt,
                  swy_last_error(NULL));
        int E = W * E_LOC;
        rank_input_t in;
        gen_input(rank, W, E, k, 7 + ti, &in);
        size_t S = (size_t)in.S;
        for (size_t i = 0; i < S * HIDDEN; i++) /* exact in 16 bits */
            in.tokens[i] = roundf(in.tokens[i] * 8.0f) / 8.0f;
        uint16_t *tok16 = malloc((S * HIDDEN + 1) * 2);
        uint16_t *gout16 = malloc((S * HIDDEN + 1) * 2);
        for (size_t i = 0; i < S * HIDDEN; i++) {
            in.grad_out[i] = roundf(in.grad_out[i] * 8.0f) / 8.0f;
            tok16[i] = enc16(in.tokens[i], dt);
            gout16[i] = enc16(in.grad_out[i], dt);
        }
        swy_moe_route_t route;
        CHECK_RET(swy_moe_route(plan, in.idx, in.S, &route) == SWY_OK, "route");
        swy_moe_layout_t L = {.struct_size = sizeof(L)};
        CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
        size_t R = (size_t)L.recv_rows;
        uint16_t *ein = malloc((R * HIDDEN + 1) * 2);
        uint16_t *eout = malloc((R * HIDDEN + 1) * 2);
        uint16_t *tout = malloc((S * HIDDEN + 1) * 2);
        uint16_t *gtok = malloc((S * HIDDEN + 1) * 2);
        float *gw = malloc((S * k + 1) * sizeof(float));
        CHECK_RET(swy_moe_dispatch(route, tok16, ein, NULL, SWY_MOE_BLOCKING) ==
                      SWY_OK, "dispatch: %s", swy_last_error(NULL));
        for (int e = 0; e < L.num_local_experts; e++) {
            int g = L.first_expert + e;
            for (int64_t i = L.expert_offset[e] * HIDDEN;
                 i < L.expert_offset[e + 1] * HIDDEN; i++)
                eout[i] = enc16((float)(g + 1) * dec16(ein[i], dt) +
                                (float)g, dt);
        }
        CHECK_RET(swy_moe_combine(route, eout, in.w, tout, NULL) == SWY_OK,
                  "combine: %s", swy_last_error(NULL));
        /* The expert gradient is the combine-backward rows as they came. */
        CHECK_RET(swy_moe_combine_backward(route, gout16, in.w, eout, gw, NULL,
                                           SWY_MOE_BLOCKING) == SWY_OK,
                  "combine backward: %s", swy_last_error(NULL));
        CHECK_RET(swy_moe_dispatch_backward(route, eout, gtok, NULL) == SWY_OK,
                  "dispatch backward: %s", swy_last_error(NULL));
        for (size_t t = 0; t < S; t++) {
            for (int h = 0; h < HIDDEN; h++) {
                double y = 0, gx = 0;
                float x = in.tokens[t * HIDDEN + h];
                float gy = in.grad_out[t * HIDDEN + h];
                for (int s = 0; s < k; s++) {
                    int g = in.idx[t * k + s];
                    if (g < 0)
                        continue;
                    y += in.w[t * k + s] * ((g + 1.0) * x + g);
                    /* each slot's w * gy is rounded to 16 bits on its
                     * way back: hence the doubled tolerance below */
                    gx += in.w[t * k + s] * gy;
                }
                double got_y = dec16(tout[t * HIDDEN + h], dt);
                double got_g = dec16(gtok[t * HIDDEN + h], dt);
                CHECK_RET(fabs(got_y - y) <= tol * fmax(1.0, fabs(y)),
                          "dtype %d tokens_out[%zu][%d] = %.6g, reference %.6g",
                          dt, t, h, got_y, y);
                CHECK_RET(
                    fabs(got_g - gx) <= 2 * tol * fmax(1.0, fabs(gx)),
                    "dtype %d grad_tokens[%zu][%d] = %.6g, reference %.6g", dt,
                    t, h, got_g, gx);
            }
            for (int s = 0; s < k; s++) {
                int g = in.idx[t * k + s];
                double ref = 0;
                for (int h = 0; g >= 0 && h < HIDDEN; h++)
                    ref += (double)in.grad_out[t * HIDDEN + h] *
                           ((g + 1.0) * in.tokens[t * HIDDEN + h] + g);
                CHECK_RET(
                    fabs(gw[t * k + s] - ref) <= tol * fmax(1.0, fabs(ref)),
                    "dtype %d grad_topk_w[%zu][%d] = %.6g, reference %.6g", dt,
                    t, s, gw[t * k + s], ref);
            }
        }
        swy_moe_route_destroy(route);
        swy_moe_plan_destroy(plan);
        free(tok16);
        free(gout16);
        free(ein);
        free(eout);
        free(tout);
        free(gtok);
        free(gw);
        free_input(&in);
    }
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

/* fp64 rows and gate weights, values that no float holds: the sums of
 * combine and dispatch backward and the weight gradient must agree with a
 * double reference to double precision (fp32 sums or weights would be
 * off by about 1e-8). Pipelined and packed too. */
static int rank_dtype64(swy_comm_t comm, int rank, int W, void *arg)
{
    static const params_t shapes[2] = {{2, 1, 1}, {2, 3, 2}};
    (void)arg;
    for (int si = 0; si < 2; si++) {
        const int k = shapes[si].k;
        swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
        cfg.experts_per_rank = E_LOC;
        cfg.hidden = HIDDEN;
        cfg.top_k = k;
        cfg.dtype = SWY_FLOAT64;
        cfg.pipeline_degree = shapes[si].d;
        cfg.packing_factor = shapes[si].p;
        swy_moe_plan_t plan;
        swy_status_t st = swy_moe_plan_create(comm, &cfg, &plan);
        CHECK_RET(st == SWY_OK, "plan (fp64): %s", swy_last_error(NULL));
        int E = W * E_LOC * shapes[si].p;
        rank_input_t in;
        gen_input(rank, W, E, k, 11 + si, &in);
        size_t S = (size_t)in.S;
        double *tok = malloc((S * HIDDEN + 1) * sizeof(double));
        double *gout = malloc((S * HIDDEN + 1) * sizeof(double));
        double *w = malloc((S * k + 1) * sizeof(double));
        for (size_t i = 0; i < S * HIDDEN; i++) {
            tok[i] = in.tokens[i] / 3.0;
            gout[i] = in.grad_out[i] / 7.0;
        }
        for (size_t i = 0; i < S * k; i++)
            w[i] = in.w[i] / 3.0 + 0.1;
        swy_moe_route_t route;
        CHECK_RET(swy_moe_route(plan, in.idx, in.S, &route) == SWY_OK, "route");
        swy_moe_layout_t L = {.struct_size = sizeof(L)};
        CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
        size_t R = (size_t)L.recv_rows;
        double *ein = malloc((R * HIDDEN + 1) * sizeof(double));
        double *eout = malloc((R * HIDDEN + 1) * sizeof(double));
        double *tout = malloc((S * HIDDEN + 1) * sizeof(double));
        double *gtok = malloc((S * HIDDEN + 1) * sizeof(double));
        double *gw = malloc((S * k + 1) * sizeof(double));
        CHECK_RET(swy_moe_dispatch(route, tok, ein, NULL, SWY_MOE_BLOCKING) ==
                  SWY_OK, "dispatch: %s", swy_last_error(NULL));
        for (int e = 0; e < L.num_local_experts; e++) {
            int g = L.first_expert + e;
            for (int64_t i = L.expert_offset[e] * HIDDEN;
                 i < L.expert_offset[e + 1] * HIDDEN; i++)
                eout[i] = (g + 1.0) * ein[i] + g;
        }
        CHECK_RET(swy_moe_combine(route, eout, w, tout, NULL) == SWY_OK,
                  "combine: %s", swy_last_error(NULL));
        /* The expert gradient is the combine-backward rows as they came. */
        CHECK_RET(swy_moe_combine_backward(route, gout, w, eout, gw, NULL,
                                       SWY_MOE_BLOCKING) == SWY_OK,
                  "combine backward: %s", swy_last_error(NULL));
        CHECK_RET(swy_moe_dispatch_backward(route, eout, gtok, NULL) == SWY_OK,
                  "dispatch backward: %s", swy_last_error(NULL));
        const double tol = 1e-14;
        for (size_t t = 0; t < S; t++) {
            for (int h = 0; h < HIDDEN; h++) {
                double y = 0, gx = 0;
                double x = tok[t * HIDDEN + h], gy = gout[t * HIDDEN + h];
                for (int s = 0; s < k; s++) {
                    int g = in.idx[t * k + s];
                    if (g < 0)
                        continue;
                    y += w[t * k + s] * ((g + 1.0) * x + g);
                    gx += w[t * k + s] * gy;
                }
                CHECK_RET(fabs(tout[t * HIDDEN + h] - y) <=
                          tol * fmax(1.0, fabs(y)),
                          "fp64 tokens_out[%zu][%d] = %.17g, reference %.17g", t,
                          h, tout[t * HIDDEN + h], y);
                CHECK_RET(fabs(gtok[t * HIDDEN + h] - gx) <=
                          tol * fmax(1.0, fabs(gx)),
                          "fp64 grad_tokens[%zu][%d] = %.17g, reference %.17g",
                          t, h, gtok[t * HIDDEN + h], gx);
            }
            for (int s = 0; s < k; s++) {
                int g = in.idx[t * k + s];
                double ref = 0;
                for (int h = 0; g >= 0 && h < HIDDEN; h++)
                    ref += gout[t * HIDDEN + h] *
                           ((g + 1.0) * tok[t * HIDDEN + h] + g);
                CHECK_RET(fabs(gw[t * k + s] - ref) <= tol * fmax(1.0, fabs(ref)),
                          "fp64 grad_topk_w[%zu][%d] = %.17g, reference %.17g", t,
                          s, gw[t * k + s], ref);
            }
        }
        swy_moe_route_destroy(route);
        swy_moe_plan_destroy(plan);
        free(tok);
        free(gout);
        free(w);
        free(ein);
        free(eout);
        free(tout);
        free(gtok);
        free(gw);
        free_input(&in);
    }
    CHECK_OK(swy_barrier(comm), comm);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2 && strcmp(argv[2], "errors") == 0) {
        int rc = swy_test_spawn(nranks, rank_errors, NULL, 60, NULL);
        printf("%s: moe errors, %d ranks\n", rc ? "FAIL" : "PASS", nranks);
        return rc;
    }
    if (argc > 2 && strcmp(argv[2], "dtype16") == 0) {
        int rc = swy_test_spawn(nranks, rank_dtype16, NULL, 60, NULL);
        printf("%s: moe fp16 and bf16 rows, %d ranks\n", rc ? "FAIL" : "PASS",
               nranks);
        return rc;
    }
    if (argc > 2 && strcmp(argv[2], "dtype64") == 0) {
        int rc = swy_test_spawn(nranks, rank_dtype64, NULL, 60, NULL);
        printf("%s: moe fp64 rows, %d ranks\n", rc ? "FAIL" : "PASS",
               nranks);
        return rc;
    }
    if (argc > 2 && strcmp(argv[2], "diverge") == 0) {
        int rc = swy_test_spawn(nranks, rank_diverge, NULL, 60, NULL);
        printf("%s: moe diverging ranks, %d ranks\n", rc ? "FAIL" : "PASS",
               nranks);
        return rc;
    }
    if (argc > 5)
        token_scale = atoi(argv[5]);
    params_t P = {argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 1,
                  argc > 4 ? atoi(argv[4]) : 1};
    int rc = swy_test_spawn(nranks, rank_correct, &P, 60, NULL);
    printf("%s: moe %d ranks, top-%d, pipeline %d, packing %d, %dx tokens\n",
           rc ? "FAIL" : "PASS", nranks, P.k, P.d, P.p, token_scale);
    return rc;
}
