// The parsed form of a Jinja template: expression and statement nodes. Plain structs with a kind
// tag; jinja_parser.cc builds them and jinja_eval.cc walks them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace mlaserve::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args: items
  kTuple,     // args: items
  kDict,      // args: key, value, key, value, ...
  kAttribute, // args[0].name
  kItem,      // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]], absent parts are null
  kCall,      // args[0](args[1:], kwargs)
  kFilter,    // args[0] | name(args[1:], kwargs)
  kTest,      // args[0] is [not] name(args[1:], kwargs)
  kUnary,     // name ("-", "+", "not") applied to args[0]
  kBinary,    // args[0] name args[1]; name is "+", "-", "*", "/", "//", "%", "**", "~"
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondition, // args[0] if args[1] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  bool negated = false;          // kTest: "is not"
};

enum class StmtKind {
  kText,      // text
  kPrint,     // {{ expr }}
  kIf,        // branches: (condition, body)...; a final else has a null condition
  kFor,       // for targets in expr [if condition]: body [else else_body]
  kSet,       // set target = expr; target is a name, a tuple of names or ns.attr
  kSetBlock,  // set targets[0] [| filters] %}body{% endset
  kMacro,     // macro name(params=defaults): body
  kCallBlock, // call [(params)] expr: body  (body is the macro "caller")
  kFilterBlock,  // filter filters: body
  kWith,      // with name = expr, ...: body
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;                    // kSet: kName, kTuple of kName or kAttribute
  ExprPtr condition;                 // kFor: the "if" filter
  std::vector<std::string> targets;  // kFor loop variables; kSetBlock name; kWith names
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;                  // kMacro
  std::vector<std::string> params;   // kMacro, kCallBlock
  std::vector<ExprPtr> defaults;     // kMacro, kCallBlock: one per param, null when none; kWith values
  std::vector<ExprPtr> filters;      // kSetBlock, kFilterBlock: kFilter nodes with a null args[0]
};

}  // namespace mlaserve::jinja
