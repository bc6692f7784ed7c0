// `mlaserve tune-fp8-gemm`: times every kernel and launch the backend has for the FP8 W8A8 linear
// on a model's weight shapes (or given ones) at each token count, and writes the fastest into
// <tuning dir>/fp8_gemm_<device>.json after each shape, merged with what that file already holds.
// serve, generate and bench-one-batch load that file at start (kernels/gemm_tuning.h).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/commands.h"
#include "common/error.h"
#include "kernels/ops.h"
#include "model/load_model.h"

namespace mlaserve::cli {

namespace {

struct TuneArgs {
  std::string model = "deepseek-v3";
  std::vector<std::string> shapes;  // "N,K"
  std::vector<int64_t> tokens{1, 2, 4, 8, 12, 16};
  std::string device = "cuda";
  std::string tuning_dir;
};

// The (N, K) of the linear layers a model runs in FP8 blocks (K of whole 128-wide blocks; N may end
// in a ragged block, as kv_a's 576 rows do). q (or q_a) stacked with kv_a as the model runs them,
// and apart; shared experts as their own MLP (with --disable-shared-experts-fusion) and kv_b
// (prefill's decompression) included.
std::set<std::pair<int64_t, int64_t>> fp8_linear_shapes(const ModelConfig& c) {
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  std::vector<std::pair<int64_t, int64_t>> all = {
      {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},  // kv_b
      {H, heads * c.v_head_dim},                                      // o
  };
  const int64_t kv_a = c.kv_lora_rank + c.qk_rope_head_dim;
  all.push_back({kv_a, H});
  if (c.q_lora_rank > 0) {
    all.push_back({c.q_lora_rank, H});                        // q_a
    all.push_back({c.q_lora_rank + kv_a, H});                 // q_a and kv_a stacked
    all.push_back({heads * c.qk_head_dim(), c.q_lora_rank});  // q_b
  } else {
    all.push_back({heads * c.qk_head_dim(), H});         // q
    all.push_back({heads * c.qk_head_dim() + kv_a, H});  // q and kv_a stacked
  }
  if (c.first_k_dense_replace > 0) {
    all.push_back({2 * c.intermediate_size, H});  // dense gate_up
    all.push_back({H, c.intermediate_size});      // dense down
  }
  if (c.n_shared_experts > 0) {
    const int64_t I = c.n_shared_experts * c.moe_intermediate_size;
    all.push_back({2 * I, H});  // shared gate_up
    all.push_back({H, I});      // shared down
  }
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (auto [N, K] : all)
    if (N > 0 && K > 0 && N % 16 == 0 && K % 128 == 0) shapes.insert({N, K});
  return shapes;
}

std::pair<int64_t, int64_t> parse_shape(const std::string& s) {
  long long N = 0, K = 0;
  char tail = 0;
  MLA_CHECK(std::sscanf(s.c_str(), "%lld,%lld%c", &N, &K, &tail) == 2 && N > 0 && K > 0,
            "--shape '{}': expected N,K (weight rows, columns)", s);
  return {N, K};
}

void run(const TuneArgs& a) {
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const std::string& s : a.shapes) shapes.insert(parse_shape(s));
  if (shapes.empty()) shapes = fp8_linear_shapes(load_model_config(a.model));
  for (int64_t T : a.tokens) MLA_CHECK(T > 0 && T <= 65536, "--batch-size {}: expected 1 to 65536", T);
  auto backend = make_backend(a.device);
  const std::string device = backend->device_name();
  MLA_CHECK(!device.empty(), "tune-fp8-gemm: the {} backend has no kernels to tune (use --device cuda)",
            backend->name());
  const std::string path = Fp8GemmTuning::path(a.tuning_dir, device);
  spdlog::info("tuning {} FP8 linear shapes at {} token counts on {}", shapes.size(), a.tokens.size(), device);

  // A shape at a time, the file written after each: a tune cut short keeps what it measured.
  Fp8GemmTuning merged = std::filesystem::exists(path) ? Fp8GemmTuning::load(path) : Fp8GemmTuning{};
  merged.set_device(device);
  std::printf("%-8s %-8s %-6s %-64s %10s   %s\n", "N", "K", "tokens", "fastest", "ms", "from BF16 rows");
  for (auto [N, K] : shapes) {
    const Fp8GemmTuning fresh = backend->tune_fp8_gemm({{N, K}}, a.tokens,
                                                       [](const std::string& line) { spdlog::debug("{}", line); });
    merged.merge(fresh);
    merged.save(path);
    for (int64_t T : a.tokens) {
      const Fp8GemmChoice c = *fresh.find(N, K, T), r = *fresh.find_from_rows(N, K, T);
      std::printf("%-8lld %-8lld %-6lld %-64s %10.4f   %s %.4f\n", (long long)N, (long long)K, (long long)T,
                  to_string(c).c_str(), c.ms, to_string(r).c_str(), r.ms);
    }
    std::fflush(stdout);
  }
  spdlog::info("wrote {}", path);
}

}  // namespace

void register_tune_fp8_gemm(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand("tune-fp8-gemm",
                                     "Time the FP8 W8A8 linear's kernels on a model's shapes and save the fastest");
  cmd->add_option("--model", a->model, "Preset or checkpoint folder whose FP8 linear shapes are tuned")
      ->capture_default_str();
  cmd->add_option("--shape", a->shapes, "N,K of a weight to tune instead of the model's (repeatable)");
  cmd->add_option("--batch-size", a->tokens, "Token counts to tune")->capture_default_str();
  cmd->add_option("--device", a->device, "cuda")->capture_default_str();
  cmd->add_option("--tuning-dir", a->tuning_dir, kTuningDirHelp);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlaserve::cli
