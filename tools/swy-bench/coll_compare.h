/* swy-bench coll's comparison: after Switchyard's ranks have finished,
 * rank 0 runs the peers on the same host the same way (Open MPI through
 * swy-bench-mpi, and the ucx_perftest limit) and prints one table of
 * both, so that `swy-run -n 4 swy-bench coll` alone gives the
 * comparison that docs/measuring.md asks for. tools/bench-coll.sh, which runs
 * the peers itself (alternating, repeated), turns it off. */
#ifndef SWY_BENCH_COLL_COMPARE_H
#define SWY_BENCH_COLL_COMPARE_H

#include "common.h"

#include <stddef.h>

typedef enum {
    SWYB_COMPARE_AUTO,    /* the peers that are found; say why not others */
    SWYB_COMPARE_NONE,    /* Switchyard's table only */
    SWYB_COMPARE_REQUIRE, /* a peer that cannot run fails the benchmark */
} swyb_compare_mode_t;

/**
 * Take `--compare MODE` (or `--compare=MODE`) out of argv[first..argc-1],
 * moving the rest down, so the shared coll parser and the peer see the
 * other options only. MODE: auto (default), none, require.
 * @return the new argc, or -1 after a message (on @p rank 0) for a bad
 *         MODE.
 */
int swyb_compare_args_take(int argc, char **argv, int first, int rank,
                           swyb_compare_mode_t *mode_p);

/**
 * This host's identity as an integer held exactly by a double: a hash of
 * the hostname (an emulated node has its own) and the kernel's boot id.
 * Ranks whose keys differ do not share a host.
 */
double swyb_host_key(void);

/**
 * Rank 0, after the job: run Open MPI's coll benchmark
 * (`mpirun --allow-run-as-root --oversubscribe -np NRANKS swy-bench-mpi
 * coll --json OPTIONS`) and ucx_perftest (tag_bw, 16 MiB, two processes
 * on 127.0.0.1), and print the comparison with @p swy (Switchyard's
 * results, @p n of them). @p why_not, when not NULL, says why no peer
 * can run here (e.g. ranks on several hosts). @p options / @p noptions:
 * the coll options to pass on. With @p json, one "coll_compare" JSON
 * line per point.
 * @return 0; 1 when @p mode is SWYB_COMPARE_REQUIRE and a peer could not
 *         run, ran wrong, or left a point out.
 */
int swyb_coll_compare(swyb_compare_mode_t mode, const char *why_not,
                      int nranks, const swyb_coll_result_t *swy, size_t n,
                      char **options, int noptions, int json);

#endif /* SWY_BENCH_COLL_COMPARE_H */
