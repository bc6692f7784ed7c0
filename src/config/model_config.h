// ModelConfig: the facts of a DeepSeek V2/V3 checkpoint, read from its HF config.json (both the
// keys real checkpoints carry and the ones newer transformers writes) or from a built-in preset.
// Frozen once validated.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/moe_params.h"

namespace mlaserve {

struct RopeScaling {
  std::string type = "yarn";  // only YaRN is used by DeepSeek checkpoints
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct QuantizationConfig {
  std::string method = "fp8";  // quant_method
  std::string format = "e4m3";
  std::string activation_scheme = "dynamic";
  int64_t block_n = 128;  // weight_block_size: one scale per block_n x block_k weights
  int64_t block_k = 128;
};

struct ModelConfig {
  std::string architecture;  // DeepseekV2ForCausalLM | DeepseekV3ForCausalLM
  std::string model_type;    // deepseek_v2 | deepseek_v3
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense MLP layers
  int64_t moe_intermediate_size = 0;  // one routed expert
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t q_lora_rank = 0;  // 0: no q compression (q_proj), as in V2-Lite
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  TopkMethod topk_method = TopkMethod::Greedy;
  ScoringFunc scoring_func = ScoringFunc::Softmax;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t num_nextn_predict_layers = 0;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool attention_bias = false;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids;
  DType dtype = DType::BF16;  // torch_dtype / dtype
  std::optional<QuantizationConfig> quantization;

  // Derived facts.
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Width of one token's latent cache entry per layer: [c_kv, k_pe] (576 for DeepSeek).
  int64_t kv_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const;
  // Softmax scale of attention: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 with YaRN.
  double softmax_scale() const;
  MoeRouting moe_routing() const;
  bool is_v3() const { return architecture == "DeepseekV3ForCausalLM"; }

  // Throws mlaserve::Error naming the field when the config is not one we can run.
  void validate() const;
  nlohmann::json to_json() const;

  static ModelConfig from_json(const nlohmann::json& j);
  static ModelConfig from_file(const std::string& path);
  // deepseek-v3, deepseek-r1, deepseek-v2, deepseek-v2-lite and small CPU models.
  static std::optional<ModelConfig> preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace mlaserve
