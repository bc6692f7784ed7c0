#include "weights/weight_loader.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/error.h"

namespace mlaserve {

namespace {

class Walker {
 public:
  Walker(const ModelConfig& c, WeightSource& s) : c_(c), src_(s), start_(std::chrono::steady_clock::now()) {}

  Tensor norm(const std::string& name, int64_t dim) { return fetch(name, {dim}, WeightRole::Norm); }

  LinearWeight linear(const std::string& prefix, int64_t out, int64_t in, WeightRole role = WeightRole::Linear) {
    LinearWeight w;
    std::string name = prefix + ".weight";
    w.weight = fetch(name, {out, in}, role);
    int64_t bn = c_.quantization ? c_.quantization->block_n : 128, bk = c_.quantization ? c_.quantization->block_k : 128;
    w.block_n = bn;
    w.block_k = bk;
    w.scale_inv = src_.get_scale(name, {out, in}, bn, bk);
    if (w.scale_inv.defined()) bytes_ += w.scale_inv.nbytes();
    MLA_CHECK(w.weight.dtype() != DType::F8_E4M3 || w.scale_inv.defined(),
              "tensor '{}' is F8_E4M3 but '{}_scale_inv' is missing ({})", name, name, src_.describe());
    return w;
  }

  GatedMlpWeights mlp(const std::string& prefix, int64_t inter) {
    int64_t H = c_.hidden_size;
    return {linear(prefix + ".gate_proj", inter, H), linear(prefix + ".up_proj", inter, H),
            linear(prefix + ".down_proj", H, inter)};
  }

  AttentionWeights attention(const std::string& p) {
    int64_t H = c_.hidden_size, nh = c_.num_attention_heads;
    AttentionWeights a;
    if (c_.q_lora_rank > 0) {
      a.q_a_proj = linear(p + ".q_a_proj", c_.q_lora_rank, H);
      a.q_a_norm = norm(p + ".q_a_layernorm.weight", c_.q_lora_rank);
      a.q_b_proj = linear(p + ".q_b_proj", nh * c_.qk_head_dim(), c_.q_lora_rank);
    } else {
      a.q_proj = linear(p + ".q_proj", nh * c_.qk_head_dim(), H);
    }
    a.kv_a_proj = linear(p + ".kv_a_proj_with_mqa", c_.kv_cache_dim(), H);
    a.kv_a_norm = norm(p + ".kv_a_layernorm.weight", c_.kv_lora_rank);
    a.kv_b_proj = linear(p + ".kv_b_proj", nh * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank);
    a.o_proj = linear(p + ".o_proj", H, nh * c_.v_head_dim);
    if (auto scale = src_.kv_cache_scale(p)) a.kv_cache_scale = *scale;
    return a;
  }

  MoeWeights moe(const std::string& p) {
    MoeWeights m;
    int64_t E = c_.n_routed_experts, H = c_.hidden_size;
    m.router = fetch(p + ".gate.weight", {E, H}, WeightRole::Dense);
    std::string bias = p + ".gate.e_score_correction_bias";
    if (c_.topk_method == TopkMethod::NoauxTc) m.correction_bias = fetch(bias, {E}, WeightRole::Bias);
    m.experts.reserve(size_t(E));
    for (int64_t e = 0; e < E; ++e) m.experts.push_back(mlp(p + ".experts." + std::to_string(e), c_.moe_intermediate_size));
    if (c_.n_shared_experts > 0) {
      m.has_shared = true;
      m.shared = mlp(p + ".shared_experts", c_.moe_intermediate_size * c_.n_shared_experts);
    }
    return m;
  }

  LayerWeights layer(int64_t index, bool is_moe) {
    std::string p = "model.layers." + std::to_string(index);
    LayerWeights l;
    l.input_norm = norm(p + ".input_layernorm.weight", c_.hidden_size);
    l.post_attention_norm = norm(p + ".post_attention_layernorm.weight", c_.hidden_size);
    l.attn = attention(p + ".self_attn");
    l.is_moe = is_moe;
    if (is_moe) l.moe = moe(p + ".mlp");
    else l.mlp = mlp(p + ".mlp", c_.intermediate_size);
    progress(index + 1);
    return l;
  }

  MtpWeights mtp(int64_t index) {
    std::string p = "model.layers." + std::to_string(index);
    int64_t H = c_.hidden_size;
    MtpWeights m;
    m.enorm = norm(p + ".enorm.weight", H);
    m.hnorm = norm(p + ".hnorm.weight", H);
    m.eh_proj = linear(p + ".eh_proj", H, 2 * H, WeightRole::Dense);
    m.embed = fetch(p + ".embed_tokens.weight", {c_.vocab_size, H}, WeightRole::Embedding);
    m.layer = layer(index, true);
    m.head_norm = norm(p + ".shared_head.norm.weight", H);
    m.head = linear(p + ".shared_head.head", c_.vocab_size, H, WeightRole::Dense);
    return m;
  }

  uint64_t bytes() const { return bytes_; }

 private:
  Tensor fetch(const std::string& name, const Shape& shape, WeightRole role) {
    Tensor t = src_.get(name, shape, role);
    bytes_ += t.nbytes();
    return t;
  }

  void progress(int64_t layers_done) {
    int64_t total = c_.num_hidden_layers + c_.num_nextn_predict_layers;
    auto now = std::chrono::steady_clock::now();
    if (layers_done == total || now - last_log_ > std::chrono::seconds(2)) {
      double secs = std::chrono::duration<double>(now - start_).count();
      spdlog::info("loading weights: layer {}/{}, {:.2f} GB, {:.1f} s", layers_done, total, double(bytes_) / 1e9, secs);
      last_log_ = now;
    }
  }

  const ModelConfig& c_;
  WeightSource& src_;
  uint64_t bytes_ = 0;
  std::chrono::steady_clock::time_point start_, last_log_;
};

}  // namespace

ModelWeights load_model_weights(const ModelConfig& c, WeightSource& source) {
  spdlog::info("loading weights from {}", source.describe());
  Walker w(c, source);
  ModelWeights m;
  m.embed = source.get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, WeightRole::Embedding);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) m.layers.push_back(w.layer(l, c.is_moe_layer(l)));
  m.final_norm = w.norm("model.norm.weight", c.hidden_size);
  if (c.tie_word_embeddings) {
    m.lm_head.weight = m.embed;
  } else {
    m.lm_head = w.linear("lm_head", c.vocab_size, c.hidden_size, WeightRole::Dense);
  }
  // The NextN layers are optional in a checkpoint (conversions often drop them).
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
    int64_t index = c.num_hidden_layers + i;
    if (!source.has("model.layers." + std::to_string(index) + ".eh_proj.weight")) {
      spdlog::warn("checkpoint has no NextN (MTP) layer {}: speculative decoding with it is unavailable", index);
      break;
    }
    m.mtp.push_back(w.mtp(index));
  }
  source.finish();
  m.total_bytes = w.bytes() + m.embed.nbytes();
  return m;
}

}  // namespace mlaserve
