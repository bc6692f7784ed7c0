// Jinja values with Python semantics: what templates compute with. Strings, lists and dicts are
// shared and immutable once built (transformers renders in an immutable sandbox, so templates
// cannot mutate them); a namespace() is the one mutable object. Undefined behaves like Jinja's
// default Undefined: empty when printed or iterated, false, an error for most other uses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlaserve::jinja {

class Value;

// json.dumps options that templates pass to tojson.
struct JsonOptions {
  int indent = -1;  // < 0: one line
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string item_separator;  // empty: json.dumps' default for the indent
  std::string key_separator;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python dicts keep it
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// Call arguments: positional values, then name=value pairs.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, else `fallback`.
  const Value& get(size_t index, std::string_view name, const Value& fallback) const;
  size_t count() const { return positional.size() + keyword.size(); }
};

struct FunctionData {
  std::string name;
  std::function<Value(const Arguments&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(int64_t(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::vector<std::pair<Value, Value>> items = {});
  static Value make_namespace();
  static Value function(std::string name, std::function<Value(const Arguments&)> call);
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict && !dict_->is_namespace; }
  bool is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : double(int_); }
  const std::string& str() const { return *string_; }
  const std::vector<Value>& items() const { return list_->items; }
  bool is_tuple() const { return list_->is_tuple; }
  DictData& dict_data() const { return *dict_; }
  const FunctionData& function_data() const { return *function_; }
  std::string undefined_name() const { return string_ ? *string_ : std::string(); }

  // Python truthiness.
  bool truthy() const;
  // str(value): what {{ value }} prints.
  std::string to_string() const;
  // repr(value): how the value prints inside a list or dict.
  std::string repr() const;
  // json.dumps(value, ...) with Python's defaults unless `options` says otherwise.
  std::string to_json(const JsonOptions& options = {}) const;
  // Python's type name, for error messages.
  std::string type_name() const;

  // Python ==.
  bool equals(const Value& other) const;
  // Python <; throws for unorderable types.
  bool less(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;  // bool and int
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // string, or the name of an undefined value
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const FunctionData> function_;
};

// Python's repr of a float ("1.0", "1e+16", "0.0001", "inf").
std::string python_float_repr(double value);
// Python's repr of a string, quotes included.
std::string python_string_repr(std::string_view s);

}  // namespace mlaserve::jinja
