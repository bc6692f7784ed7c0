#include "common/relative_l2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"

namespace mlaserve {

namespace {

struct Sums {
  double diff = 0, ref = 0;
};

// BF16 is fp32's upper half: widening is a shift, not the per-element dtype switch of load_as_f32.
float widen(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename Got, typename Widen>
Sums sum_slice(const Got* got, const float* want, int64_t begin, int64_t end, Widen widen_got) {
  Sums s;
  for (int64_t i = begin; i < end; ++i) {
    const double x = widen_got(got[i]), y = want[i];
    s.diff += (x - y) * (x - y);
    s.ref += y * y;
  }
  return s;
}

}  // namespace

double relative_l2(const Tensor& got, const Tensor& want, unsigned threads) {
  MLA_CHECK(got.shape() == want.shape() && got.is_contiguous() && want.is_contiguous() &&
                want.dtype() == DType::F32 && (got.dtype() == DType::F32 || got.dtype() == DType::BF16),
            "relative_l2: got {} and want {} must be contiguous, of one shape, got F32 or BF16, want F32",
            got.describe(), want.describe());
  const int64_t n = want.numel();
  constexpr int64_t kSlice = int64_t(1) << 20;  // slices below this are not worth a thread
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t parts = std::clamp<int64_t>(n / kSlice, 1, threads);
  std::vector<Sums> sums(static_cast<size_t>(parts));
  auto run = [&](int64_t p) {
    const int64_t begin = n * p / parts, end = n * (p + 1) / parts;
    const float* w = want.data<float>();
    sums[size_t(p)] = got.dtype() == DType::BF16
                          ? sum_slice(got.data<uint16_t>(), w, begin, end, widen)
                          : sum_slice(got.data<float>(), w, begin, end, [](float v) { return v; });
  };
  std::vector<std::thread> pool;
  for (int64_t p = 1; p < parts; ++p) pool.emplace_back(run, p);
  run(0);
  for (std::thread& t : pool) t.join();
  Sums total;
  for (const Sums& s : sums) total.diff += s.diff, total.ref += s.ref;
  return std::isfinite(total.diff) ? std::sqrt(total.diff / std::max(total.ref, 1e-30)) : INFINITY;
}

}  // namespace mlaserve
