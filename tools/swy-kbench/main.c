/* swy-kbench: times the CUDA MoE kernels of kernels/swy_kernels_cuda.h at
 * MoE-realistic sizes and reports achieved TFLOP/s (GEMM kernels) or GB/s
 * (data movement), optionally as a percentage of given peaks.
 *
 * Timing: CUDA events around each call on one stream, 3 warm-up calls,
 * the median of --reps (default 20) timed calls.  Byte counts are the
 * least traffic each kernel needs: every distinct input byte read once and
 * every output byte written once, index and weight arrays included (a
 * token row that two slots read counts once).  Exits 77 without a GPU. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swy_kernels_cuda.h"

typedef struct {
    int reps;
    int json;
    int epilogues; /* the context's setting from SWY_KC_EPILOGUES */
    int grouped;   /* ... from SWY_KC_GROUPED */
    double peak_bf16, peak_fp32, peak_gbs; /* 0: not given */
    char gpu[256];
} kb_opts_t;

static kb_opts_t kb;
static swy_kc_ctx_t *ctx;
static void *stream;

#define KB_OK(call)                                                           \
    do {                                                                      \
        if ((call) != 0) {                                                    \
            fprintf(stderr, "swy-kbench: %s failed: %s\n", #call,             \
                    swy_kc_error_string());                                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* ---- Device buffers filled with uniform values in [-1, 1) -------------- */

static float *kb_host_chunk; /* KB_CHUNK random floats, made once */
#define KB_CHUNK ((size_t)1 << 22)

static uint64_t kb_rng = 0x243f6a8885a308d3ull;

static float kb_uniform(void)
{
    kb_rng ^= kb_rng >> 12;
    kb_rng ^= kb_rng << 25;
    kb_rng ^= kb_rng >> 27;
    return (float)((double)((kb_rng * 0x2545f4914f6cdd1dull) >> 40) /
                   8388608.0 - 1.0);
}

static void *kb_alloc(size_t bytes)
{
    void *p = NULL;
    KB_OK(swy_kc_malloc(&p, bytes ? bytes : 1));
    return p;
}

/* n floats of random values in [-scale, scale): one random host chunk,
 * scaled and copied as many times as needed. */
static float *kb_f32(size_t n, float scale)
{
    if (kb_host_chunk == NULL) {
        kb_host_chunk = malloc(KB_CHUNK * sizeof(float));
        if (kb_host_chunk == NULL) {
            perror("malloc");
            exit(1);
        }
        for (size_t i = 0; i < KB_CHUNK; i++)
            kb_host_chunk[i] = kb_uniform();
    }
    float *h = malloc(KB_CHUNK * sizeof(float));
    if (h == NULL) {
        perror("malloc");
        exit(1);
    }
    for (size_t i = 0; i < KB_CHUNK; i++)
        h[i] = kb_host_chunk[i] * scale;
    float *d = kb_alloc(n * sizeof(float));
    for (size_t off = 0; off < n; off += KB_CHUNK) {
        size_t m = n - off < KB_CHUNK ? n - off : KB_CHUNK;
        KB_OK(swy_kc_memcpy_h2d(d + off, h, m * sizeof(float), NULL));
    }
    free(h);
    return d;
}

static swy_kc_bf16_t *kb_bf16(size_t n, float scale)
{
    float *f = kb_f32(n, scale);
    swy_kc_bf16_t *h = kb_alloc(n * sizeof(swy_kc_bf16_t));
    KB_OK(swy_kc_f32_to_bf16(ctx, f, n, h));
    KB_OK(swy_kc_stream_sync(stream));
    KB_OK(swy_kc_free(f));
    return h;
}

static int *kb_ints(const int *host, size_t n)
{
    int *d = kb_alloc(n * sizeof(int));
    KB_OK(swy_kc_memcpy_h2d(d, host, n * sizeof(int), NULL));
    return d;
}

/* ---- Timing -------------------------------------------------------------- */

typedef int (*kb_fn)(void *arg);

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double kb_time_ms(kb_fn fn, void *arg)
{
    void *ev0, *ev1;
    KB_OK(swy_kc_event_create(&ev0));
    KB_OK(swy_kc_event_create(&ev1));
    for (int i = 0; i < 3; i++)
        KB_OK(fn(arg));
    KB_OK(swy_kc_stream_sync(stream));
    float *t = malloc((size_t)kb.reps * sizeof(float));
    for (int i = 0; i < kb.reps; i++) {
        KB_OK(swy_kc_event_record(ev0, stream));
        KB_OK(fn(arg));
        KB_OK(swy_kc_event_record(ev1, stream));
        KB_OK(swy_kc_event_elapsed_ms(ev0, ev1, &t[i]));
    }
    qsort(t, (size_t)kb.reps, sizeof(float), cmp_float);
    double med = kb.reps % 2 ? t[kb.reps / 2]
                             : 0.5 * (t[kb.reps / 2 - 1] + t[kb.reps / 2]);
    free(t);
    KB_OK(swy_kc_event_destroy(ev0));
    KB_OK(swy_kc_event_destroy(ev1));
    return med;
}

/* flops > 0: a GEMM kernel; else bytes > 0: data movement; else time only. */
static void kb_report(const char *kernel, const char *dtype,
                      const char *shape, double ms, double flops,
                      double bytes)
{
    double rate = 0.0, peak = 0.0;
    const char *unit = "-";
    if (flops > 0.0) {
        rate = flops / (ms * 1e-3) / 1e12;
        unit = "TFLOP/s";
        peak = strcmp(dtype, "bf16") == 0 ? kb.peak_bf16 : kb.peak_fp32;
    } else if (bytes > 0.0) {
        rate = bytes / (ms * 1e-3) / 1e9;
        unit = "GB/s";
        peak = kb.peak_gbs;
    }
    double pct = peak > 0.0 && rate > 0.0 ? 100.0 * rate / peak : -1.0;
    if (kb.json) {
        printf("{\"gpu\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"%s\","
               "\"shape\":\"%s\",\"ms\":%.4f,\"reps\":%d",
               kb.gpu, kernel, dtype, shape, ms, kb.reps);
        if (flops > 0.0)
            printf(",\"tflops\":%.3f", rate);
        if (bytes > 0.0)
            printf(",\"bytes\":%.0f", bytes);
        if (flops <= 0.0 && bytes > 0.0)
            printf(",\"gbs\":%.1f", rate);
        if (pct >= 0.0)
            printf(",\"pct_peak\":%.1f", pct);
        printf("}\n");
    } else {
        char r[32] = "-", p[16] = "-";
        if (rate > 0.0)
            snprintf(r, sizeof(r), "%.1f %s", rate, unit);
        if (pct >= 0.0)
            snprintf(p, sizeof(p), "%.1f%%", pct);
        printf("%-22s %-5s %-34s %10.3f %16s %8s\n", kernel, dtype, shape, ms,
               r, p);
    }
    fflush(stdout);
}

/* ---- The MoE expert FFN and the dense layer --------------------------- */

/* 8 large experts, unevenly loaded (the headline shape, also for the dense
 * layer), and 64 small ones, where one call per expert costs more in
 * launches than in FLOPs. */
#define NE 8
static const int kb_rows[NE] = {2560, 1536, 2048, 2048, 3072, 1024, 2048, 2048};
#define NE_SMALL 64
static int kb_rows_small[NE_SMALL];

typedef struct {
    int bf16, N, H, F;
    int ne;
    const int *rows;
    void *x, *w1, *b1, *w2, *b2, *hp, *ha, *y, *dy, *dh, *dx;
    float *dw1, *db1, *dw2, *db2;
} kb_ffn_t;

static int kb_ffn_fwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_ffn_fwd_bf16(ctx, f->x, f->rows, f->ne, f->H, f->F,
                                   f->w1, f->b1, f->w2, f->b2, f->hp, f->ha,
                                   f->y);
    return swy_kc_ffn_fwd(ctx, f->x, f->rows, f->ne, f->H, f->F, f->w1,
                          f->b1, f->w2, f->b2, f->hp, f->ha, f->y);
}

static int kb_ffn_bwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_ffn_bwd_bf16(ctx, f->x, f->hp, f->ha, f->dy, f->rows,
                                   f->ne, f->H, f->F, f->w1, f->w2, f->dh,
                                   f->dx, f->dw1, f->db1, f->dw2, f->db2);
    return swy_kc_ffn_bwd(ctx, f->x, f->hp, f->ha, f->dy, f->rows, f->ne,
                          f->H, f->F, f->w1, f->w2, f->dh, f->dx, f->dw1,
                          f->db1, f->dw2, f->db2);
}

/* linear: x [N][H] -> y [N][F] with w [H][F] (reuses the FFN's buffers). */
static int kb_linear_fwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_linear_fwd_bf16(ctx, f->x, f->w1, f->b1, f->N, f->H,
                                      f->F, f->hp);
    return swy_kc_linear_fwd(ctx, f->x, f->w1, f->b1, f->N, f->H, f->F,
                             f->hp);
}

static int kb_linear_bwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_linear_bwd_bf16(ctx, f->x, f->w1, f->dh, f->N, f->H,
                                      f->F, f->dx, f->dw1, f->db1);
    return swy_kc_linear_bwd(ctx, f->x, f->w1, f->dh, f->N, f->H, f->F,
                             f->dx, f->dw1, f->db1);
}

/* The dense block's GEMMs with GELU: x [N][H] -> h_pre, h_act [N][F] (w1,
 * b1); and the backward of h_act [N][F] -> [N][H] (w2) through gelu'. */
static int kb_linear_gelu_fwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_linear_gelu_fwd_bf16(ctx, f->x, f->w1, f->b1, f->N,
                                           f->H, f->F, f->hp, f->ha);
    return swy_kc_linear_gelu_fwd(ctx, f->x, f->w1, f->b1, f->N, f->H, f->F,
                                  f->hp, f->ha);
}

static int kb_linear_dgelu_bwd(void *a)
{
    kb_ffn_t *f = a;
    if (f->bf16)
        return swy_kc_linear_dgelu_bwd_bf16(ctx, f->ha, f->hp, f->w2, f->dy,
                                            f->N, f->F, f->H, f->dh, f->dw2,
                                            f->db2);
    return swy_kc_linear_dgelu_bwd(ctx, f->ha, f->hp, f->w2, f->dy, f->N,
                                   f->F, f->H, f->dh, f->dw2, f->db2);
}

/* ffn_fwd<suffix> and ffn_bwd<suffix> on f (fl: one GEMM's FLOPs). */
static void kb_report_ffn(const char *suffix, const char *dt,
                          const char *shape, kb_ffn_t *f, double fl)
{
    char name[32];
    snprintf(name, sizeof(name), "ffn_fwd%s", suffix);
    kb_report(name, dt, shape, kb_time_ms(kb_ffn_fwd, f), 2 * fl, 0);
    snprintf(name, sizeof(name), "ffn_bwd%s", suffix);
    kb_report(name, dt, shape, kb_time_ms(kb_ffn_bwd, f), 4 * fl, 0);
}

/* The expert FFN of ne experts with rows[e] rows, H -> F -> H; with
 * dense = 1 also the dense layer's kernels on the same buffers. */
static void kb_bench_gemm(int bf16, int ne, const int *rows, int Hd, int Fd,
                          int dense)
{
    kb_ffn_t f;
    memset(&f, 0, sizeof(f));
    f.bf16 = bf16;
    f.H = Hd;
    f.F = Fd;
    f.ne = ne;
    f.rows = rows;
    for (int e = 0; e < ne; e++)
        f.N += rows[e];
    size_t N = (size_t)f.N, H = (size_t)f.H, F = (size_t)f.F;
    size_t NEs = (size_t)ne, nw = NEs * H * F;
    /* Weights ~ 1/sqrt(fan-in) keep activations O(1), as in training. */
    float sw1 = 1.0f / sqrtf((float)H), sw2 = 1.0f / sqrtf((float)F);
    if (bf16) {
        f.x = kb_bf16(N * H, 1);
        f.w1 = kb_bf16(nw, sw1);
        f.b1 = kb_bf16(NEs * F, 0.1f);
        f.w2 = kb_bf16(nw, sw2);
        f.b2 = kb_bf16(NEs * H, 0.1f);
        f.dy = kb_bf16(N * H, 1);
        f.hp = kb_alloc(N * F * 2);
        f.ha = kb_alloc(N * F * 2);
        f.dh = kb_alloc(N * F * 2);
        f.y = kb_alloc(N * H * 2);
        f.dx = kb_alloc(N * H * 2);
    } else {
        f.x = kb_f32(N * H, 1);
        f.w1 = kb_f32(nw, sw1);
        f.b1 = kb_f32(NEs * F, 0.1f);
        f.w2 = kb_f32(nw, sw2);
        f.b2 = kb_f32(NEs * H, 0.1f);
        f.dy = kb_f32(N * H, 1);
        f.hp = kb_alloc(N * F * 4);
        f.ha = kb_alloc(N * F * 4);
        f.dh = kb_alloc(N * F * 4);
        f.y = kb_alloc(N * H * 4);
        f.dx = kb_alloc(N * H * 4);
    }
    f.dw1 = kb_alloc(nw * 4);
    f.dw2 = kb_alloc(nw * 4);
    f.db1 = kb_alloc(NEs * F * 4);
    f.db2 = kb_alloc(NEs * H * 4);
    KB_OK(swy_kc_memset(f.dw1, 0, nw * 4, NULL));
    KB_OK(swy_kc_memset(f.dw2, 0, nw * 4, NULL));
    KB_OK(swy_kc_memset(f.db1, 0, NEs * F * 4, NULL));
    KB_OK(swy_kc_memset(f.db2, 0, NEs * H * 4, NULL));
    const char *dt = bf16 ? "bf16" : "fp32";
    char shape[96];
    double fl = 2.0 * (double)N * (double)H * (double)F;
    snprintf(shape, sizeof(shape), "N=%zu H=%zu F=%zu E=%d", N, H, F, ne);
    kb_report_ffn("", dt, shape, &f, fl);
    /* The same with bias and GELU in separate passes, one call per expert
     * (the kernels before the fused epilogues; SWY_KC_EPILOGUES=0). */
    KB_OK(swy_kc_ctx_set_epilogues(ctx, 0));
    KB_OK(swy_kc_ctx_set_grouped(ctx, 0));
    kb_report_ffn("_unfused", dt, shape, &f, fl);
    KB_OK(swy_kc_ctx_set_epilogues(ctx, kb.epilogues));
    /* Each GEMM for all experts in one grouped call (SWY_KC_GROUPED=1). */
    KB_OK(swy_kc_ctx_set_grouped(ctx, 1));
    kb_report_ffn("_grouped", dt, shape, &f, fl);
    KB_OK(swy_kc_ctx_set_grouped(ctx, kb.grouped));
    if (dense) {
        snprintf(shape, sizeof(shape), "N=%zu in=%zu out=%zu", N, H, F);
        kb_report("linear_fwd", dt, shape, kb_time_ms(kb_linear_fwd, &f), fl,
                  0);
        kb_report("linear_bwd", dt, shape, kb_time_ms(kb_linear_bwd, &f),
                  2 * fl, 0);
        kb_report("linear_gelu_fwd", dt, shape,
                  kb_time_ms(kb_linear_gelu_fwd, &f), fl, 0);
        snprintf(shape, sizeof(shape), "N=%zu in=%zu out=%zu", N, F, H);
        kb_report("linear_dgelu_bwd", dt, shape,
                  kb_time_ms(kb_linear_dgelu_bwd, &f), 2 * fl, 0);
    }
    void *all[] = {f.x, f.w1, f.b1, f.w2, f.b2, f.dy, f.hp, f.ha, f.dh, f.y,
                   f.dx, f.dw1, f.dw2, f.db1, f.db2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        KB_OK(swy_kc_free(all[i]));
}

/* ---- Data movement, 256 MiB per moved array ---------------------------- */

typedef struct {
    int bf16, S, k, H, n_rows;
    size_t n;               /* element-wise length */
    int *row_of_slot, *map; /* device */
    float *w;               /* topk_w [S][k] */
    void *x, *send, *rows, *out, *dout, *drows, *a, *b;
    float *dtw, *p, *g, *m, *v;
} kb_move_t;

static int kb_pack(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_pack_bf16(ctx, t->x, t->row_of_slot, t->S, t->k,
                                      t->H, t->send)
                   : swy_kc_pack(ctx, t->x, t->row_of_slot, t->S, t->k, t->H,
                                 t->send);
}

static int kb_pack_bwd(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_pack_bwd_bf16(ctx, t->send, t->row_of_slot, t->S,
                                          t->k, t->H, t->x)
                   : swy_kc_pack_bwd(ctx, t->send, t->row_of_slot, t->S, t->k,
                                     t->H, t->x);
}

static int kb_gather(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_gather_rows_bf16(ctx, t->send, t->map, t->n_rows,
                                             t->H, t->rows)
                   : swy_kc_gather_rows(ctx, t->send, t->map, t->n_rows, t->H,
                                        t->rows);
}

static int kb_combine_fwd(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_combine_fwd_bf16(ctx, t->rows, t->row_of_slot,
                                             t->w, t->S, t->k, t->H, t->out)
                   : swy_kc_combine_fwd(ctx, t->rows, t->row_of_slot, t->w,
                                        t->S, t->k, t->H, t->out);
}

static int kb_combine_bwd(void *a)
{
    kb_move_t *t = a;
    return t->bf16
               ? swy_kc_combine_bwd_bf16(ctx, t->rows, t->row_of_slot, t->w,
                                         t->dout, t->S, t->k, t->H, t->drows,
                                         t->dtw)
               : swy_kc_combine_bwd(ctx, t->rows, t->row_of_slot, t->w,
                                    t->dout, t->S, t->k, t->H, t->drows,
                                    t->dtw);
}

static int kb_gelu(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_gelu_fwd_bf16(ctx, t->a, t->n, t->b)
                   : swy_kc_gelu_fwd(ctx, t->a, t->n, t->b);
}

static int kb_gelu_bwd(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_gelu_bwd_bf16(ctx, t->a, t->b, t->n, t->b)
                   : swy_kc_gelu_bwd(ctx, t->a, t->b, t->n, t->b);
}

static int kb_add(void *a)
{
    kb_move_t *t = a;
    return t->bf16 ? swy_kc_add_bf16(ctx, t->a, t->n, t->b)
                   : swy_kc_add(ctx, t->a, t->n, t->b);
}

static int kb_adam(void *a)
{
    kb_move_t *t = a;
    /* Zero gradients keep the parameters finite over many reps; the kernel
     * does the same work for any value. */
    swy_k_adam_params_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1};
    return swy_kc_adam_step(ctx, t->p, t->g, t->m, t->v, t->n, &hp, 10);
}

static int kb_to_bf16(void *a)
{
    kb_move_t *t = a;
    return swy_kc_f32_to_bf16(ctx, t->a, t->n, t->b);
}

static void kb_bench_move(int bf16)
{
    kb_move_t t;
    memset(&t, 0, sizeof(t));
    size_t es = bf16 ? 2 : 4;
    const char *dt = bf16 ? "bf16" : "fp32";
    t.bf16 = bf16;
    t.k = 2;
    t.H = 1024;
    /* The send buffer (S*k rows of H) is 256 MiB. */
    t.S = (int)(((size_t)256 << 20) / es / (size_t)t.H / (size_t)t.k);
    int n_slots = t.S * t.k;
    /* Routing as after sort: slot s goes to row perm(s), a fixed
     * pseudo-random permutation (a stride coprime with n_slots), 1 in 16
     * slots dropped. */
    int *ros = malloc((size_t)n_slots * sizeof(int));
    int *map = malloc((size_t)n_slots * sizeof(int));
    int n_rows = 0;
    for (int s = 0; s < n_slots; s++)
        ros[s] = s % 16 == 15 ? -1 : n_rows++;
    for (int s = 0, r = 0; s < n_slots; s++)
        if (ros[s] >= 0)
            ros[s] = (int)(((int64_t)(r++) * 7919) % n_rows);
    for (int i = 0; i < n_rows; i++)
        map[i] = (int)(((int64_t)i * 104729) % n_rows);
    t.n_rows = n_rows;
    t.row_of_slot = kb_ints(ros, (size_t)n_slots);
    t.map = kb_ints(map, (size_t)n_rows);
    free(ros);
    free(map);
    size_t row = (size_t)t.H * es, nx = (size_t)t.S * t.H;
    size_t nr = (size_t)n_rows * t.H;
    if (bf16) {
        t.x = kb_bf16(nx, 1);
        t.dout = kb_bf16(nx, 1);
        t.send = kb_bf16(nr, 1);
        t.rows = kb_bf16(nr, 1);
    } else {
        t.x = kb_f32(nx, 1);
        t.dout = kb_f32(nx, 1);
        t.send = kb_f32(nr, 1);
        t.rows = kb_f32(nr, 1);
    }
    t.out = kb_alloc(nx * es);
    t.drows = kb_alloc(nr * es);
    t.w = kb_f32((size_t)n_slots, 0.5f);
    t.dtw = kb_alloc((size_t)n_slots * 4);

    char shape[96];
    double idx = (double)n_slots * 4;
    snprintf(shape, sizeof(shape), "S=%d k=%d H=%d rows=%d", t.S, t.k, t.H,
             n_rows);
    /* pack: reads every token row, writes one row per kept slot. */
    kb_report("pack", dt, shape, kb_time_ms(kb_pack, &t), 0,
              (double)t.S * row + (double)n_rows * row + idx);
    kb_report("pack_bwd", dt, shape, kb_time_ms(kb_pack_bwd, &t), 0,
              (double)n_rows * row + (double)t.S * row + idx);
    kb_report("gather_rows", dt, shape, kb_time_ms(kb_gather, &t), 0,
              2.0 * n_rows * row + (double)n_rows * 4);
    kb_report("combine_fwd", dt, shape, kb_time_ms(kb_combine_fwd, &t), 0,
              (double)n_rows * row + (double)t.S * row + 2 * idx);
    /* Reads rows and dout, writes drows; row_of_slot, topk_w, dtopk_w. */
    kb_report("combine_bwd", dt, shape, kb_time_ms(kb_combine_bwd, &t), 0,
              2.0 * n_rows * row + (double)t.S * row + 3 * idx);
    void *free1[] = {t.x, t.dout, t.send, t.rows, t.out, t.drows, t.w, t.dtw,
                     t.row_of_slot, t.map};
    for (size_t i = 0; i < sizeof(free1) / sizeof(free1[0]); i++)
        KB_OK(swy_kc_free(free1[i]));

    /* Element-wise on 256 MiB arrays. */
    t.n = ((size_t)256 << 20) / es;
    if (bf16) {
        t.a = kb_bf16(t.n, 2);
        t.b = kb_bf16(t.n, 1);
    } else {
        t.a = kb_f32(t.n, 2);
        t.b = kb_f32(t.n, 1);
    }
    double nb = (double)t.n * es;
    snprintf(shape, sizeof(shape), "n=%zu", t.n);
    kb_report("gelu_fwd", dt, shape, kb_time_ms(kb_gelu, &t), 0, 2 * nb);
    kb_report("gelu_bwd", dt, shape, kb_time_ms(kb_gelu_bwd, &t), 0, 3 * nb);
    kb_report("add", dt, shape, kb_time_ms(kb_add, &t), 0, 3 * nb);
    KB_OK(swy_kc_free(t.a));
    KB_OK(swy_kc_free(t.b));

    if (!bf16) {
        t.n = ((size_t)256 << 20) / 4;
        t.p = kb_f32(t.n, 1);
        t.g = kb_alloc(t.n * 4);
        t.m = kb_alloc(t.n * 4);
        t.v = kb_alloc(t.n * 4);
        KB_OK(swy_kc_memset(t.g, 0, t.n * 4, NULL));
        KB_OK(swy_kc_memset(t.m, 0, t.n * 4, NULL));
        KB_OK(swy_kc_memset(t.v, 0, t.n * 4, NULL));
        snprintf(shape, sizeof(shape), "n=%zu", t.n);
        /* Reads p, g, m, v; writes p, m, v. */
        kb_report("adam_step", "fp32", shape, kb_time_ms(kb_adam, &t), 0,
                  7.0 * t.n * 4);
        t.a = t.p;
        t.b = t.m; /* 128 MiB of bf16 output fits in m */
        kb_report("f32_to_bf16", "fp32", shape, kb_time_ms(kb_to_bf16, &t), 0,
                  6.0 * t.n);
        void *free2[] = {t.p, t.g, t.m, t.v};
        for (size_t i = 0; i < sizeof(free2) / sizeof(free2[0]); i++)
            KB_OK(swy_kc_free(free2[i]));
    }
}

/* ---- Gate and routing (time only) ------------------------------------- */

typedef struct {
    int S, H, E, k, cap;
    float *x, *wg, *logits, *probs, *w, *f, *laux;
    int *idx, *idx_work, *load, *dropped, *counts, *offsets, *ros, *n_rows;
} kb_gate_t;

static int kb_gate_logits(void *a)
{
    kb_gate_t *g = a;
    return swy_kc_gate_logits_fwd(ctx, g->x, g->wg, g->S, g->H, g->E,
                                  g->logits);
}

static int kb_gate_topk(void *a)
{
    kb_gate_t *g = a;
    return swy_kc_gate_topk(ctx, g->logits, g->S, g->E, g->k, 1, g->idx, g->w,
                            g->probs);
}

static int kb_gate_drop(void *a)
{
    kb_gate_t *g = a;
    /* Drops from a fresh copy of the choice each time. */
    if (swy_kc_memcpy_d2d(g->idx_work, g->idx,
                          (size_t)g->S * g->k * sizeof(int), stream) != 0)
        return 1;
    return swy_kc_gate_drop(ctx, g->idx_work, g->w, g->S, g->k, g->E, g->cap,
                            SWY_K_DROP_TOKEN_ORDER, g->load, g->dropped);
}

static int kb_sort(void *a)
{
    kb_gate_t *g = a;
    return swy_kc_sort_slots(ctx, g->idx, g->S, g->k, 1, g->E, g->counts,
                             g->offsets, g->ros, g->n_rows);
}

static int kb_aux(void *a)
{
    kb_gate_t *g = a;
    return swy_kc_gate_aux_loss(ctx, g->probs, g->S, g->E, 1, g->f, g->laux);
}

static void kb_bench_gate(void)
{
    kb_gate_t g;
    memset(&g, 0, sizeof(g));
    g.S = 16384;
    g.H = 1024;
    g.E = 64;
    g.k = 2;
    size_t ns = (size_t)g.S * g.k;
    g.cap = (int)((1.25 * g.S * g.k + g.E - 1) / g.E);
    g.x = kb_f32((size_t)g.S * g.H, 1);
    g.wg = kb_f32((size_t)g.H * g.E, 1.0f / 32.0f);
    g.logits = kb_alloc((size_t)g.S * g.E * 4);
    g.probs = kb_alloc((size_t)g.S * g.E * 4);
    g.w = kb_alloc(ns * 4);
    g.f = kb_alloc((size_t)g.E * 4);
    g.laux = kb_alloc(4);
    g.idx = kb_alloc(ns * sizeof(int));
    g.idx_work = kb_alloc(ns * sizeof(int));
    g.ros = kb_alloc(ns * sizeof(int));
    g.load = kb_alloc((size_t)g.E * sizeof(int));
    g.counts = kb_alloc((size_t)g.E * sizeof(int));
    g.offsets = kb_alloc((size_t)(g.E + 1) * sizeof(int));
    g.dropped = kb_alloc(sizeof(int));
    g.n_rows = kb_alloc(sizeof(int));
    char shape[96];
    snprintf(shape, sizeof(shape), "S=%d H=%d E=%d", g.S, g.H, g.E);
    kb_report("gate_logits_fwd", "fp32", shape,
              kb_time_ms(kb_gate_logits, &g), 2.0 * g.S * g.H * g.E, 0);
    snprintf(shape, sizeof(shape), "S=%d E=%d k=%d", g.S, g.E, g.k);
    kb_report("gate_topk", "fp32", shape, kb_time_ms(kb_gate_topk, &g), 0, 0);
    kb_report("gate_aux_loss", "fp32", shape, kb_time_ms(kb_aux, &g), 0, 0);
    snprintf(shape, sizeof(shape), "S=%d E=%d k=%d cap=%d", g.S, g.E, g.k,
             g.cap);
    kb_report("gate_drop(+copy)", "int", shape, kb_time_ms(kb_gate_drop, &g),
              0, 0);
    snprintf(shape, sizeof(shape), "S=%d E=%d k=%d", g.S, g.E, g.k);
    kb_report("sort_slots", "int", shape, kb_time_ms(kb_sort, &g), 0, 0);
    void *all[] = {g.x, g.wg, g.logits, g.probs, g.w, g.f, g.laux, g.idx,
                   g.idx_work, g.ros, g.load, g.counts, g.offsets, g.dropped,
                   g.n_rows};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        KB_OK(swy_kc_free(all[i]));
}

/* ---- Main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: swy-kbench [--json] [--reps N] [--peak-tflops-bf16 T]\n"
            "                  [--peak-tflops-fp32 T] [--peak-gbs G]\n"
            "Times the CUDA MoE kernels (median of N >= 1 reps, default 20)\n"
            "and prints TFLOP/s or GB/s; with a peak, also its percentage\n"
            "(H100 SXM: 989 bf16 dense, 67 fp32, 3350 GB/s).\n"
            "ffn_* run with the GEMMs' fused epilogues unless\n"
            "SWY_KC_EPILOGUES=0 (grouped with SWY_KC_GROUPED=1);\n"
            "ffn_*_unfused always without, one call per expert;\n"
            "ffn_*_grouped with grouped GEMMs.  The last lines say how\n"
            "many GEMMs fused and grouped calls ran, and why any fell back.\n");
}

static int parse_double(const char *s, double *v)
{
    char *end;
    double d = strtod(s, &end);
    if (end == s || *end != '\0' || !(d > 0.0))
        return 1;
    *v = d;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"reps", required_argument, NULL, 'r'},
        {"peak-tflops-bf16", required_argument, NULL, 'b'},
        {"peak-tflops-fp32", required_argument, NULL, 'f'},
        {"peak-gbs", required_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    kb.reps = 20;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'j':
            kb.json = 1;
            break;
        case 'r':
            kb.reps = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || kb.reps < 1) {
                fprintf(stderr, "swy-kbench: --reps: not a count: %s\n",
                        optarg);
                return 2;
            }
            break;
        case 'b':
        case 'f':
        case 'g': {
            double *dst = c == 'b' ? &kb.peak_bf16
                          : c == 'f' ? &kb.peak_fp32 : &kb.peak_gbs;
            if (parse_double(optarg, dst) != 0) {
                fprintf(stderr, "swy-kbench: not a positive number: %s\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (swy_kc_device_count() <= 0) {
        printf("swy-kbench: skipped: no CUDA device (%s)\n",
               swy_kc_error_string());
        return 77;
    }
    KB_OK(swy_kc_set_device(0));
    KB_OK(swy_kc_device_name(kb.gpu, sizeof(kb.gpu)));
    for (char *p = kb.gpu; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = ' ';
    KB_OK(swy_kc_stream_create(0, &stream));
    KB_OK(swy_kc_ctx_create(stream, &ctx));
    if (!kb.json) {
        printf("GPU: %s; median of %d reps after 3 warm-ups\n", kb.gpu,
               kb.reps);
        printf("%-22s %-5s %-34s %10s %16s %8s\n", "kernel", "dtype", "shape",
               "time_ms", "rate", "%peak");
    }
    unsigned long fused, fell_back;
    const char *why;
    KB_OK(swy_kc_ctx_epilogue_stats(ctx, &kb.epilogues, &fused, &fell_back,
                                    &why));
    unsigned long g_calls, g_fell_back;
    const char *g_why;
    KB_OK(swy_kc_ctx_grouped_stats(ctx, &kb.grouped, &g_calls, &g_fell_back,
                                   &g_why));
    for (int e = 0; e < NE_SMALL; e++)
        kb_rows_small[e] = 128;
    kb_bench_gemm(1, NE, kb_rows, 1024, 4096, 1);
    kb_bench_gemm(0, NE, kb_rows, 1024, 4096, 1);
    kb_bench_gemm(1, NE_SMALL, kb_rows_small, 1024, 2048, 0);
    kb_bench_gemm(0, NE_SMALL, kb_rows_small, 1024, 2048, 0);
    kb_bench_move(1);
    kb_bench_move(0);
    kb_bench_gate();
    /* Whether the fused GEMMs above really fused. */
    int on;
    KB_OK(swy_kc_ctx_epilogue_stats(ctx, &on, &fused, &fell_back, &why));
    if (kb.json)
        printf("{\"gpu\":\"%s\",\"epilogues\":%d,\"gemms_fused\":%lu,"
               "\"gemms_fell_back\":%lu,\"fell_back_why\":\"%s\"}\n",
               kb.gpu, kb.epilogues, fused, fell_back, why);
    else
        printf("fused GEMM epilogues: %s; %lu GEMMs fused, %lu fell back%s%s\n",
               kb.epilogues ? "on" : "off (SWY_KC_EPILOGUES=0)", fused,
               fell_back, why[0] ? ": " : "", why);
    KB_OK(swy_kc_ctx_grouped_stats(ctx, &on, &g_calls, &g_fell_back,
                                   &g_why));
    if (kb.json)
        printf("{\"gpu\":\"%s\",\"grouped\":%d,\"grouped_calls\":%lu,"
               "\"grouped_per_expert\":%lu,\"per_expert_why\":\"%s\"}\n",
               kb.gpu, kb.grouped, g_calls, g_fell_back, g_why);
    else
        printf("grouped GEMMs: %s by default; %lu grouped calls, %lu "
               "GEMMs per expert instead%s%s\n",
               kb.grouped ? "on" : "off (SWY_KC_GROUPED=1 turns them on)",
               g_calls, g_fell_back, g_why[0] ? ": " : "", g_why);
    swy_kc_ctx_destroy(ctx);
    KB_OK(swy_kc_stream_destroy(stream));
    free(kb_host_chunk);
    return 0;
}
