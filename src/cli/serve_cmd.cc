// `mlaserve serve`: loads the model and tokenizer, starts the scheduler thread and the HTTP
// server, and on SIGTERM / SIGINT drains (finishes what was submitted, refuses new work) and exits.
#include <spdlog/spdlog.h>

#include <csignal>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/tokenizer_location.h"
#include "common/error.h"
#include "config/quantization_flags.h"
#include "engine/memory_plan.h"
#include "model/load_model.h"

#ifdef MLASERVE_WITH_SERVER
#include "server/http_server.h"
#endif

namespace mlaserve::cli {

#ifdef MLASERVE_WITH_SERVER
namespace {

// The chat template's source: --chat-template FILE (as SGLang's), else the tokenizer's own, if any.
std::optional<std::string> chat_template_source(const std::string& file, const Tokenizer& tokenizer) {
  if (file.empty()) return tokenizer.config().chat_template();
  std::ifstream in(file, std::ios::binary);
  MLA_CHECK(in, "--chat-template {}: cannot open the file", file);
  std::stringstream source;
  source << in.rdbuf();
  return source.str();
}

void run_serve(ServerArgs args) {
  // Signals go to one waiting thread: block them before any thread (OpenMP's too) exists, so
  // every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  args.validate();
  ModelConfig config = load_model_config(args.model_path);
  std::string tokenizer_dir = find_tokenizer(args.tokenizer_path, args.model_path);
  args.tokenizer_path = tokenizer_dir;
  Tokenizer tokenizer = Tokenizer::from_dir(tokenizer_dir);
  MLA_CHECK(int64_t(tokenizer.vocab_size()) <= config.vocab_size,
            "the tokenizer in {} has {} ids but the model's vocabulary has {}: they do not belong together",
            tokenizer_dir, tokenizer.vocab_size(), config.vocab_size);
  // Before the model loads, so that a template that cannot be read or parsed stops the start at once.
  std::optional<std::string> template_source = chat_template_source(args.chat_template, tokenizer);
  std::optional<ChatTemplate> chat_template;
  try {
    if (template_source) chat_template.emplace(*template_source);
  } catch (const Error& e) {
    const std::string where =
        args.chat_template.empty() ? tokenizer_dir + "'s chat template" : "--chat-template " + args.chat_template;
    fail("{}: {}", where, e.what());
  }

  int64_t context = args.context_length > 0 ? args.context_length : config.max_position_embeddings;
  MLA_CHECK(context <= config.max_position_embeddings, "--context-length {} exceeds the model's {}", context,
            config.max_position_embeddings);
  auto backend = make_backend(args.device);  // first: dummy weights are made on it
  load_tuned_configs(*backend, args.tuning_dir);
  LoadedModel loaded = load_model(
      {args.model_path, args.load_format, args.dtype, args.random_seed, args.quantization, backend.get()});
  DType kv_dtype = kv_cache_dtype_for(args.kv_cache_dtype, backend->activation_dtype());
  KvPoolRequest pool;
  pool.max_total_tokens = args.max_total_tokens;
  pool.mem_fraction_static = args.mem_fraction_static;
  pool.page_size = args.page_size;
  pool.max_batch_tokens = (args.chunked_prefill_size > 0 ? args.chunked_prefill_size : args.max_prefill_tokens) +
                         (args.enable_mixed_chunk ? args.max_running_requests : 0);
  pool.max_running_requests = args.max_running_requests;
  pool.context_length = context;
  pool.host_weight_bytes = loaded.weights.total_bytes;
  std::vector<int> graph_sizes = args.decode_graph_batch_sizes();
  pool.graph_max_bs = graph_sizes.empty() ? 0 : graph_sizes.back();
  ModelRunner runner(
      std::move(backend), loaded.config, std::move(loaded.weights),
      [&](Backend& b) { return kv_pool_tokens(b, loaded.config, kv_dtype, pool); }, kv_dtype,
      {.fuse_shared_experts = !args.disable_shared_experts_fusion, .fp8_bmm = args.enable_fp8_bmm});
  runner.set_kv_page_size(args.page_size);
  if (!graph_sizes.empty()) runner.capture_decode_graphs(graph_sizes);
  int64_t slots = runner.num_slots();
  context = std::min(context, slots);  // a request longer than the pool could never run

  SchedulerConfig sc;
  sc.max_running_requests = args.max_running_requests;
  sc.chunked_prefill_size = args.chunked_prefill_size;
  sc.max_prefill_tokens = args.max_prefill_tokens;
  sc.policy = args.schedule_policy == "lpm" ? SchedulePolicy::Lpm : SchedulePolicy::Fcfs;
  sc.radix_cache = !args.disable_radix_cache;
  sc.overlap_schedule = !args.disable_overlap_schedule;
  sc.mixed_chunk = args.enable_mixed_chunk;
  sc.page_size = args.page_size;
  sc.context_length = context;
  for (int64_t e : config.eos_token_ids) sc.eos_token_ids.push_back(int32_t(e));
  if (auto eos = tokenizer.eos_id()) sc.eos_token_ids.push_back(*eos);
  Scheduler scheduler(sc, runner);

  ServerContext ctx;
  ctx.args = args;
  ctx.model = config;
  ctx.scheduler = &scheduler;
  ctx.tokenizer = &tokenizer;
  ctx.chat_template = std::move(chat_template);
  ctx.chat_template_takes_tools = template_source && template_source->find("tools") != std::string::npos;
  ctx.model_name = args.served_model_name.empty() ? args.model_path : args.served_model_name;
  ctx.context_length = context;
  spdlog::info("KV pool: {} tokens ({:.1f} MB), context {} tokens, radix cache {}, chunked prefill {}, overlap "
               "schedule {}, CUDA graphs {}", slots, double(runner.kv_bytes()) / 1e6, context,
               sc.radix_cache ? "on" : "off", sc.chunked_prefill_size, sc.overlap_schedule ? "on" : "off",
               runner.decode_graph_sizes().empty() ? "off" : fmt::format("for batch sizes up to {}", runner.decode_graph_sizes().back()));

  scheduler.start();
  HttpServer server(ctx);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == 0) return;
    spdlog::info("signal {}: draining {} running and {} waiting requests", sig, scheduler.stats().num_running,
                 scheduler.stats().num_waiting);
    // New requests get 503; those in flight (and their streams) finish; then the engine stops.
    server.drain_and_stop(std::chrono::seconds(600));
    scheduler.stop(/*drain=*/true);
  });
  bool ok = server.listen();
  if (!ok) {
    spdlog::error("cannot listen on {}:{}", args.host, args.port);
    pthread_kill(waiter.native_handle(), SIGTERM);
  }
  waiter.join();
  MLA_CHECK(ok, "could not bind {}:{} (in use, or not an address of this machine)", args.host, args.port);
  spdlog::info("stopped");
}

}  // namespace
#endif

void register_serve(CLI::App& app) {
#ifdef MLASERVE_WITH_SERVER
  auto args = std::make_shared<ServerArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible and native HTTP API");
  register_server_args(*cmd, *args);
  cmd->callback([args] { run_serve(*args); });
#else
  register_unavailable(app, "serve", "this mlaserve was built without cpp-httplib: install libcpp-httplib-dev and rebuild");
#endif
}

}  // namespace mlaserve::cli
