// --load-format dummy: seeded random weights of the right shapes. Each tensor draws from its own
// stream (seed, name), so values do not depend on load order or thread count. Linear weights are
// scaled by 1/sqrt(fan_in) so activations keep their size through the layers and logits spread.
#include <cmath>

#include "common/error.h"
#include "common/random.h"
#include "kernels/ops.h"
#include "weights/weight_source.h"

namespace mlaserve {

namespace {

class DummySource final : public WeightSource {
 public:
  DummySource(uint64_t seed, DType dtype, Backend* device, bool linears_on_device)
      : seed_(seed), dtype_(dtype), device_(device), linears_on_device_(linears_on_device) {}

  bool has(const std::string&) const override { return true; }

  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    uint64_t stream = hash64(seed_, hash_string(name.c_str()));
    float stddev = 1.0f, mean = 0.0f;
    switch (role) {
      case WeightRole::Norm: mean = 1.0f; stddev = 0.1f; break;
      case WeightRole::Embedding: stddev = 1.0f; break;
      case WeightRole::Bias: stddev = 0.1f; break;
      case WeightRole::Linear: case WeightRole::Dense: stddev = 1.0f / std::sqrt(float(shape.back())); break;
    }
    DType dt = role == WeightRole::Bias ? DType::F32 : dtype_;
    if (device_ && (role != WeightRole::Linear || linears_on_device_)) {
      if (Tensor t = on_device(shape, dt, stream, mean, stddev); t.defined()) return t;
    }
    Tensor values = Tensor::empty(DType::F32, shape);
    float* v = values.data<float>();
    int64_t n = values.numel();
#pragma omp parallel for if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) v[i] = mean + stddev * normal01(stream, uint64_t(i));
    if (dt == DType::F32) return values;
    Tensor out = Tensor::empty(dt, shape);
#pragma omp parallel for if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) store_from_f32(out.raw(), dt, size_t(i), v[i]);
    return out;
  }

  Tensor get_scale(const std::string&, const Shape&, int64_t, int64_t) override { return {}; }

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
  uint64_t seed_;
  DType dtype_;
  Backend* device_;  // nullptr: host tensors only
  bool linears_on_device_;
};

}  // namespace

std::unique_ptr<WeightSource> make_dummy_source(const ModelConfig& config, uint64_t seed, DType dtype,
                                                Backend* device) {
  // A backend that keeps host tensors (the CPU) gains nothing from filling them itself.
  if (device && device->device() == Device::CPU) device = nullptr;
  if (!config.quantization) return std::make_unique<DummySource>(seed, dtype, device, true);
  // A natively FP8 config (V3, R1): its linears are the dummy weights of `dtype`, quantized as
  // --quantization fp8 would, on the device where it holds them in `dtype` (a V3 MoE layer's 11 G
  // weights took minutes on the host); elsewhere host and device would round them differently.
  const bool linears_on_device = device && device->activation_dtype() == dtype;
  return make_fp8_quantizing_source(std::make_unique<DummySource>(seed, dtype, device, linears_on_device),
                                    config.quantization->block_n, config.quantization->block_k, device);
}

}  // namespace mlaserve
