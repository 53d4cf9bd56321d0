/* util/pool: every piece of a job runs exactly once, whoever takes it,
 * and swy_pool_run returns only once all are done: jobs of 0 to 3000
 * pieces back to back (the helpers spinning), after pauses (the helpers
 * asleep), and from 4 threads at once (the callers that find the pool
 * busy run their jobs alone). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/pool.h"

#define MAX_PIECES 3000

typedef struct {
    _Atomic int hits[MAX_PIECES];
    int failures;
} job_t;

static void piece(void *arg, size_t i)
{
    job_t *job = arg;
    atomic_fetch_add(&job->hits[i], 1);
}

static int run_jobs(job_t *job, unsigned seed, int njobs, int pause_every)
{
    for (int j = 0; j < njobs; j++) {
        size_t n = (size_t)(rand_r(&seed) % (MAX_PIECES + 1));
        for (size_t i = 0; i < MAX_PIECES; i++)
            atomic_store(&job->hits[i], 0);
        swy_pool_run(piece, job, n);
        for (size_t i = 0; i < MAX_PIECES; i++) {
            int want = i < n ? 1 : 0, got = atomic_load(&job->hits[i]);
            if (got != want) {
                if (job->failures++ < 5)
                    printf("job %d of %zu pieces: piece %zu ran %d times\n",
                           j, n, i, got);
                break;
            }
        }
        if (pause_every > 0 && j % pause_every == 0)
            usleep(300); /* past the helpers' spin: they sleep */
    }
    return job->failures;
}

static void *caller(void *arg)
{
    job_t *job = arg;
    run_jobs(job, (unsigned)(uintptr_t)job, 300, 0);
    return NULL;
}

int main(void)
{
    int helpers = swy_pool_start(3);
    if (helpers != 3) {
        printf("FAIL: %d helpers started, 3 asked\n", helpers);
        return 1;
    }
    static job_t jobs[4];
    int failures = run_jobs(&jobs[0], 1, 500, 0);
    failures += run_jobs(&jobs[0], 2, 100, 3);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, caller, &jobs[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        failures += jobs[i].failures;
    }
    if (failures > 0) {
        printf("FAIL: %d jobs went wrong\n", failures);
        return 1;
    }
    printf("PASS: %d helpers\n", helpers);
    return 0;
}
