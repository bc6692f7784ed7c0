// DeepSeek V2/V3 forward pass, written once against kernels/ops.h: it runs on whichever Backend
// it is given. Layers read top to bottom as in the papers: MLA attention (MHA form for prefill,
// absorbed form for decode), then a dense MLP for the first_k_dense_replace layers and MoE after.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "cache/kv_pool.h"
#include "config/model_config.h"
#include "engine/forward_batch.h"
#include "kernels/ops.h"
#include "model/absorbed_weights.h"
#include "weights/model_weights.h"

namespace mlaserve {

// How the model runs what the weights leave open.
struct DeepseekModelOptions {
  // Shared experts fusion (off: --disable-shared-experts-fusion): each MoE layer's shared MLP,
  // n_shared_experts * moe_intermediate_size wide, is cut at construction into n_shared_experts
  // experts of moe_intermediate_size appended after the routed ones, and every token picks them
  // with weight 1, so decode runs them in the routed experts' launches instead of four of its own.
  bool fuse_shared_experts = true;
  // Batches of more tokens run those chunks as dense MLPs beside the routed experts: at large
  // token counts the grouped expert GEMM is slower than a dense GEMM.
  int64_t shared_fusion_max_tokens = 256;
  // q_proj (or q_a_proj with q_lora) and kv_a_proj_with_mqa both read the normalized hidden state:
  // stacked at construction into AttentionWeights::q_kv_a, they run as one GEMM (one launch at
  // decode) whose output columns are q (or q_a) and the latent. Off: two GEMMs, as the weights come.
  bool fuse_q_kv_a = true;
  // The FP8 BMM (on: --enable-fp8-bmm): with an FP8 kv_b_proj whose blocks fall within heads,
  // decode batches of up to kFp8BmmMaxTokens run W_UK / W_UV on its e4m3 blocks (absorbed_weights.h).
  // Off by default: on an H200 it made V3-dims decode steps 2-4% slower than the BF16 pair at 1-16
  // tokens (docs/benchmarks.md, 2026-11-24 second section), though faster as a lone kernel.
  bool fp8_bmm = false;
};

class DeepseekModel {
 public:
  using Options = DeepseekModelOptions;
  DeepseekModel(ModelConfig config, ModelWeights weights, Backend& backend, Options options = {});

  // Runs the batch's new tokens (a host ForwardBatch), writes their latents into `kv`, and returns
  // the logits of the batch's logit_rows: [R, vocab] fp32, on the backend (Backend::to_host).
  Tensor forward(const ForwardBatch& batch, KvPool& kv);
  // The same with the batch's index tensors already on the backend (what CUDA graphs capture:
  // every launch reads them where they are, so a replay reads whatever they hold then).
  Tensor forward_on_backend(ForwardBatch batch, KvPool& kv);

  const ModelConfig& config() const { return config_; }
  // As the model arranged them: fused layers' experts end with the shared-expert chunks.
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() { return backend_; }

 private:
  // The normalization of a block's input, left to its first linear (Backend::rmsnorm_linear).
  struct DeferredNorm {
    Tensor x;
    Tensor* residual = nullptr;
    const Tensor* w = nullptr;
  };
  // A block's input, in the forms its linears read: BF16 rows x for those that run unquantized
  // (undefined where none does), and x quantized for those that run as FP8 W8A8 (by the kernel that
  // normalizes it; undefined where none does). With `deferred`, x is written by the first linear
  // (first_linear), which normalizes it on the way.
  struct BlockInput {
    Tensor x;
    Fp8Activation fp8;
    std::optional<DeferredNorm> deferred;
    int64_t rows() const { return x.defined() ? x.size(0) : fp8.q.size(0); }
  };
  // rmsnorm(x) * w into out (residual given: residual += x first, and that normalized; the stream may
  // be rebound to a new buffer) in the forms `readers` take; where they all take BF16 rows, deferred
  // to the block's first linear.
  BlockInput normalize(const Tensor& x, Tensor* residual, const Tensor& w, Tensor out,
                       std::initializer_list<const LinearWeight*> readers);
  // out = in · w^T for the block's first linear (which normalizes in first, where that is deferred);
  // later ones read in.x (or in.fp8) by apply_linear. later_readers: whether any do (else the
  // normalized rows need never exist, and in.x is left undefined).
  void first_linear(BlockInput& in, const LinearWeight& w, Tensor& out, bool later_readers);
  Tensor attention(int64_t layer, BlockInput in, const ForwardBatch& batch, KvPool& kv);
  Tensor dense_mlp(const GatedMlpWeights& w, BlockInput in);
  Tensor moe(int64_t layer, BlockInput in);
  // Appends each MoE layer's shared-expert chunks to its experts where options_ and the weights
  // allow (fills shared_chunks_).
  void fuse_shared_experts();
  // Stacks each layer's q (or q_a) projection over kv_a where options_ and the weights allow.
  void fuse_q_kv_a();

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  Options options_;
  // Per layer: how many chunks of the shared MLP were appended to its experts (0: not fused; the
  // shared MLP stays in MoeWeights::shared). Fused layers keep no other copy of it.
  std::vector<int64_t> shared_chunks_;
  RopeTable rope_;
  float softmax_scale_;
  int64_t forward_count_ = 0;
  // Absorbed-form projections cut from kv_b_proj, per layer.
  std::vector<AbsorbedWeights> absorbed_;
};

}  // namespace mlaserve
