/* swy-bench model: measured all-to-all time against the communication
 * model (swy_moe_model_alltoall), per traffic pattern. */
#ifndef SWY_BENCH_MODEL_H
#define SWY_BENCH_MODEL_H

int swyb_model_main(int argc, char **argv);

#endif
