// Penalties as OpenAI and SGLang define them, and logprobs.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sampler.h"

namespace mlaserve {
namespace {

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  GenerationParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<int32_t> tokens = {1, 2, 3, 3, 3, 4};  // prompt {1, 2}, output {3, 3, 3, 4}
  SampleInput in{&p, &tokens, 2, 0, 4};
  float logits[6] = {1.0f, 2.0f, -2.0f, 4.0f, 0.5f, 3.0f};
  apply_penalties(logits, 6, in);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                       // unseen
  EXPECT_FLOAT_EQ(logits[1], 1.0f);                       // prompt: repetition only, positive halved
  EXPECT_FLOAT_EQ(logits[2], -4.0f);                      // prompt: negative doubled
  EXPECT_FLOAT_EQ(logits[3], 2.0f - 3 * 0.5f - 0.25f);    // output x3
  EXPECT_FLOAT_EQ(logits[4], 0.25f - 0.5f - 0.25f);       // output x1
  EXPECT_FLOAT_EQ(logits[5], 3.0f);
}

TEST(Sampler, GreedyTokenAndLogprobs) {
  Sampler sampler;
  GenerationParams p;
  p.temperature = 0;
  p.logprobs = 2;
  std::vector<int32_t> tokens = {0};
  Tensor logits = Tensor::from_f32({0.0f, 2.0f, 1.0f, -1.0f}, {1, 4});
  auto out = sampler.sample(logits, {{&p, &tokens, 1, 0, 0}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 1);
  double z = std::log(1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0));
  EXPECT_NEAR(out[0].logprob.logprob, 2.0 - z, 1e-5);
  ASSERT_EQ(out[0].logprob.top.size(), 2u);
  EXPECT_EQ(out[0].logprob.top[1].first, 2);
  EXPECT_NEAR(out[0].logprob.top[1].second, 1.0 - z, 1e-5);
}

TEST(Sampler, DrawingOnTheBackendMatchesTheHostPath) {
  Sampler sampler;
  auto cpu = make_cpu_backend();
  int64_t B = 6, V = 300;
  Tensor logits = Tensor::empty(DType::F32, {B, V});
  for (int64_t i = 0; i < B * V; ++i) logits.data<float>()[i] = float((i * 7919) % 1000) / 250.0f;
  std::vector<GenerationParams> params(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    params[size_t(b)].temperature = b == 0 ? 0.0f : 0.7f;
    params[size_t(b)].top_k = b == 2 ? 5 : -1;
    params[size_t(b)].top_p = b == 3 ? 0.8f : 1.0f;
  }
  std::vector<int32_t> tokens = {1, 2};
  std::vector<SampleInput> inputs;
  for (int64_t b = 0; b < B; ++b) inputs.push_back({&params[size_t(b)], &tokens, 1, 42, uint64_t(b)});
  Tensor copy = Tensor::from_f32(std::vector<float>(logits.data<float>(), logits.data<float>() + B * V), {B, V});
  auto on_backend = sampler.sample(*cpu, logits, inputs);
  auto on_host = sampler.sample(copy, inputs);
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(on_backend[size_t(b)].token, on_host[size_t(b)].token) << b;
  // A row with logprobs sends the batch through the host path: logprobs are filled.
  params[1].logprobs = 0;
  auto with_logprobs = sampler.sample(*cpu, logits, inputs);
  EXPECT_EQ(with_logprobs[1].token, on_host[1].token);
  EXPECT_LT(with_logprobs[1].logprob.logprob, 0.0f);
}

}  // namespace
}  // namespace mlaserve
