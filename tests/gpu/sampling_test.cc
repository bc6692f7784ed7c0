// CUDA sample against the CPU reference: the same token for the same logits and parameters, for
// greedy and for temperature with top-k, top-p and min-p, over the V3 vocabulary (129280), on
// well-separated random logits and on logits with many exact ties; then every launch shape (a row
// is a cluster of 16 or 8 blocks), vocabularies from a few tokens to 2^18, and rows that crowd one
// coarse bin past the blocks' candidate lists.
#include "gpu_test_util.h"

#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

using namespace gputest;

class Sampling : public GpuTest {
 protected:

  // Draws `steps` times with every row's params (step advanced) on both backends; counts agreement.
  void compare(const Tensor& logits, std::vector<SamplingParams> params, int steps, const char* what) {
    int64_t B = logits.size(0);
    Tensor dev = gpu.to_device(logits.contiguous());
    int64_t mismatches = 0, distinct_ok = 0;
    for (int s = 0; s < steps; ++s) {
      for (auto& p : params) p.step = uint64_t(s) * 7 + 3;
      Tensor want = Tensor::empty(DType::I32, {B});
      cpu->sample(logits, params, want);
      Tensor out = poisoned(gpu, DType::I32, {B});
      gpu.sample(dev, params, out);
      Tensor got = gpu.to_host(out);
      for (int64_t b = 0; b < B; ++b) {
        bool same = got.data<int32_t>()[b] == want.data<int32_t>()[b];
        mismatches += !same;
        if (!same && mismatches <= 5)
          ADD_FAILURE() << what << ": row " << b << " step " << s << " gpu " << got.data<int32_t>()[b] << " cpu "
                        << want.data<int32_t>()[b] << " (T=" << params[b].temperature << " k=" << params[b].top_k
                        << " p=" << params[b].top_p << " min_p=" << params[b].min_p << ")";
        distinct_ok += same;
      }
    }
    EXPECT_EQ(mismatches, 0) << what;
    std::printf("%s: %lld of %lld draws identical\n", what, (long long)distinct_ok, (long long)(B * steps));
  }

  static std::vector<SamplingParams> mixed_params(uint64_t seed) {
    std::vector<SamplingParams> p = {
        {0.0f, -1, 1.0f, 0.0f, seed, 0},      // greedy
        {1.0f, 1, 1.0f, 0.0f, seed, 0},       // top-1 is greedy too
        {1.0f, -1, 1.0f, 0.0f, seed + 1, 0},  // plain temperature over the whole vocabulary
        {0.7f, 50, 1.0f, 0.0f, seed + 2, 0},  // top-k
        {1.0f, -1, 0.9f, 0.0f, seed + 3, 0},  // top-p
        {1.3f, -1, 1.0f, 0.05f, seed + 4, 0}, // min-p
        {0.8f, 40, 0.8f, 0.02f, seed + 5, 0}, // all three
        {0.5f, 1000, 0.95f, 0.0f, seed + 6, 0},
        {1.0f, 129279, 0.5f, 0.0f, seed + 7, 0},
        {2.0f, -1, 0.99f, 0.001f, seed + 8, 0},
        {1.0f, 3, 1.0f, 0.0f, seed + 9, 0},
        {1.0f, -1, 0.0f, 0.0f, seed + 10, 0},  // top_p 0 keeps the best token only
    };
    return p;
  }

  // More parameters for the cluster's merges: top-k past a block's slice, top-p near 1, min-p
  // with top-k, min-p above the best token (greedy again).
  static std::vector<SamplingParams> wide_params(uint64_t seed) {
    auto p = mixed_params(seed);
    p.push_back({1.0f, 20000, 0.95f, 0.0f, seed + 11, 0});
    p.push_back({1.0f, -1, 0.999f, 0.0f, seed + 12, 0});
    p.push_back({0.9f, 5000, 1.0f, 0.2f, seed + 13, 0});
    p.push_back({1.0f, -1, 0.9999999f, 1e-6f, seed + 14, 0});
    p.push_back({1.0f, 100, 1.0f, 1.5f, seed + 15, 0});
    return p;
  }

  // `rows` rows of params, cycling through `base`.
  static std::vector<SamplingParams> cycled(const std::vector<SamplingParams>& base, int64_t rows) {
    std::vector<SamplingParams> p;
    for (int64_t b = 0; b < rows; ++b) {
      p.push_back(base[size_t(b) % base.size()]);
      p.back().seed += uint64_t(b);
    }
    return p;
  }
};

TEST_F(Sampling, SameTokensAsTheReference) {
  const int64_t V = 129280;
  auto params = mixed_params(seed);
  int64_t B = int64_t(params.size());
  // Peaked (std 3) and flat (std 1) random logits in fp32: distinct values, ties improbable.
  for (float stdev : {3.0f, 1.0f}) {
    Tensor logits = Tensor::empty(DType::F32, {B, V});
    for (int64_t i = 0; i < B * V; ++i) logits.data<float>()[i] = stdev * normal01(seed + uint64_t(stdev), uint64_t(i));
    compare(logits, params, 24, stdev > 2 ? "peaked logits" : "flat logits");
  }
}

TEST_F(Sampling, TiesAndStridedRows) {
  // Integer logits: thousands of exact ties, inside the top-k boundary and the drawn position;
  // the rows are strided (the first V of wider rows).
  const int64_t V = 50000, width = V + 40;
  auto params = mixed_params(seed);
  int64_t B = int64_t(params.size());
  Tensor wide = Tensor::empty(DType::F32, {B, width});
  for (int64_t i = 0; i < B * width; ++i)
    wide.data<float>()[i] = std::floor(2.0f * normal01(seed + 17, uint64_t(i)));
  // Row 0 has two maxima: the lower index wins.
  wide.data<float>()[5] = wide.data<float>()[77] = 100.0f;
  for (auto& p : params) p.top_k = p.top_k == 129279 ? int32_t(V - 1) : p.top_k;
  Tensor host = wide.narrow(1, 0, V);
  Tensor dev_wide = gpu.to_device(wide);
  Tensor dev = dev_wide.narrow(1, 0, V);
  Tensor want = Tensor::empty(DType::I32, {B});
  int64_t mismatches = 0;
  for (int s = 0; s < 24; ++s) {
    for (auto& p : params) p.step = uint64_t(s);
    cpu->sample(host, params, want);
    Tensor out = poisoned(gpu, DType::I32, {B});
    gpu.sample(dev, params, out);
    Tensor got = gpu.to_host(out);
    for (int64_t b = 0; b < B; ++b) {
      if (got.data<int32_t>()[b] != want.data<int32_t>()[b] && ++mismatches <= 5)
        ADD_FAILURE() << "row " << b << " step " << s << " gpu " << got.data<int32_t>()[b] << " cpu "
                      << want.data<int32_t>()[b];
    }
    EXPECT_EQ(got.data<int32_t>()[0], 5);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(Sampling, LaunchShapesAndVocabularies) {
  // 1 row (16 blocks of 512 threads), 12 rows, 40 rows (8 blocks of 256); vocabularies with
  // blocks of empty slices (5, 100), odd sizes, and 2^18 (slices of 16384).
  for (int64_t V : {5, 100, 4099, 129280, 262144}) {
    for (int64_t B : {1, 12, 40}) {
      if (V == 262144 && B == 40) continue;  // the CPU reference's time
      auto params = cycled(wide_params(seed + uint64_t(B)), B);
      Tensor logits = Tensor::empty(DType::F32, {B, V});
      for (int64_t i = 0; i < B * V; ++i) logits.data<float>()[i] = 2.5f * normal01(seed + uint64_t(V), uint64_t(i));
      compare(logits, params, V > 100000 ? 4 : 8, fmt::format("V={} B={}", V, B).c_str());
    }
  }
}

TEST_F(Sampling, CrowdedBinsAndMaskedTokens) {
  const int64_t V = 129280;
  auto params = wide_params(seed);
  int64_t B = int64_t(params.size());
  Tensor logits = Tensor::empty(DType::F32, {B, V});
  float* l = logits.data<float>();
  // A bulk 1e-3 wide between two outliers 20 apart: the coarse bins are 1e-2 wide, so one holds
  // nearly every token (distinct values), far past the blocks' lists.
  for (int64_t i = 0; i < B * V; ++i) l[i] = 5.0f + 1e-3f * normal01(seed + 1, uint64_t(i));
  for (int64_t b = 0; b < B; ++b) {
    l[b * V + 7 * b] = 15.0f;
    l[b * V + V - 1 - b] = -5.0f;
  }
  compare(logits, params, 8, "crowded coarse bin");
  // A third of the tokens masked (-inf), the rest spread: the far tail shares coarse bin 0.
  for (int64_t i = 0; i < B * V; ++i)
    l[i] = hash64(seed + 2, uint64_t(i)) % 3 == 0 ? -INFINITY : 3.0f * normal01(seed + 3, uint64_t(i));
  compare(logits, params, 8, "masked tokens");
  // Every token tied: one key, the m-th of 129280 ties in index order.
  for (int64_t i = 0; i < B * V; ++i) l[i] = 0.25f;
  compare(logits, params, 8, "all tied");
}

}  // namespace
}  // namespace mlaserve
