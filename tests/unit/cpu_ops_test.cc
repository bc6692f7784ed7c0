// Hand-made cases for the CPU reference ops whose results can be worked out on paper.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

TEST(Fp8Block, DequantizationIsExactOnAHandMadeCase) {
  // A 3 x 4 e4m3 matrix in 2 x 2 blocks: scales [[1, 0.5], [4, 2]].
  // Codes: 0x38 = 1.0, 0x40 = 2.0, 0xb8 = -1.0, 0x30 = 0.5, 0x01 = 2^-9 (smallest subnormal),
  //        0x7e = 448 (largest), 0x00 = 0.
  std::vector<uint8_t> codes = {0x38, 0x40, 0xb8, 0x30,  //
                                0x01, 0x7e, 0x00, 0x38,  //
                                0x40, 0xb8, 0x30, 0x7e};
  LinearWeight w;
  w.weight = Tensor::empty(DType::F8_E4M3, {3, 4});
  std::copy(codes.begin(), codes.end(), w.weight.data<uint8_t>());
  w.scale_inv = Tensor::from_f32({1.0f, 0.5f, 4.0f, 2.0f}, {2, 2});
  w.block_n = 2;
  w.block_k = 2;
  std::vector<float> want = {1.0f, 2.0f, -0.5f, 0.25f,           //
                             0.001953125f, 448.0f, 0.0f, 0.5f,  //
                             8.0f, -4.0f, 1.0f, 896.0f};
  Tensor got = dequantize(w);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got.data<float>()[i], want[i]) << i;

  // The linear op on the FP8 weight equals it on the dequantized matrix.
  auto cpu = make_cpu_backend();
  Tensor x = Tensor::from_f32({1, 2, 3, 4, -1, 0.5f, 0.25f, 2}, {2, 4});
  Tensor y8 = Tensor::empty(DType::F32, {2, 3}), y32 = Tensor::empty(DType::F32, {2, 3});
  cpu->linear(x, w, y8);
  cpu->linear(x, LinearWeight{got, {}}, y32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y8.data<float>()[i], y32.data<float>()[i]);
  EXPECT_EQ(y32.data<float>()[0], 1 * 1.0f + 2 * 2.0f + 3 * -0.5f + 4 * 0.25f);
}

MoeRouting routing(TopkMethod m, ScoringFunc s, int experts, int k, int groups, int topk_groups) {
  return {m, s, experts, k, groups, topk_groups, false, 1.0f};
}

std::vector<int32_t> route(const MoeRouting& r, std::vector<float> logits, std::vector<float> bias,
                           std::vector<float>* weights = nullptr) {
  auto cpu = make_cpu_backend();
  Tensor l = Tensor::from_f32(logits, {1, r.num_experts});
  Tensor b = bias.empty() ? Tensor() : Tensor::from_f32(bias, {r.num_experts});
  Tensor ids = Tensor::empty(DType::I32, {1, r.top_k}), w = Tensor::empty(DType::F32, {1, r.top_k});
  cpu->moe_route(l, b, r, ids, w);
  if (weights) weights->assign(w.data<float>(), w.data<float>() + r.top_k);
  return {ids.data<int32_t>(), ids.data<int32_t>() + r.top_k};
}

TEST(MoeRoute, GreedySoftmaxPicksTheLargestWithSoftmaxWeights) {
  std::vector<float> w;
  auto ids = route(routing(TopkMethod::Greedy, ScoringFunc::Softmax, 4, 2, 1, 1), {0, 2, 1, std::log(3.0f)}, {}, &w);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  float z = 1 + std::exp(2.0f) + std::exp(1.0f) + 3;
  EXPECT_NEAR(w[0], std::exp(2.0f) / z, 1e-6);
  EXPECT_NEAR(w[1], 3 / z, 1e-6);
}

TEST(MoeRoute, GroupLimitedGreedyStaysInsideTheBestGroups) {
  // Groups {0,1} {2,3} {4,5}: best members 0.9 (g0), 0.8 (g1), 0.85 (g2). With one group allowed
  // the top-2 must both come from group 0 even though expert 4 beats expert 1.
  std::vector<float> logits = {3.0f, 0.0f, 2.6f, 0.1f, 2.8f, 0.2f};
  auto ids = route(routing(TopkMethod::GroupLimitedGreedy, ScoringFunc::Softmax, 6, 2, 3, 1), logits, {});
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  ids = route(routing(TopkMethod::GroupLimitedGreedy, ScoringFunc::Softmax, 6, 2, 3, 2), logits, {});
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 4}));
}

TEST(MoeRoute, NoauxTcChoosesByBiasedScoresAndWeighsByUnbiasedOnes) {
  // 8 experts in 4 groups of 2, 2 groups kept, top-2, normalized, scaled by 2.5.
  MoeRouting r = routing(TopkMethod::NoauxTc, ScoringFunc::Sigmoid, 8, 2, 4, 2);
  r.renormalize = true;
  r.routed_scaling_factor = 2.5f;
  std::vector<float> logits = {2, 2, -1, -1, 0, 0, 1, -3};
  std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(route(r, logits, bias), (std::vector<int32_t>{0, 1}));
  // A bias large enough moves expert 2's group into the lead and expert 2 into the top-2;
  // its weight still comes from its unbiased sigmoid score.
  bias[2] = 2.0f;  // choices: e2 2.27, e0 = e1 0.88, e3 0.27; groups {2,3} 2.54 and {0,1} 1.76 kept
  std::vector<float> w;
  auto ids = route(r, logits, bias, &w);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 0}));
  auto sig = [](float x) { return 1 / (1 + std::exp(-x)); };
  float s2 = sig(-1), s0 = sig(2);
  EXPECT_NEAR(w[0], 2.5f * s2 / (s2 + s0), 1e-6);
  EXPECT_NEAR(w[1], 2.5f * s0 / (s2 + s0), 1e-6);
}

TEST(Sampling, GreedyTopKTopPMinPAndSeeds) {
  auto cpu = make_cpu_backend();
  // Probabilities at temperature 1: 0.5, 0.25, 0.125, 0.125.
  Tensor logits = Tensor::from_f32({std::log(4.0f), std::log(2.0f), 0.0f, 0.0f}, {1, 4});
  Tensor out = Tensor::empty(DType::I32, {1});
  auto draw = [&](SamplingParams p) {
    cpu->sample(logits, {p}, out);
    return out.data<int32_t>()[0];
  };
  EXPECT_EQ(draw({.temperature = 0}), 0);
  EXPECT_EQ(draw({.temperature = 1, .top_k = 1, .seed = 5}), 0);
  EXPECT_EQ(draw({.temperature = 1, .top_p = 0.4f, .seed = 5}), 0);
  EXPECT_EQ(draw({.temperature = 1, .min_p = 0.9f, .seed = 5}), 0);
  std::map<int, int> counts, counts_topk, counts_minp;
  const int n = 8000;
  for (int i = 0; i < n; ++i) {
    counts[draw({.temperature = 1, .seed = 7, .step = uint64_t(i)})]++;
    counts_topk[draw({.temperature = 1, .top_k = 2, .seed = 7, .step = uint64_t(i)})]++;
    counts_minp[draw({.temperature = 1, .min_p = 0.4f, .seed = 7, .step = uint64_t(i)})]++;
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.03);
  EXPECT_NEAR(counts[2] / double(n), 0.125, 0.02);
  EXPECT_NEAR(counts_topk[0] / double(n), 2.0 / 3, 0.03);  // renormalized over the top 2
  EXPECT_EQ(counts_topk[2] + counts_topk[3], 0);
  EXPECT_EQ(counts_minp[2] + counts_minp[3], 0);  // 0.125 < 0.4 * 0.5
  // Same seed and step: same token.
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(draw({.temperature = 1, .seed = 11, .step = uint64_t(i)}),
              draw({.temperature = 1, .seed = 11, .step = uint64_t(i)}));
}

TEST(Rope, RotatesInterleavedPairs) {
  auto cpu = make_cpu_backend();
  RopeTable t{Tensor::from_f32({1.0f, 0.5f}, {2}), 2.0f};
  Tensor x = Tensor::from_f32({1, 0, 0, 1}, {1, 1, 4});
  cpu->rope(x, Tensor::from_i32({3}), t);
  const float* p = x.data<float>();
  EXPECT_NEAR(p[0], 2 * std::cos(3.0f), 1e-6);
  EXPECT_NEAR(p[1], 2 * std::sin(3.0f), 1e-6);
  EXPECT_NEAR(p[2], -2 * std::sin(1.5f), 1e-6);
  EXPECT_NEAR(p[3], 2 * std::cos(1.5f), 1e-6);
}

}  // namespace
}  // namespace mlaserve
