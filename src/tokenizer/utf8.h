// UTF-8 helpers shared by the tokenizer, the detokenizer and the template renderer. "Valid" means
// what Python's str and Rust's String accept: shortest form, no surrogates, at most U+10FFFF.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mlaserve::utf8 {

inline constexpr size_t kValid = std::string::npos;

// Byte offset of the first byte that is not part of a valid sequence, or kValid.
size_t find_invalid(std::string_view bytes);
inline bool is_valid(std::string_view bytes) { return find_invalid(bytes) == kValid; }

// Throws mlaserve::Error naming `what` and the byte offset when `text` is not valid UTF-8.
void require_valid(std::string_view text, std::string_view what);

// Decodes bytes, replacing each maximal invalid subpart with U+FFFD: the rule that Rust's
// String::from_utf8_lossy (and so HF's decoders) and Python's errors="replace" follow.
std::string decode_lossy(std::string_view bytes);

// Length of the trailing bytes that start a multi-byte character but do not finish it yet, and
// could still become valid when more bytes arrive (0..3). A streaming decoder holds these back.
size_t incomplete_tail(std::string_view bytes);

// Decodes the code point starting at bytes[pos] of valid UTF-8 and advances pos past it.
char32_t next(std::string_view bytes, size_t& pos);
void append(std::string& out, char32_t code_point);
size_t count_code_points(std::string_view valid);
// Byte offset of code point number `index` (index may equal the count: returns the size).
size_t offset_of(std::string_view valid, size_t index);

}  // namespace mlaserve::utf8
