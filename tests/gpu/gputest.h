/* Checks shared by the gpu suite's C tests: CHECK counts a failure and
 * goes on (the test ends with the count), CUDA_OK ends the test when a
 * CUDA call of the test itself fails, naming the call and the error. */
#ifndef SWY_GPUTEST_H
#define SWY_GPUTEST_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

static int failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,  \
                    #cond);                                                   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CUDA_OK(call)                                                         \
    do {                                                                      \
        cudaError_t cuda_err_ = (call);                                       \
        if (cuda_err_ != cudaSuccess) {                                       \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__,          \
                    __LINE__, #call, cudaGetErrorString(cuda_err_),           \
                    cudaGetErrorName(cuda_err_));                             \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
