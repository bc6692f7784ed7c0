#include "tokenizer/jinja_parser.h"

#include <initializer_list>
#include <string_view>

#include "common/error.h"
#include "tokenizer/jinja_expression_parser.h"
#include "tokenizer/jinja_token_stream.h"

namespace mlaserve::jinja {
namespace {

StmtPtr make_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : s_(tokens), expressions_(s_) {}

  Body parse_template() {
    Body body = subparse({});
    if (s_.cur().type != TokenType::kEnd) s_.error("unexpected '" + s_.cur().text + "'");
    return body;
  }

 private:
  // Statements until a {% name %} with a name in `ends`; stops on that name (after its {%).
  Body subparse(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = s_.cur();
      if (t.type == TokenType::kEnd) {
        if (ends.size() != 0) s_.error(fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
        return body;
      }
      if (t.type == TokenType::kText) {
        auto s = make_stmt(StmtKind::kText, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        s_.next();
      } else if (t.type == TokenType::kPrintBegin) {
        s_.next();
        auto s = make_stmt(StmtKind::kPrint, t.line);
        s->expr = expressions_.parse_tuple(true);
        if (s_.cur().type != TokenType::kPrintEnd) s_.error("expected '}}', got " + s_.describe(s_.cur()));
        s_.next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        s_.next();
        for (std::string_view end : ends) {
          if (s_.is_name(end)) return body;
        }
        body.push_back(parse_statement());
        s_.expect_block_end();
      } else {
        s_.error("unexpected " + s_.describe(t));
      }
    }
  }

  // Parses the body after a statement's opening tag (at its %}); leaves the end name consumed.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    s_.expect_block_end();
    Body body = subparse(ends);
    return body;
  }

  StmtPtr parse_statement() {
    const int line = s_.cur().line;
    if (s_.cur().type != TokenType::kName) s_.error("tag name expected");
    const std::string keyword = s_.cur().text;
    s_.next();
    if (keyword == "if") return parse_if(line);
    if (keyword == "for") return parse_for(line);
    if (keyword == "set") return parse_set(line);
    if (keyword == "macro") return parse_macro(line);
    if (keyword == "call") return parse_call_block(line);
    if (keyword == "filter") return parse_filter_block(line);
    if (keyword == "with") return parse_with(line);
    if (keyword == "generation") {
      // transformers' AssistantTracker tag: marks assistant text, renders its body unchanged.
      auto s = make_stmt(StmtKind::kWith, line);
      s->body = parse_body({"endgeneration"});
      s_.next();
      return s;
    }
    if (keyword == "break") return make_stmt(StmtKind::kBreak, line);
    if (keyword == "continue") return make_stmt(StmtKind::kContinue, line);
    s_.error(fmt::format("unsupported tag '{}'", keyword));
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(StmtKind::kIf, line);
    while (true) {
      ExprPtr condition = expressions_.parse_tuple(false);
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      const std::string end = s_.cur().text;
      s_.next();
      if (end == "elif") continue;
      if (end == "else") {
        s->branches.emplace_back(nullptr, parse_body({"endif"}));
        s_.next();
      }
      return s;
    }
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(StmtKind::kFor, line);
    do {
      s->targets.push_back(s_.expect_name());
    } while (s_.skip_op(","));
    s_.expect_name("in");
    s->expr = expressions_.parse_tuple(false, {"recursive"});
    if (s_.skip_name("if")) s->condition = expressions_.parse_expression();
    if (s_.is_name("recursive")) s_.error("recursive loops are not supported");
    s->body = parse_body({"endfor", "else"});
    const std::string end = s_.cur().text;
    s_.next();
    if (end == "else") {
      s->else_body = parse_body({"endfor"});
      s_.next();
    }
    return s;
  }

  StmtPtr parse_set(int line) {
    const int target_line = s_.cur().line;
    std::vector<ExprPtr> targets;
    do {
      std::string name = s_.expect_name();
      if (s_.skip_op(".")) {
        auto attr = make_expr(ExprKind::kAttribute, target_line);
        auto object = make_expr(ExprKind::kName, target_line);
        object->name = std::move(name);
        attr->args.push_back(std::move(object));
        attr->name = s_.expect_name();
        targets.push_back(std::move(attr));
      } else {
        auto n = make_expr(ExprKind::kName, target_line);
        n->name = std::move(name);
        targets.push_back(std::move(n));
      }
    } while (s_.skip_op(","));
    if (s_.skip_op("=")) {
      auto s = make_stmt(StmtKind::kSet, line);
      if (targets.size() == 1) {
        s->target = std::move(targets[0]);
      } else {
        s->target = make_expr(ExprKind::kTuple, target_line);
        s->target->args = std::move(targets);
      }
      s->expr = expressions_.parse_tuple(true);
      return s;
    }
    if (targets.size() != 1 || targets[0]->kind != ExprKind::kName) s_.error("can't assign a block to this target");
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->targets.push_back(targets[0]->name);
    s->filters = expressions_.parse_filter_chain();
    s->body = parse_body({"endset"});
    s_.next();
    return s;
  }

  void parse_signature(Stmt& s) {
    s_.expect_op("(");
    while (!s_.is_op(")")) {
      if (!s.params.empty()) s_.expect_op(",");
      s.params.push_back(s_.expect_name());
      if (s_.skip_op("=")) {
        s.defaults.push_back(expressions_.parse_expression());
      } else {
        if (!s.defaults.empty() && s.defaults.back()) s_.error("non-default argument follows default argument");
        s.defaults.push_back(nullptr);
      }
    }
    s_.expect_op(")");
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(StmtKind::kMacro, line);
    s->name = s_.expect_name();
    parse_signature(*s);
    s->body = parse_body({"endmacro"});
    s_.next();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = make_stmt(StmtKind::kCallBlock, line);
    if (s_.is_op("(")) parse_signature(*s);
    s->expr = expressions_.parse_expression();
    if (s->expr->kind != ExprKind::kCall) s_.error("expected a call after 'call'");
    s->body = parse_body({"endcall"});
    s_.next();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filters = expressions_.parse_filter_chain(/*first_has_pipe=*/false);
    s->body = parse_body({"endfilter"});
    s_.next();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = make_stmt(StmtKind::kWith, line);
    while (s_.cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) s_.expect_op(",");
      s->targets.push_back(s_.expect_name());
      s_.expect_op("=");
      s->defaults.push_back(expressions_.parse_expression());
    }
    s->body = parse_body({"endwith"});
    s_.next();
    return s;
  }

  TokenStream s_;
  ExpressionParser expressions_;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace mlaserve::jinja
