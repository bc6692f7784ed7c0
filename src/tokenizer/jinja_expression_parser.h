// Jinja expression parser, following jinja2's grammar and precedence: condition < or < and < not <
// comparison < + - < ~ < * / // % < ** < unary < postfix, with filters and tests binding to the
// unary operand. Used by the statement parser for every expression inside a tag.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_token_stream.h"

namespace mlaserve::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(TokenStream& stream) : s_(stream) {}

  // A full expression, conditional included ("a if b else c").
  ExprPtr parse_expression();
  // Comma-separated expressions: one alone, a kTuple when there is a comma. `extra_ends` are
  // names that also end it (the "recursive" of a for loop).
  ExprPtr parse_tuple(bool with_condition, std::initializer_list<std::string_view> extra_ends = {},
                      bool explicit_parentheses = false);
  // "| f(args) | g" (or "f(args) | g" after the filter tag): kFilter nodes without an input.
  std::vector<ExprPtr> parse_filter_chain(bool first_has_pipe = true);
  // "(a, b, key=c)": appends to node.args and node.kwargs.
  void parse_call_args(Expr& node);

 private:
  bool is_tuple_end(std::initializer_list<std::string_view> extra_ends) const;
  ExprPtr binary(ExprKind kind, std::string op, ExprPtr left, ExprPtr right, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr callee);

  TokenStream& s_;
};

ExprPtr make_expr(ExprKind kind, int line);

}  // namespace mlaserve::jinja
