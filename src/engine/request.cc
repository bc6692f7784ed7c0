#include "engine/request.h"

namespace mlaserve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::None: break;
  }
  return nullptr;
}

void OutputChannel::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_one();
}

std::optional<RequestOutput> OutputChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

}  // namespace mlaserve
