/* A minimal launcher for multi-process tests: forks the ranks first, then
 * creates the unique id in the parent and hands it to each child through a
 * pipe (so no child inherits a running root thread), and collects exit
 * codes. Independent of swy-run, so launcher bugs cannot mask library
 * bugs. */
#ifndef SWY_TEST_HARNESS_H
#define SWY_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_swy.h"
#include "switchyard/switchyard.h"

typedef int (*swy_test_rank_fn)(swy_comm_t comm, int rank, int nranks,
                                 void *arg);

/* Exit codes of each child (index = rank); -signal when killed. */
typedef struct {
    int code[256];
} swy_test_result_t;

/* Run fn on nranks processes; each child inits its comm, runs fn, and
 * (with SWYTEST_SPLIT=reverse or halves, fn gets a communicator split
 * from it: every rank reversed, or the even and the odd ranks), and
 * destroys the comm unless fn returned 200 + n (then it exits n without
 * destroy: the comm is already unusable on purpose). Kills everything
 * after timeout_s. Returns 0 if every rank exited 0. */
int swy_test_spawn(int nranks, swy_test_rank_fn fn, void *arg,
                   double timeout_s, swy_test_result_t *result);

/* The GPU test double (tests/devdouble/devdouble.h), when SWYTEST_DEVDOUBLE
 * names it (the device tests' environment): its "device memory" and
 * streams. swy_test_devdouble() is 1 when it is there (loaded on first
 * use); the others abort when it is not, or when out of memory. */
int swy_test_devdouble(void);
void *swy_test_dev_alloc(size_t bytes);
void swy_test_dev_free(void *ptr);
void *swy_test_dev_stream_create(void);
void swy_test_dev_stream_destroy(void *stream);
void swy_test_dev_launch(void *stream, void (*fn)(void *), void *arg);
void swy_test_dev_stream_capture(void *stream, int on);
/* What moved device memory in this process (swy_devdouble_traffic):
 * mark it, then check that since the mark the device plugin's launches
 * moved it (at least one) and no transport send did. The check returns
 * 0, or 1 after printing what it found for what. */
typedef struct {
    unsigned long long transport_sends, launches;
} swy_test_dev_traffic_t;
swy_test_dev_traffic_t swy_test_dev_traffic_mark(void);
int swy_test_dev_moved_by_plugin(swy_test_dev_traffic_t mark,
                                 const char *what);
/* n zeroed elements of size bytes: the double's device memory where
 * device is nonzero, else calloc'd (NULL when out of host memory); and
 * the matching free. */
void *swy_test_buf_calloc(int device, size_t n, size_t size);
void swy_test_buf_free(int device, void *ptr);

/* A stream's work that copies bytes from src to dst (the double's
 * "device memory" is host memory) when the stream gets there: what the
 * work queued after an op sees. */
typedef struct {
    const void *src;
    void *dst;
    size_t bytes;
} swy_test_snapshot_t;
void swy_test_snapshot(void *arg);

/* Monotonic seconds. */
static inline double swy_test_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The number after key ("\"ts\":") in a line of a Chrome trace that
 * SWY_TRACE wrote. Returns 0, or -1 if the line has no such key. */
static inline int swy_test_trace_num(const char *line, const char *key,
                                     double *value)
{
    const char *p = strstr(line, key);
    if (p == NULL)
        return -1;
    *value = strtod(p + strlen(key), NULL);
    return 0;
}

/* Deterministic generator (splitmix64) shared by all ranks. */
static inline uint64_t swy_test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
