// RadixCache: matching (empty, exact, partial with a split, branches), insert's already-cached
// count, locks, LRU eviction, pages, reset, the scheduler's request flow with a
// TokenSlotAllocator, and a randomized run against a plain reference model.
#include "cache/radix_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "cache/token_slot_allocator.h"
#include "common/error.h"

namespace mlaserve {
namespace {

using Ids = std::vector<int32_t>;

// Records what evict() hands back.
struct Freed {
  std::vector<Ids> calls;
  RadixCache::FreeSlots callback() {
    return [this](const Ids& slots) { calls.push_back(slots); };
  }
  std::multiset<int32_t> all() const {
    std::multiset<int32_t> out;
    for (const Ids& c : calls) out.insert(c.begin(), c.end());
    return out;
  }
};

TEST(RadixCache, EmptyMatchesNothing) {
  RadixCache cache;
  for (const Ids& tokens : {Ids{}, Ids{1, 2, 3}}) {
    RadixCache::MatchResult m = cache.match_prefix(tokens);
    EXPECT_EQ(m.length, 0);
    EXPECT_TRUE(m.slots.empty());
    EXPECT_EQ(m.node, cache.root());
  }
  EXPECT_EQ(cache.total_size(), 0);
  EXPECT_EQ(cache.insert(Ids{}, Ids{}), 0);
  cache.lock(cache.root());  // no-ops
  cache.unlock(cache.root());
  Freed freed;
  EXPECT_EQ(cache.evict(10, freed.callback()), 0);
  EXPECT_TRUE(freed.calls.empty());
  cache.check_integrity();
}

TEST(RadixCache, InsertThenExactAndLongerMatch) {
  RadixCache cache;
  EXPECT_EQ(cache.insert(Ids{1, 2, 3}, Ids{10, 11, 12}), 0);
  EXPECT_EQ(cache.total_size(), 3);
  EXPECT_EQ(cache.evictable_size(), 3);
  RadixCache::MatchResult m = cache.match_prefix(Ids{1, 2, 3});
  EXPECT_EQ(m.length, 3);
  EXPECT_EQ(m.slots, Ids({10, 11, 12}));
  EXPECT_NE(m.node, cache.root());
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 4, 5}).slots, Ids({10, 11, 12}));
  EXPECT_EQ(cache.match_prefix(Ids{2, 3}).length, 0);
  cache.check_integrity();
}

TEST(RadixCache, InsertReturnsAlreadyCachedLength) {
  RadixCache cache;
  EXPECT_EQ(cache.insert(Ids{1, 2, 3}, Ids{10, 11, 12}), 0);
  EXPECT_EQ(cache.insert(Ids{1, 2, 3, 4, 5}, Ids{20, 21, 22, 23, 24}), 3);
  EXPECT_EQ(cache.total_size(), 5);
  // The cached slots win; the caller frees its duplicates 20..22.
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 4, 5}).slots, Ids({10, 11, 12, 23, 24}));
  EXPECT_EQ(cache.insert(Ids{1, 2, 3, 4, 5}, Ids{30, 31, 32, 33, 34}), 5);
  EXPECT_EQ(cache.insert(Ids{1, 2}, Ids{40, 41}), 2);
  EXPECT_EQ(cache.insert(Ids{1, 2, 7}, Ids{50, 51, 52}), 2);  // branches after 1 2
  EXPECT_EQ(cache.total_size(), 6);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 7}).slots, Ids({10, 11, 52}));
  EXPECT_THROW(cache.insert(Ids{1, 2}, Ids{1}), Error);
  cache.check_integrity();
}

TEST(RadixCache, PartialMatchSplitsTheEdge) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3, 4}, Ids{10, 11, 12, 13});
  RadixCache::MatchResult m = cache.match_prefix(Ids{1, 2, 9});
  EXPECT_EQ(m.length, 2);
  EXPECT_EQ(m.slots, Ids({10, 11}));
  cache.check_integrity();
  // The node covers exactly the matched part: locking it pins two tokens, not four.
  cache.lock(m.node);
  EXPECT_EQ(cache.protected_size(), 2);
  EXPECT_EQ(cache.evictable_size(), 2);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 4}).slots, Ids({10, 11, 12, 13}));
  // A shorter match splits the locked node: the new parent inherits the lock.
  RadixCache::MatchResult shorter = cache.match_prefix(Ids{1});
  EXPECT_EQ(shorter.length, 1);
  EXPECT_EQ(cache.protected_size(), 2);
  cache.check_integrity();
  cache.unlock(m.node);
  EXPECT_EQ(cache.protected_size(), 0);
  EXPECT_EQ(cache.evictable_size(), 4);
  cache.check_integrity();
}

TEST(RadixCache, BranchesMatchTheirOwnSlots) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3, 4}, Ids{10, 11, 12, 13});
  EXPECT_EQ(cache.insert(Ids{1, 2, 5, 6}, Ids{20, 21, 22, 23}), 2);
  EXPECT_EQ(cache.insert(Ids{7}, Ids{30}), 0);
  EXPECT_EQ(cache.total_size(), 7);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 5, 6, 8}).slots, Ids({10, 11, 22, 23}));
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3}).slots, Ids({10, 11, 12}));
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 8}).slots, Ids({10, 11}));
  EXPECT_EQ(cache.match_prefix(Ids{7, 7}).slots, Ids({30}));
  cache.check_integrity();
}

TEST(RadixCache, LockPreventsEvictionUntilUnlocked) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3}, Ids{10, 11, 12});
  cache.insert(Ids{4, 5}, Ids{20, 21});
  RadixCache::Node* a = cache.match_prefix(Ids{1, 2, 3}).node;
  cache.lock(a);
  EXPECT_EQ(cache.protected_size(), 3);
  Freed freed;
  EXPECT_EQ(cache.evict(100, freed.callback()), 2);
  EXPECT_EQ(freed.all(), std::multiset<int32_t>({20, 21}));
  EXPECT_EQ(cache.total_size(), 3);
  EXPECT_EQ(cache.evictable_size(), 0);
  cache.unlock(a);
  EXPECT_EQ(cache.evict(100, freed.callback()), 3);
  EXPECT_EQ(freed.all(), std::multiset<int32_t>({10, 11, 12, 20, 21}));
  EXPECT_EQ(cache.total_size(), 0);
  cache.check_integrity();
}

TEST(RadixCache, LockPinsAncestorsAndCounts) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3, 4}, Ids{10, 11, 12, 13});
  cache.insert(Ids{1, 2, 5, 6}, Ids{20, 21, 22, 23});
  RadixCache::Node* b = cache.match_prefix(Ids{1, 2, 5, 6}).node;
  cache.lock(b);
  cache.lock(b);
  EXPECT_EQ(cache.protected_size(), 4);  // 1 2 and 5 6
  Freed freed;
  EXPECT_EQ(cache.evict(100, freed.callback()), 2);
  EXPECT_EQ(freed.all(), std::multiset<int32_t>({12, 13}));
  cache.unlock(b);
  EXPECT_EQ(cache.evict(100, freed.callback()), 0);  // still locked once
  cache.unlock(b);
  EXPECT_THROW(cache.unlock(b), Error);
  EXPECT_EQ(cache.protected_size(), 0);
  EXPECT_EQ(cache.evict(100, freed.callback()), 4);
  EXPECT_THROW(cache.lock(nullptr), Error);
  cache.check_integrity();
}

TEST(RadixCache, EvictsLeastRecentlyUsedFirst) {
  RadixCache cache;
  cache.insert(Ids{1, 1}, Ids{10, 11});
  cache.insert(Ids{2, 2}, Ids{20, 21});
  cache.insert(Ids{3, 3}, Ids{30, 31});
  cache.match_prefix(Ids{1, 1, 9});  // 1 1 is now the most recent, 2 2 the oldest
  Freed freed;
  EXPECT_EQ(cache.evict(2, freed.callback()), 2);
  EXPECT_EQ(freed.calls, std::vector<Ids>({{20, 21}}));
  EXPECT_EQ(cache.evict(1, freed.callback()), 2);  // a leaf goes whole
  EXPECT_EQ(freed.calls.back(), Ids({30, 31}));
  cache.insert(Ids{4}, Ids{40});
  EXPECT_EQ(cache.evict(1, freed.callback()), 2);
  EXPECT_EQ(freed.calls.back(), Ids({10, 11}));
  cache.check_integrity();
}

TEST(RadixCache, EvictedParentsBecomeLeaves) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3, 4}, Ids{10, 11, 12, 13});
  cache.insert(Ids{1, 2, 5, 6}, Ids{20, 21, 22, 23});
  cache.insert(Ids{9}, Ids{30});  // newer than both branches
  Freed freed;
  // Oldest first: 3 4, then 5 6 (1 2 was touched by the second insert, so it is newer than 3 4
  // but older than 9, and becomes a leaf once both branches are gone).
  EXPECT_EQ(cache.evict(5, freed.callback()), 6);
  EXPECT_EQ(freed.calls, std::vector<Ids>({{12, 13}, {22, 23}, {10, 11}}));
  EXPECT_EQ(cache.total_size(), 1);
  cache.check_integrity();
}

TEST(RadixCache, PageSizeMatchesAndInsertsWholePagesOnly) {
  RadixCache cache(4);
  Ids tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Ids slots{100, 101, 102, 103, 104, 105, 106, 107, 108, 109};
  EXPECT_EQ(cache.insert(tokens, slots), 0);
  EXPECT_EQ(cache.total_size(), 8);  // 9 10 are not a whole page
  EXPECT_EQ(cache.match_prefix(tokens).length, 8);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 4, 5, 6, 7}).slots, Ids({100, 101, 102, 103}));
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3}).length, 0);
  // Diverging inside the second page matches the first page only, and splits at its end.
  RadixCache::MatchResult m = cache.match_prefix(Ids{1, 2, 3, 4, 5, 6, 0, 0});
  EXPECT_EQ(m.length, 4);
  cache.lock(m.node);
  EXPECT_EQ(cache.protected_size(), 4);
  cache.check_integrity();
  // Same first token, different first page: separate children.
  EXPECT_EQ(cache.insert(Ids{1, 2, 3, 9}, Ids{200, 201, 202, 203}), 0);
  EXPECT_EQ(cache.insert(Ids{1, 2, 3, 4, 5, 6, 0, 0}, Ids{0, 0, 0, 0, 300, 301, 302, 303}), 4);
  EXPECT_EQ(cache.total_size(), 16);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 9, 1}).slots, Ids({200, 201, 202, 203}));
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 3, 4, 5, 6, 0, 0}).slots,
            Ids({100, 101, 102, 103, 300, 301, 302, 303}));
  cache.check_integrity();
  cache.unlock(m.node);
  EXPECT_THROW(RadixCache(0), Error);
}

TEST(RadixCache, ResetFreesEverythingUnlocked) {
  RadixCache cache;
  cache.insert(Ids{1, 2, 3}, Ids{10, 11, 12});
  cache.insert(Ids{1, 2, 4}, Ids{10, 11, 13});
  cache.insert(Ids{5, 6}, Ids{20, 21});
  RadixCache::Node* held = cache.match_prefix(Ids{1, 2, 4}).node;
  cache.lock(held);
  Freed freed;
  EXPECT_EQ(cache.reset(freed.callback()), 3);
  EXPECT_EQ(freed.all(), std::multiset<int32_t>({12, 20, 21}));
  EXPECT_EQ(cache.total_size(), 3);
  EXPECT_EQ(cache.protected_size(), 3);
  cache.unlock(held);
  EXPECT_EQ(cache.reset(freed.callback()), 3);
  EXPECT_EQ(cache.total_size(), 0);
  EXPECT_EQ(cache.match_prefix(Ids{1, 2, 4}).length, 0);
  cache.check_integrity();
}

// What the scheduler does: match, lock, allocate the rest, compute, insert on finish, free the
// duplicates and the unaligned tail, unlock. Every slot ends up freed exactly once.
TEST(RadixCache, RequestFlowWithAllocator) {
  for (int64_t page_size : {1, 4}) {
    TokenSlotAllocator alloc(64, page_size);
    RadixCache cache(page_size);
    auto free_slots = [&](const Ids& s) { alloc.free(s); };
    auto run_request = [&](const Ids& tokens) {
      RadixCache::MatchResult m = cache.match_prefix(Ids(tokens.begin(), tokens.end() - 1));
      cache.lock(m.node);
      Ids slots = m.slots;
      Ids own = *alloc.allocate_extend(slots, int64_t(tokens.size()) - m.length);
      slots.insert(slots.end(), own.begin(), own.end());
      int64_t cached = cache.insert(tokens, slots);
      int64_t aligned = int64_t(tokens.size()) / page_size * page_size;
      alloc.free(std::span<const int32_t>(slots).subspan(size_t(m.length), size_t(cached - m.length)));
      alloc.free(std::span<const int32_t>(slots).subspan(size_t(aligned)));
      cache.unlock(m.node);
      return m.length;
    };
    Ids system{5, 5, 5, 5, 5, 5, 5, 5, 5};
    Ids a = system, b = system;
    a.insert(a.end(), {1, 2, 3});
    b.insert(b.end(), {7, 8, 9, 10, 11});
    EXPECT_EQ(run_request(a), 0);
    EXPECT_EQ(run_request(b), page_size == 1 ? 9 : 8);
    EXPECT_EQ(run_request(a), page_size == 1 ? 11 : 8);
    EXPECT_EQ(alloc.num_used_slots(), cache.total_size());
    alloc.check_integrity();
    cache.check_integrity();
    cache.reset(free_slots);
    EXPECT_EQ(alloc.num_used_slots(), 0);
    EXPECT_EQ(alloc.num_free_pages(), alloc.num_pages());
  }
}

// Random inserts, matches, locks, unlocks and evictions against a plain model: the set of
// cached page-aligned prefixes, each with its last page's slots and the tick it was last used.
// Slots come from a TokenSlotAllocator, so leaks and double frees surface there.
class RandomRun {
 public:
  RandomRun(int64_t page_size, int vocab, size_t max_len, uint32_t seed)
      : page_(page_size), vocab_(vocab), max_len_(max_len), alloc_(96 * page_size, page_size),
        cache_(page_size), rng_(seed) {}

  void step() {
    int op = int(rng_() % 100);
    if (op < 40) {
      ASSERT_NO_FATAL_FAILURE(insert());
    } else if (op < 70) {
      ASSERT_NO_FATAL_FAILURE(match());
    } else if (op < 85) {
      if (!held_.empty()) {
        size_t i = rng_() % held_.size();
        cache_.unlock(held_[i].node);
        held_.erase(held_.begin() + long(i));
      }
    } else {
      ASSERT_NO_FATAL_FAILURE(evict(1 + int64_t(rng_() % 20)));
    }
    ASSERT_NO_THROW(cache_.check_integrity());
    ASSERT_NO_THROW(alloc_.check_integrity());
    int64_t locked_pages = 0;
    for (const auto& [key, page] : model_) locked_pages += is_locked(key);
    ASSERT_EQ(cache_.total_size(), int64_t(model_.size()) * page_);
    ASSERT_EQ(cache_.protected_size(), locked_pages * page_);
    ASSERT_EQ(alloc_.num_used_slots(), cache_.total_size());  // the tree owns every held slot
  }

  void finish() {
    for (const Held& h : held_) cache_.unlock(h.node);
    held_.clear();
    ASSERT_NO_FATAL_FAILURE(evict(cache_.evictable_size()));
    EXPECT_TRUE(model_.empty());
    EXPECT_EQ(cache_.total_size(), 0);
    EXPECT_EQ(alloc_.num_free_pages(), alloc_.num_pages());
  }

 private:
  struct Page {
    Ids slots;  // [page_size]
    uint64_t time;
  };
  struct Held {
    RadixCache::Node* node;
    Ids prefix;
  };

  Ids prefix(const Ids& tokens, size_t n) const { return Ids(tokens.begin(), tokens.begin() + long(n)); }

  // Mostly a prefix of an earlier sequence plus new tokens, so that prefixes are shared.
  Ids random_tokens() {
    Ids tokens;
    if (!history_.empty() && rng_() % 3 != 0) {
      const Ids& h = history_[rng_() % history_.size()];
      tokens = prefix(h, rng_() % (h.size() + 1));
    }
    size_t target = std::min(max_len_, tokens.size() + rng_() % (max_len_ / 2 + 1));
    while (tokens.size() < target) tokens.push_back(int32_t(rng_() % uint32_t(vocab_)));
    return tokens;
  }

  size_t cached_length(const Ids& tokens) const {
    size_t k = 0;
    while (k + size_t(page_) <= tokens.size() && model_.count(prefix(tokens, k + size_t(page_)))) k += size_t(page_);
    return k;
  }

  bool is_locked(const Ids& key) const {
    for (const Held& h : held_)
      if (h.prefix.size() >= key.size() && std::equal(key.begin(), key.end(), h.prefix.begin())) return true;
    return false;
  }

  void match() {
    Ids tokens = random_tokens();
    RadixCache::MatchResult m = cache_.match_prefix(tokens);
    size_t want = cached_length(tokens);
    ASSERT_EQ(m.length, int64_t(want));
    ++clock_;
    Ids want_slots;
    for (size_t k = size_t(page_); k <= want; k += size_t(page_)) {
      Page& page = model_.at(prefix(tokens, k));
      page.time = clock_;
      want_slots.insert(want_slots.end(), page.slots.begin(), page.slots.end());
    }
    ASSERT_EQ(m.slots, want_slots);
    if (rng_() % 2 == 0 && held_.size() < 8) {
      cache_.lock(m.node);
      held_.push_back({m.node, prefix(tokens, want)});
    }
  }

  void insert() {
    Ids tokens = random_tokens();
    auto slots = alloc_.allocate(int64_t(tokens.size()));
    if (!slots) {
      ASSERT_NO_FATAL_FAILURE(evict(int64_t(tokens.size())));
      slots = alloc_.allocate(int64_t(tokens.size()));
      if (!slots) return;  // everything cached is locked
    }
    size_t want = cached_length(tokens);
    int64_t cached = cache_.insert(tokens, *slots);
    ASSERT_EQ(cached, int64_t(want));
    size_t aligned = tokens.size() / size_t(page_) * size_t(page_);
    ++clock_;
    for (size_t k = size_t(page_); k <= aligned; k += size_t(page_)) {
      if (k <= want) {
        model_.at(prefix(tokens, k)).time = clock_;
      } else {
        model_[prefix(tokens, k)] = Page{Ids(slots->begin() + long(k) - page_, slots->begin() + long(k)), clock_};
      }
    }
    std::span<const int32_t> all(*slots);
    alloc_.free(all.first(want));        // duplicates of cached slots
    alloc_.free(all.subspan(aligned));  // not a whole page
    if (history_.size() < 64) {
      history_.push_back(tokens);
    } else {
      history_[rng_() % history_.size()] = tokens;
    }
  }

  void evict(int64_t num_tokens) {
    int64_t evictable_before = cache_.evictable_size();
    Ids freed;
    int64_t got = cache_.evict(num_tokens, [&](const Ids& s) {
      freed.insert(freed.end(), s.begin(), s.end());
      alloc_.free(s);
    });
    ASSERT_EQ(got, int64_t(freed.size()));
    ASSERT_GE(got, std::min(num_tokens, evictable_before));
    std::map<int32_t, Ids> owner;
    for (const auto& [key, page] : model_)
      for (int32_t s : page.slots) owner[s] = key;
    std::set<Ids> gone;
    for (int32_t s : freed) {
      ASSERT_TRUE(owner.count(s)) << "evict freed slot " << s << ", which is not cached";
      gone.insert(owner[s]);
    }
    ASSERT_EQ(int64_t(gone.size()) * page_, got) << "a page was freed in part";
    uint64_t newest_gone = 0;
    for (const Ids& key : gone) {
      ASSERT_FALSE(is_locked(key));
      newest_gone = std::max(newest_gone, model_.at(key).time);
    }
    for (const Ids& key : gone) model_.erase(key);
    // What is left is still prefix-closed, and no unlocked leaf left is older than one evicted.
    for (auto it = model_.begin(); it != model_.end(); ++it) {
      const Ids& key = it->first;
      if (int64_t(key.size()) > page_) {
        ASSERT_TRUE(model_.count(prefix(key, key.size() - size_t(page_))));
      }
      auto next = std::next(it);
      bool leaf = next == model_.end() || next->first.size() <= key.size() ||
                  !std::equal(key.begin(), key.end(), next->first.begin());
      if (leaf && !is_locked(key)) {
        ASSERT_GE(it->second.time, newest_gone) << "LRU order broken";
      }
    }
  }

  int64_t page_;
  int vocab_;
  size_t max_len_;
  TokenSlotAllocator alloc_;
  RadixCache cache_;
  std::mt19937 rng_;
  std::map<Ids, Page> model_;
  uint64_t clock_ = 0;
  std::vector<Held> held_;
  std::vector<Ids> history_;
};

TEST(RadixCache, RandomAgainstReferencePerToken) {
  RandomRun run(1, 3, 12, 1234);
  for (int i = 0; i < 4000; ++i) ASSERT_NO_FATAL_FAILURE(run.step()) << "step " << i;
  run.finish();
}

TEST(RadixCache, RandomAgainstReferencePaged) {
  RandomRun run(4, 2, 24, 99);
  for (int i = 0; i < 4000; ++i) ASSERT_NO_FATAL_FAILURE(run.step()) << "step " << i;
  run.finish();
}

}  // namespace
}  // namespace mlaserve
