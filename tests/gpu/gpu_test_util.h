// Helpers of the GPU tests: fresh random inputs (seeded from the clock, printed on failure),
// BF16 rounding so both backends see the same values, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "common/random.h"
#include "kernels/cuda/cuda_backend.h"

namespace mlaserve::gputest {

inline uint64_t fresh_seed() {
  static uint64_t base = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return base++;
}

// An fp32 host tensor of N(mean, std) values already rounded to bf16.
inline Tensor random_f32(Shape shape, uint64_t seed, float std = 1.0f, float mean = 0.0f) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = bf16_to_f32(f32_to_bf16(mean + std * normal01(seed, uint64_t(i))));
  return t;
}

inline Tensor to_dtype(const Tensor& f32, DType dt) {
  Tensor out = Tensor::empty(dt, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) store_from_f32(out.raw(), dt, size_t(i), f32.data<float>()[i]);
  return out;
}

// A device tensor of `shape` filled with NaN bit patterns, so unwritten outputs show.
inline Tensor poisoned(cuda::CudaBackend& gpu, DType dt, Shape shape) {
  Tensor t = gpu.empty(dt, std::move(shape));
  CUDA_CHECK(cudaMemset(t.raw(), 0xff, t.nbytes()));
  return t;
}

// ||got - want|| / ||want|| over all elements; NaN anywhere makes it infinite.
inline double rel_l2(const Tensor& got_any, const Tensor& want) {
  Tensor got = got_any.to_f32();
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::isnan(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// BF16 outputs of fp32 math: the rounding of the output alone is up to 2^-9 relative.
constexpr double kBf16Tolerance = 8e-3;

// The common fixture of the GPU tests: both backends, and a fresh seed for the inputs that is
// printed when a test fails (so a failure can be replayed); `worst` is the test's largest error.
class GpuTest : public ::testing::Test {
 protected:
  cuda::CudaBackend gpu;
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  uint64_t seed = fresh_seed();
  double worst = 0;
  void TearDown() override {
    if (HasFailure()) std::printf("inputs seed: %llu\n", (unsigned long long)seed);
    if (worst > 0) std::printf("worst relative error: %.3g\n", worst);
  }
  Tensor dev_bf16(const Tensor& f32) { return gpu.to_device(to_dtype(f32, DType::BF16)); }
};

}  // namespace mlaserve::gputest
