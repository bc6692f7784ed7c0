#include "tokenizer/jinja_strings.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/utf8.h"

namespace mlaserve::jinja {
namespace {

bool is_space(std::string_view cp) {
  size_t pos = 0;
  return python_isspace(utf8::next(cp, pos));
}

bool is_line_break(std::string_view cp) {
  return cp == "\n" || cp == "\r" || cp == "\x0b" || cp == "\x0c" || cp == "\x1c" || cp == "\x1d" ||
         cp == "\x1e" || cp == "\xc2\x85" || cp == "\xe2\x80\xa8" || cp == "\xe2\x80\xa9";
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    utf8::next(s, pos);
    out.push_back(s.substr(start, pos - start));
  }
  return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<std::string_view> strip_set;
  if (chars) strip_set = code_points(*chars);
  auto strippable = [&](std::string_view cp) {
    if (!chars) return is_space(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out.append(cps[i]);
  return out;
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& separator,
                                  int64_t max_split, bool from_right) {
  std::vector<std::string> parts;
  if (separator) {
    MLA_CHECK(!separator->empty(), "chat template: empty separator");
    const std::string& sep = *separator;
    if (!from_right) {
      size_t start = 0;
      while (max_split < 0 || int64_t(parts.size()) < max_split) {
        const size_t found = s.find(sep, start);
        if (found == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, found - start));
        start = found + sep.size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      while (max_split < 0 || int64_t(parts.size()) < max_split) {
        if (end < sep.size()) break;
        const size_t found = s.rfind(sep, end - sep.size());
        if (found == std::string_view::npos) break;
        parts.emplace_back(s.substr(found + sep.size(), end - found - sep.size()));
        end = found;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // White-space splitting: runs of space separate; the unsplit remainder keeps inner space.
  auto cps = code_points(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (max_split >= 0 && int64_t(parts.size()) >= max_split) {
      size_t end = cps.size();
      while (end > i && is_space(cps[end - 1])) --end;
      std::string rest;
      for (size_t k = i; k < end; ++k) rest.append(cps[k]);
      parts.push_back(std::move(rest));
      break;
    }
    std::string word;
    while (i < cps.size() && !is_space(cps[i])) word.append(cps[i++]);
    parts.push_back(std::move(word));
  }
  if (from_right) {
    // Parts were collected from the end with reversed code points; restore both orders.
    for (auto& part : parts) {
      auto pieces = code_points(part);
      std::string fixed;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) fixed.append(*it);
      part = std::move(fixed);
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keep_ends) {
  std::vector<std::string> lines;
  const auto cps = code_points(s);
  std::string line;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) {
      line.append(cps[i]);
      continue;
    }
    std::string end(cps[i]);
    if (cps[i] == "\r" && i + 1 < cps.size() && cps[i + 1] == "\n") {
      end += "\n";
      ++i;
    }
    if (keep_ends) line += end;
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const auto cps = code_points(s);
    int64_t done = 0;
    for (std::string_view cp : cps) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      out.append(cp);
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = s.find(old_text, start);
    if (found == std::string_view::npos) break;
    out.append(s.substr(start, found - start));
    out.append(new_text);
    start = found + old_text.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_upper(c);
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::string py_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    if (ascii_alpha(c)) {
      c = previous_cased ? ascii_lower(c) : ascii_upper(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::vector<int64_t> py_slice_indexes(int64_t length, std::optional<int64_t> start,
                                      std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  MLA_CHECK(st != 0, "chat template: slice step cannot be zero");
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += length;
    return std::clamp(v, lo, hi);
  };
  std::vector<int64_t> out;
  if (st > 0) {
    const int64_t b = start ? clamp(*start, 0, length) : 0;
    const int64_t e = stop ? clamp(*stop, 0, length) : length;
    for (int64_t i = b; i < e; i += st) out.push_back(i);
  } else {
    const int64_t b = start ? clamp(*start, -1, length - 1) : length - 1;
    const int64_t e = stop ? clamp(*stop, -1, length - 1) : -1;
    for (int64_t i = b; i > e; i += st) out.push_back(i);
  }
  return out;
}

}  // namespace mlaserve::jinja
