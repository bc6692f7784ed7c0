// fp8_accuracy: FP8 against the unquantized model on a random model too large for fixtures, on
// the CPU reference backend. One set of seeded BF16 dummy weights runs twice: as it is (fp32
// activations and KV cache) and quantized at load as --quantization fp8 does (W8A8 linears) with an
// FP8 KV cache. Both read the same random token sequence in one pass (teacher forcing: every
// position sees the same context in both), the FP8 model once in each MLA form, since the MHA form
// reads its FP8 cache through kv_gather and the absorbed (decode) form through mla_decode. For every
// position: cosine similarity and max relative error of the logits, and whether the greedy
// (argmax) next token is the same. Results go to docs/accuracy.md.
//
//   build-fp8/fp8_accuracy --model deepseek-v3 --num-layers 1 --num-experts 16 --vocab-size 32768 --tokens 256
// (--quantization none or --kv-cache-dtype auto measure one half of FP8 alone).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include "cache/kv_pool.h"
#include "common/error.h"
#include "common/random.h"
#include "config/quantization_flags.h"
#include "engine/forward_batch.h"
#include "logit_agreement.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "weights/weight_loader.h"

namespace mlaserve {
namespace {

struct Options {
  std::string model = "deepseek-v3";
  int num_layers = 1;
  int num_experts = 16;
  int64_t vocab_size = 32768;
  int tokens = 256;
  uint64_t seed = 0;
  std::string quantization = "fp8";         // of the compared model's weights: fp8 | none
  std::string kv_cache_dtype = "fp8_e4m3";  // of the compared model's cache: fp8_e4m3 | auto
};

// The preset cut down to a size the CPU holds and runs in minutes: fewer layers (the dense ones
// first), fewer routed experts (the expert groups shrink with them), a smaller vocabulary (the
// embedding and lm_head stay unquantized either way), no MTP layer, and no quantization_config,
// so that the dummy weights are BF16.
ModelConfig cut_config(const Options& o) {
  ModelConfig c = load_model_config(o.model);
  MLA_CHECK(o.num_layers >= 1 && o.num_layers <= c.num_hidden_layers, "--num-layers {} outside [1, {}]",
            o.num_layers, c.num_hidden_layers);
  c.num_hidden_layers = o.num_layers;
  c.first_k_dense_replace = std::min(c.first_k_dense_replace, int64_t(o.num_layers - 1));
  c.num_nextn_predict_layers = 0;
  if (o.num_experts > 0 && o.num_experts < c.n_routed_experts) {
    c.n_routed_experts = o.num_experts;
    c.num_experts_per_tok = std::min(c.num_experts_per_tok, c.n_routed_experts);
    while (c.n_group > 1 && (c.n_routed_experts % c.n_group != 0 || c.n_routed_experts / c.n_group < 2)) c.n_group /= 2;
    c.topk_group = std::min(c.topk_group, c.n_group);
  }
  if (o.vocab_size > 0 && o.vocab_size < c.vocab_size) {
    c.vocab_size = o.vocab_size;
    c.bos_token_id = std::min(c.bos_token_id, c.vocab_size - 1);
    for (int64_t& e : c.eos_token_ids) e = std::min(e, c.vocab_size - 1);
  }
  c.quantization.reset();
  c.validate();
  return c;
}

// Keeps every tensor a source hands out, so that a second load gets the very same weights
// without drawing them again (and shares the unquantized ones).
class RecordingSource final : public WeightSource {
 public:
  explicit RecordingSource(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}
  bool has(const std::string& name) const override { return inner_->has(name); }
  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    return tensors_[name] = inner_->get(name, shape, role);
  }
  Tensor get_scale(const std::string& name, const Shape& shape, int64_t bn, int64_t bk) override {
    return inner_->get_scale(name, shape, bn, bk);
  }
  void finish() override { inner_->finish(); }
  std::string describe() const override { return inner_->describe(); }

  // A source that replays what was recorded.
  std::unique_ptr<WeightSource> replay() const {
    class Replay final : public WeightSource {
     public:
      explicit Replay(const std::map<std::string, Tensor>& t) : t_(t) {}
      bool has(const std::string& name) const override { return t_.count(name) > 0; }
      Tensor get(const std::string& name, const Shape&, WeightRole) override { return t_.at(name); }
      Tensor get_scale(const std::string&, const Shape&, int64_t, int64_t) override { return {}; }
      void finish() override {}
      std::string describe() const override { return "the recorded weights"; }

     private:
      const std::map<std::string, Tensor>& t_;
    };
    return std::make_unique<Replay>(tensors_);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::map<std::string, Tensor> tensors_;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void print(const char* what, const LogitAgreement& a) {
  std::printf("%-22s | cosine mean %.5f median %.5f min %.5f | rel error median %.4f max %.4f | "
              "argmax agreement %lld/%lld = %.4f\n",
              what, a.mean_cosine(), a.median_cosine(), a.min_cosine(), a.median_rel_error(), a.max_rel_error(),
              (long long)a.argmax_equal, (long long)a.rows(), a.argmax_agreement());
}

void run(const Options& o) {
  auto start = std::chrono::steady_clock::now();
  ModelConfig config = cut_config(o);
  MLA_CHECK(o.quantization == "fp8" || o.quantization == "none", "--quantization {}: fp8 or none", o.quantization);
  MLA_CHECK(o.kv_cache_dtype == "fp8_e4m3" || o.kv_cache_dtype == "auto", "--kv-cache-dtype {}: fp8_e4m3 or auto",
            o.kv_cache_dtype);
  ModelConfig fp8_config = config;
  auto backend = make_cpu_backend();
  RecordingSource recorded(make_dummy_source(config, o.seed, DType::BF16));
  ModelWeights plain_weights = load_model_weights(config, recorded);
  std::unique_ptr<WeightSource> replay = recorded.replay();
  if (o.quantization == "fp8") {
    fp8_config.quantization = QuantizationConfig{};
    replay = make_fp8_quantizing_source(std::move(replay), 128, 128);
  }
  ModelWeights fp8_weights = load_model_weights(fp8_config, *replay);
  DType fp8_kv = kv_cache_dtype_for(o.kv_cache_dtype, backend->activation_dtype());
  std::printf("model: %s cut to %lld layers (%lld dense), %lld routed experts (top %lld of %lld groups x %lld), "
              "hidden %lld, vocab %lld; weights %.2f GB BF16, %.2f GB compared; loaded in %.0f s\n",
              o.model.c_str(), (long long)config.num_hidden_layers, (long long)config.first_k_dense_replace,
              (long long)config.n_routed_experts, (long long)config.num_experts_per_tok, (long long)config.n_group,
              (long long)config.topk_group, (long long)config.hidden_size, (long long)config.vocab_size,
              double(plain_weights.total_bytes) / 1e9, double(fp8_weights.total_bytes) / 1e9, seconds_since(start));
  DeepseekModel plain(config, std::move(plain_weights), *backend);
  DeepseekModel fp8(fp8_config, std::move(fp8_weights), *backend);

  std::vector<int32_t> ids, slots(static_cast<size_t>(o.tokens));
  for (int i = 0; i < o.tokens; ++i)
    ids.push_back(int32_t(100 + hash64(o.seed + 1, uint64_t(i)) % uint64_t(config.vocab_size - 100)));
  std::iota(slots.begin(), slots.end(), 0);
  auto pass = [&](DeepseekModel& m, DType kv_dtype, AttentionForm form) {
    auto t = std::chrono::steady_clock::now();
    KvPool kv(*backend, config.num_hidden_layers, o.tokens, config.kv_cache_dim(), kv_dtype);
    Tensor logits = m.forward(make_forward_batch({{ids, slots, true}}, form), kv);
    std::printf("  pass of %d tokens: %.1f s\n", o.tokens, seconds_since(t));
    return logits;
  };
  Tensor want = pass(plain, DType::F32, AttentionForm::Mha);
  LogitAgreement mha, absorbed;
  mha.add(pass(fp8, fp8_kv, AttentionForm::Mha), want);
  absorbed.add(pass(fp8, fp8_kv, AttentionForm::Absorbed), want);
  std::printf("%d random tokens, each position's logits with %s weights and a %s KV cache against BF16 weights "
              "with fp32 activations and KV cache:\n",
              o.tokens, o.quantization == "fp8" ? "FP8 (W8A8)" : "the same BF16",
              std::string(dtype_name(fp8_kv)).c_str());
  print("MHA form", mha);
  print("absorbed form", absorbed);
  std::printf("total %.0f s\n", seconds_since(start));
}

}  // namespace
}  // namespace mlaserve

int main(int argc, char** argv) {
  mlaserve::Options o;
  CLI::App app("FP8 (W8A8 + FP8 KV cache) against the unquantized model, on seeded dummy weights");
  app.add_option("--model", o.model, "Preset or checkpoint folder whose config to use")->capture_default_str();
  app.add_option("--num-layers", o.num_layers, "Layers kept (the dense ones first)")->capture_default_str();
  app.add_option("--num-experts", o.num_experts, "Routed experts kept (0: all)")->capture_default_str();
  app.add_option("--vocab-size", o.vocab_size, "Vocabulary kept (0: all)")->capture_default_str();
  app.add_option("--tokens", o.tokens, "Length of the random token sequence")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the weights and the tokens")->capture_default_str();
  app.add_option("--quantization", o.quantization, "Compared model's weights: fp8 (W8A8) | none")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype, "Compared model's KV cache: fp8_e4m3 | auto (fp32)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  try {
    mlaserve::run(o);
  } catch (const mlaserve::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
