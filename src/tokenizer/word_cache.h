// A bounded map from a word (the raw bytes of one pre-tokenized piece) to its BPE ids. Text repeats
// its words, so most pieces skip the merge loop. One cache per thread, no locks; when full it is
// cleared, which keeps memory bounded whatever the input.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve {

uint64_t hash_bytes(std::string_view bytes);

class WordCache {
 public:
  // Words longer than kMaxWordBytes are not cached (they are rare and would crowd the arena).
  static constexpr size_t kMaxWordBytes = 256;

  explicit WordCache(size_t capacity_words);

  // The cached ids of `word` (whose hash_bytes is `hash`), or an empty span.
  std::span<const int32_t> find(std::string_view word, uint64_t hash) const;
  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_length = 0;
    uint32_t ids_offset = 0;
    uint32_t num_ids = 0;  // 0: empty slot (a word always has at least one id)
  };

  void clear();

  size_t capacity_;
  std::vector<Slot> slots_;  // power of two, at most half full
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0;
};

}  // namespace mlaserve
