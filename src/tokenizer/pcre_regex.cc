#include "tokenizer/pcre_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <span>

#include "common/error.h"
#include "tokenizer/unicode_supplement.h"

namespace mlaserve {
namespace {

void append_code_point(std::string& out, char32_t c) { out += fmt::format("\\x{{{:X}}}", uint32_t(c)); }

void append_ranges(std::string& out, std::span<const CodeRange> ranges) {
  for (const CodeRange& r : ranges) {
    append_code_point(out, r.first);
    if (r.last != r.first) {
      out.push_back('-');
      append_code_point(out, r.last);
    }
  }
}

// The members of a class escape, written to go inside [...]: PCRE2's own items plus the code
// points Oniguruma's newer tables add to them.
std::string class_items(std::string_view escape_name) {
  std::string items;
  auto add_category = [&](std::string_view category) {
    items += fmt::format("\\p{{{}}}", category);
    append_ranges(items, unicode_category_supplement(category));
  };
  if (escape_name == "s") {
    append_ranges(items, hf_whitespace());
  } else if (escape_name == "d") {
    add_category("Nd");
  } else if (escape_name == "w") {
    append_ranges(items, hf_word_chars());
  } else if (escape_name == "h") {
    items = "0-9a-fA-F";
  } else {
    add_category(escape_name);
  }
  return items;
}

struct Escape {
  std::string name;  // "s", "d", "w", "h" or a property name such as "L"
  bool negated = false;
  size_t length = 0;  // bytes of the escape in the source pattern
};

// Recognizes the class escapes that need rewriting at pattern[pos] == '\\'.
bool parse_class_escape(std::string_view pattern, size_t pos, Escape& escape) {
  if (pos + 1 >= pattern.size()) return false;
  const char c = pattern[pos + 1];
  switch (c) {
    case 's': case 'S': case 'd': case 'D': case 'w': case 'W': case 'h': case 'H':
      escape.name = std::string(1, char(c | 0x20));
      escape.negated = c >= 'A' && c <= 'Z';
      escape.length = 2;
      return true;
    case 'p': case 'P': {
      escape.negated = c == 'P';
      if (pos + 2 >= pattern.size()) return false;
      if (pattern[pos + 2] != '{') {
        escape.name = std::string(1, pattern[pos + 2]);
        escape.length = 3;
      } else {
        const size_t close = pattern.find('}', pos + 3);
        if (close == std::string_view::npos) return false;
        escape.name = std::string(pattern.substr(pos + 3, close - pos - 3));
        escape.length = close - pos + 1;
      }
      if (!escape.name.empty() && escape.name[0] == '^') {
        escape.name.erase(0, 1);
        escape.negated = !escape.negated;
      }
      // Only general categories have supplements; scripts and the like stay as PCRE2 has them.
      return escape.name.size() <= 2 && !unicode_category_supplement(escape.name).empty();
    }
    default:
      return false;
  }
}

// Per-thread matching state shared by all regexes: PCRE2 code is immutable and may be used from
// many threads, but match data and the JIT stack may not.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);

  MatchScratch() {
    MLA_CHECK(data && context && jit_stack, "PCRE2 could not allocate match memory");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    // Tokenizer patterns are linear, but a 10 MB input is one subject: lift the step limit that
    // exists to stop runaway backtracking so long inputs never fail half-way.
    pcre2_set_match_limit(context, UINT32_MAX);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool plain = (c & 0x80) || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string onig_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  for (size_t pos = 0; pos < pattern.size();) {
    const char c = pattern[pos];
    if (c == '\\') {
      Escape escape;
      if (!parse_class_escape(pattern, pos, escape)) {
        // Any other escape is copied with the (possibly multi-byte) character it escapes.
        size_t len = 2;
        while (pos + len < pattern.size() && (uint8_t(pattern[pos + len]) & 0xC0) == 0x80) ++len;
        out.append(pattern.substr(pos, len));
        pos += len;
        continue;
      }
      if (!in_class) {
        out += escape.negated ? "[^" : "[";
        out += class_items(escape.name);
        out += "]";
      } else if (!escape.negated) {
        out += class_items(escape.name);
      } else {
        // A negated escape inside a class cannot take the supplement; PCRE2's own meaning is
        // the same except for code points newer than its tables (and \H, which differs).
        MLA_CHECK(escape.name != "h", "tokenizer regex: \\H inside a character class is not supported");
        out.append(pattern.substr(pos, escape.length));
      }
      pos += escape.length;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back('[');
      ++pos;
      if (pos < pattern.size() && pattern[pos] == '^') out.push_back(pattern[pos++]);
      // A ']' right after the opening bracket is a literal member.
      if (pos < pattern.size() && pattern[pos] == ']') out.push_back(pattern[pos++]);
      continue;
    }
    if (c == '[' && in_class) {
      if (pattern.substr(pos, 2) == "[:") {
        const size_t close = pattern.find(":]", pos + 2);
        MLA_CHECK(close != std::string_view::npos, "tokenizer regex: unterminated [: in {}", pattern);
        out.append(pattern.substr(pos, close + 2 - pos));
        pos = close + 2;
        continue;
      }
      fail("tokenizer regex: nested character classes are not supported: {}", pattern);
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
    ++pos;
  }
  return out;
}

Pcre2Regex::Pcre2Regex(std::string_view onig_pattern) : pattern_(onig_to_pcre2(onig_pattern)) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &error_offset,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("tokenizer regex {:?} does not compile (as {:?}): {} at offset {}", std::string(onig_pattern),
         pattern_, reinterpret_cast<const char*>(message), error_offset);
  }
  // JIT is a speed-up only: without it (unsupported CPU) pcre2_match interprets the same code.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Pcre2Regex::search(std::string_view subject, size_t start, uint32_t options,
                        ByteSpan& found) const {
  MatchScratch& s = scratch();
  const int rc = pcre2_match(static_cast<pcre2_code*>(code_),
                             reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                             options | PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    fail("tokenizer regex {:?} failed on a {}-byte input: {}", pattern_, subject.size(),
         reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
  found = {ovector[0], ovector[1]};
  return true;
}

void Pcre2Regex::find_all(std::string_view subject, std::vector<ByteSpan>& matches) const {
  size_t start = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (start <= subject.size()) {
    ByteSpan m;
    if (!search(subject, start, 0, m)) break;
    if (m.begin == m.end) {
      // Step over one whole character so the next search makes progress.
      size_t next = m.end + 1;
      while (next < subject.size() && (uint8_t(subject[next]) & 0xC0) == 0x80) ++next;
      start = next;
      if (have_previous && previous_end == m.end) continue;
    } else {
      start = m.end;
    }
    have_previous = true;
    previous_end = m.end;
    matches.push_back(m);
  }
}

bool Pcre2Regex::full_match(std::string_view subject) const {
  ByteSpan m;
  return search(subject, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, m);
}

}  // namespace mlaserve
