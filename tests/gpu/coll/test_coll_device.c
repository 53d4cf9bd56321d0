/* Collectives on device memory (cudaMalloc'd buffers) on one rank, through
 * the public API, checked against host references: alltoallv (counts
 * including 0, displacements with gaps), allreduce (every dtype and op, in
 * place and not, up to 64 MiB), allgather, broadcast, reduce_scatter,
 * reduce, gather, scatter, allgatherv, a split communicator, several ops in
 * flight at different priorities, ordering after attr.stream, and the
 * errors of mixed host/device buffers and of a comm without a transport
 * that moves device memory.
 *
 * Usage: test_coll_device full | ucx_only
 *   full:     the default plugins (ucx, nccl): everything must work.
 *   ucx_only: run with SWY_TRANSPORT_PLUGINS=ucx and
 *             SWY_DEVICE_COLL=staged: device alltoallv must fail with
 *             SWY_ERR_UNSUPPORTED naming the peer; a 1-rank device
 *             allreduce (a copy) must still work.
 * Exits 77 when there is no GPU or the library sees no device services. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "check_swy.h"
#include "switchyard/switchyard.h"
#include "transport/device.h"
#include "../gputest.h"

#define NDTYPES 8
static const swy_dtype_t dtypes[NDTYPES] = {
    SWY_INT8, SWY_UINT8, SWY_INT32, SWY_INT64,
    SWY_FLOAT16, SWY_BFLOAT16, SWY_FLOAT32, SWY_FLOAT64};
static const size_t dsizes[NDTYPES] = {1, 1, 4, 8, 2, 2, 4, 8};
static const char *const dtype_names[NDTYPES] = {
    "int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64"};
static const swy_redop_t redops[] = {SWY_SUM, SWY_PROD, SWY_MAX, SWY_MIN,
                                     SWY_AVG};

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random elements that are finite in every float type: the sign and
 * exponent byte (the most significant one) stays small, so no element is
 * a NaN or an infinity whose bits an operation might rewrite. */
static void fill_pattern(void *buf, size_t bytes, size_t dsize)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)next_rand();
    if (dsize > 1)
        for (size_t i = dsize - 1; i < bytes; i += dsize)
            p[i] &= 0x3f;
}

static void *dev_alloc(size_t bytes)
{
    void *ptr = NULL;
    CUDA_OK(cudaMalloc(&ptr, bytes > 0 ? bytes : 1));
    return ptr;
}

static void to_dev(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void from_dev(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* First differing byte, or -1. */
static long first_diff(const void *a, const void *b, size_t bytes)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i])
            return (long)i;
    return -1;
}

static swy_comm_t comm_one_rank(void)
{
    swy_unique_id_t id;
    swy_comm_t comm = NULL;
    swy_status_t st = swy_get_unique_id(&id);
    if (st != SWY_OK) {
        fprintf(stderr, "swy_get_unique_id: %s: %s\n", swy_status_string(st),
                swy_last_error(NULL));
        exit(1);
    }
    st = swy_comm_init_rank(&comm, 1, &id, 0);
    if (st != SWY_OK) {
        fprintf(stderr, "swy_comm_init_rank(1 rank): %s: %s\n",
                swy_status_string(st), swy_last_error(NULL));
        exit(1);
    }
    return comm;
}

/* ---- alltoallv ---------------------------------------------------------- */

/* One rank: the single peer is the rank itself, served by the nccl
 * plugin's self path. Source block at sdispl, landing at rdispl, with
 * untouched gaps around it. */
static void test_alltoallv(swy_comm_t comm, size_t count, size_t sdispl,
                           size_t rdispl, swy_dtype_t dtype, size_t dsize)
{
    size_t sbytes = (sdispl + count + 5) * dsize;
    size_t rbytes = (rdispl + count + 7) * dsize;
    unsigned char *hsend = malloc(sbytes), *hrecv = malloc(rbytes);
    unsigned char *expect = malloc(rbytes);
    fill_pattern(hsend, sbytes, dsize);
    fill_pattern(hrecv, rbytes, dsize); /* the gaps must keep this */
    memcpy(expect, hrecv, rbytes);
    memcpy(expect + rdispl * dsize, hsend + sdispl * dsize, count * dsize);
    void *dsend = dev_alloc(sbytes), *drecv = dev_alloc(rbytes);
    to_dev(dsend, hsend, sbytes);
    to_dev(drecv, hrecv, rbytes);

    size_t sc[1] = {count}, sd[1] = {sdispl}, rc[1] = {count},
           rd[1] = {rdispl};
    CHECK_OK(swy_alltoallv(dsend, sc, sd, drecv, rc, rd, dtype,
                           comm, NULL, NULL), comm);
    from_dev(hrecv, drecv, rbytes);
    long d = first_diff(hrecv, expect, rbytes);
    CHECK(d < 0, "alltoallv count %zu sdispl %zu rdispl %zu dsize %zu: "
          "byte %ld differs (got %u, expected %u)", count, sdispl, rdispl,
          dsize, d, d >= 0 ? hrecv[d] : 0, d >= 0 ? expect[d] : 0);
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hsend);
    free(hrecv);
    free(expect);
}

/* ---- allreduce --------------------------------------------------------- */

/* One rank: the reduction of a single contribution is the contribution
 * (AVG divides by 1). The host path of the same comm must agree too. */
static void test_allreduce(swy_comm_t comm, int di, swy_redop_t op,
                           size_t count, int in_place)
{
    size_t bytes = count * dsizes[di];
    unsigned char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1);
    unsigned char *href = malloc(bytes + 1);
    fill_pattern(hin, bytes, dsizes[di]);
    void *dsend = dev_alloc(bytes);
    void *drecv = in_place ? dsend : dev_alloc(bytes);
    to_dev(dsend, hin, bytes);
    if (!in_place)
        CUDA_OK(cudaMemset(drecv, 0xA5, bytes > 0 ? bytes : 1));
    CHECK_OK(swy_allreduce(dsend, drecv, count, dtypes[di], op,
                           comm, NULL, NULL), comm);
    from_dev(hout, drecv, bytes);
    long d = first_diff(hout, hin, bytes);
    CHECK(d < 0, "allreduce %s op %d count %zu %s: byte %ld differs from "
          "the input", dtype_names[di], (int)op, count,
          in_place ? "in place" : "out of place", d);
    if (count <= 4096) {
        /* The host path on the same data: an independent implementation
         * of the one-rank reduction. */
        CHECK_OK(swy_allreduce(hin, href, count, dtypes[di], op,
                               comm, NULL, NULL), comm);
        d = first_diff(hout, href, bytes);
        CHECK(d < 0, "allreduce %s op %d count %zu: device result differs "
              "from the host path at byte %ld", dtype_names[di], (int)op,
              count, d);
    }
    if (!in_place)
        CUDA_OK(cudaFree(drecv));
    CUDA_OK(cudaFree(dsend));
    free(hin);
    free(hout);
    free(href);
}

/* ---- allgather and broadcast --------------------------------------------- */

static void test_allgather(swy_comm_t comm, size_t count, int in_place)
{
    size_t bytes = count * 4;
    unsigned char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1);
    fill_pattern(hin, bytes, 4);
    void *drecv = dev_alloc(bytes);
    void *dsend = in_place ? drecv : dev_alloc(bytes);
    to_dev(dsend, hin, bytes);
    if (!in_place)
        CUDA_OK(cudaMemset(drecv, 0x5A, bytes > 0 ? bytes : 1));
    CHECK_OK(swy_allgather(dsend, drecv, count, SWY_FLOAT32,
                           comm, NULL, NULL), comm);
    from_dev(hout, drecv, bytes);
    long d = first_diff(hout, hin, bytes);
    CHECK(d < 0, "allgather count %zu %s: byte %ld differs", count,
          in_place ? "in place" : "out of place", d);
    if (!in_place)
        CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hin);
    free(hout);
}

static void test_broadcast(swy_comm_t comm, size_t count)
{
    size_t bytes = count * 8;
    unsigned char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1);
    fill_pattern(hin, bytes, 8);
    void *dbuf = dev_alloc(bytes);
    to_dev(dbuf, hin, bytes);
    CHECK_OK(swy_broadcast(dbuf, count, SWY_FLOAT64, 0, comm,
                           NULL, NULL), comm);
    from_dev(hout, dbuf, bytes);
    CHECK(first_diff(hout, hin, bytes) < 0, "broadcast count %zu changed "
          "the root's buffer", count);
    CUDA_OK(cudaFree(dbuf));
    free(hin);
    free(hout);
}

/* reduce_scatter on one rank: the rank's block is its input reduced with
 * nothing else, whatever the op. */
static void test_reduce_scatter(swy_comm_t comm, int di, swy_redop_t op,
                                size_t count)
{
    size_t bytes = count * dsizes[di];
    unsigned char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1);
    fill_pattern(hin, bytes, dsizes[di]);
    void *dsend = dev_alloc(bytes), *drecv = dev_alloc(bytes);
    to_dev(dsend, hin, bytes);
    CUDA_OK(cudaMemset(drecv, 0xA5, bytes > 0 ? bytes : 1));
    CHECK_OK(swy_reduce_scatter(dsend, drecv, count, dtypes[di], op, comm,
                                NULL, NULL), comm);
    from_dev(hout, drecv, bytes);
    long d = first_diff(hout, hin, bytes);
    CHECK(d < 0, "reduce_scatter %s op %d count %zu: byte %ld differs from "
          "the input", dtype_names[di], (int)op, count, d);
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hin);
    free(hout);
}

/* A sub-communicator of a communicator whose device communicators exist:
 * the child's are split from the parent's (ncclCommSplit); its device ops
 * work, and so do the parent's after the child is destroyed. A rank with
 * SWY_SPLIT_NOCOLOR gets no communicator. */
static void test_split(swy_comm_t comm)
{
    swy_comm_t child = NULL, none = (swy_comm_t)1;
    CHECK_OK(swy_comm_split(comm, 7, 0, &child), comm);
    CHECK(child != NULL, "swy_comm_split(color 7) gave no communicator");
    if (child == NULL)
        return;
    test_allreduce(child, 6, SWY_SUM, 1u << 20, 0);
    test_reduce_scatter(child, 5, SWY_MAX, 100003);
    test_alltoallv(child, 4099, 3, 1, SWY_FLOAT32, 4);
    swy_status_t st = swy_comm_destroy(child);
    CHECK(st == SWY_OK, "swy_comm_destroy(child): %s", swy_status_string(st));
    CHECK_OK(swy_comm_split(comm, SWY_SPLIT_NOCOLOR, 0, &none), comm);
    CHECK(none == NULL, "swy_comm_split(SWY_SPLIT_NOCOLOR) gave a "
          "communicator");
    test_allreduce(comm, 7, SWY_SUM, 4096, 1);
}

/* ---- several ops in flight ----------------------------------------------- */

#define NFLIGHT 6
static void test_in_flight(swy_comm_t comm)
{
    size_t counts[NFLIGHT] = {1u << 20, 4099, 1u << 18, 0, 77777, 1u << 22};
    int prios[NFLIGHT] = {SWY_PRIO_HIGH, SWY_PRIO_LOW, 1000, SWY_PRIO_DEFAULT,
                          7, SWY_PRIO_HIGH};
    void *hin[NFLIGHT], *hout[NFLIGHT], *dsend[NFLIGHT], *drecv[NFLIGHT];
    swy_request_t reqs[NFLIGHT];
    size_t sc[NFLIGHT][1], sd[NFLIGHT][1], rc[NFLIGHT][1], rd[NFLIGHT][1];
    for (int i = 0; i < NFLIGHT; i++) {
        size_t bytes = counts[i] * 4;
        hin[i] = malloc(bytes + 1);
        hout[i] = malloc(bytes + 1);
        fill_pattern(hin[i], bytes, 4);
        dsend[i] = dev_alloc(bytes);
        drecv[i] = dev_alloc(bytes);
        to_dev(dsend[i], hin[i], bytes);
        swy_op_attr_t attr = SWY_OP_ATTR_INIT;
        attr.priority = prios[i];
        attr.order = NFLIGHT - i;
        attr.name = "in-flight";
        swy_status_t st;
        reqs[i] = NULL;
        if (i % 3 == 1) {
            st = swy_allreduce(dsend[i], drecv[i], counts[i], SWY_FLOAT32,
                               SWY_SUM, comm, &attr, &reqs[i]);
        } else if (i % 3 == 2) {
            st = swy_allgather(dsend[i], drecv[i], counts[i], SWY_INT32,
                               comm, &attr, &reqs[i]);
        } else { /* the same bytes as uint8 elements */
            sc[i][0] = rc[i][0] = bytes;
            sd[i][0] = rd[i][0] = 0;
            st = swy_alltoallv(dsend[i], sc[i], sd[i], drecv[i], rc[i], rd[i],
                               SWY_UINT8, comm, &attr, &reqs[i]);
        }
        CHECK(st == SWY_OK, "posting op %d (priority %d): %s: %s", i,
              prios[i], swy_status_string(st), swy_last_error(comm));
    }
    for (int i = 0; i < NFLIGHT; i++) {
        if (reqs[i] == NULL)
            continue;
        swy_status_t st = swy_wait(reqs[i]);
        CHECK(st == SWY_OK, "op %d (priority %d): %s: %s", i, prios[i],
              swy_status_string(st), swy_last_error(comm));
        swy_request_free(reqs[i]);
    }
    for (int i = 0; i < NFLIGHT; i++) {
        size_t bytes = counts[i] * 4;
        from_dev(hout[i], drecv[i], bytes);
        long d = first_diff(hout[i], hin[i], bytes);
        CHECK(d < 0, "op %d (priority %d, count %zu): byte %ld differs", i,
              prios[i], counts[i], d);
        CUDA_OK(cudaFree(dsend[i]));
        CUDA_OK(cudaFree(drecv[i]));
        free(hin[i]);
        free(hout[i]);
    }
}

/* ---- attr.stream ordering -------------------------------------------------- */

/* New data reaches sendbuf by a copy queued on a non-blocking stream
 * behind a long queue of other copies; the collective given that stream
 * must see the new data, not the old. The control run gives no stream
 * (the legacy default stream, which does not wait for a non-blocking
 * one): it shows whether the race is real on this machine, so that the
 * checked runs mean something; it is reported, not checked. */
static void test_stream_order(swy_comm_t comm, int use_alltoallv,
                              int control)
{
    const size_t count = 16u << 20; /* 64 MiB of float */
    size_t bytes = count * 4;
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    unsigned char *hnew, *hout = malloc(bytes);
    CUDA_OK(cudaMallocHost((void **)&hnew, bytes));
    fill_pattern(hnew, bytes, 4);
    void *dsend = dev_alloc(bytes), *drecv = dev_alloc(bytes);
    void *busy_a = dev_alloc(bytes), *busy_b = dev_alloc(bytes);
    CUDA_OK(cudaMemset(dsend, 0, bytes)); /* old data */
    CUDA_OK(cudaMemset(drecv, 0xEE, bytes));
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 16; i++) /* keep the stream busy for a while */
        CUDA_OK(cudaMemcpyAsync(i % 2 ? busy_a : busy_b,
                                i % 2 ? busy_b : busy_a, bytes,
                                cudaMemcpyDeviceToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(dsend, hnew, bytes, cudaMemcpyHostToDevice,
                            stream));
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = control ? NULL : stream;
    attr.name = "stream-order";
    size_t sc[1] = {count}, zero[1] = {0};
    if (use_alltoallv)
        CHECK_OK(swy_alltoallv(dsend, sc, zero, drecv, sc, zero,
                               SWY_FLOAT32, comm, &attr, NULL), comm);
    else
        CHECK_OK(swy_allreduce(dsend, drecv, count, SWY_FLOAT32,
                               SWY_SUM, comm, &attr, NULL), comm);
    from_dev(hout, drecv, bytes);
    long d = first_diff(hout, hnew, bytes);
    if (control)
        printf("control: %s without the stream saw %s data\n",
               use_alltoallv ? "alltoallv" : "allreduce",
               d < 0 ? "the new (no race observed)" : "old (the race is real)");
    else
        CHECK(d < 0, "%s after work on attr.stream: byte %ld is not the new "
          "data (got %u, expected %u)",
          use_alltoallv ? "alltoallv" : "allreduce", d, d >= 0 ? hout[d] : 0,
          d >= 0 ? hnew[d] : 0);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFreeHost(hnew));
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    CUDA_OK(cudaFree(busy_a));
    CUDA_OK(cudaFree(busy_b));
    free(hout);
}

/* Work queued on attr.stream after the post waits for the op: a copy of
 * recvbuf queued right after a non-blocking post, with no host wait in
 * between, must read the result, not the bytes before it. */
static void test_stream_after(swy_comm_t comm)
{
    const size_t count = 8u << 20; /* 32 MiB of float */
    size_t bytes = count * 4;
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    unsigned char *hin = malloc(bytes), *hout;
    CUDA_OK(cudaMallocHost((void **)&hout, bytes));
    fill_pattern(hin, bytes, 4);
    void *dsend = dev_alloc(bytes), *drecv = dev_alloc(bytes);
    to_dev(dsend, hin, bytes);
    CUDA_OK(cudaMemset(drecv, 0xEE, bytes));
    CUDA_OK(cudaDeviceSynchronize());
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    attr.name = "stream-after";
    swy_request_t req;
    CHECK_OK(swy_allreduce(dsend, drecv, count, SWY_FLOAT32, SWY_SUM, comm,
                           &attr, &req), comm);
    CUDA_OK(cudaMemcpyAsync(hout, drecv, bytes, cudaMemcpyDeviceToHost,
                            stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    long d = first_diff(hout, hin, bytes); /* one rank: the sum is sendbuf */
    CHECK(d < 0, "a copy queued on attr.stream after the allreduce read "
          "byte %ld before the result (got %u, expected %u)", d,
          d >= 0 ? hout[d] : 0, d >= 0 ? hin[d] : 0);
    CHECK_OK(swy_wait(req), comm);
    swy_request_free(req);
    /* Under graph capture the op is refused, and the capture survives. */
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    swy_status_t st = swy_allreduce(dsend, drecv, count, SWY_FLOAT32,
                                    SWY_SUM, comm, &attr, NULL);
    cudaGraph_t graph;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CHECK(st == SWY_ERR_UNSUPPORTED, "allreduce under graph capture: %s "
          "(%s), expected SWY_ERR_UNSUPPORTED", swy_status_string(st),
          swy_last_error(comm));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFreeHost(hout));
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hin);
}

/* ---- errors ------------------------------------------------------------- */

static void expect_error(swy_comm_t comm, swy_status_t got,
                         swy_status_t want, const char *what,
                         const char *needle)
{
    const char *msg = swy_last_error(comm);
    CHECK(got == want, "%s: returned %s, expected %s (%s)", what,
          swy_status_string(got), swy_status_string(want), msg);
    CHECK(strstr(msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"",
          what, msg, needle);
}

static void test_mixed(swy_comm_t comm)
{
    const size_t count = 1024;
    float *host = calloc(count, sizeof(float));
    void *dev = dev_alloc(count * sizeof(float));
    swy_status_t st = swy_allreduce(host, dev, count, SWY_FLOAT32, SWY_SUM,
                                    comm, NULL, NULL);
    expect_error(comm, st, SWY_ERR_UNSUPPORTED, "allreduce host -> device",
                 "sendbuf is host memory but recvbuf is device memory");
    st = swy_allgather(dev, host, count, SWY_FLOAT32, comm, NULL, NULL);
    expect_error(comm, st, SWY_ERR_UNSUPPORTED, "allgather device -> host",
                 "sendbuf is device memory but recvbuf is host memory");
    size_t c[1] = {count}, z[1] = {0};
    st = swy_alltoallv(dev, c, z, host, c, z, SWY_FLOAT32, comm, NULL, NULL);
    expect_error(comm, st, SWY_ERR_UNSUPPORTED, "alltoallv device -> host",
                 "sendbuf is device memory but recvbuf is host memory");
    /* A stream with host buffers is ignored. */
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.stream = stream;
    float *host2 = calloc(count, sizeof(float));
    for (size_t i = 0; i < count; i++)
        host[i] = (float)i;
    CHECK_OK(swy_allreduce(host, host2, count, SWY_FLOAT32,
                           SWY_SUM, comm, &attr, NULL), comm);
    CHECK(memcmp(host, host2, count * sizeof(float)) == 0,
          "host allreduce with a stream: wrong result");
    CUDA_OK(cudaStreamDestroy(stream));
    /* The comm still works after the refusals. */
    test_allreduce(comm, 6, SWY_SUM, 333, 0);
    CUDA_OK(cudaFree(dev));
    free(host);
    free(host2);
}

/* ---- scenarios ------------------------------------------------------------ */

/* ---- reduce_scatter, reduce, gather, scatter, allgatherv ------------------
 * Run by the plugin's collectives (coll_device) or staged through host
 * memory (coll_device_staged). On one rank each is a copy; what is checked
 * is that the data goes in and out right: results, the gaps between
 * allgatherv's blocks and the bytes past the receive region untouched, in
 * place included. */

static void staged_check(const char *what, const void *dev, const void *want,
                         size_t bytes)
{
    unsigned char *got = malloc(bytes + 1);
    from_dev(got, dev, bytes);
    long d = first_diff(got, want, bytes);
    CHECK(d < 0, "%s: byte %ld differs", what, d);
    free(got);
}

static void test_staged(swy_comm_t comm, size_t count)
{
    size_t bytes = count * 4, gap = 40, total = gap + bytes + gap;
    unsigned char *hin = malloc(total + 1), *hbg = malloc(total + 1);
    unsigned char *want = malloc(total + 1);
    fill_pattern(hin, total, 4);
    fill_pattern(hbg, total, 4);
    void *dsend = dev_alloc(total), *drecv = dev_alloc(total);
    to_dev(dsend, hin, total);

    /* reduce_scatter, reduce (root 0, AVG on one rank: the value), gather,
     * scatter: the send block lands at the start of recvbuf; the rest of
     * recvbuf keeps its bytes. */
    for (int k = 0; k < 4; k++) {
        to_dev(drecv, hbg, total);
        swy_status_t st =
            k == 0   ? swy_reduce_scatter(dsend, drecv, count, SWY_FLOAT32,
                                          SWY_SUM, comm, NULL, NULL)
            : k == 1 ? swy_reduce(dsend, drecv, count, SWY_FLOAT32, SWY_AVG,
                                  0, comm, NULL, NULL)
            : k == 2 ? swy_gather(dsend, drecv, count, SWY_FLOAT32, 0, comm,
                                  NULL, NULL)
                     : swy_scatter(dsend, drecv, count, SWY_FLOAT32, 0, comm,
                                   NULL, NULL);
        static const char *const names[] = {"reduce_scatter", "reduce",
                                            "gather", "scatter"};
        CHECK(st == SWY_OK, "%s of %zu device elements: %s: %s", names[k],
              count, swy_status_string(st), swy_last_error(comm));
        memcpy(want, hbg, total);
        memcpy(want, hin, bytes);
        staged_check(names[k], drecv, want, total);
    }

    /* allgatherv into the middle of recvbuf, gaps on both sides. */
    size_t rc = count, rd = gap / 4;
    to_dev(drecv, hbg, total);
    CHECK_OK(swy_allgatherv(dsend, count, drecv, &rc, &rd, SWY_FLOAT32, comm,
                            NULL, NULL), comm);
    memcpy(want, hbg, total);
    memcpy(want + gap, hin, bytes);
    staged_check("allgatherv", drecv, want, total);
    /* In place: the block already at rdispls[0]. */
    CHECK_OK(swy_allgatherv((char *)drecv + gap, count, drecv, &rc, &rd,
                            SWY_FLOAT32, comm, NULL, NULL), comm);
    staged_check("allgatherv in place", drecv, want, total);

    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hin);
    free(hbg);
    free(want);
}

/* swy_alltoallv_chunks on device memory, held (each chunk's own header at
 * its release on device memory) and not: every chunk lands where its
 * displacement says, chunk 0 empty included. */
static void test_chunks(swy_comm_t comm, int held)
{
    enum { N = 3 };
    size_t counts[N] = {0, 5000, 70001}, sc[N], sd[N], total = 0;
    for (int j = 0; j < N; j++) {
        sc[j] = counts[j];
        sd[j] = total;
        total += counts[j];
    }
    size_t bytes = total * 4;
    unsigned char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1);
    fill_pattern(hin, bytes, 4);
    void *dsend = dev_alloc(bytes), *drecv = dev_alloc(bytes);
    to_dev(dsend, hin, bytes);
    CUDA_OK(cudaMemset(drecv, 0x5A, bytes));
    swy_request_t reqs[N];
    CHECK_OK(swy_alltoallv_chunks(dsend, sc, sd, drecv, sc, sd, N,
                                  SWY_FLOAT32, comm, NULL,
                                  held ? SWY_CHUNKS_HELD : 0u, reqs), comm);
    for (int j = N - 1; held && j >= 0; j--)
        CHECK_OK(swy_chunk_release(reqs[j]), comm);
    for (int j = 0; j < N; j++) {
        CHECK_OK(swy_wait(reqs[j]), comm);
        swy_request_free(reqs[j]);
    }
    from_dev(hout, drecv, bytes);
    long d = first_diff(hout, hin, bytes);
    CHECK(d < 0, "alltoallv_chunks %s: byte %ld differs",
          held ? "held" : "not held", d);
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    free(hin);
    free(hout);
}

static int run_full(void)
{
    swy_comm_t comm = comm_one_rank();

    /* alltoallv: 0 elements, odd sizes, 1 MiB+, 64 MiB; gaps around. */
    const size_t a2a_counts[] = {0, 1, 3, 4099, (1u << 20) + 3, 64u << 20};
    for (size_t i = 0; i < sizeof(a2a_counts) / sizeof(a2a_counts[0]); i++)
        test_alltoallv(comm, a2a_counts[i], i * 7, i * 13 + 1, SWY_UINT8, 1);
    test_alltoallv(comm, 100003, 5, 0, SWY_FLOAT64, 8);
    test_alltoallv(comm, 2049, 0, 3, SWY_BFLOAT16, 2);

    /* allreduce: every dtype and op, in place and not, small sizes; one
     * large size per dtype; 64 MiB for fp32. */
    const size_t ar_counts[] = {0, 1, 17, 4096};
    for (int di = 0; di < NDTYPES; di++) {
        for (size_t o = 0; o < sizeof(redops) / sizeof(redops[0]); o++)
            for (size_t c = 0; c < sizeof(ar_counts) / sizeof(ar_counts[0]);
                 c++)
                for (int in_place = 0; in_place < 2; in_place++)
                    test_allreduce(comm, di, redops[o], ar_counts[c],
                                   in_place);
        test_allreduce(comm, di, SWY_MAX, (1u << 20) + 5, di % 2);
    }
    test_allreduce(comm, 6, SWY_SUM, 16u << 20, 0); /* 64 MiB */
    test_allreduce(comm, 6, SWY_AVG, 16u << 20, 1);

    test_allgather(comm, 0, 0);
    test_allgather(comm, 12345, 0);
    test_allgather(comm, 12345, 1);
    test_allgather(comm, 4u << 20, 0);
    test_broadcast(comm, 0);
    test_broadcast(comm, 99999);
    for (int di = 0; di < NDTYPES; di++)
        test_reduce_scatter(comm, di, redops[di % 5], di == 6 ? 3u << 20
                                                               : 4099);
    test_reduce_scatter(comm, 6, SWY_SUM, 0);
    test_split(comm);

    test_chunks(comm, 0);
    test_chunks(comm, 1);
    test_staged(comm, 0);
    test_staged(comm, 1);
    test_staged(comm, 100003);
    test_staged(comm, 3u << 20);

    test_in_flight(comm);
    test_stream_order(comm, 1, 0);
    test_stream_order(comm, 0, 0);
    test_stream_after(comm);
    test_stream_order(comm, 1, 1);
    test_stream_order(comm, 0, 1);
    test_mixed(comm);

    swy_status_t st = swy_comm_destroy(comm);
    CHECK(st == SWY_OK, "swy_comm_destroy: %s", swy_status_string(st));
    return check_failures;
}

static int run_ucx_only(void)
{
    swy_comm_t comm = comm_one_rank();
    const size_t count = 4096;
    void *dsend = dev_alloc(count), *drecv = dev_alloc(count);
    size_t c[1] = {count}, z[1] = {0};
    swy_status_t st = swy_alltoallv(dsend, c, z, drecv, c, z, SWY_UINT8,
                                    comm, NULL, NULL);
    expect_error(comm, st, SWY_ERR_UNSUPPORTED,
                 "device alltoallv without the nccl transport",
                 "no transport moves device memory to rank 0 (self); "
                 "loaded: self, ucx; is the nccl plugin built and a GPU "
                 "visible?");
    /* Nothing was posted: the comm still works, for host memory and for
     * the one-rank device ops that move nothing between ranks. */
    test_allreduce(comm, 7, SWY_SUM, 4096, 0);
    test_allreduce(comm, 4, SWY_MAX, 100000, 1);
    test_allgather(comm, 1000, 0);
    unsigned char hs[64], hr[64];
    memset(hs, 7, sizeof(hs));
    memset(hr, 0, sizeof(hr));
    size_t hc[1] = {sizeof(hs)};
    CHECK_OK(swy_alltoallv(hs, hc, z, hr, hc, z, SWY_UINT8, comm,
                           NULL, NULL), comm);
    CHECK(memcmp(hs, hr, sizeof(hs)) == 0, "host alltoallv: wrong result");
    CUDA_OK(cudaFree(dsend));
    CUDA_OK(cudaFree(drecv));
    st = swy_comm_destroy(comm);
    CHECK(st == SWY_OK, "swy_comm_destroy: %s", swy_status_string(st));
    return check_failures;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *scenario = argc > 1 ? argv[1] : "full";
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU (cudaGetDeviceCount: %s, %d devices)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "ok", ndev);
        return TEST_SKIP;
    }
    if (swy_device_ops() == NULL) {
        printf("SKIP: %d GPU(s), but libswitchyard has no device services: "
               "swy-transport-nccl.so not found along SWY_PLUGIN_PATH=%s or "
               "it sees no device (SWY_LOG_LEVEL=debug says which)\n", ndev,
               getenv("SWY_PLUGIN_PATH") ? getenv("SWY_PLUGIN_PATH") : "");
        return TEST_SKIP;
    }
    int rc;
    if (strcmp(scenario, "full") == 0) {
        rc = run_full();
    } else if (strcmp(scenario, "ucx_only") == 0) {
        rc = run_ucx_only();
    } else {
        fprintf(stderr, "usage: %s full|ucx_only\n", argv[0]);
        return 2;
    }
    printf("%s: %s (%d failed checks)\n", scenario, rc ? "FAIL" : "PASS", rc);
    return rc ? 1 : 0;
}
