// The special-function unit's 2^x rate in each of its PTX forms: ex2.approx.ftz.f32 and the packed
// ex2.approx.f16x2 and ex2.approx.ftz.bf16x2 (each a pair of MUFU ops in sm_90a's SASS), as
// elements a clock per SM at the device's maximum clock. On an H100 every form gave 16 elements a
// clock per SM (thirty-eighth session, docs/benchmarks.md): packing the softmax's exponentials
// buys nothing on Hopper.
// Built with the GPU targets (sfu_rate_probe); run it on the GPU machine with no arguments.
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_timer.h"

namespace {

enum Form { kF32, kF16x2, kBf16x2 };

// Eight independent chains a thread, so that the unit's throughput, not its latency, bounds the loop.
template <Form kForm>
__global__ void ex2_chains(unsigned* sink, int iters) {
  unsigned v[8];
  for (int i = 0; i < 8; ++i) v[i] = 0x3c003c00u ^ (threadIdx.x + i);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (kForm == kF32) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+r"(v[i]));
      if constexpr (kForm == kF16x2) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(v[i]));
      if constexpr (kForm == kBf16x2) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(v[i]));
    }
  }
  unsigned s = 0;
  for (int i = 0; i < 8; ++i) s ^= v[i];
  if (s == 0x12345678u) *sink = s;  // keeps the chains alive
}

template <Form kForm>
void measure(const char* name, int sms, int clock_khz, unsigned* sink) {
  constexpr int kIters = 2000, kThreads = 512;
  const int blocks = sms * 4;
  const double ms = mlaserve::cuda::median_ms(0, [&](int) {
    ex2_chains<kForm><<<blocks, kThreads>>>(sink, kIters);
    CUDA_CHECK_LAUNCH();
  }, 20, 2);
  const double instrs = double(blocks) * kThreads * kIters * 8, elems = instrs * (kForm == kF32 ? 1 : 2);
  const double clocks = ms * 1e-3 * clock_khz * 1e3 * sms;
  std::printf("%-7s %8.3f ms  %6.2f elements / clock / SM  %6.2f PTX instructions / clock / SM\n", name, ms,
              elems / clocks, instrs / clocks);
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  unsigned* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  std::printf("%d SMs, maximum clock %d MHz\n", sms, clock_khz / 1000);
  measure<kF32>("f32", sms, clock_khz, sink);
  measure<kF16x2>("f16x2", sms, clock_khz, sink);
  measure<kBf16x2>("bf16x2", sms, clock_khz, sink);
  CUDA_CHECK(cudaFree(sink));
}
