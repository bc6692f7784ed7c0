#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace mlaserve::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 512> byte_of{};  // indexed by code point; -1: not in the alphabet

  Tables() {
    byte_of.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? char32_t(b) : char32_t(256 + shifted++);
      char_of[b] = c;
      byte_of[c] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of(unsigned char byte) { return tables().char_of[byte]; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, t.char_of[b]);
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t c = utf8::next(token, pos);
    if (c >= t.byte_of.size() || t.byte_of[c] < 0) return std::nullopt;
    out.push_back(char(t.byte_of[c]));
  }
  return out;
}

}  // namespace mlaserve::byte_level
