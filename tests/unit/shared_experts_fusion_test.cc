// Shared experts fusion: moe_route's extra slots (every routing method), and whole tiny models
// whose logits must not change when the shared MLP runs as extra experts (few tokens) or as dense
// chunks (past shared_fusion_max_tokens), in fp32 and with FP8 block weights.
#include <gtest/gtest.h>

#include "../common/tiny_model_runs.h"
#include "common/error.h"
#include "common/random.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

struct RouteCase {
  const char* name;
  MoeRouting r;
  bool bias;
};

TEST(SharedExpertsFusion, RouteAppendsTheSharedExpertsWithWeightOne) {
  std::vector<RouteCase> cases = {
      {"greedy softmax", {TopkMethod::Greedy, ScoringFunc::Softmax, 16, 4, 1, 1, false, 1.0f}, false},
      {"group-limited greedy", {TopkMethod::GroupLimitedGreedy, ScoringFunc::Softmax, 24, 3, 4, 2, false, 16.0f},
       false},
      {"noaux_tc", {TopkMethod::NoauxTc, ScoringFunc::Sigmoid, 32, 8, 8, 4, true, 2.5f}, true},
  };
  auto cpu = make_cpu_backend();
  for (const RouteCase& c : cases)
    for (int32_t ns : {1, 2, 3}) {
      int64_t T = 9, E = c.r.num_experts, k = c.r.top_k, S = k + ns;
      Tensor logits = Tensor::empty(DType::F32, {T, E}), bias;
      for (int64_t i = 0; i < T * E; ++i) logits.data<float>()[i] = 2.0f * float(uniform01(11, uint64_t(i))) - 1.0f;
      if (c.bias) {
        bias = Tensor::empty(DType::F32, {E});
        for (int64_t e = 0; e < E; ++e) bias.data<float>()[e] = 0.1f * float(uniform01(12, uint64_t(e)));
      }
      Tensor ids = Tensor::empty(DType::I32, {T, k}), w = Tensor::empty(DType::F32, {T, k});
      cpu->moe_route(logits, bias, c.r, ids, w);
      MoeRouting fused = c.r;
      fused.num_fused_shared = ns;
      ASSERT_EQ(fused.slots(), S);
      Tensor fids = Tensor::empty(DType::I32, {T, S}), fw = Tensor::empty(DType::F32, {T, S});
      cpu->moe_route(logits, bias, fused, fids, fw);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(fids.data<int32_t>()[t * S + j], ids.data<int32_t>()[t * k + j]) << c.name << " t=" << t;
          EXPECT_EQ(fw.data<float>()[t * S + j], w.data<float>()[t * k + j]) << c.name << " t=" << t;
        }
        for (int64_t j = k; j < S; ++j) {
          EXPECT_EQ(fids.data<int32_t>()[t * S + j], E + j - k) << c.name << " t=" << t;
          EXPECT_EQ(fw.data<float>()[t * S + j], 1.0f) << c.name << " t=" << t << ": not scaled";
        }
      }
    }
}

TEST(SharedExpertsFusion, RouteRefusesOutputsWithoutTheFusedSlots) {
  auto cpu = make_cpu_backend();
  MoeRouting r{TopkMethod::Greedy, ScoringFunc::Softmax, 8, 2, 1, 1, false, 1.0f};
  r.num_fused_shared = 1;
  Tensor logits = Tensor::zeros(DType::F32, {3, 8});
  Tensor ids = Tensor::empty(DType::I32, {3, 2}), w = Tensor::empty(DType::F32, {3, 2});
  try {
    cpu->moe_route(logits, Tensor(), r, ids, w);
    ADD_FAILURE() << "ids of top-k slots only were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 fused shared"), std::string::npos) << e.what();
  }
}

using testing::prefill_and_decode_logits;
using testing::rel_max_error;
using testing::tiny_model;

int64_t fp8_block(const std::string& quantization) { return quantization == "fp8" ? 128 : 0; }

struct ModelCase {
  const char* preset;
  const char* quantization;
  double tolerance;  // fp32 sums in another order; FP8 may also round one activation the other way
};

class FusedModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(FusedModel, GivesTheLogitsOfTheUnfusedModel) {
  const ModelCase& p = GetParam();
  auto backend = make_cpu_backend();
  auto plain = tiny_model(*backend, p.preset, fp8_block(p.quantization), {.fuse_shared_experts = false});
  // Routed as experts at every pass; and as dense chunks for the 11-token prefill.
  auto fused = tiny_model(*backend, p.preset, fp8_block(p.quantization), {});
  auto chunked = tiny_model(*backend, p.preset, fp8_block(p.quantization), {.shared_fusion_max_tokens = 4});

  const ModelConfig& c = plain->config();
  int64_t E = c.n_routed_experts, ns = c.n_shared_experts;
  ASSERT_GT(ns, 0);
  for (int64_t l = c.first_k_dense_replace; l < c.num_hidden_layers; ++l) {
    const MoeWeights& m = fused->weights().layers[size_t(l)].moe;
    ASSERT_EQ(int64_t(m.experts.size()), E + ns) << "layer " << l;
    EXPECT_FALSE(m.shared.gate_up.weight.defined() || m.shared.down.weight.defined()) << "a second copy";
    const GatedMlpWeights& chunk = m.experts.back();
    EXPECT_EQ(chunk.gate.weight.shape(), (Shape{c.moe_intermediate_size, c.hidden_size}));
    EXPECT_EQ(chunk.down.weight.shape(), (Shape{c.hidden_size, c.moe_intermediate_size}));
    EXPECT_EQ(chunk.down.is_fp8_block(), std::string(p.quantization) == "fp8");
    EXPECT_EQ(int64_t(plain->weights().layers[size_t(l)].moe.experts.size()), E);
  }

  std::vector<Tensor> want = prefill_and_decode_logits(*plain, *backend);
  std::vector<Tensor> got = prefill_and_decode_logits(*fused, *backend);
  std::vector<Tensor> got_chunked = prefill_and_decode_logits(*chunked, *backend);
  for (size_t i = 0; i < want.size(); ++i) {
    double e = rel_max_error(got[i], want[i]), ec = rel_max_error(got_chunked[i], want[i]);
    EXPECT_LE(e, p.tolerance) << p.preset << " pass " << i << " (fused)";
    EXPECT_LE(ec, p.tolerance) << p.preset << " pass " << i << (i == 0 ? " (dense chunks)" : " (fused)");
    std::printf("[%s %s] pass %zu: fused %.3g, chunked %.3g\n", p.preset, p.quantization, i, e, ec);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, FusedModel,
                         ::testing::Values(ModelCase{"deepseek-v2-lite-tiny", "", 1e-5},
                                           ModelCase{"deepseek-v3-tiny", "", 1e-5},
                                           ModelCase{"deepseek-v2-lite-tiny", "fp8", 1e-4},
                                           ModelCase{"deepseek-v3-tiny", "fp8", 1e-4}));

// A backend whose moe_experts takes no more than the routed experts: the shared MLP stays apart
// (gate and up stacked, as without fusion) and the logits are the unfused model's exactly.
class NoRoomCpuBackend final : public cpu::CpuBackend {
 public:
  int64_t max_moe_experts() const override { return 16; }
};

TEST(SharedExpertsFusion, StaysApartWhereTheBackendTakesTooFewExperts) {
  NoRoomCpuBackend backend;
  auto plain = tiny_model(backend, "deepseek-v2-lite-tiny", 0, {.fuse_shared_experts = false});
  auto fused = tiny_model(backend, "deepseek-v2-lite-tiny", 0, {});
  const MoeWeights& m = fused->weights().layers[1].moe;
  EXPECT_EQ(m.experts.size(), 16u);
  EXPECT_TRUE(m.shared.gate_up.weight.defined());
  std::vector<Tensor> want = prefill_and_decode_logits(*plain, backend);
  std::vector<Tensor> got = prefill_and_decode_logits(*fused, backend);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(rel_max_error(got[i], want[i]), 0.0) << "pass " << i;
}

// FP8 routed experts beside an unquantized shared MLP (one moe_experts call takes one kind): the
// shared MLP stays apart.
TEST(SharedExpertsFusion, StaysApartWhereOnlyTheRoutedExpertsAreFp8) {
  auto backend = make_cpu_backend();
  ModelConfig config = *ModelConfig::preset("deepseek-v2-lite-tiny");
  config.vocab_size = 2048;
  config.num_nextn_predict_layers = 0;
  config.quantization = QuantizationConfig{};
  config.quantization->block_n = config.quantization->block_k = 64;
  auto source = make_fp8_quantizing_source(make_dummy_source(config, 7, DType::F32), 64, 64);
  ModelWeights weights = load_model_weights(config, *source);
  for (LayerWeights& l : weights.layers)
    if (l.is_moe)
      for (LinearWeight* w : {&l.moe.shared.gate, &l.moe.shared.up, &l.moe.shared.down})
        *w = LinearWeight{dequantize(*w), {}};
  DeepseekModel model(config, std::move(weights), *backend);
  const MoeWeights& m = model.weights().layers[1].moe;
  EXPECT_EQ(int64_t(m.experts.size()), config.n_routed_experts);
  EXPECT_TRUE(m.shared.gate_up.weight.defined() || m.shared.gate.weight.defined());
}

}  // namespace
}  // namespace mlaserve
