// How a decode kernel reads a weight it streams once a step.
#pragma once

#include <cstdint>

namespace mlaserve::cuda {

// 16 bytes of a weight, read once a step: cache-streaming (evict-first in L1 and L2). At one token
// a V2-Lite layer streams about 130 MB of weights through a 50-60 MB L2; read normally they evict
// the small buffers the next kernels read through dependent loads (activations, the attention's
// plan and first tile, this step's cache rows), and each such miss costs a DRAM latency on the
// step's critical path.
__device__ __forceinline__ uint4 load_weight_once(const void* p) { return __ldcs(static_cast<const uint4*>(p)); }

}  // namespace mlaserve::cuda
