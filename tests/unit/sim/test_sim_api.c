/* swy_sim.h without SimGrid: every rank of a job in this process over a
 * transport that hands each message to its receiver at once (this
 * test's), on a clock the test drives, progressed by swy_test. The
 * results are checked against sums computed here. */
#include <stdlib.h>
#include <string.h>

#include "check_swy.h"
#include "switchyard/swy_sim.h"

#define NRANKS 4
#define COUNT 1000

/* The test's transport: a send is matched (source, tag, posting order)
 * with a posted receive or kept, copied, until one is posted; both
 * completions wait for the ranks' next progress. */
typedef struct msg {
    struct msg *next;
    int src;
    uint64_t tag;
    size_t len;
    void *buf; /* a posted receive's, or the kept copy */
    swy_transport_complete_cb_v1_t cb;
    void *arg;
    swy_status_t status;
} msg_t;

typedef struct {
    int rank;
    msg_t *posted, *kept, *done;
} mem_ctx_t;

static mem_ctx_t *ranks[NRANKS];
static uint64_t now_ns = 1000000000u;
static uint64_t clock_reads;

static uint64_t test_clock(void *arg)
{
    (void)arg;
    clock_reads++;
    return now_ns += 1000;
}

static void push(msg_t **list, msg_t *m)
{
    m->next = NULL;
    while (*list != NULL)
        list = &(*list)->next;
    *list = m;
}

static msg_t *take(msg_t **list, int src, uint64_t tag)
{
    for (; *list != NULL; list = &(*list)->next)
        if ((*list)->src == src && (*list)->tag == tag) {
            msg_t *m = *list;
            *list = m->next;
            return m;
        }
    return NULL;
}

static void complete(mem_ctx_t *c, swy_transport_complete_cb_v1_t cb,
                     void *arg, swy_status_t status, size_t len)
{
    msg_t *d = calloc(1, sizeof(*d));
    d->cb = cb;
    d->arg = arg;
    d->status = status;
    d->len = len;
    push(&c->done, d);
}

static swy_status_t m_init(const swy_transport_host_v1_t *host, void **ctx)
{
    mem_ctx_t *c = calloc(1, sizeof(*c));
    c->rank = host->rank;
    ranks[host->rank] = c;
    *ctx = c;
    return SWY_OK;
}

static swy_status_t m_query(void *ctx, swy_transport_caps_v1_t *caps)
{
    (void)ctx;
    memset(caps, 0, sizeof(*caps));
    caps->mem_types = 1u << SWY_MEM_HOST;
    caps->score[SWY_LINK_SAME_NUMA] = caps->score[SWY_LINK_SAME_NODE] =
        caps->score[SWY_LINK_CROSS_NODE] = 1;
    caps->max_address_len = 1;
    return SWY_OK;
}

static swy_status_t m_address(void *ctx, void *addr, size_t *len)
{
    *(uint8_t *)addr = (uint8_t)((mem_ctx_t *)ctx)->rank;
    *len = 1;
    return SWY_OK;
}

static swy_status_t m_connect(void *ctx, const void *const *addrs,
                              const size_t *lens, const uint8_t *reachable)
{
    (void)ctx, (void)addrs, (void)lens, (void)reachable;
    return SWY_OK;
}

static swy_status_t m_isend(void *ctx, int peer, uint64_t tag,
                            const void *buf, size_t len, swy_mem_type_t mem,
                            swy_transport_complete_cb_v1_t cb, void *arg,
                            void **handle)
{
    mem_ctx_t *c = ctx, *to = ranks[peer];
    (void)mem;
    msg_t *r = take(&to->posted, c->rank, tag);
    if (r != NULL) {
        memcpy(r->buf, buf, len < r->len ? len : r->len);
        complete(to, r->cb, r->arg, len <= r->len ? SWY_OK : SWY_ERR_MISMATCH,
                 len < r->len ? len : r->len);
        free(r);
    } else {
        msg_t *k = calloc(1, sizeof(*k));
        k->src = c->rank;
        k->tag = tag;
        k->len = len;
        k->buf = malloc(len ? len : 1);
        memcpy(k->buf, buf, len);
        push(&to->kept, k);
    }
    complete(c, cb, arg, SWY_OK, len);
    *handle = NULL;
    return SWY_OK;
}

static swy_status_t m_irecv(void *ctx, int peer, uint64_t tag, void *buf,
                            size_t len, swy_mem_type_t mem,
                            swy_transport_complete_cb_v1_t cb, void *arg,
                            void **handle)
{
    mem_ctx_t *c = ctx;
    (void)mem;
    msg_t *k = take(&c->kept, peer, tag);
    if (k != NULL) {
        memcpy(buf, k->buf, k->len < len ? k->len : len);
        complete(c, cb, arg, k->len <= len ? SWY_OK : SWY_ERR_MISMATCH,
                 k->len < len ? k->len : len);
        free(k->buf);
        free(k);
        *handle = NULL;
        return SWY_OK;
    }
    msg_t *r = calloc(1, sizeof(*r));
    r->src = peer;
    r->tag = tag;
    r->buf = buf;
    r->len = len;
    r->cb = cb;
    r->arg = arg;
    push(&c->posted, r);
    *handle = r;
    return SWY_OK;
}

static void m_cancel(void *ctx, void *handle)
{
    mem_ctx_t *c = ctx;
    for (msg_t **at = &c->posted; *at != NULL; at = &(*at)->next)
        if (*at == handle) {
            msg_t *r = *at;
            *at = r->next;
            complete(c, r->cb, r->arg, SWY_ERR_ABORTED, 0);
            free(r);
            return;
        }
}

static int m_progress(void *ctx)
{
    mem_ctx_t *c = ctx;
    msg_t *d = c->done;
    int n = 0;
    c->done = NULL;
    while (d != NULL) {
        msg_t *next = d->next;
        d->cb(d->arg, d->status, d->len);
        free(d);
        d = next;
        n++;
    }
    return n;
}

static int m_event_fd(void *ctx)
{
    (void)ctx;
    return -1;
}

static swy_status_t m_arm(void *ctx)
{
    return ((mem_ctx_t *)ctx)->done != NULL ? SWY_INPROGRESS : SWY_OK;
}

static swy_status_t m_describe(void *ctx, int peer, char *buf, size_t len)
{
    (void)ctx;
    snprintf(buf, len, "mem:%d", peer);
    return SWY_OK;
}

static void m_finalize(void *ctx)
{
    mem_ctx_t *c = ctx;
    ranks[c->rank] = NULL;
    free(c);
}

static const swy_transport_v1_t mem_ops = {
    .abi_version = SWY_TRANSPORT_ABI_V1,
    .struct_size = sizeof(swy_transport_v1_t),
    .name = "mem",
    .init = m_init,
    .query = m_query,
    .get_address = m_address,
    .connect = m_connect,
    .isend = m_isend,
    .irecv = m_irecv,
    .cancel = m_cancel,
    .progress = m_progress,
    .event_fd = m_event_fd,
    .arm = m_arm,
    .describe_peer = m_describe,
    .finalize = m_finalize,
};

/* swy_test every rank's request in turn until all are done. */
static int run_all(swy_request_t *reqs, int n)
{
    int left = n;
    for (int pass = 0; left > 0 && pass < 100000; pass++)
        for (int r = 0; r < n; r++) {
            int done = 0;
            if (reqs[r] == NULL)
                continue;
            CHECK_OK_RET(swy_test(reqs[r], &done), NULL);
            if (done) {
                swy_request_free(reqs[r]);
                reqs[r] = NULL;
                left--;
            }
        }
    CHECK(left == 0, "%d requests never completed", left);
    return left == 0 ? 0 : 1;
}

int main(void)
{
    static float send[NRANKS][NRANKS * COUNT], recv[NRANKS][NRANKS * COUNT];
    int node_of[NRANKS] = {0, 0, 1, 1};
    swy_comm_t comms[NRANKS], halves[NRANKS];
    swy_request_t reqs[NRANKS];
    swy_sim_params_t params = {sizeof(params), NRANKS, node_of, NULL, NULL,
                               &mem_ops};

    /* Bad parameters are refused with a message that says which. */
    params.struct_size = 1;
    CHECK(swy_sim_comms_create(&params, comms) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_last_error(NULL), "struct_size") != NULL, "%s",
          swy_last_error(NULL));
    params.struct_size = sizeof(params);
    params.node_of = NULL;
    CHECK(swy_sim_comms_create(&params, comms) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_last_error(NULL), "node_of") != NULL, "%s",
          swy_last_error(NULL));
    params.node_of = node_of;

    swy_sim_clock_set(test_clock, NULL);
    CHECK_OK_RET(swy_sim_comms_create(&params, comms), NULL);
    for (int r = 0; r < NRANKS; r++) {
        CHECK(swy_comm_rank(comms[r]) == r && swy_comm_size(comms[r]) == 4);
        for (int i = 0; i < COUNT; i++)
            send[r][i] = (float)(r + 1) * (float)(i % 7);
    }

    /* allreduce: the sum over ranks, element by element. */
    for (int r = 0; r < NRANKS; r++)
        CHECK_OK_RET(swy_allreduce(send[r], recv[r], COUNT, SWY_FLOAT32,
                                   SWY_SUM, comms[r], NULL, &reqs[r]),
                     comms[r]);
    if (run_all(reqs, NRANKS) != 0)
        return 1;
    for (int r = 0; r < NRANKS; r++)
        for (int i = 0; i < COUNT; i++)
            if (recv[r][i] != 10.0f * (float)(i % 7)) {
                CHECK(0, "allreduce: rank %d [%d] = %g, expected %g", r, i,
                      (double)recv[r][i], 10.0 * (i % 7));
                break;
            }
    /* The engines read the test's clock, not the monotonic one. */
    CHECK(clock_reads > 0);

    /* alltoallv: rank r sends 100 r + p to each p. */
    size_t counts[NRANKS], displs[NRANKS];
    for (int p = 0; p < NRANKS; p++) {
        counts[p] = COUNT;
        displs[p] = (size_t)p * COUNT;
    }
    for (int r = 0; r < NRANKS; r++) {
        for (int p = 0; p < NRANKS; p++)
            for (int i = 0; i < COUNT; i++)
                send[r][p * COUNT + i] = (float)(100 * r + p);
        CHECK_OK_RET(swy_alltoallv(send[r], counts, displs, recv[r], counts,
                                   displs, SWY_FLOAT32, comms[r], NULL,
                                   &reqs[r]),
                     comms[r]);
    }
    if (run_all(reqs, NRANKS) != 0)
        return 1;
    for (int r = 0; r < NRANKS; r++)
        for (int p = 0; p < NRANKS; p++)
            CHECK(recv[r][p * COUNT + COUNT - 1] == (float)(100 * p + r),
                  "alltoallv: rank %d got %g from %d", r,
                  (double)recv[r][p * COUNT + COUNT - 1], p);

    /* A split by node: each half sums its own two ranks. */
    int colors[NRANKS] = {0, 0, 1, 1}, keys[NRANKS] = {0, 1, 2, 3};
    CHECK_OK_RET(swy_sim_comms_split(comms, NRANKS, colors, keys, halves),
                 NULL);
    for (int r = 0; r < NRANKS; r++) {
        CHECK(swy_comm_size(halves[r]) == 2 && swy_comm_rank(halves[r]) ==
                                                   r % 2);
        send[r][0] = (float)(r + 1);
        CHECK_OK_RET(swy_allreduce(send[r], recv[r], 1, SWY_FLOAT32, SWY_SUM,
                                   halves[r], NULL, &reqs[r]),
                     halves[r]);
    }
    if (run_all(reqs, NRANKS) != 0)
        return 1;
    for (int r = 0; r < NRANKS; r++)
        CHECK(recv[r][0] == (r < 2 ? 3.0f : 7.0f), "split: rank %d sum %g",
              r, (double)recv[r][0]);
    /* Only the whole job splits at once. */
    CHECK(swy_sim_comms_split(halves, NRANKS, colors, keys, halves) ==
          SWY_ERR_INVALID_ARG);

    for (int r = 0; r < NRANKS; r++)
        CHECK_OK(swy_comm_destroy(halves[r]), NULL);
    for (int r = 0; r < NRANKS; r++)
        CHECK_OK(swy_comm_destroy(comms[r]), NULL);
    swy_sim_clock_set(NULL, NULL);
    return 0;
}
