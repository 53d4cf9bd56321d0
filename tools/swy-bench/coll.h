/* swy-bench subcommands. */
#ifndef SWY_BENCH_COLL_H
#define SWY_BENCH_COLL_H

/** swy-bench coll: argv[0] is swy-bench, argv[1] "coll". Returns the
 * process exit status. */
int swyb_coll_main(int argc, char **argv);

#endif /* SWY_BENCH_COLL_H */
