/* swy-bench interference. */
#ifndef SWY_BENCH_INTERFERENCE_H
#define SWY_BENCH_INTERFERENCE_H

/** swy-bench interference: argv[0] is swy-bench, argv[1] "interference".
 * Returns the process exit status. */
int swyb_interference_main(int argc, char **argv);

#endif /* SWY_BENCH_INTERFERENCE_H */
