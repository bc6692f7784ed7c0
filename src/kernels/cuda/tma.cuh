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

// load_2d into the same shared-memory offset of every CTA of the cluster in `cta_mask` (bit r: rank
// r), counting the bytes down on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void load_2d_multicast(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar,
                                                  uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "h"(cta_mask)
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

// Copies shared memory at `src` (laid out as load_2d would have written the box) to the box at
// (x, y) of `map`; parts of the box outside the tensor are not written. Asynchronous: the copy joins
// this thread's open bulk group (store_commit), and `src` may be reused only once store_wait_read
// says the group has read it.
__device__ __forceinline__ void store_2d(const CUtensorMap* map, uint32_t src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(x), "r"(y)
               : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed store groups still read shared memory.
template <int N>
__device__ __forceinline__ void store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's committed store groups are unfinished (written to global memory).
template <int N>
__device__ __forceinline__ void store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Brings the tensor map into the constant cache ahead of the first copy that reads it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace mlaserve::cuda::tma
