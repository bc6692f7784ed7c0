// TextStream: the reader side of one request. It pulls the engine's token outputs from the
// request's channel, detokenizes them incrementally (never splitting a character), applies the
// stop strings (text is held back while it could still become one; a match ends the request and
// cancels it in the engine) and hands out text deltas. Lives on an HTTP thread, off the scheduler.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/incremental_detokenizer.h"

namespace mlaserve {

struct TextDelta {
  std::string text;                    // new text since the last delta
  std::vector<int32_t> tokens;         // new tokens
  std::vector<TokenLogprob> logprobs;  // their logprobs, when asked for
  bool finished = false;
  FinishReason finish = FinishReason::None;
  std::string matched_stop;            // the stop string, or the stop token's id as text
  std::string error;                   // the engine failed the request
};

class TextStream {
 public:
  TextStream(std::shared_ptr<Request> request, const Tokenizer& tokenizer);
  // Waits up to `timeout` for progress; nullopt when there was none (check the client, retry).
  std::optional<TextDelta> next(std::chrono::milliseconds timeout);
  void cancel() { request_->output->cancel(); }
  const std::shared_ptr<OutputChannel>& channel() const { return request_->output; }

  bool finished() const { return finished_; }
  const std::string& text() const { return text_; }        // all text handed out
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t completion_tokens() const { return int64_t(tokens_.size()); }
  std::chrono::steady_clock::time_point first_token_time() const { return first_token_; }

 private:
  std::shared_ptr<Request> request_;
  IncrementalDetokenizer detok_;
  std::string decoded_;  // all decoded text, including what is held back
  std::string text_;     // handed out
  std::vector<int32_t> tokens_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point first_token_{};
};

}  // namespace mlaserve
