// What the skinny GEMMs (skinny_gemm.cu, BF16; skinny_gemm_fp8.cu, FP8) share: the streaming
// weight load and the split-K arrival count.
#pragma once

#include <cstdint>

namespace mlaserve::cuda::skinny {

// 16 bytes of a weight, read once: not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Called by one thread of a CTA whose split-K partials are published (and fenced): counts the
// CTA in; true for the last of the `splits` CTAs of its row block, which also resets the counter
// for the next launch (and graph replay).
__device__ __forceinline__ bool arrive_last(int* counter, int splits) {
  const bool last = atomicAdd(counter, 1) == splits - 1;
  if (last) *counter = 0;
  return last;
}

}  // namespace mlaserve::cuda::skinny
