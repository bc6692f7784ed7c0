// Server metrics in the Prometheus text format: latency histograms observed by the HTTP side,
// and the engine's counters and gauges read from its stats snapshot at scrape time.
#pragma once

#include <array>
#include <mutex>
#include <string>

#include "engine/scheduler.h"

namespace mlaserve {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1, 2.5, 5, 10, 30, 60, 120};
  void observe(double seconds);
  std::string render(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBuckets.size()> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct ServerMetrics {
  Histogram time_to_first_token, inter_token_latency, e2e_request_latency;
  std::atomic<uint64_t> http_requests{0}, http_errors{0};

  std::string render(const EngineStats& stats, const std::string& model) const;
};

}  // namespace mlaserve
