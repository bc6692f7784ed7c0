// How a kernel reads data it reads once: weights streamed once a step, a 16-row MLA decode job's
// cache tiles. Marked the first to leave L2, they do not push out what other kernels read again.
#pragma once

#include <cstdint>

namespace mlaserve::cuda {

// 16 bytes of a weight, read once a step: cache-streaming (evict-first in L1 and L2). At one token
// a V2-Lite layer streams about 130 MB of weights through a 50-60 MB L2; read normally they evict
// the small buffers the next kernels read through dependent loads (activations, the attention's
// plan and first tile, this step's cache rows), and each such miss costs a DRAM latency on the
// step's critical path.
__device__ __forceinline__ uint4 load_weight_once(const void* p) { return __ldcs(static_cast<const uint4*>(p)); }

// An L2 policy that evicts what it loads first, for the copies that take one (cp.async, TMA).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

}  // namespace mlaserve::cuda
