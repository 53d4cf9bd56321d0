/* Failure notification:
 * (e) a rank process SIGKILLed after joining: the others learn within 3 s
 *     (swy_boot_failure, the eventfd, the callback, a pending barrier);
 * (f) report_failure reaches every other rank with the same message;
 * (i) the root's process dies: the ranks learn they lost it;
 * quiescence: a rank that reports itself quiesced, or dies, is seen
 * quiesced by every other rank, and no other rank is.
 * Forks happen while this process has no threads, so the children start
 * from a clean state. */
#include <sys/prctl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "boot_test.h"

#define NOTIFY_LIMIT_S 3.0

static swy_boot_addr_t g_addr;
static atomic_int g_joined;
static double g_kill_time;
static atomic_int g_killed;
static atomic_int g_callbacks[4];
static int g_child_pid;

static void on_failure(void *arg)
{
    atomic_fetch_add(&g_callbacks[(intptr_t)arg], 1);
}

static void wait_for(atomic_int *counter, int value)
{
    double deadline = swy_time_s() + 15.0;
    while (atomic_load(counter) < value) {
        CHECK_EXIT(swy_time_s() < deadline);
        swy_sleep_us(1000);
    }
}

/* Block on the failure eventfd; returns the time it became readable. */
static double wait_failure_fd(swy_boot_t *boot)
{
    struct pollfd pfd = {.fd = swy_boot_failure_fd(boot), .events = POLLIN};
    int rc = poll(&pfd, 1, 20000);
    CHECK_EXIT(rc == 1);
    return swy_time_s();
}

/* Wait (at most NOTIFY_LIMIT_S) until boot sees rank quiesced. */
static void wait_quiesced(swy_boot_t *boot, int rank)
{
    double deadline = swy_time_s() + NOTIFY_LIMIT_S;
    while (!swy_boot_peer_quiesced(boot, rank)) {
        CHECK_EXIT(swy_time_s() < deadline);
        swy_sleep_us(1000);
    }
}

/* ---- (e) a rank is SIGKILLed ---- */

static void killed_peer_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 3, 10.0, &boot), NULL);
    swy_boot_set_failure_callback(boot, on_failure, (void *)(intptr_t)rank);
    atomic_fetch_add(&g_joined, 1);

    double noticed;
    if (rank == 0) {
        /* Pending barrier: rank 1 never enters it. */
        CHECK_EXIT(swy_boot_barrier(boot, 20.0) == SWY_ERR_REMOTE);
        noticed = swy_time_s();
    } else {
        noticed = wait_failure_fd(boot);
    }
    CHECK_EXIT(atomic_load(&g_killed));
    CHECK_EXIT(noticed - g_kill_time < NOTIFY_LIMIT_S);

    char msg[512];
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_REMOTE);
    char expected[128];
    snprintf(expected, sizeof(expected), "rank 1 (pid %d on ", g_child_pid);
    CHECK_EXIT(strstr(msg, expected) != NULL);
    CHECK_EXIT(strstr(msg, "died: control connection closed without goodbye") !=
               NULL);
    /* Later collectives fail at once with the recorded failure. */
    double t0 = swy_time_s();
    CHECK_EXIT(swy_boot_barrier(boot, 20.0) == SWY_ERR_REMOTE);
    CHECK_EXIT(swy_time_s() - t0 < 0.5);
    CHECK_EXIT(strstr(swy_err_last(), "died") != NULL);
    swy_sleep_us(100000);
    CHECK_EXIT(atomic_load(&g_callbacks[rank]) == 1);
    /* The dead rank reads nobody's memory; the live one (0 or 2) is not
     * quiesced until it says so. */
    int other = 2 - rank;
    wait_quiesced(boot, 1);
    CHECK_EXIT(swy_boot_peer_gone(boot, 1));
    CHECK_EXIT(!swy_boot_peer_quiesced(boot, other));
    CHECK_EXIT(!swy_boot_peer_gone(boot, other) &&
                   !swy_boot_peer_gone(boot, 3));
    CHECK_EXIT(!swy_boot_peer_quiesced(boot, 3) &&
                   !swy_boot_peer_quiesced(boot, -1));
    atomic_fetch_add(&g_joined, 1);
    wait_for(&g_joined, 4); /* both checked before either reports */
    swy_boot_report_quiesced(boot);
    wait_quiesced(boot, other);
    CHECK_EXIT(!swy_boot_peer_gone(boot, other)); /* quiesced, not gone */
    atomic_fetch_add(&g_joined, 1);
    wait_for(&g_joined, 6); /* both saw it before either leaves */
    swy_boot_finalize(boot);
}

static void test_rank_killed(void)
{
    int to_child, from_child;
    g_child_pid = test_fork_rank(1, 3, &to_child, &from_child);

    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    test_write_all(to_child, &g_addr, sizeof(g_addr));

    atomic_store(&g_joined, 0);
    atomic_store(&g_killed, 0);
    for (int i = 0; i < 4; i++)
        atomic_store(&g_callbacks[i], 0);

    pthread_t threads[2];
    test_thread_t args[2] = {{killed_peer_rank, 0, NULL},
                             {killed_peer_rank, 2, NULL}};
    for (int i = 0; i < 2; i++)
        CHECK_EXIT(pthread_create(&threads[i], NULL, test_thread_main,
                                  &args[i]) == 0);
    char joined;
    CHECK_EXIT(test_read_all(from_child, &joined, 1) == 0);
    wait_for(&g_joined, 2);
    swy_sleep_us(300000); /* rank 0 is now inside its barrier */

    g_kill_time = swy_time_s();
    atomic_store(&g_killed, 1);
    kill(g_child_pid, SIGKILL);
    int wstatus;
    CHECK_EXIT(waitpid(g_child_pid, &wstatus, 0) == g_child_pid);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    close(to_child);
    close(from_child);

    double t0 = swy_time_s();
    swy_boot_root_release(root);
    CHECK_EXIT(swy_time_s() - t0 < 2.0);
}

/* ---- (f) report_failure ---- */

static const char *g_report =
    "alltoallv #7: rank 1 expected 4096 bytes from rank 2, rank 2 sent 1024";

static void reporting_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 3, 10.0, &boot), NULL);
    swy_boot_set_failure_callback(boot, on_failure, (void *)(intptr_t)rank);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);

    char msg[512];
    if (rank == 1) {
        swy_sleep_us(200000);
        swy_boot_report_failure(boot, SWY_ERR_MISMATCH, g_report);
    } else if (rank == 0) {
        double t0 = swy_time_s();
        CHECK_EXIT(swy_boot_barrier(boot, 20.0) == SWY_ERR_MISMATCH);
        CHECK_EXIT(swy_time_s() - t0 < NOTIFY_LIMIT_S);
        CHECK_EXIT(strcmp(swy_err_last(), g_report) == 0);
    } else {
        wait_failure_fd(boot);
    }
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK_EXIT(strcmp(msg, g_report) == 0);
    /* A second report does not replace the first failure. */
    swy_boot_report_failure(boot, SWY_ERR_REMOTE, "a later failure");
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_MISMATCH);
    CHECK_EXIT(strcmp(msg, g_report) == 0);
    atomic_fetch_add(&g_joined, 1);
    wait_for(&g_joined, 3); /* the later reports are all out */
    swy_sleep_us(100000);
    CHECK_EXIT(atomic_load(&g_callbacks[rank]) == 1);
    swy_boot_finalize(boot);
}

static void test_report_failure(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    atomic_store(&g_joined, 0);
    for (int i = 0; i < 4; i++)
        atomic_store(&g_callbacks[i], 0);
    test_run_ranks(3, NULL, reporting_rank, NULL);
    swy_boot_root_release(root);
}

/* ---- abort: FAILED with the reason, then a clean close ---- */

static void aborting_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 2, 10.0, &boot), NULL);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    if (rank == 1) {
        swy_sleep_us(200000);
        swy_boot_abort(boot, "out of patience");
        return;
    }
    CHECK_EXIT(swy_boot_barrier(boot, 20.0) == SWY_ERR_REMOTE);
    CHECK_EXIT(strcmp(swy_err_last(), "rank 1 aborted: out of patience") == 0);
    /* The abort's GOODBYE keeps the root from reporting a second death;
     * either way the first failure stays. */
    swy_sleep_us(200000);
    char msg[512];
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_REMOTE);
    CHECK_EXIT(strcmp(msg, "rank 1 aborted: out of patience") == 0);
    swy_boot_finalize(boot);
}

static void test_abort(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    test_run_ranks(2, NULL, aborting_rank, NULL);
    double t0 = swy_time_s();
    swy_boot_root_release(root);
    CHECK_EXIT(swy_time_s() - t0 < 2.0);
}

/* ---- (i) the root's process dies ---- */

static void orphan_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 2, 10.0, &boot), NULL);
    swy_boot_set_failure_callback(boot, on_failure, (void *)(intptr_t)rank);
    CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    atomic_fetch_add(&g_joined, 1);
    double noticed;
    if (rank == 0) {
        CHECK_EXIT(swy_boot_barrier(boot, 20.0) == SWY_ERR_REMOTE);
        noticed = swy_time_s();
    } else {
        noticed = wait_failure_fd(boot);
    }
    CHECK_EXIT(atomic_load(&g_killed));
    CHECK_EXIT(noticed - g_kill_time < NOTIFY_LIMIT_S);
    char msg[512], expected[160];
    CHECK_EXIT(swy_boot_failure(boot, msg, sizeof(msg)) == SWY_ERR_REMOTE);
    snprintf(expected, sizeof(expected),
             "lost the control connection to the root at %s:%u",
             g_addr.host, g_addr.port);
    CHECK_EXIT(strstr(msg, expected) == msg);
    /* The eventfd is signalled just before the callback runs. */
    wait_for(&g_callbacks[rank], 1);
    swy_sleep_us(50000);
    CHECK_EXIT(atomic_load(&g_callbacks[rank]) == 1);
    /* GOODBYE to a dead root must neither hang nor crash. */
    double t0 = swy_time_s();
    swy_boot_finalize(boot);
    CHECK_EXIT(swy_time_s() - t0 < 1.0);
}

static void test_root_killed(void)
{
    int from_child[2];
    CHECK_EXIT(pipe(from_child) == 0);
    pid_t pid = fork();
    if (pid == 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    CHECK_EXIT(pid >= 0);
    if (pid == 0) {
        close(from_child[0]);
        uint8_t secret[SWY_BOOT_SECRET_LEN];
        test_secret(secret, "root dies");
        swy_boot_root_t *root = NULL;
        swy_boot_addr_t addr;
        if (swy_boot_root_start("127.0.0.1", 0, secret, &root, &addr) !=
            SWY_OK)
            _exit(2);
        test_write_all(from_child[1], &addr, sizeof(addr));
        for (;;)
            pause();
    }
    close(from_child[1]);
    CHECK_EXIT(test_read_all(from_child[0], &g_addr, sizeof(g_addr)) == 0);
    close(from_child[0]);

    atomic_store(&g_joined, 0);
    atomic_store(&g_killed, 0);
    for (int i = 0; i < 4; i++)
        atomic_store(&g_callbacks[i], 0);
    pthread_t threads[2];
    test_thread_t args[2] = {{orphan_rank, 0, NULL}, {orphan_rank, 1, NULL}};
    for (int i = 0; i < 2; i++)
        CHECK_EXIT(pthread_create(&threads[i], NULL, test_thread_main,
                                  &args[i]) == 0);
    wait_for(&g_joined, 2);
    swy_sleep_us(300000);
    g_kill_time = swy_time_s();
    atomic_store(&g_killed, 1);
    kill(pid, SIGKILL);
    int wstatus;
    CHECK_EXIT(waitpid(pid, &wstatus, 0) == pid);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
}

int main(void)
{
    test_rank_killed();
    test_report_failure();
    test_abort();
    test_root_killed();
    printf("boot failure: ok\n");
    return 0;
}
