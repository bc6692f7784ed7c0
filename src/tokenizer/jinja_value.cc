#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/error.h"
#include "tokenizer/pcre_regex.h"
#include "tokenizer/utf8.h"

namespace mlaserve::jinja {
namespace {

// Python's str.isprintable() is false for these categories (space excepted).
bool is_printable(char32_t c, std::string_view bytes) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  static const Pcre2Regex non_printable(R"([\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}\p{Zs}])");
  return !non_printable.full_match(bytes);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t pos = 0; pos < s.size(); ++pos) {
    const char ch = s[pos];
    if (ensure_ascii && (static_cast<unsigned char>(ch) & 0x80)) {
      // Non-ASCII as \uXXXX, with a surrogate pair above the Basic Multilingual Plane.
      const char32_t c = utf8::next(s, pos);
      --pos;
      if (c >= 0x10000) {
        const uint32_t v = uint32_t(c) - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", uint32_t(c));
      }
      continue;
    }
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += fmt::format("\\u{:04x}", unsigned(ch));
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

[[noreturn]] void not_serializable(const Value& v) {
  fail("chat template: Object of type {} is not JSON serializable", v.type_name());
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.str();
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(key.as_int());
    case Value::Kind::kFloat: return json_float(key.as_double());
    case Value::Kind::kNone: return "null";
    default: fail("chat template: keys must be str, int, float, bool or None, not {}", key.type_name());
  }
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int level) {
  const int indent = o.indent;
  const std::string item_separator = !o.item_separator.empty() ? o.item_separator : indent < 0 ? ", " : ",";
  const std::string key_separator = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int depth) {
    if (indent < 0) return;
    out.push_back('\n');
    out.append(size_t(indent * depth), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: out += json_float(v.as_double()); return;
    case Value::Kind::kString: append_json_string(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::kList: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_separator;
        newline(level + 1);
        append_json(out, v.items()[i], o, level + 1);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) not_serializable(v);
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [key, value] : v.dict_data().items) entries.push_back({json_key(key), &value});
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_separator;
        newline(level + 1);
        append_json_string(out, entries[i].first, o.ensure_ascii);
        out += key_separator;
        append_json(out, *entries[i].second, o, level + 1);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default: not_serializable(v);
  }
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed notation when the decimal exponent
  // is in [-4, 16), scientific otherwise.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string_view text(buffer, size_t(result.ptr - buffer));
  std::string out;
  if (text.front() == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::stoi(std::string(text.substr(e + 1)));
  const int point = exponent + 1;  // digits before the decimal point
  if (point <= -4 || point > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (point <= 0) {
    out += "0." + std::string(size_t(-point), '0') + digits;
  } else if (size_t(point) >= digits.size()) {
    out += digits + std::string(size_t(point) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
  }
  return out;
}

std::string python_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = utf8::next(s, pos);
    if (c == char32_t(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c, s.substr(start, pos - start))) {
      out.append(s.substr(start, pos - start));
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", uint32_t(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    } else {
      out += fmt::format("\\U{:08x}", uint32_t(c));
    }
  }
  out.push_back(quote);
  return out;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : items) {
    if (k.equals(key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (k.equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value& Arguments::get(size_t index, std::string_view name, const Value& fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  return fallback;
}

Value Value::undefined(std::string name) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), int_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), float_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListData>(ListData{std::move(items), is_tuple});
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictData>(DictData{std::move(items), false});
  return v;
}

Value Value::make_namespace() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}

Value Value::function(std::string name, std::function<Value(const Arguments&)> call) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.function_ = std::make_shared<const FunctionData>(FunctionData{std::move(name), std::move(call)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(int64_t(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) items.emplace_back(Value(it.key()), from_json(it.value()));
      return dict(std::move(items));
    }
    default: fail("chat template: unsupported JSON value");
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !string_->empty();
    case Kind::kList: return !list_->items.empty();
    case Kind::kDict: return dict_->is_namespace || !dict_->items.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *string_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return int_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return python_float_repr(float_);
    case Kind::kString: return python_string_repr(*string_);
    case Kind::kList: {
      std::string out(1, list_->is_tuple ? '(' : '[');
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i) out += ", ";
        out += list_->items[i].repr();
      }
      if (list_->is_tuple && list_->items.size() == 1) out.push_back(',');
      out.push_back(list_->is_tuple ? ')' : ']');
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
      }
      out += "}";
      return dict_->is_namespace ? "<Namespace " + out + ">" : out;
    }
    case Kind::kFunction: return "<function " + function_->name + ">";
  }
  return "";
}

std::string Value::to_json(const JsonOptions& options) const {
  std::string out;
  append_json(out, *this, options, 0);
  return out;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return list_->is_tuple ? "tuple" : "list";
    case Kind::kDict: return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "object";
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind_ != Kind::kFloat && other.kind_ != Kind::kFloat) return int_ == other.int_;
    return as_double() == other.as_double();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *string_ == *other.string_;
    case Kind::kList: {
      if (list_->is_tuple != other.list_->is_tuple || items().size() != other.items().size()) return false;
      for (size_t i = 0; i < items().size(); ++i) {
        if (!items()[i].equals(other.items()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->is_namespace || other.dict_->is_namespace) return dict_ == other.dict_;
      if (dict_->items.size() != other.dict_->items.size()) return false;
      for (const auto& [key, value] : dict_->items) {
        const Value* found = other.dict_->find(key);
        if (!found || !found->equals(value)) return false;
      }
      return true;
    }
    case Kind::kFunction: return function_ == other.function_;
    default: return false;
  }
}

bool Value::less(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind_ != Kind::kFloat && other.kind_ != Kind::kFloat) return int_ < other.int_;
    return as_double() < other.as_double();
  }
  if (is_string() && other.is_string()) return *string_ < *other.string_;
  if (is_list() && other.is_list() && is_tuple() == other.is_tuple()) {
    const auto& a = items();
    const auto& b = other.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!a[i].equals(b[i])) return a[i].less(b[i]);
    }
    return a.size() < b.size();
  }
  fail("chat template: '<' not supported between instances of '{}' and '{}'", type_name(), other.type_name());
}

}  // namespace mlaserve::jinja
