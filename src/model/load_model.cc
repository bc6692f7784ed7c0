#include "model/load_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "config/quantization_flags.h"
#include "weights/weight_loader.h"

namespace mlaserve {

namespace fs = std::filesystem;

ModelConfig load_model_config(const std::string& model) {
  if (fs::is_directory(model)) {
    fs::path cfg = fs::path(model) / "config.json";
    MLA_CHECK(fs::exists(cfg), "model folder '{}' has no config.json", model);
    return ModelConfig::from_file(cfg.string());
  }
  if (auto preset = ModelConfig::preset(model)) return *preset;
  fail("--model '{}' is neither a checkpoint folder nor a preset ({})", model,
       fmt::join(ModelConfig::preset_names(), ", "));
}

static DType parse_dtype_flag(const std::string& s, DType fallback) {
  if (s == "auto") return fallback;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  if (s == "float16" || s == "half") return DType::F16;
  if (s == "float32" || s == "float") return DType::F32;
  fail("--dtype '{}': expected auto, bfloat16, float16 or float32", s);
}

LoadedModel load_model(const ModelLoadOptions& o) {
  LoadedModel m{load_model_config(o.model), {}, fs::is_directory(o.model) ? o.model : ""};
  std::string format = o.load_format;
  MLA_CHECK(format == "auto" || format == "safetensors" || format == "dummy",
            "--load-format '{}': expected auto, safetensors or dummy", format);
  if (m.folder.empty()) {
    MLA_CHECK(format != "safetensors", "--model '{}' is a preset: it has no weights to read (use --load-format dummy)",
              o.model);
    format = "dummy";
  } else if (format == "auto") {
    format = "safetensors";
  }
  if (o.num_layers > 0) {  // shapes too big to hold whole (bench-one-batch --num-layers)
    MLA_CHECK(format == "dummy", "--num-layers needs --load-format dummy");
    MLA_CHECK(o.num_layers <= m.config.num_hidden_layers, "--num-layers {} exceeds the model's {}", o.num_layers,
              m.config.num_hidden_layers);
    m.config.num_hidden_layers = o.num_layers;
    m.config.first_k_dense_replace = std::min(m.config.first_k_dense_replace, m.config.num_hidden_layers);
    m.config.num_nextn_predict_layers = 0;
  }
  check_quantization_flag(o.quantization);
  // The dummy source reads its config while weights load: it keeps the one without --quantization,
  // so that --quantization fp8 quantizes the very weights a run without it uses.
  const ModelConfig stored = m.config;
  std::unique_ptr<WeightSource> source =
      format == "dummy" ? make_dummy_source(stored, o.seed, parse_dtype_flag(o.dtype, stored.dtype), o.device)
                        : open_checkpoint_source(m.folder);
  if (o.quantization == "fp8") {
    if (!m.config.quantization) m.config.quantization = QuantizationConfig{};
    source = make_fp8_quantizing_source(std::move(source), m.config.quantization->block_n,
                                        m.config.quantization->block_k, o.device);
  }
  m.weights = load_model_weights(m.config, *source);
  spdlog::info("model: {} layers, hidden {}, {} experts, {:.2f} GB of weights", m.config.num_hidden_layers,
               m.config.hidden_size, m.config.n_routed_experts, double(m.weights.total_bytes) / 1e9);
  return m;
}

}  // namespace mlaserve
