// Python str methods on UTF-8 strings, for Jinja filters and methods: indexes and lengths count
// code points, white space is Python's str.isspace. Case mapping covers ASCII only; chat templates
// apply it to role names and keywords, not to user text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::jinja {

std::vector<std::string_view> code_points(std::string_view s);

// str.strip / lstrip / rstrip; `chars` nullopt strips white space.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit; `separator` nullopt splits on white-space runs and drops empty parts.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& separator,
                                  int64_t max_split, bool from_right);
// str.splitlines(keepends).
std::vector<std::string> py_splitlines(std::string_view s, bool keep_ends);
// str.replace(old, new, count); count < 0 replaces all.
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);

// Python slicing s[start:stop:step] over a sequence of `length` items: the selected indexes.
std::vector<int64_t> py_slice_indexes(int64_t length, std::optional<int64_t> start,
                                      std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace mlaserve::jinja
