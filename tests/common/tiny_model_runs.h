// Tiny DeepSeek models on a backend and a fixed run of them, for tests that compare two ways of
// running the same weights (fusions on and off): the logits must agree pass by pass.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cache/kv_pool.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"
#include "weights/weight_loader.h"
#include "weights/weight_source.h"

namespace mlaserve::testing {

// A preset with dummy fp32 weights, or FP8 weights of fp8_block x fp8_block blocks (0: none), cut
// to a small vocabulary and no MTP layer so that making it is quick.
inline std::unique_ptr<DeepseekModel> tiny_model(Backend& backend, const std::string& preset, int64_t fp8_block,
                                                 DeepseekModelOptions options) {
  ModelConfig config = *ModelConfig::preset(preset);
  config.vocab_size = 2048;
  config.num_nextn_predict_layers = 0;
  std::unique_ptr<WeightSource> source = make_dummy_source(config, 7, DType::F32);
  if (fp8_block > 0) {
    config.quantization = QuantizationConfig{};
    config.quantization->block_n = config.quantization->block_k = fp8_block;
    source = make_fp8_quantizing_source(std::move(source), fp8_block, fp8_block);
  }
  ModelWeights weights = load_model_weights(config, *source);
  return std::make_unique<DeepseekModel>(config, std::move(weights), backend, options);
}

// Two sequences prefilled together (11 tokens), then three decode steps of both (fixed ids, so
// every model sees the same input), every pass in `form`: the logits of every pass.
inline std::vector<Tensor> prefill_and_decode_logits(DeepseekModel& m, Backend& backend,
                                                     AttentionForm form = AttentionForm::Auto) {
  const ModelConfig& c = m.config();
  KvPool kv(backend, c.num_hidden_layers, 64, c.kv_cache_dim(), DType::F32);
  std::vector<SequenceInput> seqs = {{{5, 17, 300, 41, 9, 77}, {}, true}, {{8, 1000, 23, 6, 2}, {}, true}};
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].slots.resize(seqs[i].new_tokens.size());
    std::iota(seqs[i].slots.begin(), seqs[i].slots.end(), int32_t(32 * i));
  }
  std::vector<Tensor> logits = {m.forward(make_forward_batch(seqs, form), kv)};
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].new_tokens = {int32_t(100 + 37 * step + 11 * int32_t(i))};
      seqs[i].slots.push_back(seqs[i].slots.back() + 1);
      seqs[i].all_logits = false;
    }
    logits.push_back(m.forward(make_forward_batch(seqs, form), kv));
  }
  return logits;
}

// Largest |got - want| over the largest |want|.
inline double rel_max_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  double err = 0, ref = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::fabs(double(got.data<float>()[i]) - double(want.data<float>()[i])));
    ref = std::max(ref, std::fabs(double(want.data<float>()[i])));
  }
  return ref > 0 ? err / ref : err;
}

}  // namespace mlaserve::testing
