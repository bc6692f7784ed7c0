#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_timer.h"

namespace mlaserve::cuda {
namespace {

__global__ void hold_kernel(long long ns) {
  long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(500);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void hold_stream(cudaStream_t stream, double us) {
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(us * 1e3));
  CUDA_CHECK_LAUNCH();
}

double median_ms(cudaStream_t stream, const std::function<void(int)>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  // Each sample's first event and launches are queued while the stream is held, so that the sample
  // starts with the launches already on the GPU: an idle GPU would otherwise pass the first event and
  // wait for the host's work up to the first launch (FlashMLA's launch function held 4 us of a 0.13 ms
  // sample so). The hold outlasts the host's queueing by twice what the last sample took; a call
  // that waits for the GPU itself lengthens the hold (up to 1 ms) and pays only GPU time.
  double hold_us = 50;
  auto run = [&](int first, int n) {
    hold_stream(stream, hold_us);
    const auto queued_from = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaEventRecord(a, stream));
    for (int j = 0; j < n; ++j) fn(first + j);
    CUDA_CHECK(cudaEventRecord(b, stream));
    const double queue_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - queued_from).count();
    hold_us = std::clamp(2 * queue_us, hold_us, 1000.0);
    CUDA_CHECK(cudaEventSynchronize(b));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return double(t) / n;
  };
  run(warmup, 1);  // sizes the hold for one call
  const int inner = std::clamp(int(0.2 / std::max(run(warmup, 1), 1e-4)), 1, 20);  // ~0.2 ms a sample
  run(warmup, inner);  // and for a sample's calls
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(run(i * inner, inner));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mlaserve::cuda
