#include "common/relative_l2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/dtype.h"
#include "common/error.h"

namespace mlaserve {
namespace {

Tensor f32_ramp(int64_t n, float scale) {
  Tensor t = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = scale * float((i % 97) - 48);
  return t;
}

// The sums in slices over threads give what one loop in double gives, for F32 and BF16 results.
TEST(RelativeL2, MatchesOneLoopOverEveryThreadCount) {
  const int64_t n = (int64_t(3) << 20) + 5;  // several slices, the last one uneven
  const Tensor want = f32_ramp(n, 0.25f);
  Tensor got = f32_ramp(n, 0.25f), got_bf16 = Tensor::empty(DType::BF16, {n});
  for (int64_t i = 0; i < n; i += 7) got.data<float>()[i] += 0.01f;
  for (int64_t i = 0; i < n; ++i) got_bf16.data<uint16_t>()[i] = f32_to_bf16(got.data<float>()[i]);
  auto one_loop = [&](const Tensor& g) {
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = load_as_f32(g.raw(), g.dtype(), size_t(i)), y = want.data<float>()[i];
      diff += (x - y) * (x - y), ref += y * y;
    }
    return std::sqrt(diff / ref);
  };
  for (unsigned threads : {1u, 2u, 3u, 16u}) {
    EXPECT_NEAR(relative_l2(got, want, threads), one_loop(got), 1e-12) << threads;
    EXPECT_NEAR(relative_l2(got_bf16, want, threads), one_loop(got_bf16), 1e-12) << threads;
  }
  EXPECT_EQ(relative_l2(want, want), 0.0);
  EXPECT_GT(relative_l2(got, want), 0.0);
}

TEST(RelativeL2, NonFiniteResultsAreInfinitelyFar) {
  const Tensor want = f32_ramp(1000, 1.0f);
  Tensor got = f32_ramp(1000, 1.0f);
  got.data<float>()[500] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(relative_l2(got, want)));
  got.data<float>()[500] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(relative_l2(got, want)));
}

TEST(RelativeL2, MismatchedTensorsAreClearErrors) {
  const Tensor want = f32_ramp(16, 1.0f);
  try {
    relative_l2(f32_ramp(8, 1.0f), want);
    FAIL() << "shapes differ";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("F32[8]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(relative_l2(want, Tensor::empty(DType::BF16, {16})), Error) << "want must be F32";
}

}  // namespace
}  // namespace mlaserve
