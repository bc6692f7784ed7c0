// What the kernel benchmark's files share (bench_kernels.cc, bench_fp8_linear.cc): the device, random
// inputs, the timer, the rows they print, and the --shape filter.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/random.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/event_timer.h"

namespace mlaserve::bench {

inline cuda::CudaBackend* g_gpu;  // set by main

// A random FP8 block-scaled weight [N, K] on the host: e4m3 codes of either sign below 240 in
// magnitude (never NaN), 128 x 128 block scales near 1e-3.
inline LinearWeight random_fp8_host(int64_t N, int64_t K, uint64_t seed) {
  Tensor w = Tensor::empty(DType::F8_E4M3, {N, K});
  uint8_t* codes = w.data<uint8_t>();
  for (int64_t i = 0; i < w.numel(); i += 8) {
    uint64_t h = hash64(seed, uint64_t(i));
    for (int64_t j = 0; j < 8 && i + j < w.numel(); ++j) codes[i + j] = uint8_t(h >> (8 * j)) & 0xf7;
  }
  Tensor s = Tensor::empty(DType::F32, {(N + 127) / 128, (K + 127) / 128});
  for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = 1e-3f * float(1.0 + uniform01(seed + 1, uint64_t(i)));
  return LinearWeight{w, s};
}

// The same on the device.
inline LinearWeight random_fp8_weight(int64_t N, int64_t K, uint64_t seed) {
  return g_gpu->to_backend(random_fp8_host(N, K, seed));
}

inline Tensor random_bf16(Shape shape, uint64_t seed, float std = 1.0f) {
  Tensor h = Tensor::empty(DType::BF16, shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<uint16_t>()[i] = f32_to_bf16(std * normal01(seed, uint64_t(i)));
  return g_gpu->to_device(h);
}

inline double time_ms(const std::function<void(int)>& fn, int reps = 50, int warmup = 5) {
  return cuda::median_ms(g_gpu->stream(), fn, reps, warmup);
}

struct Row {
  std::string kernel, shape;
  double ms, achieved, floor_ms, fraction;
  std::string unit;
};

inline std::string g_shape_filter;  // --shape

// DeepSeek-V3's dense FP8 linears and the producers of their inputs (bench_fp8_linear.cc).
void bench_fp8_linear(cuda::CudaBackend& gpu, double copy_bw, std::vector<Row>& rows);

}  // namespace mlaserve::bench
