/* Ops on the caller's stream: the device's callback when the stream gets
 * to a batch of ops, the gate that holds the stream's later work until the
 * last op of the batch completes, and the start of the ops the stream
 * reached (docs/architecture.md, "A device op on the caller's stream"). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sched/engine_impl.h"

/* What the device's callback gets: the ops the stream reached. */
typedef struct {
    int n;
    struct swy_request *ops[];
} stream_notice_t;

/* The device's callback (a thread of its own): the stream reached the
 * ops. For each, wake its engine's progress thread, then mark it; after
 * that store the op may be gone, so nothing of it is read again. */
static void stream_reached(void *arg)
{
    stream_notice_t *notice = arg;
    for (int i = 0; i < notice->n; i++) {
        struct swy_request *op = notice->ops[i];
        swy_sched_t *s = op->sched;
        uint64_t one = 1;
        if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0)
            (void)0; /* the counter is full: the thread is awake anyway */
        __atomic_store_n(&op->stream_ready, 1, __ATOMIC_RELEASE);
    }
    swy_free(notice);
}

/* One op's share of a gate gone (it completed, or the set-up is done):
 * the last one opens it. */
void gate_share_drop(swy_stream_gate_t *g)
{
    if (__atomic_sub_fetch(&g->pending, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (g->gate != NULL)
        swy_device_ops()->gate_open(g->gate);
    swy_free(g);
}

swy_status_t swy_sched_stream_order(struct swy_request *const *ops, int n,
                                    void *stream, int *gated_p)
{
    const swy_device_v1_t *dev = swy_device_ops();
    *gated_p = 1;
    stream_notice_t *notice =
        swy_malloc(sizeof(*notice) + (size_t)n * sizeof(notice->ops[0]));
    swy_stream_gate_t *g = swy_calloc(1, sizeof(*g));
    swy_status_t status = SWY_OK;
    if (notice == NULL || g == NULL) {
        swy_free(notice);
        swy_free(g);
        status = swy_err_set(SWY_ERR_NO_MEMORY, "sched", "out of memory");
    }
    if (status == SWY_OK) {
        notice->n = n;
        memcpy(notice->ops, ops, (size_t)n * sizeof(ops[0]));
        /* A share for each op and one for this set-up, so that an op
         * failing meanwhile cannot open the gate before it exists. */
        g->pending = n + 1;
        for (int i = 0; i < n; i++) {
            swy_sched_t *s = ops[i]->sched;
            pthread_mutex_lock(&s->lock);
            if (ops[i]->completed)
                g->pending--; /* failed already: its gate share is gone */
            else
                ops[i]->gate = g;
            pthread_mutex_unlock(&s->lock);
        }
        if (dev->stream_notify(stream, stream_reached, notice) != SWY_OK) {
            status = swy_err_set(SWY_ERR_TRANSPORT, "sched", "cannot order "
                                 "%d op(s) after the work on stream %p: %s",
                                 n, stream, dev->error_string());
            swy_free(notice);
            notice = NULL;
        }
    }
    if (status != SWY_OK) {
        /* No callback comes: the ops fail, and the engine takes them as
         * reached so that they can go. */
        char msg[SWY_ERRMSG_MAX];
        snprintf(msg, sizeof(msg), "%s", swy_err_last());
        for (int i = 0; i < n; i++) {
            swy_sched_t *s = ops[i]->sched;
            pthread_mutex_lock(&s->lock);
            op_error(ops[i], status, "op #%u '%s': %s", ops[i]->seq,
                     op_label(ops[i]), msg);
            __atomic_store_n(&ops[i]->stream_ready, 1, __ATOMIC_RELEASE);
            swy_sched_progress_locked(s);
            pthread_mutex_unlock(&s->lock);
        }
        if (g != NULL)
            gate_share_drop(g);
        swy_err_store(msg);
        return status;
    }
    if (dev->stream_gate(stream, &g->gate) != SWY_OK) {
        /* The stream's later work cannot be held for the ops: the caller
         * must then wait for them before queuing more (said once). */
        g->gate = NULL;
        *gated_p = 0;
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            swy_warn("sched", "cannot hold a CUDA stream for an op (%s): "
                     "posts with device buffers wait for their ops to "
                     "complete", dev->error_string());
    }
    gate_share_drop(g);
    return SWY_OK;
}

/* The stream got to ops[0..n-1] (the engine saw each one's mark): they
 * leave the stream's list and, with start, begin as op_start would have
 * begun them, in order (with series, the chunks of one: head first,
 * which hears the headers for all). */
static void stream_ops_begin(swy_sched_t *s, struct swy_request *const *ops,
                             int n, int series, int start)
{
    for (int j = 0; j < n; j++) {
        swy_list_del(&ops[j]->slink);
        s->n_stream_ops--;
    }
    /* on_stream goes one op at a time: it keeps the ops not yet begun
     * allocated, whatever starting the others does (a failure that
     * completes them all). */
    for (int j = 0; j < n; j++) {
        struct swy_request *op = ops[j];
        op->on_stream = 0;
        if (start && op_alive(op)) {
            op->held = 0;
            if (op->p2p_blocked || op->p2p_listen) /* its turn (p2p.c) */
                continue;
            op_headers(op, series ? ops : NULL, series ? n : 0);
            op_run(op);
        } else if (op->completed && op->released && !op->pins) {
            op_free(op); /* failed meanwhile, and nobody waits */
        }
    }
}

int swy_sched_stream_ops_poll(swy_sched_t *s, int start)
{
    int n = 0;
    swy_list_t *pos, *tmp;
again:
    swy_list_for_each_safe(pos, tmp, &s->stream_ops) {
        struct swy_request *op = swy_container_of(pos, struct swy_request,
                                                  slink);
        /* The chunks of a series on a stream go with their head, once the
         * stream's callback has marked every one of them (it writes into
         * each: none may be freed before). */
        if (op->series_head_op != NULL && op->series_chunks == NULL)
            continue;
        if (op->series_chunks != NULL) {
            struct swy_request **chunks = op->series_chunks;
            int nchunks = op->series_n, marked = 1;
            for (int j = 0; j < nchunks && marked; j++)
                marked = __atomic_load_n(&chunks[j]->stream_ready,
                                         __ATOMIC_ACQUIRE);
            if (!marked)
                continue;
            op->series_chunks = NULL;
            stream_ops_begin(s, chunks, nchunks, 1, start);
            swy_free(chunks);
            n += nchunks;
            goto again; /* the chunks left the list, tmp among them */
        }
        if (!__atomic_load_n(&op->stream_ready, __ATOMIC_ACQUIRE))
            continue;
        stream_ops_begin(s, &op, 1, 0, start);
        n++;
    }
    return n;
}
