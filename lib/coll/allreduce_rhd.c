/* Allreduce by recursive halving and doubling (Rabenseifner), for a power
 * of two W >= 4 ranks and host buffers: 2 log2(W) steps instead of the
 * ring's 2 (W - 1), moving the same bytes. Below a few MiB each step's
 * fixed cost (a receive completing, the progress thread waking, the next
 * send leaving) dominates, so fewer steps win; above, the ring's per-chunk
 * pipelining wins. swy_coll_allreduce_choose() in algos.c chooses, with
 * the two-step direct algorithm between them (the figures are there).
 * It needs count >= W: a step with nothing to receive would not end.
 *
 * The buffer is cut into W segments as in the ring. Reduce-scatter, step
 * k = 0..L-1 (L = log2 W), partner rank ^ b_k with b_k = 1 << k: each
 * rank holds a range of 2 h segments (h = W >> (k + 1)), keeps the half
 * given by its bit (rank & b_k), sends the other half to the partner and
 * reduces the partner's half of the kept range into recvbuf. After L
 * steps rank r holds the full reduction of one segment, own_segment(r)
 * (its bits reversed; computed there only, so every rank ends with
 * identical bits). Allgather, step j = 0..L-1, partner rank ^ b_{L-1-j}:
 * swap the owned range (the one held before reduce-scatter step L - j)
 * with the partner; the ranges double.
 * The nearest partners come first: step 0, which moves half the buffer,
 * pairs ranks 2i and 2i + 1, step 1 a quarter with rank ^ 2, and so on.
 * Launchers place consecutive ranks on one host, so across hosts only the
 * small late steps travel: D/2 bytes per rank each way for a buffer of D
 * on two hosts, against the ring's 2 (W - 1) / W D through the uplink. A step's sends leave once every chunk
 * of the previous step landed (the data they carry was just reduced or
 * received); all receives are posted when the op starts. */
#include "coll/coll.h"
#include "util/alloc.h"
#include "util/status.h"

enum { PHASE_RS = 0, PHASE_AG = 1 };

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks, levels;
    size_t dsize, chunk_elems, max_chunks;
    char *scratch;          /* the partner's partials of every RS step */
    size_t scratch_bytes;
    size_t *scratch_off;    /* [levels] byte offset of step k's slot */
    int *left;              /* [2 * levels] chunks still to handle */
    /* Reduce-scatter steps are reduced in order: a chunk of step k + 1 may
     * land before step k is reduced (the partner of k + 1 was quicker)
     * and must wait, since it adds to step k's result. */
    int rs_step;            /* the step being reduced */
    uint8_t *landed;        /* [levels * max_chunks] landed, not reduced */
    int ag_next;            /* the next allgather step to send */
};

static size_t seg_offset(const swy_coll_state_t *st, int seg)
{
    return swy_coll_seg_offset(st->args.count, st->nranks, seg);
}

/* The partner bit of reduce-scatter step k (nearest first). */
static int rs_bit(int k)
{
    return 1 << k;
}

/* Segments [lo, hi) that rank holds before reduce-scatter step k. */
static void rs_range(const swy_coll_state_t *st, int rank, int k, int *lo,
                     int *hi)
{
    *lo = 0;
    *hi = st->nranks;
    for (int i = 0; i < k; i++) {
        int mid = *lo + (st->nranks >> (i + 1));
        if (rank & rs_bit(i))
            *lo = mid;
        else
            *hi = mid;
    }
}

/* The halves of step k: kept (received and reduced here) and given. */
static void rs_halves(const swy_coll_state_t *st, int k, int *keep_lo,
                      int *keep_hi, int *give_lo, int *give_hi)
{
    int lo, hi;
    rs_range(st, st->rank, k, &lo, &hi);
    int mid = lo + (st->nranks >> (k + 1));
    if (st->rank & rs_bit(k)) {
        *keep_lo = mid, *keep_hi = hi, *give_lo = lo, *give_hi = mid;
    } else {
        *keep_lo = lo, *keep_hi = mid, *give_lo = mid, *give_hi = hi;
    }
}

/* Segments rank owns before allgather step j: 2^j of them, the range it
 * held before reduce-scatter step L - j. */
static void ag_range(const swy_coll_state_t *st, int j, int rank, int *lo,
                     int *hi)
{
    rs_range(st, rank, st->levels - j, lo, hi);
}

/* The partner of allgather step j: the reduce-scatter's, in reverse. */
static int ag_partner(const swy_coll_state_t *st, int j)
{
    return st->rank ^ rs_bit(st->levels - 1 - j);
}

static size_t range_chunks(const swy_coll_state_t *st, int lo, int hi)
{
    size_t n = seg_offset(st, hi) - seg_offset(st, lo);
    return (n + st->chunk_elems - 1) / st->chunk_elems;
}

/* Transfers of segments [lo, hi) in chunks; base holds element base_elem
 * (0 for the user's buffers, the slot's first element for scratch). */
static void emit_range(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                       int phase, int step, int peer, int is_send, char *base,
                       size_t base_elem, int lo, int hi)
{
    size_t first = seg_offset(st, lo), n = seg_offset(st, hi) - first;
    size_t gstep = (size_t)(phase == PHASE_AG ? st->levels : 0) + (size_t)step;
    for (size_t c = 0; c * st->chunk_elems < n; c++) {
        size_t off = c * st->chunk_elems;
        swy_coll_xfer_t x = {
            .peer = peer, .is_send = (uint8_t)is_send, .mem = SWY_MEM_HOST,
            .tag = (uint32_t)(gstep * st->max_chunks + c),
            .buf = base + (first - base_elem + off) * st->dsize,
            .bytes = SWY_MIN(st->chunk_elems, n - off) * st->dsize,
            .cookie = swy_coll_cookie(phase, step, c)};
        emit->post(emit->ctx, &x);
    }
}

static swy_status_t rhd_create(const swy_coll_args_t *args, int rank,
                               int nranks, size_t partition_bytes,
                               swy_coll_state_t **state_p)
{
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allreduce/rhd", args, rank, nranks,
                          SWY_COLL_ANY_MEM, 0);
    while ((1 << st->levels) < nranks)
        st->levels++;
    /* The largest transfer is half the buffer plus rounding. */
    size_t max_range = seg_offset(st, nranks / 2);
    size_t steps = 2 * (size_t)st->levels;
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, max_range, SWY_COLL_TAG_MAX / steps);
    st->max_chunks = (max_range + st->chunk_elems - 1) / st->chunk_elems;
    st->scratch_off = swy_calloc((size_t)st->levels, sizeof(size_t));
    st->left = swy_calloc(steps, sizeof(int));
    st->landed = swy_calloc((size_t)st->levels * st->max_chunks, 1);
    /* Step k brings the partner's copy of the half we keep, from its
     * sendbuf (step 0) or recvbuf (its partial sums). */
    size_t total = 0;
    int overflow = 0;
    for (int k = 0; st->scratch_off != NULL && k < st->levels && !overflow;
         k++) {
        int kl, kh, gl, gh;
        rs_halves(st, k, &kl, &kh, &gl, &gh);
        const char *mirror =
            (const char *)(k == 0 ? args->sendbuf : args->recvbuf) +
            seg_offset(st, kl) * st->dsize;
        overflow = swy_coll_slot_place(
                       &total,
                       (seg_offset(st, kh) - seg_offset(st, kl)) * st->dsize,
                       mirror, &st->scratch_off[k]) != 0;
    }
    st->scratch_bytes = total;
    st->scratch = st->scratch_off != NULL && !overflow
                      ? swy_coll_scratch_get(st->scratch_bytes)
                      : NULL;
    if (st->scratch == NULL || st->left == NULL || st->landed == NULL) {
        swy_free(st->landed);
        swy_coll_scratch_put(st->scratch, st->scratch_bytes);
        swy_free(st->scratch_off);
        swy_free(st->left);
        swy_free(st);
        return SWY_ERR_NO_MEMORY;
    }
    *state_p = st;
    return SWY_OK;
}

static void rs_send(swy_coll_state_t *st, const swy_coll_emit_t *emit, int k)
{
    int kl, kh, gl, gh;
    rs_halves(st, k, &kl, &kh, &gl, &gh);
    /* Step 0 gives away our own, unreduced values. */
    char *base = (char *)(k == 0 ? st->args.sendbuf : st->args.recvbuf);
    emit_range(st, emit, PHASE_RS, k, st->rank ^ rs_bit(k), 1, base, 0, gl,
               gh);
}

static void ag_send(swy_coll_state_t *st, const swy_coll_emit_t *emit, int j)
{
    int lo, hi;
    ag_range(st, j, st->rank, &lo, &hi);
    emit_range(st, emit, PHASE_AG, j, ag_partner(st, j), 1,
               (char *)st->args.recvbuf, 0, lo, hi);
}

static swy_status_t rhd_start(swy_coll_state_t *st,
                              const swy_coll_emit_t *emit)
{
    for (int k = 0; k < st->levels; k++) {
        int kl, kh, gl, gh;
        rs_halves(st, k, &kl, &kh, &gl, &gh);
        st->left[k] = (int)range_chunks(st, kl, kh);
        emit_range(st, emit, PHASE_RS, k, st->rank ^ rs_bit(k), 0,
                   st->scratch + st->scratch_off[k],
                   seg_offset(st, kl), kl, kh);
    }
    for (int j = 0; j < st->levels; j++) {
        int partner = ag_partner(st, j), lo, hi;
        ag_range(st, j, partner, &lo, &hi);
        st->left[st->levels + j] = (int)range_chunks(st, lo, hi);
        emit_range(st, emit, PHASE_AG, j, partner, 0,
                   (char *)st->args.recvbuf, 0, lo, hi);
    }
    rs_send(st, emit, 0);
    return SWY_OK;
}

/* Allgather step j sends once the reduce-scatter is done and every
 * chunk of step j - 1 arrived (a quick partner's chunks may land before
 * our own segment is final: they must not release our sends). */
static void ag_advance(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    while (st->rs_step == st->levels && st->ag_next < st->levels &&
           (st->ag_next == 0 || st->left[st->levels + st->ag_next - 1] == 0))
        ag_send(st, emit, st->ag_next++);
}

/* Reduce chunk c of reduce-scatter step k (landed in its scratch slot)
 * into recvbuf. */
static void rs_reduce(swy_coll_state_t *st, int k, size_t c)
{
    const swy_coll_args_t *a = &st->args;
    int kl, kh, gl, gh;
    rs_halves(st, k, &kl, &kh, &gl, &gh);
    size_t first = seg_offset(st, kl), len = seg_offset(st, kh) - first;
    size_t off = c * st->chunk_elems, n = SWY_MIN(st->chunk_elems, len - off);
    char *dst = (char *)a->recvbuf + (first + off) * st->dsize;
    const char *mine = (const char *)(k == 0 ? a->sendbuf : a->recvbuf) +
                       (first + off) * st->dsize;
    const char *theirs = st->scratch + st->scratch_off[k] + off * st->dsize;
    swy_coll_reduce(dst, mine, theirs, n, a->dtype, a->redop);
    st->left[k]--;
}

static swy_status_t rhd_recv_done(swy_coll_state_t *st,
                                  const swy_coll_xfer_t *xfer,
                                  const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int phase = swy_coll_cookie_phase(xfer->cookie);
    int step = swy_coll_cookie_step(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    if (phase == PHASE_AG) {
        st->left[st->levels + step]--;
        ag_advance(st, emit);
        return SWY_OK;
    }
    if (step != st->rs_step) {
        st->landed[(size_t)step * st->max_chunks + chunk] = 1;
        return SWY_OK;
    }
    rs_reduce(st, step, chunk);
    /* Finish steps in order, taking up chunks that landed early. */
    while (st->left[st->rs_step] == 0) {
        int k = ++st->rs_step;
        if (k == st->levels) { /* our segment is complete */
            if (a->redop == SWY_AVG) {
                int lo, hi;
                rs_range(st, st->rank, st->levels, &lo, &hi);
                size_t off = seg_offset(st, lo);
                swy_coll_scale_avg((char *)a->recvbuf + off * st->dsize,
                                   seg_offset(st, hi) - off, a->dtype,
                                   st->nranks);
            }
            ag_advance(st, emit);
            break;
        }
        rs_send(st, emit, k);
        for (size_t c = 0; c < st->max_chunks; c++)
            if (st->landed[(size_t)k * st->max_chunks + c]) {
                st->landed[(size_t)k * st->max_chunks + c] = 0;
                rs_reduce(st, k, c);
            }
    }
    return SWY_OK;
}

static void rhd_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_coll_scratch_put(st->scratch, st->scratch_bytes);
    swy_free(st->scratch_off);
    swy_free(st->left);
    swy_free(st->landed);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allreduce_rhd = {
    .name = "allreduce/rhd", .create = rhd_create, .start = rhd_start,
    .recv_done = rhd_recv_done, .finish = NULL, .destroy = rhd_destroy};
