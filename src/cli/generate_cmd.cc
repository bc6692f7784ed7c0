// `mlaserve generate`: one prompt through the model on the CPU reference backend, greedy or
// sampled. Its --json output and --dump-logits file are the contract other implementations are
// checked against: keep them stable.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>

#include "cache/kv_pool.h"
#include "cli/commands.h"
#include "cli/tokenizer_location.h"
#include "common/error.h"
#include "config/quantization_flags.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"
#include "model/load_model.h"
#include "tokenizer/bpe_tokenizer.h"
#include "weights/safetensors.h"

namespace mlaserve::cli {

namespace {

struct GenerateArgs {
  ModelLoadOptions load;
  std::string input_ids;
  std::string prompt;
  std::string tokenizer_path;
  int max_new_tokens = 16;
  SamplingParams sampling{.temperature = 0.0f};
  bool ignore_eos = false;
  bool json = false;
  std::string dump_logits;
  std::string attention_form = "auto";
  std::string device = "cpu";
  std::string tuning_dir;
  std::string kv_cache_dtype = "auto";
  bool disable_shared_experts_fusion = false;
  bool enable_fp8_bmm = false;
};

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MLA_CHECK(used > 0 && used == item.size(), "--input-ids: '{}' is not an integer", item);
    MLA_CHECK(v >= 0 && v < vocab, "--input-ids: {} is outside the vocabulary ({})", v, vocab);
    ids.push_back(int32_t(v));
  }
  MLA_CHECK(!ids.empty(), "--input-ids is empty");
  return ids;
}

void run_generate(const GenerateArgs& a) {
  MLA_CHECK(a.max_new_tokens >= 0, "--max-new-tokens must not be negative");
  check_kv_cache_dtype_flag(a.kv_cache_dtype);
  check_quantization_flag(a.load.quantization);
  AttentionForm form = a.attention_form == "mha"        ? AttentionForm::Mha
                       : a.attention_form == "absorbed" ? AttentionForm::Absorbed
                                                        : AttentionForm::Auto;
  MLA_CHECK(a.attention_form == "auto" || form != AttentionForm::Auto,
            "--attention-form '{}': expected auto, mha or absorbed", a.attention_form);
  // Arguments are checked against the config before any weight is read.
  MLA_CHECK(a.input_ids.empty() != a.prompt.empty(), "give exactly one of --input-ids and --prompt");
  int64_t vocab = load_model_config(a.load.model).vocab_size;
  std::optional<Tokenizer> tokenizer;
  if (!a.prompt.empty()) tokenizer = Tokenizer::from_dir(find_tokenizer(a.tokenizer_path, a.load.model));
  // Text is encoded as the chat-less API does it: BOS (when the tokenizer adds one) and the text.
  std::vector<int32_t> prompt = tokenizer ? tokenizer->encode(a.prompt, true) : parse_ids(a.input_ids, vocab);
  for (int32_t id : prompt) MLA_CHECK(id < vocab, "the tokenizer gave id {} outside the model's vocabulary ({})", id, vocab);
  auto backend = make_backend(a.device);  // first: dummy weights are made on it
  load_tuned_configs(*backend, a.tuning_dir);
  ModelLoadOptions load = a.load;
  load.device = backend.get();
  LoadedModel loaded = load_model(load);
  auto sampler = make_cpu_backend();  // draws on the host logits: the reference sampler
  DeepseekModel model(loaded.config, std::move(loaded.weights), *backend,
                      {.fuse_shared_experts = !a.disable_shared_experts_fusion, .fp8_bmm = a.enable_fp8_bmm});
  const ModelConfig& c = model.config();
  int64_t total = int64_t(prompt.size()) + a.max_new_tokens;
  MLA_CHECK(total <= c.max_position_embeddings, "prompt + new tokens ({}) exceed max_position_embeddings ({})", total,
            c.max_position_embeddings);
  KvPool kv(*backend, c.num_hidden_layers, std::max<int64_t>(total, 1), c.kv_cache_dim(),
            kv_cache_dtype_for(a.kv_cache_dtype, backend->activation_dtype()));

  std::vector<int32_t> slots(static_cast<size_t>(total));
  std::iota(slots.begin(), slots.end(), 0);
  auto t0 = std::chrono::steady_clock::now();
  SequenceInput seq{prompt, {slots.begin(), slots.begin() + int64_t(prompt.size())}, !a.dump_logits.empty()};
  Tensor logits = backend->to_host(model.forward(make_forward_batch({seq}, form), kv));
  if (!a.dump_logits.empty()) {
    write_safetensors(a.dump_logits, {{"logits", logits}}, {{"input_ids", a.input_ids}});
    spdlog::info("wrote logits [{}, {}] to {}", logits.size(0), logits.size(1), a.dump_logits);
  }
  auto t1 = std::chrono::steady_clock::now();

  std::vector<int32_t> output;
  Tensor next = Tensor::empty(DType::I32, {1});
  for (int step = 0; step < a.max_new_tokens; ++step) {
    SamplingParams p = a.sampling;
    p.step = uint64_t(step);
    sampler->sample(logits.narrow(0, logits.size(0) - 1, 1), {p}, next);
    int32_t token = next.data<int32_t>()[0];
    output.push_back(token);
    bool eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), token) != c.eos_token_ids.end();
    if ((eos && !a.ignore_eos) || step + 1 == a.max_new_tokens) break;
    int64_t pos = int64_t(prompt.size()) + step;
    SequenceInput d{{token}, {slots.begin(), slots.begin() + pos + 1}, false};
    logits = backend->to_host(model.forward(make_forward_batch({d}, form), kv));
  }
  auto t2 = std::chrono::steady_clock::now();
  double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  double decode_s = std::chrono::duration<double>(t2 - t1).count();
  spdlog::info("prefill {} tokens in {:.3f} s; {} new tokens in {:.3f} s", prompt.size(), prefill_s, output.size(),
               decode_s);
  if (a.json) {
    nlohmann::json out = {{"input_ids", prompt}, {"output_ids", output}};
    if (tokenizer) out["text"] = tokenizer->decode(output, true);
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (tokenizer) {
    std::printf("%s\n", tokenizer->decode(output, true).c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(output, ",")).c_str());
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Run one prompt through the model on the CPU");
  cmd->add_option("--model", args->load.model, "Checkpoint folder or preset name")->required();
  cmd->add_option("--load-format", args->load.load_format, "auto | safetensors | dummy")->capture_default_str();
  cmd->add_option("--dtype", args->load.dtype, "Dummy weight dtype: auto | bfloat16 | float16 | float32")
      ->capture_default_str();
  cmd->add_option("--random-seed", args->load.seed, "Seed of dummy weights")->capture_default_str();
  cmd->add_option("--quantization", args->load.quantization, "fp8: linear weights to e4m3 in 128x128 blocks at load");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype, "auto | fp8_e4m3")->capture_default_str();
  cmd->add_option("--input-ids", args->input_ids, "Prompt token ids, comma separated");
  cmd->add_option("--prompt", args->prompt, "Prompt text (encoded with BOS by the model's tokenizer)");
  cmd->add_option("--tokenizer-path", args->tokenizer_path, "Folder with tokenizer.json (for --prompt)");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->sampling.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "-1 for off")->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p)->capture_default_str();
  cmd->add_option("--min-p", args->sampling.min_p)->capture_default_str();
  cmd->add_option("--sampling-seed", args->sampling.seed, "Seed of sampling")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the end-of-sequence token");
  cmd->add_flag("--json", args->json, "Print {\"input_ids\": [...], \"output_ids\": [...]}");
  cmd->add_option("--dump-logits", args->dump_logits, "Write the fp32 logits of every prompt position (safetensors)");
  cmd->add_option("--device", args->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--tuning-dir", args->tuning_dir, kTuningDirHelp);
  cmd->add_option("--attention-form", args->attention_form, "auto | mha | absorbed (MLA form of every pass)")
      ->capture_default_str();
  cmd->add_flag("--disable-shared-experts-fusion", args->disable_shared_experts_fusion,
                "Run MoE shared experts as their own MLP, not as extra experts every token picks");
  cmd->add_flag("--enable-fp8-bmm", args->enable_fp8_bmm,
                "Run the absorbed MLA products (W_UK / W_UV) of an FP8 model as the FP8 BMM at decode batches of "
                "up to 16 tokens (BF16 otherwise)");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace mlaserve::cli
