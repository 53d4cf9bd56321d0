/* reduce_scatter, allgatherv, reduce, gather and scatter against a serial
 * reference computed independently on each rank from the same seeded
 * inputs (coll_ref.c): every dtype and reduction op, in place and not,
 * zero counts, every root, uneven allgatherv blocks with zeros in an
 * order of their own, buffers that the op must leave alone (guards after
 * each block, a non-root's recvbuf), and several ops in flight at once.
 * With TRACE_DIR, rank 0's trace shows each kind's default priority.
 * TEST_COLL_MEM=device: every buffer is device memory of the GPU test
 * double (tests/devdouble).
 * Usage: test_coll_more NRANKS BIG [SEED [TRACE_DIR]] */
#include <string.h>

#include "coll_ref.h"
#include "harness.h"

#define GUARD 0xA5 /* bytes no op may write */
#define GUARD_BYTES 16

/* Every byte of [p, p+bytes) is still GUARD. */
static int untouched(const unsigned char *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != GUARD)
            return 0;
    return 1;
}

static int g_device; /* TEST_COLL_MEM=device */

/* A buffer of `bytes` and a guard after it, all GUARD. */
static unsigned char *guarded(size_t bytes)
{
    unsigned char *p = g_device ? swy_test_dev_alloc(bytes + GUARD_BYTES)
                                : malloc(bytes + GUARD_BYTES);
    if (p != NULL)
        memset(p, GUARD, bytes + GUARD_BYTES);
    return p;
}

static void gfree(void *p)
{
    swy_test_buf_free(g_device, p);
}

/* n elements of rank r's input for op `iter` from element `first`. */
static void fill(unsigned char *out, int di, int iter, int r, size_t first,
                 size_t n, int for_prod)
{
    for (size_t i = 0; i < n; i++)
        gen_value(di, iter, r, first + i, for_prod, out + i * dsizes[di]);
}

/* The same, compared: the index of the first element that differs, or n. */
static size_t first_diff(const unsigned char *got, int di, int iter, int r,
                         size_t first, size_t n, int for_prod)
{
    unsigned char v[8];
    for (size_t i = 0; i < n; i++) {
        gen_value(di, iter, r, first + i, for_prod, v);
        if (memcmp(got + i * dsizes[di], v, dsizes[di]) != 0)
            return i;
    }
    return n;
}

static int test_reduce_scatter(swy_comm_t comm, int rank, int w,
                               size_t count, int iter0, int in_place)
{
    for (int di = 0; di < NDTYPES; di++)
        for (int op = SWY_SUM; op <= SWY_AVG; op++) {
            int iter = iter0 + di * 8 + op;
            size_t ds = dsizes[di], total = count * (size_t)w;
            unsigned char *in = guarded(total * ds);
            unsigned char *out = guarded(count * ds);
            CHECK_RET(in != NULL && out != NULL, "out of memory");
            fill(in, di, iter, rank, 0, total, op == SWY_PROD);
            unsigned char *dst = in_place ? in + (size_t)rank * count * ds
                                          : out;
            CHECK_OK_RET(swy_reduce_scatter(in, dst, count, dtypes[di], op,
                                            comm, NULL, NULL),
                         comm);
            for (size_t i = 0; i < count; i++)
                CHECK_RET(check_allreduce_elem(di, op, iter, w,
                                               (size_t)rank * count + i,
                                               dst + i * ds),
                          "reduce_scatter dtype %d op %d count %zu elem %zu%s",
                          di, op, count, i, in_place ? " in place" : "");
            CHECK_RET(untouched(in + total * ds, GUARD_BYTES) &&
                          untouched(out + (in_place ? 0 : count * ds),
                                    in_place ? count * ds + GUARD_BYTES
                                             : GUARD_BYTES),
                      "reduce_scatter wrote past its buffers (dtype %d)", di);
            if (!in_place) /* the input is the caller's: left alone */
                CHECK_RET(first_diff(in, di, iter, rank, 0, total,
                                     op == SWY_PROD) == total,
                          "reduce_scatter changed its sendbuf");
            gfree(in);
            gfree(out);
        }
    return 0;
}

static int test_reduce(swy_comm_t comm, int rank, int w, size_t count,
                       int iter0, int root, int in_place)
{
    for (int di = 0; di < NDTYPES; di++)
        for (int op = SWY_SUM; op <= SWY_AVG; op++) {
            int iter = iter0 + di * 8 + op;
            size_t ds = dsizes[di];
            unsigned char *in = guarded(count * ds);
            unsigned char *out = guarded(count * ds);
            CHECK_RET(in != NULL && out != NULL, "out of memory");
            fill(in, di, iter, rank, 0, count, op == SWY_PROD);
            /* Elsewhere than the root recvbuf is unused: NULL every
             * other time, else a buffer that must stay as it is. */
            unsigned char *dst = rank != root ? (iter % 2 ? NULL : out)
                                 : in_place ? in : out;
            CHECK_OK_RET(swy_reduce(in, dst, count, dtypes[di], op, root, comm,
                                    NULL, NULL), comm);
            if (rank == root)
                for (size_t i = 0; i < count; i++)
                    CHECK_RET(
                        check_allreduce_elem(di, op, iter, w, i, dst + i * ds),
                        "reduce dtype %d op %d root %d count %zu elem %zu", di,
                        op, root, count, i);
            else
                CHECK_RET(untouched(out, count * ds),
                          "reduce wrote recvbuf of rank %d, not the root %d",
                          rank, root);
            CHECK_RET(untouched(in + count * ds, GUARD_BYTES) &&
                          untouched(out + count * ds, GUARD_BYTES),
                      "reduce wrote past its buffers");
            gfree(in);
            gfree(out);
        }
    return 0;
}

/* Gather, then scatter, of every dtype from `root`. */
static int test_gather_scatter(swy_comm_t comm, int rank, int w,
                               size_t count, int iter0, int root,
                               int in_place)
{
    for (int di = 0; di < NDTYPES; di++) {
        int iter = iter0 + di;
        size_t ds = dsizes[di], total = count * (size_t)w;
        unsigned char *mine = guarded(count * ds);
        unsigned char *all = guarded(total * ds);
        CHECK_RET(mine != NULL && all != NULL, "out of memory");

        /* gather: rank r contributes block r */
        fill(mine, di, iter, rank, 0, count, 0);
        unsigned char *send = mine;
        if (in_place && rank == root) {
            send = all + (size_t)root * count * ds;
            memcpy(send, mine, count * ds);
        }
        CHECK_OK_RET(swy_gather(send,
                                rank == root || iter % 2 == 0 ? all : NULL,
                                count, dtypes[di], root, comm, NULL, NULL),
                     comm);
        if (rank == root) {
            for (int r = 0; r < w; r++) {
                size_t at = first_diff(all + (size_t)r * count * ds, di, iter,
                                       r, 0, count, 0);
                CHECK_RET(at == count, "gather dtype %d root %d count %zu: "
                          "block %d elem %zu", di, root, count, r, at);
            }
        } else {
            CHECK_RET(untouched(all, total * ds),
                      "gather wrote recvbuf of rank "
                      "%d, not the root %d",
                      rank, root);
        }
        CHECK_RET(untouched(all + total * ds, GUARD_BYTES),
                  "gather wrote past recvbuf");

        /* scatter: the root's buffer holds its input, block r for rank r */
        iter += 1000;
        memset(mine, GUARD, count * ds);
        if (rank == root)
            fill(all, di, iter, root, 0, total, 0);
        unsigned char *recv = in_place && rank == root
                                  ? all + (size_t)root * count * ds
                                  : mine;
        CHECK_OK_RET(swy_scatter(rank == root || iter % 2 ? all : NULL, recv,
                                 count, dtypes[di], root, comm, NULL, NULL),
                     comm);
        size_t at = first_diff(recv, di, iter, root,
                               (size_t)rank * count, count, 0);
        CHECK_RET(at == count,
                  "scatter dtype %d root %d count %zu: elem %zu on "
                  "rank %d",
                  di, root, count, at, rank);
        if (rank == root) /* its input is the caller's: left alone */
            CHECK_RET(first_diff(all, di, iter, root, 0, total, 0) == total,
                      "scatter changed the root's sendbuf");
        CHECK_RET(untouched(mine + count * ds, GUARD_BYTES) &&
                      (recv != mine || rank != root ||
                       untouched(all + total * ds, GUARD_BYTES)),
                  "scatter wrote past its buffers");
        gfree(mine);
        gfree(all);
    }
    return 0;
}

/* An allgatherv of uneven blocks (a quarter of them empty), laid out in
 * recvbuf in reverse rank order with gaps, of dtype dtypes[di]. */
typedef struct {
    size_t *counts, *displs, total;
    unsigned char *mine, *recv;
    int di, iter, in_place;
} agv_case_t;

static int agv_setup(agv_case_t *c, int rank, int w, int di, int iter,
                     size_t max, int in_place)
{
    uint64_t st = base_seed * 77 + (uint64_t)iter;
    size_t ds = dsizes[di];
    c->counts = calloc((size_t)w, sizeof(size_t));
    c->displs = calloc((size_t)w, sizeof(size_t));
    CHECK_RET(c->counts != NULL && c->displs != NULL, "out of memory");
    c->di = di;
    c->iter = iter;
    c->in_place = in_place;
    c->total = 0;
    for (int r = 0; r < w; r++) {
        uint64_t x = swy_test_rand(&st);
        c->counts[r] = x % 4 == 0 ? 0 : (size_t)(x >> 8) % (max + 1);
    }
    for (int r = w - 1; r >= 0; r--) {
        c->displs[r] = c->total;
        c->total += c->counts[r] + 3;
    }
    c->mine = guarded(c->counts[rank] * ds);
    c->recv = guarded(c->total * ds);
    CHECK_RET(c->mine != NULL && c->recv != NULL, "out of memory");
    fill(c->mine, di, iter, rank, 0, c->counts[rank], 0);
    if (in_place)
        memcpy(c->recv + c->displs[rank] * ds, c->mine,
               c->counts[rank] * ds);
    return 0;
}

/* Posts the case from copies of the counts and displacements that are
 * overwritten and freed as soon as the call returns: an op still in
 * flight (req) must hold its own. */
static int agv_post(agv_case_t *c, swy_comm_t comm, int rank, int w,
                    const swy_op_attr_t *attr, swy_request_t *req)
{
    size_t ds = dsizes[c->di], bytes = (size_t)w * sizeof(size_t);
    const void *send = c->in_place ? c->recv + c->displs[rank] * ds
                                   : (const void *)c->mine;
    size_t *counts = malloc(bytes), *displs = malloc(bytes);
    CHECK_RET(counts != NULL && displs != NULL, "out of memory");
    memcpy(counts, c->counts, bytes);
    memcpy(displs, c->displs, bytes);
    CHECK_OK_RET(swy_allgatherv(send, c->counts[rank], c->recv, counts, displs,
                                dtypes[c->di], comm, attr, req),
                 comm);
    memset(counts, 0x5a, bytes);
    memset(displs, 0xa5, bytes);
    free(counts);
    free(displs);
    return 0;
}

static int agv_verify(agv_case_t *c, int w)
{
    size_t ds = dsizes[c->di];
    for (int r = 0; r < w; r++) {
        unsigned char *block = c->recv + c->displs[r] * ds;
        size_t at = first_diff(block, c->di, c->iter, r, 0, c->counts[r], 0);
        CHECK_RET(at == c->counts[r], "allgatherv dtype %d iter %d block %d "
                  "(%zu elements) elem %zu", c->di, c->iter, r, c->counts[r],
                  at);
        CHECK_RET(untouched(block + c->counts[r] * ds, 3 * ds),
                  "allgatherv wrote the gap after block %d (iter %d)", r,
                  c->iter);
    }
    free(c->counts);
    free(c->displs);
    gfree(c->mine);
    gfree(c->recv);
    return 0;
}

static int test_allgatherv(swy_comm_t comm, int rank, int w, int iter0,
                           size_t max, int in_place)
{
    for (int di = 0; di < NDTYPES; di++) {
        agv_case_t c;
        if (agv_setup(&c, rank, w, di, iter0 + di, max, in_place) ||
            agv_post(&c, comm, rank, w, NULL, NULL) || agv_verify(&c, w))
            return 1;
    }
    return 0;
}

/* One of each new collective, and two allgathervs, in flight at once at
 * different priorities, waited for in reverse order. */
static int test_in_flight(swy_comm_t comm, int rank, int w, size_t count)
{
    enum { NAGV = 2, NREQ = NAGV + 4 };
    swy_request_t reqs[NREQ];
    agv_case_t agv[NAGV];
    int di = 6, root = w - 1; /* float32 */
    size_t ds = dsizes[di], total = count * (size_t)w;
    unsigned char *rs_in = guarded(total * ds), *rs_out = guarded(count * ds);
    unsigned char *rd_in = guarded(count * ds), *rd_out = guarded(count * ds);
    unsigned char *g_all = guarded(total * ds), *s_out = guarded(count * ds);
    unsigned char *g_in = guarded(count * ds), *s_all = guarded(total * ds);
    CHECK_RET(rs_in && rs_out && rd_in && rd_out && g_all && s_out && g_in &&
                  s_all, "out of memory");
    fill(rs_in, di, 9001, rank, 0, total, 0);
    fill(rd_in, di, 9002, rank, 0, count, 0);
    fill(g_in, di, 9003, rank, 0, count, 0);
    fill(s_all, di, 9004, root, 0, total, 0);
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = "inflight";
    CHECK_OK_RET(swy_reduce_scatter(rs_in, rs_out, count, dtypes[di], SWY_SUM,
                                    comm, &attr, &reqs[0]), comm);
    for (int k = 0; k < NAGV; k++) {
        attr.priority = k ? SWY_PRIO_HIGH : SWY_PRIO_LOW;
        if (agv_setup(&agv[k], rank, w, k ? 3 : 0, 9100 + k, count, k) ||
            agv_post(&agv[k], comm, rank, w, &attr, &reqs[1 + k]))
            return 1;
    }
    attr.priority = -1;
    CHECK_OK_RET(swy_reduce(rd_in, rd_out, count, dtypes[di], SWY_MAX, root,
                            comm, &attr, &reqs[NAGV + 1]), comm);
    CHECK_OK_RET(swy_gather(g_in, g_all, count, dtypes[di], 0, comm, &attr,
                            &reqs[NAGV + 2]), comm);
    CHECK_OK_RET(swy_scatter(s_all, s_out, count, dtypes[di], root, comm, &attr,
                             &reqs[NAGV + 3]), comm);
    for (int k = NREQ - 1; k >= 0; k--) {
        CHECK_OK_RET(swy_wait(reqs[k]), comm);
        swy_request_free(reqs[k]);
    }
    for (size_t i = 0; i < count; i++)
        CHECK_RET(check_allreduce_elem(di, SWY_SUM, 9001, w,
                                       (size_t)rank * count + i,
                                       rs_out + i * ds),
                  "inflight reduce_scatter elem %zu", i);
    if (rank == root)
        for (size_t i = 0; i < count; i++)
            CHECK_RET(check_allreduce_elem(di, SWY_MAX, 9002, w, i,
                                           rd_out + i * ds),
                      "inflight reduce elem %zu", i);
    if (rank == 0)
        for (int r = 0; r < w; r++)
            CHECK_RET(first_diff(g_all + (size_t)r * count * ds, di, 9003, r, 0,
                                 count, 0) == count,
                      "inflight gather block %d", r);
    CHECK_RET(first_diff(s_out, di, 9004, root, (size_t)rank * count, count,
                         0) == count,
              "inflight scatter");
    for (int k = 0; k < NAGV; k++)
        if (agv_verify(&agv[k], w))
            return 1;
    gfree(rs_in); gfree(rs_out); gfree(rd_in); gfree(rd_out);
    gfree(g_all); gfree(s_out); gfree(g_in); gfree(s_all);
    return 0;
}

static int rank_main(swy_comm_t comm, int rank, int w, void *arg)
{
    size_t big = *(size_t *)arg;
    const char *mem = getenv("TEST_COLL_MEM");
    g_device = mem != NULL && strcmp(mem, "device") == 0;
    CHECK_RET(!g_device || swy_test_devdouble(), "TEST_COLL_MEM=device: the "
              "GPU test double is not loaded (SWYTEST_DEVDOUBLE)");
    CHECK_OK_RET(swy_barrier(comm), comm);
    /* big is the whole of a reduce_scatter's or gather's buffer */
    size_t sizes[] = {0, 1, 7, 1000, big / (size_t)w};
    size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t k = 0; k < nsizes; k++) {
        int iter = (int)k * 100, in_place = (int)(k % 2);
        if (test_reduce_scatter(comm, rank, w, sizes[k], iter, in_place) ||
            test_reduce(comm, rank, w, sizes[k], iter + 50,
                        (int)k % w, !in_place) ||
            test_gather_scatter(comm, rank, w, sizes[k], iter + 80,
                                (int)(k + 1) % w, in_place) ||
            test_allgatherv(comm, rank, w, iter + 90,
                            k + 1 < nsizes ? sizes[k] : big / (size_t)w,
                            in_place))
            return 1;
    }
    /* Every root, in place and not, at a size of a few chunks. */
    for (int root = 0; root < w; root++)
        if (test_reduce(comm, rank, w, 777, 5000 + root * 100, root,
                        root % 2) ||
            test_gather_scatter(comm, rank, w, 777, 6000 + root * 100, root,
                                !(root % 2)))
            return 1;
    if (test_in_flight(comm, rank, w, big / (size_t)w))
        return 1;
    CHECK_OK_RET(swy_barrier(comm), comm);
    swy_comm_stats_t stats = {.struct_size = sizeof(stats)};
    CHECK_OK_RET(swy_comm_stats(comm, &stats), comm);
    CHECK_RET(stats.ops_posted == stats.ops_completed,
              "stats %llu posted, %llu "
              "completed",
              (unsigned long long)stats.ops_posted,
              (unsigned long long)stats.ops_completed);
    return 0;
}

/* The default priority of each kind, as rank 0's trace shows its ops
 * (those posted without a priority: all but test_in_flight's). */
static int check_priorities(const char *trace_dir)
{
    struct {
        const char *kind;
        int priority, seen;
    } want[5] = {{"reduce_scatter", SWY_PRIO_LOW, 0},
                 {"reduce", SWY_PRIO_LOW, 0},
                 {"allgatherv", SWY_PRIO_DEFAULT, 0},
                 {"gather", SWY_PRIO_DEFAULT, 0},
                 {"scatter", SWY_PRIO_DEFAULT, 0}};
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/more_trace.0.json", trace_dir);
    FILE *f = fopen(path, "r");
    CHECK_RET(f != NULL, "trace %s missing", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        double tid, prio;
        const char *cat = strstr(line, "\"cat\":\"");
        if (cat == NULL || strstr(line, "\"name\":\"inflight") != NULL ||
            swy_test_trace_num(line, "\"tid\":", &tid) || tid != 0 ||
            swy_test_trace_num(line, "\"priority\":", &prio))
            continue;
        cat += strlen("\"cat\":\"");
        for (int k = 0; k < 5; k++) {
            size_t len = strlen(want[k].kind);
            if (strncmp(cat, want[k].kind, len) != 0 || cat[len] != '"')
                continue;
            want[k].seen++;
            CHECK_RET((int)prio == want[k].priority, "a %s op at priority %d, "
                      "not %d by default", want[k].kind, (int)prio,
                      want[k].priority);
        }
    }
    fclose(f);
    for (int k = 0; k < 5; k++)
        CHECK_RET(want[k].seen > 0, "no %s op in %s", want[k].kind, path);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    size_t big = argc > 2 ? (size_t)atol(argv[2]) : 100000;
    if (argc > 3)
        base_seed = (uint64_t)atoll(argv[3]);
    const char *trace_dir = argc > 4 ? argv[4] : NULL;
    if (trace_dir != NULL) {
        char pattern[600];
        snprintf(pattern, sizeof(pattern), "%s/more_trace.%%r.json",
                 trace_dir);
        setenv("SWY_TRACE", pattern, 1);
    }
    int rc = swy_test_spawn(nranks, rank_main, &big, 240, NULL);
    if (rc == 0 && trace_dir != NULL)
        rc = check_priorities(trace_dir);
    printf("%s: %d ranks, big count %zu\n", rc ? "FAIL" : "PASS", nranks, big);
    return rc;
}
