// `mlaserve tokenize | detokenize | chat-template | bench-tokenizer`: the tokenizer as a tool, for
// users and for checking us against HF line by line. Input and output are JSON, one value a line,
// so text with newlines and any Unicode passes through unchanged.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace mlaserve::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
  bool add_generation_prompt = false;
  std::string template_file;
  std::string corpus;
  int threads = 0;
  double seconds = 2.0;
};

std::string read_all(std::istream& in) {
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tokenizer = Tokenizer::from_dir(a.tokenizer);
  std::string line;
  for (size_t number = 1; std::getline(std::cin, line); ++number) {
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("stdin line {}: not JSON: {}", number, e.what());
    }
    MLA_CHECK(value.is_string(), "stdin line {}: expected a JSON string", number);
    const auto ids = tokenizer.encode(value.get_ref<const std::string&>(), a.add_special_tokens);
    std::cout << nlohmann::json(ids).dump() << '\n';
  }
}

void run_detokenize(const TokenizeArgs& a) {
  const Tokenizer tokenizer = Tokenizer::from_dir(a.tokenizer);
  std::string line;
  for (size_t number = 1; std::getline(std::cin, line); ++number) {
    std::vector<int32_t> ids;
    try {
      ids = nlohmann::json::parse(line).get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception& e) {
      fail("stdin line {}: expected a JSON array of ids: {}", number, e.what());
    }
    // Replacement characters already stand in for bad bytes, so the dump cannot fail.
    std::cout << nlohmann::json(tokenizer.decode(ids, a.skip_special_tokens)).dump() << '\n';
  }
}

void run_chat_template(const TokenizeArgs& a) {
  const TokenizerConfig config = TokenizerConfig::from_dir(a.tokenizer);
  nlohmann::ordered_json input;
  try {
    input = nlohmann::ordered_json::parse(read_all(std::cin));
  } catch (const nlohmann::json::exception& e) {
    fail("stdin: not JSON: {}", e.what());
  }
  ChatRequest request;
  if (input.is_array()) {
    request.messages = input;
  } else {
    MLA_CHECK(input.is_object() && input.contains("messages"),
              "stdin: expected a messages list or an object with \"messages\"");
    // Other keys become template variables too (documents, enable_thinking, ...).
    for (auto it = input.begin(); it != input.end(); ++it) {
      if (it.key() == "messages") {
        request.messages = it.value();
      } else if (it.key() == "tools") {
        request.tools = it.value();
      } else if (it.key() == "documents") {
        request.documents = it.value();
      } else {
        request.extra[it.key()] = it.value();
      }
    }
  }
  request.add_generation_prompt = a.add_generation_prompt;
  std::string source;
  if (!a.template_file.empty()) {
    std::ifstream in(a.template_file, std::ios::binary);
    MLA_CHECK(in, "cannot open --template {}", a.template_file);
    source = read_all(in);
  } else {
    const auto from_config = config.chat_template(!request.tools.is_null());
    MLA_CHECK(from_config, "{} has no chat template; pass --template FILE", a.tokenizer);
    source = *from_config;
  }
  const ChatTemplate chat_template(source);
  std::cout << chat_template.render(request, config);
}

double megabytes(size_t bytes) { return double(bytes) / 1e6; }

// Encodes the corpus documents over and over on `threads` threads for about `seconds`; returns
// MB of text encoded per second.
double measure(const Tokenizer& tokenizer, const std::vector<std::string>& docs, int threads,
               double seconds) {
  std::atomic<size_t> bytes_done{0};
  std::atomic<bool> stop{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      size_t local = 0;
      // Each thread starts at its own offset so threads do not encode the same text in lockstep.
      for (size_t i = size_t(t) * docs.size() / size_t(threads); !stop.load(std::memory_order_relaxed);
           i = (i + 1) % docs.size()) {
        tokenizer.encode(docs[i]);
        local += docs[i].size();
      }
      bytes_done += local;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return megabytes(bytes_done) / elapsed;
}

void run_bench(const TokenizeArgs& a) {
  const Tokenizer tokenizer = Tokenizer::from_dir(a.tokenizer);
  std::ifstream in(a.corpus, std::ios::binary);
  MLA_CHECK(in, "cannot open --corpus {}", a.corpus);
  // One document a line, newline kept, as tests/tools/bench_hf_tokenizer.py reads it.
  std::vector<std::string> docs;
  size_t total = 0;
  for (std::string line; std::getline(in, line);) {
    line.push_back('\n');
    total += line.size();
    docs.push_back(std::move(line));
  }
  MLA_CHECK(!docs.empty(), "--corpus {} is empty", a.corpus);
  size_t tokens = 0;
  for (const auto& d : docs) tokens += tokenizer.encode(d).size();  // also warms the caches
  const int threads = a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const double single = measure(tokenizer, docs, 1, a.seconds);
  const double multi = measure(tokenizer, docs, threads, a.seconds);
  nlohmann::ordered_json result = {{"corpus", a.corpus},
                                   {"documents", docs.size()},
                                   {"megabytes", megabytes(total)},
                                   {"tokens", tokens},
                                   {"encode_mb_per_s_1_thread", single},
                                   {"threads", threads},
                                   {"encode_mb_per_s_n_threads", multi}};
  std::printf("%s\n", result.dump(2).c_str());
}

}  // namespace

void register_tokenize_commands(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();

  auto* tokenize = app.add_subcommand("tokenize", "Encode text: one JSON string a line on stdin, "
                                                  "one JSON array of ids a line on stdout");
  tokenize->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer.json")->required();
  tokenize->add_flag("--add-special-tokens", args->add_special_tokens, "Add BOS/EOS as the tokenizer config says");
  tokenize->callback([args] { run_tokenize(*args); });

  auto* detokenize = app.add_subcommand("detokenize", "Decode ids: one JSON array a line on stdin, "
                                                      "one JSON string a line on stdout");
  detokenize->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer.json")->required();
  detokenize->add_flag("--skip-special-tokens", args->skip_special_tokens, "Leave special tokens out");
  detokenize->callback([args] { run_detokenize(*args); });

  auto* chat = app.add_subcommand("chat-template", "Render a chat prompt: a JSON messages list (or "
                                                   "{\"messages\": [...], \"tools\": [...], other "
                                                   "template variables}) on stdin");
  chat->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer_config.json")->required();
  chat->add_flag("--add-generation-prompt", args->add_generation_prompt, "End with the assistant prefix");
  chat->add_option("--template", args->template_file, "Jinja template file instead of the tokenizer's");
  chat->callback([args] { run_chat_template(*args); });

  auto* bench = app.add_subcommand("bench-tokenizer", "Encode throughput in MB/s, 1 and N threads");
  bench->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer.json")->required();
  bench->add_option("--corpus", args->corpus, "Text file, one document a line")->required();
  bench->add_option("--threads", args->threads, "Threads for the N-thread run (default: all cores)");
  bench->add_option("--seconds", args->seconds, "Seconds per measurement")->capture_default_str();
  bench->callback([args] { run_bench(*args); });
}

}  // namespace mlaserve::cli
