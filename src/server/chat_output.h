// ChatOutput: how the text of one chat choice becomes the API's message. With --reasoning-parser
// the reasoning goes to "reasoning_content"; with --tool-call-parser and a request that offers
// tools, the calls go to "tool_calls" (and the finish reason becomes "tool_calls"); the rest is
// "content". One per choice: streamed deltas in order, or the whole text at once.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace mlaserve {

struct ChatOutputMode {
  bool split_reasoning = false, starts_in_reasoning = false, stream_reasoning = true;
  bool parse_tool_calls = false;
};

class ChatOutput {
 public:
  explicit ChatOutput(const ChatOutputMode& mode);
  // The fields a streamed delta adds ("reasoning_content", "content", "tool_calls"); the last
  // with `finished`. `first` puts "content" in even when empty (the chunk that names the role).
  nlohmann::json next(std::string_view text, bool finished, bool first);
  // The whole message of a non-streaming choice: "content" and, as the mode asks,
  // "reasoning_content" and "tool_calls".
  nlohmann::json message(std::string_view text);
  // Whether a tool call was given out: the choice's finish reason is then "tool_calls".
  bool called() const { return calls_ > 0; }

 private:
  nlohmann::json call_json(const ToolCall& call);
  ChatOutputMode mode_;
  std::optional<StreamedReasoning> reasoning_;
  ToolCallParser tools_;
  int calls_ = 0;
};

}  // namespace mlaserve
