/* swy-bench c2c: how long a cache line takes to go from one CPU to
 * another and back. Two threads, each pinned to one of the two CPUs,
 * hand a line back and forth: one stores 1 and waits for 0, the other
 * waits for 1 and stores 0. The time of one such round trip is the cost
 * that every byte pays when one rank writes it and a rank on the other
 * CPU reads it, which is how the shared-memory collectives move data.
 *
 * It needs no launcher and no communicator. On a virtual machine the
 * figure is worth taking next to a collective benchmark: the host may
 * place the machine's CPUs near each other (a shared last-level cache)
 * or far apart, and move them while it runs, and the shared-memory
 * algorithms are much slower far apart (docs/performance.md, "coll"). */
#include "c2c.h"

#include "common.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C2C_DEFAULT_TRIPS 20000
#define C2C_DEFAULT_ROUNDS 7
#define C2C_MAX_ROUNDS 1000

typedef struct {
    _Alignas(64) atomic_int line;
    char pad[64 - sizeof(atomic_int)];
    _Alignas(64) atomic_int stop;
    int cpu;
    int pin_error;
} c2c_shared_t;

static int pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* The answering side: 1 seen, 0 stored, until stop. */
static void *c2c_answer(void *arg)
{
    c2c_shared_t *sh = arg;
    sh->pin_error = pin_self(sh->cpu);
    while (!atomic_load_explicit(&sh->stop, memory_order_acquire)) {
        if (atomic_load_explicit(&sh->line, memory_order_acquire) == 1)
            atomic_store_explicit(&sh->line, 0, memory_order_release);
    }
    return NULL;
}

static void c2c_usage(FILE *out)
{
    fprintf(out,
            "Usage: swy-bench c2c [options]\n"
            "Time a cache line's round trip between two CPUs: two pinned\n"
            "threads hand it back and forth. Prints the median over rounds\n"
            "of each round's mean, in ns. Needs no launcher.\n"
            "\n"
            "  --cpus A,B     the two CPUs (default: the first two this\n"
            "                 process may run on)\n"
            "  --trips N      round trips per round (default %d)\n"
            "  --rounds N     rounds (default %d, at most %d)\n"
            "  --json         also print one JSON line\n"
            "  -h, --help     show this text\n",
            C2C_DEFAULT_TRIPS, C2C_DEFAULT_ROUNDS, C2C_MAX_ROUNDS);
}

static int parse_int(const char *text, int min, int max, int *value_p)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return -1;
    *value_p = (int)v;
    return 0;
}

/* The first two CPUs of this process's affinity mask. */
static int default_cpus(int *a_p, int *b_p)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return -1;
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        if (found++ == 0)
            *a_p = c;
        else
            *b_p = c;
    }
    return found == 2 ? 0 : -1;
}

int swyb_c2c_main(int argc, char **argv)
{
    static const struct option options[] = {
        {"cpus", required_argument, NULL, 'c'},
        {"trips", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int cpu_a = -1, cpu_b = -1, trips = C2C_DEFAULT_TRIPS;
    int rounds = C2C_DEFAULT_ROUNDS, json = 0, opt;

    optind = 2; /* past "swy-bench c2c" */
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'c': {
            char tail;
            if (sscanf(optarg, "%d,%d%c", &cpu_a, &cpu_b, &tail) != 2 ||
                cpu_a < 0 || cpu_b < 0 || cpu_a >= CPU_SETSIZE ||
                cpu_b >= CPU_SETSIZE || cpu_a == cpu_b) {
                fprintf(stderr, "swy-bench c2c: --cpus wants two different "
                                "CPU numbers, A,B: '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 't':
            if (parse_int(optarg, 1, 100000000, &trips) != 0) {
                fprintf(stderr, "swy-bench c2c: bad --trips '%s'\n", optarg);
                return 2;
            }
            break;
        case 'r':
            if (parse_int(optarg, 1, C2C_MAX_ROUNDS, &rounds) != 0) {
                fprintf(stderr, "swy-bench c2c: bad --rounds '%s' (1..%d)\n",
                        optarg, C2C_MAX_ROUNDS);
                return 2;
            }
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            c2c_usage(stdout);
            return 0;
        default:
            c2c_usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "swy-bench c2c: unexpected argument '%s'\n",
                argv[optind]);
        return 2;
    }
    if (cpu_a < 0 && default_cpus(&cpu_a, &cpu_b) != 0) {
        fprintf(stderr, "swy-bench c2c: this process may run on fewer than "
                        "two CPUs\n");
        return 2;
    }

    c2c_shared_t *sh = aligned_alloc(64, sizeof(*sh));
    if (sh == NULL) {
        fprintf(stderr, "swy-bench c2c: out of memory\n");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    atomic_init(&sh->line, 0);
    atomic_init(&sh->stop, 0);
    sh->cpu = cpu_b;
    int rc = pin_self(cpu_a);
    if (rc != 0) {
        fprintf(stderr, "swy-bench c2c: cannot run on CPU %d: %s\n", cpu_a,
                strerror(rc));
        free(sh);
        return 1;
    }
    pthread_t thread;
    rc = pthread_create(&thread, NULL, c2c_answer, sh);
    if (rc != 0) {
        fprintf(stderr, "swy-bench c2c: pthread_create: %s\n", strerror(rc));
        free(sh);
        return 1;
    }

    double ns[C2C_MAX_ROUNDS];
    for (int r = 0; r <= rounds; r++) { /* round 0 warms up */
        double t0 = swyb_now_s();
        for (int i = 0; i < trips; i++) {
            atomic_store_explicit(&sh->line, 1, memory_order_release);
            while (atomic_load_explicit(&sh->line, memory_order_acquire) != 0)
                ;
        }
        if (r > 0)
            ns[r - 1] = (swyb_now_s() - t0) / trips * 1e9;
    }
    atomic_store_explicit(&sh->stop, 1, memory_order_release);
    pthread_join(thread, NULL);
    if (sh->pin_error != 0) {
        fprintf(stderr, "swy-bench c2c: cannot run on CPU %d: %s\n", cpu_b,
                strerror(sh->pin_error));
        free(sh);
        return 1;
    }
    free(sh);

    swyb_stats_t st;
    swyb_stats_compute(ns, (size_t)rounds, &st);
    printf("c2c cpus %d,%d: round trip %.1f ns median (min %.1f, max %.1f) "
           "over %d rounds of %d\n", cpu_a, cpu_b, st.median, st.min, st.max,
           rounds, trips);
    if (json)
        printf("{\"bench\":\"c2c\",\"cpus\":[%d,%d],\"trips\":%d,"
               "\"rounds\":%d,\"round_trip_ns_median\":%.1f,"
               "\"round_trip_ns_min\":%.1f,\"round_trip_ns_max\":%.1f}\n",
               cpu_a, cpu_b, trips, rounds, st.median, st.min, st.max);
    return 0;
}
