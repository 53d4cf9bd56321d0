/* Device buffers of reduce_scatter, allgatherv, reduce, gather and
 * scatter go through pinned host copies (lib/coll/staged.c). Without a
 * GPU, through the public API on one rank, with "device" memory from the
 * fake device services of fakedev/ (a TEST DOUBLE of the nccl plugin's
 * device table: an arena of host memory it calls device memory): each
 * result against a serial reference, the bytes the op does not write
 * (gaps, past the receive region) unchanged, in place, and every staging
 * buffer returned. The gpu suite (test_coll_device) runs the same on a
 * GPU. Usage: test_staged PATH_OF_THE_FAKE_PLUGIN */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "switchyard/switchyard.h"

static char *arena;
static size_t arena_bytes;

/* Bytes that no op writes: each test fills its region with them first. */
static void background(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(seed * 31u + i * 7u);
}

static void values(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)(i % 1000) * 0.25f;
}

static const char *kind_name[] = {"reduce_scatter", "reduce", "gather",
                                  "scatter"};

/* One rank: each op's result is its send block; the rest of the
 * receive buffer keeps its bytes. */
static void test_copies(swy_comm_t comm, size_t count)
{
    size_t bytes = count * sizeof(float), pad = 64;
    char *dsend = arena, *drecv = arena + (arena_bytes / 2);
    char *want = malloc(bytes + 2 * pad + 1);
    if (want == NULL || bytes + pad > arena_bytes / 2) {
        CHECK(0, "%zu elements: no room", count);
        free(want);
        return;
    }
    for (int k = 0; k < 4; k++) {
        values((float *)dsend, count, (float)k);
        background(drecv, bytes + pad, (unsigned)k);
        memcpy(want, drecv, bytes + pad);
        memcpy(want, dsend, bytes);
        swy_status_t st =
            k == 0   ? swy_reduce_scatter(dsend, drecv, count, SWY_FLOAT32,
                                          SWY_SUM, comm, NULL, NULL)
            : k == 1 ? swy_reduce(dsend, drecv, count, SWY_FLOAT32, SWY_AVG,
                                  0, comm, NULL, NULL)
            : k == 2 ? swy_gather(dsend, drecv, count, SWY_FLOAT32, 0, comm,
                                  NULL, NULL)
                     : swy_scatter(dsend, drecv, count, SWY_FLOAT32, 0, comm,
                                   NULL, NULL);
        CHECK(st == SWY_OK, "%s of %zu: %s: %s", kind_name[k], count,
              swy_status_string(st), swy_last_error(comm));
        CHECK(memcmp(drecv, want, bytes + pad) == 0,
              "%s of %zu: result or the bytes past it differ", kind_name[k],
              count);
    }
    free(want);
}

/* allgatherv into the middle of recvbuf, gaps on both sides, out of
 * place and in place. */
static void test_allgatherv(swy_comm_t comm, size_t count)
{
    if (count > ((size_t)1 << 22))
        count = (size_t)1 << 22; /* within half the arena */
    size_t bytes = count * sizeof(float), gap = 40;
    size_t total = gap + bytes + gap;
    char *dsend = arena, *drecv = arena + (arena_bytes / 2);
    char *want = malloc(total + 1);
    if (want == NULL || total > arena_bytes / 2) {
        CHECK(0, "allgatherv of %zu: no room", count);
        free(want);
        return;
    }
    values((float *)dsend, count, 7);
    background(drecv, total, 9);
    memcpy(want, drecv, total);
    memcpy(want + gap, dsend, bytes);
    size_t rc = count, rd = gap / sizeof(float);
    swy_status_t st = swy_allgatherv(dsend, count, drecv, &rc, &rd,
                                     SWY_FLOAT32, comm, NULL, NULL);
    CHECK(st == SWY_OK, "allgatherv of %zu: %s", count, swy_last_error(comm));
    CHECK(memcmp(drecv, want, total) == 0, "allgatherv of %zu: the block "
           "or the gaps differ", count);
    st = swy_allgatherv(drecv + gap, count, drecv, &rc, &rd, SWY_FLOAT32,
                        comm, NULL, NULL);
    CHECK(st == SWY_OK, "allgatherv in place: %s", swy_last_error(comm));
    CHECK(memcmp(drecv, want, total) == 0, "allgatherv of %zu in place "
           "changed the buffer", count);
    free(want);
}

/* Device and host buffers mixed: refused as for the other collectives. */
static void test_mixed(swy_comm_t comm)
{
    float host[4] = {1, 2, 3, 4};
    swy_status_t st = swy_reduce(arena, host, 4, SWY_FLOAT32, SWY_SUM, 0,
                                 comm, NULL, NULL);
    CHECK(st == SWY_ERR_UNSUPPORTED, "device -> host reduce: %s",
           swy_status_string(st));
    CHECK(strstr(swy_last_error(comm), "both must be host or both device")
               != NULL, "message: %s", swy_last_error(comm));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_staged FAKE_PLUGIN\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *(*arena_of)(size_t *) =
        (void *(*)(size_t *))dlsym(h, "swy_fake_device_arena");
    size_t (*stage_live)(void) =
        (size_t(*)(void))dlsym(h, "swy_fake_device_stage_live");
    if (arena_of == NULL || stage_live == NULL) {
        fprintf(stderr, "%s: not the fake device plugin\n", argv[1]);
        return 1;
    }
    arena = arena_of(&arena_bytes);
    if (arena == NULL) {
        fprintf(stderr, "no arena\n");
        return 1;
    }
    swy_unique_id_t id;
    swy_comm_t comm = NULL;
    if (swy_get_unique_id(&id) != SWY_OK ||
        swy_comm_init_rank(&comm, 1, &id, 0) != SWY_OK) {
        fprintf(stderr, "init: %s\n", swy_last_error(NULL));
        return 1;
    }
    const size_t counts[] = {1, 17, 4099, 1u << 20};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        test_copies(comm, counts[i]);
        test_allgatherv(comm, counts[i]);
    }
    test_mixed(comm);
    CHECK(stage_live() == 0, "%zu bytes of staging not returned",
           stage_live());
    CHECK(swy_comm_destroy(comm) == SWY_OK, "destroy");
    printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
           (int)check_failures);
    return check_failures != 0;
}
