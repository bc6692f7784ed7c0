#include "kernels/cuda/event_timer.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace mlaserve::cuda {

double median_ms(cudaStream_t stream, const std::function<void(int)>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  auto run = [&](int first, int n) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    for (int j = 0; j < n; ++j) fn(first + j);
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return double(t) / n;
  };
  const int inner = std::clamp(int(0.2 / std::max(run(warmup, 1), 1e-4)), 1, 20);  // ~0.2 ms a sample
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(run(i * inner, inner));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mlaserve::cuda
