#include "server/chat_output.h"

#include <fmt/format.h>

#include <random>

namespace mlaserve {

using nlohmann::json;

ChatOutput::ChatOutput(const ChatOutputMode& mode) : mode_(mode) {
  if (mode.split_reasoning) reasoning_.emplace(mode.starts_in_reasoning, mode.stream_reasoning);
}

json ChatOutput::call_json(const ToolCall& call) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return {{"index", calls_++},
          {"id", fmt::format("call_{:016x}", rng())},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

json ChatOutput::next(std::string_view text, bool finished, bool first) {
  json delta = json::object();
  ReasoningSplitter::Parts parts;
  if (reasoning_)
    parts = reasoning_->next(text, finished);
  else
    parts.content = std::string(text);
  if (!parts.reasoning.empty()) delta["reasoning_content"] = parts.reasoning;
  if (mode_.parse_tool_calls) {
    ToolCallParser::Parts found = tools_.feed(parts.content, finished);
    parts.content = std::move(found.content);
    for (const ToolCall& c : found.calls) delta["tool_calls"].push_back(call_json(c));
  }
  if (!parts.content.empty() || first) delta["content"] = parts.content;
  return delta;
}

json ChatOutput::message(std::string_view text) {
  json m = {{"role", "assistant"}};
  std::string content(text);
  if (mode_.split_reasoning) {
    ReasoningSplitter::Parts parts = split_reasoning(text, mode_.starts_in_reasoning);
    m["reasoning_content"] = parts.reasoning.empty() ? json(nullptr) : json(parts.reasoning);
    content = std::move(parts.content);
  }
  if (mode_.parse_tool_calls) {
    ToolCallParser::Parts found = parse_tool_calls(content);
    if (!found.calls.empty()) {
      for (const ToolCall& c : found.calls) {
        json call = call_json(c);
        call.erase("index");  // a whole message's calls carry no index (OpenAI)
        m["tool_calls"].push_back(call);
      }
      m["content"] = found.content.empty() ? json(nullptr) : json(found.content);
      return m;
    }
  }
  m["content"] = content;
  return m;
}

}  // namespace mlaserve
