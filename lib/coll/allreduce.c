/* Allreduce as a ring: reduce-scatter (W-1 steps) then allgather (W-1
 * steps), each segment cut into chunks. Dependencies are per chunk, so
 * chunk c of step s+1 leaves as soon as chunk c of step s landed and was
 * reduced: the steps pipeline. Each segment's final value is computed on
 * one rank and copied to the others, so every rank ends with identical
 * bits whatever the order in which micro-ops ran.
 *
 * Segment j (j = 0..W-1) is the j-th of W near-equal slices of the
 * buffer. At reduce-scatter step s rank r sends segment r-s and receives
 * segment r-s-1 (mod W) into a scratch slot, then writes recvbuf = its own
 * contribution (sendbuf) op the incoming partial; after W-1 steps it owns
 * the full reduction of segment r+1. Allgather step t sends segment r+1-t
 * and receives segment r-t straight into recvbuf. Every segment of recvbuf
 * is written exactly once (by a reduction or by the allgather), so an
 * out-of-place allreduce needs no initial copy of sendbuf.
 *
 * Device buffers: the host reduces, so on more than one rank the ring
 * runs in place on a pinned host copy (one device-to-host copy when the
 * op starts, one host-to-device copy of the result in finish(), before
 * the request completes); every transfer is then host memory. On one rank
 * the op is a copy, done by the device. */

#include "coll/coll.h"
#include "transport/device.h"
#include "util/alloc.h"
#include "util/status.h"

enum { PHASE_RS = 0, PHASE_AG = 1 };

struct swy_coll_state {
    swy_coll_args_t args;
    int rank, nranks;
    size_t dsize, chunk_elems, max_chunks, max_seg;
    char *scratch; /* W-1 slots, one per reduce-scatter step */
    size_t scratch_bytes;
    size_t *slot_at; /* [W-1] byte offset of each reduce-scatter step's slot */
    /* Staged device op: args.sendbuf == args.recvbuf == stage (pinned host
     * memory from the device services); user_* are the caller's buffers. */
    void *stage;
    size_t stage_bytes;
    const void *user_send;
    void *user_recv;
};

static size_t seg_offset(const swy_coll_state_t *st, int seg)
{
    return swy_coll_seg_offset(st->args.count, st->nranks, seg);
}

static size_t seg_count(const swy_coll_state_t *st, int seg)
{
    return seg_offset(st, seg + 1) - seg_offset(st, seg);
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static uint32_t tag_of(const swy_coll_state_t *st, int phase, int step,
                       size_t chunk)
{
    size_t global_step = (size_t)(phase == PHASE_AG ? st->nranks - 1 : 0) +
                         (size_t)step;
    return (uint32_t)(global_step * st->max_chunks + chunk);
}

static swy_status_t ar_stage_create(swy_coll_state_t *st)
{
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev == NULL)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "coll", "allreduce of %s "
                           "memory: no device services",
                           swy_mem_type_name(st->args.mem));
    /* count * dsize was checked against overflow when the op was posted. */
    st->stage_bytes = st->args.count * st->dsize;
    st->stage = dev->host_alloc(st->stage_bytes);
    if (st->stage == NULL)
        return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "allreduce of device "
                           "memory: cannot get %zu bytes of pinned host "
                           "memory to stage it: %s", st->stage_bytes,
                           dev->error_string());
    st->user_send = st->args.sendbuf;
    st->user_recv = st->args.recvbuf;
    st->args.sendbuf = st->stage;
    st->args.recvbuf = st->stage;
    return SWY_OK;
}

static void ar_destroy(swy_coll_state_t *st);

static swy_status_t ar_create(const swy_coll_args_t *args, int rank,
                              int nranks, size_t partition_bytes,
                              swy_coll_state_t **state_p)
{
    size_t steps = 2 * (size_t)(nranks - 1);
    swy_coll_state_t *st;
    SWY_COLL_CREATE_BEGIN(st, "allreduce/ring", args, rank, nranks,
                          SWY_COLL_ANY_MEM, steps);
    st->max_seg = seg_count(st, 0);
    st->chunk_elems = swy_coll_pipeline_chunk_elems(
        partition_bytes, st->dsize, st->max_seg,
        steps ? SWY_COLL_TAG_MAX / steps : SWY_COLL_TAG_MAX);
    st->max_chunks = (st->max_seg + st->chunk_elems - 1) / st->chunk_elems;
    if (args->mem != SWY_MEM_HOST && nranks > 1 && args->count > 0) {
        swy_status_t status = ar_stage_create(st);
        if (status != SWY_OK) {
            swy_free(st);
            return status;
        }
    }
    if (nranks > 1 && st->max_seg > 0) {
        /* Step s brings segment r-s-1 from the left neighbour's sendbuf
         * (step 0) or recvbuf (its partial sums). */
        size_t bytes = 0;
        int overflow = (st->slot_at = swy_calloc((size_t)nranks - 1,
                                                 sizeof(size_t))) == NULL;
        for (int s = 0; s < nranks - 1 && !overflow; s++) {
            int seg = mod(rank - s - 1, nranks);
            const char *mirror =
                (const char *)(s == 0 ? st->args.sendbuf : st->args.recvbuf) +
                seg_offset(st, seg) * st->dsize;
            overflow = swy_coll_slot_place(&bytes, seg_count(st, seg) *
                                                       st->dsize,
                                           mirror, &st->slot_at[s]) != 0;
        }
        if (overflow || (st->scratch = swy_coll_scratch_get(bytes)) == NULL) {
            ar_destroy(st);
            return SWY_ERR_NO_MEMORY;
        }
        st->scratch_bytes = bytes;
    }
    *state_p = st;
    return SWY_OK;
}

static void emit_segment(swy_coll_state_t *st, const swy_coll_emit_t *emit,
                         int phase, int step, int seg, size_t chunk,
                         int is_send)
{
    int peer = is_send ? mod(st->rank + 1, st->nranks)
                       : mod(st->rank - 1, st->nranks);
    size_t count = seg_count(st, seg), off = chunk * st->chunk_elems;
    size_t n = SWY_MIN(st->chunk_elems, count - off);
    char *buf;
    if (phase == PHASE_RS && !is_send)
        buf = st->scratch + st->slot_at[step] + off * st->dsize;
    else if (phase == PHASE_RS && step == 0) /* our own, unreduced */
        buf = (char *)st->args.sendbuf + (seg_offset(st, seg) + off) * st->dsize;
    else
        buf = (char *)st->args.recvbuf + (seg_offset(st, seg) + off) * st->dsize;
    /* Scratch, host buffers or the host stage of device buffers. */
    swy_coll_xfer_t x = {.peer = peer, .is_send = (uint8_t)is_send,
                         .mem = SWY_MEM_HOST,
                         .tag = tag_of(st, phase, step, chunk), .buf = buf,
                         .bytes = n * st->dsize,
                         .cookie = swy_coll_cookie(phase, step, chunk)};
    emit->post(emit->ctx, &x);
}

static size_t seg_chunks(const swy_coll_state_t *st, int seg)
{
    return (seg_count(st, seg) + st->chunk_elems - 1) / st->chunk_elems;
}

static swy_status_t ar_start(swy_coll_state_t *st, const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank, w = st->nranks;
    if (w == 1)
        return swy_device_copy(a->recvbuf, a->sendbuf, a->count * st->dsize,
                               a->mem);
    if (st->stage != NULL)
        SWY_CHECK(swy_device_copy(st->stage, st->user_send, st->stage_bytes,
                                  SWY_MEM_CUDA));
    for (int s = 0; s < w - 1; s++) {
        int seg = mod(r - s - 1, w);
        for (size_t c = 0; c < seg_chunks(st, seg); c++)
            emit_segment(st, emit, PHASE_RS, s, seg, c, 0);
    }
    for (int t = 0; t < w - 1; t++) {
        int seg = mod(r - t, w);
        for (size_t c = 0; c < seg_chunks(st, seg); c++)
            emit_segment(st, emit, PHASE_AG, t, seg, c, 0);
    }
    for (size_t c = 0; c < seg_chunks(st, r); c++)
        emit_segment(st, emit, PHASE_RS, 0, r, c, 1);
    return SWY_OK;
}

static swy_status_t ar_recv_done(swy_coll_state_t *st,
                                 const swy_coll_xfer_t *xfer,
                                 const swy_coll_emit_t *emit)
{
    const swy_coll_args_t *a = &st->args;
    int r = st->rank, w = st->nranks;
    int phase = swy_coll_cookie_phase(xfer->cookie);
    int step = swy_coll_cookie_step(xfer->cookie);
    size_t chunk = swy_coll_cookie_chunk(xfer->cookie);
    if (phase == PHASE_RS) {
        int seg = mod(r - step - 1, w);
        size_t off = seg_offset(st, seg) + chunk * st->chunk_elems;
        size_t n = xfer->bytes / st->dsize;
        char *dst = (char *)a->recvbuf + off * st->dsize;
        const char *mine = (const char *)a->sendbuf + off * st->dsize;
        swy_coll_reduce(dst, mine, xfer->buf, n, a->dtype, a->redop);
        if (step + 1 < w - 1) {
            emit_segment(st, emit, PHASE_RS, step + 1, seg, chunk, 1);
        } else { /* seg == r+1 is now fully reduced for this chunk */
            if (a->redop == SWY_AVG)
                swy_coll_scale_avg(dst, n, a->dtype, w);
            emit_segment(st, emit, PHASE_AG, 0, seg, chunk, 1);
        }
    } else if (step + 1 < w - 1) {
        emit_segment(st, emit, PHASE_AG, step + 1, mod(r - step, w), chunk, 1);
    }
    return SWY_OK;
}

static swy_status_t ar_finish(swy_coll_state_t *st)
{
    if (st->stage == NULL)
        return SWY_OK;
    return swy_device_copy(st->user_recv, st->stage, st->stage_bytes,
                           SWY_MEM_CUDA);
}

static void ar_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    swy_coll_scratch_put(st->scratch, st->scratch_bytes);
    swy_free(st->slot_at);
    if (st->stage != NULL)
        swy_device_ops()->host_free(st->stage);
    swy_free(st);
}

const swy_coll_algo_t swy_coll_allreduce_ring = {
    .name = "allreduce/ring", .create = ar_create, .start = ar_start,
    .recv_done = ar_recv_done, .finish = ar_finish, .destroy = ar_destroy};
