/* DDP-style gradient buckets over swy_allreduce (see ddp.h). */
#include "ddp.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    size_t begin, end;   /* element range in the flat buffer */
    swy_request_t req;   /* NULL when not posted or complete */
    int posted, done;
    int applied;         /* overlap: handed to the apply callback */
    char name[32];
} bucket_t;

struct swt_ddp {
    swy_comm_t comm;
    float *grad;
    bucket_t *buckets;
    int n_buckets;
    int next_post;       /* buckets are posted in order */
    double first_post_s; /* this step */
    double last_done_s;
    void *stream;        /* device gradients: their producer's stream */
    int overlap;         /* swt_ddp_set_overlap() */
    int n_applied;       /* buckets finished this round */
};

int swt_ddp_create(swy_comm_t comm, float *grad, const size_t *tensor_elems,
                   int n_tensors, size_t bucket_bytes, swt_ddp_t **ddp_p)
{
    swt_ddp_t *ddp = calloc(1, sizeof(*ddp));
    if (ddp == NULL)
        return -1;
    ddp->buckets = calloc((size_t)n_tensors + 1, sizeof(bucket_t));
    if (ddp->buckets == NULL) {
        free(ddp);
        return -1;
    }
    ddp->comm = comm;
    ddp->grad = grad;
    size_t pos = 0, begin = 0;
    for (int i = 0; i < n_tensors; i++) {
        pos += tensor_elems[i];
        int last = i == n_tensors - 1;
        if (last || (pos - begin) * sizeof(float) >= bucket_bytes) {
            bucket_t *b = &ddp->buckets[ddp->n_buckets];
            b->begin = begin;
            b->end = pos;
            snprintf(b->name, sizeof(b->name), "ddp.bucket%d",
                     ddp->n_buckets);
            ddp->n_buckets++;
            begin = pos;
        }
    }
    *ddp_p = ddp;
    return 0;
}

void swt_ddp_destroy(swt_ddp_t *ddp)
{
    if (ddp == NULL)
        return;
    for (int i = 0; i < ddp->n_buckets; i++)
        if (ddp->buckets[i].req != NULL) {
            (void)swy_wait(ddp->buckets[i].req);
            swy_request_free(ddp->buckets[i].req);
        }
    free(ddp->buckets);
    free(ddp);
}

int swt_ddp_num_buckets(const swt_ddp_t *ddp)
{
    return ddp->n_buckets;
}

void swt_ddp_set_stream(swt_ddp_t *ddp, void *stream)
{
    ddp->stream = stream;
}

void swt_ddp_set_overlap(swt_ddp_t *ddp, int on)
{
    ddp->overlap = on != 0;
}

int swt_ddp_pending(const swt_ddp_t *ddp)
{
    return ddp->next_post > 0;
}

swy_status_t swt_ddp_ready(swt_ddp_t *ddp, size_t ready_elems,
                           swt_timing_t *tm)
{
    (void)tm;
    while (ddp->next_post < ddp->n_buckets &&
           ddp->buckets[ddp->next_post].end <= ready_elems) {
        bucket_t *b = &ddp->buckets[ddp->next_post];
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.priority = SWY_PRIO_LOW;
        /* Without overlap the optimizer needs every bucket: the order
         * they come in. With it, the next forward needs the last bucket
         * (the embedding's) first: ByteScheduler's order. */
        attr.order = ddp->overlap ? ddp->n_buckets - 1 - ddp->next_post
                                  : ddp->next_post;
        attr.name = b->name;
        attr.stream = ddp->stream;
        if (ddp->next_post == 0)
            ddp->first_post_s = swt_now();
        float *g = ddp->grad + b->begin;
        swy_status_t status = swy_allreduce(g, g, b->end - b->begin,
                                            SWY_FLOAT32, SWY_SUM, ddp->comm,
                                            &attr, &b->req);
        if (status != SWY_OK) {
            fprintf(stderr, "swy-train: allreduce of %s (%zu floats) "
                    "failed: %s: %s\n", b->name, b->end - b->begin,
                    swy_status_string(status), swy_last_error(ddp->comm));
            return status;
        }
        b->posted = 1;
        ddp->next_post++;
    }
    return SWY_OK;
}

static swy_status_t complete(swt_ddp_t *ddp, bucket_t *b, int blocking)
{
    int done = 0;
    swy_status_t status = blocking ? swy_wait(b->req)
                                   : swy_test(b->req, &done);
    if (blocking)
        done = 1;
    if (!done && status == SWY_OK)
        return SWY_OK;
    swy_request_free(b->req);
    b->req = NULL;
    b->done = 1;
    ddp->last_done_s = swt_now();
    if (status != SWY_OK)
        fprintf(stderr, "swy-train: allreduce of %s failed: %s: %s\n",
                b->name, swy_status_string(status),
                swy_last_error(ddp->comm));
    return status;
}

swy_status_t swt_ddp_poll(swt_ddp_t *ddp)
{
    for (int i = 0; i < ddp->next_post; i++) {
        bucket_t *b = &ddp->buckets[i];
        if (b->posted && !b->done) {
            swy_status_t status = complete(ddp, b, 0);
            if (status != SWY_OK)
                return status;
        }
    }
    return SWY_OK;
}

swy_status_t swt_ddp_post_rest(swt_ddp_t *ddp, swt_timing_t *tm)
{
    return swt_ddp_ready(ddp, (size_t)-1, tm);
}

swy_status_t swt_ddp_finish(swt_ddp_t *ddp, size_t begin, size_t end,
                            swt_ddp_apply_fn apply, void *arg,
                            swt_timing_t *tm)
{
    swy_status_t first = SWY_OK;
    if (ddp->next_post == 0)
        return SWY_OK; /* nothing in flight this round */
    double blocked = 0;
    for (int i = 0; i < ddp->n_buckets; i++) {
        bucket_t *b = &ddp->buckets[i];
        if (b->applied || b->end <= begin || b->begin >= end)
            continue;
        if (!b->posted) {
            /* A caller that asks for a bucket backward has not produced
             * is a bug in the caller: say so rather than hang. */
            fprintf(stderr, "swy-train: internal error: %s finished "
                    "before it was posted\n", b->name);
            return SWY_ERR_INTERNAL;
        }
        if (!b->done) {
            double t0 = swt_now();
            swy_status_t status = complete(ddp, b, 1);
            blocked += swt_now() - t0;
            if (first == SWY_OK)
                first = status;
        }
        if (apply != NULL && first == SWY_OK)
            apply(arg, b->begin, b->end, tm);
        b->applied = 1;
        ddp->n_applied++;
    }
    swt_timing_add(tm, SWT_T_AR_WAIT, blocked);
    if (ddp->n_applied == ddp->n_buckets) {
        swt_timing_add(tm, SWT_T_AR, ddp->last_done_s - ddp->first_post_s);
        for (int i = 0; i < ddp->n_buckets; i++)
            ddp->buckets[i].posted = ddp->buckets[i].done =
                ddp->buckets[i].applied = 0;
        ddp->next_post = 0;
        ddp->n_applied = 0;
    }
    return first;
}

swy_status_t swt_ddp_wait(swt_ddp_t *ddp, swt_timing_t *tm)
{
    swy_status_t first = swt_ddp_post_rest(ddp, tm);
    swy_status_t status = swt_ddp_finish(ddp, 0, (size_t)-1, NULL, NULL, tm);
    return first != SWY_OK ? first : status;
}
