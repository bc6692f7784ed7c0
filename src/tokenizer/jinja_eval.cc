#include "tokenizer/jinja_eval.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"

namespace mlaserve::jinja {
namespace {

constexpr int kMaxCallDepth = 64;

// Restores the interpreter's scope chain when a macro or caller returns (or throws).
class ScopeSwap {
 public:
  template <class Scopes>
  ScopeSwap(Scopes& scopes, Scopes replacement) : scopes_(scopes), saved_(std::move(scopes)) {
    scopes_ = std::move(replacement);
  }
  ~ScopeSwap() { scopes_ = std::move(saved_); }
  const auto& saved() const { return saved_; }

 private:
  std::vector<std::shared_ptr<std::unordered_map<std::string, Value>>>& scopes_;
  std::vector<std::shared_ptr<std::unordered_map<std::string, Value>>> saved_;
};

Value make_loop(size_t index, size_t length, const std::vector<Value>& items) {
  auto field = [](const char* name, Value v) { return std::pair<Value, Value>(Value(name), std::move(v)); };
  const int64_t i = int64_t(index), n = int64_t(length);
  std::vector<std::pair<Value, Value>> fields = {
      field("index", Value(i + 1)),
      field("index0", Value(i)),
      field("revindex", Value(n - i)),
      field("revindex0", Value(n - i - 1)),
      field("first", Value(i == 0)),
      field("last", Value(i == n - 1)),
      field("length", Value(n)),
      field("depth", Value(int64_t(1))),
      field("depth0", Value(int64_t(0))),
      field("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item")),
      field("nextitem", index + 1 < length ? items[index + 1] : Value::undefined("there is no next item")),
      field("cycle", Value::function("cycle", [i](const Arguments& a) {
              MLA_CHECK(!a.positional.empty(), "chat template: no items for cycling given");
              return a.positional[size_t(i) % a.positional.size()];
            })),
  };
  return Value::dict(std::move(fields));
}

}  // namespace

Interpreter::Interpreter(std::vector<std::pair<std::string, Value>> globals) {
  auto root = std::make_shared<Scope>();
  for (auto& [name, value] : globals) (*root)[name] = std::move(value);
  scopes_.push_back(std::move(root));
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  exec(body, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText: out += s.text; return Flow::kNormal;
    case StmtKind::kPrint: out += eval(*s.expr).to_string(); return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (!condition || eval(*condition).truthy()) return exec(body, out);
      }
      return Flow::kNormal;
    case StmtKind::kFor: return exec_for(s, out);
    case StmtKind::kSet: exec_set(s); return Flow::kNormal;
    case StmtKind::kSetBlock:
      assign(s.targets[0], apply_filters(s.filters, Value(render_to_string(s.body))));
      return Flow::kNormal;
    case StmtKind::kMacro: {
      const Stmt* macro = &s;
      assign(s.name, Value::function(s.name, [this, macro](const Arguments& a) { return call_macro(*macro, a); }));
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock: {
      const Expr& call_expr = *s.expr;
      const Value callee = eval(*call_expr.args[0]);
      Arguments args = eval_arguments(call_expr, 1);
      // The body becomes `caller`, a macro that sees the variables around the call block.
      const auto around = scopes_;
      const Stmt* block = &s;
      args.keyword.emplace_back("caller", Value::function("caller", [this, around, block](const Arguments& a) {
        auto local = std::make_shared<Scope>();
        for (size_t i = 0; i < block->params.size(); ++i) {
          (*local)[block->params[i]] = a.get(i, block->params[i], Value::undefined("'" + block->params[i] + "' is undefined"));
        }
        auto chain = around;
        chain.push_back(local);
        ScopeSwap swap(scopes_, std::move(chain));
        return Value(render_to_string(block->body));
      }));
      out += call(callee, args).to_string();
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock:
      out += apply_filters(s.filters, Value(render_to_string(s.body))).to_string();
      return Flow::kNormal;
    case StmtKind::kWith: {
      auto local = std::make_shared<Scope>();
      for (size_t i = 0; i < s.targets.size(); ++i) (*local)[s.targets[i]] = eval(*s.defaults[i]);
      scopes_.push_back(local);
      const Flow flow = exec(s.body, out);
      scopes_.pop_back();
      return flow;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.condition) {
    // The "if" part filters before the loop runs, so loop.length counts only what passes.
    std::vector<Value> kept;
    for (const Value& item : items) {
      scopes_.push_back(std::make_shared<Scope>());
      bind_targets(s.targets, item);
      const bool pass = eval(*s.condition).truthy();
      scopes_.pop_back();
      if (pass) kept.push_back(item);
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    scopes_.push_back(std::make_shared<Scope>());
    bind_targets(s.targets, items[i]);
    assign("loop", make_loop(i, items.size(), items));
    const Flow flow = exec(s.body, out);
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  if (items.empty()) return exec(s.else_body, out);
  return Flow::kNormal;
}

void Interpreter::bind_targets(const std::vector<std::string>& targets, const Value& item) {
  if (targets.size() == 1) {
    assign(targets[0], item);
    return;
  }
  const std::vector<Value> values = iterate(item);
  MLA_CHECK(values.size() == targets.size(), "chat template: cannot unpack {} values into {} names",
            values.size(), targets.size());
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], values[i]);
}

void Interpreter::exec_set(const Stmt& s) {
  Value value = eval(*s.expr);
  const Expr& target = *s.target;
  if (target.kind == ExprKind::kName) {
    assign(target.name, std::move(value));
  } else if (target.kind == ExprKind::kAttribute) {
    const Value object = lookup(target.args[0]->name);
    MLA_CHECK(object.is_namespace(), "chat template line {}: cannot assign attribute on non-namespace object",
              s.line);
    object.dict_data().set(Value(target.name), std::move(value));
  } else {
    std::vector<std::string> names;
    for (const ExprPtr& t : target.args) names.push_back(t->name);
    bind_targets(names, value);
  }
}

Value Interpreter::call_macro(const Stmt& macro, const Arguments& args) {
  MLA_CHECK(depth_ < kMaxCallDepth, "chat template: macros nested deeper than {}", kMaxCallDepth);
  auto local = std::make_shared<Scope>();
  ScopeSwap swap(scopes_, {scopes_[0], local});
  ++depth_;
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  } guard{depth_};
  std::vector<Value> extra_positional;
  for (size_t i = macro.params.size(); i < args.positional.size(); ++i) extra_positional.push_back(args.positional[i]);
  std::vector<std::pair<Value, Value>> extra_keyword;
  for (const auto& [key, value] : args.keyword) {
    const bool is_param = std::find(macro.params.begin(), macro.params.end(), key) != macro.params.end();
    if (key == "caller") {
      (*local)["caller"] = value;
    } else if (!is_param) {
      extra_keyword.emplace_back(Value(key), value);
    }
  }
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const std::string& param = macro.params[i];
    static const Value kMissing = Value::undefined();
    const Value& given = args.get(i, param, kMissing);
    if (&given != &kMissing) {
      (*local)[param] = given;
    } else if (macro.defaults[i]) {
      (*local)[param] = eval(*macro.defaults[i]);
    } else {
      (*local)[param] = Value::undefined("'" + param + "' is undefined");
    }
  }
  (*local)["varargs"] = Value::list(std::move(extra_positional), true);
  (*local)["kwargs"] = Value::dict(std::move(extra_keyword));
  return Value(render_to_string(macro.body));
}

std::string Interpreter::render_to_string(const Body& body) {
  std::string out;
  exec(body, out);
  return out;
}

Value Interpreter::apply_filters(const std::vector<ExprPtr>& filters, Value input) {
  for (const ExprPtr& f : filters) input = apply_filter(f->name, input, eval_arguments(*f, 1));
  return input;
}

Arguments Interpreter::eval_arguments(const Expr& e, size_t first_positional) {
  Arguments args;
  for (size_t i = first_positional; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value));
  return args;
}

Value Interpreter::call(const Value& callee, const Arguments& args) {
  if (callee.is_function()) return callee.function_data().call(args);
  if (callee.is_undefined()) undefined_error(callee);
  fail("chat template: '{}' object is not callable", callee.type_name());
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    const auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  Value global = global_function(name);
  if (!global.is_undefined()) return global;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) { (*scopes_.back())[name] = std::move(value); }

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : e.args) items.push_back(eval(*item));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Value dict = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) dict.dict_data().set(eval(*e.args[i]), eval(*e.args[i + 1]));
      return dict;
    }
    case ExprKind::kAttribute: return get_attribute(eval(*e.args[0]), e.name);
    case ExprKind::kItem: {
      const Value object = eval(*e.args[0]);
      return get_item(object, eval(*e.args[1]));
    }
    case ExprKind::kSlice: {
      const Value object = eval(*e.args[0]);
      auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
      return get_slice(object, part(1), part(2), part(3));
    }
    case ExprKind::kCall: {
      const Value callee = eval(*e.args[0]);
      return call(callee, eval_arguments(e, 1));
    }
    case ExprKind::kFilter: {
      const Value input = eval(*e.args[0]);
      return apply_filter(e.name, input, eval_arguments(e, 1));
    }
    case ExprKind::kTest: {
      const Value subject = eval(*e.args[0]);
      return Value(apply_test(e.name, subject, eval_arguments(e, 1)) != e.negated);
    }
    case ExprKind::kUnary: {
      const Value operand = eval(*e.args[0]);
      if (e.name == "not") return Value(!operand.truthy());
      if (e.name == "-") return negate(operand);
      MLA_CHECK(operand.is_number(), "chat template: bad operand type for unary +: '{}'", operand.type_name());
      return operand;
    }
    case ExprKind::kBinary: {
      const Value left = eval(*e.args[0]);
      return binary_operator(e.name, left, eval(*e.args[1]));
    }
    case ExprKind::kAnd: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? eval(*e.args[1]) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? left : eval(*e.args[1]);
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCondition:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  fail("chat template: unknown expression");
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool result;
    if (op == "==") {
      result = left.equals(right);
    } else if (op == "!=") {
      result = !left.equals(right);
    } else if (op == "<") {
      result = left.less(right);
    } else if (op == ">") {
      result = right.less(left);
    } else if (op == "<=") {
      result = left.less(right) || left.equals(right);
    } else if (op == ">=") {
      result = right.less(left) || left.equals(right);
    } else if (op == "in") {
      result = contains(right, left);
    } else {
      result = !contains(right, left);
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace mlaserve::jinja
