// Errors: every failure a user can cause is an mlaserve::Error with a message that names the
// thing at fault (file, tensor, flag, field). Programming errors use MLA_CHECK too, so they
// surface as messages rather than crashes.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace mlaserve {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mlaserve

#define MLA_CHECK(cond, ...)                  \
  do {                                        \
    if (!(cond)) ::mlaserve::fail(__VA_ARGS__); \
  } while (0)
