/* The gpu suite's C tests check with check.h (CHECK counts a failure and
 * goes on; the test ends with the count); CUDA_OK ends the test when a
 * CUDA call of the test itself fails, naming the call and the error. */
#ifndef SWY_GPUTEST_H
#define SWY_GPUTEST_H

#include <cuda_runtime.h>

#include "check.h"

#define CUDA_OK(call)                                                         \
    do {                                                                      \
        cudaError_t cuda_err_ = (call);                                       \
        CHECK_EXIT(cuda_err_ == cudaSuccess, "%s: %s (%s)", #call,            \
                   cudaGetErrorString(cuda_err_),                             \
                   cudaGetErrorName(cuda_err_));                              \
    } while (0)

#endif
