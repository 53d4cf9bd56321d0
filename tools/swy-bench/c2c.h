/* swy-bench c2c. */
#ifndef SWY_BENCH_C2C_H
#define SWY_BENCH_C2C_H

/** swy-bench c2c: argv[0] is swy-bench, argv[1] "c2c". Returns the
 * process exit status. */
int swyb_c2c_main(int argc, char **argv);

#endif /* SWY_BENCH_C2C_H */
