// Seeded normal fill of dummy weights, one element per counter: the same normal01 as the host
// (common/random.h), so a model made here equals one made on the host and copied over.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/random.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill_random.h"

namespace mlaserve::cuda {

namespace {

__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <class T>
__global__ void fill_normal_kernel(T* out, int64_t n, uint64_t stream, float mean, float stddev) {
  int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    // Rounded multiply then add, as the host computes it (no FMA contraction).
    store(out, i, __fadd_rn(mean, __fmul_rn(stddev, normal01(stream, uint64_t(i)))));
  }
}

}  // namespace

void launch_fill_normal(void* out, FillType type, int64_t n, uint64_t stream, float mean, float stddev,
                        cudaStream_t s) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill any GPU; larger tensors loop (grid-stride).
  int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
  switch (type) {
    case FillType::F32:
      fill_normal_kernel<<<blocks, kThreads, 0, s>>>(static_cast<float*>(out), n, stream, mean, stddev);
      break;
    case FillType::BF16:
      fill_normal_kernel<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(out), n, stream, mean, stddev);
      break;
    case FillType::F16:
      fill_normal_kernel<<<blocks, kThreads, 0, s>>>(static_cast<__half*>(out), n, stream, mean, stddev);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace mlaserve::cuda
