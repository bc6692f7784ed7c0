// GPT-2's byte-level alphabet: every byte is written as one printable code point so that a BPE
// vocabulary of strings can hold arbitrary bytes. Printable Latin-1 bytes map to themselves; the
// other 68 bytes map to U+0100.. in byte order (so ' ' becomes 'Ġ', '\n' becomes 'Ċ').
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mlaserve::byte_level {

// The code point that stands for `byte`.
char32_t char_of(unsigned char byte);

// Raw bytes -> their byte-level spelling (UTF-8).
std::string encode(std::string_view bytes);

// A byte-level spelling (UTF-8) -> raw bytes; nullopt when some character is outside the
// alphabet (HF's decoder then keeps such a token's own UTF-8 bytes, as added tokens need).
std::optional<std::string> decode(std::string_view token);

}  // namespace mlaserve::byte_level
