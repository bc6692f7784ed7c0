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

inline bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// `s` without the blanks (spaces, tabs, line breaks) at its two ends.
inline std::string_view trim_blanks(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_blank(s[begin])) ++begin;
  while (end > begin && is_blank(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

}  // namespace mlaserve
