// The core types of the serving runtime: what a client asked for (Request), what the engine sends
// back (RequestOutput, through an OutputChannel), and the per-request sampling parameters.
// The HTTP side creates Requests and reads channels; the scheduler thread owns everything else.
#pragma once

#include <chrono>
#include <condition_variable>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace mlaserve {

struct GenerationParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;
  int32_t top_k = -1;  // -1: all
  float min_p = 0.0f;
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output so far
  float presence_penalty = 0.0f;    // subtracted once for tokens present in the output
  float repetition_penalty = 1.0f;  // divides positive / multiplies negative logits of seen tokens
  int32_t max_new_tokens = 128;
  std::vector<std::string> stop;          // stop strings, checked on the detokenized text
  std::vector<int32_t> stop_token_ids;    // finish when one is sampled (it is kept in the output)
  bool ignore_eos = false;
  std::optional<uint64_t> seed;
  int32_t logprobs = -1;  // -1: none; 0: the chosen token's; k: and the top k alternatives
  bool skip_special_tokens = true;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top alternatives, best first
};

enum class FinishReason : uint8_t { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason r);

// One step of a request's output: new tokens since the last one, and the final state.
struct RequestOutput {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when asked for
  FinishReason finish = FinishReason::None;
  int32_t matched_stop_token = -1;     // the stop token id that finished it, if any
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;           // prompt tokens served from the radix cache
  std::string error;                   // set when the engine failed the request
};

// A queue from the scheduler thread to one request's reader. The reader may cancel; the scheduler
// sees that on its next step and frees the request's KV.
class OutputChannel {
 public:
  void push(RequestOutput out);
  // Waits up to `timeout` for the next output; nullopt on timeout.
  std::optional<RequestOutput> pop(std::chrono::milliseconds timeout);
  // The reader stops the request: Abort (the client left) or Stop (it matched a stop string, which
  // only the reader's detokenizer sees). The scheduler finishes it with that reason.
  void cancel(FinishReason why = FinishReason::Abort) { cancelled_.store(why); }
  bool cancelled() const { return cancelled_.load() != FinishReason::None; }
  FinishReason cancel_reason() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  std::atomic<FinishReason> cancelled_{FinishReason::None};
};

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> input_ids;
  GenerationParams params;
  std::shared_ptr<OutputChannel> output = std::make_shared<OutputChannel>();
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

}  // namespace mlaserve
