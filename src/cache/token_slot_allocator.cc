#include "cache/token_slot_allocator.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace mlaserve {

TokenSlotAllocator::TokenSlotAllocator(int64_t num_slots, int64_t page_size) : page_size_(page_size) {
  MLA_CHECK(page_size >= 1, "--page-size must be at least 1, got {}", page_size);
  MLA_CHECK(num_slots > 0 && num_slots % page_size == 0,
            "KV slot count {} must be a positive multiple of the page size {}", num_slots, page_size);
  MLA_CHECK(num_slots <= std::numeric_limits<int32_t>::max(), "KV slot count {} does not fit int32 slot ids",
            num_slots);
  num_pages_ = num_slots / page_size;
  slot_used_.assign(size_t(num_slots), 0);
  page_used_.assign(size_t(num_pages_), 0);
  // Reversed so that the first allocations take the lowest pages (easier to read in tests).
  free_pages_.reserve(size_t(num_pages_));
  for (int64_t p = num_pages_ - 1; p >= 0; --p) free_pages_.push_back(int32_t(p));
}

bool TokenSlotAllocator::is_used(int32_t slot) const {
  return slot >= 0 && slot < num_slots() && slot_used_[size_t(slot)] != 0;
}

int64_t TokenSlotAllocator::pages_needed(int64_t num_existing, int64_t n) const {
  MLA_CHECK(num_existing >= 0 && n >= 0, "slot request for {} tokens after {} is negative", n, num_existing);
  int64_t offset = num_existing % page_size_;
  int64_t tail_room = offset == 0 ? 0 : page_size_ - offset;
  int64_t rest = n > tail_room ? n - tail_room : 0;
  return (rest + page_size_ - 1) / page_size_;
}

std::optional<std::vector<int32_t>> TokenSlotAllocator::allocate(int64_t n) {
  return allocate_extend({}, n);
}

std::optional<std::vector<int32_t>> TokenSlotAllocator::allocate_extend(std::span<const int32_t> existing_slots,
                                                                        int64_t n) {
  int64_t num_existing = int64_t(existing_slots.size());
  int64_t num_pages = pages_needed(num_existing, n);
  if (num_pages > num_free_pages()) return std::nullopt;

  std::vector<int32_t> slots;
  slots.reserve(size_t(n));
  int64_t offset = num_existing % page_size_;
  if (offset != 0 && n > 0) {
    // The sequence's last page has an unused tail: its tokens continue there.
    int32_t last = existing_slots.back();
    MLA_CHECK(is_used(last), "allocate_extend: the sequence's last slot {} is not in use", last);
    MLA_CHECK(last % page_size_ == offset - 1,
              "allocate_extend: slot {} sits at page offset {} but is token {} of the sequence (page size {})",
              last, last % page_size_, num_existing - 1, page_size_);
    for (int32_t s = last + 1; s < last + 1 + (page_size_ - offset) && int64_t(slots.size()) < n; ++s) {
      MLA_CHECK(!slot_used_[size_t(s)], "allocate_extend: slot {} after the sequence's last slot is held by another owner", s);
      slots.push_back(s);
    }
    for (int32_t s : slots) slot_used_[size_t(s)] = 1;
    page_used_[size_t(last / page_size_)] += int32_t(slots.size());
    num_used_slots_ += int64_t(slots.size());
  }
  return take_pages(num_pages, n, std::move(slots));
}

// Appends the slots of num_pages fresh pages to slots until it holds num_tokens.
std::vector<int32_t> TokenSlotAllocator::take_pages(int64_t num_pages, int64_t num_tokens, std::vector<int32_t> slots) {
  for (int64_t i = 0; i < num_pages; ++i) {
    int32_t page = free_pages_.back();
    free_pages_.pop_back();
    int32_t begin = int32_t(page * page_size_);
    int32_t count = int32_t(std::min<int64_t>(page_size_, num_tokens - int64_t(slots.size())));
    for (int32_t s = begin; s < begin + count; ++s) {
      slot_used_[size_t(s)] = 1;
      slots.push_back(s);
    }
    page_used_[size_t(page)] = count;
    num_used_slots_ += count;
  }
  return slots;
}

void TokenSlotAllocator::free(std::span<const int32_t> slots) {
  // Mark first and undo on a bad slot, so that a failed call changes nothing.
  for (size_t i = 0; i < slots.size(); ++i) {
    int32_t s = slots[i];
    if (!is_used(s)) {
      for (size_t j = 0; j < i; ++j) slot_used_[size_t(slots[j])] = 1;
      if (s < 0 || s >= num_slots()) fail("free: KV slot {} is outside [0, {})", s, num_slots());
      fail("free: KV slot {} is not in use (freed twice, or never allocated)", s);
    }
    slot_used_[size_t(s)] = 0;
  }
  for (int32_t s : slots) {
    int32_t page = int32_t(s / page_size_);
    if (--page_used_[size_t(page)] == 0) free_pages_.push_back(page);
  }
  num_used_slots_ -= int64_t(slots.size());
}

void TokenSlotAllocator::check_integrity() const {
  int64_t total_used = 0;
  for (int64_t p = 0; p < num_pages_; ++p) {
    int32_t used = 0;
    for (int64_t s = p * page_size_; s < (p + 1) * page_size_; ++s) used += slot_used_[size_t(s)];
    MLA_CHECK(used == page_used_[size_t(p)], "page {} counts {} used slots but holds {}", p, page_used_[size_t(p)], used);
    total_used += used;
  }
  MLA_CHECK(total_used == num_used_slots_, "{} slots are used but the total says {}", total_used, num_used_slots_);
  std::vector<uint8_t> listed(size_t(num_pages_), 0);
  for (int32_t p : free_pages_) {
    MLA_CHECK(p >= 0 && p < num_pages_, "free list holds page {} outside [0, {})", p, num_pages_);
    MLA_CHECK(!listed[size_t(p)], "page {} is on the free list twice", p);
    MLA_CHECK(page_used_[size_t(p)] == 0, "free page {} has {} used slots", p, page_used_[size_t(p)]);
    listed[size_t(p)] = 1;
  }
  for (int64_t p = 0; p < num_pages_; ++p)
    MLA_CHECK(listed[size_t(p)] || page_used_[size_t(p)] > 0, "page {} has no used slot but is not free", p);
}

}  // namespace mlaserve
