// Resolves --model (a checkpoint folder or a preset name) and --load-format into a config and
// its weights.
#pragma once

#include <string>

#include "config/model_config.h"
#include "weights/model_weights.h"

namespace mlaserve {

class Backend;

struct ModelLoadOptions {
  std::string model;                 // folder with config.json, or a preset name
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string dtype = "auto";        // dummy weights: auto (config's) | bfloat16 | float16 | float32
  uint64_t seed = 0;                 // dummy weights
  std::string quantization{};        // "" (as stored) | fp8: linear weights to FP8 128x128 blocks at load
  // Dummy weights are made on this backend when it can (see make_dummy_source), and --quantization
  // fp8 quantizes them there.
  Backend* device = nullptr;
  int64_t num_layers = 0;  // > 0: the model cut to its first layers, no MTP (dummy weights only)
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::string folder;  // empty for presets
};

LoadedModel load_model(const ModelLoadOptions& options);
// The config alone (no weights): for validation and planning.
ModelConfig load_model_config(const std::string& model);

}  // namespace mlaserve
