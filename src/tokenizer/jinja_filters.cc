// Jinja's built-in filters and tests, with the semantics of jinja2 3.x (and transformers' tojson).
#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/utf8.h"

namespace mlaserve::jinja {
namespace {

const Value kNone = Value::none();

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return int64_t(utf8::count_code_points(v.str()));
    case Value::Kind::kList: return int64_t(v.items().size());
    case Value::Kind::kDict:
      if (!v.is_namespace()) return int64_t(v.dict_data().items.size());
      break;
    default: break;
  }
  fail("chat template: object of type '{}' has no len()", v.type_name());
}

// "a.b.0" style attribute paths used by sort/map/selectattr/... (Jinja's make_attrgetter).
Value attribute_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  Value current = item;
  for (const std::string& part : py_split(path.to_string(), std::string("."), -1, false)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = numeric ? get_item(current, Value(int64_t(std::stoll(part)))) : get_item(current, Value(part));
  }
  return current;
}

// The value a sort/unique/min/max compares: lower-cased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

Arguments rest_arguments(const Arguments& a, size_t skip) {
  Arguments rest;
  if (a.positional.size() > skip) rest.positional.assign(a.positional.begin() + long(skip), a.positional.end());
  rest.keyword = a.keyword;
  return rest;
}

std::vector<Value> select_items(const Value& input, const Arguments& a, bool by_attribute, bool keep_matching) {
  std::vector<Value> out;
  const size_t test_index = by_attribute ? 1 : 0;
  const Value attribute = by_attribute ? a.get(0, "attribute", kNone) : kNone;
  const bool has_test = a.positional.size() > test_index;
  const std::string test_name = has_test ? a.positional[test_index].to_string() : "";
  const Arguments test_args = rest_arguments(a, test_index + 1);
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = has_test ? apply_test(test_name, subject, test_args) : subject.truthy();
    if (passed == keep_matching) out.push_back(item);
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& fallback, int64_t base) {
  if (v.is_int()) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value(int64_t(std::trunc(v.as_double())));
  }
  if (v.is_string()) {
    std::string text = py_strip(v.str(), std::nullopt, true, true);
    std::erase(text, '_');
    try {
      size_t used = 0;
      const long long parsed = std::stoll(text, &used, int(base));
      if (used == text.size()) return Value(int64_t(parsed));
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double parsed = std::stod(text, &used);
      if (used == text.size() && std::isfinite(parsed)) return Value(int64_t(std::trunc(parsed)));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string text = py_strip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      const double parsed = std::stod(text, &used);
      if (used == text.size()) return Value(parsed);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

std::string indent_text(std::string s, const Value& width, bool first, bool blank) {
  const std::string indention = width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
  s += "\n";  // jinja appends a newline so splitlines keeps a trailing empty line
  const auto lines = py_splitlines(s, false);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
  }
  if (first) out = indention + out;
  return out;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(attribute.is_none() ? x : attribute_path(x, attribute), case_sensitive);
    const Value ky = sort_key(attribute.is_none() ? y : attribute_path(y, attribute), case_sensitive);
    return reverse ? ky.less(kx) : kx.less(ky);
  });
  return items;
}

}  // namespace

Value apply_filter(std::string_view name, const Value& in, const Arguments& a) {
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean", Value(false)).truthy();
    if (in.is_undefined() || (boolean && !in.truthy())) return a.get(0, "default_value", Value(""));
    return in;
  }
  if (name == "length" || name == "count") return Value(length_of(in));
  if (name == "tojson") {
    JsonOptions options;
    options.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
    const Value& indent = a.get(1, "indent", kNone);
    if (!indent.is_none()) options.indent = int(indent.as_int());
    const Value& separators = a.get(2, "separators", kNone);
    if (separators.is_list() && separators.items().size() == 2) {
      options.item_separator = separators.items()[0].to_string();
      options.key_separator = separators.items()[1].to_string();
    }
    options.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
    return Value(in.to_json(options));
  }
  if (name == "trim") return Value(py_strip(in.to_string(), [&]() -> std::optional<std::string> {
    const Value& chars = a.get(0, "chars", kNone);
    if (chars.is_none()) return std::nullopt;
    return chars.to_string();
  }(), true, true));
  if (name == "string") return Value(in.to_string());
  if (name == "upper") return Value(py_upper(in.to_string()));
  if (name == "lower") return Value(py_lower(in.to_string()));
  if (name == "title") return Value(py_title(in.to_string()));
  if (name == "capitalize") return Value(py_capitalize(in.to_string()));
  if (name == "replace") {
    const Value& count = a.get(2, "count", kNone);
    return Value(py_replace(in.to_string(), a.get(0, "old", Value("")).to_string(),
                            a.get(1, "new", Value("")).to_string(), count.is_none() ? -1 : count.as_int()));
  }
  if (name == "safe" || name == "list" || name == "first" || name == "last" || name == "reverse") {
    if (name == "safe") return in;
    std::vector<Value> items = iterate(in);
    if (name == "list") return Value::list(std::move(items));
    if (name == "reverse") {
      std::reverse(items.begin(), items.end());
      if (in.is_string()) {
        std::string out;
        for (const Value& c : items) out += c.str();
        return Value(std::move(out));
      }
      return Value::list(std::move(items));
    }
    if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value& attribute = a.get(1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(in)) {
      if (!first) out += a.get(0, "d", Value("")).to_string();
      out += (attribute.is_none() ? item : attribute_path(item, attribute)).to_string();
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::list({});
    MLA_CHECK(in.is_dict(), "chat template: items filter needs a mapping, got {}", in.type_name());
    std::vector<Value> pairs;
    for (const auto& [k, v] : in.dict_data().items) pairs.push_back(Value::list({k, v}, true));
    return Value::list(std::move(pairs));
  }
  if (name == "dictsort") {
    MLA_CHECK(in.is_dict(), "chat template: dictsort needs a mapping, got {}", in.type_name());
    const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
    const bool by_value = a.get(1, "by", Value("key")).to_string() == "value";
    const bool reverse = a.get(2, "reverse", Value(false)).truthy();
    std::vector<Value> pairs;
    for (const auto& [k, v] : in.dict_data().items) pairs.push_back(Value::list({k, v}, true));
    return Value::list(sorted(std::move(pairs), reverse, case_sensitive, Value(int64_t(by_value ? 1 : 0))));
  }
  if (name == "sort") {
    return Value::list(sorted(iterate(in), a.get(0, "reverse", Value(false)).truthy(),
                              a.get(1, "case_sensitive", Value(false)).truthy(), a.get(2, "attribute", kNone)));
  }
  if (name == "unique") {
    const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
    const Value& attribute = a.get(1, "attribute", kNone);
    std::vector<Value> out, seen;
    for (const Value& item : iterate(in)) {
      const Value key = sort_key(attribute.is_none() ? item : attribute_path(item, attribute), case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") {
    const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
    const Value& attribute = a.get(1, "attribute", kNone);
    const auto items = iterate(in);
    if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
    const Value* best = &items[0];
    for (const Value& item : items) {
      const Value k = sort_key(attribute.is_none() ? item : attribute_path(item, attribute), case_sensitive);
      const Value kb = sort_key(attribute.is_none() ? *best : attribute_path(*best, attribute), case_sensitive);
      if (name == "min" ? k.less(kb) : kb.less(k)) best = &item;
    }
    return *best;
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value& attribute = a.get(99, "attribute", kNone);
    for (const Value& item : iterate(in)) {
      if (!attribute.is_none()) {
        Value v = attribute_path(item, attribute);
        if (v.is_undefined()) v = a.get(99, "default", v);
        out.push_back(v);
      } else {
        MLA_CHECK(!a.positional.empty(), "chat template: map needs a filter name or attribute=");
        out.push_back(apply_filter(a.positional[0].to_string(), item, rest_arguments(a, 1)));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") return Value::list(select_items(in, a, false, name == "select"));
  if (name == "selectattr" || name == "rejectattr") return Value::list(select_items(in, a, true, name == "selectattr"));
  if (name == "sum") {
    const Value& attribute = a.get(0, "attribute", kNone);
    Value total = a.get(1, "start", Value(int64_t(0)));
    for (const Value& item : iterate(in)) {
      total = binary_operator("+", total, attribute.is_none() ? item : attribute_path(item, attribute));
    }
    return total;
  }
  if (name == "batch") {
    const int64_t size = a.get(0, "linecount", Value(int64_t(1))).as_int();
    MLA_CHECK(size > 0, "chat template: batch size must be positive");
    const Value& fill = a.get(1, "fill_with", kNone);
    std::vector<Value> out, current;
    for (const Value& item : iterate(in)) {
      current.push_back(item);
      if (int64_t(current.size()) == size) {
        out.push_back(Value::list(std::move(current)));
        current.clear();
      }
    }
    if (!current.empty()) {
      while (!fill.is_none() && int64_t(current.size()) < size) current.push_back(fill);
      out.push_back(Value::list(std::move(current)));
    }
    return Value::list(std::move(out));
  }
  if (name == "int") return to_int(in, a.get(0, "default", Value(int64_t(0))), a.get(1, "base", Value(int64_t(10))).as_int());
  if (name == "float") return to_float(in, a.get(0, "default", Value(0.0)));
  if (name == "abs") {
    if (in.kind() == Value::Kind::kFloat) return Value(std::fabs(in.as_double()));
    MLA_CHECK(in.is_int(), "chat template: bad operand type for abs(): '{}'", in.type_name());
    return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  if (name == "round") {
    const int64_t precision = a.get(0, "precision", Value(int64_t(0))).as_int();
    const std::string method = a.get(1, "method", Value("common")).to_string();
    if (in.is_int() && method == "common") return Value(in.as_int());
    MLA_CHECK(in.is_number(), "chat template: round needs a number, got {}", in.type_name());
    const double scale = std::pow(10.0, double(precision));
    const double x = in.as_double() * scale;
    double r;
    if (method == "ceil") {
      r = std::ceil(x);
    } else if (method == "floor") {
      r = std::floor(x);
    } else {
      r = std::nearbyint(x);  // Python's round: halves go to even
    }
    return Value(r / scale);
  }
  if (name == "indent") {
    return Value(indent_text(in.to_string(), a.get(0, "width", Value(int64_t(4))),
                             a.get(1, "first", Value(false)).truthy(), a.get(2, "blank", Value(false)).truthy()));
  }
  if (name == "center") {
    const std::string s = in.to_string();
    const int64_t width = a.get(0, "width", Value(int64_t(80))).as_int();
    const int64_t length = int64_t(utf8::count_code_points(s));
    if (width <= length) return Value(s);
    // Python's str.center puts the odd extra space on the left when the width is odd.
    const int64_t total = width - length;
    const int64_t left = total / 2 + (total & width & 1);
    return Value(std::string(size_t(left), ' ') + s + std::string(size_t(total - left), ' '));
  }
  if (name == "escape" || name == "e" || name == "forceescape") return Value(html_escape(in.to_string()));
  if (name == "format") {
    if (!a.keyword.empty()) {
      return binary_operator("%", Value(in.to_string()), Value::dict([&] {
        std::vector<std::pair<Value, Value>> items;
        for (const auto& [k, v] : a.keyword) items.emplace_back(Value(k), v);
        return items;
      }()));
    }
    return binary_operator("%", Value(in.to_string()), Value::list(a.positional, true));
  }
  if (name == "attr") return get_attribute(in, a.get(0, "name", Value("")).to_string());
  if (name == "wordcount") return Value(int64_t(py_split(in.to_string(), std::nullopt, -1, false).size()));
  fail("chat template: no filter named '{}'", name);
}

bool apply_test(std::string_view name, const Value& v, const Arguments& a) {
  const Value& arg = a.get(0, "value", kNone);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.kind() == Value::Kind::kInt;
  if (name == "float") return v.kind() == Value::Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "sameas") {
    if (v.is_list() || v.kind() == Value::Kind::kDict || v.is_function()) return false;
    return v.kind() == arg.kind() && v.equals(arg);
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.equals(arg);
  if (name == "ne" || name == "!=") return !v.equals(arg);
  if (name == "lt" || name == "lessthan" || name == "<") return v.less(arg);
  if (name == "le" || name == "<=") return !arg.less(v);
  if (name == "gt" || name == "greaterthan" || name == ">") return arg.less(v);
  if (name == "ge" || name == ">=") return !v.less(arg);
  if (name == "in") return contains(arg, v);
  if (name == "odd" || name == "even") {
    MLA_CHECK(v.is_int(), "chat template: {} test needs an integer", name);
    const bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    MLA_CHECK(v.is_int() && arg.is_int() && arg.as_int() != 0, "chat template: divisibleby needs integers");
    return v.as_int() % arg.as_int() == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = v.to_string();
    return name == "lower" ? s == py_lower(s) && s != py_upper(s) : s == py_upper(s) && s != py_lower(s);
  }
  if (name == "escaped") return false;
  if (name == "filter" || name == "test") return true;
  fail("chat template: no test named '{}'", name);
}

}  // namespace mlaserve::jinja
