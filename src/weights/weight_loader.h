// Builds ModelWeights from a source by walking the model's structure with the HF tensor names
// of DeepSeek checkpoints (model.layers.N.self_attn.kv_b_proj.weight, ...).
#pragma once

#include "weights/model_weights.h"
#include "weights/weight_source.h"

namespace mlaserve {

ModelWeights load_model_weights(const ModelConfig& config, WeightSource& source);

}  // namespace mlaserve
