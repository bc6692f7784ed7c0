// `mlaserve bench-serving`: a load generator for a running server, like sglang.bench_serving.
// Prompts come from a random dataset (random token ids of --random-input-len, range ratio) or a
// ShareGPT JSON file; requests arrive as a Poisson process at --request-rate (inf: all at once),
// at most --max-concurrency at a time, streaming from /generate. Reports throughput and TTFT /
// ITL / TPOT / E2E latency (mean, median, p99) and appends one JSON line to --output-file.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"

#ifdef MLASERVE_WITH_SERVER
#include <httplib.h>
#endif

namespace mlaserve::cli {

#ifdef MLASERVE_WITH_SERVER
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string dataset_name = "random";
  std::string dataset_path;
  int num_prompts = 100;
  int random_input_len = 1024, random_output_len = 128;
  double random_range_ratio = 0.0;
  double request_rate = INFINITY;
  int max_concurrency = 0;  // 0: no limit
  int vocab_size = 128000;  // random ids are drawn below this (and above 100 to skip specials)
  uint64_t seed = 1;
  std::string output_file;
  std::string api_key;
};

struct Job {
  json prompt;  // {"input_ids": [...]} or {"text": "..."}
  int input_len = 0, output_len = 0;
};

struct Outcome {
  bool ok = false;
  std::string error;
  int input_len = 0, output_len = 0;
  double ttft = 0, latency = 0;
  std::vector<double> itl;
};

std::vector<Job> make_jobs(const BenchArgs& a) {
  std::mt19937_64 rng(a.seed);
  std::vector<Job> jobs;
  MLA_CHECK(a.dataset_path.empty() || a.dataset_name == "sharegpt",
            "--dataset-path is read only with --dataset-name sharegpt (the dataset is '{}')", a.dataset_name);
  if (a.dataset_name == "random") {
    auto len = [&](int full) {
      int lo = std::max(1, int(full * a.random_range_ratio));
      return std::uniform_int_distribution<int>(lo, std::max(lo, full))(rng);
    };
    std::uniform_int_distribution<int> token(100, a.vocab_size - 1);
    for (int i = 0; i < a.num_prompts; ++i) {
      Job j;
      j.input_len = len(a.random_input_len);
      j.output_len = len(a.random_output_len);
      std::vector<int> ids(static_cast<size_t>(j.input_len));
      for (int& t : ids) t = token(rng);
      j.prompt = {{"input_ids", ids}};
      jobs.push_back(std::move(j));
    }
    return jobs;
  }
  MLA_CHECK(a.dataset_name == "sharegpt", "--dataset-name '{}': expected random or sharegpt", a.dataset_name);
  MLA_CHECK(!a.dataset_path.empty(), "--dataset-name sharegpt needs --dataset-path FILE.json");
  std::ifstream in(a.dataset_path);
  MLA_CHECK(in, "cannot open --dataset-path '{}'", a.dataset_path);
  json data = json::parse(in, nullptr, false);
  MLA_CHECK(data.is_array(), "'{}' is not a ShareGPT JSON list", a.dataset_path);
  std::shuffle(data.begin(), data.end(), rng);
  // As sglang.bench_serving: the first turn is the prompt, the second's length in tokens sets
  // max_new_tokens; conversations with fewer than 4 tokens either way, a prompt over 1024 or both
  // over 2048 are skipped. Lengths come from the server's tokenizer, in batches.
  httplib::Client cli(a.host, a.port);
  cli.set_read_timeout(600, 0);
  auto token_counts = [&](const json& texts, bool special) {
    httplib::Headers headers;
    if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
    auto res = cli.Post("/tokenize", headers, json{{"prompt", texts}, {"add_special_tokens", special}}.dump(),
                        "application/json");
    MLA_CHECK(res && res->status == 200, "bench-serving: /tokenize on {}:{} failed ({})", a.host, a.port,
              res ? std::to_string(res->status) : httplib::to_string(res.error()));
    return json::parse(res->body)["count"];
  };
  for (size_t begin = 0; begin < data.size() && int(jobs.size()) < a.num_prompts; begin += 256) {
    json prompts = json::array(), replies = json::array();
    for (size_t i = begin; i < std::min(data.size(), begin + 256); ++i) {
      auto turns = data[i].value("conversations", json::array());
      if (turns.size() < 2 || !turns[0].contains("value") || !turns[1].contains("value") ||
          !turns[0]["value"].is_string() || !turns[1]["value"].is_string() || turns[0]["value"] == "" ||
          turns[1]["value"] == "")
        continue;
      prompts.push_back(turns[0]["value"]);
      replies.push_back(turns[1]["value"]);
    }
    if (prompts.empty()) continue;
    json in_lens = token_counts(prompts, true), out_lens = token_counts(replies, false);
    for (size_t i = 0; i < prompts.size() && int(jobs.size()) < a.num_prompts; ++i) {
      int in_len = in_lens[i], out_len = out_lens[i];
      if (in_len < 4 || out_len < 4 || in_len > 1024 || in_len + out_len > 2048) continue;
      Job j;
      j.input_len = in_len;
      j.output_len = out_len;
      j.prompt = {{"text", prompts[i]}};
      jobs.push_back(std::move(j));
    }
  }
  MLA_CHECK(!jobs.empty(), "'{}' holds no usable conversations", a.dataset_path);
  return jobs;
}

Outcome run_one(const BenchArgs& a, const Job& job) {
  httplib::Client cli(a.host, a.port);
  cli.set_read_timeout(3600, 0);
  json body = job.prompt;
  body["sampling_params"] = {{"max_new_tokens", job.output_len}, {"temperature", 0}, {"ignore_eos", true}};
  body["stream"] = true;
  Outcome o;
  o.input_len = job.input_len;
  auto start = Clock::now(), last = start;
  std::string buffer;
  size_t tokens = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/generate";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!a.api_key.empty()) req.set_header("Authorization", "Bearer " + a.api_key);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      json e = json::parse(event.substr(6), nullptr, false);
      if (e.is_discarded()) continue;
      if (e.contains("error")) {
        o.error = e["error"].value("message", "error");
        continue;
      }
      size_t now_tokens = e["output_ids"].size();
      if (e.contains("meta_info") && e["meta_info"].contains("prompt_tokens"))
        o.input_len = e["meta_info"]["prompt_tokens"].get<int>();
      auto now = Clock::now();
      if (now_tokens > tokens) {
        if (tokens == 0) o.ttft = std::chrono::duration<double>(now - start).count();
        else o.itl.push_back(std::chrono::duration<double>(now - last).count());
        last = now;
        tokens = now_tokens;
      }
    }
    return true;
  };
  auto res = cli.send(req);
  o.latency = std::chrono::duration<double>(Clock::now() - start).count();
  o.output_len = int(tokens);
  if (!res) o.error = "connection failed: " + httplib::to_string(res.error());
  else if (res->status != 200 && o.error.empty()) o.error = "HTTP " + std::to_string(res->status);
  o.ok = o.error.empty() && tokens > 0;
  return o;
}

struct Summary {
  double mean = 0, median = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, size_t(std::ceil(0.99 * double(v.size()))) - 1)];
  return s;
}

void run_bench(const BenchArgs& a) {
  MLA_CHECK(a.num_prompts > 0, "--num-prompts must be positive");
  MLA_CHECK(a.random_range_ratio >= 0 && a.random_range_ratio <= 1, "--random-range-ratio must be in [0, 1]");
  MLA_CHECK(a.request_rate > 0, "--request-rate must be positive (inf: all at once)");
  std::vector<Job> jobs = make_jobs(a);
  std::vector<Outcome> outcomes(jobs.size());
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, done = 0;
  int limit = a.max_concurrency > 0 ? a.max_concurrency : int(jobs.size());
  std::mt19937_64 rng(a.seed + 1);
  std::exponential_distribution<double> gap(std::isinf(a.request_rate) ? 1.0 : a.request_rate);
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!std::isinf(a.request_rate) && i > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(gap(rng)));
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return in_flight < limit; });
      in_flight++;
    }
    threads.emplace_back([&, i] {
      outcomes[i] = run_one(a, jobs[i]);
      std::lock_guard<std::mutex> lock(mu);
      in_flight--;
      done++;
      if (done % std::max<int>(1, int(jobs.size()) / 10) == 0 || done == int(jobs.size()))
        std::fprintf(stderr, "bench-serving: %d/%zu requests done\n", done, jobs.size());
      cv.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl, tpot, e2e;
  int64_t ok = 0, in_tokens = 0, out_tokens = 0;
  std::string first_error;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      if (first_error.empty()) first_error = o.error;
      continue;
    }
    ok++;
    in_tokens += o.input_len;
    out_tokens += o.output_len;
    ttft.push_back(o.ttft * 1e3);
    e2e.push_back(o.latency * 1e3);
    for (double x : o.itl) itl.push_back(x * 1e3);
    if (o.output_len > 1) tpot.push_back((o.latency - o.ttft) / double(o.output_len - 1) * 1e3);
  }
  Summary t = summarize(ttft), i = summarize(itl), p = summarize(tpot), e = summarize(e2e);
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %d / %zu\n", "Successful requests:", int(ok), outcomes.size());
  if (!first_error.empty()) std::printf("%-40s %s\n", "First error:", first_error.c_str());
  std::printf("%-40s %s\n", "Request rate (configured):",
              std::isinf(a.request_rate) ? "inf" : fmt::format("{:.2f}", a.request_rate).c_str());
  std::printf("%-40s %d\n", "Max concurrency:", limit);
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %lld\n", "Total input tokens:", (long long)in_tokens);
  std::printf("%-40s %lld\n", "Total generated tokens:", (long long)out_tokens);
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", double(ok) / duration);
  std::printf("%-40s %.2f\n", "Input token throughput (tok/s):", double(in_tokens) / duration);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", double(out_tokens) / duration);
  auto row = [](const char* name, const Summary& s) {
    std::printf("%-40s %.2f / %.2f / %.2f\n", name, s.mean, s.median, s.p99);
  };
  row("TTFT ms (mean / median / p99):", t);
  row("ITL ms (mean / median / p99):", i);
  row("TPOT ms (mean / median / p99):", p);
  row("E2E latency ms (mean / median / p99):", e);
  if (!a.output_file.empty()) {
    auto s = [](const Summary& x) { return json{{"mean", x.mean}, {"median", x.median}, {"p99", x.p99}}; };
    json line = {{"dataset", a.dataset_name}, {"num_prompts", a.num_prompts}, {"completed", ok},
                 {"request_rate", std::isinf(a.request_rate) ? json("inf") : json(a.request_rate)},
                 {"max_concurrency", limit}, {"duration_s", duration}, {"input_tokens", in_tokens},
                 {"output_tokens", out_tokens}, {"request_throughput", double(ok) / duration},
                 {"input_throughput", double(in_tokens) / duration},
                 {"output_throughput", double(out_tokens) / duration}, {"ttft_ms", s(t)}, {"itl_ms", s(i)},
                 {"tpot_ms", s(p)}, {"e2e_ms", s(e)}};
    std::ofstream(a.output_file, std::ios::app) << line.dump() << "\n";
  }
  MLA_CHECK(ok == int64_t(outcomes.size()), "{} of {} requests failed (first: {})", outcomes.size() - size_t(ok),
            outcomes.size(), first_error);
}

}  // namespace
#endif

void register_bench_serving(CLI::App& app) {
#ifdef MLASERVE_WITH_SERVER
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench-serving", "Load-test a running server (like sglang.bench_serving)");
  cmd->add_option("--host", a->host)->capture_default_str();
  cmd->add_option("--port", a->port)->capture_default_str();
  cmd->add_option("--dataset-name", a->dataset_name, "random | sharegpt")->capture_default_str();
  cmd->add_option("--dataset-path", a->dataset_path, "ShareGPT-format JSON file");
  cmd->add_option("--num-prompts", a->num_prompts)->capture_default_str();
  cmd->add_option("--random-input-len", a->random_input_len)->capture_default_str();
  cmd->add_option("--random-output-len", a->random_output_len)->capture_default_str();
  cmd->add_option("--random-range-ratio", a->random_range_ratio, "Lengths drawn from [ratio * len, len]")
      ->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate, "Requests per second (Poisson); inf: all at once");
  cmd->add_option("--max-concurrency", a->max_concurrency, "Requests in flight at most (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--random-vocab-size", a->vocab_size, "Random ids are drawn below this")->capture_default_str();
  cmd->add_option("--seed", a->seed)->capture_default_str();
  cmd->add_option("--output-file", a->output_file, "Append the results as one JSON line");
  cmd->add_option("--api-key", a->api_key);
  cmd->callback([a] { run_bench(*a); });
#else
  register_unavailable(app, "bench-serving", "this mlaserve was built without cpp-httplib: install libcpp-httplib-dev and rebuild");
#endif
}

}  // namespace mlaserve::cli
