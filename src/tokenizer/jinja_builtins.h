// What a Jinja template can call without defining it: filters and tests (jinja_filters.cc), and
// attribute access, methods of str/dict/list and the global functions (jinja_methods.cc). The
// environment is transformers' chat-template sandbox: tojson is json.dumps with
// ensure_ascii=False, raise_exception and strftime_now are globals, and no method mutates.
#pragma once

#include <string_view>

#include "tokenizer/jinja_value.h"

namespace mlaserve::jinja {

// Throws mlaserve::Error for unknown filters/tests and for arguments Python would reject.
Value apply_filter(std::string_view name, const Value& input, const Arguments& args);
bool apply_test(std::string_view name, const Value& value, const Arguments& args);

// obj.name: a method of str/dict/list if one has that name, else the item (Jinja's getattr);
// an undefined value when neither exists.
Value get_attribute(const Value& obj, std::string_view name);
// obj[key]: the item, else for a string key the attribute (Jinja's getitem).
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for strings, lists and tuples.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// `item in container`.
bool contains(const Value& container, const Value& item);
// The items a for loop visits: list items, dict keys, string characters; none for undefined.
std::vector<Value> iterate(const Value& iterable);

// range, namespace, dict, raise_exception, strftime_now; undefined for other names.
Value global_function(std::string_view name);

// Python's binary operators (+ - * / // % **) and unary minus.
Value binary_operator(std::string_view op, const Value& left, const Value& right);
Value negate(const Value& value);

// The error Jinja raises when an undefined value is used for more than printing or testing.
[[noreturn]] void undefined_error(const Value& undefined);

}  // namespace mlaserve::jinja
