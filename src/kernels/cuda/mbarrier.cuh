// Shared-memory barriers (mbarrier) that asynchronous copies complete: a loader's cp.async copies
// arrive on a barrier when they land, so the threads that read the data wait on exactly that data
// instead of on a block-wide barrier, and the loader never waits at all.
#pragma once

#include <cstdint>

namespace mlaserve::cuda::mbar {

// One thread initializes a barrier that completes a phase after `count` arrivals; a block barrier
// must follow before any thread uses it.
__device__ __forceinline__ void init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrives on `bar` once every cp.async this thread issued before has landed. The arrival is not
// counted in advance (.noinc): `count` of init includes each thread that arrives this way.
__device__ __forceinline__ void arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on `bar` (one of its `count` arrivals), e.g. a consumer saying it is done with a buffer.
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on the barrier at `bar`'s offset in CTA `rank` of the cluster (CTA-scope release, as
// CUTLASS's ClusterBarrier: a cluster-scope one doubled a GEMM's time, twenty-seventh session).
__device__ __forceinline__ void arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, "
      "[remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// Arrives on `bar` and adds `bytes` to the transaction count its phase waits for: a bulk (TMA)
// copy that completes on the barrier then counts those bytes down as they land.
__device__ __forceinline__ void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` (0 for the first phase, then alternating) has completed.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace mlaserve::cuda::mbar
