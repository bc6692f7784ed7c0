#include "server/request_registry.h"

#include <fmt/format.h>

#include <random>

namespace mlaserve {

size_t RequestRegistry::cancel(const Channels& channels) {
  size_t n = 0;
  for (const auto& weak : channels)
    if (auto c = weak.lock()) {
      c->cancel(FinishReason::Abort);
      n++;
    }
  return n;
}

bool RequestRegistry::ended(const Channels& channels) {
  for (const auto& weak : channels)
    if (!weak.expired()) return false;
  return true;
}

void RequestRegistry::purge_ended() {
  std::erase_if(by_rid_, [](const auto& entry) { return ended(entry.second); });
  purge_at_ = std::max<size_t>(64, 2 * by_rid_.size());
}

bool RequestRegistry::add(const std::string& rid, const std::vector<std::shared_ptr<OutputChannel>>& channels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_rid_.size() >= purge_at_) purge_ended();
  auto it = by_rid_.find(rid);
  if (it != by_rid_.end() && !ended(it->second)) return false;
  by_rid_[rid] = Channels(channels.begin(), channels.end());
  return true;
}

void RequestRegistry::remove(const std::string& rid) {
  std::lock_guard<std::mutex> lock(mu_);
  by_rid_.erase(rid);
}

size_t RequestRegistry::abort(const std::string& rid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_rid_.find(rid);
  return it == by_rid_.end() ? 0 : cancel(it->second);
}

size_t RequestRegistry::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [rid, channels] : by_rid_) n += cancel(channels);
  return n;
}

std::string new_rid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

}  // namespace mlaserve
