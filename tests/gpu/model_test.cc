// The whole DeepSeek model on the CUDA backend: against the HF fp32 fixture with the real MLA
// widths, and against the CPU reference backend on the tiny presets (dummy BF16 weights).
#include "gpu_test_util.h"

#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "../tools/logit_agreement.h"
#include "cache/kv_pool.h"
#include "config/model_presets.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

using namespace gputest;

std::string fixture(const std::string& name) { return std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

// Logits of every position of `ids` through `model` (a prefill in the given form, then the
// continuation `decode` one token at a time): rows of all positions.
// The cache is in the backend's activation dtype unless kv_dtype says otherwise.
Tensor run_model(DeepseekModel& model, Backend& backend, const std::vector<int32_t>& ids,
                 const std::vector<int32_t>& decode, AttentionForm form, std::optional<DType> kv_dtype = {}) {
  const ModelConfig& c = model.config();
  int64_t total = int64_t(ids.size() + decode.size());
  KvPool kv(backend, c.num_hidden_layers, total + 5, c.kv_cache_dim(), kv_dtype.value_or(backend.activation_dtype()));
  std::vector<int32_t> slots(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) slots[size_t(i)] = int32_t(total + 4 - i);  // scattered, reversed, distinct
  Tensor out = Tensor::empty(DType::F32, {total, c.vocab_size});
  Tensor pre = backend.to_host(model.forward(
      make_forward_batch({{ids, {slots.begin(), slots.begin() + int64_t(ids.size())}, true}}, form), kv));
  std::copy_n(pre.data<float>(), pre.numel(), out.data<float>());
  for (size_t i = 0; i < decode.size(); ++i) {
    size_t len = ids.size() + i + 1;
    Tensor step = backend.to_host(model.forward(make_forward_batch({{{decode[i]}, {slots.begin(), slots.begin() + int64_t(len)}}}), kv));
    std::copy_n(step.data<float>(), step.numel(), out.data<float>() + (len - 1) * c.vocab_size);
  }
  return out;
}

// Per-row relative L2 errors of logits [R, V], sorted.
std::vector<double> row_errors(const Tensor& got, const Tensor& want) {
  int64_t R = want.size(0), V = want.size(1);
  std::vector<double> e;
  for (int64_t r = 0; r < R; ++r) {
    double num = 0, den = 0;
    for (int64_t v = 0; v < V; ++v) {
      double g = got.data<float>()[r * V + v], w = want.data<float>()[r * V + v];
      num += (g - w) * (g - w);
      den += w * w;
    }
    e.push_back(std::isnan(num) ? INFINITY : std::sqrt(num / den));
  }
  std::sort(e.begin(), e.end());
  return e;
}

// BF16 activations against an fp32 reference: most rows agree to about 1e-2; a random-weight MoE
// model amplifies the rare rows where a near-tie in expert routing flips, so the bound is on the
// median row and on the winning token, not on the worst row.
TEST(CudaModel, MatchesTransformersOnTheRealMlaWidthsFixture) {
  std::string dir = fixture("v3_mla_dims");
  std::ifstream in(dir + "/reference.json");
  auto ref = nlohmann::json::parse(in);
  auto logits = SafetensorsFile::open(dir + "/reference.safetensors");
  cuda::CudaBackend gpu;
  LoadedModel m = load_model({.model = dir});
  DeepseekModel model(m.config, std::move(m.weights), gpu);
  double worst = 0;
  int64_t agree = 0, decided = 0;
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    auto ids = ref["prompts"][p].get<std::vector<int32_t>>();
    Tensor want = logits->tensor("logits_" + std::to_string(p));
    for (AttentionForm form : {AttentionForm::Mha, AttentionForm::Absorbed}) {
      Tensor got = run_model(model, gpu, ids, {}, form);
      std::vector<double> rows = row_errors(got, want);
      double median = rows[rows.size() / 2];
      worst = std::max(worst, rel_l2(got, want));
      std::printf("  prompt %zu (%zu tokens) form %d: median row error %.3g, worst row %.3g, all rows %.3g\n", p,
                  ids.size(), int(form), median, rows.back(), rel_l2(got, want));
      EXPECT_LE(median, 4e-2) << "prompt " << p << " form " << int(form);
      // Where the reference's best token leads by a clear margin, ours must pick it too.
      int64_t V = want.size(1);
      for (int64_t r = 0; r < want.size(0); ++r) {
        const float* w = want.data<float>() + r * V;
        const float* g = got.data<float>() + r * V;
        std::vector<int64_t> idx(static_cast<size_t>(V));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](int64_t a, int64_t b) { return w[a] > w[b]; });
        if (w[idx[0]] - w[idx[1]] < 0.1f) continue;
        decided++;
        agree += int64_t(std::max_element(g, g + V) - g) == idx[0];
      }
    }
  }
  std::printf("[cuda model v3_mla_dims] worst logits rel L2 vs transformers fp32: %.3g; argmax agreement %lld/%lld\n",
              worst, (long long)agree, (long long)decided);
  EXPECT_GE(double(agree), 0.95 * double(decided));
}

TEST(CudaModel, MatchesTheCpuBackendOnTinyPresets) {
  for (std::string preset : {"deepseek-v3-tiny", "deepseek-v2-lite-tiny"}) {
    cuda::CudaBackend gpu;
    auto cpu = make_cpu_backend();
    // The weights are pinned (seed 1): how far BF16 moves a whole random model depends on its
    // seed; the prompt is fresh every run, and the kernels are tested on fresh inputs op by op.
    ModelLoadOptions o{.model = preset, .load_format = "dummy", .seed = 1};
    uint64_t prompt_seed = fresh_seed();
    LoadedModel a = load_model(o), b = load_model(o);
    DeepseekModel on_gpu(a.config, std::move(a.weights), gpu), on_cpu(b.config, std::move(b.weights), *cpu);
    std::vector<int32_t> ids, decode;
    for (int i = 0; i < 37; ++i) ids.push_back(int32_t(100 + hash64(prompt_seed, i) % 90000));
    for (int i = 0; i < 5; ++i) decode.push_back(int32_t(100 + hash64(prompt_seed, 100 + i) % 90000));
    Tensor want = run_model(on_cpu, *cpu, ids, decode, AttentionForm::Auto);
    Tensor got = run_model(on_gpu, gpu, ids, decode, AttentionForm::Auto);
    std::vector<double> rows = row_errors(got, want);
    double median = rows[rows.size() / 2];
    std::printf("[cuda model %s] vs the CPU backend: median row error %.3g, worst row %.3g, all %.3g\n",
                preset.c_str(), median, rows.back(), rel_l2(got, want));
    // One flipped near-tie expert choice in an early token spreads through attention to later rows.
    // The CPU reference itself, with every op's output rounded to BF16, moves these logits by a
    // median of 1.4-9.0% (V3 tiny, sigmoid group routing) and 0.9-1.0% (V2-Lite tiny) over four
    // prompts: the bounds sit just above what BF16 activations alone do.
    EXPECT_LE(median, preset == "deepseek-v3-tiny" ? 0.12 : 0.03) << preset;
  }
}

// Every linear weight quantized at load (--quantization fp8): W8A8 linears and the FP8 grouped
// expert GEMM on the GPU, W8A8 on the CPU. These random tiny models are chaotic at FP8's rounding
// (tests/unit/fp8_model_test.cc): a value on the edge of an e4m3 step rounds one way from the GPU's
// BF16 activations and the other from the CPU's fp32 ones, and kv_a (576 rows, not whole blocks)
// runs dequantized on the GPU. So the GPU's FP8 logits are held to the distance FP8 itself puts
// between the CPU's FP8 and unquantized models; a wrong scale or layout gives unrelated rows.
TEST(CudaModel, Fp8StaysAsCloseToTheCpuBackendAsFp8ToUnquantized) {
  // v3_mla_dims has DeepSeek's MLA widths: its decode steps run the FP8 BMM of W_UK / W_UV.
  for (std::string preset :
       {std::string("deepseek-v3-tiny"), std::string("deepseek-v2-lite-tiny"), fixture("v3_mla_dims")}) {
    cuda::CudaBackend gpu;
    auto cpu = make_cpu_backend();
    ModelLoadOptions o{.model = preset,
                       .load_format = preset.find('/') == std::string::npos ? "dummy" : "auto",
                       .seed = 1,
                       .quantization = "fp8"};
    ModelLoadOptions plain = o;
    plain.quantization = "";
    uint64_t prompt_seed = fresh_seed();
    LoadedModel a = load_model(o), b = load_model(o), c = load_model(plain);
    DeepseekModel on_gpu(a.config, std::move(a.weights), gpu, {.fp8_bmm = true}),
        on_cpu(b.config, std::move(b.weights), *cpu, {.fp8_bmm = true}),
        unquantized(c.config, std::move(c.weights), *cpu);
    const uint64_t V = uint64_t(a.config.vocab_size);
    std::vector<int32_t> ids, decode;
    for (int i = 0; i < 37; ++i) ids.push_back(int32_t(3 + hash64(prompt_seed, i) % (V - 3)));
    for (int i = 0; i < 5; ++i) decode.push_back(int32_t(3 + hash64(prompt_seed, 100 + i) % (V - 3)));
    Tensor want = run_model(on_cpu, *cpu, ids, decode, AttentionForm::Auto);
    LogitAgreement gpu_fp8, fp8_noise;
    gpu_fp8.add(run_model(on_gpu, gpu, ids, decode, AttentionForm::Auto), want);
    fp8_noise.add(run_model(unquantized, *cpu, ids, decode, AttentionForm::Auto), want);
    std::printf(
        "[cuda model %s fp8] vs the CPU's FP8: cosine mean %.4f median %.4f, argmax agreement %.3f; CPU "
        "unquantized vs FP8: cosine mean %.4f median %.4f, argmax agreement %.3f\n",
        preset.c_str(), gpu_fp8.mean_cosine(), gpu_fp8.median_cosine(), gpu_fp8.argmax_agreement(),
        fp8_noise.mean_cosine(), fp8_noise.median_cosine(), fp8_noise.argmax_agreement());
    // Measured (H200, 2026-11-22): median cosine 0.979 (V3 tiny) and 0.997 (V2-Lite tiny) against
    // FP8's own 0.958 and 0.995; with the weight scales misread it was 0.52 and 0.73.
    EXPECT_GE(gpu_fp8.median_cosine(), fp8_noise.median_cosine() - 0.03) << preset;
    EXPECT_GE(gpu_fp8.mean_cosine(), fp8_noise.mean_cosine() - 0.03) << preset;
  }
}

// rel_l2 of model b's logits to model a's, both on the GPU, over a random 19-token prompt and two
// decode steps.
double logit_distance(LoadedModel a, LoadedModel b, cuda::CudaBackend& gpu) {
  DeepseekModel model_a(a.config, std::move(a.weights), gpu), model_b(b.config, std::move(b.weights), gpu);
  std::vector<int32_t> ids;
  const uint64_t prompt_seed = fresh_seed();
  for (int i = 0; i < 19; ++i) ids.push_back(int32_t(100 + hash64(prompt_seed, i) % 90000));
  Tensor want = run_model(model_a, gpu, ids, {7, 8}, AttentionForm::Auto);
  return rel_l2(run_model(model_b, gpu, ids, {7, 8}, AttentionForm::Auto), want);
}

// Dummy weights made and quantized on the GPU (--quantization fp8 with the backend as the load's
// device) are the host-made ones: the same logits, bit for bit.
TEST(CudaModel, Fp8DummyWeightsQuantizedOnTheDeviceAreTheHostOnes) {
  for (std::string preset : {"deepseek-v3-tiny", "deepseek-v2-lite-tiny"}) {
    cuda::CudaBackend gpu;
    ModelLoadOptions host{.model = preset, .load_format = "dummy", .seed = 1, .quantization = "fp8"};
    ModelLoadOptions dev = host;
    dev.device = &gpu;
    EXPECT_EQ(logit_distance(load_model(host), load_model(dev), gpu), 0.0) << preset;
  }
}

// A natively FP8 config (V3's quantization_config) without --quantization: its dummy linears are
// made and quantized on the GPU, and they are the host-made ones: the same logits, bit for bit.
TEST(CudaModel, NativeFp8DummyWeightsMadeOnTheDeviceAreTheHostOnes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("mlaserve_native_fp8_{}", fresh_seed());
  fs::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(model_preset_json("deepseek-v3-tiny"));
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {128, 128}}};
  std::ofstream(dir / "config.json") << config.dump();
  cuda::CudaBackend gpu;
  ModelLoadOptions host{.model = dir.string(), .load_format = "dummy", .seed = 1};
  ModelLoadOptions dev = host;
  dev.device = &gpu;
  LoadedModel a = load_model(host), b = load_model(dev);
  fs::remove_all(dir);
  ASSERT_TRUE(b.config.quantization.has_value());
  const LinearWeight& down = b.weights.layers[0].mlp.down;  // layer 0 is dense
  EXPECT_EQ(down.weight.dtype(), DType::F8_E4M3);
  EXPECT_EQ(down.weight.device(), Device::CUDA);
  EXPECT_EQ(logit_distance(std::move(a), std::move(b), gpu), 0.0);
}

// An e4m3 latent cache (--kv-cache-dtype fp8_e4m3) on both backends, BF16 weights: the GPU's
// logits are held to the distance the FP8 cache itself puts between the CPU's FP8-cache and
// fp32-cache logits, over a prefill (the MHA form gathers the cache) and absorbed decode steps;
// then the same on the real MLA widths (16 heads of 576-wide rows through the decode kernels).
TEST(CudaModel, Fp8KvCacheStaysAsCloseToTheCpuAsTheFp8CacheToAnFp32One) {
  for (std::string model :
       {std::string("deepseek-v3-tiny"), std::string("deepseek-v2-lite-tiny"), fixture("v3_mla_dims")}) {
    cuda::CudaBackend gpu;
    auto cpu = make_cpu_backend();
    ModelLoadOptions o{
        .model = model, .load_format = model.find('/') == std::string::npos ? "dummy" : "auto", .seed = 1};
    uint64_t prompt_seed = fresh_seed();
    LoadedModel a = load_model(o), b = load_model(o);
    DeepseekModel on_gpu(a.config, std::move(a.weights), gpu), on_cpu(b.config, std::move(b.weights), *cpu);
    const int64_t V = a.config.vocab_size;
    std::vector<int32_t> ids, decode;
    for (int i = 0; i < 37; ++i) ids.push_back(int32_t(3 + hash64(prompt_seed, i) % uint64_t(V - 3)));
    for (int i = 0; i < 5; ++i) decode.push_back(int32_t(3 + hash64(prompt_seed, 100 + i) % uint64_t(V - 3)));
    Tensor want = run_model(on_cpu, *cpu, ids, decode, AttentionForm::Auto, DType::F8_E4M3);
    LogitAgreement gpu_fp8, fp8_noise;
    gpu_fp8.add(run_model(on_gpu, gpu, ids, decode, AttentionForm::Auto, DType::F8_E4M3), want);
    fp8_noise.add(run_model(on_cpu, *cpu, ids, decode, AttentionForm::Auto), want);
    std::printf(
        "[cuda model %s, fp8 kv] vs the CPU's FP8 cache: cosine mean %.4f median %.4f, argmax agreement %.3f; CPU "
        "fp32 cache vs FP8: cosine mean %.4f median %.4f, argmax agreement %.3f\n",
        model.c_str(), gpu_fp8.mean_cosine(), gpu_fp8.median_cosine(), gpu_fp8.argmax_agreement(),
        fp8_noise.mean_cosine(), fp8_noise.median_cosine(), fp8_noise.argmax_agreement());
    EXPECT_GE(gpu_fp8.median_cosine(), fp8_noise.median_cosine() - 0.03) << model;
    EXPECT_GE(gpu_fp8.mean_cosine(), fp8_noise.mean_cosine() - 0.03) << model;
  }
}

}  // namespace
}  // namespace mlaserve
