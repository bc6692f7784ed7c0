// Jinja parser: tokens -> statement tree, following jinja2's grammar (expressions are parsed by
// jinja_expression_parser.cc). Supported statements: if/elif/else, for (with
// else, an "if" filter and tuple targets), set (names, tuples, ns.attr, blocks), macro, call,
// filter, with, break/continue, and transformers' generation blocks.
#pragma once

#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace mlaserve::jinja {

// Throws mlaserve::Error ("chat template line N: ...") on syntax errors.
Body parse(const std::vector<Token>& tokens);

}  // namespace mlaserve::jinja
