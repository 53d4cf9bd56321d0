/* The device plugin's communicators of a communicator (swy_devcoll_v1):
 * made when it is made (swy_comm_init_rank, _env; a split's by the
 * plugin's split of its parent's, at swy_comm_split), so that sends and
 * receives, which only their pair posts, find them there; failing that
 * on its first device collective that the plugin runs, by every rank at
 * the same point of its op order (collectives are posted in the same
 * order on every rank). As NCCL users make theirs with
 * ncclCommInitRank: rank 0 makes the ids, a broadcast on the communicator
 * brings them to the others, and each rank joins the plugin's
 * communicator of each priority class (lib/sched/lane.c). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api/comm_impl.h"
#include "sched/sched.h"
#include "transport/device.h"
#include "util/log.h"
#include "util/status.h"

/* What rank 0 broadcasts: whether it has the ids, then one id per class
 * (an id makes one communicator: NCCL's root serves one and closes). */
typedef struct {
    uint8_t ok;
    unsigned char id[2][SWY_DEVCOLL_ID_MAX];
} devcoll_hello_t;

static swy_status_t broadcast_hello(swy_comm_t comm, devcoll_hello_t *hello)
{
    swy_coll_args_t args = {
        .kind = SWY_COLL_BROADCAST, .dtype = SWY_UINT8, .mem = SWY_MEM_HOST,
        .sendbuf = hello, .recvbuf = hello, .count = sizeof(*hello),
        .root = 0};
    struct swy_request *op;
    SWY_CHECK(swy_sched_post(comm->view, &args, SWY_PRIO_HIGH, 0,
                             "device communicators", &op));
    swy_status_t status = swy_sched_wait(op);
    swy_sched_release(op);
    return status;
}

swy_status_t swy_api_devcoll_ready(const char *fn, swy_comm_t comm,
                                   int *ready_p)
{
    const swy_devcoll_v1_t *dc = swy_devcoll_ops();
    *ready_p = 0;
    if (dc == NULL)
        return SWY_OK;
    if (swy_sched_lane_attached(comm->view)) {
        *ready_p = 1;
        return SWY_OK;
    }
    devcoll_hello_t hello;
    memset(&hello, 0, sizeof(hello));
    char why[SWY_ERRMSG_MAX] = "";
    if (comm->rank == 0) {
        hello.ok = dc->unique_id(hello.id[0]) == SWY_OK &&
                   dc->unique_id(hello.id[1]) == SWY_OK;
        if (!hello.ok)
            snprintf(why, sizeof(why), "%s", dc->error_string());
    }
    /* Rank 0 broadcasts even without an id, so that no rank waits. */
    swy_status_t status = broadcast_hello(comm, &hello);
    if (status != SWY_OK) {
        char cause[SWY_ERRMSG_MAX]; /* swy_err_set writes where it lies */
        snprintf(cause, sizeof(cause), "%s", swy_err_last());
        return swy_err_set(status, "api", "%s: making the device "
                           "communicators: %s", fn, cause);
    }
    if (!hello.ok)
        return swy_err_set(SWY_ERR_TRANSPORT, "api", "%s: rank 0 could not "
                           "make an id for the device communicators%s%s", fn,
                           why[0] != '\0' ? ": " : "", why);
    void *dcomm[2] = {NULL, NULL};
    for (int k = 0; k < 2 && status == SWY_OK; k++) {
        status = dc->comm_init(hello.id[k], comm->nranks, comm->rank,
                               swy_sched_lane_class_priority(k),
                               comm->timeout_s, &dcomm[k]);
        if (status != SWY_OK)
            swy_err_set(status, "api", "%s: joining the %s-priority device "
                        "communicator (%s, %d ranks) failed: %s", fn,
                        k == 0 ? "low" : "high", dc->name, comm->nranks,
                        dc->error_string());
    }
    if (status == SWY_OK)
        status = swy_sched_lane_attach(comm->view, dcomm);
    if (status != SWY_OK) {
        for (int k = 0; k < 2; k++)
            if (dcomm[k] != NULL)
                dc->comm_destroy(dcomm[k]);
        return status;
    }
    *ready_p = 1;
    return SWY_OK;
}

void swy_api_devcoll_eager(swy_comm_t comm)
{
    if (swy_devcoll_ops() == NULL || swy_sched_lane_attached(comm->view))
        return;
    int ready = 0;
    if (swy_api_devcoll_ready("swy_comm_init", comm, &ready) == SWY_OK)
        return;
    /* A job of host buffers on GPUs that NCCL cannot serve (two ranks on
     * one GPU) is still a job: its device ops fail when posted. */
    swy_warn("api", "communicator of %d ranks: no device communicators, so "
             "ops on device memory will fail: %s", comm->nranks,
             swy_err_last());
    swy_err_clear();
}

swy_status_t swy_api_devcoll_split(swy_comm_t parent, int color, int key,
                                   swy_comm_t child)
{
    const swy_devcoll_v1_t *dc = swy_devcoll_ops();
    void *pd[2], *cd[2] = {NULL, NULL};
    if (dc == NULL)
        return SWY_OK;
    if (dc->comm_split == NULL) { /* optional */
        /* The child makes its own, over its ranks (all here). */
        if (child != NULL)
            swy_api_devcoll_eager(child);
        return SWY_OK;
    }
    /* A parent without them makes them here, where all its ranks are, so
     * that the family's communicators all have theirs before their first
     * op: made at the first op instead, a communicator's would wait for
     * every rank to reach its first device op, and ranks that post the
     * communicators in different orders (each communicator's ops in the
     * same order everywhere, as the API asks) would wait for each other
     * there. */
    int ready = 0;
    swy_status_t status = swy_api_devcoll_ready("swy_comm_split", parent,
                                                &ready);
    if (status != SWY_OK)
        return status;
    if (!ready || !swy_sched_lane_dcomms(parent->view, pd))
        return SWY_OK;
    for (int k = 0; k < 2 && status == SWY_OK; k++) {
        status = dc->comm_split(pd[k], color, key,
                                swy_sched_lane_class_priority(k),
                                parent->timeout_s, &cd[k]);
        if (status != SWY_OK)
            swy_err_set(status, "api", "swy_comm_split: splitting the %s-"
                        "priority device communicator (%s) failed: %s",
                        k == 0 ? "low" : "high", dc->name,
                        dc->error_string());
    }
    if (status == SWY_OK && child != NULL)
        status = swy_sched_lane_attach(child->view, cd);
    if (status != SWY_OK)
        for (int k = 0; k < 2; k++)
            if (cd[k] != NULL)
                dc->comm_destroy(cd[k]);
    return status;
}
