// Where weights come from: a checkpoint folder or seeded random numbers (--load-format dummy).
// The loader asks a source for each tensor by its HF name and shape; the source checks and
// supplies it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/tensor.h"
#include "config/model_config.h"

namespace mlaserve {

class Backend;

enum class WeightRole : uint8_t {
  Norm,        // RMSNorm gain
  Embedding,   // token table
  Linear,      // a linear layer's matrix (FP8 block-scaled in FP8 checkpoints)
  Dense,       // a matrix that is never quantized (router, lm_head, eh_proj)
  Bias,        // e_score_correction_bias
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The tensor `name`, checked against `shape`; errors name the tensor and the file.
  virtual Tensor get(const std::string& name, const Shape& shape, WeightRole role) = 0;
  // FP8 block scales of `weight_name` (…weight_scale_inv), or an undefined Tensor.
  virtual Tensor get_scale(const std::string& weight_name, const Shape& weight_shape, int64_t block_n,
                           int64_t block_k) = 0;
  // The calibrated FP8 KV cache scale of an attention layer (`attention_prefix`.k_scale: MLA caches
  // one latent, so there is no v_scale), if the source has one.
  virtual std::optional<float> kv_cache_scale(const std::string& attention_prefix) { return std::nullopt; }
  // Called once all tensors were fetched: fails on tensors nobody asked for.
  virtual void finish() = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<WeightSource> open_checkpoint_source(const std::string& dir);
// dtype: what unquantized weights are stored in; FP8 linears when config.quantization is set (the
// `dtype` ones through make_fp8_quantizing_source).
// device (optional): a backend that fills tensors in place (Backend::fill_normal) gets them made
// there, in the dtype its to_backend would give, with the same values; FP8 linears are made and
// quantized there only where that dtype is `dtype`.
std::unique_ptr<WeightSource> make_dummy_source(const ModelConfig& config, uint64_t seed, DType dtype,
                                                Backend* device = nullptr);
// --quantization fp8: `inner`'s Linear-role weights that are not FP8 yet come out as e4m3 with
// block_n x block_k scales (quantize_fp8_blocks), as in DeepSeek-V3's FP8 checkpoints; every
// other tensor, and weights already in FP8, pass through.
// Weights `inner` made on a device (dummy ones) are quantized there when `device` can
// (Backend::quantize_fp8_blocks), else on the host.
std::unique_ptr<WeightSource> make_fp8_quantizing_source(std::unique_ptr<WeightSource> inner, int64_t block_n,
                                                         int64_t block_k, Backend* device = nullptr);

}  // namespace mlaserve
