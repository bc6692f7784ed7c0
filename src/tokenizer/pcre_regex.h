// A regex written for HF tokenizers (Oniguruma syntax and semantics), run by PCRE2 with UTF, UCP and
// JIT. The pattern is first rewritten so PCRE2 agrees with Oniguruma where they differ:
//   \p{X}     gains the code points of later Unicode versions (unicode_supplement.cc)
//   \s \S     become HF's White_Space set (PCRE2's \s also has U+180E)
//   \w        becomes HF's word characters, spelled out
//   \d \h     become \p{Nd} and [0-9a-fA-F] as in Oniguruma
//   ^ $       match at line breaks (Oniguruma's Ruby syntax is always multi-line)
// Matching is thread-safe: each thread keeps its own match data and JIT stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve {

struct ByteSpan {
  size_t begin;
  size_t end;
};

// A pattern that matches `text` literally (what HF does with a Split/Replace "String" pattern).
std::string regex_escape(std::string_view text);

// Rewrites an Oniguruma-flavoured pattern into the PCRE2 pattern described above.
std::string onig_to_pcre2(std::string_view pattern);

class Pcre2Regex {
 public:
  explicit Pcre2Regex(std::string_view onig_pattern);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Appends every match in `subject` (valid UTF-8), left to right and non-overlapping, with the
  // iteration rules of HF's find_iter: after an empty match the search resumes one character
  // later, and an empty match right where the previous match ended is skipped.
  void find_all(std::string_view subject, std::vector<ByteSpan>& matches) const;

  // Whether the whole of `subject` is one match (anchored at both ends).
  bool full_match(std::string_view subject) const;

  const std::string& pcre2_pattern() const { return pattern_; }

 private:
  // Runs one search from `start`; returns false when there is no match.
  bool search(std::string_view subject, size_t start, uint32_t options, ByteSpan& found) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so pcre2.h stays out of headers
};

}  // namespace mlaserve
