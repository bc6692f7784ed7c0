// A cursor over Jinja tokens with the small matching helpers both parsers use (statements in
// jinja_parser.cc, expressions in jinja_expression_parser.cc). Errors name the template line.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tokenizer/jinja_lexer.h"

namespace mlaserve::jinja {

class TokenStream {
 public:
  explicit TokenStream(const std::vector<Token>& tokens) : tokens_(tokens) {}

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  [[noreturn]] void error(const std::string& what) const {
    fail("chat template line {}: {}", cur().line, what);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText: return "template text";
      case TokenType::kPrintBegin: return "'{{'";
      case TokenType::kPrintEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kEnd: return "end of template";
      default: return "'" + t.text + "'";
    }
  }

  bool is_name(std::string_view v) const { return cur().type == TokenType::kName && cur().text == v; }
  bool is_op(std::string_view v) const { return cur().type == TokenType::kOperator && cur().text == v; }
  bool skip_name(std::string_view v) {
    if (!is_name(v)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view v) {
    if (!is_op(v)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view v) {
    if (!skip_op(v)) error(fmt::format("expected '{}', got {}", v, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) error("expected a name, got " + describe(cur()));
    std::string name = cur().text;
    next();
    return name;
  }
  void expect_name(std::string_view v) {
    if (!skip_name(v)) error(fmt::format("expected '{}', got {}", v, describe(cur())));
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) error("expected end of statement '%}', got " + describe(cur()));
    next();
  }

 private:
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
};

}  // namespace mlaserve::jinja
