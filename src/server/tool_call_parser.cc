#include "server/tool_call_parser.h"

#include "server/text_markers.h"

namespace mlaserve {

namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>", kCallsEnd = "<｜tool▁calls▁end｜>",
                           kCallBegin = "<｜tool▁call▁begin｜>", kCallEnd = "<｜tool▁call▁end｜>",
                           kSep = "<｜tool▁sep｜>";

// One call's body, between its begin and end markers; false when it is not a call.
bool parse_call(std::string_view body, ToolCall& call) {
  size_t sep = body.find(kSep);
  if (sep == std::string_view::npos) return false;
  std::string_view head = trim_blanks(body.substr(0, sep)), rest = body.substr(sep + kSep.size());
  std::string_view name, args;
  size_t fence = rest.find("```");
  if (head == "function" && fence != std::string_view::npos) {  // V3: type, then name and fenced JSON
    name = trim_blanks(rest.substr(0, fence));
    args = rest.substr(fence + 3);
    if (args.starts_with("json")) args.remove_prefix(4);
    size_t close = args.rfind("```");
    if (close == std::string_view::npos) return false;
    args = args.substr(0, close);
  } else {  // V3.1: name, then the JSON
    name = head;
    args = rest;
  }
  name = trim_blanks(name);
  args = trim_blanks(args);
  if (name.empty() || name.find_first_of(" \n") != std::string_view::npos) return false;
  call.name = std::string(name);
  call.arguments = std::string(args);
  return true;
}

}  // namespace

ToolCallParser::Parts ToolCallParser::feed(std::string_view delta, bool final) {
  held_ += delta;
  Parts out;
  while (!held_.empty()) {
    switch (state_) {
      case State::Text: {
        if (!take_until_marker(held_, kCallsBegin, final, out.content)) return out;
        state_ = State::Calls;
        break;
      }
      case State::Calls: {
        size_t first = held_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) {
          if (final) held_.clear();
          return out;
        }
        std::string_view rest = std::string_view(held_).substr(first);
        if (rest.starts_with(kCallsEnd)) {  // whatever follows the calls is text again
          held_.erase(0, first + kCallsEnd.size());
          state_ = State::Text;
          break;
        }
        if (rest.starts_with(kCallBegin)) {
          size_t end = rest.find(kCallEnd);
          if (end == std::string_view::npos) {
            if (!final) return out;  // the call is still being written
            state_ = State::Raw;
            break;
          }
          ToolCall call;
          if (!parse_call(rest.substr(kCallBegin.size(), end - kCallBegin.size()), call)) {
            state_ = State::Raw;
            break;
          }
          out.calls.push_back(std::move(call));
          held_.erase(0, first + end + kCallEnd.size());
          break;
        }
        if (!final && (kCallBegin.starts_with(rest) || kCallsEnd.starts_with(rest))) return out;
        state_ = State::Raw;
        break;
      }
      case State::Raw:  // not the format: the model's text as it wrote it
        out.content += held_;
        held_.clear();
        return out;
    }
  }
  return out;
}

ToolCallParser::Parts parse_tool_calls(std::string_view text) {
  return ToolCallParser().feed(text, true);
}

}  // namespace mlaserve
