// What the streaming output parsers (reasoning_parser, tool_call_parser) share.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace mlaserve {

// Length of the longest suffix of `s` that is a proper prefix of `marker`: text that may still
// become the marker once more arrives, so a parser of streamed text holds it back.
inline size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// Moves the text of `held` before `marker` to the end of `out` and drops the marker: true. Without
// the marker, moves all of `held` but a suffix that may still become it (none when `final`): false.
inline bool take_until_marker(std::string& held, std::string_view marker, bool final, std::string& out) {
  const size_t at = held.find(marker);
  const size_t n = at != std::string::npos ? at : held.size() - (final ? 0 : partial_marker_suffix(held, marker));
  out.append(held, 0, n);
  held.erase(0, at != std::string::npos ? at + marker.size() : n);
  return at != std::string::npos;
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
