// Unicode class data that makes PCRE2 agree with HF tokenizers' regex engine. The system PCRE2 may
// carry older Unicode tables than the Oniguruma inside `tokenizers`; unicode_supplement.cc (generated
// by tests/tools/make_unicode_supplement.py) lists what each general category lacks here.
#pragma once

#include <span>
#include <string_view>

namespace mlaserve {

struct CodeRange {
  char32_t first;
  char32_t last;  // inclusive
};

// Code points to add to PCRE2's \p{category} (e.g. "L", "Nd"); empty for unknown names.
std::span<const CodeRange> unicode_category_supplement(std::string_view category);

// The whole of HF's \s (Unicode White_Space): PCRE2's \s also matches U+180E, so \s is spelled out.
std::span<const CodeRange> hf_whitespace();
// Whether c is whitespace as HF's tokenizers (Rust char::is_whitespace) sees it.
bool is_hf_whitespace(char32_t c);

// The whole of HF's \w, which matches no combination of PCRE2 classes.
std::span<const CodeRange> hf_word_chars();

}  // namespace mlaserve
