// Rotary frequencies of DeepSeek's decoupled RoPE dims, with YaRN context extension.
#pragma once

#include "config/model_config.h"
#include "kernels/ops.h"

namespace mlaserve {

// YaRN: frequencies below the correction range are interpolated by `factor`, those above it
// kept, a linear ramp between; cos/sin are scaled by mscale(factor, mscale) / mscale(factor,
// mscale_all_dim). Without rope_scaling: plain 1 / theta^(2i / dim).
RopeTable make_rope_table(const ModelConfig& config);

}  // namespace mlaserve
