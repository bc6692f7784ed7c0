#include "server/metrics.h"

#include <fmt/format.h>

namespace mlaserve {

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) counts_[i]++;
  count_++;
  sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  for (size_t i = 0; i < kBuckets.size(); ++i) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBuckets[i], counts_[i]);
  out += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", name, count_, sum_);
  return out;
}

std::string ServerMetrics::render(const EngineStats& s, const std::string& model) const {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP mlaserve:{0} {2}\n# TYPE mlaserve:{0} {1}\nmlaserve:{0}{{model_name=\"{3}\"}} {4}\n", name,
                       type, help, model, value);
  };
  metric("num_requests_running", "gauge", "Requests in the running batch", double(s.num_running));
  metric("num_queue_reqs", "gauge", "Requests waiting to be scheduled", double(s.num_waiting));
  metric("token_usage", "gauge", "Fraction of the KV pool in use (cache included)",
         s.kv_slots_total ? double(s.kv_slots_used) / double(s.kv_slots_total) : 0.0);
  metric("cached_tokens_in_pool", "gauge", "Tokens held by the radix cache", double(s.kv_slots_cached));
  metric("cache_hit_rate", "gauge", "Prompt tokens served from the radix cache / prompt tokens",
         s.prompt_tokens ? double(s.cached_prompt_tokens) / double(s.prompt_tokens) : 0.0);
  metric("prompt_tokens_total", "counter", "Prompt tokens admitted", double(s.prompt_tokens));
  metric("cached_prompt_tokens_total", "counter", "Prompt tokens served from the radix cache",
         double(s.cached_prompt_tokens));
  metric("generation_tokens_total", "counter", "Tokens generated", double(s.generation_tokens));
  metric("num_requests_total", "counter", "Requests finished", double(s.requests_finished));
  metric("num_aborted_requests_total", "counter", "Requests aborted", double(s.requests_aborted));
  metric("num_retractions_total", "counter", "Requests retracted for lack of KV", double(s.requests_retracted));
  metric("forward_steps_total", "counter", "Forward passes run", double(s.forward_steps));
  metric("mixed_steps_total", "counter", "Forward passes with prefill chunks and decode tokens together",
         double(s.mixed_steps));
  metric("http_requests_total", "counter", "HTTP requests received", double(http_requests.load()));
  metric("http_errors_total", "counter", "HTTP requests answered with an error", double(http_errors.load()));
  out += time_to_first_token.render("mlaserve:time_to_first_token_seconds", "Time to first token");
  out += inter_token_latency.render("mlaserve:inter_token_latency_seconds", "Time between streamed tokens");
  out += e2e_request_latency.render("mlaserve:e2e_request_latency_seconds", "Request latency, arrival to finish");
  return out;
}

}  // namespace mlaserve
