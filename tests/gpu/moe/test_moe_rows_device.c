/* swy_devmoe_plugin_v1 of the nccl plugin (nccl_moe.c): the MoE row kernels
 * on device memory, each checked against a serial loop of this file, for
 * the header's contract (swy_devmoe_v1.h), not against the kernels the
 * plugin calls.
 *
 *   test_moe_rows_device [PLUGIN.so]
 *
 * The plugin is dlopen'ed from the path given, else from SWY_PLUGIN_PATH.
 * The argument checks need no GPU and run first; without a GPU the test
 * then exits 77. The kernels run on a stream made with cudaStreamCreate,
 * with dropped slots (-1) and rows that no slot maps to, and their results
 * are read by the table's download on the same stream with nothing
 * synchronized in between; a delay put on a stream before a call shows
 * that the call waits for the work queued before it, and that an upload
 * waits for the kernels before it. Copies (pack, gather_rows), zeros and
 * rows that must stay untouched are compared bit for bit; sums norm-wise,
 * max|got - want| / max|want|, within 1e-5 for fp32 and 1e-2 for bf16
 * (against fp32 sums of the bf16 inputs). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "elem.h" /* bf16 rounding, as the kernels do it */
#include "switchyard/swy_devmoe_v1.h"
#include "../gputest.h"

#define TOL_F32 1e-5
#define TOL_BF16 1e-2
#define SENTINEL 7.0f /* exact in both dtypes: rows a call must not touch */
#define GARBAGE -3.5f /* exact in both: outputs a call must overwrite */
#define N_THREADS 4
#define THREAD_ITERS 25

static const swy_devmoe_v1_t *moe;

/* ---- loading ---------------------------------------------------------- */

static void plugin_load(const char *arg)
{
    char path[4096] = "";
    if (arg != NULL) {
        snprintf(path, sizeof(path), "%s", arg);
    } else {
        const char *dirs = getenv("SWY_PLUGIN_PATH");
        char copy[4096];
        snprintf(copy, sizeof(copy), "%s", dirs != NULL ? dirs : "");
        for (char *save = NULL, *d = strtok_r(copy, ":", &save); d != NULL;
             d = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof(path), "%s/swy-transport-nccl.so", d);
            if (access(path, R_OK) == 0)
                break;
            path[0] = '\0';
        }
        CHECK_EXIT(path[0] != '\0',
                   "swy-transport-nccl.so: not given and not found in "
                   "SWY_PLUGIN_PATH=%s",
                   dirs != NULL ? dirs : "(unset)");
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_EXIT(handle != NULL, "dlopen %s: %s", path, dlerror());
    moe = dlsym(handle, SWY_DEVMOE_PLUGIN_SYMBOL_V1);
    CHECK_EXIT(moe != NULL, "%s: no %s", path, SWY_DEVMOE_PLUGIN_SYMBOL_V1);
    CHECK_EXIT(moe->abi_version == SWY_DEVMOE_ABI_V1 &&
                   moe->struct_size == sizeof(swy_devmoe_v1_t),
               "ABI %u, size %u", moe->abi_version, moe->struct_size);
    CHECK(strcmp(moe->name, "cuda") == 0, "name %s", moe->name);
    printf("loaded %s\n", path);
}

/* ---- argument errors (no GPU needed: nothing is enqueued) ------------- */

#define EXPECT(call, want)                                                    \
    do {                                                                      \
        swy_status_t st_ = (call);                                            \
        const char *why_ = moe->error_string();                               \
        CHECK(st_ == (want), "%s: status %d, want %d (%s)", #call, (int)st_,  \
              (int)(want), why_ != NULL ? why_ : "(NULL)");                   \
    } while (0)

static void check_arguments(void)
{
    CHECK(moe->error_string() != NULL, "error_string() is NULL");
    /* Pointers that are never read: the calls fail, or have no work,
     * before anything would touch them. */
    void *p = (void *)(uintptr_t)0x1000;
    const int32_t *ri = p;
    const float *w = p;
    float *dw = p;

    EXPECT(moe->pack(NULL, SWY_FLOAT16, p, ri, 4, 2, 8, p),
           SWY_ERR_UNSUPPORTED);
    CHECK(strstr(moe->error_string(), "SWY_FLOAT16") != NULL, "%s",
          moe->error_string());
    EXPECT(moe->pack_bwd(NULL, SWY_FLOAT64, p, ri, 4, 2, 8, p),
           SWY_ERR_UNSUPPORTED);
    EXPECT(moe->gather_rows(NULL, SWY_INT32, p, ri, 4, 8, p),
           SWY_ERR_UNSUPPORTED);
    EXPECT(moe->combine_fwd(NULL, SWY_FLOAT16, p, ri, w, 4, 2, 8, p),
           SWY_ERR_UNSUPPORTED);
    EXPECT(moe->combine_bwd(NULL, SWY_FLOAT16, p, ri, w, p, 4, 2, 8, p, dw),
           SWY_ERR_UNSUPPORTED);

    EXPECT(moe->pack(NULL, SWY_FLOAT32, p, ri, -1, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    CHECK(strstr(moe->error_string(), "S=-1") != NULL, "%s",
          moe->error_string());
    EXPECT(moe->pack(NULL, SWY_BFLOAT16, p, ri, 4, -2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->pack_bwd(NULL, SWY_FLOAT32, p, ri, -1, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->gather_rows(NULL, SWY_FLOAT32, p, ri, -1, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->gather_rows(NULL, SWY_FLOAT32, p, ri, 4, -8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->combine_fwd(NULL, SWY_FLOAT32, p, ri, w, -1, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->combine_bwd(NULL, SWY_BFLOAT16, p, ri, w, p, -1, 2, 8, p,
                            dw),
           SWY_ERR_INVALID_ARG);
    /* S * k past an int: the kernels count slots in an int. */
    EXPECT(moe->pack(NULL, SWY_FLOAT32, p, ri, 1 << 20, 1 << 12, 8, p),
           SWY_ERR_INVALID_ARG);

    /* A NULL array with rows to touch. */
    EXPECT(moe->pack(NULL, SWY_FLOAT32, NULL, ri, 4, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->pack_bwd(NULL, SWY_FLOAT32, p, NULL, 4, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->gather_rows(NULL, SWY_BFLOAT16, p, ri, 4, 8, NULL),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->combine_fwd(NULL, SWY_FLOAT32, p, ri, NULL, 4, 2, 8, p),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->combine_bwd(NULL, SWY_FLOAT32, p, ri, w, NULL, 4, 2, 8, p,
                            dw),
           SWY_ERR_INVALID_ARG);
    EXPECT(moe->upload(NULL, p, NULL, 16), SWY_ERR_INVALID_ARG);
    EXPECT(moe->download(NULL, NULL, p, 16), SWY_ERR_INVALID_ARG);

    /* Empty calls enqueue nothing, whatever the arrays. */
    EXPECT(moe->pack(NULL, SWY_FLOAT32, NULL, NULL, 0, 2, 8, NULL), SWY_OK);
    EXPECT(moe->pack(NULL, SWY_BFLOAT16, NULL, NULL, 4, 0, 8, NULL), SWY_OK);
    EXPECT(moe->pack_bwd(NULL, SWY_FLOAT32, NULL, NULL, 4, 2, 0, NULL),
           SWY_OK);
    EXPECT(moe->gather_rows(NULL, SWY_FLOAT32, NULL, NULL, 0, 8, NULL),
           SWY_OK);
    EXPECT(moe->combine_fwd(NULL, SWY_BFLOAT16, NULL, NULL, NULL, 0, 2, 8,
                            NULL),
           SWY_OK);
    EXPECT(moe->combine_bwd(NULL, SWY_FLOAT32, NULL, NULL, NULL, NULL, 4, 2,
                            8, NULL, NULL),
           SWY_OK);
    EXPECT(moe->upload(NULL, NULL, NULL, 0), SWY_OK);
    EXPECT(moe->download(NULL, NULL, NULL, 0), SWY_OK);
    moe->free_mem(NULL);
}

/* ---- host data -------------------------------------------------------- */

typedef struct {
    swy_dtype_t dtype;
    const char *name;
    size_t esize;
    double tol;
} dt_t;

static const dt_t dt_f32 = {SWY_FLOAT32, "fp32", 4, TOL_F32};
static const dt_t dt_bf16 = {SWY_BFLOAT16, "bf16", 2, TOL_BF16};

static void *xmalloc(size_t bytes)
{
    void *p = calloc(bytes > 0 ? bytes : 1, 1);
    CHECK_EXIT(p != NULL, "calloc(%zu)", bytes);
    return p;
}

static uint32_t rng_next(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

/* Uniform in [-1, 1), rounded to what the dtype holds exactly. */
static float rng_value(uint32_t *state, const dt_t *dt)
{
    float v = (float)rng_next(state) / (float)(1u << 23) - 1.0f;
    return dt->dtype == SWY_BFLOAT16
               ? swy_e_bf16_to_f32(swy_e_f32_to_bf16(v))
               : v;
}

static float *host_values(size_t n, uint32_t seed, const dt_t *dt)
{
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = rng_value(&seed, dt);
    return v;
}

static float *host_fill(size_t n, float value)
{
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = value;
    return v;
}

/* ---- device data, through the table's own alloc, upload and download --- */

static void *dev_alloc(size_t bytes)
{
    void *d = moe->alloc(bytes);
    CHECK_EXIT(d != NULL, "alloc(%zu): %s", bytes, moe->error_string());
    return d;
}

/* A device copy of n values in the dtype (exact: see rng_value). */
static void *dev_values(cudaStream_t s, const dt_t *dt, const float *v,
                        size_t n)
{
    void *d = dev_alloc(n * dt->esize);
    void *raw = xmalloc(n * dt->esize);
    for (size_t i = 0; i < n; i++) {
        if (dt->dtype == SWY_BFLOAT16)
            ((uint16_t *)raw)[i] = swy_e_f32_to_bf16(v[i]);
        else
            ((float *)raw)[i] = v[i];
    }
    swy_status_t st = moe->upload(s, d, raw, n * dt->esize);
    CHECK_EXIT(st == SWY_OK, "upload of %zu bytes: %d (%s)", n * dt->esize,
               (int)st, moe->error_string());
    free(raw); /* the header lets the source go once upload returns */
    return d;
}

static void *dev_ints(cudaStream_t s, const int32_t *v, size_t n)
{
    void *d = dev_alloc(n * sizeof(int32_t));
    swy_status_t st = moe->upload(s, d, v, n * sizeof(int32_t));
    CHECK_EXIT(st == SWY_OK, "upload: %d (%s)", (int)st, moe->error_string());
    return d;
}

/* n values of the dtype at d, as floats (a new array). */
static float *dev_read(cudaStream_t s, const dt_t *dt, const void *d,
                       size_t n)
{
    void *raw = xmalloc(n * dt->esize);
    swy_status_t st = moe->download(s, raw, d, n * dt->esize);
    CHECK_EXIT(st == SWY_OK, "download of %zu bytes: %d (%s)",
               n * dt->esize, (int)st, moe->error_string());
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = dt->dtype == SWY_BFLOAT16
                   ? swy_e_bf16_to_f32(((uint16_t *)raw)[i])
                   : ((float *)raw)[i];
    free(raw);
    return v;
}

#define CALL_OK(call)                                                         \
    do {                                                                      \
        swy_status_t st_ = (call);                                            \
        CHECK_EXIT(st_ == SWY_OK, "%s: %d (%s)", #call, (int)st_,             \
                   moe->error_string());                                      \
    } while (0)

/* ---- comparison ------------------------------------------------------- */

/* n_rows rows of H: those with exact[r] (all when exact is NULL) bit for
 * bit, the others norm-wise within tol. */
static void check_rows(const char *what, const float *got, const float *want,
                       int n_rows, int H, const unsigned char *exact,
                       double tol)
{
    double max_err = 0.0, max_want = 0.0;
    int bad_row = -1, bad_h = 0;
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)r * H + h;
            if (exact == NULL || exact[r]) {
                if (bad_row < 0 && memcmp(&got[i], &want[i], 4) != 0) {
                    bad_row = r;
                    bad_h = h;
                }
                continue;
            }
            double err = isnan(got[i]) ? INFINITY
                                       : fabs((double)got[i] - want[i]);
            max_err = err > max_err ? err : max_err;
            max_want = fabs(want[i]) > max_want ? fabs(want[i]) : max_want;
        }
    double rel = max_want > 0.0 ? max_err / max_want : max_err;
    CHECK(bad_row < 0, "%s: row %d [%d] is %.9g, want exactly %.9g", what,
          bad_row, bad_h,
          bad_row < 0 ? 0.0 : (double)got[(size_t)bad_row * H + bad_h],
          bad_row < 0 ? 0.0 : (double)want[(size_t)bad_row * H + bad_h]);
    CHECK(rel <= tol, "%s: norm-wise relative error %.3g > %.0e", what, rel,
          tol);
    printf("  %-36s rel err %.2g (tol %.0e)%s\n", what, rel, tol,
           bad_row < 0 ? "" : "  EXACT ROWS DIFFER");
}

/* ---- routing ---------------------------------------------------------- */

/* S tokens by k slots over n_rows rows: about a fifth of the slots dropped
 * (-1), token 0 entirely; the kept slots take distinct rows in a shuffled
 * order, and SPARE_ROWS rows are left to no slot. */
#define SPARE_ROWS 3

typedef struct {
    int S, k, n_rows;
    int32_t *row_of_slot;     /* [S*k] */
    unsigned char *row_kept;  /* [n_rows]: some slot maps to the row */
    unsigned char *tok_empty; /* [S]: the token has no row */
    float *topk_w;            /* [S*k] */
} route_t;

static void route_make(route_t *r, int S, int k, uint32_t seed)
{
    r->S = S;
    r->k = k;
    r->row_of_slot = xmalloc((size_t)S * k * sizeof(int32_t));
    r->topk_w = xmalloc((size_t)S * k * sizeof(float));
    r->tok_empty = xmalloc((size_t)S);
    int kept = 0;
    for (int s = 0; s < S * k; s++) {
        int drop = s < k || rng_next(&seed) % 5 == 0;
        r->row_of_slot[s] = drop ? -1 : kept++;
        r->topk_w[s] = (float)(rng_next(&seed) % 1000) / 1000.0f;
    }
    r->n_rows = kept + SPARE_ROWS;
    int32_t *perm = xmalloc((size_t)r->n_rows * sizeof(int32_t));
    for (int i = 0; i < r->n_rows; i++)
        perm[i] = i;
    for (int i = r->n_rows - 1; i > 0; i--) {
        int j = (int)(rng_next(&seed) % (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    r->row_kept = xmalloc((size_t)r->n_rows);
    for (int s = 0; s < S * k; s++)
        if (r->row_of_slot[s] >= 0) {
            r->row_of_slot[s] = perm[r->row_of_slot[s]];
            r->row_kept[r->row_of_slot[s]] = 1;
        }
    for (int t = 0; t < S; t++) {
        r->tok_empty[t] = 1;
        for (int j = 0; j < k; j++)
            if (r->row_of_slot[(size_t)t * k + j] >= 0)
                r->tok_empty[t] = 0;
    }
    free(perm);
}

static void route_free(route_t *r)
{
    free(r->row_of_slot);
    free(r->row_kept);
    free(r->tok_empty);
    free(r->topk_w);
}

/* ---- the serial references -------------------------------------------- */

static void ref_pack(const route_t *r, int H, const float *x, float *send)
{
    for (int s = 0; s < r->S * r->k; s++)
        if (r->row_of_slot[s] >= 0)
            memcpy(send + (size_t)r->row_of_slot[s] * H,
                   x + (size_t)(s / r->k) * H, (size_t)H * sizeof(float));
}

/* out[t] = sum over kept slots of w * rows[row] (w NULL: 1), in fp32. */
static void ref_sum(const route_t *r, int H, const float *rows,
                    const float *w, float *out)
{
    for (int t = 0; t < r->S; t++)
        for (int h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int j = 0; j < r->k; j++) {
                size_t s = (size_t)t * r->k + j;
                int32_t row = r->row_of_slot[s];
                if (row >= 0)
                    acc += (w != NULL ? w[s] : 1.0f) *
                           rows[(size_t)row * H + h];
            }
            out[(size_t)t * H + h] = acc;
        }
}

static void ref_gather(const float *src, const int32_t *src_row, int n, int H,
                       float *dst)
{
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++)
            dst[(size_t)i * H + h] =
                src_row[i] >= 0 ? src[(size_t)src_row[i] * H + h] : 0.0f;
}

static void ref_combine_bwd(const route_t *r, int H, const float *rows,
                            const float *dout, float *drows, float *dtopk_w)
{
    for (int s = 0; s < r->S * r->k; s++) {
        int32_t row = r->row_of_slot[s];
        const float *g = dout + (size_t)(s / r->k) * H;
        double dot = 0.0;
        for (int h = 0; h < H && row >= 0; h++) {
            drows[(size_t)row * H + h] = r->topk_w[s] * g[h];
            dot += (double)g[h] * rows[(size_t)row * H + h];
        }
        dtopk_w[s] = (float)dot;
    }
}

/* ---- each function against its reference ------------------------------ */

static void check_kernels(cudaStream_t s, const dt_t *dt, int S, int k, int H,
                          uint32_t seed)
{
    route_t r;
    route_make(&r, S, k, seed);
    int R = r.n_rows, n_slots = S * k;
    printf("%s S=%d k=%d H=%d (%d rows, %d spare):\n", dt->name, S, k, H, R,
           SPARE_ROWS);
    char what[96];
    unsigned char *spare_rows = xmalloc((size_t)R);
    for (int i = 0; i < R; i++)
        spare_rows[i] = !r.row_kept[i];
    int32_t *ros_d = dev_ints(s, r.row_of_slot, (size_t)n_slots);
    float *w_d = dev_alloc((size_t)n_slots * sizeof(float));
    CALL_OK(moe->upload(s, w_d, r.topk_w, (size_t)n_slots * sizeof(float)));

    /* pack: kept rows are copies of their token, spare rows untouched. */
    float *x = host_values((size_t)S * H, seed + 1, dt);
    float *want = host_fill((size_t)R * H, SENTINEL);
    ref_pack(&r, H, x, want);
    void *x_d = dev_values(s, dt, x, (size_t)S * H);
    float *sentinel = host_fill((size_t)R * H, SENTINEL);
    void *send_d = dev_values(s, dt, sentinel, (size_t)R * H);
    CALL_OK(moe->pack(s, dt->dtype, x_d, ros_d, S, k, H, send_d));
    float *got = dev_read(s, dt, send_d, (size_t)R * H);
    check_rows("pack", got, want, R, H, NULL, 0.0);
    free(got);

    /* pack_bwd: each token's sum of its rows; zeros for token 0. */
    float *dsend = host_values((size_t)R * H, seed + 2, dt);
    void *dsend_d = dev_values(s, dt, dsend, (size_t)R * H);
    float *dx_want = xmalloc((size_t)S * H * sizeof(float));
    ref_sum(&r, H, dsend, NULL, dx_want);
    float *garbage = host_fill((size_t)S * H, GARBAGE);
    void *dx_d = dev_values(s, dt, garbage, (size_t)S * H);
    CALL_OK(moe->pack_bwd(s, dt->dtype, dsend_d, ros_d, S, k, H, dx_d));
    got = dev_read(s, dt, dx_d, (size_t)S * H);
    check_rows("pack_bwd", got, dx_want, S, H, r.tok_empty, dt->tol);
    free(got);

    /* gather_rows: rows of send in another order, a row twice, and rows
     * no source maps to (-1: zeros). */
    int n = R + 2;
    int32_t *src_row = xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        src_row[i] = i % 4 == 1 ? -1 : (int32_t)((i * 7 + 3) % R);
    int32_t *src_row_d = dev_ints(s, src_row, (size_t)n);
    float *gather_want = xmalloc((size_t)n * H * sizeof(float));
    ref_gather(dsend, src_row, n, H, gather_want);
    float *dst_garbage = host_fill((size_t)n * H, GARBAGE);
    void *dst_d = dev_values(s, dt, dst_garbage, (size_t)n * H);
    CALL_OK(moe->gather_rows(s, dt->dtype, dsend_d, src_row_d, n, H, dst_d));
    got = dev_read(s, dt, dst_d, (size_t)n * H);
    check_rows("gather_rows", got, gather_want, n, H, NULL, 0.0);
    free(got);

    /* combine_fwd: each token's weighted sum; zeros for token 0. */
    float *out_want = xmalloc((size_t)S * H * sizeof(float));
    ref_sum(&r, H, dsend, r.topk_w, out_want);
    void *out_d = dev_values(s, dt, garbage, (size_t)S * H);
    CALL_OK(moe->combine_fwd(s, dt->dtype, dsend_d, ros_d, w_d, S, k, H,
                             out_d));
    got = dev_read(s, dt, out_d, (size_t)S * H);
    check_rows("combine_fwd", got, out_want, S, H, r.tok_empty, dt->tol);
    free(got);

    /* combine_bwd: drows for kept rows (spare rows untouched), dtopk_w
     * for every slot (0 for a dropped one); then each output alone. */
    float *dout = host_values((size_t)S * H, seed + 3, dt);
    void *dout_d = dev_values(s, dt, dout, (size_t)S * H);
    float *drows_want = host_fill((size_t)R * H, SENTINEL);
    float *dw_want = xmalloc((size_t)n_slots * sizeof(float));
    ref_combine_bwd(&r, H, dsend, dout, drows_want, dw_want);
    unsigned char *dropped = xmalloc((size_t)n_slots);
    for (int i = 0; i < n_slots; i++)
        dropped[i] = r.row_of_slot[i] < 0;
    float *dw_garbage = host_fill((size_t)n_slots, GARBAGE);
    for (int variant = 0; variant < 3; variant++) {
        /* 0: both outputs; 1: drows only; 2: dtopk_w only */
        void *drows_d = dev_values(s, dt, sentinel, (size_t)R * H);
        float *dw_d = dev_values(s, &dt_f32, dw_garbage, (size_t)n_slots);
        CALL_OK(moe->combine_bwd(s, dt->dtype, dsend_d, ros_d, w_d, dout_d,
                                 S, k, H, variant == 2 ? NULL : drows_d,
                                 variant == 1 ? NULL : dw_d));
        const char *name = variant == 0   ? "both"
                           : variant == 1 ? "drows only"
                                          : "dtopk_w only";
        got = dev_read(s, dt, drows_d, (size_t)R * H);
        snprintf(what, sizeof(what), "combine_bwd drows (%s)", name);
        check_rows(what, got, variant == 2 ? sentinel : drows_want, R, H,
                   variant == 2 ? NULL : spare_rows, dt->tol);
        free(got);
        got = dev_read(s, &dt_f32, dw_d, (size_t)n_slots);
        snprintf(what, sizeof(what), "combine_bwd dtopk_w (%s)", name);
        check_rows(what, got, variant == 1 ? dw_garbage : dw_want, n_slots,
                   1, variant == 1 ? NULL : dropped, dt->tol);
        free(got);
        moe->free_mem(drows_d);
        moe->free_mem(dw_d);
    }

    /* No slot (k = 0): pack_bwd and combine_fwd still write zeros; no
     * element (H = 0): combine_bwd's dtopk_w is zeros. */
    float *zeros = host_fill((size_t)S * H, 0.0f);
    void *z_d = dev_values(s, dt, garbage, (size_t)S * H);
    CALL_OK(moe->pack_bwd(s, dt->dtype, NULL, NULL, S, 0, H, z_d));
    got = dev_read(s, dt, z_d, (size_t)S * H);
    check_rows("pack_bwd k=0", got, zeros, S, H, NULL, 0.0);
    free(got);
    moe->free_mem(z_d);
    z_d = dev_values(s, dt, garbage, (size_t)S * H);
    CALL_OK(moe->combine_fwd(s, dt->dtype, NULL, NULL, NULL, S, 0, H, z_d));
    got = dev_read(s, dt, z_d, (size_t)S * H);
    check_rows("combine_fwd k=0", got, zeros, S, H, NULL, 0.0);
    free(got);
    moe->free_mem(z_d);
    float *dw_d = dev_values(s, &dt_f32, dw_garbage, (size_t)n_slots);
    CALL_OK(moe->combine_bwd(s, dt->dtype, NULL, ros_d, NULL, NULL, S, k, 0,
                             NULL, dw_d));
    got = dev_read(s, &dt_f32, dw_d, (size_t)n_slots);
    check_rows("combine_bwd H=0 dtopk_w", got, zeros, n_slots, 1, NULL, 0.0);
    free(got);
    moe->free_mem(dw_d);

    moe->free_mem(ros_d);
    moe->free_mem(w_d);
    moe->free_mem(x_d);
    moe->free_mem(send_d);
    moe->free_mem(dsend_d);
    moe->free_mem(dx_d);
    moe->free_mem(src_row_d);
    moe->free_mem(dst_d);
    moe->free_mem(out_d);
    moe->free_mem(dout_d);
    free(x);
    free(want);
    free(sentinel);
    free(dsend);
    free(dx_want);
    free(garbage);
    free(src_row);
    free(gather_want);
    free(dst_garbage);
    free(out_want);
    free(dout);
    free(drows_want);
    free(dw_want);
    free(dropped);
    free(dw_garbage);
    free(zeros);
    free(spare_rows);
    route_free(&r);
}

/* ---- stream order ----------------------------------------------------- */

/* Holds the stream for a while, so that work queued after it and not
 * ordered behind it would show by running first. */
static void CUDART_CB hold_stream(void *arg)
{
    (void)arg;
    usleep(200 * 1000);
}

/* On stream s, behind a hold: a copy of new values into x, then pack,
 * must see them; then pack, and an upload over x, must not. */
static void check_order(const char *name, cudaStream_t s)
{
    const dt_t *dt = &dt_f32;
    int S = 16, k = 2, H = 32;
    route_t r;
    route_make(&r, S, k, 99);
    int R = r.n_rows;
    float *x_old = host_values((size_t)S * H, 5, dt);
    float *x_new = host_values((size_t)S * H, 6, dt);
    float *sentinel = host_fill((size_t)R * H, SENTINEL);
    float *want = host_fill((size_t)R * H, SENTINEL);
    int32_t *ros_d = dev_ints(s, r.row_of_slot, (size_t)S * k);
    void *x_d = dev_values(s, dt, x_old, (size_t)S * H);
    void *send_d = dev_values(s, dt, sentinel, (size_t)R * H);
    float *pinned = NULL;
    CUDA_OK(cudaMallocHost((void **)&pinned, (size_t)S * H * sizeof(float)));
    memcpy(pinned, x_new, (size_t)S * H * sizeof(float));

    CUDA_OK(cudaLaunchHostFunc(s, hold_stream, NULL));
    CUDA_OK(cudaMemcpyAsync(x_d, pinned, (size_t)S * H * sizeof(float),
                            cudaMemcpyHostToDevice, s));
    CALL_OK(moe->pack(s, dt->dtype, x_d, ros_d, S, k, H, send_d));
    float *got = dev_read(s, dt, send_d, (size_t)R * H);
    ref_pack(&r, H, x_new, want);
    char what[96];
    snprintf(what, sizeof(what), "%s: pack after queued work", name);
    check_rows(what, got, want, R, H, NULL, 0.0);
    free(got);

    /* x holds x_new now; pack behind a hold, then upload x_old over x:
     * the pack must still read x_new. */
    CALL_OK(moe->upload(s, send_d, sentinel, (size_t)R * H * sizeof(float)));
    CUDA_OK(cudaLaunchHostFunc(s, hold_stream, NULL));
    CALL_OK(moe->pack(s, dt->dtype, x_d, ros_d, S, k, H, send_d));
    CALL_OK(moe->upload(s, x_d, x_old, (size_t)S * H * sizeof(float)));
    got = dev_read(s, dt, send_d, (size_t)R * H);
    snprintf(what, sizeof(what), "%s: upload after queued pack", name);
    check_rows(what, got, want, R, H, NULL, 0.0);
    free(got);

    CUDA_OK(cudaFreeHost(pinned));
    moe->free_mem(ros_d);
    moe->free_mem(x_d);
    moe->free_mem(send_d);
    free(x_old);
    free(x_new);
    free(sentinel);
    free(want);
    route_free(&r);
}

/* ---- threads ---------------------------------------------------------- */

/* Threads at once, each on its own stream with its own data: the shared
 * context must put every kernel on its caller's stream. */
typedef struct {
    int id;
} thread_arg_t;

static void *thread_run(void *varg)
{
    thread_arg_t *a = varg;
    const dt_t *dt = a->id % 2 ? &dt_bf16 : &dt_f32;
    int S = 24, k = 2, H = 48;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    route_t r;
    route_make(&r, S, k, 1000u + (uint32_t)a->id);
    int R = r.n_rows;
    float *rows = host_values((size_t)R * H, 2000u + (uint32_t)a->id, dt);
    float *want = xmalloc((size_t)S * H * sizeof(float));
    ref_sum(&r, H, rows, r.topk_w, want);
    int32_t *ros_d = dev_ints(s, r.row_of_slot, (size_t)S * k);
    float *w_d = dev_alloc((size_t)S * k * sizeof(float));
    CALL_OK(moe->upload(s, w_d, r.topk_w, (size_t)S * k * sizeof(float)));
    void *rows_d = dev_values(s, dt, rows, (size_t)R * H);
    void *out_d = dev_alloc((size_t)S * H * dt->esize);
    double worst = 0.0;
    for (int it = 0; it < THREAD_ITERS; it++) {
        CALL_OK(moe->combine_fwd(s, dt->dtype, rows_d, ros_d, w_d, S, k, H,
                                 out_d));
        float *got = dev_read(s, dt, out_d, (size_t)S * H);
        double max_err = 0.0, max_want = 0.0;
        for (size_t i = 0; i < (size_t)S * H; i++) {
            double err = isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]);
            max_err = err > max_err ? err : max_err;
            max_want = fabs(want[i]) > max_want ? fabs(want[i]) : max_want;
        }
        double rel = max_err / max_want;
        worst = rel > worst ? rel : worst;
        free(got);
        /* Clobber the output on the stream for the next round. */
        CUDA_OK(cudaMemsetAsync(out_d, 0xff, (size_t)S * H * dt->esize, s));
    }
    CHECK(worst <= dt->tol, "thread %d (%s): relative error %.3g > %.0e",
          a->id, dt->name, worst, dt->tol);
    printf("  thread %d (%s), %d rounds: rel err %.2g\n", a->id, dt->name,
           THREAD_ITERS, worst);
    moe->free_mem(ros_d);
    moe->free_mem(w_d);
    moe->free_mem(rows_d);
    moe->free_mem(out_d);
    CUDA_OK(cudaStreamDestroy(s));
    free(rows);
    free(want);
    route_free(&r);
    return NULL;
}

static void check_threads(void)
{
    printf("%d threads, each on its own stream:\n", N_THREADS);
    pthread_t tid[N_THREADS];
    thread_arg_t args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i].id = i;
        CHECK_EXIT(pthread_create(&tid[i], NULL, thread_run, &args[i]) == 0,
                   "pthread_create");
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(tid[i], NULL);
}

/* ---- the legacy default stream, and memory ---------------------------- */

static void check_misc(void)
{
    /* alloc(0): a valid pointer to no bytes. */
    void *none = moe->alloc(0);
    CHECK(none != NULL, "alloc(0): NULL (%s)", moe->error_string());
    moe->free_mem(none);

    /* NULL stream: the legacy default stream. */
    const dt_t *dt = &dt_bf16;
    int n = 5, H = 24;
    float *src = host_values((size_t)n * H, 77, dt);
    int32_t idx[5] = {4, -1, 0, 0, 2};
    float *want = xmalloc((size_t)n * H * sizeof(float));
    ref_gather(src, idx, n, H, want);
    void *src_d = dev_values(NULL, dt, src, (size_t)n * H);
    int32_t *idx_d = dev_ints(NULL, idx, (size_t)n);
    void *dst_d = dev_alloc((size_t)n * H * dt->esize);
    CALL_OK(moe->gather_rows(NULL, dt->dtype, src_d, idx_d, n, H, dst_d));
    float *got = dev_read(NULL, dt, dst_d, (size_t)n * H);
    printf("legacy default stream:\n");
    check_rows("gather_rows (stream NULL)", got, want, n, H, NULL, 0.0);
    free(got);
    moe->free_mem(src_d);
    moe->free_mem(idx_d);
    moe->free_mem(dst_d);
    free(src);
    free(want);
}

int main(int argc, char **argv)
{
    plugin_load(argc > 1 ? argv[1] : NULL);
    check_arguments();
    printf("argument checks: %s\n", check_failures ? "FAILED" : "ok");

    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err)
                                  : "cudaGetDeviceCount found 0");
        return check_failures ? 1 : TEST_SKIP;
    }
    CUDA_OK(cudaSetDevice(0));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    uint32_t seed = 1;
    const int shapes[][3] = {{37, 3, 64}, {19, 2, 13}, {8, 1, 8}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        check_kernels(s, &dt_f32, shapes[i][0], shapes[i][1], shapes[i][2],
                      seed += 10);
        check_kernels(s, &dt_bf16, shapes[i][0], shapes[i][1], shapes[i][2],
                      seed += 10);
    }
    printf("stream order:\n");
    check_order("cudaStreamCreate stream", s);
    cudaStream_t nb;
    CUDA_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    check_order("non-blocking stream", nb);
    CUDA_OK(cudaStreamDestroy(nb));
    check_threads();
    check_misc();
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaDeviceSynchronize());
    if (check_failures) {
        fprintf(stderr, "FAILED: %d check(s)\n", (int)check_failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
