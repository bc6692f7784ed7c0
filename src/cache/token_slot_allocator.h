// TokenSlotAllocator: decides which KvPool slot each token's latent lives in, a page at a time
// (--page-size; 1 = per token). Owned and called by the scheduler thread only.
//
// Layout rule (what paged attention kernels need): a sequence's i-th token sits at offset
// i % page_size of its (i / page_size)-th page, so slot = page * page_size + offset and a page
// table per sequence describes all its slots. allocate() starts a sequence on fresh pages;
// allocate_extend() first fills the unused tail of the sequence's last page.
//
// Ownership: every used slot has exactly one owner (a running request, or the RadixCache for
// the pages it caches) and is freed once, by that owner. A page goes back to the free list when
// its last used slot is freed, so the cache can hold a prefix's pages while a request holds the
// rest of its pages. The unused tail of a sequence's last page stays reserved for that sequence
// (it is not free) until every used slot of the page is freed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace mlaserve {

class TokenSlotAllocator {
 public:
  // Manages slots [0, num_slots). num_slots must be a positive multiple of page_size. A padding
  // slot for dummy writes (CUDA-graph padding) belongs outside this range: size the KvPool larger.
  TokenSlotAllocator(int64_t num_slots, int64_t page_size = 1);

  // Slots for the first n tokens of a sequence, on fresh pages. nullopt when too few pages are
  // free; then nothing is taken.
  std::optional<std::vector<int32_t>> allocate(int64_t n);

  // Slots for n more tokens of a sequence whose tokens so far sit at existing_slots (all held
  // by the caller, laid out by the rule above). Fills the last page's tail, then fresh pages.
  // nullopt when too few pages are free; then nothing is taken. Returns only the new slots.
  std::optional<std::vector<int32_t>> allocate_extend(std::span<const int32_t> existing_slots, int64_t n);

  // Fresh pages that allocate_extend would take for n more tokens after num_existing tokens
  // (for admission checks: compare with num_free_pages()).
  int64_t pages_needed(int64_t num_existing, int64_t n) const;

  // Returns slots; a page goes back to the free list when all its slots are unused. Freeing a
  // slot that is out of range, not in use, or twice in one call throws Error and frees nothing.
  void free(std::span<const int32_t> slots);

  int64_t num_slots() const { return num_pages_ * page_size_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t num_free_pages() const { return int64_t(free_pages_.size()); }
  // Slots of free pages only: the reserved tails of partly used pages are not counted.
  int64_t num_free_slots() const { return num_free_pages() * page_size_; }
  int64_t num_used_slots() const { return num_used_slots_; }
  bool is_used(int32_t slot) const;

  // For tests: throws Error when the bookkeeping is inconsistent (a free page with a used slot,
  // a page listed twice, per-page counts or the used total not matching the slots).
  void check_integrity() const;

 private:
  std::vector<int32_t> take_pages(int64_t num_pages, int64_t num_tokens, std::vector<int32_t> slots);

  int64_t page_size_;
  int64_t num_pages_;
  int64_t num_used_slots_ = 0;
  std::vector<uint8_t> slot_used_;   // [num_slots] 1 while some owner holds the slot
  std::vector<int32_t> page_used_;   // [num_pages] used slots in each page (its refcount)
  std::vector<int32_t> free_pages_;  // pages with no used slot; a stack, so freed pages are reused first
};

}  // namespace mlaserve
