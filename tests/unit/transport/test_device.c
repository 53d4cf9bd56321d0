/* The device-memory paths that run on any machine: validation of a
 * plugin's swy_device_plugin_v1 table, the process-wide services on a
 * machine without a GPU (none, host memory everywhere, and no log line
 * above debug), host copies, the peers that must move device memory, and
 * the op header's memory type (a rank on device memory and one on host
 * memory disagree with SWY_ERR_MISMATCH naming both types).
 *
 * Usage: test_device UCX_PLUGIN BAD_DEVICE_PLUGIN...
 * With SWY_LOG_FILE set, checks that file for warnings at the end. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/device.h"
#include "transport/transport.h"
#include "util/alloc.h"

#include "transport_test.h"

static void test_symbol(const char *path, swy_status_t want,
                        const char *needle)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(handle != NULL);
    if (handle == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return;
    }
    const swy_device_v1_t *dev = (const swy_device_v1_t *)(uintptr_t)1;
    char why[1024] = "";
    swy_device_v1_t table;
    swy_status_t status = swy_device_plugin_symbol(handle, path, &table, &dev,
                                                   why, sizeof(why));
    CHECK(status == want);
    if (want == SWY_OK) {
        CHECK(dev == NULL); /* a transport without device services */
    } else {
        CHECK(strstr(why, needle) != NULL);
        CHECK(strstr(why, path) != NULL);
        if (strstr(why, needle) == NULL)
            fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", path, why,
                    needle);
    }
    dlclose(handle);
}

static void test_no_device_services(void)
{
    /* This runs on machines without a GPU (CI): the nccl plugin, if
     * built, sees no device and the library keeps no services. */
    const swy_device_v1_t *dev = swy_device_ops();
    if (dev != NULL) {
        printf("device services %s present: skipping the no-GPU checks\n",
               dev->name);
        return;
    }
    CHECK(swy_device_ops() == NULL); /* asked once, remembered */
    int on_stack = 0;
    CHECK(swy_device_mem_type(&on_stack) == SWY_MEM_HOST);
    CHECK(swy_device_mem_type(NULL) == SWY_MEM_HOST);
    char a[16] = "0123456789", b[16];
    CHECK(swy_device_copy(b, a, 4, SWY_MEM_CUDA) == SWY_ERR_UNSUPPORTED);
    CHECK(strstr(swy_err_last(), "no device services") != NULL);
}

static void test_host_copy(void)
{
    char buf[32] = "abcdefghijklmnopqrstuvwxyz";
    char out[32] = "";
    CHECK(swy_device_copy(out, buf, 27, SWY_MEM_HOST) == SWY_OK);
    CHECK(strcmp(out, buf) == 0);
    /* overlapping, forwards and backwards */
    CHECK(swy_device_copy(buf + 2, buf, 10, SWY_MEM_HOST) == SWY_OK);
    CHECK(memcmp(buf, "ababcdefghijmn", 14) == 0);
    CHECK(swy_device_copy(buf, buf + 2, 10, SWY_MEM_HOST) == SWY_OK);
    CHECK(memcmp(buf, "abcdefghijijmn", 14) == 0);
    CHECK(swy_device_copy(out, buf, 0, SWY_MEM_CUDA) == SWY_OK); /* nothing */
}

static int has_peer(const int *peers, int n, int peer)
{
    for (int i = 0; i < n; i++)
        if (peers[i] == peer)
            return 1;
    return 0;
}

static void test_data_peers(void)
{
    int peers[8];
    size_t sc[4] = {0, 5, 0, 0}, rc[4] = {0, 0, 0, 3}, z[4] = {0};
    swy_coll_args_t a2a = {.kind = SWY_COLL_ALLTOALLV, .mem = SWY_MEM_CUDA,
                           .sendcounts = sc, .sdispls = z, .recvcounts = rc,
                           .rdispls = z};
    int n = swy_coll_data_peers(&a2a, 0, 4, peers);
    CHECK(n == 2 && has_peer(peers, n, 1) && has_peer(peers, n, 3));
    sc[0] = 1; /* to itself */
    n = swy_coll_data_peers(&a2a, 0, 4, peers);
    CHECK(n == 3 && has_peer(peers, n, 0));

    /* allreduce of device memory stages through host memory */
    swy_coll_args_t ar = {.kind = SWY_COLL_ALLREDUCE, .mem = SWY_MEM_CUDA,
                          .count = 100};
    CHECK(swy_coll_data_peers(&ar, 1, 4, peers) == 0);
    ar.mem = SWY_MEM_HOST;
    /* small, 4 ranks: recursive halving and doubling, partners 1^1, 1^2 */
    n = swy_coll_data_peers(&ar, 1, 4, peers);
    CHECK(n == 2 && has_peer(peers, n, 0) && has_peer(peers, n, 3));
    /* 3 ranks: the direct algorithm, every other rank */
    n = swy_coll_data_peers(&ar, 1, 3, peers);
    CHECK(n == 2 && has_peer(peers, n, 0) && has_peer(peers, n, 2));
    ar.dtype = SWY_FLOAT32;
    ar.count = 512u << 10; /* 2 MiB: direct */
    n = swy_coll_data_peers(&ar, 1, 4, peers);
    CHECK(n == 3 && has_peer(peers, n, 0) && has_peer(peers, n, 2) &&
          has_peer(peers, n, 3));
    /* above the direct limit, or the ring asked for: the neighbours */
    ar.count = 32u << 20; /* 128 MiB */
    n = swy_coll_data_peers(&ar, 1, 4, peers);
    CHECK(n == 2 && has_peer(peers, n, 0) && has_peer(peers, n, 2));
    ar.count = 100;
    ar.allreduce_algo = SWY_COLL_AR_RING;
    n = swy_coll_data_peers(&ar, 1, 4, peers);
    CHECK(n == 2 && has_peer(peers, n, 0) && has_peer(peers, n, 2));
    ar.allreduce_algo = SWY_COLL_AR_AUTO;

    /* broadcast chain 2 -> 3 -> 0 -> 1 */
    swy_coll_args_t bc = {.kind = SWY_COLL_BROADCAST, .mem = SWY_MEM_CUDA,
                          .count = 10, .root = 2};
    n = swy_coll_data_peers(&bc, 2, 4, peers); /* root: sends only */
    CHECK(n == 1 && peers[0] == 3);
    n = swy_coll_data_peers(&bc, 1, 4, peers); /* end: receives only */
    CHECK(n == 1 && peers[0] == 0);
    n = swy_coll_data_peers(&bc, 0, 4, peers);
    CHECK(n == 2 && has_peer(peers, n, 3) && has_peer(peers, n, 1));
    bc.count = 0;
    CHECK(swy_coll_data_peers(&bc, 0, 4, peers) == 0);

    swy_coll_args_t ag = {.kind = SWY_COLL_ALLGATHER, .mem = SWY_MEM_CUDA,
                          .count = 10};
    n = swy_coll_data_peers(&ag, 0, 2, peers); /* both neighbours: 1 */
    CHECK(n == 1 && peers[0] == 1);
    CHECK(swy_coll_data_peers(&ag, 0, 1, peers) == 0);
}

static void test_header_mem(void)
{
    swy_coll_args_t mine = {.kind = SWY_COLL_ALLREDUCE, .dtype = SWY_FLOAT32,
                            .redop = SWY_SUM, .mem = SWY_MEM_HOST,
                            .count = 64, .root = -1,
                            .partition_bytes = 4096};
    swy_coll_args_t theirs = mine;
    theirs.mem = SWY_MEM_CUDA;
    swy_coll_header_t hdr;
    char msg[512];
    swy_coll_header_make(&theirs, 7, 0, &hdr);
    CHECK(swy_coll_header_check(&mine, 7, "grads", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 0 passed host memory, rank 1 device memory") !=
          NULL);
    CHECK(strstr(msg, "'grads'") != NULL);
    /* the other side's view names them the other way round */
    swy_coll_header_make(&mine, 7, 1, &hdr);
    CHECK(swy_coll_header_check(&theirs, 7, "grads", 1, 0, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "rank 1 passed device memory, rank 0 host memory") !=
          NULL);
    /* same type on both: agreed */
    swy_coll_header_make(&theirs, 7, 0, &hdr);
    CHECK(swy_coll_header_check(&theirs, 7, "grads", 1, 0, &hdr, msg,
                                sizeof(msg)) == SWY_OK);
    /* a different collective is reported as that, not as memory */
    swy_coll_args_t other = theirs;
    other.kind = SWY_COLL_ALLGATHER;
    swy_coll_header_make(&other, 7, 0, &hdr);
    CHECK(swy_coll_header_check(&mine, 7, "grads", 0, 1, &hdr, msg,
                                sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK(strstr(msg, "disagree on the collective") != NULL);
}

/* On a machine without a GPU, looking for device services and creating a
 * transport set (whose nccl plugin, where built, refuses to initialize)
 * must stay below WARN. */
static void test_quiet(const char *log_path)
{
    if (swy_device_ops() != NULL)
        return;
    swy_transport_set_t *set = NULL;
    CHECK(swy_transport_set_create(0, 1, &set) == SWY_OK);
    swy_transport_set_destroy(set);
    if (log_path == NULL || log_path[0] == '\0')
        return;
    FILE *file = fopen(log_path, "r");
    CHECK(file != NULL);
    if (file == NULL)
        return;
    char line[2048];
    while (fgets(line, sizeof(line), file) != NULL) {
        int noisy = strstr(line, "SWY WARN") != NULL ||
                    strstr(line, "SWY ERROR") != NULL;
        if (noisy)
            fprintf(stderr, "unexpected log line on a machine without a "
                    "GPU: %s", line);
        CHECK(!noisy);
    }
    fclose(file);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s UCX_PLUGIN BAD_DEVICE_PLUGIN...\n",
                argv[0]);
        return 2;
    }
    /* The log file must hold only this run's lines: empty it before the
     * library opens it (it appends). */
    const char *log_path = getenv("SWY_LOG_FILE");
    if (log_path != NULL && log_path[0] != '\0') {
        FILE *file = fopen(log_path, "w");
        if (file != NULL)
            fclose(file);
    }
    test_quiet(log_path); /* first: later checks log errors on purpose */
    test_symbol(argv[1], SWY_OK, NULL);
    for (int i = 2; i < argc; i++) {
        const char *base = strrchr(argv[i], '/');
        base = base != NULL ? base + 1 : argv[i];
        const char *needle = strstr(base, "badabi") ? "wrong ABI version 99"
                             : strstr(base, "badsize") ? "is below the"
                                                       : "device_count is NULL";
        test_symbol(argv[i], SWY_ERR_INVALID_ARG, needle);
    }
    test_no_device_services();
    test_host_copy();
    test_data_peers();
    test_header_mem();
    int n = atomic_load(&check_failures);
    printf("%s (%d failed checks)\n", n ? "FAIL" : "PASS", n);
    return n ? 1 : 0;
}
