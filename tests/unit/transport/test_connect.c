/* swy_transport_set_connect over a real lib/boot control plane: three
 * ranks as threads of one process, each with its own transport set (self +
 * the ucx plugin from SWY_PLUGIN_PATH), exchange addresses, then send
 * around a ring and to themselves through the transports chosen. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/boot.h"
#include "transport/transport.h"
#include "util/status.h"

#include "transport_test.h"

#define NRANKS 3

static swy_boot_addr_t root_addr;

static void *rank_main(void *arg)
{
    int rank = (int)(intptr_t)arg;
    swy_boot_t *boot = NULL;
    swy_transport_set_t *set = NULL;
    if (swy_boot_connect(&root_addr, rank, NRANKS, 10.0, &boot) != SWY_OK) {
        CHECK(!"boot connect");
        return NULL;
    }
    CHECK(swy_transport_set_create(rank, NRANKS, &set) == SWY_OK);
    if (set == NULL)
        goto out;
    CHECK(swy_transport_set_connect(set, boot, NULL, 10.0) == SWY_OK);

    int next = (rank + 1) % NRANKS, prev = (rank + NRANKS - 1) % NRANKS;
    int peers[2] = {next, rank};
    int sources[2] = {prev, rank};
    char msg[2][64], got[2][64];
    completion_t sc[2] = {{0}}, rc[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        swy_transport_t *rtp = swy_transport_for_peer(set, sources[i],
                                                      SWY_MEM_HOST);
        swy_transport_t *stp = swy_transport_for_peer(set, peers[i],
                                                      SWY_MEM_HOST);
        CHECK(rtp != NULL && stp != NULL);
        if (rtp == NULL || stp == NULL)
            goto out;
        CHECK(strcmp(stp->ops->name, i == 1 ? "self" : "ucx") == 0);
        memset(got[i], 0, sizeof(got[i]));
        snprintf(msg[i], sizeof(msg[i]), "from %d to %d", rank, peers[i]);
        CHECK(rtp->ops->irecv(rtp->ctx, sources[i], 100 + (uint64_t)i,
                              got[i], sizeof(got[i]), SWY_MEM_HOST,
                              on_complete, &rc[i], NULL) == SWY_OK);
        CHECK(stp->ops->isend(stp->ctx, peers[i], 100 + (uint64_t)i, msg[i],
                              strlen(msg[i]) + 1, SWY_MEM_HOST, on_complete,
                              &sc[i], NULL) == SWY_OK);
    }
    time_t start = time(NULL);
    while ((sc[0].calls == 0 || rc[0].calls == 0 || sc[1].calls == 0 ||
            rc[1].calls == 0) &&
           time(NULL) - start < 10)
        swy_transport_set_progress(set);
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof(want), "from %d to %d", sources[i], rank);
        CHECK(sc[i].calls == 1 && sc[i].status == SWY_OK);
        CHECK(rc[i].calls == 1 && rc[i].status == SWY_OK &&
              rc[i].bytes == strlen(want) + 1 && strcmp(got[i], want) == 0);
    }
    /* Nobody tears down while a peer may still need its endpoint. */
    CHECK(swy_boot_barrier(boot, 10.0) == SWY_OK);
out:
    swy_transport_set_destroy(set);
    swy_boot_finalize(boot);
    return NULL;
}

int main(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    swy_boot_secret_from_text("transport connect test", secret);
    swy_boot_root_t *root = NULL;
    if (swy_boot_root_start("127.0.0.1", 0, secret, &root, &root_addr) !=
        SWY_OK) {
        fprintf(stderr, "cannot start the boot root: %s\n", swy_err_last());
        return 1;
    }
    pthread_t threads[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        pthread_create(&threads[r], NULL, rank_main, (void *)(intptr_t)r);
    for (int r = 0; r < NRANKS; r++)
        pthread_join(threads[r], NULL);
    swy_boot_root_release(root);
    if (check_failures != 0) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("transport connect over boot: all checks passed\n");
    return 0;
}
