// TokenSlotAllocator: page layout (token i of a sequence at offset i % page_size), per-page
// reference counts, all-or-nothing allocation and freeing, and error cases.
#include "cache/token_slot_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "common/error.h"

namespace mlaserve {
namespace {

using Slots = std::vector<int32_t>;

// The layout paged attention needs: token i sits at offset i % page_size, and the tokens of one
// page of the sequence share a page.
void expect_paged_layout(const Slots& slots, int64_t page_size) {
  for (size_t i = 0; i < slots.size(); ++i) {
    ASSERT_EQ(slots[i] % page_size, int64_t(i) % page_size) << "token " << i;
    if (i % size_t(page_size) != 0) {
      ASSERT_EQ(slots[i], slots[i - 1] + 1) << "token " << i;
    }
  }
}

Slots concat(Slots a, const Slots& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TokenSlotAllocator, RejectsBadSizes) {
  EXPECT_THROW(TokenSlotAllocator(0, 1), Error);
  EXPECT_THROW(TokenSlotAllocator(16, 0), Error);
  EXPECT_THROW(TokenSlotAllocator(10, 4), Error);  // not whole pages
  EXPECT_THROW(TokenSlotAllocator(int64_t(1) << 32, 1), Error);
  TokenSlotAllocator a(16, 4);
  EXPECT_EQ(a.num_slots(), 16);
  EXPECT_EQ(a.page_size(), 4);
  EXPECT_EQ(a.num_pages(), 4);
  EXPECT_EQ(a.num_free_pages(), 4);
  EXPECT_EQ(a.num_free_slots(), 16);
  EXPECT_EQ(a.num_used_slots(), 0);
}

TEST(TokenSlotAllocator, PerTokenAllocateAndFree) {
  TokenSlotAllocator a(8);
  EXPECT_EQ(a.allocate(3), Slots({0, 1, 2}));
  EXPECT_EQ(a.allocate(5), Slots({3, 4, 5, 6, 7}));
  EXPECT_EQ(a.num_free_slots(), 0);
  EXPECT_FALSE(a.allocate(1).has_value());
  a.free(Slots{1, 4});
  EXPECT_EQ(a.num_free_slots(), 2);
  EXPECT_FALSE(a.is_used(1));
  EXPECT_TRUE(a.is_used(2));
  Slots again = *a.allocate(2);
  EXPECT_EQ(std::set<int32_t>(again.begin(), again.end()), std::set<int32_t>({1, 4}));
  a.check_integrity();
}

TEST(TokenSlotAllocator, ZeroAndNegativeCounts) {
  TokenSlotAllocator a(8, 4);
  EXPECT_EQ(a.allocate(0), Slots{});
  EXPECT_EQ(a.num_free_pages(), 2);
  EXPECT_THROW(a.allocate(-1), Error);
  Slots s = *a.allocate(3);
  EXPECT_EQ(a.allocate_extend(s, 0), Slots{});
  EXPECT_THROW(a.allocate_extend(s, -2), Error);
  a.free(Slots{});
  a.check_integrity();
}

TEST(TokenSlotAllocator, FailedAllocationTakesNothing) {
  TokenSlotAllocator a(16, 4);
  Slots s = *a.allocate(10);  // pages 0..2, two slots of page 2 unused
  EXPECT_FALSE(a.allocate(5).has_value());           // needs 2 pages, 1 free
  EXPECT_FALSE(a.allocate_extend(s, 7).has_value());  // 2 in the tail + 5 = 2 pages, 1 free
  EXPECT_EQ(a.num_free_pages(), 1);
  EXPECT_EQ(a.num_used_slots(), 10);
  EXPECT_FALSE(a.is_used(10));
  a.check_integrity();
  EXPECT_EQ(a.allocate_extend(s, 6), Slots({10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(a.num_free_pages(), 0);
  a.check_integrity();
}

TEST(TokenSlotAllocator, NewSequencesStartOnFreshPages) {
  TokenSlotAllocator a(16, 4);
  EXPECT_EQ(a.allocate(6), Slots({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(a.num_free_pages(), 2);
  // The unused tail of page 1 is reserved for that sequence: it is neither free nor handed out.
  EXPECT_EQ(a.num_free_slots(), 8);
  EXPECT_EQ(a.allocate(3), Slots({8, 9, 10}));
  EXPECT_EQ(a.allocate(1), Slots({12}));
  EXPECT_EQ(a.num_free_pages(), 0);
  EXPECT_FALSE(a.allocate(1).has_value());
  a.check_integrity();
}

TEST(TokenSlotAllocator, ExtendFillsLastPartialPageFirst) {
  TokenSlotAllocator a(32, 4);
  Slots seq = *a.allocate(6);  // 0..5
  Slots other = *a.allocate(2);  // 8, 9
  Slots more = *a.allocate_extend(seq, 4);
  EXPECT_EQ(more, Slots({6, 7, 12, 13}));
  seq = concat(seq, more);
  expect_paged_layout(seq, 4);
  // Decode-style: one token at a time continues the page, then takes a new one.
  for (int step = 0; step < 7; ++step) seq = concat(seq, *a.allocate_extend(seq, 1));
  expect_paged_layout(seq, 4);
  EXPECT_EQ(seq.size(), 17u);
  other = concat(other, *a.allocate_extend(other, 3));
  expect_paged_layout(other, 4);
  EXPECT_EQ(other, Slots({8, 9, 10, 11, 24}));
  a.check_integrity();
}

TEST(TokenSlotAllocator, ExtendOnPageBoundaryTakesFreshPage) {
  TokenSlotAllocator a(16, 4);
  Slots seq = *a.allocate(4);
  Slots gap = *a.allocate(1);  // page 1
  EXPECT_EQ(a.allocate_extend(seq, 2), Slots({8, 9}));
  a.free(gap);
  a.check_integrity();
}

TEST(TokenSlotAllocator, PagesNeeded) {
  TokenSlotAllocator a(64, 4);
  EXPECT_EQ(a.pages_needed(0, 0), 0);
  EXPECT_EQ(a.pages_needed(0, 1), 1);
  EXPECT_EQ(a.pages_needed(0, 4), 1);
  EXPECT_EQ(a.pages_needed(0, 5), 2);
  EXPECT_EQ(a.pages_needed(6, 2), 0);  // fits the tail of page 1
  EXPECT_EQ(a.pages_needed(6, 3), 1);
  EXPECT_EQ(a.pages_needed(8, 1), 1);
  EXPECT_EQ(a.pages_needed(7, 9), 2);
  TokenSlotAllocator per_token(8);
  EXPECT_EQ(per_token.pages_needed(5, 3), 3);
}

TEST(TokenSlotAllocator, ExtendRejectsBrokenSequences) {
  TokenSlotAllocator a(16, 4);
  Slots seq = *a.allocate(3);  // 0, 1, 2
  EXPECT_THROW(a.allocate_extend(Slots{1}, 1), Error);     // slot 1 is at offset 1, not 0
  EXPECT_THROW(a.allocate_extend(Slots{5}, 1), Error);     // slot 5 is not in use
  EXPECT_THROW(a.allocate_extend(Slots{0, 1}, 1), Error);  // slot 2 after them is held by seq
  EXPECT_EQ(a.num_used_slots(), 3);
  a.check_integrity();
}

TEST(TokenSlotAllocator, PageReturnsWhenAllItsSlotsAreFreed) {
  TokenSlotAllocator a(16, 4);
  Slots seq = *a.allocate(10);  // pages 0, 1, 2 (two slots)
  EXPECT_EQ(a.num_free_pages(), 1);
  // The cache keeps the two whole pages, the request gives back its unaligned tail.
  a.free(Slots{8, 9});
  EXPECT_EQ(a.num_free_pages(), 2);
  a.free(Slots{4, 5});
  EXPECT_EQ(a.num_free_pages(), 2);  // page 1 still has 6 and 7
  a.check_integrity();
  a.free(Slots{7, 6});
  EXPECT_EQ(a.num_free_pages(), 3);
  a.free(Slots{0, 1, 2, 3});
  EXPECT_EQ(a.num_free_pages(), 4);
  EXPECT_EQ(a.num_used_slots(), 0);
  a.check_integrity();
}

TEST(TokenSlotAllocator, FreedPagesAreReused) {
  TokenSlotAllocator a(8, 4);
  Slots s0 = *a.allocate(4), s1 = *a.allocate(4);
  EXPECT_FALSE(a.allocate(1).has_value());
  a.free(s0);
  EXPECT_EQ(a.allocate(2), Slots({0, 1}));
  a.free(s1);
  EXPECT_EQ(a.allocate(4), Slots({4, 5, 6, 7}));
  a.check_integrity();
}

TEST(TokenSlotAllocator, BadFreesThrowAndChangeNothing) {
  TokenSlotAllocator a(16, 4);
  Slots seq = *a.allocate(6);
  EXPECT_THROW(a.free(Slots{6}), Error);         // reserved tail, never handed out
  EXPECT_THROW(a.free(Slots{12}), Error);        // free page
  EXPECT_THROW(a.free(Slots{16}), Error);        // out of range
  EXPECT_THROW(a.free(Slots{-1}), Error);
  EXPECT_THROW(a.free(Slots{0, 1, 1}), Error);   // twice in one call
  EXPECT_THROW(a.free(Slots{4, 5, 12}), Error);  // bad slot last: the good ones stay held
  EXPECT_EQ(a.num_used_slots(), 6);
  EXPECT_EQ(a.num_free_pages(), 2);
  for (int32_t s : seq) EXPECT_TRUE(a.is_used(s));
  a.check_integrity();
  a.free(seq);
  EXPECT_THROW(a.free(Slots{0}), Error);  // double free
  a.check_integrity();
}

// Many sequences growing and ending at random: slots are never shared, the layout holds, and
// everything returns.
void run_random_sequences(int64_t page_size, uint32_t seed) {
  TokenSlotAllocator a(256, page_size);
  std::mt19937 rng(seed);
  std::vector<Slots> seqs;
  for (int step = 0; step < 2000; ++step) {
    int op = int(rng() % 10);
    if (op < 3 || seqs.empty()) {
      int64_t n = rng() % 20;
      int64_t free_before = a.num_free_pages();
      auto got = a.allocate(n);
      ASSERT_EQ(got.has_value(), a.pages_needed(0, n) <= free_before);
      if (got) seqs.push_back(*got);
    } else if (op < 8) {
      Slots& seq = seqs[rng() % seqs.size()];
      int64_t n = 1 + rng() % 6;
      int64_t needed = a.pages_needed(int64_t(seq.size()), n);
      int64_t free_before = a.num_free_pages();
      auto got = a.allocate_extend(seq, n);
      ASSERT_EQ(got.has_value(), needed <= free_before);
      if (got) {
        ASSERT_EQ(a.num_free_pages(), free_before - needed);
        seq = concat(seq, *got);
      }
    } else {
      size_t i = rng() % seqs.size();
      a.free(seqs[i]);
      seqs.erase(seqs.begin() + long(i));
    }
    a.check_integrity();
    std::set<int32_t> held;
    for (const Slots& seq : seqs) {
      expect_paged_layout(seq, page_size);
      held.insert(seq.begin(), seq.end());
    }
    ASSERT_EQ(int64_t(held.size()), a.num_used_slots());
  }
  for (const Slots& seq : seqs) a.free(seq);
  EXPECT_EQ(a.num_free_pages(), a.num_pages());
  a.check_integrity();
}

TEST(TokenSlotAllocator, RandomSequencesPerToken) { run_random_sequences(1, 7); }
TEST(TokenSlotAllocator, RandomSequencesPaged) { run_random_sequences(4, 11); }
TEST(TokenSlotAllocator, RandomSequencesLargePages) { run_random_sequences(16, 13); }

}  // namespace
}  // namespace mlaserve
