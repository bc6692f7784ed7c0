#include "tokenizer/utf8.h"

#include <cstdint>

#include "common/error.h"

namespace mlaserve::utf8 {
namespace {

enum class Kind { kValid, kInvalid, kTruncated };

struct Step {
  Kind kind;
  size_t length;  // kValid: the character; otherwise the maximal subpart to replace with U+FFFD
};

// Reads one character at bytes[pos] (pos < size). Table 3-7 of the Unicode standard gives the
// allowed range of the second byte for each lead byte; later bytes are always 80..BF.
Step step(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
  const size_t available = bytes.size() - pos;
  const uint8_t lead = p[0];
  if (lead < 0x80) return {Kind::kValid, 1};
  size_t needed;
  uint8_t second_lo = 0x80, second_hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
    if (lead == 0xE0) second_lo = 0xA0;  // no overlong forms
    if (lead == 0xED) second_hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
    if (lead == 0xF0) second_lo = 0x90;  // no overlong forms
    if (lead == 0xF4) second_hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {Kind::kInvalid, 1};
  }
  for (size_t i = 1; i < needed; ++i) {
    if (i >= available) return {Kind::kTruncated, i};
    const uint8_t lo = i == 1 ? second_lo : 0x80;
    const uint8_t hi = i == 1 ? second_hi : 0xBF;
    if (p[i] < lo || p[i] > hi) return {Kind::kInvalid, i};
  }
  return {Kind::kValid, needed};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

size_t find_invalid(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // ASCII runs are the common case; skip them eight bytes at a time.
    while (pos + 8 <= bytes.size()) {
      uint64_t word;
      __builtin_memcpy(&word, bytes.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= bytes.size()) break;
    const Step s = step(bytes, pos);
    if (s.kind != Kind::kValid) return pos;
    pos += s.length;
  }
  return kValid;
}

void require_valid(std::string_view text, std::string_view what) {
  const size_t bad = find_invalid(text);
  if (bad == kValid) return;
  fail("{} is not valid UTF-8: byte 0x{:02X} at offset {} does not start a complete character "
       "(text must be UTF-8, as Python and HF tokenizers require)",
       what, static_cast<unsigned>(static_cast<uint8_t>(text[bad])), bad);
}

std::string decode_lossy(std::string_view bytes) {
  const size_t first_bad = find_invalid(bytes);
  if (first_bad == kValid) return std::string(bytes);
  std::string out(bytes.substr(0, first_bad));
  size_t pos = first_bad;
  while (pos < bytes.size()) {
    const Step s = step(bytes, pos);
    if (s.kind == Kind::kValid) {
      out.append(bytes.substr(pos, s.length));
    } else {
      out.append(kReplacement);
    }
    pos += s.length;
  }
  return out;
}

size_t incomplete_tail(std::string_view bytes) {
  // A lead byte within the last three bytes whose character runs past the end is incomplete.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto byte = static_cast<uint8_t>(bytes[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    return step(bytes, n - back).kind == Kind::kTruncated ? back : 0;
  }
  return 0;
}

char32_t next(std::string_view bytes, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
  if (p[0] < 0x80) {
    pos += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    pos += 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    pos += 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

size_t count_code_points(std::string_view valid) {
  size_t count = 0;
  for (char c : valid) count += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return count;
}

size_t offset_of(std::string_view valid, size_t index) {
  size_t pos = 0;
  for (size_t i = 0; i < index && pos < valid.size(); ++i) next(valid, pos);
  return pos;
}

}  // namespace mlaserve::utf8
