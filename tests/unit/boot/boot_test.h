/* Helpers shared by the lib/boot unit tests. */
#ifndef SWY_TEST_BOOT_TEST_H
#define SWY_TEST_BOOT_TEST_H

#include <sys/prctl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Failed checks end with the library's last error (check.h). */
#define CHECK_LAST_ERROR() swy_err_last()

#include "boot/boot.h"
#include "check_swy.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/status.h"

/* A fixed, known secret (tests only). */
static inline void test_secret(uint8_t secret[SWY_BOOT_SECRET_LEN],
                               const char *text)
{
    swy_boot_secret_from_text(text, secret);
}

/* Run fn(rank, arg) in n threads and join them. */
typedef void (*test_rank_fn_t)(int rank, void *arg);

typedef struct {
    test_rank_fn_t fn;
    int rank;
    void *arg;
} test_thread_t;

static inline void *test_thread_main(void *p)
{
    test_thread_t *t = p;
    t->fn(t->rank, t->arg);
    return NULL;
}

static inline void test_run_ranks(int n, const int *ranks, test_rank_fn_t fn,
                                  void *arg)
{
    pthread_t threads[64];
    test_thread_t args[64];
    CHECK_EXIT(n <= 64);
    for (int i = 0; i < n; i++) {
        args[i].fn = fn;
        args[i].rank = ranks != NULL ? ranks[i] : i;
        args[i].arg = arg;
        CHECK_EXIT(pthread_create(&threads[i], NULL, test_thread_main,
                                  &args[i]) == 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
}

/* Write/read a whole buffer over a pipe (addresses to forked children). */
static inline void test_write_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const char *)buf + done, len - done);
        CHECK_EXIT(n > 0);
        done += (size_t)n;
    }
}

static inline int test_read_all(int fd, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, (char *)buf + done, len - done);
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Child: join as `rank` of `nranks`, tell the parent, then wait to die. */
static inline pid_t test_fork_rank(int rank, int nranks, int *to_child_p,
                       int *from_child_p)
{
    int to_child[2], from_child[2];
    CHECK_EXIT(pipe(to_child) == 0 && pipe(from_child) == 0);
    pid_t pid = fork();
    if (pid == 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    CHECK_EXIT(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        swy_boot_addr_t addr;
        if (test_read_all(to_child[0], &addr, sizeof(addr)) != 0)
            _exit(2);
        swy_boot_t *boot = NULL;
        if (swy_boot_connect(&addr, rank, nranks, 10.0, &boot) != SWY_OK)
            _exit(3);
        char joined = 'j';
        test_write_all(from_child[1], &joined, 1);
        for (;;)
            pause();
    }
    close(to_child[0]);
    close(from_child[1]);
    *to_child_p = to_child[1];
    *from_child_p = from_child[0];
    return pid;
}

#endif
