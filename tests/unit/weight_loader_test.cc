// Loading model weights: checkpoints that do not fit the config are refused with the tensor and
// file named; dummy weights are seeded and reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "model/load_model.h"
#include "test_paths.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

using TensorList = std::vector<std::pair<std::string, Tensor>>;

// A copy of the v2_greedy fixture whose tensors went through `edit` first.
std::string edited_checkpoint(const TempDir& dir, const std::function<void(TensorList&)>& edit) {
  std::string src = testing::model_fixture("v2_greedy");
  auto file = SafetensorsFile::open(src + "/model.safetensors");
  TensorList tensors;
  for (const auto& [name, info] : file->tensors()) tensors.push_back({name, file->tensor(name)});
  edit(tensors);
  fs::copy_file(src + "/config.json", dir.file("config.json"));
  write_safetensors(dir.file("model.safetensors"), tensors);
  return dir.path();
}

void expect_load_error(const std::string& folder, const std::vector<std::string>& words) {
  try {
    load_model({.model = folder});
    ADD_FAILURE() << "loaded a bad checkpoint";
  } catch (const Error& e) {
    for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(WeightLoader, MissingTensorIsNamed) {
  TempDir dir("missing");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    std::erase_if(t, [](auto& p) { return p.first == "model.layers.1.self_attn.kv_b_proj.weight"; });
  });
  expect_load_error(folder, {"model.layers.1.self_attn.kv_b_proj.weight", "missing"});
}

TEST(WeightLoader, ExtraTensorIsNamedWithItsFile) {
  TempDir dir("extra");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    t.push_back({"model.layers.0.mlp.mystery.weight", Tensor::zeros(DType::F32, {4})});
  });
  expect_load_error(folder, {"model.layers.0.mlp.mystery.weight", "model.safetensors"});
}

TEST(WeightLoader, MisShapedTensorIsNamedWithBothShapes) {
  TempDir dir("shape");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.layers.2.self_attn.o_proj.weight") tensor = Tensor::zeros(DType::F32, {64, 95});
  });
  expect_load_error(folder, {"model.layers.2.self_attn.o_proj.weight", "[64, 95]", "[64, 96]"});
}

TEST(WeightLoader, Fp8WeightWithoutScalesIsRefused) {
  TempDir dir("fp8");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.layers.0.mlp.up_proj.weight") tensor = Tensor::zeros(DType::F8_E4M3, tensor.shape());
  });
  expect_load_error(folder, {"model.layers.0.mlp.up_proj.weight", "scale_inv"});
}

TEST(WeightLoader, Fp8WeightWithBlockScalesLoads) {
  TempDir dir("fp8ok");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    for (auto& [name, tensor] : t)
      if (name == "model.layers.0.mlp.up_proj.weight") tensor = Tensor::zeros(DType::F8_E4M3, tensor.shape());
    t.push_back({"model.layers.0.mlp.up_proj.weight_scale_inv", Tensor::zeros(DType::F32, {1, 1})});
  });
  LoadedModel m = load_model({.model = folder});
  EXPECT_TRUE(m.weights.layers[0].mlp.up.is_fp8_block());
}

TEST(WeightLoader, TruncatedCheckpointIsAnError) {
  TempDir dir("trunc");
  auto folder = edited_checkpoint(dir, [](TensorList&) {});
  fs::resize_file(dir.file("model.safetensors"), fs::file_size(dir.file("model.safetensors")) / 2);
  expect_load_error(folder, {"model.safetensors"});
}

TEST(WeightLoader, DummyWeightsAreSeeded) {
  ModelLoadOptions o{.model = "deepseek-v2-lite-tiny", .load_format = "dummy", .seed = 3};
  LoadedModel a = load_model(o), b = load_model(o);
  o.seed = 4;
  LoadedModel c = load_model(o);
  const Tensor &wa = a.weights.layers[1].attn.kv_b_proj.weight, &wb = b.weights.layers[1].attn.kv_b_proj.weight,
               &wc = c.weights.layers[1].attn.kv_b_proj.weight;
  ASSERT_EQ(wa.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(wa.raw(), wb.raw(), wa.nbytes()), 0);
  EXPECT_NE(std::memcmp(wa.raw(), wc.raw(), wa.nbytes()), 0);
  EXPECT_EQ(a.weights.layers.size(), 3u);
  EXPECT_TRUE(a.weights.layers[1].is_moe);
  EXPECT_EQ(a.weights.layers[1].moe.experts.size(), 16u);
}

TEST(WeightLoader, PresetsNeedDummyAndUnknownModelsAreNamed) {
  expect_load_error("no-such-model", {"no-such-model", "deepseek-v3"});
  try {
    load_model({.model = "deepseek-v3-tiny", .load_format = "safetensors"});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dummy"), std::string::npos);
  }
}

TEST(WeightLoader, MtpLayerOfAV3CheckpointIsLoaded) {
  LoadedModel m = load_model({.model = testing::model_fixture("v3_noaux_tc")});
  ASSERT_EQ(m.weights.mtp.size(), 1u);
  EXPECT_EQ(m.weights.mtp[0].eh_proj.weight.shape(), (Shape{64, 128}));
  EXPECT_TRUE(m.weights.mtp[0].layer.is_moe);
}

// --quantization fp8 quantizes what DeepSeek-V3's FP8 checkpoints store in FP8: attention
// projections, dense MLPs, routed and shared experts. Embeddings, norms, the router, its bias,
// lm_head and the MTP layer's eh_proj / head stay as stored.
TEST(WeightLoader, QuantizationFp8QuantizesTheLinearLayersOnly) {
  LoadedModel m = load_model({.model = testing::model_fixture("v3_noaux_tc"), .quantization = "fp8"});
  ASSERT_TRUE(m.config.quantization.has_value());
  auto fp8 = [](const LinearWeight& w) {
    return w.weight.dtype() == DType::F8_E4M3 && w.is_fp8_block() && w.block_n == 128 && w.block_k == 128 &&
           w.scale_inv.shape() == Shape({(w.out_features() + 127) / 128, (w.in_features() + 127) / 128});
  };
  auto mlp_fp8 = [&](const GatedMlpWeights& g) { return fp8(g.gate) && fp8(g.up) && fp8(g.down); };
  for (const LayerWeights& l : m.weights.layers) {
    const AttentionWeights& a = l.attn;
    EXPECT_TRUE(fp8(a.q_a_proj) && fp8(a.q_b_proj) && fp8(a.kv_a_proj) && fp8(a.kv_b_proj) && fp8(a.o_proj));
    EXPECT_EQ(a.q_a_norm.dtype(), DType::F32);
    EXPECT_EQ(a.kv_a_norm.dtype(), DType::F32);
    EXPECT_EQ(l.input_norm.dtype(), DType::F32);
    if (l.is_moe) {
      for (const auto& e : l.moe.experts) EXPECT_TRUE(mlp_fp8(e));
      EXPECT_TRUE(mlp_fp8(l.moe.shared));
      EXPECT_EQ(l.moe.router.dtype(), DType::F32);
      EXPECT_EQ(l.moe.correction_bias.dtype(), DType::F32);
    } else {
      EXPECT_TRUE(mlp_fp8(l.mlp));
    }
  }
  EXPECT_EQ(m.weights.embed.dtype(), DType::F32);
  EXPECT_EQ(m.weights.lm_head.weight.dtype(), DType::F32);
  EXPECT_FALSE(m.weights.lm_head.is_fp8_block());
  ASSERT_EQ(m.weights.mtp.size(), 1u);
  EXPECT_EQ(m.weights.mtp[0].eh_proj.weight.dtype(), DType::F32);
  EXPECT_EQ(m.weights.mtp[0].head.weight.dtype(), DType::F32);
  EXPECT_TRUE(fp8(m.weights.mtp[0].layer.attn.kv_b_proj));
  EXPECT_EQ(m.weights.layers[0].attn.kv_cache_scale, 1.0f);

  // Dummy weights: the quantized ones are those of the same run without --quantization.
  ModelLoadOptions o{.model = "deepseek-v2-lite-tiny", .load_format = "dummy", .seed = 5};
  LoadedModel plain = load_model(o);
  o.quantization = "fp8";
  LoadedModel quantized = load_model(o);
  const LinearWeight &p = plain.weights.layers[1].attn.kv_b_proj, &q = quantized.weights.layers[1].attn.kv_b_proj;
  ASSERT_TRUE(fp8(q));
  Tensor want = dequantize(p), got = dequantize(q);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_LE(std::fabs(got.data<float>()[i] - want.data<float>()[i]), std::fabs(want.data<float>()[i]) / 16 + 1e-3)
        << i;

  try {
    load_model({.model = testing::model_fixture("v3_noaux_tc"), .quantization = "int4"});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--quantization int4"), std::string::npos) << e.what();
  }
}

TEST(WeightLoader, KvCacheScaleOfACheckpointIsRead) {
  TempDir dir("kscale");
  auto folder = edited_checkpoint(dir, [](TensorList& t) {
    t.push_back({"model.layers.1.self_attn.k_scale", Tensor::from_f32({0.5f}, {})});
  });
  LoadedModel m = load_model({.model = folder});
  EXPECT_EQ(m.weights.layers[0].attn.kv_cache_scale, 1.0f);
  EXPECT_EQ(m.weights.layers[1].attn.kv_cache_scale, 0.5f);

  TempDir bad_dir("kscale_bad");
  auto bad = edited_checkpoint(bad_dir, [](TensorList& t) {
    t.push_back({"model.layers.1.self_attn.k_scale", Tensor::from_f32({-1.0f}, {1})});
  });
  expect_load_error(bad, {"model.layers.1.self_attn.k_scale", "positive"});
}

}  // namespace
}  // namespace mlaserve
