#include "config/model_presets.h"

#include <cstring>

namespace mlaserve {

namespace {

struct Preset {
  const char* name;
  const char* json;
};

// Real checkpoints: as in their config.json. Tiny ones: the built-in CPU models (V3 and V2 layouts with
// the real MLA widths, so that the latent cache is 576 wide as on the big models).
constexpr Preset kPresets[] = {
    {"deepseek-v3", R"json({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","vocab_size":129280,"hidden_size":7168,"intermediate_size":18432,"moe_intermediate_size":2048,"num_hidden_layers":61,"first_k_dense_replace":3,"moe_layer_freq":1,"num_attention_heads":128,"num_key_value_heads":128,"q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":256,"n_shared_experts":1,"num_experts_per_tok":8,"n_group":8,"topk_group":4,"topk_method":"noaux_tc","scoring_func":"sigmoid","norm_topk_prob":true,"routed_scaling_factor":2.5,"num_nextn_predict_layers":1,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":1.0,"mscale_all_dim":1.0},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":0,"eos_token_id":1,"torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]}})json"},
    {"deepseek-r1", R"json({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","vocab_size":129280,"hidden_size":7168,"intermediate_size":18432,"moe_intermediate_size":2048,"num_hidden_layers":61,"first_k_dense_replace":3,"moe_layer_freq":1,"num_attention_heads":128,"num_key_value_heads":128,"q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":256,"n_shared_experts":1,"num_experts_per_tok":8,"n_group":8,"topk_group":4,"topk_method":"noaux_tc","scoring_func":"sigmoid","norm_topk_prob":true,"routed_scaling_factor":2.5,"num_nextn_predict_layers":1,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":1.0,"mscale_all_dim":1.0},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":0,"eos_token_id":1,"torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]}})json"},
    {"deepseek-v2", R"json({"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2","vocab_size":102400,"hidden_size":5120,"intermediate_size":12288,"moe_intermediate_size":1536,"num_hidden_layers":60,"first_k_dense_replace":1,"moe_layer_freq":1,"num_attention_heads":128,"num_key_value_heads":128,"q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":160,"n_shared_experts":2,"num_experts_per_tok":6,"n_group":8,"topk_group":3,"topk_method":"group_limited_greedy","scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":16.0,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":0.707,"mscale_all_dim":0.707},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":100000,"eos_token_id":100001,"torch_dtype":"bfloat16"})json"},
    {"deepseek-v2-lite", R"json({"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2","vocab_size":102400,"hidden_size":2048,"intermediate_size":10944,"moe_intermediate_size":1408,"num_hidden_layers":27,"first_k_dense_replace":1,"moe_layer_freq":1,"num_attention_heads":16,"num_key_value_heads":16,"q_lora_rank":null,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":64,"n_shared_experts":2,"num_experts_per_tok":6,"n_group":1,"topk_group":1,"topk_method":"greedy","scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":1.0,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":0.707,"mscale_all_dim":0.707},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":100000,"eos_token_id":100001,"torch_dtype":"bfloat16"})json"},
    {"deepseek-v3-tiny", R"json({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","vocab_size":129280,"hidden_size":256,"intermediate_size":512,"moe_intermediate_size":128,"num_hidden_layers":4,"first_k_dense_replace":1,"moe_layer_freq":1,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":128,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":16,"n_shared_experts":1,"num_experts_per_tok":4,"n_group":4,"topk_group":2,"topk_method":"noaux_tc","scoring_func":"sigmoid","norm_topk_prob":true,"routed_scaling_factor":2.5,"num_nextn_predict_layers":1,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":1.0,"mscale_all_dim":1.0},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":0,"eos_token_id":1,"torch_dtype":"bfloat16"})json"},
    {"deepseek-v2-lite-tiny", R"json({"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2","vocab_size":102400,"hidden_size":256,"intermediate_size":512,"moe_intermediate_size":128,"num_hidden_layers":3,"first_k_dense_replace":1,"moe_layer_freq":1,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":null,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":16,"n_shared_experts":2,"num_experts_per_tok":4,"n_group":1,"topk_group":1,"topk_method":"greedy","scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":1.0,"hidden_act":"silu","rms_norm_eps":1e-06,"max_position_embeddings":163840,"rope_theta":10000,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":0.707,"mscale_all_dim":0.707},"attention_bias":false,"tie_word_embeddings":false,"bos_token_id":100000,"eos_token_id":100001,"torch_dtype":"bfloat16"})json"},
};

}  // namespace

const char* model_preset_json(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.json;
  return nullptr;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

}  // namespace mlaserve
