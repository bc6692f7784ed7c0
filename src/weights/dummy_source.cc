// --load-format dummy: seeded random weights of the right shapes. Each tensor draws from its own
// stream (seed, name), so values do not depend on load order or thread count. Linear weights are
// scaled by 1/sqrt(fan_in) so activations keep their size through the layers and logits spread.
#include <cmath>
#include <map>

#include "common/error.h"
#include "common/random.h"
#include "kernels/ops.h"
#include "weights/fp8_block_quant.h"
#include "weights/weight_source.h"

namespace mlaserve {

namespace {

class DummySource final : public WeightSource {
 public:
  DummySource(const ModelConfig& c, uint64_t seed, DType dtype, Backend* device)
      : config_(c), seed_(seed), dtype_(dtype), device_(device) {}

  bool has(const std::string&) const override { return true; }

  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    uint64_t stream = hash64(seed_, hash_string(name.c_str()));
    bool fp8 = role == WeightRole::Linear && config_.quantization.has_value();
    float stddev = 1.0f, mean = 0.0f;
    switch (role) {
      case WeightRole::Norm: mean = 1.0f; stddev = 0.1f; break;
      case WeightRole::Embedding: stddev = 1.0f; break;
      case WeightRole::Bias: stddev = 0.1f; break;
      case WeightRole::Linear: case WeightRole::Dense: stddev = 1.0f / std::sqrt(float(shape.back())); break;
    }
    DType dt = role == WeightRole::Bias ? DType::F32 : dtype_;
    if (!fp8 && device_) {
      if (Tensor t = on_device(shape, dt, stream, mean, stddev); t.defined()) return t;
    }
    Tensor values = Tensor::empty(DType::F32, shape);
    float* v = values.data<float>();
    int64_t n = values.numel();
#pragma omp parallel for if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) v[i] = mean + stddev * normal01(stream, uint64_t(i));
    if (fp8) {
      LinearWeight q = quantize_fp8_blocks(values, config_.quantization->block_n, config_.quantization->block_k);
      scales_[name] = q.scale_inv;
      return q.weight;
    }
    if (dt == DType::F32) return values;
    Tensor out = Tensor::empty(dt, shape);
#pragma omp parallel for if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) store_from_f32(out.raw(), dt, size_t(i), v[i]);
    return out;
  }

  Tensor get_scale(const std::string& weight_name, const Shape&, int64_t, int64_t) override {
    auto it = scales_.find(weight_name);
    if (it == scales_.end()) return {};
    Tensor s = it->second;
    scales_.erase(it);
    return s;
  }

  // The tensor made on the device in the dtype the backend's to_backend gives the host one (matrices
  // in its activation dtype, vectors as they are). The host path rounds the fp32 draws to `dt` and
  // to_backend rounds again; the device rounds once, so it is used only where one of those two is a
  // no-op (an F16 matrix, rounded twice, stays on the host). Undefined: make it on the host.
  Tensor on_device(const Shape& shape, DType dt, uint64_t stream, float mean, float stddev) {
    DType dev = shape.size() >= 2 ? device_->activation_dtype() : dt;
    if (dt != dev && dt != DType::F32) return {};
    Tensor t = device_->empty(dev, shape);
    return device_->fill_normal(t, stream, mean, stddev) ? t : Tensor{};
  }

  void finish() override {}
  std::string describe() const override { return fmt::format("dummy weights (seed {})", seed_); }

 private:
  const ModelConfig& config_;
  uint64_t seed_;
  DType dtype_;
  Backend* device_;  // nullptr: host tensors only
  std::map<std::string, Tensor> scales_;
};

}  // namespace

std::unique_ptr<WeightSource> make_dummy_source(const ModelConfig& config, uint64_t seed, DType dtype,
                                                Backend* device) {
  // A backend that keeps host tensors (the CPU) gains nothing from filling them itself.
  if (device && device->device() == Device::CPU) device = nullptr;
  return std::make_unique<DummySource>(config, seed, dtype, device);
}

}  // namespace mlaserve
