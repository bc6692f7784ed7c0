// FP8 accuracy on the HF fixtures: each fixture's fp32 checkpoint quantized at load
// (--quantization fp8: W8A8 linears) and run with an FP8 KV cache, against transformers' fp32
// logits for the prompts and against the fp32 model for decode steps fed the same tokens. Bounds
// are measured values (docs/accuracy.md) with margin.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <numeric>

#include "../tools/logit_agreement.h"
#include "cache/kv_pool.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "test_paths.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

// These tiny random models are chaotic: 1% random noise on every linear weight already moves the
// median row to a cosine of 0.996 and flips 12-19% of the argmaxes, and FP8's rounding (about 2.5%
// rms per value) does what 2.5% noise does (docs/accuracy.md). So the bounds sit below the worst
// fixture's measured values (mean cosine 0.834, median 0.871, median row error 0.489, argmax
// agreement 0.360) and far above what a wrong scale or layout gives (unrelated logit rows: cosine
// about 0.03, argmax agreement about 0.005); the op-level tests check the arithmetic exactly.
constexpr double kMinMeanCosine = 0.78;
constexpr double kMinMedianCosine = 0.82;
constexpr double kMaxMedianRelError = 0.6;
constexpr double kMinArgmaxAgreement = 0.30;

std::unique_ptr<DeepseekModel> load(Backend& backend, const std::string& dir, const std::string& quantization) {
  LoadedModel m = load_model({.model = dir, .quantization = quantization});
  return std::make_unique<DeepseekModel>(m.config, std::move(m.weights), backend);
}

class Fp8Fixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::model_fixture(GetParam());
    backend_ = make_cpu_backend();
    fp32_ = load(*backend_, dir_, "");
    fp8_ = load(*backend_, dir_, "fp8");
    std::ifstream in(dir_ + "/reference.json");
    reference_ = nlohmann::json::parse(in);
    logits_ = SafetensorsFile::open(dir_ + "/reference.safetensors");
  }

  KvPool pool(DeepseekModel& m, int64_t slots, DType dtype) {
    return KvPool(*backend_, m.config().num_hidden_layers, slots, m.config().kv_cache_dim(), dtype);
  }

  static int32_t argmax(const Tensor& logits) {
    const float* row = logits.data<float>() + (logits.size(0) - 1) * logits.stride(0);
    return int32_t(std::max_element(row, row + logits.size(1)) - row);
  }

  std::string dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DeepseekModel> fp32_, fp8_;
  nlohmann::json reference_;
  std::shared_ptr<SafetensorsFile> logits_;
};

TEST_P(Fp8Fixture, W8A8WithFp8KvCacheStaysCloseToFp32) {
  LogitAgreement agreement;
  int64_t greedy_equal = 0, greedy_total = 0;
  for (size_t i = 0; i < reference_["prompts"].size(); ++i) {
    auto ids = reference_["prompts"][i].get<std::vector<int32_t>>();
    auto cont = reference_["greedy_continuations"][i].get<std::vector<int32_t>>();
    int64_t total = int64_t(ids.size() + cont.size());
    std::vector<int32_t> slots(static_cast<size_t>(total));
    std::iota(slots.begin(), slots.end(), 0);
    auto first = [&](size_t n) { return std::vector<int32_t>(slots.begin(), slots.begin() + int64_t(n)); };

    // Prefill (MHA form over the FP8 cache): every prompt position against transformers.
    KvPool kv8 = pool(*fp8_, total, DType::F8_E4M3), kv32 = pool(*fp32_, total, DType::F32);
    Tensor got = fp8_->forward(make_forward_batch({{ids, first(ids.size()), true}}), kv8);
    agreement.add(got, logits_->tensor("logits_" + std::to_string(i)));
    fp32_->forward(make_forward_batch({{ids, first(ids.size()), true}}), kv32);

    // Decode (absorbed form over the FP8 cache), fed transformers' greedy tokens: each step against
    // the fp32 model's same step.
    for (size_t step = 0; step + 1 < cont.size(); ++step) {
      SequenceInput s{{cont[step]}, first(ids.size() + step + 1), false};
      agreement.add(fp8_->forward(make_forward_batch({s}), kv8), fp32_->forward(make_forward_batch({s}), kv32));
    }

    // Free-running greedy decode from the FP8 model: tokens equal to transformers' until the first
    // difference.
    KvPool free = pool(*fp8_, total, DType::F8_E4M3);
    Tensor logits = fp8_->forward(make_forward_batch({{ids, first(ids.size())}}), free);
    size_t same = 0;
    while (same < cont.size() && argmax(logits) == cont[same]) {
      ++same;
      if (same == cont.size()) break;
      logits = fp8_->forward(make_forward_batch({{{cont[same - 1]}, first(ids.size() + same)}}), free);
    }
    greedy_equal += int64_t(same);
    greedy_total += int64_t(cont.size());
  }
  const LogitAgreement& a = agreement;
  std::printf("[fp8 %s] %lld rows: cosine mean %.4f median %.4f min %.4f; relative error median %.4f max %.4f; "
              "argmax agreement %.4f; free-running greedy tokens equal %lld/%lld\n",
              GetParam().c_str(), (long long)a.rows(), a.mean_cosine(), a.median_cosine(), a.min_cosine(),
              a.median_rel_error(), a.max_rel_error(), a.argmax_agreement(), (long long)greedy_equal,
              (long long)greedy_total);
  EXPECT_GE(a.mean_cosine(), kMinMeanCosine);
  EXPECT_GE(a.median_cosine(), kMinMedianCosine);
  EXPECT_LE(a.median_rel_error(), kMaxMedianRelError);
  EXPECT_GE(a.argmax_agreement(), kMinArgmaxAgreement);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Fixture,
                         ::testing::Values("v2_greedy", "v2_group_limited", "v3_noaux_tc", "v3_plain_rope",
                                           "v3_mla_dims"));

}  // namespace
}  // namespace mlaserve
