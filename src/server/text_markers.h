// What the streaming output parsers (reasoning_parser, tool_call_parser) share.
#pragma once

#include <algorithm>
#include <string_view>

namespace mlaserve {

// Length of the longest suffix of `s` that is a proper prefix of `marker`: text that may still
// become the marker once more arrives, so a parser of streamed text holds it back.
inline size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace mlaserve
