/* swy-transport-nccl: swy_devcoll_plugin_v1, collectives on device memory
 * (swy_devcoll_v1.h) over NCCL communicators that span a whole Switchyard
 * communicator, one per priority class.
 *
 * A communicator (nccl_coll_t) is a non-blocking NCCL communicator
 * (config.blocking = 0: no NCCL call waits for a peer, so a silent peer
 * costs a timeout, never a hung thread) and its own non-blocking stream at
 * the class's CUDA stream priority. Its device is the caller's current
 * device at comm_init, as for nccl_init(); every later call makes it
 * current for its duration and gives the caller's back.
 *
 * A launch is one NCCL group on that stream. With a non-blocking
 * communicator ncclGroupEnd may return ncclInProgress while NCCL's own
 * thread connects and enqueues; the launch polls ncclCommGetAsyncError
 * until the kernels are on the stream (NCCL forbids a new operation on the
 * communicator before that, and the host function must come after them),
 * then enqueues a host function whose record (nccl_coll_rec_t) calls
 * done(arg, SWY_OK).
 *
 * Locks: issue_lock serialises every NCCL call on the communicator (NCCL
 * communicators are not thread-safe, and ncclCommGetAsyncError joins
 * NCCL's group thread) and comm_abort's ncclCommAbort; it is held while a
 * launch polls, which gives up as soon as comm_abort has set `aborted`.
 * The hub's lock guards the list of launches whose done has not come; it
 * is the only thing CUDA's host-function thread takes (a host function
 * may not call CUDA, and calls no NCCL either). Order: issue_lock, then
 * the hub's lock; done is never called under either.
 *
 * Ownership: a record belongs to its host function, which frees it when
 * it runs, done or not: CUDA runs a host function even after
 * cudaStreamDestroy, so nothing else may free it. comm_abort that
 * finishes a record holds a reference to it while it calls done. The hub
 * is reference-counted (the communicator and every record) because a host
 * function may run after comm_destroy. A host function that never runs
 * (CUDA skips them once the context has a sticky error) leaks its record;
 * its done comes from comm_abort. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_plugin.h"
#include "switchyard/swy_devcoll_v1.h"

_Static_assert(sizeof(ncclUniqueId) <= SWY_DEVCOLL_ID_MAX,
               "ncclUniqueId exceeds SWY_DEVCOLL_ID_MAX");

/* ---- per-thread error text ------------------------------------------- */

static __thread char nccl_coll_error[256] = "no error";

__attribute__((format(printf, 1, 2))) static void
nccl_coll_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nccl_coll_error, sizeof(nccl_coll_error), fmt, ap);
    va_end(ap);
}

static swy_status_t nccl_coll_cuda_fail(const char *call, cudaError_t err)
{
    nccl_coll_set_error("%s: %s (%s)", call, cudaGetErrorString(err),
                        cudaGetErrorName(err));
    swy_status_t status = nccl_status_from_cuda(err);
    return status == SWY_OK ? SWY_ERR_INTERNAL : status;
}

static swy_status_t nccl_coll_nccl_fail(const char *call, ncclResult_t res,
                                        ncclComm_t comm)
{
    const char *last = ncclGetLastError(comm);
    nccl_coll_set_error("%s: %s (%s)", call, ncclGetErrorString(res),
                        last != NULL && last[0] != '\0' ? last
                                                        : "no further detail");
    swy_status_t status = nccl_status_from_nccl(res);
    return status == SWY_OK ? SWY_ERR_INTERNAL : status;
}

/* ---- the device: as nccl_device_enter/leave, for a bare ordinal ------ */

static swy_status_t nccl_coll_enter(int device, int *prev_p)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        prev = -1;
    }
    if (prev != device) {
        cudaError_t err = cudaSetDevice(device);
        if (err != cudaSuccess)
            return nccl_coll_cuda_fail("cudaSetDevice", err);
    }
    *prev_p = prev;
    return SWY_OK;
}

static void nccl_coll_leave(int device, int prev)
{
    if (prev >= 0 && prev != device)
        (void)cudaSetDevice(prev);
}

/* ---- hub and launch records -------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    atomic_int refs;   /* the communicator + one per live record */
    swy_list_t pending; /* records whose done has not come, launch order */
    /* SWY_OK, or what a host function reports instead: the communicator
     * failed, and a kernel may have ended early (NCCL sets its abort flag
     * when a group fails). */
    swy_status_t broken;
} nccl_coll_hub_t;

typedef struct {
    swy_list_t link; /* on hub->pending until finished */
    nccl_coll_hub_t *hub;
    swy_devcoll_done_cb_v1_t done;
    void *arg;
    int finished; /* under hub->lock: done was (or is being) called */
    int refs;     /* under hub->lock: the host function, + comm_abort */
} nccl_coll_rec_t;

typedef struct {
    pthread_mutex_t issue_lock;
    ncclComm_t comm;      /* NULL once aborted or destroyed */
    ncclConfig_t config;  /* kept while NCCL may read it */
    cudaStream_t stream;
    atomic_int aborted;   /* comm_abort began */
    swy_status_t failed;  /* under issue_lock: SWY_OK or why launches fail */
    char failed_text[256]; /* the error text of that failure */
    double timeout_s;     /* also bounds a launch's wait for its group */
    int device;
    int nranks, rank, priority, stream_prio;
    char name[48];        /* NCCL's commName */
    nccl_coll_hub_t *hub;
} nccl_coll_t;

static nccl_coll_hub_t *nccl_coll_hub_create(void)
{
    nccl_coll_hub_t *hub = calloc(1, sizeof(*hub));
    if (hub == NULL)
        return NULL;
    if (pthread_mutex_init(&hub->lock, NULL) != 0) {
        free(hub);
        return NULL;
    }
    atomic_init(&hub->refs, 1);
    swy_list_init(&hub->pending);
    hub->broken = SWY_OK;
    return hub;
}

static void nccl_coll_hub_put(nccl_coll_hub_t *hub)
{
    if (hub != NULL && atomic_fetch_sub(&hub->refs, 1) == 1) {
        pthread_mutex_destroy(&hub->lock);
        free(hub);
    }
}

static void nccl_coll_rec_put(nccl_coll_rec_t *rec)
{
    nccl_coll_hub_t *hub = rec->hub;
    pthread_mutex_lock(&hub->lock);
    int last = --rec->refs == 0;
    pthread_mutex_unlock(&hub->lock);
    if (last) {
        free(rec);
        nccl_coll_hub_put(hub);
    }
}

/* The host function after a launch's kernels, on CUDA's thread: no CUDA
 * (nor NCCL) call here. It finishes the record unless comm_abort did, and
 * frees it in any case. */
static void CUDART_CB nccl_coll_host_done(void *arg)
{
    nccl_coll_rec_t *rec = arg;
    nccl_coll_hub_t *hub = rec->hub;
    swy_status_t status = SWY_OK;
    pthread_mutex_lock(&hub->lock);
    int mine = !rec->finished;
    if (mine) {
        rec->finished = 1;
        swy_list_del(&rec->link);
        status = hub->broken;
    }
    pthread_mutex_unlock(&hub->lock);
    if (mine)
        rec->done(rec->arg, status);
    nccl_coll_rec_put(rec);
}

/* ---- polling a non-blocking communicator -------------------------------- */

static double nccl_coll_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nccl_coll_backoff(double waited_s)
{
    if (waited_s < 1e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, waited_s < 0.1 ? 50000 : 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Wait until the last operation on c->comm (init or a group) is no longer
 * ncclInProgress. With watch_abort, gives up with SWY_ERR_ABORTED once
 * comm_abort has begun (it waits for issue_lock, which the caller holds). */
static swy_status_t nccl_coll_wait(nccl_coll_t *c, const char *what,
                                   double timeout_s, int watch_abort)
{
    double start = nccl_coll_now();
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t res = ncclCommGetAsyncError(c->comm, &state);
        if (res != ncclSuccess)
            return nccl_coll_nccl_fail("ncclCommGetAsyncError", res, c->comm);
        if (state == ncclSuccess)
            return SWY_OK;
        if (state != ncclInProgress)
            return nccl_coll_nccl_fail(what, state, c->comm);
        if (watch_abort && atomic_load(&c->aborted)) {
            nccl_coll_set_error("%s (%s): communicator aborted", what,
                                c->name);
            return SWY_ERR_ABORTED;
        }
        double waited = nccl_coll_now() - start;
        if (waited > timeout_s) {
            nccl_coll_set_error("%s (%s): still in progress after %.1f s "
                                "(rank %d of %d)",
                                what, c->name, waited, c->rank, c->nranks);
            return SWY_ERR_TIMEOUT;
        }
        nccl_coll_backoff(waited);
    }
}

/* Under issue_lock: later launches fail, and so do host functions still to
 * run. Keeps the first failure. */
static void nccl_coll_mark_failed(nccl_coll_t *c, swy_status_t status)
{
    if (c->failed != SWY_OK)
        return;
    c->failed = status;
    snprintf(c->failed_text, sizeof(c->failed_text), "%s", nccl_coll_error);
    pthread_mutex_lock(&c->hub->lock);
    c->hub->broken = SWY_ERR_TRANSPORT;
    pthread_mutex_unlock(&c->hub->lock);
}

/* ---- the table ------------------------------------------------------------ */

static swy_status_t nccl_coll_unique_id(void *id)
{
    if (id == NULL) {
        nccl_coll_set_error("unique_id: id is NULL");
        return SWY_ERR_INVALID_ARG;
    }
    ncclUniqueId uid;
    ncclResult_t res = ncclGetUniqueId(&uid);
    if (res != ncclSuccess)
        return nccl_coll_nccl_fail("ncclGetUniqueId", res, NULL);
    memcpy(id, &uid, sizeof(uid));
    return SWY_OK;
}

static void nccl_coll_free(nccl_coll_t *c)
{
    if (c->stream != NULL)
        (void)cudaStreamDestroy(c->stream);
    pthread_mutex_destroy(&c->issue_lock);
    nccl_coll_hub_put(c->hub);
    free(c);
}

/* NCCL connects a collective's channels at its first use, and that first
 * use waits until every rank got there. A first launch on one class's
 * communicator could then wait for a peer that is itself inside its first
 * launch on the other class's: each waits for the other (launches of
 * different classes go in no agreed order). So the collective channels
 * connect here, where every rank comes in the same order: a byte of
 * allreduce and of broadcast (ring and tree), and, up to
 * NCCL_COLL_CONNECT_P2P_MAX ranks, a byte sent to and received from every
 * peer, the rank itself included (an alltoallv's sends and receives;
 * a connection made later, inside an op, could also wait behind a gate on
 * the caller's stream that waits for that op). Above that, sends and
 * receives connect at first use: a connection to every peer is what
 * NCCL's lazy p2p saves at scale, and an alltoallv of both classes must
 * then have run once in the same order on every rank. */
#define NCCL_COLL_CONNECT_P2P_MAX 64
static swy_status_t nccl_coll_connect(nccl_coll_t *c)
{
    int p2p = c->nranks <= NCCL_COLL_CONNECT_P2P_MAX;
    size_t bytes = 2 + (p2p ? 2 * (size_t)c->nranks : 0);
    char *buf = NULL;
    cudaError_t err = cudaMalloc((void **)&buf, bytes);
    if (err != cudaSuccess)
        return nccl_coll_cuda_fail("cudaMalloc (connect)", err);
    swy_status_t status = SWY_OK;
    ncclResult_t res = ncclGroupStart();
    if (res == ncclSuccess) {
        ncclResult_t a = ncclAllReduce(buf, buf, 1, ncclUint8, ncclSum,
                                       c->comm, c->stream);
        ncclResult_t b = ncclBroadcast(buf + 1, buf + 1, 1, ncclUint8, 0,
                                       c->comm, c->stream);
        char *out = buf + 2, *in = out + c->nranks;
        /* The rank itself too: an alltoallv sends its own block. */
        for (int r = 0; p2p && r < c->nranks && b == ncclSuccess; r++) {
            b = ncclSend(out + r, 1, ncclUint8, r, c->comm, c->stream);
            if (b == ncclSuccess)
                b = ncclRecv(in + r, 1, ncclUint8, r, c->comm, c->stream);
        }
        res = ncclGroupEnd();
        if (a != ncclSuccess || b != ncclSuccess)
            status = nccl_coll_nccl_fail("connect: a first collective",
                                         a != ncclSuccess ? a : b, c->comm);
    }
    if (status == SWY_OK && res == ncclInProgress)
        status = nccl_coll_wait(c, "connect: ncclGroupEnd", c->timeout_s, 0);
    else if (status == SWY_OK && res != ncclSuccess)
        status = nccl_coll_nccl_fail("connect: ncclGroupEnd", res, c->comm);
    /* The kernels wait for the peers' too: bounded by the timeout. */
    double start = nccl_coll_now();
    while (status == SWY_OK) {
        err = cudaStreamQuery(c->stream);
        if (err == cudaSuccess)
            break;
        double waited = nccl_coll_now() - start;
        if (err != cudaErrorNotReady)
            status = nccl_coll_cuda_fail("cudaStreamQuery (connect)", err);
        else if (waited > c->timeout_s) {
            nccl_coll_set_error("connect (%s): the first collective did not "
                                "complete in %.1f s (rank %d of %d)", c->name,
                                waited, c->rank, c->nranks);
            status = SWY_ERR_TIMEOUT;
        } else {
            nccl_coll_backoff(waited);
        }
    }
    /* After a timeout the kernels may still read buf: the caller aborts
     * the communicator first, and the few bytes stay allocated. */
    if (status == SWY_OK)
        (void)cudaFree(buf);
    return status;
}

/* A communicator's host side and stream, on the caller's current device
 * (as nccl_init()); its NCCL communicator comes next. */
static swy_status_t nccl_coll_new(int nranks, int rank, int priority,
                                  double timeout_s, const char *what,
                                  nccl_coll_t **c_p)
{
    nccl_coll_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        nccl_coll_set_error("%s: out of host memory", what);
        return SWY_ERR_NO_MEMORY;
    }
    if (pthread_mutex_init(&c->issue_lock, NULL) != 0) {
        free(c);
        nccl_coll_set_error("%s: pthread_mutex_init failed", what);
        return SWY_ERR_SYSTEM;
    }
    c->hub = nccl_coll_hub_create();
    if (c->hub == NULL) {
        pthread_mutex_destroy(&c->issue_lock);
        free(c);
        nccl_coll_set_error("%s: out of host memory", what);
        return SWY_ERR_NO_MEMORY;
    }
    atomic_init(&c->aborted, 0);
    c->failed = SWY_OK;
    c->timeout_s = timeout_s;
    c->nranks = nranks;
    c->rank = rank;
    c->priority = priority;
    snprintf(c->name, sizeof(c->name), "swy:coll%d:%s", rank,
             priority > SWY_PRIO_DEFAULT ? "high" : "low");
    swy_status_t status = SWY_OK;
    cudaError_t err = cudaGetDevice(&c->device);
    if (err != cudaSuccess)
        status = nccl_coll_cuda_fail("cudaGetDevice", err);
    int least = 0, greatest = 0;
    if (status == SWY_OK &&
        (err = cudaDeviceGetStreamPriorityRange(&least, &greatest)) !=
            cudaSuccess)
        status = nccl_coll_cuda_fail("cudaDeviceGetStreamPriorityRange", err);
    /* Numerically lower is more urgent: greatest is the smallest number.
     * Non-blocking: the legacy default stream never waits for a
     * collective that waits for a peer. */
    c->stream_prio = priority > SWY_PRIO_DEFAULT ? greatest : least;
    if (status == SWY_OK &&
        (err = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking,
                                            c->stream_prio)) != cudaSuccess) {
        c->stream = NULL;
        status = nccl_coll_cuda_fail("cudaStreamCreateWithPriority", err);
    }
    if (status != SWY_OK) {
        nccl_coll_free(c);
        return status;
    }
    ncclConfig_t initial = NCCL_CONFIG_INITIALIZER;
    c->config = initial;
    c->config.blocking = 0;
    c->config.commName = c->name;
    *c_p = c;
    return SWY_OK;
}

/* c->comm was just made (or is being made): wait for it, connect it;
 * on failure abort it (never destroy: its init may wait for a peer, and
 * abort makes it give up) and free c. */
static swy_status_t nccl_coll_ready(nccl_coll_t *c, const char *what,
                                    void **comm_p)
{
    swy_status_t status = nccl_coll_wait(c, what, c->timeout_s, 0);
    if (status == SWY_OK)
        status = nccl_coll_connect(c);
    if (status == SWY_OK) {
        *comm_p = c;
        return SWY_OK;
    }
    if (c->comm != NULL) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    nccl_coll_free(c);
    return status;
}

static swy_status_t nccl_coll_comm_init(const void *id, int nranks, int rank,
                                        int priority, double timeout_s,
                                        void **comm_p)
{
    if (comm_p != NULL)
        *comm_p = NULL;
    if (id == NULL || comm_p == NULL || nranks < 1 || rank < 0 ||
        rank >= nranks || !(timeout_s > 0)) {
        nccl_coll_set_error("comm_init: bad argument (id %p, rank %d of %d, "
                            "timeout %g s)",
                            id, rank, nranks, timeout_s);
        return SWY_ERR_INVALID_ARG;
    }
    nccl_coll_t *c;
    swy_status_t status = nccl_coll_new(nranks, rank, priority, timeout_s,
                                        "comm_init", &c);
    if (status != SWY_OK)
        return status;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof(uid));
    /* Returns ncclInProgress (or ncclSuccess) while NCCL's thread joins
     * the other ranks; c->comm is valid from here on either way. */
    ncclResult_t res = ncclCommInitRankConfig(&c->comm, nranks, uid, rank,
                                              &c->config);
    if (res != ncclSuccess && res != ncclInProgress) {
        status = nccl_coll_nccl_fail("ncclCommInitRankConfig", res, c->comm);
        if (c->comm != NULL)
            (void)ncclCommAbort(c->comm);
        c->comm = NULL;
        nccl_coll_free(c);
        return status;
    }
    return nccl_coll_ready(c, "ncclCommInitRankConfig", comm_p);
}

/* As ncclCommSplit, on the parent's device and under its issue_lock (an
 * NCCL communicator is not thread-safe, and the host's progress may be
 * launching on it): the parent is busy with the split until every rank
 * took part, so no launch goes to it before. */
static swy_status_t nccl_coll_comm_split(void *parent, int color, int key,
                                         int priority, double timeout_s,
                                         void **comm_p)
{
    nccl_coll_t *p = parent;
    if (comm_p != NULL)
        *comm_p = NULL;
    if (p == NULL || comm_p == NULL || !(timeout_s > 0)) {
        nccl_coll_set_error("comm_split: bad argument (parent %p, timeout "
                            "%g s)", parent, timeout_s);
        return SWY_ERR_INVALID_ARG;
    }
    int prev;
    swy_status_t status = nccl_coll_enter(p->device, &prev);
    if (status != SWY_OK)
        return status;
    /* Its rank and size are NCCL's to tell: filled in below. */
    nccl_coll_t *c = NULL;
    status = nccl_coll_new(0, 0, priority, timeout_s, "comm_split", &c);
    if (status == SWY_OK) {
        pthread_mutex_lock(&p->issue_lock);
        if (atomic_load(&p->aborted) || p->comm == NULL ||
            p->failed != SWY_OK) {
            nccl_coll_set_error("comm_split (%s): the parent communicator "
                                "was aborted or failed", p->name);
            status = SWY_ERR_ABORTED;
        } else {
            ncclResult_t res = ncclCommSplit(
                p->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                &c->comm, &c->config);
            if (res != ncclSuccess && res != ncclInProgress)
                status = nccl_coll_nccl_fail("ncclCommSplit", res, p->comm);
            else
                status = nccl_coll_wait(p, "ncclCommSplit (parent)",
                                        timeout_s, 0);
        }
        pthread_mutex_unlock(&p->issue_lock);
    }
    if (status == SWY_OK && color >= 0 && c->comm == NULL) {
        nccl_coll_set_error("comm_split (%s): NCCL made no communicator for "
                            "color %d", p->name, color);
        status = SWY_ERR_INTERNAL;
    }
    if (status != SWY_OK || color < 0) {
        if (c != NULL && c->comm != NULL)
            (void)ncclCommAbort(c->comm);
        if (c != NULL) {
            c->comm = NULL;
            nccl_coll_free(c);
        }
        nccl_coll_leave(p->device, prev);
        return status;
    }
    status = nccl_coll_wait(c, "ncclCommSplit", timeout_s, 0);
    int nranks = 0, rank = 0;
    ncclResult_t res = ncclSuccess;
    if (status == SWY_OK &&
        ((res = ncclCommCount(c->comm, &nranks)) != ncclSuccess ||
         (res = ncclCommUserRank(c->comm, &rank)) != ncclSuccess))
        status = nccl_coll_nccl_fail("ncclCommCount/UserRank", res, c->comm);
    if (status != SWY_OK) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
        nccl_coll_free(c);
        nccl_coll_leave(p->device, prev);
        return status;
    }
    c->nranks = nranks;
    c->rank = rank;
    snprintf(c->name, sizeof(c->name), "swy:coll%d:%s", rank,
             priority > SWY_PRIO_DEFAULT ? "high" : "low");
    status = nccl_coll_ready(c, "ncclCommSplit", comm_p);
    nccl_coll_leave(p->device, prev);
    return status;
}

static int nccl_coll_dtype(int dtype, ncclDataType_t *out, size_t *size)
{
    switch (dtype) {
    case SWY_INT8:     *out = ncclInt8;     *size = 1; return 1;
    case SWY_UINT8:    *out = ncclUint8;    *size = 1; return 1;
    case SWY_INT32:    *out = ncclInt32;    *size = 4; return 1;
    case SWY_INT64:    *out = ncclInt64;    *size = 8; return 1;
    case SWY_FLOAT16:  *out = ncclFloat16;  *size = 2; return 1;
    case SWY_BFLOAT16: *out = ncclBfloat16; *size = 2; return 1;
    case SWY_FLOAT32:  *out = ncclFloat32;  *size = 4; return 1;
    case SWY_FLOAT64:  *out = ncclFloat64;  *size = 8; return 1;
    default:
        return 0;
    }
}

static int nccl_coll_redop(int redop, ncclRedOp_t *out)
{
    switch (redop) {
    case SWY_SUM:  *out = ncclSum;  return 1;
    case SWY_PROD: *out = ncclProd; return 1;
    case SWY_MAX:  *out = ncclMax;  return 1;
    case SWY_MIN:  *out = ncclMin;  return 1;
    case SWY_AVG:  *out = ncclAvg;  return 1; /* NCCL divides by nranks */
    default:
        return 0;
    }
}

static const char *nccl_coll_kind_name(int kind)
{
    switch (kind) {
    case SWY_DEVCOLL_ALLREDUCE: return "allreduce";
    case SWY_DEVCOLL_REDUCE:    return "reduce";
    case SWY_DEVCOLL_BROADCAST: return "broadcast";
    case SWY_DEVCOLL_SEND:      return "send";
    case SWY_DEVCOLL_RECV:      return "recv";
    default:                    return "?";
    }
}

static swy_status_t nccl_coll_check_call(const nccl_coll_t *c, int i,
                                         const swy_devcoll_call_v1_t *call)
{
    ncclDataType_t dt;
    ncclRedOp_t op;
    size_t size;
    int kind = call->kind;
    if (kind < SWY_DEVCOLL_ALLREDUCE || kind > SWY_DEVCOLL_RECV) {
        nccl_coll_set_error("launch: call %d: unknown kind %d", i, kind);
        return SWY_ERR_INVALID_ARG;
    }
    const char *name = nccl_coll_kind_name(kind);
    if (!nccl_coll_dtype((int)call->dtype, &dt, &size)) {
        nccl_coll_set_error("launch: call %d (%s): unknown dtype %d", i, name,
                            (int)call->dtype);
        return SWY_ERR_INVALID_ARG;
    }
    int reduces = kind == SWY_DEVCOLL_ALLREDUCE || kind == SWY_DEVCOLL_REDUCE;
    if (reduces && !nccl_coll_redop((int)call->redop, &op)) {
        nccl_coll_set_error("launch: call %d (%s): unknown redop %d", i, name,
                            (int)call->redop);
        return SWY_ERR_INVALID_ARG;
    }
    if (kind != SWY_DEVCOLL_ALLREDUCE &&
        (call->root < 0 || call->root >= c->nranks)) {
        nccl_coll_set_error("launch: call %d (%s): %s %d out of range "
                            "(%d ranks)",
                            i, name,
                            kind == SWY_DEVCOLL_SEND || kind == SWY_DEVCOLL_RECV
                                ? "peer"
                                : "root",
                            call->root, c->nranks);
        return SWY_ERR_INVALID_ARG;
    }
    if (call->count > SIZE_MAX / size) {
        nccl_coll_set_error("launch: call %d (%s): %zu elements of %zu bytes "
                            "overflow size_t",
                            i, name, call->count, size);
        return SWY_ERR_INVALID_ARG;
    }
    if (call->count == 0)
        return SWY_OK;
    int at_root = call->root == c->rank;
    int need_send = kind == SWY_DEVCOLL_ALLREDUCE ||
                    kind == SWY_DEVCOLL_REDUCE || kind == SWY_DEVCOLL_SEND ||
                    (kind == SWY_DEVCOLL_BROADCAST && at_root);
    int need_recv = kind == SWY_DEVCOLL_ALLREDUCE ||
                    kind == SWY_DEVCOLL_BROADCAST || kind == SWY_DEVCOLL_RECV ||
                    (kind == SWY_DEVCOLL_REDUCE && at_root);
    if ((need_send && call->sendbuf == NULL) ||
        (need_recv && call->recvbuf == NULL)) {
        nccl_coll_set_error("launch: call %d (%s): NULL %s of %zu elements", i,
                            name, need_send && call->sendbuf == NULL
                                      ? "sendbuf"
                                      : "recvbuf",
                            call->count);
        return SWY_ERR_INVALID_ARG;
    }
    return SWY_OK;
}

/* One call inside the open group; arguments already checked. */
static ncclResult_t nccl_coll_issue(nccl_coll_t *c,
                                    const swy_devcoll_call_v1_t *call)
{
    ncclDataType_t dt = ncclInt8;
    ncclRedOp_t op = ncclSum;
    size_t size;
    (void)nccl_coll_dtype((int)call->dtype, &dt, &size);
    switch (call->kind) {
    case SWY_DEVCOLL_ALLREDUCE:
        (void)nccl_coll_redop((int)call->redop, &op);
        return ncclAllReduce(call->sendbuf, call->recvbuf, call->count, dt, op,
                             c->comm, c->stream);
    case SWY_DEVCOLL_REDUCE:
        (void)nccl_coll_redop((int)call->redop, &op);
        return ncclReduce(call->sendbuf, call->recvbuf, call->count, dt, op,
                          call->root, c->comm, c->stream);
    case SWY_DEVCOLL_BROADCAST:
        return ncclBroadcast(call->sendbuf, call->recvbuf, call->count, dt,
                             call->root, c->comm, c->stream);
    case SWY_DEVCOLL_SEND:
        return ncclSend(call->sendbuf, call->count, dt, call->root, c->comm,
                        c->stream);
    case SWY_DEVCOLL_RECV:
        return ncclRecv(call->recvbuf, call->count, dt, call->root, c->comm,
                        c->stream);
    default:
        return ncclInvalidArgument;
    }
}

/* Under issue_lock, on the device: the group, its wait, the host function.
 * SWY_OK: rec belongs to the host function. */
static swy_status_t nccl_coll_enqueue(nccl_coll_t *c,
                                      const swy_devcoll_call_v1_t *calls,
                                      int ncalls, nccl_coll_rec_t *rec)
{
    /* An asynchronous error (a peer gone, a network failure) leaves the
     * communicator unusable. */
    ncclResult_t state = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(c->comm, &state);
    if (res != ncclSuccess)
        return nccl_coll_nccl_fail("ncclCommGetAsyncError", res, c->comm);
    if (state != ncclSuccess)
        return nccl_coll_nccl_fail("communicator (asynchronous error)", state,
                                   c->comm);

    res = ncclGroupStart();
    if (res != ncclSuccess)
        return nccl_coll_nccl_fail("ncclGroupStart", res, c->comm);
    swy_status_t status = SWY_OK;
    for (int i = 0; i < ncalls && status == SWY_OK; i++) {
        res = nccl_coll_issue(c, &calls[i]);
        if (res != ncclSuccess) {
            char what[48];
            snprintf(what, sizeof(what), "nccl %s (call %d)",
                     nccl_coll_kind_name(calls[i].kind), i);
            status = nccl_coll_nccl_fail(what, res, c->comm);
        }
    }
    /* Always close the group, also after a failure inside it (NCCL then
     * launches nothing of it). */
    res = ncclGroupEnd();
    if (status != SWY_OK)
        return status;
    if (res == ncclInProgress)
        status = nccl_coll_wait(c, "ncclGroupEnd", c->timeout_s, 1);
    else if (res != ncclSuccess)
        status = nccl_coll_nccl_fail("ncclGroupEnd", res, c->comm);
    if (status != SWY_OK)
        return status;

    /* The kernels are on the stream: the host function goes after them.
     * The record is pending before CUDA may run it. */
    nccl_coll_hub_t *hub = c->hub;
    rec->hub = hub;
    rec->refs = 1;
    rec->finished = 0;
    atomic_fetch_add(&hub->refs, 1);
    pthread_mutex_lock(&hub->lock);
    swy_list_push_back(&hub->pending, &rec->link);
    pthread_mutex_unlock(&hub->lock);
    cudaError_t err = cudaLaunchHostFunc(c->stream, nccl_coll_host_done, rec);
    if (err != cudaSuccess) {
        /* Not enqueued, so never run; comm_abort cannot have taken the
         * record (it waits for issue_lock). */
        pthread_mutex_lock(&hub->lock);
        swy_list_del(&rec->link);
        pthread_mutex_unlock(&hub->lock);
        nccl_coll_hub_put(hub);
        rec->hub = NULL;
        return nccl_coll_cuda_fail("cudaLaunchHostFunc", err);
    }
    return SWY_OK;
}

static swy_status_t nccl_coll_launch(void *comm,
                                     const swy_devcoll_call_v1_t *calls,
                                     int ncalls, swy_devcoll_done_cb_v1_t done,
                                     void *arg)
{
    nccl_coll_t *c = comm;
    if (c == NULL || done == NULL || ncalls < 0 ||
        (ncalls > 0 && calls == NULL)) {
        nccl_coll_set_error("launch: bad argument (comm %p, %d calls at %p, "
                            "done %s)",
                            comm, ncalls, (const void *)calls,
                            done != NULL ? "set" : "NULL");
        return SWY_ERR_INVALID_ARG;
    }
    for (int i = 0; i < ncalls; i++) {
        swy_status_t status = nccl_coll_check_call(c, i, &calls[i]);
        if (status != SWY_OK)
            return status;
    }
    nccl_coll_rec_t *rec = calloc(1, sizeof(*rec));
    if (rec == NULL) {
        nccl_coll_set_error("launch: out of host memory");
        return SWY_ERR_NO_MEMORY;
    }
    swy_list_init(&rec->link);
    rec->done = done;
    rec->arg = arg;

    swy_status_t status;
    pthread_mutex_lock(&c->issue_lock);
    if (atomic_load(&c->aborted) || c->comm == NULL) {
        nccl_coll_set_error("launch (%s): communicator aborted", c->name);
        status = SWY_ERR_ABORTED;
    } else if (c->failed != SWY_OK) {
        nccl_coll_set_error("launch (%s): communicator failed earlier: %s",
                            c->name, c->failed_text);
        status = SWY_ERR_TRANSPORT;
    } else {
        int prev;
        status = nccl_coll_enter(c->device, &prev);
        if (status == SWY_OK) {
            status = nccl_coll_enqueue(c, calls, ncalls, rec);
            /* An NCCL failure leaves a non-blocking communicator in error
             * (and a timed-out group still pending): no later launch. */
            if (status != SWY_OK && status != SWY_ERR_ABORTED)
                nccl_coll_mark_failed(c, status);
            nccl_coll_leave(c->device, prev);
        }
    }
    pthread_mutex_unlock(&c->issue_lock);
    if (status != SWY_OK)
        free(rec);
    return status;
}

static void nccl_coll_comm_abort(void *comm)
{
    nccl_coll_t *c = comm;
    if (c == NULL)
        return;
    /* A launch polling its group gives up on this, and frees issue_lock. */
    atomic_store(&c->aborted, 1);
    swy_list_t mine;
    pthread_mutex_lock(&c->issue_lock);
    /* Take the pending records before ncclCommAbort: a kernel that the
     * abort ends early lets its host function run, which must not report
     * SWY_OK. No launch adds a record while issue_lock is held. */
    pthread_mutex_lock(&c->hub->lock);
    c->hub->broken = SWY_ERR_ABORTED;
    swy_list_take(&mine, &c->hub->pending);
    swy_list_t *pos, *tmp;
    swy_list_for_each_safe(pos, tmp, &mine) {
        nccl_coll_rec_t *rec = swy_container_of(pos, nccl_coll_rec_t, link);
        rec->finished = 1;
        rec->refs++; /* held until its done has returned */
    }
    pthread_mutex_unlock(&c->hub->lock);
    if (c->comm != NULL) {
        int prev = -1;
        int entered = nccl_coll_enter(c->device, &prev) == SWY_OK;
        /* Blocking even on a non-blocking communicator; sets NCCL's abort
         * flag, which makes its kernels in flight exit, and joins a group
         * still in progress. */
        ncclResult_t res = ncclCommAbort(c->comm);
        if (res != ncclSuccess)
            (void)nccl_coll_nccl_fail("ncclCommAbort", res, NULL);
        c->comm = NULL;
        if (entered)
            nccl_coll_leave(c->device, prev);
    }
    pthread_mutex_unlock(&c->issue_lock);
    /* After the abort: done lets the caller reuse the buffers. */
    swy_list_for_each_safe(pos, tmp, &mine) {
        nccl_coll_rec_t *rec = swy_container_of(pos, nccl_coll_rec_t, link);
        swy_list_del(&rec->link); /* `mine` is this thread's own */
        rec->done(rec->arg, SWY_ERR_ABORTED);
        nccl_coll_rec_put(rec);
    }
}

static void nccl_coll_comm_destroy(void *comm)
{
    nccl_coll_t *c = comm;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->issue_lock);
    int failed = c->failed != SWY_OK;
    pthread_mutex_unlock(&c->issue_lock);
    pthread_mutex_lock(&c->hub->lock);
    int pending = !swy_list_empty(&c->hub->pending);
    pthread_mutex_unlock(&c->hub->lock);
    /* ncclCommDestroy waits for the communicator's work: a failed one, or
     * one with launches still out (which the caller promised not to
     * leave), is aborted instead, their done called with
     * SWY_ERR_ABORTED. */
    if (c->comm != NULL && (failed || pending))
        nccl_coll_comm_abort(c);
    int prev = -1;
    int entered = nccl_coll_enter(c->device, &prev) == SWY_OK;
    if (c->comm != NULL) {
        ncclResult_t res = ncclCommDestroy(c->comm);
        if (res != ncclSuccess)
            (void)nccl_coll_nccl_fail("ncclCommDestroy", res, NULL);
        c->comm = NULL;
    }
    /* cudaStreamDestroy returns at once; CUDA still runs the host
     * functions queued on the stream, and they free their records (and
     * the hub with the last one). */
    if (c->stream != NULL) {
        cudaError_t err = cudaStreamDestroy(c->stream);
        if (err != cudaSuccess)
            (void)nccl_coll_cuda_fail("cudaStreamDestroy", err);
        c->stream = NULL;
    }
    if (entered)
        nccl_coll_leave(c->device, prev);
    nccl_coll_free(c);
}

static const char *nccl_coll_error_string(void)
{
    return nccl_coll_error;
}

__attribute__((visibility("default"))) const swy_devcoll_v1_t
    swy_devcoll_plugin_v1 = {
        .abi_version = SWY_DEVCOLL_ABI_V1,
        .struct_size = sizeof(swy_devcoll_v1_t),
        .name = "nccl",
        .id_bytes = sizeof(ncclUniqueId),
        .unique_id = nccl_coll_unique_id,
        .comm_init = nccl_coll_comm_init,
        .comm_destroy = nccl_coll_comm_destroy,
        .comm_abort = nccl_coll_comm_abort,
        .launch = nccl_coll_launch,
        .error_string = nccl_coll_error_string,
        .comm_split = nccl_coll_comm_split,
};
