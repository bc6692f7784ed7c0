// Jinja lexer: template source -> tokens, with the whitespace rules of the environment that
// transformers renders chat templates in (trim_blocks and lstrip_blocks on, "-" and "+" markers,
// newlines normalized to "\n", one trailing newline dropped). Comments vanish here and raw blocks
// become text, so the parser only sees text, expression tags and statement tags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::jinja {

enum class TokenType : uint8_t {
  kText,        // template text outside tags
  kPrintBegin,  // {{
  kPrintEnd,    // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,    // text holds the operator, e.g. "==", "|", "("
  kEnd,         // end of the template
};

struct Token {
  TokenType type;
  std::string text;
  int line;
};

// Throws mlaserve::Error ("chat template line N: ...") on malformed tags.
std::vector<Token> tokenize(std::string_view source);

// Python's str.isspace for one code point (the whitespace Jinja's "-" markers strip).
bool python_isspace(char32_t c);

}  // namespace mlaserve::jinja
