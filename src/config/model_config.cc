#include "config/model_config.h"

#include <cmath>
#include <fstream>

#include "common/error.h"
#include "config/model_presets.h"

namespace mlaserve {

std::string_view topk_method_name(TopkMethod m) {
  switch (m) {
    case TopkMethod::Greedy: return "greedy";
    case TopkMethod::GroupLimitedGreedy: return "group_limited_greedy";
    case TopkMethod::NoauxTc: return "noaux_tc";
  }
  return "?";
}

std::string_view scoring_func_name(ScoringFunc s) { return s == ScoringFunc::Softmax ? "softmax" : "sigmoid"; }

namespace {

using nlohmann::json;

// Reads an integer field that may be absent or null (then `fallback`).
int64_t get_int(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  MLA_CHECK(it->is_number_integer() || (it->is_number() && std::floor(it->get<double>()) == it->get<double>()),
            "config field '{}' must be an integer, got {}", key, it->dump());
  return it->get<int64_t>();
}

double get_double(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  MLA_CHECK(it->is_number(), "config field '{}' must be a number, got {}", key, it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  MLA_CHECK(it->is_boolean(), "config field '{}' must be true or false, got {}", key, it->dump());
  return it->get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  MLA_CHECK(it->is_string(), "config field '{}' must be a string, got {}", key, it->dump());
  return it->get<std::string>();
}

DType parse_torch_dtype(const std::string& s) {
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16" || s == "half") return DType::F16;
  if (s == "float32" || s == "float") return DType::F32;
  fail("config field 'torch_dtype' / 'dtype': unsupported '{}' (bfloat16, float16 or float32)", s);
}

std::string torch_dtype_name(DType t) {
  return t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float32";
}

// `rope_scaling` (checkpoints) or `rope_parameters` (newer transformers, also carrying rope_theta).
void parse_rope(const json& j, ModelConfig& c) {
  const json* rope = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) rope = &*it;
  else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) rope = &*it2;
  c.rope_theta = get_double(j, "rope_theta", 10000.0);
  if (!rope) return;
  MLA_CHECK(rope->is_object(), "config field 'rope_scaling' must be an object, got {}", rope->dump());
  c.rope_theta = get_double(*rope, "rope_theta", c.rope_theta);
  std::string type = get_string(*rope, "rope_type", get_string(*rope, "type", "default"));
  if (type == "default" || type == "none") return;
  MLA_CHECK(type == "yarn", "rope scaling type '{}' is not supported (DeepSeek uses 'yarn')", type);
  RopeScaling r;
  r.factor = get_double(*rope, "factor", 1.0);
  r.original_max_position_embeddings = get_int(*rope, "original_max_position_embeddings", 4096);
  r.beta_fast = get_double(*rope, "beta_fast", 32.0);
  r.beta_slow = get_double(*rope, "beta_slow", 1.0);
  r.mscale = get_double(*rope, "mscale", 1.0);
  r.mscale_all_dim = get_double(*rope, "mscale_all_dim", 0.0);
  c.rope_scaling = r;
}

void parse_quantization(const json& j, ModelConfig& c) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return;
  MLA_CHECK(it->is_object(), "config field 'quantization_config' must be an object");
  QuantizationConfig q;
  q.method = get_string(*it, "quant_method", "");
  MLA_CHECK(q.method == "fp8", "quantization_config.quant_method '{}' is not supported (only block-wise 'fp8')",
            q.method);
  q.format = get_string(*it, "fmt", "e4m3");
  q.activation_scheme = get_string(*it, "activation_scheme", "dynamic");
  if (auto b = it->find("weight_block_size"); b != it->end() && !b->is_null()) {
    MLA_CHECK(b->is_array() && b->size() == 2 && (*b)[0].is_number_integer() && (*b)[1].is_number_integer(),
              "quantization_config.weight_block_size must be [n, k], got {}", b->dump());
    q.block_n = (*b)[0].get<int64_t>();
    q.block_k = (*b)[1].get<int64_t>();
  } else {
    fail("quantization_config: per-tensor fp8 (no weight_block_size) is not supported; expected [128, 128]");
  }
  c.quantization = q;
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
}

static double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(double(qk_head_dim()));
  if (rope_scaling && rope_scaling->mscale_all_dim != 0.0) {
    double m = yarn_get_mscale(rope_scaling->factor, rope_scaling->mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

MoeRouting ModelConfig::moe_routing() const {
  MoeRouting r;
  r.method = topk_method;
  r.scoring = scoring_func;
  r.num_experts = int32_t(n_routed_experts);
  r.top_k = int32_t(num_experts_per_tok);
  r.num_groups = int32_t(n_group);
  r.topk_groups = int32_t(topk_group);
  r.renormalize = norm_topk_prob;
  r.routed_scaling_factor = float(routed_scaling_factor);
  return r;
}

ModelConfig ModelConfig::from_json(const json& j) {
  MLA_CHECK(j.is_object(), "config.json must hold a JSON object");
  ModelConfig c;
  c.model_type = get_string(j, "model_type", "");
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    MLA_CHECK(it->is_array() && !it->empty() && (*it)[0].is_string(),
              "config field 'architectures' must be a list of names, got {}", it->dump());
    c.architecture = (*it)[0].get<std::string>();
  } else if (c.model_type == "deepseek_v3") {
    c.architecture = "DeepseekV3ForCausalLM";
  } else if (c.model_type == "deepseek_v2") {
    c.architecture = "DeepseekV2ForCausalLM";
  }
  MLA_CHECK(c.architecture == "DeepseekV2ForCausalLM" || c.architecture == "DeepseekV3ForCausalLM",
            "unsupported architecture '{}' (model_type '{}'): mlaserve runs DeepseekV2ForCausalLM and "
            "DeepseekV3ForCausalLM",
            c.architecture, c.model_type);
  bool v3 = c.is_v3();
  if (c.model_type.empty()) c.model_type = v3 ? "deepseek_v3" : "deepseek_v2";

  c.vocab_size = get_int(j, "vocab_size", 0);
  c.hidden_size = get_int(j, "hidden_size", 0);
  c.intermediate_size = get_int(j, "intermediate_size", 0);
  c.moe_intermediate_size = get_int(j, "moe_intermediate_size", 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", 0);
  c.first_k_dense_replace = get_int(j, "first_k_dense_replace", 0);
  c.moe_layer_freq = get_int(j, "moe_layer_freq", 1);
  c.num_attention_heads = get_int(j, "num_attention_heads", 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads);
  c.q_lora_rank = get_int(j, "q_lora_rank", 0);
  c.kv_lora_rank = get_int(j, "kv_lora_rank", 0);
  c.qk_nope_head_dim = get_int(j, "qk_nope_head_dim", 0);
  c.qk_rope_head_dim = get_int(j, "qk_rope_head_dim", 0);
  c.v_head_dim = get_int(j, "v_head_dim", 0);
  c.n_routed_experts = get_int(j, "n_routed_experts", 0);
  c.n_shared_experts = get_int(j, "n_shared_experts", 0);
  c.num_experts_per_tok = get_int(j, "num_experts_per_tok", 0);
  c.n_group = get_int(j, "n_group", 1);
  c.topk_group = get_int(j, "topk_group", 1);

  std::string method = get_string(j, "topk_method", v3 ? "noaux_tc" : "greedy");
  if (method == "greedy") c.topk_method = TopkMethod::Greedy;
  else if (method == "group_limited_greedy") c.topk_method = TopkMethod::GroupLimitedGreedy;
  else if (method == "noaux_tc") c.topk_method = TopkMethod::NoauxTc;
  else fail("config field 'topk_method': unknown '{}' (greedy, group_limited_greedy, noaux_tc)", method);
  std::string scoring = get_string(j, "scoring_func", v3 ? "sigmoid" : "softmax");
  if (scoring == "softmax") c.scoring_func = ScoringFunc::Softmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::Sigmoid;
  else fail("config field 'scoring_func': unknown '{}' (softmax, sigmoid)", scoring);

  c.norm_topk_prob = get_bool(j, "norm_topk_prob", false);
  c.routed_scaling_factor = get_double(j, "routed_scaling_factor", 1.0);
  c.num_nextn_predict_layers = get_int(j, "num_nextn_predict_layers", 0);
  c.hidden_act = get_string(j, "hidden_act", "silu");
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 4096);
  parse_rope(j, c);
  c.attention_bias = get_bool(j, "attention_bias", false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  c.bos_token_id = get_int(j, "bos_token_id", 0);
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const auto& e : *it) {
        MLA_CHECK(e.is_number_integer(), "config field 'eos_token_id' must hold integers, got {}", it->dump());
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(get_int(j, "eos_token_id", 1));
    }
  }
  std::string dt = get_string(j, "torch_dtype", get_string(j, "dtype", "bfloat16"));
  c.dtype = parse_torch_dtype(dt);
  parse_quantization(j, c);
  c.validate();
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  MLA_CHECK(in, "cannot open model config '{}'", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("model config '{}' is not valid JSON: {}", path, e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail("model config '{}': {}", path, e.what());
  }
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    MLA_CHECK(v > 0, "config field '{}' must be positive, got {}", name, v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(kv_lora_rank, "kv_lora_rank");
  positive(qk_nope_head_dim, "qk_nope_head_dim");
  positive(qk_rope_head_dim, "qk_rope_head_dim");
  positive(v_head_dim, "v_head_dim");
  positive(moe_layer_freq, "moe_layer_freq");
  positive(max_position_embeddings, "max_position_embeddings");
  MLA_CHECK(q_lora_rank >= 0, "config field 'q_lora_rank' must be null or positive, got {}", q_lora_rank);
  MLA_CHECK(qk_rope_head_dim % 2 == 0, "qk_rope_head_dim must be even for rotary pairs, got {}", qk_rope_head_dim);
  MLA_CHECK(num_key_value_heads == num_attention_heads,
            "MLA has one latent KV shared by all heads: num_key_value_heads ({}) must equal num_attention_heads ({})",
            num_key_value_heads, num_attention_heads);
  MLA_CHECK(hidden_act == "silu", "hidden_act '{}' is not supported (DeepSeek uses silu)", hidden_act);
  MLA_CHECK(!attention_bias, "attention_bias=true is not supported (no DeepSeek checkpoint uses it)");
  MLA_CHECK(rms_norm_eps > 0, "rms_norm_eps must be positive");
  MLA_CHECK(first_k_dense_replace >= 0 && first_k_dense_replace <= num_hidden_layers,
            "first_k_dense_replace ({}) must be between 0 and num_hidden_layers ({})", first_k_dense_replace,
            num_hidden_layers);
  bool has_dense = false, has_moe = false;
  for (int64_t l = 0; l < num_hidden_layers; ++l) (is_moe_layer(l) ? has_moe : has_dense) = true;
  if (has_dense) positive(intermediate_size, "intermediate_size");
  if (has_moe || num_nextn_predict_layers > 0) {
    positive(n_routed_experts, "n_routed_experts");
    positive(moe_intermediate_size, "moe_intermediate_size");
    MLA_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= n_routed_experts,
              "num_experts_per_tok ({}) must be between 1 and n_routed_experts ({})", num_experts_per_tok,
              n_routed_experts);
    MLA_CHECK(n_shared_experts >= 0, "n_shared_experts must not be negative");
    MLA_CHECK(n_group >= 1 && n_routed_experts % n_group == 0,
              "n_routed_experts ({}) must split into n_group ({}) equal groups", n_routed_experts, n_group);
    MLA_CHECK(topk_group >= 1 && topk_group <= n_group, "topk_group ({}) must be between 1 and n_group ({})",
              topk_group, n_group);
    if (topk_method != TopkMethod::Greedy) {
      MLA_CHECK(num_experts_per_tok <= topk_group * (n_routed_experts / n_group),
                "num_experts_per_tok ({}) exceeds the experts in topk_group ({}) groups of {}", num_experts_per_tok,
                topk_group, n_routed_experts / n_group);
    }
    if (topk_method == TopkMethod::NoauxTc) {
      MLA_CHECK(n_routed_experts / n_group >= 2, "noaux_tc ranks groups by their top-2 experts: groups of {} are too small",
                n_routed_experts / n_group);
    }
    MLA_CHECK(routed_scaling_factor > 0, "routed_scaling_factor must be positive");
  }
  MLA_CHECK(num_nextn_predict_layers >= 0, "num_nextn_predict_layers must not be negative");
  if (rope_scaling) {
    MLA_CHECK(rope_scaling->factor >= 1.0, "rope_scaling.factor must be >= 1, got {}", rope_scaling->factor);
    MLA_CHECK(rope_scaling->original_max_position_embeddings > 0,
              "rope_scaling.original_max_position_embeddings must be positive");
    MLA_CHECK(rope_scaling->beta_fast > rope_scaling->beta_slow && rope_scaling->beta_slow > 0,
              "rope_scaling needs beta_fast > beta_slow > 0, got {} and {}", rope_scaling->beta_fast,
              rope_scaling->beta_slow);
  }
  MLA_CHECK(rope_theta > 0, "rope_theta must be positive");
  if (quantization) {
    MLA_CHECK(quantization->format == "e4m3", "quantization fmt '{}' is not supported (e4m3)", quantization->format);
    MLA_CHECK(quantization->activation_scheme == "dynamic",
              "quantization activation_scheme '{}' is not supported (dynamic)", quantization->activation_scheme);
    MLA_CHECK(quantization->block_n > 0 && quantization->block_k > 0, "weight_block_size must be positive");
  }
  for (int64_t e : eos_token_ids)
    MLA_CHECK(e >= 0 && e < vocab_size, "eos_token_id {} is outside the vocabulary ({})", e, vocab_size);
}

nlohmann::json ModelConfig::to_json() const {
  json j = {
      {"architectures", {architecture}}, {"model_type", model_type}, {"vocab_size", vocab_size},
      {"hidden_size", hidden_size}, {"intermediate_size", intermediate_size},
      {"moe_intermediate_size", moe_intermediate_size}, {"num_hidden_layers", num_hidden_layers},
      {"first_k_dense_replace", first_k_dense_replace}, {"moe_layer_freq", moe_layer_freq},
      {"num_attention_heads", num_attention_heads}, {"num_key_value_heads", num_key_value_heads},
      {"q_lora_rank", q_lora_rank ? json(q_lora_rank) : json(nullptr)}, {"kv_lora_rank", kv_lora_rank},
      {"qk_nope_head_dim", qk_nope_head_dim}, {"qk_rope_head_dim", qk_rope_head_dim}, {"v_head_dim", v_head_dim},
      {"n_routed_experts", n_routed_experts}, {"n_shared_experts", n_shared_experts},
      {"num_experts_per_tok", num_experts_per_tok}, {"n_group", n_group}, {"topk_group", topk_group},
      {"topk_method", topk_method_name(topk_method)}, {"scoring_func", scoring_func_name(scoring_func)},
      {"norm_topk_prob", norm_topk_prob}, {"routed_scaling_factor", routed_scaling_factor},
      {"num_nextn_predict_layers", num_nextn_predict_layers}, {"hidden_act", hidden_act},
      {"rms_norm_eps", rms_norm_eps}, {"max_position_embeddings", max_position_embeddings},
      {"rope_theta", rope_theta}, {"attention_bias", attention_bias},
      {"tie_word_embeddings", tie_word_embeddings}, {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_ids.size() == 1 ? json(eos_token_ids[0]) : json(eos_token_ids)},
      {"torch_dtype", torch_dtype_name(dtype)}};
  if (rope_scaling) {
    j["rope_scaling"] = {{"type", rope_scaling->type},
                         {"factor", rope_scaling->factor},
                         {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings},
                         {"beta_fast", rope_scaling->beta_fast},
                         {"beta_slow", rope_scaling->beta_slow},
                         {"mscale", rope_scaling->mscale},
                         {"mscale_all_dim", rope_scaling->mscale_all_dim}};
  }
  if (quantization) {
    j["quantization_config"] = {{"quant_method", quantization->method},
                                {"fmt", quantization->format},
                                {"activation_scheme", quantization->activation_scheme},
                                {"weight_block_size", {quantization->block_n, quantization->block_k}}};
  }
  return j;
}

std::optional<ModelConfig> ModelConfig::preset(const std::string& name) {
  const char* text = model_preset_json(name);
  if (!text) return std::nullopt;
  return from_json(json::parse(text));
}

std::vector<std::string> ModelConfig::preset_names() { return model_preset_names(); }

}  // namespace mlaserve
