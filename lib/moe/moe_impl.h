/* The objects behind swy_moe_plan_t and swy_moe_route_t, and the chunked
 * exchange engine shared by dispatch, combine and their backward passes.
 * lib/moe talks to the rest of Switchyard through the public API only.
 *
 * Three row layouts per route (offset arrays are monotone prefix sums, so
 * block i occupies rows [off[i], off[i+1])):
 *  - token side (tok_off, index (r*d + j)*nl + e): rows this rank sends to
 *    local expert e of rank r in chunk j; per (r, e) block, token order.
 *    Rank-major so that each chunk's rows for one peer are contiguous: one
 *    all-to-all per chunk.
 *  - expert side (exp_off, index (e*d + j)*W + r): the user's expert
 *    buffers, expert-major so each expert's (and each expert chunk's) rows
 *    are contiguous.
 *  - staging (stg_off, index (j*W + r)*nl + e): the expert side as it
 *    travels, chunk- then rank-major, so each chunk's rows from one peer
 *    are contiguous. With one local expert it coincides with the expert
 *    side and the user's buffer is used in place.
 * A (r, e) block of n rows is cut into d parts, part j being rows
 * [n*j/d, n*(j+1)/d): sender and receiver derive the same cut from the
 * exchanged count. */
#ifndef SWY_MOE_IMPL_H
#define SWY_MOE_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "switchyard/moe.h"
#include "switchyard/swy_devmoe_v1.h"
#include "switchyard/switchyard.h"
#include "util/half.h"

/* Row buffers that routes return to their plan for the next routes:
 * swy_mem_alloc memory, which the comm's local peers read and write in
 * place (a route's tok_buf and stage_buf are all-to-all send buffers),
 * and whose pages stay mapped, here and at the peers, from step to
 * step. */
#define SWY_MOE_POOL_MAX 32
typedef struct {
    char *ptr;
    size_t bytes;
} swy_moe_buf_t;

struct swy_moe_plan {
    swy_comm_t comm;
    int rank, nranks;
    swy_moe_config_t cfg;   /* the caller's, completed to this moe.h's */
    /* Device rows (SWY_MOE_ROWS_DEVICE): the plugin's row kernels, and
     * the stream every kernel and copy of the plan goes on; NULL for host
     * rows (the pool then holds swy_mem_alloc memory). */
    const swy_devmoe_v1_t *dev;
    void *stream;
    int n_local;   /* experts per rank after packing */
    int n_experts; /* W * n_local */
    pthread_mutex_t pool_lock;
    swy_moe_buf_t pool[SWY_MOE_POOL_MAX]; /* free buffers */
    int npool;
};

/* A buffer of at least `bytes` from the plan's free ones, or a new one
 * (a quarter larger, for the next routes' counts); NULL when out of
 * memory. Back with swy_moe_buf_put (NULL ok). */
swy_moe_buf_t swy_moe_buf_get(struct swy_moe_plan *plan, size_t bytes);
void swy_moe_buf_put(struct swy_moe_plan *plan, swy_moe_buf_t buf);

typedef enum {
    SWY_MOE_XCHG_NONE = 0,
    SWY_MOE_XCHG_DISPATCH,     /* token side -> expert side */
    SWY_MOE_XCHG_COMBINE_BWD,  /* token side -> expert side */
    SWY_MOE_XCHG_COMBINE,      /* expert side -> token side */
    SWY_MOE_XCHG_DISPATCH_BWD, /* expert side -> token side */
} swy_moe_xchg_kind_t;

/* One exchange in flight: a forward one lands in the expert-side buffer,
 * a reverse one in a token-side buffer. */
typedef struct {
    swy_moe_xchg_kind_t kind;  /* SWY_MOE_XCHG_NONE when idle */
    int posted;                /* chunks posted (reverse: released) */
    int nreqs;                 /* requests in reqs (all d at chunk 0) */
    int completed;             /* chunks completed */
    swy_request_t *reqs;       /* [d] */
    unsigned char *chunk_done; /* [d] */
    char *expert_buf;          /* forward: where chunks land */
} swy_moe_xchg_t;

struct swy_moe_route {
    struct swy_moe_plan *plan;
    int S, k, W, nl, d;
    size_t H;
    swy_dtype_t dtype;      /* of every row: fp32, fp16, bf16 or fp64 */
    size_t rb;              /* bytes per row: H * element size */
    int64_t send_rows, recv_rows;
    int64_t *send_count;    /* [W*nl], index r*nl + e */
    int64_t *recv_count;    /* [W*nl], index r*nl + e (from rank r) */
    int64_t *slot_row;      /* [S*k] row in the token-side buffers or -1 */
    int64_t *tok_off;       /* [W*d*nl + 1] */
    int64_t *exp_off;       /* [nl*d*W + 1] */
    int64_t *stg_off;       /* [d*W*nl + 1] */
    int64_t *expert_offset; /* [nl + 1] */
    int64_t *chunk_offset;  /* [nl*(d + 1)] */
    /* Token-side rows: tok_buf is the dispatch and combine-backward send
     * buffer and the dispatch-backward receive buffer; comb_buf receives
     * the combine and is kept for combine backward. */
    char *tok_buf, *comb_buf;
    char *stage_buf;        /* [recv_rows] rows when nl > 1, else NULL */
    swy_moe_buf_t bufs[4];  /* the plan's buffers behind the three, and
                               the device indices below */
    /* Device plans: int32 copies on the device of slot_row ([S*k]), and
     * for nl > 1 of the staging row of every expert-side row
     * (exp_from_stg, [recv_rows]) and the expert-side row of every
     * staging row (stg_from_exp, [recv_rows]); all in bufs[3]. */
    int32_t *slot_row_d, *exp_from_stg_d, *stg_from_exp_d;
    void *acc;              /* [H]: a row summed in fp32 (fp64 for
                               fp64 rows; see rows.c) */
    size_t *scratch;        /* 4*W*d counts and displacements */
    /* At most one exchange per direction in flight, so that a pipelined
     * combine (reverse) overlaps the dispatch (forward) it follows. */
    swy_moe_xchg_t fwd, rev;
    int combined;           /* comb_buf holds a completed combine */
};

/* First row of part j of a block of n rows cut into d parts. */
static inline int64_t swy_moe_part_begin(int64_t n, int j, int d)
{
    return n * j / d;
}

const char *swy_moe_xchg_name(swy_moe_xchg_kind_t kind);

/* Checks before a forward or a blocking exchange starts: route non-NULL
 * and nothing in flight in either direction. */
swy_status_t swy_moe_check_idle(swy_moe_route_t route, const char *fn);
/* Checks before a reverse exchange starts: route non-NULL, no reverse
 * exchange in flight. A forward one may still be landing. */
swy_status_t swy_moe_rev_check_idle(swy_moe_route_t route, const char *fn);

/* Forward direction: post every chunk of tok_buf (already packed) into
 * the expert-side buffer expert_buf. On failure, whatever was posted is
 * waited for and the route is idle again. */
swy_status_t swy_moe_fwd_post(swy_moe_route_t route, swy_moe_xchg_kind_t kind,
                              void *expert_buf, const swy_op_attr_t *attr,
                              const char *fn);
/* Wait for forward chunk j and unstage it into expert_buf. */
swy_status_t swy_moe_fwd_wait_chunk(swy_moe_route_t route, int chunk);
/* Forward direction, blocking: wait for every chunk. */
swy_status_t swy_moe_fwd_wait_all(swy_moe_route_t route);

/* Reverse direction: post chunk j of the expert-side buffer expert_buf
 * into the token-side buffer of `kind` (comb_buf or tok_buf). Chunk 0
 * starts the exchange. While a forward exchange is in flight, chunk j may
 * only go once the forward chunk j is complete: both use the same staging
 * and token-side rows of chunk j. */
swy_status_t swy_moe_rev_post_chunk(swy_moe_route_t route,
                                    swy_moe_xchg_kind_t kind, int chunk,
                                    const void *expert_buf,
                                    const swy_op_attr_t *attr,
                                    const char *fn);
/* Check that the reverse exchange `kind` has every chunk posted. */
swy_status_t swy_moe_rev_check_posted(swy_moe_route_t route,
                                      swy_moe_xchg_kind_t kind,
                                      const char *fn);
/* Wait for every posted chunk of the reverse exchange; the route is idle
 * afterwards whatever the outcome. */
swy_status_t swy_moe_rev_wait_all(swy_moe_route_t route);

/* Wait for and release every request still outstanding in x; idle. */
void swy_moe_xchg_drain(swy_moe_route_t route, swy_moe_xchg_t *x);

/* Device rows (device.c). */
/* Is ptr in the kind of memory of the plan's rows? SWY_ERR_INVALID_ARG
 * naming fn and what otherwise. NULL passes (the callers check it). */
swy_status_t swy_moe_check_mem(const struct swy_moe_plan *plan,
                               const void *ptr, const char *what,
                               const char *fn);
/* attr's stream against the plan's: NULL or the same for device plans
 * (ignored for host rows). */
swy_status_t swy_moe_check_attr(const struct swy_moe_plan *plan,
                                const swy_op_attr_t *attr, const char *fn);
/* A failure of the plugin's call what: SWY_ERR_TRANSPORT unless status
 * says more, with the plugin's text. */
swy_status_t swy_moe_dev_fail(const struct swy_moe_plan *plan,
                              swy_status_t status, const char *fn,
                              const char *what);
/* topk_idx on the device: its S*k entries copied into *host_p (freed by
 * the caller with swy_free), after the work on the plan's stream. */
swy_status_t swy_moe_dev_topk(const struct swy_moe_plan *plan,
                              const int *topk_idx, int S, int **host_p);
/* Build the device index arrays of a routed device plan (bufs[3]). */
swy_status_t swy_moe_dev_indices(swy_moe_route_t route);
/* Move chunk j's rows between the staging and the expert-side buffer on
 * the device, as restage_chunk does on the host. */
swy_status_t swy_moe_dev_restage(swy_moe_route_t route, int j,
                                 char *expert_buf, int to_expert,
                                 const char *fn);
/* Wait for the work queued on the plan's stream. */
swy_status_t swy_moe_dev_sync(swy_moe_route_t route, const char *fn);

/* Row arithmetic in the dtype's precision (rows.c). topk_w and
 * grad_topk_w arrays are float, or double with fp64 rows. */
double swy_moe_weight(const swy_moe_route_t route, const void *w,
                      size_t slot);
void swy_moe_set_weight(const swy_moe_route_t route, void *w, size_t slot,
                        double v);
/* A token's row as a sum over its slots: acc = 0, acc += w * row per
 * slot, then store acc (rounded once) into the output row. */
void swy_moe_acc_zero(swy_moe_route_t route);
void swy_moe_acc_add(swy_moe_route_t route, double w, const char *row);
void swy_moe_acc_store(swy_moe_route_t route, char *row);
/* dst = w * g; returns dot(g, y) summed in double. */
double swy_moe_scale_row(swy_moe_route_t route, const char *g,
                         const char *y, double w, char *dst);

/* Element h of an fp32, fp16 or bf16 row, as fp32, and back (round to
 * nearest even). Sums over slots run in fp32 and round once. fp64 rows
 * go through the helpers above only. */
static inline float swy_moe_get(const swy_moe_route_t route, const char *row,
                                size_t h)
{
    uint16_t b;
    float f;
    switch (route->dtype) {
    case SWY_FLOAT16:
        memcpy(&b, row + 2 * h, 2);
        return swy_half_to_float(b);
    case SWY_BFLOAT16:
        memcpy(&b, row + 2 * h, 2);
        return swy_bf16_to_float(b);
    default:
        memcpy(&f, row + 4 * h, 4);
        return f;
    }
}

static inline void swy_moe_put(const swy_moe_route_t route, char *row,
                               size_t h, float v)
{
    uint16_t b;
    switch (route->dtype) {
    case SWY_FLOAT16:
        b = swy_float_to_half(v);
        memcpy(row + 2 * h, &b, 2);
        break;
    case SWY_BFLOAT16:
        b = swy_float_to_bf16(v);
        memcpy(row + 2 * h, &b, 2);
        break;
    default:
        memcpy(row + 4 * h, &v, 4);
        break;
    }
}

#endif
