// ReasoningSplitter: splits the output of a DeepSeek reasoning model into its reasoning (what it
// writes before "</think>") and its answer, for --reasoning-parser (the chat API's
// "reasoning_content", as SGLang's). It takes the text deltas of one stream in order. A delta that
// ends in what may be the start of a tag is held back until the next one decides; the last delta
// (`final`) gives out what is left.
#pragma once

#include <string>
#include <string_view>

namespace mlaserve {

class ReasoningSplitter {
 public:
  // `starts_in_reasoning`: the prompt already opened the reasoning (DeepSeek-R1's template ends in
  // "<think>\n"), so the output begins inside it. Otherwise an output that begins with "<think>"
  // enters it, and any other is all answer.
  explicit ReasoningSplitter(bool starts_in_reasoning);

  struct Parts {
    std::string reasoning, content;
  };
  Parts feed(std::string_view delta, bool final);

 private:
  enum class State { Start, Reasoning, AnswerStart, Answer };
  std::string held_;
  State state_;
  bool reasoning_start_;  // nothing of the reasoning given out yet: a leading "<think>" is dropped
};

// One streamed answer: the parts each delta adds (the last delta with `finished`). Unless
// `stream_reasoning`, the reasoning is held back and given at once when the answer starts or the
// stream ends.
class StreamedReasoning {
 public:
  StreamedReasoning(bool starts_in_reasoning, bool stream_reasoning)
      : splitter_(starts_in_reasoning), stream_reasoning_(stream_reasoning) {}
  ReasoningSplitter::Parts next(std::string_view delta, bool finished);

 private:
  ReasoningSplitter splitter_;
  bool stream_reasoning_;
  std::string unsent_;
};

// A whole output at once (a non-streaming answer): the reasoning without its surrounding blanks.
ReasoningSplitter::Parts split_reasoning(std::string_view text, bool starts_in_reasoning);

// Whether a chat request's output starts in reasoning, by --reasoning-parser (ServerArgs checks the
// name): deepseek-r1 always; deepseek-v3 (V3.1's hybrid template) when chat_template_kwargs has
// "thinking": true.
bool starts_in_reasoning(const std::string& parser, bool thinking_requested);

}  // namespace mlaserve
