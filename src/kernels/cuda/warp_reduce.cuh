// Sums across a warp's 32 lanes (every lane gets the total; all 32 must call).
#pragma once

namespace mlaserve::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(~0u, v, d);
  return v;
}

}  // namespace mlaserve::cuda
