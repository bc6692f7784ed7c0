// q_proj (or q_a_proj) and kv_a_proj_with_mqa stacked into one weight (DeepseekModelOptions::
// fuse_q_kv_a): tiny models whose logits must not change when q and the latent are column views of
// one GEMM's output, in both MLA forms, in fp32 and with FP8 blocks that do (64) or do not (128)
// divide kv_a's 576 rows (its ragged last block then ends the stacked weight).
#include <gtest/gtest.h>

#include "../common/tiny_model_runs.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

using testing::prefill_and_decode_logits;
using testing::rel_max_error;
using testing::tiny_model;

struct FusionCase {
  const char* preset;
  int64_t fp8_block;  // 0: fp32 weights
  bool stacks;        // whether the weights allow it (q's rows must be whole blocks)
};

class QKvAFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(QKvAFusion, GivesTheLogitsOfTheSeparateProjections) {
  const FusionCase& p = GetParam();
  auto backend = make_cpu_backend();
  auto plain = tiny_model(*backend, p.preset, p.fp8_block, {.fuse_q_kv_a = false});
  auto fused = tiny_model(*backend, p.preset, p.fp8_block, {.fuse_q_kv_a = true});

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
      Shape blocks{(Nq + c.kv_cache_dim() + p.fp8_block - 1) / p.fp8_block, c.hidden_size / p.fp8_block};
      EXPECT_EQ(f.q_kv_a.scale_inv.shape(), blocks);
    }
  }

  // Each output column is the same dot product either way, so the logits agree to the last bit
  // up to how the compiler vectorizes a dot over rows at other addresses.
  for (AttentionForm form : {AttentionForm::Auto, AttentionForm::Mha, AttentionForm::Absorbed}) {
    std::vector<Tensor> want = prefill_and_decode_logits(*plain, *backend, form),
                        got = prefill_and_decode_logits(*fused, *backend, form);
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
                                           FusionCase{"deepseek-v2-lite-tiny", 128, true},
                                           FusionCase{"deepseek-v3-tiny", 128, true},
                                           FusionCase{"deepseek-v3-tiny", 192, false}));

}  // namespace
}  // namespace mlaserve
