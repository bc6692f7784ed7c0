// Dummy weights made on the device: CudaBackend::fill_normal against the host's normal01, the
// dummy source's device tensors against the host ones moved over, and a tiny model both ways.
#include "gpu_test_util.h"

#include <algorithm>

#include "cache/kv_pool.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "weights/weight_loader.h"

namespace mlaserve {
namespace {

using namespace gputest;

// How many elements of two host tensors differ, and whether all are within 1 ulp of their 16-bit
// dtype (F32: 1e-6 relative): what host libm and CUDA's double log / cos may leave after rounding.
struct Diff {
  int64_t differing = 0;
  bool within_ulp = true;
};
Diff compare(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return {want.numel(), false};
  DType dt = want.dtype();
  Diff d;
  for (int64_t i = 0; i < want.numel(); ++i) {
    float g = load_as_f32(got.raw(), dt, size_t(i)), w = load_as_f32(want.raw(), dt, size_t(i));
    if (g == w) continue;
    d.differing++;
    if (dt == DType::F32) {
      d.within_ulp &= std::fabs(g - w) <= 1e-6f * std::fabs(w);
    } else {  // 16-bit: adjacent bit patterns of one sign
      int a = got.data<uint16_t>()[i], b = want.data<uint16_t>()[i];
      d.within_ulp &= (a >> 15) == (b >> 15) && std::abs(a - b) == 1;
    }
  }
  return d;
}

TEST(FillNormal, GivesTheHostValues) {
  cuda::CudaBackend gpu;
  uint64_t seed = fresh_seed();
  // Odd sizes, and one past the launcher's largest grid (8192 x 256) so the grid-stride loop turns.
  const Shape shapes[] = {{1}, {7}, {129, 257}, {3, 5, 7}, {3000017}};
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    for (const Shape& shape : shapes) {
      for (auto [mean, stddev] : {std::pair{0.0f, 0.11396058f}, std::pair{1.0f, 0.1f}}) {
        uint64_t stream = hash64(seed, uint64_t(shape.back()));
        Tensor t = poisoned(gpu, dt, shape);
        CUDA_CHECK(cudaDeviceSynchronize());  // the poison (legacy stream) lands before the fill
        ASSERT_TRUE(gpu.fill_normal(t, stream, mean, stddev));
        Tensor want = Tensor::empty(dt, shape);
        for (int64_t i = 0; i < want.numel(); ++i)
          store_from_f32(want.raw(), dt, size_t(i), mean + stddev * normal01(stream, uint64_t(i)));
        Diff d = compare(gpu.to_host(t), want);
        EXPECT_TRUE(d.within_ulp) << dtype_name(dt) << " " << shape_str(shape) << " seed " << seed;
        EXPECT_LE(double(d.differing), 1e-3 * double(want.numel())) << dtype_name(dt) << " " << shape_str(shape);
      }
    }
  }
}

// Records what a source hands out, in order.
class RecordingSource final : public WeightSource {
 public:
  explicit RecordingSource(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  std::vector<std::pair<std::string, Tensor>> got;
  bool has(const std::string& name) const override { return inner_->has(name); }
  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    got.push_back({name, inner_->get(name, shape, role)});
    return got.back().second;
  }
  Tensor get_scale(const std::string& n, const Shape& s, int64_t bn, int64_t bk) override {
    return inner_->get_scale(n, s, bn, bk);
  }
  void finish() override { inner_->finish(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::unique_ptr<WeightSource> inner_;
};

TEST(FillNormal, DummySourceOnTheDeviceEqualsTheHostOneMoved) {
  cuda::CudaBackend gpu;
  ModelConfig config = *ModelConfig::preset("deepseek-v3-tiny");
  for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
    RecordingSource host(make_dummy_source(config, 5, dt)), dev(make_dummy_source(config, 5, dt, &gpu));
    load_model_weights(config, host);
    load_model_weights(config, dev);
    ASSERT_EQ(host.got.size(), dev.got.size());
    int64_t on_device = 0, differing = 0, total = 0;
    for (size_t i = 0; i < host.got.size(); ++i) {
      const auto& [name, h] = host.got[i];
      const Tensor& d = dev.got[i].second;
      on_device += d.device() == Device::CUDA;
      Diff diff = compare(gpu.to_host(gpu.to_backend(d)), gpu.to_host(gpu.to_backend(h)));
      EXPECT_TRUE(diff.within_ulp) << name << " " << dtype_name(dt);
      differing += diff.differing;
      total += h.numel();
    }
    std::printf("[dummy on device, %s] %lld of %zu tensors made on the device; %lld of %lld values differ\n",
                std::string(dtype_name(dt)).c_str(), (long long)on_device, host.got.size(), (long long)differing,
                (long long)total);
    EXPECT_LE(double(differing), 1e-3 * double(total));
    // F16 matrices round twice on the host path (F16, then BF16 in to_backend): made there.
    EXPECT_EQ(on_device == int64_t(host.got.size()), dt != DType::F16) << dtype_name(dt);
    EXPECT_GT(on_device, 0);
  }
}

TEST(FillNormal, TinyModelFromDeviceDummyWeightsMatchesHostDummyWeights) {
  cuda::CudaBackend gpu;
  ModelLoadOptions o{.model = "deepseek-v3-tiny", .load_format = "dummy", .seed = 1};
  LoadedModel a = load_model(o);
  o.device = &gpu;
  LoadedModel b = load_model(o);
  EXPECT_EQ(b.weights.embed.device(), Device::CUDA);
  EXPECT_EQ(b.weights.layers[1].attn.kv_b_proj.weight.device(), Device::CUDA);  // split_kv_b reads it back
  EXPECT_EQ(b.weights.total_bytes, a.weights.total_bytes);
  DeepseekModel host_made(a.config, std::move(a.weights), gpu), dev_made(b.config, std::move(b.weights), gpu);
  std::vector<int32_t> ids, slots;
  uint64_t seed = fresh_seed();
  for (int i = 0; i < 37; ++i) ids.push_back(int32_t(100 + hash64(seed, i) % 90000));
  for (int i = 0; i < 38; ++i) slots.push_back(i);
  const ModelConfig& c = host_made.config();
  Tensor logits[2];
  DeepseekModel* models[2] = {&host_made, &dev_made};
  for (int m = 0; m < 2; ++m) {
    KvPool kv(gpu, c.num_hidden_layers, 40, c.kv_cache_dim(), gpu.activation_dtype());
    // A prefill (MHA form) and one decode step (absorbed form, W_UK / W_UV from kv_b_proj).
    gpu.to_host(models[m]->forward(make_forward_batch({{ids, {slots.begin(), slots.end() - 1}, true}}), kv));
    logits[m] = gpu.to_host(models[m]->forward(make_forward_batch({{{7}, slots}}), kv));
  }
  double err = rel_l2(logits[1], logits[0]);
  std::printf("[dummy on device] decode logits vs host-made weights: rel L2 %.3g (seed %llu)\n", err,
              (unsigned long long)seed);
  EXPECT_LE(err, kBf16Tolerance);
  const float* l0 = logits[0].data<float>();
  const float* l1 = logits[1].data<float>();
  EXPECT_EQ(std::max_element(l0, l0 + c.vocab_size) - l0, std::max_element(l1, l1 + c.vocab_size) - l1);
}

}  // namespace
}  // namespace mlaserve
