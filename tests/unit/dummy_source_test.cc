// --load-format dummy: the host values are pinned (name -> stream, role -> mean and stddev, dtype),
// a CPU backend leaves the host path as it is, and a backend that fills in place gets exactly the
// tensors its to_backend would have made of the host ones (FP8 linears and F16 matrices stay on the host).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/random.h"
#include "kernels/ops.h"
#include "weights/fp8_block_quant.h"
#include "weights/weight_source.h"

namespace mlaserve {
namespace {

const ModelConfig& tiny() {
  static const ModelConfig c = *ModelConfig::preset("deepseek-v3-tiny");
  return c;
}

struct Case {
  const char* name;
  Shape shape;
  WeightRole role;
};
const std::vector<Case> kCases = {
    {"model.layers.0.input_layernorm.weight", {256}, WeightRole::Norm},
    {"model.embed_tokens.weight", {17, 256}, WeightRole::Embedding},
    {"model.layers.0.mlp.gate_proj.weight", {130, 77}, WeightRole::Linear},
    {"lm_head.weight", {33, 256}, WeightRole::Dense},
    {"model.layers.1.mlp.gate.e_score_correction_bias", {16}, WeightRole::Bias},
};

TEST(DummySource, HostValuesArePinned) {
  // normal01 itself: bits from before it became a device function too.
  uint64_t s = hash64(7, hash_string("model.layers.0.mlp.gate_proj.weight"));
  const std::pair<uint64_t, uint32_t> pinned[] = {{0, 0xbf13f78du}, {1, 0xbfc72dc6u}, {1000003, 0x3eb91e89u}};
  for (auto [i, bits] : pinned) {
    float f = normal01(s, i);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    EXPECT_EQ(u, bits) << "normal01 at " << i;
  }
  auto src = make_dummy_source(tiny(), 7, DType::BF16);
  for (const Case& c : kCases) {
    Tensor t = src->get(c.name, c.shape, c.role);
    float mean = c.role == WeightRole::Norm ? 1.0f : 0.0f;
    float stddev = c.role == WeightRole::Norm || c.role == WeightRole::Bias ? 0.1f
                   : c.role == WeightRole::Embedding                       ? 1.0f
                                                                           : 1.0f / std::sqrt(float(c.shape.back()));
    EXPECT_EQ(t.device(), Device::CPU);
    EXPECT_EQ(t.dtype(), c.role == WeightRole::Bias ? DType::F32 : DType::BF16) << c.name;
    ASSERT_EQ(t.shape(), c.shape) << c.name;
    uint64_t stream = hash64(7, hash_string(c.name));
    for (int64_t i = 0; i < t.numel(); ++i) {
      Tensor want = Tensor::empty(t.dtype(), {1});
      store_from_f32(want.raw(), t.dtype(), 0, mean + stddev * normal01(stream, uint64_t(i)));
      ASSERT_EQ(load_as_f32(t.raw(), t.dtype(), size_t(i)), load_as_f32(want.raw(), t.dtype(), 0)) << c.name << " " << i;
    }
  }
}

TEST(DummySource, CpuBackendKeepsTheHostPath) {
  auto cpu = make_cpu_backend();
  auto plain = make_dummy_source(tiny(), 3, DType::BF16), with = make_dummy_source(tiny(), 3, DType::BF16, cpu.get());
  for (const Case& c : kCases) {
    Tensor a = plain->get(c.name, c.shape, c.role), b = with->get(c.name, c.shape, c.role);
    ASSERT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(b.device(), Device::CPU);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << c.name;
  }
}

// A "device" whose memory is host memory, filling as the CUDA kernel does: only what the dummy
// source asks of a device backend is implemented.
class FillingBackend final : public Backend {
 public:
  int fills = 0;
  Device device() const override { return Device::CUDA; }
  const char* name() const override { return "filling"; }
  DType activation_dtype() const override { return DType::BF16; }
  Tensor empty(DType dtype, Shape shape) override {
    Tensor h = Tensor::empty(dtype, shape);
    return Tensor::wrap(h.raw(), dtype, std::move(shape), h.owner(), Device::CUDA);
  }
  bool fill_normal(Tensor& t, uint64_t stream, float mean, float stddev) override {
    ++fills;
    for (int64_t i = 0; i < t.numel(); ++i)
      store_from_f32(t.raw(), t.dtype(), size_t(i), mean + stddev * normal01(stream, uint64_t(i)));
    return true;
  }
  // As CudaBackend's: the host's codes and scales, left on the "device".
  bool quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k, LinearWeight& out) override {
    out = mlaserve::quantize_fp8_blocks(on_host(w), block_n, block_k);
    out.weight = on_device(out.weight);
    out.scale_inv = on_device(out.scale_inv);
    return true;
  }
  Tensor to_host(const Tensor& t) override { return on_host(t); }
  // Not called by the dummy source.
  void embedding(const Tensor&, const Tensor&, Tensor&) override { none(); }
  void rmsnorm(const Tensor&, const Tensor&, float, Tensor&) override { none(); }
  void add_rmsnorm(const Tensor&, Tensor&, const Tensor&, float, Tensor&) override { none(); }
  void linear(const Tensor&, const LinearWeight&, Tensor&) override { none(); }
  void silu_and_mul(const Tensor&, const Tensor&, Tensor&) override { none(); }
  void add(Tensor&, const Tensor&) override { none(); }
  void rope(Tensor&, const Tensor&, const RopeTable&) override { none(); }
  void kv_store(const Tensor&, const Tensor&, Tensor&, float) override { none(); }
  void kv_gather(const Tensor&, float, const Tensor&, Tensor&) override { none(); }
  void mla_prefill(const Tensor&, const Tensor&, const Tensor&, const AttentionMetadata&, float, Tensor&) override {
    none();
  }
  void mla_decode(const Tensor&, const Tensor&, float, const AttentionMetadata&, float, Tensor&) override { none(); }
  void mla_absorb_q(const Tensor&, const Tensor&, const Tensor&, Tensor&) override { none(); }
  void mla_absorb_out(const Tensor&, const Tensor&, Tensor&) override { none(); }
  void moe_route(const Tensor&, const Tensor&, const MoeRouting&, Tensor&, Tensor&) override { none(); }
  void moe_experts(const Tensor&, const Tensor&, const Tensor&, const std::vector<GatedMlpWeights>&,
                   Tensor&) override {
    none();
  }
  void sample(const Tensor&, const std::vector<SamplingParams>&, Tensor&) override { none(); }

 private:
  [[noreturn]] static void none() { fail("FillingBackend runs no ops"); }
  static Tensor on_host(const Tensor& t) { return Tensor::wrap(t.raw(), t.dtype(), t.shape(), t.owner(), Device::CPU); }
  static Tensor on_device(const Tensor& t) {
    return Tensor::wrap(t.raw(), t.dtype(), t.shape(), t.owner(), Device::CUDA);
  }
};

TEST(DummySource, DeviceTensorsAreWhatToBackendWouldMake) {
  for (bool fp8 : {false, true}) {
    ModelConfig config = tiny();
    if (fp8) config.quantization = QuantizationConfig{};
    for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
      FillingBackend dev;
      auto host = make_dummy_source(config, 11, dt), on_dev = make_dummy_source(config, 11, dt, &dev);
      for (const Case& c : kCases) {
        SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + (fp8 ? " fp8" : ""));
        Tensor h = host->get(c.name, c.shape, c.role), d = on_dev->get(c.name, c.shape, c.role);
        bool matrix = c.shape.size() >= 2;
        if (fp8 && c.role == WeightRole::Linear) {
          // Quantized where made: on the device only where it holds the weight in `dt`.
          EXPECT_EQ(d.device(), dt == DType::BF16 ? Device::CUDA : Device::CPU);
          ASSERT_EQ(d.dtype(), DType::F8_E4M3);
          ASSERT_EQ(h.dtype(), DType::F8_E4M3);
          EXPECT_EQ(std::memcmp(d.raw(), h.raw(), h.nbytes()), 0);
          continue;
        }
        if (matrix && dt == DType::F16) {
          EXPECT_EQ(d.device(), Device::CPU);
          ASSERT_EQ(d.dtype(), h.dtype());
          EXPECT_EQ(std::memcmp(d.raw(), h.raw(), h.nbytes()), 0);
          continue;
        }
        // CudaBackend::to_backend: float matrices as BF16, vectors in their own dtype.
        EXPECT_EQ(d.device(), Device::CUDA);
        ASSERT_EQ(d.dtype(), matrix ? DType::BF16 : h.dtype());
        ASSERT_EQ(d.shape(), h.shape());
        for (int64_t i = 0; i < h.numel(); ++i) {
          float want = load_as_f32(h.raw(), h.dtype(), size_t(i));
          if (matrix) want = bf16_to_f32(f32_to_bf16(want));
          ASSERT_EQ(load_as_f32(d.raw(), d.dtype(), size_t(i)), want) << i;
        }
      }
      if (fp8) {
        EXPECT_TRUE(on_dev->get_scale("model.layers.0.mlp.gate_proj.weight", {130, 77}, 128, 128).defined());
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve
