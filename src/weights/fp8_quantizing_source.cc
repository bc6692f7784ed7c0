// --quantization fp8: a WeightSource over another that quantizes linear weights as they are read.
#include <map>

#include "common/error.h"
#include "kernels/ops.h"
#include "weights/fp8_block_quant.h"
#include "weights/weight_source.h"

namespace mlaserve {

namespace {

class Fp8QuantizingSource final : public WeightSource {
 public:
  Fp8QuantizingSource(std::unique_ptr<WeightSource> inner, int64_t block_n, int64_t block_k, Backend* device)
      : inner_(std::move(inner)), block_n_(block_n), block_k_(block_k), device_(device) {}

  bool has(const std::string& name) const override { return inner_->has(name); }

  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    Tensor t = inner_->get(name, shape, role);
    if (role != WeightRole::Linear || t.dtype() == DType::F8_E4M3) return t;
    LinearWeight q;
    const bool on_device = t.device() != Device::CPU && device_;
    if (!on_device || !device_->quantize_fp8_blocks(t, block_n_, block_k_, q))
      q = quantize_fp8_blocks(on_device ? device_->to_host(t) : t, block_n_, block_k_);
    scales_[name] = q.scale_inv;
    return q.weight;
  }

  Tensor get_scale(const std::string& weight_name, const Shape& weight_shape, int64_t block_n,
                   int64_t block_k) override {
    auto it = scales_.find(weight_name);
    if (it == scales_.end()) return inner_->get_scale(weight_name, weight_shape, block_n, block_k);
    MLA_CHECK(block_n == block_n_ && block_k == block_k_,
              "'{}' was quantized in {}x{} blocks but is read as {}x{}", weight_name, block_n_, block_k_, block_n,
              block_k);
    Tensor s = it->second;
    scales_.erase(it);
    return s;
  }

  std::optional<float> kv_cache_scale(const std::string& attention_prefix) override {
    return inner_->kv_cache_scale(attention_prefix);
  }

  void finish() override { inner_->finish(); }

  std::string describe() const override {
    return fmt::format("{}, linear weights quantized to FP8 in {}x{} blocks", inner_->describe(), block_n_, block_k_);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  int64_t block_n_, block_k_;
  Backend* device_;                       // where weights made on a device are quantized, if it can
  std::map<std::string, Tensor> scales_;  // of weights quantized here, until the loader asks for them
};

}  // namespace

std::unique_ptr<WeightSource> make_fp8_quantizing_source(std::unique_ptr<WeightSource> inner, int64_t block_n,
                                                         int64_t block_k, Backend* device) {
  return std::make_unique<Fp8QuantizingSource>(std::move(inner), block_n, block_k, device);
}

}  // namespace mlaserve
