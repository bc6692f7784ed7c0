#include "tokenizer/word_cache.h"

#include <bit>
#include <algorithm>
#include <cstring>

namespace mlaserve {

uint64_t hash_bytes(std::string_view bytes) {
  // Eight bytes at a time through a multiply-xorshift mix; words are short, so this is a few
  // multiplications per piece.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = bytes.size() * kMul;
  size_t pos = 0;
  for (; pos + 8 <= bytes.size(); pos += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + pos, 8);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  if (pos < bytes.size()) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + pos, bytes.size() - pos);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  h *= kMul;
  return h ^ (h >> 32);
}

WordCache::WordCache(size_t capacity_words)
    : capacity_(capacity_words), slots_(std::bit_ceil(capacity_words * 2)) {}

std::span<const int32_t> WordCache::find(std::string_view word, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.num_ids == 0) return {};
    if (s.hash == hash && s.key_length == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      return {ids_.data() + s.ids_offset, s.num_ids};
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
  if (word.size() > kMaxWordBytes || ids.empty()) return;
  if (size_ >= capacity_) clear();
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].num_ids != 0) i = (i + 1) & mask;
  slots_[i] = {hash, uint32_t(keys_.size()), uint32_t(word.size()), uint32_t(ids_.size()),
               uint32_t(ids.size())};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++size_;
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

}  // namespace mlaserve
