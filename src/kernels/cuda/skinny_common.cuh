// What the skinny GEMMs (skinny_gemm.cu, BF16; skinny_gemm_fp8.cu, FP8) share: the split-K arrival
// count.
#pragma once

#include <cstdint>

namespace mlaserve::cuda::skinny {

// Called by one thread of a CTA whose split-K partials are published (and fenced): counts the
// CTA in; true for the last of the `splits` CTAs of its row block, which also resets the counter
// for the next launch (and graph replay).
__device__ __forceinline__ bool arrive_last(int* counter, int splits) {
  const bool last = atomicAdd(counter, 1) == splits - 1;
  if (last) *counter = 0;
  return last;
}

}  // namespace mlaserve::cuda::skinny
