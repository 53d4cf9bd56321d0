/* swy-bench overhead. */
#ifndef SWY_BENCH_OVERHEAD_H
#define SWY_BENCH_OVERHEAD_H

/** swy-bench overhead: argv[0] is swy-bench, argv[1] "overhead". Returns
 * the process exit status. */
int swyb_overhead_main(int argc, char **argv);

#endif /* SWY_BENCH_OVERHEAD_H */
