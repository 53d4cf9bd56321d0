/* MoE plans with device rows (moe.h, "Device rows") on the GPU test
 * double (tests/devdouble: its "device memory" is host memory, its
 * streams are threads; no GPU runs here, and the double says so).
 *
 * Every rank runs the same layers twice on one communicator: through a
 * plan with host rows (checked against a serial reference by test_moe)
 * and through a plan with device rows whose packing, reordering and sums
 * are the double's swy_devmoe_plugin_v1, on a stream of the double's. The
 * "experts" of the device plan run as work queued on that stream, as a
 * framework's kernels would, with no host wait between the library's
 * calls and them; results are read by work queued on the stream after the
 * call. Every output must equal the host plan's bit for bit (the double
 * sums as lib/moe/rows.c does), and tokens_out also a serial reference.
 *
 * Usage: test_moe_device NRANKS TOPK PIPELINE PACKING
 *        test_moe_device NRANKS errors
 *        test_moe_device NRANKS unsupported   (a double without the row
 *                                              kernels: device plans are
 *                                              refused on every rank) */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <string.h>

#include "../harness.h"
#include "moe_check.h"
#include "switchyard/moe.h"

#define E_LOC 2
#define HIDDEN 6
#define SEED 4242

typedef struct {
    int k, d, p;
} params_t;

/* ---- rows of fp32 or bf16 ---------------------------------------- */

static size_t esize(swy_dtype_t dt)
{
    return dt == SWY_BFLOAT16 ? 2 : 4;
}

static float get(const void *rows, size_t i, swy_dtype_t dt)
{
    if (dt == SWY_FLOAT32)
        return ((const float *)rows)[i];
    uint32_t u = (uint32_t)((const uint16_t *)rows)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put(void *rows, size_t i, float v, swy_dtype_t dt)
{
    if (dt == SWY_FLOAT32) {
        ((float *)rows)[i] = v;
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even (no NaNs) */
    ((uint16_t *)rows)[i] = (uint16_t)(u >> 16);
}

/* ---- the stream ---------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
} sync_t;

static void sync_run(void *arg)
{
    sync_t *s = arg;
    pthread_mutex_lock(&s->lock);
    s->done = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Wait for everything queued on stream so far. */
static void stream_sync(void *stream)
{
    sync_t s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    swy_test_dev_launch(stream, sync_run, &s);
    pthread_mutex_lock(&s.lock);
    while (!s.done)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
}

/* Copy device bytes to the host by work queued on the stream (it sees
 * only what was queued before it), then wait. */
static void read_back(void *stream, void *dst, const void *src, size_t bytes)
{
    swy_test_snapshot_t snap = {src, dst, bytes};
    swy_test_dev_launch(stream, swy_test_snapshot, &snap);
    stream_sync(stream);
}

/* The toy experts: global expert g maps x to (g+1)*x + g, its backward
 * grad to (g+1)*grad. One call does rows [begin, end) of one expert. */
typedef struct {
    void *out;
    const void *in;
    int64_t begin, end;
    int g, backward;
    swy_dtype_t dt;
} expert_job_t;

static void expert_run(void *arg)
{
    expert_job_t *j = arg;
    for (size_t i = (size_t)j->begin * HIDDEN; i < (size_t)j->end * HIDDEN;
         i++) {
        float x = get(j->in, i, j->dt);
        float y = j->backward ? (float)(j->g + 1) * x
                              : (float)(j->g + 1) * x + (float)j->g;
        put(j->out, i, y, j->dt);
    }
}

static void expert_host(void *out, const void *in, int64_t begin,
                        int64_t end, int g, int backward, swy_dtype_t dt)
{
    expert_job_t j = {out, in, begin, end, g, backward, dt};
    expert_run(&j);
}

/* Queued on the stream; the job is the caller's until the stream ran
 * it (the caller syncs before reusing the array of jobs). */
static void expert_queue(void *stream, expert_job_t *j)
{
    swy_test_dev_launch(stream, expert_run, j);
}

/* ---- one layer ----------------------------------------------------- */

typedef struct {
    int S;
    void *tokens, *grad_out; /* [S][H] rows */
    int *idx;                /* [S][k] */
    float *w;                /* [S][k] */
} input_t;

static int tokens_of(int r, int W)
{
    return r == 1 && W > 2 ? 0 : 20 + 7 * r; /* one rank has none */
}

static void gen_input(int rank, int W, int E, int k, int iter,
                      swy_dtype_t dt, input_t *in)
{
    uint64_t st = SEED ^ ((uint64_t)rank << 32) ^ ((uint64_t)iter << 40);
    in->S = tokens_of(rank, W);
    size_t S = (size_t)in->S, n = S * HIDDEN;
    in->tokens = calloc(n + 1, esize(dt));
    in->grad_out = calloc(n + 1, esize(dt));
    in->idx = calloc(S * k + 1, sizeof(int));
    in->w = calloc(S * k + 1, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        put(in->tokens, i, (float)((int)(swy_test_rand(&st) % 33) - 16) / 8,
            dt);
        put(in->grad_out, i,
            (float)((int)(swy_test_rand(&st) % 17) - 8) / 16, dt);
    }
    for (size_t t = 0; t < S; t++)
        for (int s = 0; s < k; s++) {
            int g;
            int again;
            do { /* distinct experts per token */
                g = (int)(swy_test_rand(&st) % (uint64_t)E);
                again = 0;
                for (int q = 0; q < s; q++)
                    again |= in->idx[t * k + q] == g;
            } while (again);
            in->idx[t * k + s] = swy_test_rand(&st) % 6 == 0 ? -1 : g;
            in->w[t * k + s] = (float)(1 + swy_test_rand(&st) % 7) / 8;
        }
}

static void free_input(input_t *in)
{
    free(in->tokens);
    free(in->grad_out);
    free(in->idx);
    free(in->w);
}

/* What a layer produces, on the host. */
typedef struct {
    void *expert_in, *tokens_out, *grad_eout, *grad_tokens;
    float *grad_w;
    size_t R;
    int64_t send_rows;
    int64_t *slot_row; /* host route's, copied */
} outputs_t;

static void free_outputs(outputs_t *o)
{
    free(o->expert_in);
    free(o->tokens_out);
    free(o->grad_eout);
    free(o->grad_tokens);
    free(o->grad_w);
    free(o->slot_row);
}

/* The layer through the host plan, blocking calls. */
static int layer_host(swy_moe_plan_t plan, const input_t *in, int k,
                      swy_dtype_t dt, outputs_t *o)
{
    swy_moe_route_t route;
    CHECK_RET(swy_moe_route(plan, in->idx, in->S, &route) == SWY_OK,
              "host route: %s", swy_last_error(NULL));
    swy_moe_layout_t L = {.struct_size = sizeof(L)};
    CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
    size_t R = (size_t)L.recv_rows, S = (size_t)in->S, es = esize(dt);
    o->R = R;
    o->expert_in = calloc(R * HIDDEN + 1, es);
    o->tokens_out = calloc(S * HIDDEN + 1, es);
    o->grad_eout = calloc(R * HIDDEN + 1, es);
    o->grad_tokens = calloc(S * HIDDEN + 1, es);
    o->grad_w = calloc(S * k + 1, sizeof(float));
    void *eout = calloc(R * HIDDEN + 1, es), *gein = calloc(R * HIDDEN + 1, es);
    CHECK_RET(swy_moe_dispatch(route, in->tokens, o->expert_in, NULL,
                               SWY_MOE_BLOCKING) == SWY_OK,
              "host dispatch: %s", swy_last_error(NULL));
    for (int e = 0; e < L.num_local_experts; e++)
        expert_host(eout, o->expert_in, L.expert_offset[e],
                    L.expert_offset[e + 1], L.first_expert + e, 0, dt);
    CHECK_RET(swy_moe_combine(route, eout, in->w, o->tokens_out, NULL) ==
                  SWY_OK, "host combine: %s", swy_last_error(NULL));
    CHECK_RET(swy_moe_combine_backward(route, in->grad_out, in->w,
                                       o->grad_eout, o->grad_w, NULL,
                                       SWY_MOE_BLOCKING) == SWY_OK,
              "host combine backward: %s", swy_last_error(NULL));
    for (int e = 0; e < L.num_local_experts; e++)
        expert_host(gein, o->grad_eout, L.expert_offset[e],
                    L.expert_offset[e + 1], L.first_expert + e, 1, dt);
    CHECK_RET(swy_moe_dispatch_backward(route, gein, o->grad_tokens, NULL) ==
                  SWY_OK, "host dispatch backward: %s", swy_last_error(NULL));
    /* The layout's arrays die with the route: keep a copy. */
    o->send_rows = L.send_rows;
    o->slot_row = calloc(S * k + 1, sizeof(int64_t));
    memcpy(o->slot_row, L.slot_row, S * k * sizeof(int64_t));
    swy_moe_route_destroy(route);
    free(eout);
    free(gein);
    return 0;
}

/* The layer through the device plan on stream; pipelined uses the chunk
 * calls, the experts of chunk j queued right after its wait_chunk. */
static int layer_device(swy_moe_plan_t plan, void *stream, const input_t *in,
                        int k, swy_dtype_t dt, int pipelined, int idx_on_dev,
                        const outputs_t *ref, outputs_t *o)
{
    size_t S = (size_t)in->S, es = esize(dt);
    void *d_tok = swy_test_dev_alloc((S * HIDDEN + 1) * es);
    void *d_gout = swy_test_dev_alloc((S * HIDDEN + 1) * es);
    int *d_idx = swy_test_dev_alloc((S * k + 1) * sizeof(int));
    float *d_w = swy_test_dev_alloc((S * k + 1) * sizeof(float));
    /* Nothing is queued on the stream yet: plain copies are in order. */
    memcpy(d_tok, in->tokens, S * HIDDEN * es);
    memcpy(d_gout, in->grad_out, S * HIDDEN * es);
    memcpy(d_idx, in->idx, S * k * sizeof(int));
    memcpy(d_w, in->w, S * k * sizeof(float));

    swy_moe_route_t route;
    CHECK_RET(swy_moe_route(plan, idx_on_dev ? d_idx : in->idx, in->S,
                            &route) == SWY_OK,
              "device route: %s", swy_last_error(NULL));
    swy_moe_layout_t L = {.struct_size = sizeof(L)};
    CHECK_RET(swy_moe_route_layout(route, &L) == SWY_OK, "layout");
    CHECK_RET((size_t)L.recv_rows == ref->R &&
                  L.send_rows == ref->send_rows &&
                  memcmp(L.slot_row, ref->slot_row,
                         S * k * sizeof(int64_t)) == 0,
              "device route's layout differs from the host route's");
    size_t R = (size_t)L.recv_rows;
    int nl = L.num_local_experts, d = L.pipeline_degree;
    void *d_ein = swy_test_dev_alloc((R * HIDDEN + 1) * es);
    void *d_eout = swy_test_dev_alloc((R * HIDDEN + 1) * es);
    void *d_geout = swy_test_dev_alloc((R * HIDDEN + 1) * es);
    void *d_gein = swy_test_dev_alloc((R * HIDDEN + 1) * es);
    void *d_tout = swy_test_dev_alloc((S * HIDDEN + 1) * es);
    void *d_gtok = swy_test_dev_alloc((S * HIDDEN + 1) * es);
    float *d_gw = swy_test_dev_alloc((S * k + 1) * sizeof(float));
    expert_job_t *jobs = calloc((size_t)nl * d + 1, sizeof(*jobs));
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = "dev";
    attr.stream = stream; /* the plan's: allowed */

    if (!pipelined) {
        CHECK_RET(swy_moe_dispatch(route, d_tok, d_ein, &attr,
                                   SWY_MOE_BLOCKING) == SWY_OK,
                  "device dispatch: %s", swy_last_error(NULL));
        for (int e = 0; e < nl; e++) {
            jobs[e] = (expert_job_t){d_eout, d_ein, L.expert_offset[e],
                                     L.expert_offset[e + 1],
                                     L.first_expert + e, 0, dt};
            expert_queue(stream, &jobs[e]);
        }
        CHECK_RET(swy_moe_combine(route, d_eout, d_w, d_tout, NULL) ==
                      SWY_OK, "device combine: %s", swy_last_error(NULL));
    } else {
        CHECK_RET(swy_moe_dispatch(route, d_tok, d_ein, NULL,
                                   SWY_MOE_ASYNC) == SWY_OK,
                  "device dispatch async: %s", swy_last_error(NULL));
        for (int j = 0; j < d; j++) {
            CHECK_RET(swy_moe_wait_chunk(route, j) == SWY_OK,
                      "device wait chunk %d: %s", j, swy_last_error(NULL));
            for (int e = 0; e < nl; e++) {
                expert_job_t *job = &jobs[e * d + j];
                *job = (expert_job_t){d_eout, d_ein,
                                      L.chunk_offset[e * (d + 1) + j],
                                      L.chunk_offset[e * (d + 1) + j + 1],
                                      L.first_expert + e, 0, dt};
                expert_queue(stream, job);
            }
            CHECK_RET(swy_moe_combine_post_chunk(route, j, d_eout, NULL) ==
                          SWY_OK, "device combine chunk %d: %s", j,
                      swy_last_error(NULL));
        }
        CHECK_RET(swy_moe_combine_finish(route, d_w, d_tout) == SWY_OK,
                  "device combine finish: %s", swy_last_error(NULL));
    }
    /* Read by work queued after the call: it must see the sums. */
    o->R = R;
    o->tokens_out = calloc(S * HIDDEN + 1, es);
    o->expert_in = calloc(R * HIDDEN + 1, es);
    read_back(stream, o->tokens_out, d_tout, S * HIDDEN * es);
    read_back(stream, o->expert_in, d_ein, R * HIDDEN * es);

    CHECK_RET(swy_moe_combine_backward(route, d_gout, d_w, d_geout, d_gw,
                                       NULL, pipelined ? SWY_MOE_ASYNC
                                                       : SWY_MOE_BLOCKING) ==
                  SWY_OK, "device combine backward: %s",
              swy_last_error(NULL));
    for (int j = 0; j < d; j++) {
        if (pipelined)
            CHECK_RET(swy_moe_wait_chunk(route, j) == SWY_OK,
                      "device wait %d: %s", j, swy_last_error(NULL));
        for (int e = 0; e < nl; e++) {
            expert_job_t *job = &jobs[e * d + j];
            *job = (expert_job_t){d_gein, d_geout,
                                  L.chunk_offset[e * (d + 1) + j],
                                  L.chunk_offset[e * (d + 1) + j + 1],
                                  L.first_expert + e, 1, dt};
            expert_queue(stream, job);
        }
        if (pipelined)
            CHECK_RET(swy_moe_dispatch_backward_post_chunk(route, j, d_gein,
                                                           NULL) == SWY_OK,
                      "device dispatch backward chunk %d: %s", j,
                      swy_last_error(NULL));
    }
    if (pipelined)
        CHECK_RET(swy_moe_dispatch_backward_finish(route, d_gtok) == SWY_OK,
                  "device dispatch backward finish: %s",
                  swy_last_error(NULL));
    else
        CHECK_RET(swy_moe_dispatch_backward(route, d_gein, d_gtok, NULL) ==
                      SWY_OK, "device dispatch backward: %s",
                  swy_last_error(NULL));
    o->grad_eout = calloc(R * HIDDEN + 1, es);
    o->grad_tokens = calloc(S * HIDDEN + 1, es);
    o->grad_w = calloc(S * k + 1, sizeof(float));
    read_back(stream, o->grad_eout, d_geout, R * HIDDEN * es);
    read_back(stream, o->grad_tokens, d_gtok, S * HIDDEN * es);
    read_back(stream, o->grad_w, d_gw, S * k * sizeof(float));

    swy_moe_route_destroy(route);
    stream_sync(stream);
    free(jobs);
    void *bufs[] = {d_tok, d_gout, d_idx, d_w, d_ein, d_eout, d_geout,
                    d_gein, d_tout, d_gtok, d_gw};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        swy_test_dev_free(bufs[i]);
    return 0;
}

static int same(const char *what, const void *got, const void *want,
                size_t bytes, int iter)
{
    if (memcmp(got, want, bytes) == 0)
        return 0;
    size_t i = 0;
    while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i])
        i++;
    fprintf(stderr, "iteration %d: %s of the device plan differs from the "
            "host plan's at byte %zu of %zu\n", iter, what, i, bytes);
    return 1;
}

static swy_moe_config_t config(const params_t *P, swy_dtype_t dt, int dev,
                               void *stream)
{
    swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
    cfg.experts_per_rank = E_LOC;
    cfg.hidden = HIDDEN;
    cfg.dtype = dt;
    cfg.top_k = P->k;
    cfg.pipeline_degree = P->d;
    cfg.packing_factor = P->p;
    cfg.rows_mem = dev ? SWY_MOE_ROWS_DEVICE : SWY_MOE_ROWS_HOST;
    cfg.stream = dev ? stream : NULL;
    return cfg;
}

static int rank_correct(swy_comm_t comm, int rank, int W, void *arg)
{
    const params_t *P = arg;
    static const swy_dtype_t types[2] = {SWY_FLOAT32, SWY_BFLOAT16};
    CHECK_RET(swy_test_devdouble(), "the GPU test double is not loaded "
              "(SWYTEST_DEVDOUBLE)");
    void *stream = swy_test_dev_stream_create();
    int E = W * E_LOC * P->p, k = P->k;
    swy_test_dev_traffic_t mark = swy_test_dev_traffic_mark();
    for (int ti = 0; ti < 2; ti++) {
        swy_dtype_t dt = types[ti];
        swy_moe_config_t hc = config(P, dt, 0, NULL);
        swy_moe_config_t dc = config(P, dt, 1, stream);
        swy_moe_plan_t hplan, dplan;
        CHECK_RET(swy_moe_plan_create(comm, &hc, &hplan) == SWY_OK,
                  "host plan: %s", swy_last_error(NULL));
        CHECK_RET(swy_moe_plan_create(comm, &dc, &dplan) == SWY_OK,
                  "device plan: %s", swy_last_error(NULL));
        for (int iter = 0; iter < 4; iter++) {
            input_t in;
            gen_input(rank, W, E, k, iter + 10 * ti, dt, &in);
            outputs_t h = {0}, g = {0};
            if (layer_host(hplan, &in, k, dt, &h) ||
                layer_device(dplan, stream, &in, k, dt, iter % 2,
                             iter >= 2, &h, &g))
                return 1;
            size_t S = (size_t)in.S, es = esize(dt);
            if (same("expert_in", g.expert_in, h.expert_in,
                     h.R * HIDDEN * es, iter) ||
                same("tokens_out", g.tokens_out, h.tokens_out,
                     S * HIDDEN * es, iter) ||
                same("grad_expert_out", g.grad_eout, h.grad_eout,
                     h.R * HIDDEN * es, iter) ||
                same("grad_tokens", g.grad_tokens, h.grad_tokens,
                     S * HIDDEN * es, iter) ||
                same("grad_topk_w", g.grad_w, h.grad_w,
                     S * k * sizeof(float), iter))
                return 1;
            /* And against the serial reference (fp32). */
            for (size_t t = 0; dt == SWY_FLOAT32 && t < S; t++)
                for (int c = 0; c < HIDDEN; c++) {
                    double y = 0;
                    float x = get(in.tokens, t * HIDDEN + c, dt);
                    for (int s = 0; s < k; s++) {
                        int e = in.idx[t * k + s];
                        if (e >= 0)
                            y += in.w[t * k + s] * ((e + 1.0) * x + e);
                    }
                    double got = get(g.tokens_out, t * HIDDEN + c, dt);
                    CHECK_RET(fabs(got - y) <= 1e-5 * fmax(1.0, fabs(y)),
                              "tokens_out[%zu][%d] = %.7g, reference %.7g",
                              t, c, got, y);
                }
            free_outputs(&h);
            free_outputs(&g);
            free_input(&in);
        }
        swy_moe_plan_destroy(dplan);
        swy_moe_plan_destroy(hplan);
    }
    swy_test_dev_stream_destroy(stream);
    /* The device rows moved in the device plugin's launches (grouped
     * sends and receives on its communicators), none through the
     * transport's pairs. */
    if (swy_test_dev_moved_by_plugin(mark, "MoE layers"))
        return 1;
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

static int rank_errors(swy_comm_t comm, int rank, int W, void *arg)
{
    (void)arg;
    CHECK_RET(swy_test_devdouble(), "the GPU test double is not loaded");
    void *stream = swy_test_dev_stream_create();
    params_t P = {2, 1, 1};
    /* Bad configs, on one rank or all: every rank fails. */
    swy_moe_config_t cfg = config(&P, SWY_FLOAT16, 1, stream);
    if (expect_plan(comm, &cfg, SWY_ERR_UNSUPPORTED, "SWY_BFLOAT16"))
        return 1;
    cfg = config(&P, SWY_FLOAT32, rank == W - 1, stream);
    if (expect_plan(comm, &cfg, SWY_ERR_MISMATCH, "rows_mem"))
        return 1;
    cfg = config(&P, SWY_FLOAT32, 0, NULL);
    cfg.stream = rank == 0 ? stream : NULL;
    if (expect_plan(comm, &cfg, SWY_ERR_INVALID_ARG, "stream"))
        return 1;
    cfg = config(&P, SWY_FLOAT32, 1, stream);
    cfg.rows_mem = rank == 0 ? 7 : SWY_MOE_ROWS_DEVICE;
    if (expect_plan(comm, &cfg, SWY_ERR_INVALID_ARG, "rows_mem"))
        return 1;

    /* A config that ends before rows_mem and stream is short of the
     * first release: refused on every rank (the struct_size rule). */
    cfg = config(&P, SWY_FLOAT32, 1, stream);
    cfg.struct_size = offsetof(swy_moe_config_t, rows_mem);
    if (expect_plan(comm, &cfg, SWY_ERR_INVALID_ARG, "first release"))
        return 1;

    /* A plan with host rows refuses a device topk_idx. */
    cfg = config(&P, SWY_FLOAT32, 0, NULL);
    swy_moe_plan_t host_plan;
    CHECK_RET(swy_moe_plan_create(comm, &cfg, &host_plan) == SWY_OK,
              "plan with host rows: %s", swy_last_error(NULL));
    int *d_one = swy_test_dev_alloc(2 * sizeof(int));
    memset(d_one, 0, 2 * sizeof(int));
    swy_moe_route_t host_route = NULL;
    swy_status_t st = swy_moe_route(host_plan, d_one, 1, &host_route);
    CHECK_RET(st == SWY_ERR_INVALID_ARG && host_route == NULL &&
                  strstr(swy_last_error(NULL), "host memory") != NULL,
              "a device topk_idx on a host rows plan gave %s: %s",
              swy_status_string(st), swy_last_error(NULL));
    swy_moe_plan_destroy(host_plan);
    swy_test_dev_free(d_one);

    /* Buffers of the wrong kind: a local error, before anything is posted
     * (no rank is left waiting). */
    swy_moe_config_t hc = config(&P, SWY_FLOAT32, 0, NULL);
    swy_moe_config_t dc = config(&P, SWY_FLOAT32, 1, stream);
    swy_moe_plan_t hplan, dplan;
    CHECK_RET(swy_moe_plan_create(comm, &hc, &hplan) == SWY_OK, "host plan");
    CHECK_RET(swy_moe_plan_create(comm, &dc, &dplan) == SWY_OK,
              "device plan: %s", swy_last_error(NULL));
    input_t in;
    gen_input(rank, W, W * E_LOC, 2, 0, SWY_FLOAT32, &in);
    size_t S = (size_t)in.S;
    int *d_idx = swy_test_dev_alloc((S * 2 + 1) * sizeof(int));
    memcpy(d_idx, in.idx, S * 2 * sizeof(int));
    swy_moe_route_t hroute = NULL, droute = NULL;
    /* A device topk_idx on a host plan: refused on this rank, and the
     * rank still joins the count exchange, so every rank fails. */
    st = swy_moe_route(hplan, rank == 0 ? d_idx : in.idx, in.S,
                                    &hroute);
    CHECK_RET(st == SWY_ERR_INVALID_ARG && hroute == NULL,
              "route with a device topk_idx on a host plan gave %s",
              swy_status_string(st));
    if (rank == 0)
        CHECK_RET(strstr(swy_last_error(NULL), "device memory") != NULL,
                  "message: %s", swy_last_error(NULL));
    CHECK_RET(swy_moe_route(dplan, d_idx, in.S, &droute) == SWY_OK,
              "device route: %s", swy_last_error(NULL));
    swy_moe_layout_t L = {.struct_size = sizeof(L)};
    CHECK_RET(swy_moe_route_layout(droute, &L) == SWY_OK, "layout");
    size_t R = (size_t)L.recv_rows;
    float *h_rows = calloc(R * HIDDEN + S * HIDDEN + 1, sizeof(float));
    float *d_rows = swy_test_dev_alloc((R * HIDDEN + 1) * sizeof(float));
    float *d_tok = swy_test_dev_alloc((S * HIDDEN + 1) * sizeof(float));
    float *d_w = swy_test_dev_alloc((S * 2 + 1) * sizeof(float));
    memset(d_tok, 0, (S * HIDDEN + 1) * sizeof(float));
    memcpy(d_w, in.w, S * 2 * sizeof(float));
    if (S > 0) {
        st = swy_moe_dispatch(droute, h_rows, d_rows, NULL,
                              SWY_MOE_BLOCKING);
        CHECK_RET(st == SWY_ERR_INVALID_ARG &&
                      strstr(swy_last_error(NULL), "tokens") != NULL &&
                      strstr(swy_last_error(NULL), "host memory") != NULL,
                  "dispatch of host tokens on a device plan gave %s: %s",
                  swy_status_string(st), swy_last_error(NULL));
    }
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = (char *)stream + 1; /* another stream */
    st = swy_moe_dispatch(droute, d_tok, d_rows, &attr, SWY_MOE_BLOCKING);
    CHECK_RET(st == SWY_ERR_INVALID_ARG &&
                  strstr(swy_last_error(NULL), "plan's stream") != NULL,
              "dispatch on another stream gave %s: %s",
              swy_status_string(st), swy_last_error(NULL));
    /* The route is still usable: a whole layer goes through. */
    CHECK_RET(swy_moe_dispatch(droute, d_tok, d_rows, NULL,
                               SWY_MOE_BLOCKING) == SWY_OK,
              "dispatch after the refusals: %s", swy_last_error(NULL));
    if (R > 0) {
        st = swy_moe_combine(droute, h_rows, in.w, d_tok, NULL);
        CHECK_RET(st == SWY_ERR_INVALID_ARG, "combine of host rows on a "
                  "device plan gave %s", swy_status_string(st));
    }
    CHECK_RET(swy_moe_combine(droute, d_rows, d_w, d_tok, NULL) == SWY_OK,
              "combine: %s", swy_last_error(NULL));
    swy_moe_route_destroy(droute);
    swy_moe_plan_destroy(dplan);
    swy_moe_plan_destroy(hplan);
    swy_test_dev_free(d_rows);
    swy_test_dev_free(d_tok);
    swy_test_dev_free(d_w);
    swy_test_dev_free(d_idx);
    free(h_rows);
    free_input(&in);
    swy_test_dev_stream_destroy(stream);
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

/* A double without swy_devmoe_plugin_v1 (the least it may have): device
 * plans are refused on every rank, host plans still work. */
static int rank_unsupported(swy_comm_t comm, int rank, int W, void *arg)
{
    (void)rank;
    (void)W;
    (void)arg;
    params_t P = {1, 1, 1};
    swy_moe_config_t cfg = config(&P, SWY_FLOAT32, 1, NULL);
    if (expect_plan(comm, &cfg, SWY_ERR_UNSUPPORTED,
                    "swy_devmoe_plugin_v1"))
        return 1;
    cfg = config(&P, SWY_FLOAT32, 0, NULL);
    swy_moe_plan_t plan;
    CHECK_RET(swy_moe_plan_create(comm, &cfg, &plan) == SWY_OK, "host plan: "
              "%s", swy_last_error(NULL));
    swy_moe_plan_destroy(plan);
    CHECK_OK_RET(swy_barrier(comm), comm);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2 && strcmp(argv[2], "errors") == 0) {
        int rc = swy_test_spawn(nranks, rank_errors, NULL, 60, NULL);
        printf("%s: moe device-row errors, %d ranks\n", rc ? "FAIL" : "PASS",
               nranks);
        return rc;
    }
    if (argc > 2 && strcmp(argv[2], "unsupported") == 0) {
        int rc = swy_test_spawn(nranks, rank_unsupported, NULL, 60, NULL);
        printf("%s: moe device rows without the row kernels, %d ranks\n",
               rc ? "FAIL" : "PASS", nranks);
        return rc;
    }
    params_t P = {argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 1,
                  argc > 4 ? atoi(argv[4]) : 1};
    int rc = swy_test_spawn(nranks, rank_correct, &P, 60, NULL);
    printf("%s: moe device rows, %d ranks, top-%d, pipeline %d, packing %d\n",
           rc ? "FAIL" : "PASS", nranks, P.k, P.d, P.p);
    return rc;
}
