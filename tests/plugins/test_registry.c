/* The transport set: plugins that load are kept, broken and missing ones
 * are dropped; two sets in one process (ranks 0 and 1, addresses gathered
 * by hand) choose self for their own rank and ucx for the other, honour
 * SWY_TRANSPORT, report an unreachable peer, and move messages. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/transport.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/status.h"

#include "../unit/transport/transport_test.h"


/* Create ranks 0 and 1 and connect them as boot would. Returns the status
 * of the first connect that fails. */
static swy_status_t make_pair(swy_transport_set_t *sets[2])
{
    void *blob[2];
    size_t lens[2];
    for (int r = 0; r < 2; r++) {
        if (swy_transport_set_create(r, 2, &sets[r]) != SWY_OK)
            return SWY_ERR_INTERNAL;
        CHECK(swy_transport_set_address(sets[r], &blob[r], &lens[r]) ==
              SWY_OK);
    }
    char *all = malloc(lens[0] + lens[1]);
    memcpy(all, blob[0], lens[0]);
    memcpy(all + lens[0], blob[1], lens[1]);
    swy_status_t status = SWY_OK;
    for (int r = 0; r < 2; r++) {
        swy_status_t s = swy_transport_set_connect_all(sets[r], all, lens,
                                                       NULL);
        if (s != SWY_OK && status == SWY_OK)
            status = s;
        swy_free(blob[r]);
    }
    free(all);
    return status;
}

/* Send from rank `from` to `to` through the chosen transports. */
static void exchange(swy_transport_set_t *sets[2], int from, int to)
{
    swy_transport_t *stp = swy_transport_for_peer(sets[from], to,
                                                  SWY_MEM_HOST);
    swy_transport_t *rtp = swy_transport_for_peer(sets[to], from,
                                                  SWY_MEM_HOST);
    CHECK(stp != NULL && rtp != NULL &&
          strcmp(stp->ops->name, rtp->ops->name) == 0);
    if (stp == NULL || rtp == NULL)
        return;
    char msg[32], got[32] = "";
    snprintf(msg, sizeof(msg), "%d to %d via %s", from, to, stp->ops->name);
    completion_t sc = {0}, rc = {0};
    CHECK(rtp->ops->irecv(rtp->ctx, from, 9, got, sizeof(got), SWY_MEM_HOST,
                          on_complete, &rc, NULL) == SWY_OK);
    CHECK(stp->ops->isend(stp->ctx, to, 9, msg, strlen(msg) + 1,
                          SWY_MEM_HOST, on_complete, &sc, NULL) == SWY_OK);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        swy_transport_set_progress(sets[0]);
        swy_transport_set_progress(sets[1]);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((sc.calls == 0 || rc.calls == 0) &&
             now.tv_sec - start.tv_sec < 10);
    CHECK(sc.calls == 1 && sc.status == SWY_OK);
    CHECK(rc.calls == 1 && rc.status == SWY_OK && strcmp(got, msg) == 0);
    printf("  %s: %s\n", msg, rc.status == SWY_OK ? "ok" : "FAILED");
}

static void test_loading(void)
{
    /* Missing (info) and broken (warn) plugins are dropped; self stays;
     * a repeated name loads once. */
    swy_transport_set_t *set = NULL;
    CHECK(swy_transport_set_create(0, 1, &set) == SWY_OK);
    if (set == NULL)
        return;
    CHECK(set->count == 2);
    CHECK(strcmp(set->tps[0].ops->name, "self") == 0);
    CHECK(strcmp(set->tps[0].path, "built-in") == 0);
    CHECK(set->tps[0].dl_handle == NULL);
    CHECK(set->count < 2 || strcmp(set->tps[1].ops->name, "ucx") == 0);
    CHECK(set->count < 2 || set->tps[1].dl_handle != NULL);
    swy_transport_set_destroy(set);
    swy_transport_set_destroy(NULL);
}

static void test_selection(void)
{
    swy_transport_set_t *sets[2];
    CHECK(make_pair(sets) == SWY_OK);
    for (int r = 0; r < 2; r++) {
        swy_transport_t *own = swy_transport_for_peer(sets[r], r,
                                                      SWY_MEM_HOST);
        swy_transport_t *other = swy_transport_for_peer(sets[r], 1 - r,
                                                        SWY_MEM_HOST);
        CHECK(own != NULL && strcmp(own->ops->name, "self") == 0);
        CHECK(other != NULL && strcmp(other->ops->name, "ucx") == 0);
        CHECK(swy_transport_for_peer(sets[r], 1 - r, SWY_MEM_CUDA) == NULL);
        CHECK(swy_transport_for_peer(sets[r], 2, SWY_MEM_HOST) == NULL);
    }
    exchange(sets, 0, 1);
    exchange(sets, 1, 0);
    exchange(sets, 0, 0);

    /* Idle: arming gives one fd per transport (self's and UCX's); UCX may
     * first report pending events, which progress clears. */
    int fds[8], n = -1;
    for (int i = 0; i < 1000 && n < 0; i++) {
        swy_transport_set_progress(sets[0]);
        n = swy_transport_set_arm(sets[0], fds, 8);
    }
    CHECK(n == 2);
    CHECK(swy_transport_set_arm(sets[0], fds, 1) == -1); /* too few slots */

    /* A queued completion (self) makes arm refuse to sleep. */
    int v = 1, w = 0;
    completion_t sc = {0}, rc = {0};
    swy_transport_t *self = swy_transport_for_peer(sets[0], 0, SWY_MEM_HOST);
    CHECK(self->ops->irecv(self->ctx, 0, 1, &w, sizeof(w), SWY_MEM_HOST,
                           on_complete, &rc, NULL) == SWY_OK);
    CHECK(self->ops->isend(self->ctx, 0, 1, &v, sizeof(v), SWY_MEM_HOST,
                           on_complete, &sc, NULL) == SWY_OK);
    CHECK(swy_transport_set_arm(sets[0], fds, 8) == -1);
    CHECK(swy_transport_set_progress(sets[0]) >= 2);
    CHECK(sc.calls == 1 && rc.calls == 1 && w == 1);
    for (int r = 0; r < 2; r++)
        swy_transport_set_destroy(sets[r]);
}

static void test_forced_ucx(void)
{
    swy_transport_set_t *sets[2];
    CHECK(make_pair(sets) == SWY_OK);
    swy_transport_t *own = swy_transport_for_peer(sets[0], 0, SWY_MEM_HOST);
    CHECK(own != NULL && strcmp(own->ops->name, "ucx") == 0);
    exchange(sets, 0, 0);
    exchange(sets, 1, 0);
    for (int r = 0; r < 2; r++)
        swy_transport_set_destroy(sets[r]);
}

/* Forcing self cannot reach another rank: ucx still serves it. */
static void test_forced_self(void)
{
    swy_transport_set_t *sets[2];
    CHECK(make_pair(sets) == SWY_OK);
    CHECK(strcmp(swy_transport_for_peer(sets[0], 1, SWY_MEM_HOST)->ops->name,
                 "ucx") == 0);
    for (int r = 0; r < 2; r++)
        swy_transport_set_destroy(sets[r]);
}

/* Only self loaded: another rank is unreachable. */
static void test_unreachable(void)
{
    swy_transport_set_t *sets[2];
    CHECK(swy_transport_set_create(0, 1, &sets[0]) == SWY_OK);
    CHECK(sets[0] != NULL && sets[0]->count == 1);
    swy_transport_set_destroy(sets[0]);
    CHECK(make_pair(sets) == SWY_ERR_UNSUPPORTED);
    const char *msg = swy_err_last();
    printf("  unreachable: %s\n", msg);
    CHECK(strstr(msg, "rank 0") != NULL || strstr(msg, "rank 1") != NULL);
    CHECK(strstr(msg, "cross_node") != NULL);
    for (int r = 0; r < 2; r++)
        swy_transport_set_destroy(sets[r]);
}

/* A ucx plugin setting out of range (SWY_UCX_SHM_SEG at 64 KiB, which UCX
 * 1.13 cannot carry, or SWY_UCX_LOCAL_EAGER that is no size): the plugin
 * refuses to start, only self is loaded, and another rank is reported
 * unreachable rather than reached with a setting that hangs UCX. */
static void test_bad_setting(void)
{
    swy_transport_set_t *set = NULL;
    CHECK(swy_transport_set_create(0, 1, &set) == SWY_OK);
    CHECK(set != NULL && set->count == 1);
    swy_transport_set_destroy(set);
    swy_transport_set_t *sets[2];
    CHECK(make_pair(sets) == SWY_ERR_UNSUPPORTED);
    printf("  bad setting: %s\n", swy_err_last());
    for (int r = 0; r < 2; r++)
        swy_transport_set_destroy(sets[r]);
}

/* One scenario per run: each needs its own SWY_TRANSPORT_PLUGINS and
 * SWY_TRANSPORT (set by meson.build), read once per process. */
int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } scenarios[] = {
        {"loading", test_loading},
        {"selection", test_selection},
        {"forced_ucx", test_forced_ucx},
        {"forced_self", test_forced_self},
        {"unreachable", test_unreachable},
        {"bad_shm_seg", test_bad_setting},
        {"bad_local_eager", test_bad_setting},
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; argc == 2 && i < sizeof(scenarios) /
                                            sizeof(scenarios[0]); i++) {
        if (strcmp(argv[1], scenarios[i].name) != 0)
            continue;
        printf("SWY_TRANSPORT_PLUGINS=%s SWY_TRANSPORT=%s\n",
               swy_config_get("SWY_TRANSPORT_PLUGINS"),
               swy_config_get("SWY_TRANSPORT") ? swy_config_get("SWY_TRANSPORT")
                                               : "(unset)");
        scenarios[i].fn();
        if (check_failures != 0) {
            fprintf(stderr, "%d checks failed\n", check_failures);
            return 1;
        }
        printf("transport registry %s: all checks passed\n", argv[1]);
        return 0;
    }
    fprintf(stderr, "usage: %s loading|selection|forced_ucx|forced_self|"
                    "unreachable\n", argv[0]);
    return 2;
}
