// The CPU reference model against HuggingFace transformers in fp32 (tests/tools/make_model_fixtures.py):
// logits of every prompt position and greedy continuations, for every fixture.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <numeric>

#include "cache/kv_pool.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "test_paths.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

using testing::model_fixture;

// Logits of fp32 implementations differ only by summation order: a max abs error under
// 1e-4 of the logits' range (they span about +-6 here) is the bound.
constexpr double kMaxRelError = 1e-4;

struct Errors {
  double max_abs = 0, max_rel = 0;
};

Errors compare(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  Errors e;
  double ref_max = 0;
  for (int64_t i = 0; i < want.numel(); ++i) ref_max = std::max(ref_max, std::fabs(double(want.data<float>()[i])));
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.data<float>()[i], w = want.data<float>()[i];
    EXPECT_FALSE(std::isnan(g));
    e.max_abs = std::max(e.max_abs, std::fabs(g - w));
  }
  e.max_rel = e.max_abs / ref_max;
  return e;
}

class ModelFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = model_fixture(GetParam());
    loaded_ = load_model({.model = dir_});
    backend_ = make_cpu_backend();
    model_ = std::make_unique<DeepseekModel>(loaded_.config, std::move(loaded_.weights), *backend_);
    std::ifstream in(dir_ + "/reference.json");
    reference_ = nlohmann::json::parse(in);
    logits_ = SafetensorsFile::open(dir_ + "/reference.safetensors");
  }

  std::vector<int32_t> prompt(size_t i) const { return reference_["prompts"][i].get<std::vector<int32_t>>(); }
  size_t num_prompts() const { return reference_["prompts"].size(); }

  // Logits of every position of `ids` run as one prefill in the given form.
  Tensor full_logits(const std::vector<int32_t>& ids, AttentionForm form) {
    const ModelConfig& c = model_->config();
    KvPool kv(*backend_, c.num_hidden_layers, int64_t(ids.size()), c.kv_cache_dim(), DType::F32);
    std::vector<int32_t> slots(ids.size());
    std::iota(slots.begin(), slots.end(), 0);
    return model_->forward(make_forward_batch({{ids, slots, true}}, form), kv);
  }

  std::string dir_;
  LoadedModel loaded_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DeepseekModel> model_;
  nlohmann::json reference_;
  std::shared_ptr<SafetensorsFile> logits_;
};

TEST_P(ModelFixture, LogitsMatchTransformers) {
  Errors worst;
  for (size_t i = 0; i < num_prompts(); ++i) {
    Tensor want = logits_->tensor("logits_" + std::to_string(i));
    Errors e = compare(full_logits(prompt(i), AttentionForm::Auto), want);
    EXPECT_LE(e.max_rel, kMaxRelError) << "prompt " << i << " (length " << prompt(i).size() << ")";
    worst.max_abs = std::max(worst.max_abs, e.max_abs);
    worst.max_rel = std::max(worst.max_rel, e.max_rel);
  }
  std::printf("[fixture %s] logits vs transformers fp32: max abs error %.3g, max relative error %.3g\n",
              GetParam().c_str(), worst.max_abs, worst.max_rel);
}

TEST_P(ModelFixture, AbsorbedFormEqualsMhaForm) {
  for (size_t i = 0; i < num_prompts(); ++i) {
    auto ids = prompt(i);
    Errors e = compare(full_logits(ids, AttentionForm::Absorbed), full_logits(ids, AttentionForm::Mha));
    EXPECT_LE(e.max_rel, kMaxRelError) << "prompt " << i;
  }
}

// Prefill a prefix, extend by a chunk over the cached prefix (MHA form), then decode one token at
// a time (absorbed form): every step's logits equal the full forward's row.
TEST_P(ModelFixture, IncrementalStepsEqualFullForward) {
  auto ids = prompt(3);  // 33 tokens
  Tensor full = full_logits(ids, AttentionForm::Mha);
  const ModelConfig& c = model_->config();
  KvPool kv(*backend_, c.num_hidden_layers, int64_t(ids.size()) + 7, c.kv_cache_dim(), DType::F32);
  // Slots deliberately not in order: the cache is paged, tokens go wherever the allocator puts them.
  std::vector<int32_t> slots(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) slots[i] = int32_t((i * 7 + 3) % (ids.size() + 7));  // 7 is coprime with 40: no collisions
  auto run = [&](size_t begin, size_t end) {
    SequenceInput s{{ids.begin() + begin, ids.begin() + end}, {slots.begin(), slots.begin() + end}, true};
    Tensor got = model_->forward(make_forward_batch({s}), kv);
    Errors e = compare(got, full.narrow(0, int64_t(begin), int64_t(end - begin)).contiguous());
    EXPECT_LE(e.max_rel, kMaxRelError) << "tokens [" << begin << ", " << end << ")";
  };
  run(0, 10);   // prefill
  run(10, 20);  // extend over a cached prefix
  for (size_t t = 20; t < ids.size(); ++t) run(t, t + 1);  // decode
}

// Sequences batched together give the logits they give alone.
TEST_P(ModelFixture, BatchCompositionDoesNotChangeLogits) {
  auto a = prompt(2), b = prompt(3);
  Tensor alone_a = full_logits(a, AttentionForm::Auto), alone_b = full_logits(b, AttentionForm::Auto);
  const ModelConfig& c = model_->config();
  KvPool kv(*backend_, c.num_hidden_layers, int64_t(a.size() + b.size()), c.kv_cache_dim(), DType::F32);
  std::vector<int32_t> sa(a.size()), sb(b.size());
  std::iota(sa.begin(), sa.end(), int32_t(b.size()));
  std::iota(sb.begin(), sb.end(), 0);
  Tensor both = model_->forward(make_forward_batch({{a, sa, true}, {b, sb, true}}), kv);
  EXPECT_LE(compare(both.narrow(0, 0, int64_t(a.size())).contiguous(), alone_a).max_rel, 1e-5);
  EXPECT_LE(compare(both.narrow(0, int64_t(a.size()), int64_t(b.size())).contiguous(), alone_b).max_rel, 1e-5);
}

TEST_P(ModelFixture, GreedyContinuationsMatchTransformers) {
  const ModelConfig& c = model_->config();
  auto conts = reference_["greedy_continuations"];
  for (size_t i = 0; i < num_prompts(); ++i) {
    auto ids = prompt(i);
    auto want = conts[i].get<std::vector<int32_t>>();
    int64_t total = int64_t(ids.size() + want.size());
    KvPool kv(*backend_, c.num_hidden_layers, total, c.kv_cache_dim(), DType::F32);
    std::vector<int32_t> slots(static_cast<size_t>(total));
    std::iota(slots.begin(), slots.end(), 0);
    std::vector<int32_t> got;
    Tensor logits = model_->forward(make_forward_batch({{ids, {slots.begin(), slots.begin() + int64_t(ids.size())}}}), kv);
    Tensor next = Tensor::empty(DType::I32, {1});
    for (size_t step = 0; step < want.size(); ++step) {
      backend_->sample(logits, {SamplingParams{.temperature = 0}}, next);
      got.push_back(next.data<int32_t>()[0]);
      size_t len = ids.size() + step + 1;
      logits = model_->forward(make_forward_batch({{{got.back()}, {slots.begin(), slots.begin() + int64_t(len)}}}), kv);
    }
    EXPECT_EQ(got, want) << "prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelFixture,
                         ::testing::Values("v2_greedy", "v2_group_limited", "v3_noaux_tc", "v3_plain_rope",
                                           "v3_mla_dims"));

}  // namespace
}  // namespace mlaserve
