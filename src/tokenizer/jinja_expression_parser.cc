#include "tokenizer/jinja_expression_parser.h"

namespace mlaserve::jinja {

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

std::vector<ExprPtr> ExpressionParser::parse_filter_chain(bool first_has_pipe) {
  std::vector<ExprPtr> filters;
  bool inline_first = !first_has_pipe;
  while (inline_first || s_.is_op("|")) {
    if (!inline_first) s_.next();
    inline_first = false;
    auto f = make_expr(ExprKind::kFilter, s_.cur().line);
    f->args.push_back(nullptr);
    f->name = s_.expect_name();
    if (s_.is_op("(")) parse_call_args(*f);
    filters.push_back(std::move(f));
  }
  return filters;
}

bool ExpressionParser::is_tuple_end(std::initializer_list<std::string_view> extra_ends) const {
  const TokenType t = s_.cur().type;
  if (t == TokenType::kPrintEnd || t == TokenType::kBlockEnd || s_.is_op(")")) return true;
  for (std::string_view end : extra_ends) {
    if (s_.is_name(end)) return true;
  }
  return false;
}

ExprPtr ExpressionParser::parse_tuple(bool with_condition, std::initializer_list<std::string_view> extra_ends,
                                      bool explicit_parentheses) {
  const int line = s_.cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) s_.expect_op(",");
    if (is_tuple_end(extra_ends)) break;
    items.push_back(with_condition ? parse_expression() : parse_or());
    if (s_.is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) s_.error("expected an expression, got " + s_.describe(s_.cur()));
  }
  auto t = make_expr(ExprKind::kTuple, line);
  t->args = std::move(items);
  return t;
}

ExprPtr ExpressionParser::parse_expression() {
  const int line = s_.cur().line;
  ExprPtr value = parse_or();
  while (s_.skip_name("if")) {
    auto c = make_expr(ExprKind::kCondition, line);
    ExprPtr condition = parse_or();
    ExprPtr otherwise = s_.skip_name("else") ? parse_expression() : nullptr;
    c->args.push_back(std::move(value));
    c->args.push_back(std::move(condition));
    c->args.push_back(std::move(otherwise));
    value = std::move(c);
  }
  return value;
}

ExprPtr ExpressionParser::binary(ExprKind kind, std::string op, ExprPtr left, ExprPtr right, int line) {
  auto e = make_expr(kind, line);
  e->name = std::move(op);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (s_.is_name("or")) {
    const int line = s_.cur().line;
    s_.next();
    left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (s_.is_name("and")) {
    const int line = s_.cur().line;
    s_.next();
    left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (s_.is_name("not")) {
    auto e = make_expr(ExprKind::kUnary, s_.cur().line);
    s_.next();
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  const int line = s_.cur().line;
  ExprPtr first = parse_math1();
  ExprPtr compare;
  while (true) {
    std::string op;
    if (s_.cur().type == TokenType::kOperator &&
        (s_.cur().text == "==" || s_.cur().text == "!=" || s_.cur().text == "<" || s_.cur().text == "<=" ||
         s_.cur().text == ">" || s_.cur().text == ">=")) {
      op = s_.cur().text;
      s_.next();
    } else if (s_.is_name("in")) {
      op = "in";
      s_.next();
    } else if (s_.is_name("not") && s_.peek().type == TokenType::kName && s_.peek().text == "in") {
      op = "not in";
      s_.next();
      s_.next();
    } else {
      break;
    }
    if (!compare) {
      compare = make_expr(ExprKind::kCompare, line);
      compare->args.push_back(std::move(first));
    }
    compare->ops.push_back(op);
    compare->args.push_back(parse_math1());
  }
  return compare ? std::move(compare) : std::move(first);
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (s_.is_op("+") || s_.is_op("-")) {
    const int line = s_.cur().line;
    std::string op = s_.cur().text;
    s_.next();
    left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  ExprPtr left = parse_math2();
  while (s_.is_op("~")) {
    const int line = s_.cur().line;
    s_.next();
    left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (s_.is_op("*") || s_.is_op("/") || s_.is_op("//") || s_.is_op("%")) {
    const int line = s_.cur().line;
    std::string op = s_.cur().text;
    s_.next();
    left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (s_.is_op("**")) {
    const int line = s_.cur().line;
    s_.next();
    left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (s_.is_op("-") || s_.is_op("+")) {
    node = make_expr(ExprKind::kUnary, s_.cur().line);
    node->name = s_.cur().text;
    s_.next();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = s_.cur();
  ExprPtr node;
  switch (t.type) {
    case TokenType::kName:
      node = make_expr(ExprKind::kLiteral, t.line);
      if (t.text == "true" || t.text == "True") {
        node->literal = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        node->literal = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        node->literal = Value::none();
      } else {
        node->kind = ExprKind::kName;
        node->name = t.text;
      }
      s_.next();
      return node;
    case TokenType::kString: {
      // Adjacent string literals concatenate, as in Python.
      std::string text;
      const int line = t.line;
      while (s_.cur().type == TokenType::kString) {
        text += s_.cur().text;
        s_.next();
      }
      node = make_expr(ExprKind::kLiteral, line);
      node->literal = Value(std::move(text));
      return node;
    }
    case TokenType::kInteger:
      node = make_expr(ExprKind::kLiteral, t.line);
      try {
        node->literal = Value(int64_t(std::stoll(t.text)));
      } catch (const std::exception&) {
        s_.error("integer literal out of range: " + t.text);
      }
      s_.next();
      return node;
    case TokenType::kFloat:
      node = make_expr(ExprKind::kLiteral, t.line);
      node->literal = Value(std::stod(t.text));
      s_.next();
      return node;
    case TokenType::kOperator:
      if (t.text == "(") {
        s_.next();
        node = parse_tuple(true, {}, true);
        s_.expect_op(")");
        return node;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default:
      break;
  }
  s_.error("unexpected " + s_.describe(t));
}

ExprPtr ExpressionParser::parse_list() {
  auto node = make_expr(ExprKind::kList, s_.cur().line);
  s_.expect_op("[");
  while (!s_.is_op("]")) {
    if (!node->args.empty()) s_.expect_op(",");
    if (s_.is_op("]")) break;
    node->args.push_back(parse_expression());
  }
  s_.expect_op("]");
  return node;
}

ExprPtr ExpressionParser::parse_dict() {
  auto node = make_expr(ExprKind::kDict, s_.cur().line);
  s_.expect_op("{");
  while (!s_.is_op("}")) {
    if (!node->args.empty()) s_.expect_op(",");
    if (s_.is_op("}")) break;
    node->args.push_back(parse_expression());
    s_.expect_op(":");
    node->args.push_back(parse_expression());
  }
  s_.expect_op("}");
  return node;
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (s_.is_op(".") || s_.is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (s_.is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (s_.is_op("|")) {
      s_.next();
      auto f = make_expr(ExprKind::kFilter, s_.cur().line);
      f->name = s_.expect_name();
      while (s_.skip_op(".")) f->name += "." + s_.expect_name();
      f->args.push_back(std::move(node));
      if (s_.is_op("(")) parse_call_args(*f);
      node = std::move(f);
    } else if (s_.is_name("is")) {
      node = parse_test(std::move(node));
    } else if (s_.is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
  auto test = make_expr(ExprKind::kTest, s_.cur().line);
  s_.next();  // "is"
  test->negated = s_.skip_name("not");
  test->name = s_.expect_name();
  while (s_.skip_op(".")) test->name += "." + s_.expect_name();
  test->args.push_back(std::move(node));
  const TokenType t = s_.cur().type;
  if (s_.is_op("(")) {
    parse_call_args(*test);
  } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
              t == TokenType::kFloat || s_.is_op("[") || s_.is_op("{")) &&
             !s_.is_name("else") && !s_.is_name("or") && !s_.is_name("and")) {
    // One argument without parentheses: "is divisibleby 3", "is sameas false".
    if (s_.is_name("is")) s_.error("you cannot chain multiple tests with is");
    test->args.push_back(parse_postfix(parse_primary()));
  }
  return test;
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
  const int line = s_.cur().line;
  if (s_.skip_op(".")) {
    if (s_.cur().type == TokenType::kName) {
      auto attr = make_expr(ExprKind::kAttribute, line);
      attr->name = s_.cur().text;
      s_.next();
      attr->args.push_back(std::move(node));
      return attr;
    }
    if (s_.cur().type != TokenType::kInteger) s_.error("expected name or number after '.'");
    auto item = make_expr(ExprKind::kItem, line);
    item->args.push_back(std::move(node));
    auto index = make_expr(ExprKind::kLiteral, line);
    index->literal = Value(int64_t(std::stoll(s_.cur().text)));
    s_.next();
    item->args.push_back(std::move(index));
    return item;
  }
  s_.expect_op("[");
  std::vector<ExprPtr> subscripts;
  while (!s_.is_op("]")) {
    if (!subscripts.empty()) s_.expect_op(",");
    subscripts.push_back(parse_subscribed());
  }
  s_.expect_op("]");
  if (subscripts.size() == 1 && subscripts[0] && subscripts[0]->kind == ExprKind::kSlice) {
    subscripts[0]->args[0] = std::move(node);
    return std::move(subscripts[0]);
  }
  for (const ExprPtr& sub : subscripts) {
    if (sub && sub->kind == ExprKind::kSlice) s_.error("slices inside a multi-part subscript are not supported");
  }
  auto item = make_expr(ExprKind::kItem, line);
  item->args.push_back(std::move(node));
  if (subscripts.size() == 1) {
    item->args.push_back(std::move(subscripts[0]));
  } else {
    auto tuple = make_expr(ExprKind::kTuple, line);
    tuple->args = std::move(subscripts);
    item->args.push_back(std::move(tuple));
  }
  return item;
}

// One subscript: an expression, or a slice start:stop:step with any part left out. A slice
// comes back as kSlice whose args[0] (the object) the caller fills in.
ExprPtr ExpressionParser::parse_subscribed() {
  const int line = s_.cur().line;
  ExprPtr start;
  if (!s_.is_op(":")) {
    start = parse_expression();
    if (!s_.is_op(":")) return start;
  }
  s_.next();  // ':'
  auto slice = make_expr(ExprKind::kSlice, line);
  slice->args.push_back(nullptr);
  slice->args.push_back(std::move(start));
  slice->args.push_back(s_.is_op(":") || s_.is_op("]") || s_.is_op(",") ? nullptr : parse_expression());
  ExprPtr step;
  if (s_.skip_op(":")) {
    if (!s_.is_op("]") && !s_.is_op(",")) step = parse_expression();
  }
  slice->args.push_back(std::move(step));
  return slice;
}

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  auto call = make_expr(ExprKind::kCall, s_.cur().line);
  call->args.push_back(std::move(callee));
  parse_call_args(*call);
  return call;
}

void ExpressionParser::parse_call_args(Expr& node) {
  s_.expect_op("(");
  bool need_comma = false;
  while (!s_.is_op(")")) {
    if (need_comma) {
      s_.expect_op(",");
      if (s_.is_op(")")) break;
    }
    if (s_.is_op("*") || s_.is_op("**")) s_.error("*args and **kwargs in calls are not supported");
    if (s_.cur().type == TokenType::kName && s_.peek().type == TokenType::kOperator && s_.peek().text == "=") {
      std::string key = s_.cur().text;
      s_.next();
      s_.next();
      node.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!node.kwargs.empty()) s_.error("positional argument follows keyword argument");
      node.args.push_back(parse_expression());
    }
    need_comma = true;
  }
  s_.expect_op(")");
}

}  // namespace mlaserve::jinja
