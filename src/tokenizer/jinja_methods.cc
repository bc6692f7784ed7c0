// Attribute and item access, the methods of str/dict/list, global functions and operators.
#include <chrono>
#include <cmath>
#include <ctime>

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/utf8.h"

namespace mlaserve::jinja {
namespace {

// The sandbox's cap on range(), so a template cannot build a huge list.
constexpr int64_t kMaxRange = 100000;

std::optional<std::string> optional_string(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  MLA_CHECK(v.is_string(), "chat template: expected a string argument, got {}", v.type_name());
  return v.str();
}

int64_t int_arg(const Value& v, const char* what) {
  MLA_CHECK(v.is_int(), "chat template: {} must be an integer, got {}", what, v.type_name());
  return v.as_int();
}

// Python str.format without format specs: "{}", "{0}", "{name}", "{{" and "}}".
std::string py_format(std::string_view pattern, const Arguments& args) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '}' ) {
      MLA_CHECK(i + 1 < pattern.size() && pattern[i + 1] == '}', "chat template: single '}}' in format string");
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = pattern.find('}', i);
    MLA_CHECK(close != std::string_view::npos, "chat template: unmatched '{{' in format string");
    const std::string_view field = pattern.substr(i + 1, close - i - 1);
    MLA_CHECK(field.find_first_of(":!") == std::string_view::npos,
              "chat template: format specs in str.format are not supported");
    const Value* value = nullptr;
    if (field.empty()) {
      MLA_CHECK(next_auto < args.positional.size(), "chat template: format index out of range");
      value = &args.positional[next_auto++];
    } else if (field[0] >= '0' && field[0] <= '9') {
      const size_t index = std::stoul(std::string(field));
      MLA_CHECK(index < args.positional.size(), "chat template: format index out of range");
      value = &args.positional[index];
    } else {
      for (const auto& [key, v] : args.keyword) {
        if (key == field) value = &v;
      }
      MLA_CHECK(value, "chat template: format key '{}' not given", field);
    }
    out += value->to_string();
    i = close;
  }
  return out;
}

// Python's printf-style "text % args" for %s %r %d %i %f %%, with an optional precision.
std::string py_percent(std::string_view pattern, const Value& args) {
  std::vector<Value> values = args.is_list() && args.is_tuple() ? args.items() : std::vector<Value>{args};
  size_t used = 0;
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out.push_back(pattern[i]);
      continue;
    }
    MLA_CHECK(i + 1 < pattern.size(), "chat template: incomplete format");
    int precision = -1;
    size_t j = i + 1;
    if (pattern[j] == '.') {
      precision = 0;
      for (++j; j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9'; ++j) {
        precision = precision * 10 + (pattern[j] - '0');
      }
    }
    MLA_CHECK(j < pattern.size(), "chat template: incomplete format");
    const char conversion = pattern[j];
    i = j;
    if (conversion == '%') {
      out.push_back('%');
      continue;
    }
    MLA_CHECK(used < values.size(), "chat template: not enough arguments for format string");
    const Value& v = values[used++];
    switch (conversion) {
      case 's': out += v.to_string(); break;
      case 'r': out += v.repr(); break;
      case 'd':
      case 'i':
        MLA_CHECK(v.is_number(), "chat template: %d format: a real number is required, not {}", v.type_name());
        out += std::to_string(v.is_int() ? v.as_int() : int64_t(v.as_double()));
        break;
      case 'f':
        MLA_CHECK(v.is_number(), "chat template: %f format: a real number is required, not {}", v.type_name());
        out += fmt::format("{:.{}f}", v.as_double(), precision < 0 ? 6 : precision);
        break;
      default: fail("chat template: unsupported format character '{}'", conversion);
    }
  }
  MLA_CHECK(used == values.size(), "chat template: not all arguments converted during string formatting");
  return out;
}

Value bound(std::string name, std::function<Value(const Arguments&)> call) {
  return Value::function(std::move(name), std::move(call));
}

Value string_method(const Value& self, std::string_view name) {
  const std::string s = self.str();
  const Value none = Value::none();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bound(std::string(name), [s, left, right](const Arguments& a) {
      return Value(py_strip(s, optional_string(a.get(0, "chars", Value::none())), left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return bound(std::string(name), [s, from_right](const Arguments& a) {
      const auto parts = py_split(s, optional_string(a.get(0, "sep", Value::none())),
                                  int_arg(a.get(1, "maxsplit", Value(int64_t(-1))), "maxsplit"), from_right);
      std::vector<Value> items(parts.begin(), parts.end());
      return Value::list(std::move(items));
    });
  }
  if (name == "splitlines") {
    return bound("splitlines", [s](const Arguments& a) {
      const auto lines = py_splitlines(s, a.get(0, "keepends", Value(false)).truthy());
      return Value::list(std::vector<Value>(lines.begin(), lines.end()));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bound(std::string(name), [s, starts](const Arguments& a) {
      const Value& affix = a.get(0, "prefix", Value::none());
      std::vector<Value> options = affix.is_list() ? affix.items() : std::vector<Value>{affix};
      for (const Value& o : options) {
        MLA_CHECK(o.is_string(), "chat template: {} argument must be str or a tuple of str",
                  starts ? "startswith" : "endswith");
        if (starts ? s.starts_with(o.str()) : s.ends_with(o.str())) return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "upper") return bound("upper", [s](const Arguments&) { return Value(py_upper(s)); });
  if (name == "lower") return bound("lower", [s](const Arguments&) { return Value(py_lower(s)); });
  if (name == "title") return bound("title", [s](const Arguments&) { return Value(py_title(s)); });
  if (name == "capitalize") return bound("capitalize", [s](const Arguments&) { return Value(py_capitalize(s)); });
  if (name == "replace") {
    return bound("replace", [s](const Arguments& a) {
      const Value& old_text = a.get(0, "old", Value::none());
      const Value& new_text = a.get(1, "new", Value::none());
      MLA_CHECK(old_text.is_string() && new_text.is_string(), "chat template: replace() takes strings");
      return Value(py_replace(s, old_text.str(), new_text.str(),
                              int_arg(a.get(2, "count", Value(int64_t(-1))), "count")));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const std::string which(name);
    return bound(which, [s, which](const Arguments& a) {
      const Value& sub = a.get(0, "sub", Value::none());
      MLA_CHECK(sub.is_string(), "chat template: {}() takes a string", which);
      if (which == "count") {
        if (sub.str().empty()) return Value(int64_t(utf8::count_code_points(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub.str()); p != std::string::npos; p = s.find(sub.str(), p + sub.str().size())) ++n;
        return Value(n);
      }
      const size_t p = which == "rfind" ? s.rfind(sub.str()) : s.find(sub.str());
      if (p == std::string::npos) {
        MLA_CHECK(which != "index", "chat template: substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(utf8::count_code_points(std::string_view(s).substr(0, p))));
    });
  }
  if (name == "join") {
    return bound("join", [s](const Arguments& a) {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(a.get(0, "iterable", Value::none()))) {
        MLA_CHECK(item.is_string(), "chat template: join() expects strings, got {}", item.type_name());
        if (!first) out += s;
        out += item.str();
        first = false;
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") return bound("format", [s](const Arguments& a) { return Value(py_format(s, a)); });
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum" ||
      name == "islower" || name == "isupper") {
    const std::string which(name);
    return bound(which, [s, which](const Arguments&) {
      if (s.empty()) return Value(false);
      if (which == "isspace") return Value(py_strip(s, std::nullopt, true, false).empty());
      if (which == "islower" || which == "isupper") {
        const bool lower = which == "islower";
        bool cased = false;
        for (char c : s) {
          if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            cased = true;
            if (lower != (c >= 'a' && c <= 'z')) return Value(false);
          }
        }
        return Value(cased);
      }
      for (char c : s) {
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        const bool ok = which == "isdigit" ? digit : which == "isalpha" ? alpha : digit || alpha;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& self, std::string_view name) {
  if (name == "items") {
    return bound("items", [self](const Arguments&) {
      std::vector<Value> pairs;
      for (const auto& [k, v] : self.dict_data().items) pairs.push_back(Value::list({k, v}, true));
      return Value::list(std::move(pairs));
    });
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return bound(std::string(name), [self, keys](const Arguments&) {
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict_data().items) out.push_back(keys ? k : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound("get", [self](const Arguments& a) {
      const Value* found = self.dict_data().find(a.get(0, "key", Value::none()));
      return found ? *found : a.get(1, "default", Value::none());
    });
  }
  return Value();
}

Value list_method(const Value& self, std::string_view name) {
  if (name == "index" || name == "count") {
    const bool index = name == "index";
    return bound(std::string(name), [self, index](const Arguments& a) {
      const Value& x = a.get(0, "value", Value::none());
      int64_t n = 0;
      for (size_t i = 0; i < self.items().size(); ++i) {
        if (!self.items()[i].equals(x)) continue;
        if (index) return Value(int64_t(i));
        ++n;
      }
      MLA_CHECK(!index, "chat template: {} is not in list", x.repr());
      return Value(n);
    });
  }
  return Value();
}

Value range_function(const Arguments& a) {
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = int_arg(a.positional[0], "range() argument");
  } else {
    MLA_CHECK(a.positional.size() >= 2 && a.positional.size() <= 3, "chat template: range() takes 1 to 3 arguments");
    start = int_arg(a.positional[0], "range() argument");
    stop = int_arg(a.positional[1], "range() argument");
    if (a.positional.size() == 3) step = int_arg(a.positional[2], "range() argument");
  }
  MLA_CHECK(step != 0, "chat template: range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    MLA_CHECK(int64_t(items.size()) < kMaxRange, "chat template: range too big, limit is {}", kMaxRange);
    items.push_back(Value(i));
  }
  return Value::list(std::move(items));
}

Value dict_from_arguments(const Arguments& a, bool as_namespace) {
  Value out = as_namespace ? Value::make_namespace() : Value::dict();
  for (const Value& p : a.positional) {
    MLA_CHECK(p.is_dict(), "chat template: expected a mapping, got {}", p.type_name());
    for (const auto& [k, v] : p.dict_data().items) out.dict_data().set(k, v);
  }
  for (const auto& [k, v] : a.keyword) out.dict_data().set(Value(k), v);
  return out;
}

}  // namespace

void undefined_error(const Value& undefined) {
  const std::string message = undefined.undefined_name();
  fail("chat template: {}", message.empty() ? "undefined value" : message);
}

Value get_attribute(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: undefined_error(obj);
    case Value::Kind::kDict: {
      if (!obj.is_namespace()) {
        Value method = dict_method(obj, name);
        if (!method.is_undefined()) return method;
      }
      if (const Value* v = obj.dict_data().find(name)) return *v;
      return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
    }
    case Value::Kind::kString: return string_method(obj, name);
    case Value::Kind::kList: {
      Value method = list_method(obj, name);
      if (!method.is_undefined()) return method;
      break;
    }
    default: break;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    const int64_t length = obj.is_list() ? int64_t(obj.items().size()) : int64_t(utf8::count_code_points(obj.str()));
    int64_t index = key.as_int();
    if (index < 0) index += length;
    if (index >= 0 && index < length) {
      if (obj.is_list()) return obj.items()[size_t(index)];
      const size_t begin = utf8::offset_of(obj.str(), size_t(index));
      const size_t end = utf8::offset_of(std::string_view(obj.str()).substr(begin), 1) + begin;
      return Value(obj.str().substr(begin, end - begin));
    }
    return Value::undefined(fmt::format("{} object has no element {}", obj.type_name(), key.as_int()));
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  return Value::undefined(fmt::format("'{} object' has no attribute {}", obj.type_name(), key.repr()));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  auto bound_of = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    return int_arg(v, "slice index");
  };
  if (obj.is_string()) {
    const auto cps = code_points(obj.str());
    std::string out;
    for (int64_t i : py_slice_indexes(int64_t(cps.size()), bound_of(start), bound_of(stop), bound_of(step))) {
      out.append(cps[size_t(i)]);
    }
    return Value(std::move(out));
  }
  MLA_CHECK(obj.is_list(), "chat template: '{}' object is not subscriptable", obj.type_name());
  std::vector<Value> out;
  for (int64_t i : py_slice_indexes(int64_t(obj.items().size()), bound_of(start), bound_of(stop), bound_of(step))) {
    out.push_back(obj.items()[size_t(i)]);
  }
  return Value::list(std::move(out), obj.is_tuple());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      MLA_CHECK(item.is_string(), "chat template: 'in <string>' requires string as left operand, not {}", item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (v.equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (!container.is_namespace()) return container.dict_data().find(item) != nullptr;
      break;
    default: break;
  }
  fail("chat template: argument of type '{}' is not iterable", container.type_name());
}

std::vector<Value> iterate(const Value& iterable) {
  switch (iterable.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return iterable.items();
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (std::string_view cp : code_points(iterable.str())) out.push_back(Value(std::string(cp)));
      return out;
    }
    case Value::Kind::kDict:
      if (!iterable.is_namespace()) {
        std::vector<Value> keys;
        for (const auto& [k, v] : iterable.dict_data().items) keys.push_back(k);
        return keys;
      }
      break;
    default: break;
  }
  fail("chat template: '{}' object is not iterable", iterable.type_name());
}

Value global_function(std::string_view name) {
  if (name == "range") return bound("range", range_function);
  if (name == "namespace") return bound("namespace", [](const Arguments& a) { return dict_from_arguments(a, true); });
  if (name == "dict") return bound("dict", [](const Arguments& a) { return dict_from_arguments(a, false); });
  if (name == "raise_exception") {
    return bound("raise_exception", [](const Arguments& a) -> Value {
      fail("chat template raised an exception: {}", a.get(0, "message", Value("")).to_string());
    });
  }
  if (name == "strftime_now") {
    return bound("strftime_now", [](const Arguments& a) {
      const Value& format = a.get(0, "format", Value::none());
      MLA_CHECK(format.is_string(), "chat template: strftime_now() takes a format string");
      const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof(buffer), format.str().c_str(), &local);
      return Value(std::string(buffer, n));
    });
  }
  return Value();
}

Value negate(const Value& value) {
  if (value.is_undefined()) undefined_error(value);
  if (value.kind() == Value::Kind::kFloat) return Value(-value.as_double());
  MLA_CHECK(value.is_int(), "chat template: bad operand type for unary -: '{}'", value.type_name());
  return Value(-value.as_int());
}

Value binary_operator(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_string() + b.to_string());  // undefined prints as ""
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = a.is_int() && b.is_int();
  const bool numbers = a.is_number() && b.is_number();
  auto unsupported = [&]() -> Value {
    fail("chat template: unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
  };
  if (op == "+") {
    if (ints) return Value(a.as_int() + b.as_int());
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    if (a.is_string() != b.is_string() && (a.is_string() || b.is_string())) {
      fail("chat template: can only concatenate str (not \"{}\") to str", a.is_string() ? b.type_name() : a.type_name());
    }
    return unsupported();
  }
  if (op == "-") {
    if (ints) return Value(a.as_int() - b.as_int());
    if (numbers) return Value(a.as_double() - b.as_double());
    return unsupported();
  }
  if (op == "*") {
    if (ints) return Value(a.as_int() * b.as_int());
    if (numbers) return Value(a.as_double() * b.as_double());
    const Value& seq = a.is_int() ? b : a;
    const Value& times = a.is_int() ? a : b;
    if (times.is_int() && (seq.is_string() || seq.is_list())) {
      const int64_t n = std::max<int64_t>(0, times.as_int());
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.str();
        return Value(std::move(out));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
      return Value::list(std::move(items), seq.is_tuple());
    }
    return unsupported();
  }
  if (op == "/") {
    if (!numbers) return unsupported();
    MLA_CHECK(b.as_double() != 0, "chat template: division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!numbers) return unsupported();
    MLA_CHECK(b.as_double() != 0, "chat template: integer division or modulo by zero");
    if (ints) {
      const int64_t q = a.as_int() / b.as_int();
      return Value((a.as_int() % b.as_int() != 0 && ((a.as_int() < 0) != (b.as_int() < 0))) ? q - 1 : q);
    }
    return Value(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(py_percent(a.str(), b));
    if (!numbers) return unsupported();
    MLA_CHECK(b.as_double() != 0, "chat template: integer division or modulo by zero");
    if (ints) {
      const int64_t r = a.as_int() % b.as_int();
      return Value((r != 0 && ((r < 0) != (b.as_int() < 0))) ? r + b.as_int() : r);
    }
    double r = std::fmod(a.as_double(), b.as_double());
    if (r != 0 && ((r < 0) != (b.as_double() < 0))) r += b.as_double();
    return Value(r);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1, base *= base) {
        if (e & 1) result *= base;
      }
      return Value(result);
    }
    if (numbers) return Value(std::pow(a.as_double(), b.as_double()));
    return unsupported();
  }
  fail("chat template: unknown operator {}", op);
}

}  // namespace mlaserve::jinja
