// `mlaserve tune-moe`: times every launch the backend has for the FP8 fused MoE's two grouped expert
// GEMMs on a model's MoE shapes (its TP shard with --tp-size) at each batch size, and writes the
// fastest into <tuning dir>/moe_fp8_<device>.json, merged with what that file already holds. serve,
// generate and bench-one-batch load that file at start (kernels/moe_tuning.h).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "common/error.h"
#include "kernels/ops.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"

namespace mlaserve::cli {

namespace {

struct TuneMoeArgs {
  std::string model = "deepseek-v3";
  int tp_size = 1;
  std::vector<int64_t> tokens{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  bool disable_shared_experts_fusion = false;
  std::string device = "cuda";
  std::string tuning_dir;
};

// The layer the model runs at `tokens` tokens: its experts cut to the TP shard, the shared ones
// fused (routed with the tokens for small batches) unless fusion is off, as DeepseekModel does.
MoeTuneCase layer_case(const ModelConfig& c, const TuneMoeArgs& a, int64_t tokens) {
  MoeTuneCase m;
  m.routed = c.n_routed_experts;
  m.hidden = c.hidden_size;
  m.inter = c.moe_intermediate_size / a.tp_size;
  m.top_k = c.num_experts_per_tok;
  m.tokens = tokens;
  if (!a.disable_shared_experts_fusion) {
    m.shared = c.n_shared_experts;
    m.route_shared = tokens <= DeepseekModelOptions{}.shared_fusion_max_tokens;
  }
  return m;
}

void run(const TuneMoeArgs& a) {
  const ModelConfig config = load_model_config(a.model);
  MLA_CHECK(config.n_routed_experts > 0, "tune-moe: {} has no routed experts", a.model);
  MLA_CHECK(a.tp_size >= 1 && config.moe_intermediate_size % a.tp_size == 0 &&
                (config.moe_intermediate_size / a.tp_size) % 128 == 0 && config.hidden_size % 128 == 0,
            "tune-moe: --tp-size {} cuts {}'s experts ({} wide, hidden {}) into shards that are not whole 128 x 128 "
            "FP8 blocks",
            a.tp_size, a.model, config.moe_intermediate_size, config.hidden_size);
  for (int64_t T : a.tokens) MLA_CHECK(T > 0 && T <= 65536, "--batch-size {}: expected 1 to 65536", T);
  auto backend = make_backend(a.device);
  const std::string device = backend->device_name();
  MLA_CHECK(!device.empty(), "tune-moe: the {} backend has no kernels to tune (use --device cuda)", backend->name());
  const std::string path = MoeTuning::path(a.tuning_dir, device);
  std::vector<MoeTuneCase> cases;
  for (int64_t T : a.tokens) cases.push_back(layer_case(config, a, T));
  spdlog::info("tuning the FP8 MoE of {} (TP {}: {} + {} experts of {} x {}) at {} batch sizes on {}", a.model,
               a.tp_size, cases[0].routed, cases[0].shared, cases[0].inter, cases[0].hidden, cases.size(), device);

  const MoeTuning fresh = backend->tune_moe(cases, [](const std::string& line) { spdlog::debug("{}", line); });
  MoeTuning merged = std::filesystem::exists(path) ? MoeTuning::load(path) : MoeTuning{};
  merged.set_device(device);
  std::printf("%-6s %-6s %-10s %-40s %-40s %10s\n", "tokens", "pairs", "experts", "gate_up", "down", "layer ms");
  for (const MoeTuneCase& c : cases) {
    const int64_t E = c.experts(), P = c.tokens * c.pairs_per_token();
    const MoeGemmChoice gu = *fresh.find(E, 2 * c.inter, c.hidden, P), down = *fresh.find(E, c.hidden, c.inter, P);
    merged.set(E, 2 * c.inter, c.hidden, P, gu);
    merged.set(E, c.hidden, c.inter, P, down);
    auto what = [](const MoeGemmChoice& g) {
      const char* kernel = g.kernel == MoeGemmChoice::Kernel::Wgmma ? "wgmma" : "mma";
      return fmt::format("{} rows={} k_splits={} n_tiles={}", kernel, g.tile_rows, g.k_splits, g.n_tiles);
    };
    std::printf("%-6lld %-6lld %-10lld %-40s %-40s %10.4f\n", (long long)c.tokens, (long long)P, (long long)E,
                what(gu).c_str(), what(down).c_str(), down.ms);
  }
  merged.save(path);
  spdlog::info("wrote {}", path);
}

}  // namespace

void register_tune_moe(CLI::App& app) {
  auto a = std::make_shared<TuneMoeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune-moe", "Time the FP8 fused MoE's grouped GEMM launches on a model's expert shapes and save the fastest");
  cmd->add_option("--model", a->model, "Preset or checkpoint folder whose MoE layers are tuned")->capture_default_str();
  cmd->add_option("--tp-size", a->tp_size, "Tensor-parallel size: each GPU holds 1/tp of every expert's width")
      ->capture_default_str();
  cmd->add_option("--batch-size", a->tokens, "Token counts to tune")->capture_default_str();
  cmd->add_flag("--disable-shared-experts-fusion", a->disable_shared_experts_fusion,
                "Tune the routed experts alone (as serve runs with that flag)");
  cmd->add_option("--device", a->device, "cuda")->capture_default_str();
  cmd->add_option("--tuning-dir", a->tuning_dir, kTuningDirHelp);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlaserve::cli
