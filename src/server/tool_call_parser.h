// ToolCallParser: the tool calls in a DeepSeek-V3 answer, for --tool-call-parser deepseekv3 (the
// chat API's "tool_calls", as SGLang's). The model writes them after its text as
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   ...more calls...<｜tool▁calls▁end｜>
// (V3.1 drops the type and the fence: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>;
// both are read). It takes one stream's text deltas in order (the last one `final`) and gives out
// the text before the calls and each call once it is complete. Text after a call that does not follow the format is
// given out as text, unchanged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlaserve {

struct ToolCall {
  std::string name, arguments;  // arguments: the JSON text as the model wrote it
};

class ToolCallParser {
 public:
  struct Parts {
    std::string content;
    std::vector<ToolCall> calls;
  };
  Parts feed(std::string_view delta, bool final);

 private:
  enum class State { Text, Calls, Raw };
  std::string held_;
  State state_ = State::Text;
};

// A whole answer at once (a non-streaming response).
ToolCallParser::Parts parse_tool_calls(std::string_view text);

}  // namespace mlaserve
