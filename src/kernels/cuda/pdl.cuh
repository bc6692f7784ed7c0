// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may be scheduled while
// the kernel before it on the stream is still running, so its launch latency and whatever it does
// before pdl_wait() (reading weights, which no kernel of a forward writes) overlap that kernel.
//
// The contract, for every kernel launched with launch_pdl: call pdl_wait() before reading anything
// the kernel just before wrote and before writing anything, and in every CTA before it ends (also a
// CTA with nothing to do). pdl_wait() returns once the previous grid has completed and its writes
// are visible (and at once for kernels launched the ordinary way), so a grid's end means the one
// before it ended, and the stream order holds transitively. pdl_trigger() lets the next kernel be
// scheduled; kernels call it right after their wait, so at most two grids of a stream overlap, and
// a kernel that starts has every kernel two or more launches back complete: what those wrote (the
// MLA decode plan of an earlier layer, this step's cache rows) may be read before the wait.
//
// MLASERVE_DISABLE_PDL=1 in the environment launches everything the ordinary way (for A/B runs).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace mlaserve::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Both at the top of a kernel that has nothing to do before its inputs are ready.
__device__ __forceinline__ void pdl_wait_and_trigger() {
  pdl_wait();
  pdl_trigger();
}

// Starts fetching the cache line at p into L2 (weights, before pdl_wait returns).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

inline bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MLASERVE_DISABLE_PDL");
    return !(v && *v && *v != '0');
  }();
  return enabled;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed, in
// thread-block clusters of `cluster` blocks where that is not 1 x 1 x 1 (up to 8 blocks, the portable
// size; grid a multiple of it).
template <typename... Params, typename... Args>
void launch_pdl_clusters(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster.x;
  attr[1].val.clusterDim.y = cluster.y;
  attr[1].val.clusterDim.z = cluster.z;
  cfg.attrs = attr;
  cfg.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_pdl_clusters(kernel, grid, dim3(1, 1, 1), block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace mlaserve::cuda
