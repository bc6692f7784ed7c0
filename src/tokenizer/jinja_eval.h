// Jinja interpreter: walks a parsed template and writes its output. Scoping follows jinja2: a
// for-loop iteration, a macro call and a with-block get fresh scopes (so "set" inside them does
// not leak out, which is why templates use namespace()), if-blocks do not.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace mlaserve::jinja {

class Interpreter {
 public:
  // `globals` are the render() variables (messages, bos_token, ...).
  explicit Interpreter(std::vector<std::pair<std::string, Value>> globals);

  std::string render(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s);
  Value call_macro(const Stmt& macro, const Arguments& args);
  std::string render_to_string(const Body& body);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value input);

  Value eval(const Expr& e);
  Value eval_compare(const Expr& e);
  Arguments eval_arguments(const Expr& e, size_t first_positional);
  Value call(const Value& callee, const Arguments& args);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void bind_targets(const std::vector<std::string>& targets, const Value& item);

  // scopes_[0] holds the globals and top-level assignments; the innermost scope is last.
  std::vector<std::shared_ptr<Scope>> scopes_;
  int depth_ = 0;  // nested macro calls, bounded so a recursive template cannot overflow the stack
};

}  // namespace mlaserve::jinja
