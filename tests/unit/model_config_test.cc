#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/error.h"
#include "config/model_config.h"
#include "model/rope.h"
#include "test_paths.h"

namespace mlaserve {
namespace {

nlohmann::json shared_model(const std::string& name) {
  std::ifstream in(testing::source_dir() + "/../shared/models/" + name + ".json");
  return nlohmann::json::parse(in);
}

TEST(ModelConfig, ReadsTheRealCheckpointConfigs) {
  ModelConfig v3 = ModelConfig::from_json(shared_model("deepseek-v3"));
  EXPECT_TRUE(v3.is_v3());
  EXPECT_EQ(v3.kv_cache_dim(), 576);
  EXPECT_EQ(v3.qk_head_dim(), 192);
  EXPECT_EQ(v3.topk_method, TopkMethod::NoauxTc);
  EXPECT_EQ(v3.scoring_func, ScoringFunc::Sigmoid);
  EXPECT_EQ(v3.num_nextn_predict_layers, 1);
  ASSERT_TRUE(v3.quantization);
  EXPECT_EQ(v3.quantization->block_n, 128);
  ASSERT_TRUE(v3.rope_scaling);
  EXPECT_DOUBLE_EQ(v3.rope_scaling->mscale_all_dim, 1.0);
  EXPECT_FALSE(v3.is_moe_layer(2));
  EXPECT_TRUE(v3.is_moe_layer(3));
  // softmax scale = 192^-0.5 * (0.1 ln 40 + 1)^2
  double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(v3.softmax_scale(), m * m / std::sqrt(192.0), 1e-12);

  ModelConfig lite = ModelConfig::from_json(shared_model("deepseek-v2-lite"));
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.topk_method, TopkMethod::Greedy);
  EXPECT_EQ(lite.scoring_func, ScoringFunc::Softmax);
  EXPECT_FALSE(lite.quantization);
  ModelConfig v2 = ModelConfig::from_json(shared_model("deepseek-v2"));
  EXPECT_EQ(v2.topk_method, TopkMethod::GroupLimitedGreedy);
  EXPECT_EQ(v2.n_group, 8);
  EXPECT_DOUBLE_EQ(v2.routed_scaling_factor, 16.0);
}

TEST(ModelConfig, PresetsEqualTheCheckpointConfigs) {
  for (std::string name : {"deepseek-v3", "deepseek-r1", "deepseek-v2", "deepseek-v2-lite"}) {
    auto preset = ModelConfig::preset(name);
    ASSERT_TRUE(preset) << name;
    EXPECT_EQ(preset->to_json(), ModelConfig::from_json(shared_model(name)).to_json()) << name;
  }
  for (const std::string& name : ModelConfig::preset_names()) EXPECT_NO_THROW(ModelConfig::preset(name)) << name;
  EXPECT_FALSE(ModelConfig::preset("llama-3"));
}

TEST(ModelConfig, AcceptsNewerTransformersKeys) {
  auto j = shared_model("deepseek-v3");
  auto rope = j["rope_scaling"];
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  rope.erase("type");
  rope["rope_type"] = "yarn";
  rope["rope_theta"] = 50000.0;
  j["rope_parameters"] = rope;
  j["dtype"] = "float32";
  j["eos_token_id"] = {1, 2};
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  ASSERT_TRUE(c.rope_scaling);
  EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 40.0);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2}));
  // And the round trip through our own JSON.
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json());
}

void expect_refused(nlohmann::json j, const std::string& words) {
  try {
    ModelConfig::from_json(j);
    ADD_FAILURE() << "accepted a config that should be refused for: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, RefusesUnknownArchitecturesAndInconsistentConfigs) {
  auto base = shared_model("deepseek-v3");
  auto j = base;
  j["architectures"] = {"LlamaForCausalLM"};
  expect_refused(j, "unsupported architecture 'LlamaForCausalLM'");
  j = base;
  j["n_group"] = 7;
  expect_refused(j, "n_group");
  j = base;
  j["topk_group"] = 9;
  expect_refused(j, "topk_group");
  j = base;
  j["num_experts_per_tok"] = 300;
  expect_refused(j, "num_experts_per_tok");
  j = base;
  j["qk_rope_head_dim"] = 63;
  expect_refused(j, "even");
  j = base;
  j["num_key_value_heads"] = 1;
  expect_refused(j, "num_key_value_heads");
  j = base;
  j["topk_method"] = "random";
  expect_refused(j, "topk_method");
  j = base;
  j["hidden_size"] = "big";
  expect_refused(j, "hidden_size");
  j = base;
  j["quantization_config"]["quant_method"] = "awq";
  expect_refused(j, "awq");
  j = base;
  j["rope_scaling"]["type"] = "dynamic";
  expect_refused(j, "dynamic");
  j = base;
  j["eos_token_id"] = 999999;
  expect_refused(j, "eos_token_id");
  j = base;
  j["first_k_dense_replace"] = 99;
  expect_refused(j, "first_k_dense_replace");
}

TEST(Rope, YarnTableOfDeepSeekV3) {
  RopeTable t = make_rope_table(*ModelConfig::preset("deepseek-v3"));
  ASSERT_EQ(t.inv_freq.numel(), 32);
  const float* f = t.inv_freq.data<float>();
  // Correction range [10, 23] for dim 64, base 1e4, 4096 original positions, betas 32 / 1:
  // below it the original frequency, above it divided by the factor 40, a linear ramp between.
  auto plain = [](int i) { return 1.0f / std::pow(10000.0f, float(2 * i) / 64.0f); };
  for (int i = 0; i <= 10; ++i) EXPECT_FLOAT_EQ(f[i], plain(i)) << i;
  for (int i = 23; i < 32; ++i) EXPECT_NEAR(f[i], plain(i) / 40.0f, 1e-6f * plain(i)) << i;
  float ramp = (16.0f - 10.0f) / 13.0f;
  EXPECT_NEAR(f[16], plain(16) / 40.0f * ramp + plain(16) * (1 - ramp), 1e-6f * plain(16));
  EXPECT_FLOAT_EQ(t.mscale, 1.0f);  // mscale == mscale_all_dim
}

}  // namespace
}  // namespace mlaserve
