/* Stress: hundreds of concurrent collectives of random kind, size and
 * priority, posted in the same order on every rank (up to 48 in flight),
 * waited for in a random order; every result checked; bounded time.
 * Usage: test_stress NRANKS NOPS SEED */
#include <string.h>

#include "harness.h"

enum { K_A2A, K_AR, K_AG, K_BC, K_NKINDS };
#define MAX_INFLIGHT 48

typedef struct {
    int kind, prio, root;
    size_t count;
    size_t *sc, *sd, *rc, *rd;
    int32_t *send, *recv;
    swy_request_t req;
} op_t;

static uint64_t seed = 99;

static int32_t val(int src, int dst, size_t i, int k)
{
    return (int32_t)((uint32_t)src * 2654435761u ^ (uint32_t)dst * 40503u ^
                     (uint32_t)i * 97u ^ (uint32_t)k * 131u) & 0xffff;
}

static void op_make(op_t *op, int k, int rank, int w)
{
    uint64_t st = seed * 1000003u + (uint64_t)k;
    memset(op, 0, sizeof(*op));
    op->kind = (int)(swy_test_rand(&st) % K_NKINDS);
    op->prio = (int)(swy_test_rand(&st) % 3) * 50;
    op->root = (int)(swy_test_rand(&st) % (uint64_t)w);
    uint64_t r = swy_test_rand(&st);
    op->count = r % 5 == 0 ? 0 : (size_t)(swy_test_rand(&st) % (r % 2 ? 200000 : 300));
    size_t n = op->count, total = 0;
    switch (op->kind) {
    case K_A2A: {
        op->sc = calloc((size_t)w * 4, sizeof(size_t));
        op->sd = op->sc + w;
        op->rc = op->sc + 2 * w;
        op->rd = op->sc + 3 * w;
        size_t soff = 0, roff = 0;
        for (int j = 0; j < w; j++) {
            /* counts[i][j] from a generator all ranks share */
            uint64_t a = seed ^ ((uint64_t)k << 32) ^ (uint64_t)(rank * w + j);
            uint64_t b = seed ^ ((uint64_t)k << 32) ^ (uint64_t)(j * w + rank);
            op->sc[j] = n ? swy_test_rand(&a) % (n / (size_t)w + 1) : 0;
            op->rc[j] = n ? swy_test_rand(&b) % (n / (size_t)w + 1) : 0;
            op->sd[j] = soff;
            op->rd[j] = roff;
            soff += op->sc[j];
            roff += op->rc[j];
        }
        op->send = malloc((soff + 1) * 4);
        op->recv = malloc((roff + 1) * 4);
        for (int j = 0; j < w; j++)
            for (size_t i = 0; i < op->sc[j]; i++)
                op->send[op->sd[j] + i] = val(rank, j, i, k);
        return;
    }
    case K_AR: total = n; break;
    case K_AG: total = n * (size_t)w; break;
    case K_BC: total = n; break;
    }
    op->send = malloc((n + 1) * 4);
    op->recv = malloc((total + 1) * 4);
    for (size_t i = 0; i < n; i++)
        op->send[i] = val(rank, 0, i, k);
    if (op->kind == K_BC)
        memcpy(op->recv, op->send, n * 4);
}

static swy_status_t op_post(op_t *op, swy_comm_t comm)
{
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.priority = op->prio;
    attr.name = "stress";
    switch (op->kind) {
    case K_A2A:
        return swy_alltoallv(op->send, op->sc, op->sd, op->recv, op->rc,
                             op->rd, SWY_INT32, comm, &attr, &op->req);
    case K_AR:
        return swy_allreduce(op->send, op->recv, op->count, SWY_INT32,
                             SWY_SUM, comm, &attr, &op->req);
    case K_AG:
        return swy_allgather(op->send, op->recv, op->count, SWY_INT32, comm,
                             &attr, &op->req);
    default:
        return swy_broadcast(op->recv, op->count, SWY_INT32, op->root, comm,
                             &attr, &op->req);
    }
}

static int op_check(op_t *op, int k, int rank, int w)
{
    size_t n = op->count;
    switch (op->kind) {
    case K_A2A:
        for (int j = 0; j < w; j++)
            for (size_t i = 0; i < op->rc[j]; i++)
                CHECK_RET(op->recv[op->rd[j] + i] == val(j, rank, i, k),
                          "op %d a2a from %d", k, j);
        free(op->sc);
        break;
    case K_AR:
        for (size_t i = 0; i < n; i++) {
            int32_t sum = 0;
            for (int r = 0; r < w; r++)
                sum += val(r, 0, i, k);
            CHECK_RET(op->recv[i] == sum, "op %d allreduce elem %zu", k, i);
        }
        break;
    case K_AG:
        for (int r = 0; r < w; r++)
            for (size_t i = 0; i < n; i++)
                CHECK_RET(op->recv[(size_t)r * n + i] == val(r, 0, i, k),
                          "op %d allgather", k);
        break;
    default:
        for (size_t i = 0; i < n; i++)
            CHECK_RET(op->recv[i] == val(op->root, 0, i, k), "op %d bcast", k);
    }
    free(op->send);
    free(op->recv);
    return 0;
}

static int nops = 300;

static int rank_main(swy_comm_t comm, int rank, int w, void *arg)
{
    static op_t ops[MAX_INFLIGHT];
    static int ids[MAX_INFLIGHT];
    int inflight = 0, next = 0;
    uint64_t st = seed + (uint64_t)rank * 7777; /* wait order differs */
    while (next < nops || inflight > 0) {
        int burst = (int)(swy_test_rand(&st) % 8) + 1;
        while (burst-- > 0 && next < nops && inflight < MAX_INFLIGHT) {
            op_make(&ops[inflight], next, rank, w);
            CHECK_OK_RET(op_post(&ops[inflight], comm), comm);
            ids[inflight++] = next++;
        }
        int victim = (int)(swy_test_rand(&st) % (uint64_t)inflight);
        CHECK_OK_RET(swy_wait(ops[victim].req), comm);
        swy_request_free(ops[victim].req);
        if (op_check(&ops[victim], ids[victim], rank, w))
            return 1;
        ops[victim] = ops[inflight - 1];
        ids[victim] = ids[inflight - 1];
        inflight--;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int w = argc > 1 ? atoi(argv[1]) : 4;
    nops = argc > 2 ? atoi(argv[2]) : 300;
    seed = argc > 3 ? (uint64_t)atoll(argv[3]) : 99;
    int rc = swy_test_spawn(w, rank_main, NULL, 240, NULL);
    printf("%s: %d ops on %d ranks\n", rc ? "FAIL" : "PASS", nops, w);
    return rc;
}
