// q_proj (or q_a_proj) and kv_a_proj_with_mqa stacked into one weight (DeepseekModelOptions::
// fuse_q_kv_a): tiny models whose logits must not change when q and the latent are column views of
// one GEMM's output, in both MLA forms, in fp32 and with FP8 blocks that do (64) or do not (128)
// divide kv_a's 576 rows.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "cache/kv_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/deepseek_model.h"
#include "weights/weight_loader.h"
#include "weights/weight_source.h"

namespace mlaserve {
namespace {

// A preset with dummy fp32 weights, or FP8 weights of block x block blocks (block 0: none), cut
// to a small vocabulary and no MTP layer so that making it is quick.
std::unique_ptr<DeepseekModel> tiny(Backend& backend, const std::string& preset, int64_t block, bool fuse) {
  ModelConfig config = *ModelConfig::preset(preset);
  config.vocab_size = 2048;
  config.num_nextn_predict_layers = 0;
  std::unique_ptr<WeightSource> source = make_dummy_source(config, 7, DType::F32);
  if (block > 0) {
    config.quantization = QuantizationConfig{};
    config.quantization->block_n = config.quantization->block_k = block;
    source = make_fp8_quantizing_source(std::move(source), block, block);
  }
  ModelWeights weights = load_model_weights(config, *source);
  DeepseekModelOptions options{.fuse_q_kv_a = fuse};
  return std::make_unique<DeepseekModel>(config, std::move(weights), backend, options);
}

// Two sequences prefilled together (11 tokens), then three decode steps of both, every pass in
// `form` (Auto: MHA prefill, absorbed decode): the logits of every pass.
std::vector<Tensor> run(DeepseekModel& m, Backend& backend, AttentionForm form) {
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
double rel_max_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  double err = 0, ref = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::fabs(double(got.data<float>()[i]) - double(want.data<float>()[i])));
    ref = std::max(ref, std::fabs(double(want.data<float>()[i])));
  }
  return ref > 0 ? err / ref : err;
}

struct FusionCase {
  const char* preset;
  int64_t fp8_block;  // 0: fp32 weights
  bool stacks;        // whether the weights allow it (128-row blocks straddle q and kv_a)
};

class QKvAFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(QKvAFusion, GivesTheLogitsOfTheSeparateProjections) {
  const FusionCase& p = GetParam();
  auto backend = make_cpu_backend();
  auto plain = tiny(*backend, p.preset, p.fp8_block, false);
  auto fused = tiny(*backend, p.preset, p.fp8_block, true);

  const ModelConfig& c = plain->config();
  int64_t Nq = c.q_lora_rank > 0 ? c.q_lora_rank : c.num_attention_heads * c.qk_head_dim();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const AttentionWeights &f = fused->weights().layers[size_t(l)].attn, &u = plain->weights().layers[size_t(l)].attn;
    const LinearWeight& q = c.q_lora_rank > 0 ? f.q_a_proj : f.q_proj;
    EXPECT_FALSE(u.q_kv_a.weight.defined()) << "layer " << l << ": stacked with fuse_q_kv_a off";
    EXPECT_EQ(f.q_kv_a.weight.defined(), p.stacks) << "layer " << l;
    // One copy: the stacked weight, or the two as loaded.
    EXPECT_EQ(q.weight.defined(), !p.stacks) << "layer " << l;
    EXPECT_EQ(f.kv_a_proj.weight.defined(), !p.stacks) << "layer " << l;
    if (!p.stacks) continue;
    EXPECT_EQ(f.q_kv_a.weight.shape(), (Shape{Nq + c.kv_cache_dim(), c.hidden_size}));
    EXPECT_EQ(f.q_kv_a.is_fp8_block(), p.fp8_block > 0);
    if (p.fp8_block > 0) {
      Shape blocks{(Nq + c.kv_cache_dim()) / p.fp8_block, c.hidden_size / p.fp8_block};
      EXPECT_EQ(f.q_kv_a.scale_inv.shape(), blocks);
    }
  }

  // Each output column is the same dot product either way, so the logits agree to the last bit
  // up to how the compiler vectorizes a dot over rows at other addresses.
  for (AttentionForm form : {AttentionForm::Auto, AttentionForm::Mha, AttentionForm::Absorbed}) {
    std::vector<Tensor> want = run(*plain, *backend, form), got = run(*fused, *backend, form);
    for (size_t i = 0; i < want.size(); ++i) {
      double e = rel_max_error(got[i], want[i]);
      EXPECT_LE(e, 1e-6) << p.preset << " fp8 block " << p.fp8_block << " form " << int(form) << " pass " << i;
      std::printf("[%s fp8 block %lld form %d] pass %zu: %.3g\n", p.preset, (long long)p.fp8_block, int(form), i, e);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, QKvAFusion,
                         ::testing::Values(FusionCase{"deepseek-v2-lite-tiny", 0, true},
                                           FusionCase{"deepseek-v3-tiny", 0, true},
                                           FusionCase{"deepseek-v2-lite-tiny", 64, true},
                                           FusionCase{"deepseek-v3-tiny", 64, true},
                                           FusionCase{"deepseek-v2-lite-tiny", 128, false},
                                           FusionCase{"deepseek-v3-tiny", 128, false}));

}  // namespace
}  // namespace mlaserve
