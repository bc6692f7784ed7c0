#include "server/text_stream.h"

#include <algorithm>

namespace mlaserve {

TextStream::TextStream(std::shared_ptr<Request> request, const Tokenizer& tokenizer)
    : request_(std::move(request)), detok_(tokenizer, request_->params.skip_special_tokens) {}

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
static size_t held_for_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return hold;
}

std::optional<TextDelta> TextStream::next(std::chrono::milliseconds timeout) {
  if (finished_) return std::nullopt;
  auto out = request_->output->pop(timeout);
  if (!out) return std::nullopt;
  TextDelta d;
  prompt_tokens_ = out->prompt_tokens;
  cached_tokens_ = out->cached_tokens;
  if (!out->tokens.empty() && tokens_.empty()) first_token_ = std::chrono::steady_clock::now();
  const auto& stops = request_->params.stop;
  for (size_t i = 0; i < out->tokens.size(); ++i) {
    tokens_.push_back(out->tokens[i]);
    d.tokens.push_back(out->tokens[i]);
    if (i < out->logprobs.size()) d.logprobs.push_back(out->logprobs[i]);
    size_t before = decoded_.size();
    decoded_ += detok_.push(out->tokens[i]);
    // A stop string may only start within the new text or the tail held back before it.
    size_t longest = 0;
    for (auto& s : stops) longest = std::max(longest, s.size());
    size_t from = before >= longest ? before - longest + 1 : 0;
    size_t cut = std::string::npos;
    for (auto& s : stops) {
      size_t at = decoded_.find(s, from);
      if (at != std::string::npos && at < cut) {
        cut = at;
        d.matched_stop = s;
      }
    }
    if (cut != std::string::npos) {
      decoded_.resize(cut);
      d.finished = true;
      d.finish = FinishReason::Stop;
      request_->output->cancel(FinishReason::Stop);  // the engine stops generating for it
      break;
    }
  }
  if (!d.finished && out->finish != FinishReason::None) {
    d.finished = true;
    d.finish = out->finish;
    d.error = out->error;
    if (out->matched_stop_token >= 0) d.matched_stop = std::to_string(out->matched_stop_token);
    decoded_ += detok_.finish();
  }
  size_t end = d.finished ? decoded_.size() : decoded_.size() - held_for_stop(decoded_, stops);
  if (end > text_.size()) {
    d.text = decoded_.substr(text_.size(), end - text_.size());
    text_.append(d.text);
  }
  finished_ = d.finished;
  return d;
}

}  // namespace mlaserve
