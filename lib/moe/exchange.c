/* The chunked exchange under dispatch, combine and their backward passes:
 * one all-to-all per pipeline chunk, so that chunk j's rows can be used
 * (forward direction) or sent (reverse direction) while other chunks are
 * in flight — Lina's and FasterMoE's pipelining of expert compute with the
 * all-to-all. Rows between the user's expert-major buffers and the
 * rank-major wire order are moved here (see moe_impl.h for the layouts). */
#include <stdio.h>
#include <string.h>

#include "moe/moe_impl.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/copy.h"
#include "util/status.h"

const char *swy_moe_xchg_name(swy_moe_xchg_kind_t kind)
{
    switch (kind) {
    case SWY_MOE_XCHG_DISPATCH: return "dispatch";
    case SWY_MOE_XCHG_COMBINE_BWD: return "combine_backward";
    case SWY_MOE_XCHG_COMBINE: return "combine";
    case SWY_MOE_XCHG_DISPATCH_BWD: return "dispatch_backward";
    case SWY_MOE_XCHG_NONE: break;
    }
    return "none";
}

static swy_status_t check_route(swy_moe_route_t route, const char *fn)
{
    if (route == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: route is NULL",
                           fn);
    return SWY_OK;
}

static swy_status_t busy(const swy_moe_route_t route, const swy_moe_xchg_t *x,
                         const char *fn)
{
    return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: a %s is still in "
                       "flight on this route (%d of %d chunks posted, %d "
                       "completed): finish it first", fn,
                       swy_moe_xchg_name(x->kind), x->posted, route->d,
                       x->completed);
}

swy_status_t swy_moe_check_idle(swy_moe_route_t route, const char *fn)
{
    SWY_CHECK(check_route(route, fn));
    if (route->fwd.kind != SWY_MOE_XCHG_NONE)
        return busy(route, &route->fwd, fn);
    if (route->rev.kind != SWY_MOE_XCHG_NONE)
        return busy(route, &route->rev, fn);
    return SWY_OK;
}

swy_status_t swy_moe_rev_check_idle(swy_moe_route_t route, const char *fn)
{
    SWY_CHECK(check_route(route, fn));
    if (route->rev.kind != SWY_MOE_XCHG_NONE)
        return busy(route, &route->rev, fn);
    return SWY_OK;
}

/* Attributes of an exchange's chunks: default priority high (the
 * library gives chunk j order + j and appends "[j/d]" to the name), a
 * name that says which exchange. */
static swy_op_attr_t xchg_attr(const swy_moe_route_t route,
                               const swy_op_attr_t *attr,
                               swy_moe_xchg_kind_t kind, char *name,
                               size_t name_len)
{
    swy_op_attr_t a = SWY_OP_ATTR_INIT;
    /* swy_moe_check_attr() refused a struct_size below the first
     * release's; a larger one's extra fields are not this library's. */
    if (attr != NULL)
        swy_struct_import(&a, sizeof(a), attr, attr->struct_size,
                          SWY_OP_ATTR_SIZE_V1);
    a.struct_size = sizeof(a);
    a.stream = route->plan->stream; /* NULL for host rows */
    if (a.priority < 0)
        a.priority = SWY_PRIO_HIGH;
    const char *given = a.name;
    snprintf(name, name_len, "%s%smoe.%s", given != NULL ? given : "",
             given != NULL ? ":" : "", swy_moe_xchg_name(kind));
    a.name = name;
    return a;
}

static void start(swy_moe_route_t route, swy_moe_xchg_t *x,
                  swy_moe_xchg_kind_t kind, char *expert_buf)
{
    x->kind = kind;
    x->posted = x->completed = x->nreqs = 0;
    x->expert_buf = expert_buf;
    memset(x->chunk_done, 0, (size_t)route->d);
    memset(x->reqs, 0, (size_t)route->d * sizeof(swy_request_t));
}

void swy_moe_xchg_drain(swy_moe_route_t route, swy_moe_xchg_t *x)
{
    if (route == NULL || x->kind == SWY_MOE_XCHG_NONE)
        return;
    /* Held chunks never released go as they are: every rank's exchange
     * then completes, rather than its peers' waiting for them. */
    for (int j = x->posted; j < x->nreqs; j++)
        (void)swy_chunk_release(x->reqs[j]);
    for (int j = 0; j < x->nreqs; j++)
        if (x->reqs[j] != NULL) {
            (void)swy_wait(x->reqs[j]);
            swy_request_free(x->reqs[j]);
            x->reqs[j] = NULL;
        }
    x->kind = SWY_MOE_XCHG_NONE;
}

/* A failure in the middle of exchange x: every chunk posted is let go
 * and waited for (the peers' exchanges then complete), the route is idle
 * again, and the error says which chunk. */
static swy_status_t xchg_fail(swy_moe_route_t route, swy_moe_xchg_t *x,
                              swy_status_t status, const char *fn,
                              const char *what, int chunk)
{
    char msg[SWY_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "%s: %s %d of %d of the %s: %s", fn, what,
             chunk, route->d, swy_moe_xchg_name(x->kind), swy_err_last());
    swy_moe_xchg_drain(route, x);
    swy_err_store(msg);
    return status;
}

/* Copies block rows between a staging (rank-major) and an expert-side
 * (expert-major) buffer for chunk j; to_expert picks the direction. */
static void restage_chunk(swy_moe_route_t route, int j, char *expert_buf,
                          int to_expert)
{
    int W = route->W, nl = route->nl, d = route->d;
    size_t rb = route->rb;
    for (int r = 0; r < W; r++)
        for (int e = 0; e < nl; e++) {
            size_t si = ((size_t)j * W + r) * nl + e;
            size_t ei = ((size_t)e * d + j) * W + r;
            int64_t rows = route->stg_off[si + 1] - route->stg_off[si];
            if (rows == 0)
                continue;
            char *stage = route->stage_buf + (size_t)route->stg_off[si] * rb;
            char *expert = expert_buf + (size_t)route->exp_off[ei] * rb;
            if (to_expert)
                swy_copy(expert, stage, (size_t)rows * rb);
            else
                swy_copy(stage, expert, (size_t)rows * rb);
        }
}

/* Counts and displacements (elements) of every chunk, chunk-major
 * ([d][W], as swy_alltoallv_chunks takes them): token side to/from each
 * peer, and staging side from/to each peer. */
static void chunk_counts(swy_moe_route_t route, size_t *tok_counts,
                         size_t *tok_displs, size_t *stg_counts,
                         size_t *stg_displs)
{
    int W = route->W, nl = route->nl, d = route->d;
    size_t H = route->H;
    for (int j = 0; j < d; j++)
        for (int r = 0; r < W; r++) {
            size_t ti = ((size_t)r * d + j) * nl;
            size_t si = ((size_t)j * W + r) * nl;
            size_t c = (size_t)j * W + r;
            tok_displs[c] = (size_t)route->tok_off[ti] * H;
            tok_counts[c] = (size_t)(route->tok_off[ti + nl] -
                                     route->tok_off[ti]) * H;
            stg_displs[c] = (size_t)route->stg_off[si] * H;
            stg_counts[c] = (size_t)(route->stg_off[si + nl] -
                                     route->stg_off[si]) * H;
        }
}

/* Post the exchange's d chunks as one swy_alltoallv_chunks (one
 * argument check across ranks for all of them); held: each chunk starts
 * at its swy_chunk_release. Device rows are always posted held, which
 * waits here for the plan's stream to drain (the rows packed there are
 * then in place) and queues nothing on it, so no chunk holds the stream:
 * a forward exchange releases every chunk at once, and the expert
 * compute on chunk 0 need not wait for chunk d-1. */
static swy_status_t post_chunks(swy_moe_route_t route, swy_moe_xchg_t *x,
                                swy_moe_xchg_kind_t kind, const void *sendbuf,
                                void *recvbuf, int reverse,
                                const swy_op_attr_t *attr, const char *fn)
{
    size_t cells = (size_t)route->W * (size_t)route->d;
    size_t *tc = route->scratch, *td = tc + cells, *sc = td + cells,
           *sd = sc + cells;
    chunk_counts(route, tc, td, sc, sd);
    char name[96];
    swy_op_attr_t a = xchg_attr(route, attr, kind, name, sizeof(name));
    unsigned flags = reverse || route->plan->dev != NULL ? SWY_CHUNKS_HELD
                                                         : 0;
    swy_status_t status =
        reverse ? swy_alltoallv_chunks(sendbuf, sc, sd, recvbuf, tc, td,
                                       route->d, route->dtype,
                                       route->plan->comm, &a, flags, x->reqs)
                : swy_alltoallv_chunks(sendbuf, tc, td, recvbuf, sc, sd,
                                       route->d, route->dtype,
                                       route->plan->comm, &a, flags,
                                       x->reqs);
    if (status != SWY_OK) {
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "%s: %s", fn, swy_err_last());
        x->kind = SWY_MOE_XCHG_NONE;
        swy_err_store(msg);
        return status;
    }
    x->nreqs = route->d;
    return SWY_OK;
}

swy_status_t swy_moe_fwd_post(swy_moe_route_t route, swy_moe_xchg_kind_t kind,
                              void *expert_buf, const swy_op_attr_t *attr,
                              const char *fn)
{
    /* With one local expert the staging order is the expert order: land
     * in the user's buffer directly. */
    char *recvbuf = route->nl == 1 ? expert_buf : route->stage_buf;
    swy_moe_xchg_t *x = &route->fwd;
    start(route, x, kind, expert_buf);
    SWY_CHECK(post_chunks(route, x, kind, route->tok_buf, recvbuf, 0, attr,
                          fn));
    if (route->plan->dev == NULL) {
        x->posted = route->d;
        return SWY_OK;
    }
    for (int j = 0; j < route->d; j++) {
        swy_status_t status = swy_chunk_release(x->reqs[j]);
        if (status != SWY_OK)
            return xchg_fail(route, x, status, fn, "release of chunk", j);
        x->posted = j + 1;
    }
    return SWY_OK;
}

static swy_status_t check_fwd_chunk(swy_moe_route_t route, int chunk,
                                     const char *fn)
{
    SWY_CHECK(check_route(route, fn));
    if (route->fwd.kind == SWY_MOE_XCHG_NONE)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: no dispatch or "
                           "combine backward in flight", fn);
    if (chunk < 0 || chunk >= route->d)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d out of "
                           "range 0..%d", fn, chunk, route->d - 1);
    return SWY_OK;
}

swy_status_t swy_moe_fwd_wait_chunk(swy_moe_route_t route, int chunk)
{
    static const char fn[] = "swy_moe_wait_chunk";
    SWY_CHECK(check_fwd_chunk(route, chunk, fn));
    swy_moe_xchg_t *x = &route->fwd;
    if (x->chunk_done[chunk])
        return SWY_OK;
    swy_status_t status = swy_wait(x->reqs[chunk]);
    swy_request_free(x->reqs[chunk]);
    x->reqs[chunk] = NULL;
    if (status != SWY_OK) {
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "%s: %s chunk %d of %d failed: %s", fn,
                 swy_moe_xchg_name(x->kind), chunk, route->d,
                 swy_err_last());
        swy_moe_xchg_drain(route, x);
        swy_err_store(msg);
        return status;
    }
    if (route->nl > 1 && route->plan->dev != NULL) {
        status = swy_moe_dev_restage(route, chunk, x->expert_buf, 1, fn);
        if (status != SWY_OK)
            return xchg_fail(route, x, status, fn, "landing of chunk", chunk);
    } else if (route->nl > 1) {
        restage_chunk(route, chunk, x->expert_buf, 1);
    }
    x->chunk_done[chunk] = 1;
    if (++x->completed == route->d)
        x->kind = SWY_MOE_XCHG_NONE;
    return SWY_OK;
}

swy_status_t swy_moe_fwd_wait_all(swy_moe_route_t route)
{
    for (int j = 0; j < route->d; j++)
        SWY_CHECK(swy_moe_fwd_wait_chunk(route, j));
    return SWY_OK;
}

swy_status_t swy_moe_wait_chunk(swy_moe_route_t route, int chunk)
{
    swy_err_clear();
    return swy_moe_fwd_wait_chunk(route, chunk);
}

swy_status_t swy_moe_test_chunk(swy_moe_route_t route, int chunk, int *done_p)
{
    static const char fn[] = "swy_moe_test_chunk";
    swy_err_clear();
    if (done_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: done_p is NULL",
                           fn);
    SWY_CHECK(check_fwd_chunk(route, chunk, fn));
    if (route->fwd.chunk_done[chunk]) {
        *done_p = 1;
        return SWY_OK;
    }
    int done = 0;
    swy_status_t status = swy_test(route->fwd.reqs[chunk], &done);
    /* A failure is reported by swy_moe_wait_chunk, which also cleans up. */
    *done_p = done || status != SWY_OK;
    return SWY_OK;
}

swy_status_t swy_moe_rev_post_chunk(swy_moe_route_t route,
                                    swy_moe_xchg_kind_t kind, int chunk,
                                    const void *expert_buf,
                                    const swy_op_attr_t *attr, const char *fn)
{
    SWY_CHECK(check_route(route, fn));
    swy_moe_xchg_t *x = &route->rev;
    if (chunk == 0)
        SWY_CHECK(swy_moe_rev_check_idle(route, fn));
    else if (x->kind != kind)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d posted, "
                           "but no %s is in flight (chunk 0 starts it)", fn,
                           chunk, swy_moe_xchg_name(kind));
    else if (chunk != x->posted)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d posted "
                           "out of order: chunk %d of %d is next (all ranks "
                           "must post chunks in the same order)", fn, chunk,
                           x->posted, route->d);
    if (chunk < 0 || chunk >= route->d)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d out of "
                           "range 0..%d", fn, chunk, route->d - 1);
    if (route->fwd.kind != SWY_MOE_XCHG_NONE && !route->fwd.chunk_done[chunk])
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d of the "
                           "%s in flight is not complete yet "
                           "(swy_moe_wait_chunk first)", fn, chunk,
                           swy_moe_xchg_name(route->fwd.kind));
    if (expert_buf == NULL && route->recv_rows > 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: the expert-side "
                           "buffer is NULL with %lld rows", fn,
                           (long long)route->recv_rows);
    SWY_CHECK(swy_moe_check_mem(route->plan, expert_buf, "the expert-side "
                                "buffer", fn));
    SWY_CHECK(swy_moe_check_attr(route->plan, attr, fn));
    /* With several local experts each chunk is copied out to the staging
     * buffer (the caller may reuse its rows at once); with one the rows go
     * out in place, so every chunk must come from the same buffer. */
    if (route->nl == 1 && chunk > 0 && expert_buf != x->expert_buf)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: chunk %d's "
                           "expert-side buffer %p is not chunk 0's %p: with "
                           "one local expert the rows are sent from it in "
                           "place", fn, chunk, expert_buf, x->expert_buf);
    if (chunk == 0) {
        const void *sendbuf = route->nl > 1 ? route->stage_buf : expert_buf;
        char *recvbuf = kind == SWY_MOE_XCHG_COMBINE ? route->comb_buf
                                                     : route->tok_buf;
        start(route, x, kind, (char *)expert_buf);
        if (kind == SWY_MOE_XCHG_COMBINE)
            route->combined = 0; /* comb_buf is being overwritten */
        SWY_CHECK(post_chunks(route, x, kind, sendbuf, recvbuf, 1, attr,
                              fn));
    }
    swy_status_t status = SWY_OK;
    if (route->plan->dev != NULL) {
        /* The chunk's rows, and with one local expert the caller's, are
         * written on the stream: they must be there before it goes. */
        if (route->nl > 1)
            status = swy_moe_dev_restage(route, chunk, (char *)expert_buf,
                                         0, fn);
        if (status == SWY_OK)
            status = swy_moe_dev_sync(route, fn);
        if (status != SWY_OK)
            return xchg_fail(route, x, status, fn, "chunk", chunk);
    } else if (route->nl > 1) {
        restage_chunk(route, chunk, (char *)expert_buf, 0);
    }
    status = swy_chunk_release(x->reqs[chunk]);
    if (status != SWY_OK)
        return xchg_fail(route, x, status, fn, "chunk", chunk);
    x->posted = chunk + 1;
    return SWY_OK;
}

swy_status_t swy_moe_rev_check_posted(swy_moe_route_t route,
                                      swy_moe_xchg_kind_t kind,
                                      const char *fn)
{
    SWY_CHECK(check_route(route, fn));
    const swy_moe_xchg_t *x = &route->rev;
    if (x->kind != kind || x->posted != route->d)
        return swy_err_set(SWY_ERR_INVALID_ARG, "moe", "%s: %d of %d chunks "
                           "of a %s posted (%s in flight)", fn,
                           x->kind == kind ? x->posted : 0, route->d,
                           swy_moe_xchg_name(kind),
                           swy_moe_xchg_name(x->kind));
    return SWY_OK;
}

swy_status_t swy_moe_rev_wait_all(swy_moe_route_t route)
{
    swy_moe_xchg_t *x = &route->rev;
    swy_status_t first = SWY_OK;
    char msg[SWY_ERRMSG_MAX] = "";
    for (int j = 0; j < x->posted; j++) {
        swy_status_t status = swy_wait(x->reqs[j]);
        swy_request_free(x->reqs[j]);
        x->reqs[j] = NULL;
        if (status != SWY_OK && first == SWY_OK) {
            first = status;
            snprintf(msg, sizeof(msg), "%s chunk %d of %d failed: %s",
                     swy_moe_xchg_name(x->kind), j, route->d,
                     swy_err_last());
        }
    }
    x->completed = x->posted;
    x->kind = SWY_MOE_XCHG_NONE;
    if (first != SWY_OK)
        swy_err_store(msg);
    return first;
}
