/* (g) Join timeout naming the missing ranks (3 of 4 join, timeout 1 s);
 * a collective timeout naming the ranks that did not enter it; a root
 * that comes up after the ranks started connecting; and a root nobody
 * listens on. */
#include <stdatomic.h>

#include "boot_test.h"

static swy_boot_addr_t g_addr;
static atomic_int g_done;

static void joining_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    double t0 = swy_time_s();
    swy_status_t status = swy_boot_connect(&g_addr, rank, 4, 1.0, &boot);
    double took = swy_time_s() - t0;
    CHECK_EXIT(status == SWY_ERR_TIMEOUT);
    CHECK_EXIT(boot == NULL);
    const char *msg = swy_err_last();
    if (strstr(msg, "3 of 4 ranks joined; missing ranks: 3") == NULL) {
        fprintf(stderr, "rank %d: unexpected message: %s\n", rank, msg);
        exit(1);
    }
    CHECK_EXIT(took >= 1.0 && took < 3.5);
}

static void test_join_timeout(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    test_run_ranks(3, NULL, joining_rank, NULL);
    swy_boot_root_release(root);
}

static void collective_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 4, 10.0, &boot), NULL);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    if (rank != 2 && rank != 3) {
        CHECK_EXIT(swy_boot_barrier(boot, 1.0) == SWY_ERR_TIMEOUT);
        const char *msg = swy_err_last();
        if (strstr(msg, "#2") == NULL ||
            strstr(msg, "have not entered it: 2-3") == NULL) {
            fprintf(stderr, "rank %d: unexpected message: %s\n", rank, msg);
            exit(1);
        }
    }
    atomic_fetch_add(&g_done, 1);
    while (atomic_load(&g_done) < 4)
        swy_sleep_us(1000);
    swy_boot_finalize(boot);
}

static void test_collective_timeout(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    atomic_store(&g_done, 0);
    test_run_ranks(4, NULL, collective_rank, NULL);
    swy_boot_root_release(root);
}

/* The ranks start first; the root binds the port 700 ms later. */
static void early_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 2, 10.0, &boot), NULL);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    swy_boot_finalize(boot);
}

static void *late_root_main(void *arg)
{
    swy_boot_root_t **root_p = arg;
    swy_sleep_us(700000);
    swy_boot_addr_t addr;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", g_addr.port, g_addr.secret,
                                      root_p, &addr), NULL);
    CHECK_EXIT(addr.port == g_addr.port);
    return NULL;
}

static void test_late_root(void)
{
    /* Find a free port: start a root and release it at once. */
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    swy_boot_root_release(root);
    root = NULL;

    pthread_t late;
    CHECK_EXIT(pthread_create(&late, NULL, late_root_main, &root) == 0);
    test_run_ranks(2, NULL, early_rank, NULL);
    pthread_join(late, NULL);
    /* The port is taken now: a second root cannot bind it. */
    swy_boot_root_t *second = NULL;
    swy_boot_addr_t second_addr;
    CHECK_EXIT(swy_boot_root_start("127.0.0.1", g_addr.port, secret, &second,
                                   &second_addr) == SWY_ERR_SYSTEM);
    CHECK_EXIT(strstr(swy_err_last(), "cannot bind 127.0.0.1:") != NULL);
    CHECK_EXIT(second == NULL);
    swy_boot_root_release(root);

    /* Nobody listening: the error names the root and the cause. */
    swy_boot_t *boot = NULL;
    CHECK_EXIT(swy_boot_connect(&g_addr, 0, 1, 0.5, &boot) == SWY_ERR_TIMEOUT);
    CHECK_EXIT(strstr(swy_err_last(), "could not connect to the root at "
                                      "127.0.0.1:") != NULL);
}

int main(void)
{
    test_join_timeout();
    test_collective_timeout();
    test_late_root();
    printf("boot timeout: ok\n");
    return 0;
}
