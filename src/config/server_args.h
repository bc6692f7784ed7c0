// ServerArgs: every flag of `serve`, named as SGLang's launch_server names them where the meaning
// is the same. Declared once (register_server_args), validated once (validate), resolved into
// the run-time configs by the serve command.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace mlaserve {

struct ServerArgs {
  // Model
  std::string model_path;
  std::string tokenizer_path;  // default: the model folder, or the built-in DeepSeek-V3 tokenizer
  std::string served_model_name;
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string quantization;  // "" (as stored) | fp8 (config/quantization_flags.h)
  uint64_t random_seed = 0;
  int64_t context_length = 0;  // 0: the model's max_position_embeddings
  std::string device = "cpu";
  std::string tuning_dir;  // tuned kernel configs (kernels/gemm_tuning.h); "": the default folder
  // Memory and batching
  double mem_fraction_static = 0.0;  // of the device memory, for weights + KV (engine/memory_plan.h); 0: auto
  int64_t max_total_tokens = 0;      // KV pool size in tokens (a cap on the plan); 0: from mem_fraction_static
  int64_t page_size = 1;
  int64_t max_running_requests = 256;
  int64_t chunked_prefill_size = 8192;
  int64_t max_prefill_tokens = 16384;
  std::string schedule_policy = "fcfs";
  bool disable_radix_cache = false;
  bool disable_overlap_schedule = false;
  bool enable_mixed_chunk = false;   // decode tokens ride along with prefill chunks
  std::string kv_cache_dtype = "auto";
  // Shared experts run as dense MLPs beside the routed ones (by default they are fused into the
  // routed experts for batches of up to 256 tokens: DeepseekModelOptions)
  bool disable_shared_experts_fusion = false;
  // W_UK / W_UV of FP8 models as the FP8 BMM at decode batches of up to 16 tokens
  // (DeepseekModelOptions::fp8_bmm; off by default)
  bool enable_fp8_bmm = false;
  // CUDA graphs of decode (engine/decode_graphs.h)
  bool disable_cuda_graph = false;
  int cuda_graph_max_bs = 0;         // 0: min(128, --max-running-requests)
  std::vector<int> cuda_graph_bs;    // explicit sizes (default: 1, 2, 4, 8, 12, 16, 24, ... up to the max)
  // Server
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;
  int max_n = 16;  // largest `n` a request may ask for
  std::string chat_template;     // a Jinja file used instead of the tokenizer's chat template
  std::string tool_call_parser;  // deepseekv3 | deepseekv31: tool_calls in the chat API
  std::string reasoning_parser;  // deepseek-r1 | deepseek-v3: reasoning_content apart in the chat API
  int64_t max_request_bytes = 64 << 20;

  // Throws mlaserve::Error with the reason when a flag or combination cannot work.
  void validate() const;
  // The decode batch sizes to capture as CUDA graphs (none on the CPU or with --disable-cuda-graph).
  std::vector<int> decode_graph_batch_sizes() const;
  nlohmann::json to_json() const;
};

void register_server_args(CLI::App& cmd, ServerArgs& args);

}  // namespace mlaserve
