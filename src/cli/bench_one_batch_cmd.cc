// `mlaserve bench-one-batch`: like sglang.bench_one_batch, one static batch through the model
// without the server: prefill of batch_size prompts of input_len, then output_len decode steps.
// Reports prefill latency and throughput, median decode step latency and throughput, and the total.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "cli/commands.h"
#include "common/error.h"
#include "common/random.h"
#include "config/quantization_flags.h"
#include "engine/forward_batch.h"
#include "engine/model_runner.h"
#include "model/absorbed_weights.h"
#include "model/load_model.h"

namespace mlaserve::cli {

namespace {

struct OneBatchArgs {
  ModelLoadOptions load;  // load_format defaults to dummy (set in register_bench_one_batch)
  std::vector<int> batch_sizes{1}, input_lens{256}, output_lens{16};
  std::string device = "cpu";
  std::string tuning_dir;
  int page_size = 1;   // KV pages, as the server's --page-size: each seq's slots start on a page
  bool disable_cuda_graph = false;
  bool disable_shared_experts_fusion = false;
  bool enable_fp8_bmm = false;
  std::string kv_cache_dtype = "auto";
  std::string result_file;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Weight bytes one decode step of `batch` sequences reads: every dense weight once and, per MoE
// layer, the experts the batch touches (expected count under uniform routing). Over the copy
// bandwidth this is the step's floor. BF16 weights, or with `fp8` the linears in e4m3 except those
// the CUDA backend keeps in BF16: kv_a (576 rows, not whole blocks), the router and lm_head; W_UK /
// W_UV (absorbed kv_b) in e4m3 where its 128-blocks fall within heads (DeepSeek's dims) and the
// batch runs the FP8 BMM (up to kFp8BmmMaxTokens), else BF16.
double decode_weight_bytes(const ModelConfig& c, int64_t batch, bool fp8, bool fp8_bmm_on) {
  const double wide = 2.0, narrow = fp8 ? 1.0 : 2.0;
  double H = double(c.hidden_size), nh = double(c.num_attention_heads), L = double(c.kv_lora_rank);
  double qk = double(c.qk_head_dim()), r = double(c.qk_rope_head_dim), v = double(c.v_head_dim);
  double q = c.q_lora_rank > 0 ? H * double(c.q_lora_rank) + double(c.q_lora_rank) * nh * qk : H * nh * qk;
  const bool fp8_bmm = c.qk_nope_head_dim % 128 == 0 && c.v_head_dim % 128 == 0 && c.kv_lora_rank % 128 == 0 &&
                       batch <= kFp8BmmMaxTokens && fp8_bmm_on;
  double attention = (q + nh * v * H) * narrow + H * (L + r) * wide +
                     L * nh * (double(c.qk_nope_head_dim) + v) * (fp8_bmm ? narrow : wide);
  double E = double(c.n_routed_experts), k = double(c.num_experts_per_tok), I = double(c.moe_intermediate_size);
  double touched = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, double(batch))) : 0.0;
  double bytes = double(c.vocab_size) * H * wide;  // lm_head
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    bytes += attention;
    if (c.is_moe_layer(l))
      bytes += E * H * wide + 3.0 * H * I * (double(c.n_shared_experts) + touched) * narrow;
    else
      bytes += 3.0 * H * double(c.intermediate_size) * narrow;
  }
  return bytes;
}

void run(const OneBatchArgs& a) {
  check_kv_cache_dtype_flag(a.kv_cache_dtype);
  auto backend = make_backend(a.device);  // first: dummy weights are made on it
  load_tuned_configs(*backend, a.tuning_dir);
  ModelLoadOptions load = a.load;
  load.device = backend.get();
  LoadedModel model = load_model(load);
  const ModelConfig config = model.config;
  ModelWeights weights = std::move(model.weights);
  int max_bs = *std::max_element(a.batch_sizes.begin(), a.batch_sizes.end());
  int max_len = *std::max_element(a.input_lens.begin(), a.input_lens.end()) +
                *std::max_element(a.output_lens.begin(), a.output_lens.end());
  max_len = (max_len + a.page_size - 1) / a.page_size * a.page_size;  // seq b's slots: b * max_len on
  DType kv_dtype = kv_cache_dtype_for(a.kv_cache_dtype, backend->activation_dtype());
  ModelRunner runner(std::move(backend), config, std::move(weights), int64_t(max_bs) * max_len, kv_dtype,
                     {.fuse_shared_experts = !a.disable_shared_experts_fusion, .fp8_bmm = a.enable_fp8_bmm});
  Backend& ops = runner.backend();
  // Like the server: decode batches replay CUDA graphs, captured here for the batch sizes timed.
  runner.set_kv_page_size(a.page_size);
  if (ops.supports_graphs() && !a.disable_cuda_graph) runner.capture_decode_graphs(a.batch_sizes);
  std::printf("%-6s %-6s %-6s %12s %14s %14s %14s %10s %12s\n", "batch", "input", "output", "prefill s",
              "prefill tok/s", "decode ms", "decode tok/s", "total s", "weights GB");
  for (int bs : a.batch_sizes)
    for (int in_len : a.input_lens)
      for (int out_len : a.output_lens) {
        std::vector<SequenceInput> seqs(static_cast<size_t>(bs));
        for (int b = 0; b < bs; ++b) {
          for (int t = 0; t < in_len; ++t)
            seqs[size_t(b)].new_tokens.push_back(int32_t(100 + hash64(b, t) % uint64_t(config.vocab_size - 100)));
          seqs[size_t(b)].slots.resize(size_t(in_len));
          std::iota(seqs[size_t(b)].slots.begin(), seqs[size_t(b)].slots.end(), b * max_len);
        }
        // Greedy draws on the backend; only the ids come back, as in serving.
        std::vector<SamplingParams> greedy(size_t(bs), SamplingParams{.temperature = 0});
        Tensor ids = ops.empty(DType::I32, {bs});
        auto step_ids = [&] {
          ops.sample(runner.forward(seqs), greedy, ids);
          return ops.to_host(ids);
        };
        // A warm-up pass (allocations, plans, cuBLASLt heuristics) is not timed.
        step_ids();
        auto t0 = std::chrono::steady_clock::now();
        Tensor next = step_ids();
        double prefill = seconds_since(t0);
        std::vector<double> steps;
        for (int step = 0; step < out_len; ++step) {
          for (int b = 0; b < bs; ++b) {
            auto& s = seqs[size_t(b)];
            s.new_tokens = {next.data<int32_t>()[b]};
            s.slots.push_back(b * max_len + in_len + step);
          }
          auto ts = std::chrono::steady_clock::now();
          next = step_ids();
          steps.push_back(seconds_since(ts));
        }
        std::vector<double> sorted = steps;
        std::sort(sorted.begin(), sorted.end());
        double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
        double total = prefill + std::accumulate(steps.begin(), steps.end(), 0.0);
        // Whether the decode steps replayed a graph (a size may fail to capture: see DecodeGraphs).
        const std::vector<int>& sizes = runner.decode_graph_sizes();
        bool graph = std::find(sizes.begin(), sizes.end(), bs) != sizes.end();
        double weight_bytes = decode_weight_bytes(config, bs, config.quantization.has_value(), a.enable_fp8_bmm);
        std::printf("%-6d %-6d %-6d %12.4f %14.1f %14.3f %14.1f %10.3f %12.3f\n", bs, in_len, out_len, prefill,
                    double(bs) * in_len / prefill, median * 1e3, median > 0 ? bs / median : 0.0, total,
                    weight_bytes / 1e9);
        if (!a.result_file.empty()) {
          nlohmann::json j = {{"model", a.load.model}, {"device", a.device},
                              {"cuda_graph", graph}, {"shared_experts_fusion", !a.disable_shared_experts_fusion},
                              {"fp8_bmm", a.enable_fp8_bmm}, {"kv_cache_dtype", dtype_name(kv_dtype)},
                              {"page_size", a.page_size}, {"quantization", a.load.quantization},
                              {"num_layers", config.num_hidden_layers},
                              {"batch_size", bs}, {"input_len", in_len}, {"output_len", out_len},
                              {"prefill_latency_s", prefill}, {"prefill_throughput", double(bs) * in_len / prefill},
                              {"median_decode_latency_s", median},
                              {"median_decode_throughput", median > 0 ? bs / median : 0.0}, {"total_latency_s", total},
                              {"decode_weight_bytes", weight_bytes}};
          std::ofstream(a.result_file, std::ios::app) << j.dump() << "\n";
        }
      }
}

}  // namespace

void register_bench_one_batch(CLI::App& app) {
  auto a = std::make_shared<OneBatchArgs>();
  a->load.load_format = "dummy";
  CLI::App* cmd = app.add_subcommand("bench-one-batch", "Time one static batch through the model (no server)");
  cmd->add_option("--model", a->load.model, "Checkpoint folder or preset")->required();
  cmd->add_option("--load-format", a->load.load_format, "dummy | safetensors | auto")->capture_default_str();
  cmd->add_option("--random-seed", a->load.seed)->capture_default_str();
  cmd->add_option("--device", a->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--tuning-dir", a->tuning_dir, kTuningDirHelp);
  cmd->add_option("--batch-size", a->batch_sizes, "One or more")->capture_default_str();
  cmd->add_option("--input-len", a->input_lens, "One or more")->capture_default_str();
  cmd->add_option("--output-len", a->output_lens, "One or more")->capture_default_str();
  cmd->add_option("--num-layers", a->load.num_layers, "Cut the model to this many layers (dummy weights)");
  cmd->add_flag("--disable-cuda-graph", a->disable_cuda_graph, "Time eager decode steps (no CUDA graphs)");
  cmd->add_flag("--disable-shared-experts-fusion", a->disable_shared_experts_fusion,
                "Run MoE shared experts as their own MLP, not as extra experts every token picks");
  cmd->add_flag("--enable-fp8-bmm", a->enable_fp8_bmm,
                "Run the absorbed MLA products (W_UK / W_UV) of an FP8 model as the FP8 BMM at decode batches of "
                "up to 16 tokens (BF16 otherwise)");
  cmd->add_option("--quantization", a->load.quantization, "fp8: linear weights to FP8 128x128 blocks at load");
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype, "auto | fp8_e4m3")->capture_default_str();
  cmd->add_option("--page-size", a->page_size, "Tokens per KV page, as serve's (64: MLA decode reads whole pages)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--result-filename", a->result_file, "Append one JSON line per configuration");
  cmd->callback([a] { run(*a); });
}

}  // namespace mlaserve::cli
