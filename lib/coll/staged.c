/* Device buffers for the collectives whose algorithms move host memory
 * only (reduce_scatter, allgatherv, reduce, gather, scatter): the op runs
 * the kind's host algorithm on pinned host copies of the user's buffers,
 * as allreduce/ring stages its own. start() copies the receive region in
 * (a block the algorithm does not write, a gap between allgatherv's
 * blocks, keeps its bytes) and the send region unless it lies inside the
 * receive region (in place: the staged send then lies at the same offset
 * in the staged receive region); finish() copies the receive region out.
 * Reductions run on the host, as for allreduce of device memory. */
#include <string.h>

#include "coll/coll.h"
#include "transport/device.h"
#include "util/alloc.h"
#include "util/status.h"

struct swy_coll_state {
    const swy_coll_algo_t *inner;
    swy_coll_state_t *inner_state;
    swy_coll_args_t inner_args; /* the user's args on the staged copies */
    char *stage;                /* [recv_bytes | send_bytes], pinned */
    size_t recv_bytes, send_bytes, stage_bytes;
    void *user_recv;
    const void *user_send;
    int send_in_recv; /* the send region lies inside the receive region */
};

/* The bytes the op reads from sendbuf and writes into recvbuf on this
 * rank (0 for a NULL buffer: a root-only buffer elsewhere). */
static void regions(const swy_coll_args_t *a, int nranks, size_t *send_p,
                    size_t *recv_p)
{
    size_t dsize = swy_dtype_size(a->dtype), w = (size_t)nranks;
    size_t send = 0, recv = 0;
    switch (a->kind) {
    case SWY_COLL_REDUCE_SCATTER:
        send = a->count * w;
        recv = a->count;
        break;
    case SWY_COLL_ALLGATHERV:
        send = a->count;
        for (int p = 0; p < nranks; p++)
            if (a->recvcounts[p] > 0)
                recv = SWY_MAX(recv, a->rdispls[p] + a->recvcounts[p]);
        break;
    case SWY_COLL_REDUCE:
        send = recv = a->count;
        break;
    case SWY_COLL_GATHER:
        send = a->count;
        recv = a->count * w;
        break;
    case SWY_COLL_SCATTER:
        send = a->count * w;
        recv = a->count;
        break;
    default:
        break;
    }
    /* The API checked these products against overflow. */
    *send_p = a->sendbuf != NULL ? send * dsize : 0;
    *recv_p = a->recvbuf != NULL ? recv * dsize : 0;
}

static void staged_destroy(swy_coll_state_t *st)
{
    if (st == NULL)
        return;
    if (st->inner_state != NULL)
        st->inner->destroy(st->inner_state);
    if (st->stage != NULL)
        swy_device_ops()->host_free(st->stage);
    swy_free(st);
}

static swy_status_t staged_create(const swy_coll_args_t *args, int rank,
                                  int nranks, size_t partition_bytes,
                                  swy_coll_state_t **state_p)
{
    const swy_device_v1_t *dev = swy_device_ops();
    const swy_coll_algo_t *inner = swy_coll_algo(args->kind);
    if (dev == NULL || inner == NULL)
        return swy_err_set(SWY_ERR_UNSUPPORTED, "coll", "%s of %s memory: "
                           "%s", swy_coll_kind_name(args->kind),
                           swy_mem_type_name(args->mem),
                           dev == NULL ? "no device services"
                                       : "no host algorithm to stage");
    swy_coll_state_t *st = swy_calloc(1, sizeof(*st));
    if (st == NULL)
        return SWY_ERR_NO_MEMORY;
    st->inner = inner;
    st->user_send = args->sendbuf;
    st->user_recv = args->recvbuf;
    regions(args, nranks, &st->send_bytes, &st->recv_bytes);
    const char *us = args->sendbuf, *ur = args->recvbuf;
    st->send_in_recv = us != NULL && ur != NULL && st->recv_bytes > 0 &&
                       us >= ur && us + st->send_bytes <= ur + st->recv_bytes;
    st->stage_bytes = st->recv_bytes + (st->send_in_recv ? 0 : st->send_bytes);
    if (st->stage_bytes > 0) {
        st->stage = dev->host_alloc(st->stage_bytes);
        if (st->stage == NULL) {
            swy_free(st);
            return swy_err_set(SWY_ERR_NO_MEMORY, "coll", "%s of device "
                               "memory: cannot get %zu bytes of pinned host "
                               "memory to stage it: %s",
                               swy_coll_kind_name(args->kind),
                               st->stage_bytes, dev->error_string());
        }
    }
    st->inner_args = *args;
    st->inner_args.mem = SWY_MEM_HOST;
    st->inner_args.recvbuf = args->recvbuf != NULL ? st->stage : NULL;
    if (args->sendbuf == NULL)
        st->inner_args.sendbuf = NULL;
    else if (st->send_in_recv)
        st->inner_args.sendbuf = st->stage + (us - ur);
    else
        st->inner_args.sendbuf = st->stage + st->recv_bytes;
    swy_status_t status = inner->create(&st->inner_args, rank, nranks,
                                        partition_bytes, &st->inner_state);
    if (status != SWY_OK) {
        st->inner_state = NULL;
        staged_destroy(st);
        return status;
    }
    *state_p = st;
    return SWY_OK;
}

static swy_status_t staged_start(swy_coll_state_t *st,
                                 const swy_coll_emit_t *emit)
{
    if (st->recv_bytes > 0)
        SWY_CHECK(swy_device_copy(st->stage, st->user_recv, st->recv_bytes,
                                  SWY_MEM_CUDA));
    if (st->send_bytes > 0 && !st->send_in_recv)
        SWY_CHECK(swy_device_copy(st->stage + st->recv_bytes, st->user_send,
                                  st->send_bytes, SWY_MEM_CUDA));
    return st->inner->start(st->inner_state, emit);
}

static swy_status_t staged_recv_done(swy_coll_state_t *st,
                                     const swy_coll_xfer_t *xfer,
                                     const swy_coll_emit_t *emit)
{
    return st->inner->recv_done(st->inner_state, xfer, emit);
}

static swy_status_t staged_finish(swy_coll_state_t *st)
{
    if (st->inner->finish != NULL)
        SWY_CHECK(st->inner->finish(st->inner_state));
    if (st->recv_bytes == 0)
        return SWY_OK;
    return swy_device_copy(st->user_recv, st->stage, st->recv_bytes,
                           SWY_MEM_CUDA);
}

const swy_coll_algo_t swy_coll_staged = {
    .name = "staged", .create = staged_create, .start = staged_start,
    .recv_done = staged_recv_done, .finish = staged_finish,
    .destroy = staged_destroy};
