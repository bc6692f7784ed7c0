// CUDA and cuBLAS errors become mlaserve::Error with the call and the place named.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "common/error.h"

#define CUDA_CHECK(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t err_ = (call);                                                                            \
    if (err_ != cudaSuccess)                                                                              \
      ::mlaserve::fail("CUDA error {} ({}) in {} at {}:{}", int(err_), cudaGetErrorString(err_), #call, \
                       __FILE__, __LINE__);                                                               \
  } while (0)

#define CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                 \
    cublasStatus_t st_ = (call);                                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                  \
      ::mlaserve::fail("cuBLAS error {} ({}) in {} at {}:{}", int(st_), cublasLtGetStatusString(st_), #call, \
                       __FILE__, __LINE__);                                                            \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, at the op that caused them.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
