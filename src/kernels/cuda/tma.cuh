// The Tensor Memory Accelerator (Hopper): one thread asks for a whole box of a 2D tensor, and the
// copy engine brings it into shared memory in the 128-byte swizzle layout wgmma and ldmatrix read,
// or for a contiguous run of bytes as it is, completing on an mbarrier (mbarrier.cuh:
// arrive_expect_tx). The tensor map that describes a global tensor is made on the host
// (tensor_map.h) and passed as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mlaserve::cuda::tma {

// Copies the box at element coordinates (x: innermost, y) of `map` to shared memory at `dst`
// (1024-byte aligned for the 128-byte swizzle), and counts its bytes down on `bar`. Rows of the box
// outside the tensor land as zeros.
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// The box at element coordinates (x, y, z) of a 3D map, as load_2d.
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

// load_2d under an L2 policy (evict_first_policy, read_once.cuh).
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar,
                                        uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "l"(policy)
      : "memory");
}

// Copies `bytes` (a multiple of 16) of contiguous global memory at `src` to shared memory at `dst`
// (both 16-byte aligned) and counts them down on `bar`. Nothing checks bounds: the caller does.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Brings the tensor map into the constant cache ahead of the first copy that reads it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace mlaserve::cuda::tma
