#include "config/server_args.h"

#include <set>

#include "common/error.h"
#include "config/quantization_flags.h"

namespace mlaserve {

void register_server_args(CLI::App& cmd, ServerArgs& a) {
  cmd.add_option("--model-path,--model", a.model_path, "Checkpoint folder or preset name")->required();
  cmd.add_option("--tokenizer-path", a.tokenizer_path, "Folder with tokenizer.json (default: the model's)");
  cmd.add_option("--served-model-name", a.served_model_name, "Model name in the API (default: --model-path)");
  cmd.add_option("--load-format", a.load_format, "auto | safetensors | dummy")->capture_default_str();
  cmd.add_option("--dtype", a.dtype, "Dummy weight dtype: auto | bfloat16 | float16 | float32")->capture_default_str();
  cmd.add_option("--random-seed", a.random_seed, "Seed of dummy weights")->capture_default_str();
  cmd.add_option("--context-length", a.context_length, "Prompt + output limit (0: the model's)")->capture_default_str();
  cmd.add_option("--device", a.device, "cpu | cuda")->capture_default_str();
  cmd.add_option("--tuning-dir", a.tuning_dir,
                 "Folder of tuned kernel configs, fp8_gemm_<device>.json (default: $MLASERVE_TUNING_DIR, else "
                 "configs/tuning of the checkout)");
  cmd.add_option("--mem-fraction-static", a.mem_fraction_static,
                 "Fraction of device memory for weights + KV pool; the rest is kept for activations, "
                 "workspaces and CUDA graphs (0: 0.85 on CUDA; 0.3 of host memory on the CPU)")->capture_default_str();
  cmd.add_option("--max-total-tokens", a.max_total_tokens, "KV pool size in tokens (0: auto)")->capture_default_str();
  cmd.add_option("--page-size", a.page_size, "Tokens per KV page")->capture_default_str();
  cmd.add_option("--max-running-requests", a.max_running_requests)->capture_default_str();
  cmd.add_option("--chunked-prefill-size", a.chunked_prefill_size, "Prefill tokens per step; -1 disables chunking")
      ->capture_default_str();
  cmd.add_option("--max-prefill-tokens", a.max_prefill_tokens)->capture_default_str();
  cmd.add_option("--schedule-policy", a.schedule_policy, "fcfs | lpm (longest prefix match)")->capture_default_str();
  cmd.add_flag("--disable-radix-cache", a.disable_radix_cache);
  cmd.add_flag("--disable-overlap-schedule", a.disable_overlap_schedule,
               "Process each batch before launching the next (by default the next launches first)");
  cmd.add_flag("--enable-mixed-chunk", a.enable_mixed_chunk,
               "Run the decoding requests' next tokens in the same batch as a prefill chunk");
  cmd.add_option("--kv-cache-dtype", a.kv_cache_dtype, "auto (fp32 on the CPU, bf16 on CUDA) | fp8_e4m3")
      ->capture_default_str();
  cmd.add_flag("--disable-shared-experts-fusion", a.disable_shared_experts_fusion,
               "Run MoE shared experts as their own MLP (by default batches of up to 256 tokens run them as "
               "extra experts every token picks)");
  cmd.add_flag("--enable-fp8-bmm", a.enable_fp8_bmm,
               "Run the absorbed MLA products (W_UK / W_UV) of an FP8 model as the FP8 BMM at decode batches of "
               "up to 16 tokens (BF16 otherwise)");
  cmd.add_flag("--disable-cuda-graph", a.disable_cuda_graph, "Run decode batches eagerly, without CUDA graphs");
  cmd.add_option("--cuda-graph-max-bs", a.cuda_graph_max_bs,
                 "Largest decode batch captured as a CUDA graph (0: min(128, --max-running-requests))")
      ->capture_default_str();
  cmd.add_option("--cuda-graph-bs", a.cuda_graph_bs, "Decode batch sizes to capture (default: 1 2 4 8 12 16 24 ...)")
      ->expected(1, 1 << 16);
  cmd.add_option("--quantization", a.quantization, "fp8: linear weights to e4m3 in 128x128 blocks at load");
  cmd.add_option("--host", a.host)->capture_default_str();
  cmd.add_option("--port", a.port)->capture_default_str();
  cmd.add_option("--api-key", a.api_key, "Require 'Authorization: Bearer KEY'");
  cmd.add_option("--max-n", a.max_n, "Largest n a request may ask for")->capture_default_str();
  cmd.add_option("--chat-template", a.chat_template, "Jinja chat template file to use instead of the tokenizer's");
  cmd.add_option("--tool-call-parser", a.tool_call_parser,
                 "deepseekv3 | deepseekv31: read the tool calls of chat answers to requests that offer tools");
  cmd.add_option("--reasoning-parser", a.reasoning_parser,
                 "deepseek-r1 | deepseek-v3: give chat answers' reasoning (before </think>) as reasoning_content "
                 "(deepseek-v3: when chat_template_kwargs has \"thinking\": true)");
}

void ServerArgs::validate() const {
  MLA_CHECK(device == "cpu" || device == "cuda", "--device '{}': expected cpu or cuda", device);
  check_kv_cache_dtype_flag(kv_cache_dtype);
  check_quantization_flag(quantization);
  MLA_CHECK(schedule_policy == "fcfs" || schedule_policy == "lpm", "--schedule-policy '{}': expected fcfs or lpm",
            schedule_policy);
  MLA_CHECK(!(schedule_policy == "lpm" && disable_radix_cache),
            "--schedule-policy lpm orders requests by their cached prefix: it needs the radix cache "
            "(drop --disable-radix-cache)");
  MLA_CHECK(page_size >= 1 && page_size <= 1024, "--page-size must be between 1 and 1024, got {}", page_size);
  MLA_CHECK(max_running_requests >= 1, "--max-running-requests must be at least 1");
  MLA_CHECK(chunked_prefill_size == -1 || chunked_prefill_size >= 1,
            "--chunked-prefill-size must be positive or -1 (off), got {}", chunked_prefill_size);
  MLA_CHECK(max_prefill_tokens >= 1, "--max-prefill-tokens must be positive");
  MLA_CHECK(!enable_mixed_chunk || chunked_prefill_size > 0,
            "--enable-mixed-chunk needs chunked prefill (a --chunked-prefill-size, not -1)");
  MLA_CHECK(mem_fraction_static >= 0 && mem_fraction_static < 1, "--mem-fraction-static must be in [0, 1)");
  MLA_CHECK(max_total_tokens >= 0, "--max-total-tokens must not be negative");
  MLA_CHECK(port > 0 && port < 65536, "--port {} is not a TCP port", port);
  MLA_CHECK(max_n >= 1, "--max-n must be at least 1");
  MLA_CHECK(tool_call_parser.empty() || tool_call_parser == "deepseekv3" || tool_call_parser == "deepseekv31",
            "--tool-call-parser '{}': expected deepseekv3 or deepseekv31", tool_call_parser);
  MLA_CHECK(reasoning_parser.empty() || reasoning_parser == "deepseek-r1" || reasoning_parser == "deepseek-v3",
            "--reasoning-parser '{}': expected deepseek-r1 or deepseek-v3", reasoning_parser);
  MLA_CHECK(context_length >= 0, "--context-length must not be negative");
  MLA_CHECK(cuda_graph_max_bs >= 0, "--cuda-graph-max-bs must not be negative");
  for (int bs : cuda_graph_bs) MLA_CHECK(bs >= 1, "--cuda-graph-bs {}: batch sizes must be positive", bs);
  MLA_CHECK(device == "cuda" || (cuda_graph_bs.empty() && cuda_graph_max_bs == 0),
            "--cuda-graph-bs and --cuda-graph-max-bs need --device cuda (the CPU backend has no graphs)");
  MLA_CHECK(!disable_cuda_graph || (cuda_graph_bs.empty() && cuda_graph_max_bs == 0),
            "--disable-cuda-graph contradicts --cuda-graph-bs / --cuda-graph-max-bs");
}

std::vector<int> ServerArgs::decode_graph_batch_sizes() const {
  if (device != "cuda" || disable_cuda_graph) return {};
  std::set<int> sizes(cuda_graph_bs.begin(), cuda_graph_bs.end());
  if (sizes.empty()) {
    // SGLang's default list: small sizes one by one, then steps of 8.
    int max_bs = cuda_graph_max_bs > 0 ? cuda_graph_max_bs : int(std::min<int64_t>(128, max_running_requests));
    for (int s : {1, 2, 4, 8, 12})
      if (s <= max_bs) sizes.insert(s);
    for (int s = 16; s <= max_bs; s += 8) sizes.insert(s);
    sizes.insert(max_bs);
  }
  return {sizes.begin(), sizes.end()};
}

nlohmann::json ServerArgs::to_json() const {
  return {{"model_path", model_path}, {"tokenizer_path", tokenizer_path}, {"served_model_name", served_model_name},
          {"load_format", load_format}, {"dtype", dtype}, {"quantization", quantization}, {"random_seed", random_seed},
          {"context_length", context_length}, {"device", device}, {"mem_fraction_static", mem_fraction_static},
          {"max_total_tokens", max_total_tokens}, {"page_size", page_size},
          {"max_running_requests", max_running_requests}, {"chunked_prefill_size", chunked_prefill_size},
          {"max_prefill_tokens", max_prefill_tokens}, {"schedule_policy", schedule_policy},
          {"disable_radix_cache", disable_radix_cache}, {"disable_overlap_schedule", disable_overlap_schedule},
          {"enable_mixed_chunk", enable_mixed_chunk},
          {"kv_cache_dtype", kv_cache_dtype}, {"disable_shared_experts_fusion", disable_shared_experts_fusion},
          {"enable_fp8_bmm", enable_fp8_bmm},
          {"disable_cuda_graph", disable_cuda_graph},
          {"cuda_graph_max_bs", cuda_graph_max_bs}, {"cuda_graph_bs", cuda_graph_bs}, {"host", host},
          {"port", port}, {"api_key_set", !api_key.empty()}, {"max_n", max_n},
          {"chat_template", chat_template}, {"tool_call_parser", tool_call_parser},
          {"reasoning_parser", reasoning_parser}};
}

}  // namespace mlaserve
