#include "server/reasoning_parser.h"

#include <algorithm>
#include <utility>

#include "server/text_markers.h"

namespace mlaserve {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start), reasoning_start_(starts_in_reasoning) {}

ReasoningSplitter::Parts ReasoningSplitter::feed(std::string_view delta, bool final) {
  held_ += delta;
  Parts out;
  while (!held_.empty()) {
    switch (state_) {
      case State::Start: {  // does the output open with "<think>" (after blanks)?
        size_t first = 0;
        while (first < held_.size() && is_blank(held_[first])) ++first;
        std::string_view rest = std::string_view(held_).substr(first);
        if (rest.starts_with(kOpen)) {
          held_.erase(0, first + kOpen.size());
          state_ = State::Reasoning;
          reasoning_start_ = false;
        } else if (!final && kOpen.starts_with(rest)) {
          return out;  // blanks or a piece of "<think>" so far
        } else {
          state_ = State::Answer;
        }
        break;
      }
      case State::Reasoning: {
        if (reasoning_start_) {  // a template that opened the reasoning may see the model open it again
          if (held_.starts_with(kOpen))
            held_.erase(0, kOpen.size());
          else if (!final && kOpen.starts_with(held_))
            return out;
          reasoning_start_ = false;
          break;
        }
        if (!take_until_marker(held_, kClose, final, out.reasoning)) return out;
        state_ = State::AnswerStart;
        break;
      }
      case State::AnswerStart: {  // the blank lines after "</think>" are layout, not answer
        size_t first = 0;
        while (first < held_.size() && is_blank(held_[first])) ++first;
        held_.erase(0, first);
        if (held_.empty()) return out;
        state_ = State::Answer;
        break;
      }
      case State::Answer:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
  return out;
}

ReasoningSplitter::Parts StreamedReasoning::next(std::string_view delta, bool finished) {
  ReasoningSplitter::Parts parts = splitter_.feed(delta, finished);
  if (!stream_reasoning_) {
    unsent_ += parts.reasoning;
    parts.reasoning.clear();
    if (!parts.content.empty() || finished) parts.reasoning = std::exchange(unsent_, "");
  }
  return parts;
}

ReasoningSplitter::Parts split_reasoning(std::string_view text, bool starts_in_reasoning) {
  ReasoningSplitter::Parts all = ReasoningSplitter(starts_in_reasoning).feed(text, true);
  all.reasoning = std::string(trim_blanks(all.reasoning));
  return all;
}

bool starts_in_reasoning(const std::string& parser, bool thinking_requested) {
  return parser == "deepseek-r1" || (parser == "deepseek-v3" && thinking_requested);
}

}  // namespace mlaserve
