// RadixCache: the KV slots of token prefixes that finished (or paused) requests computed, kept
// so that later requests sharing a prefix prefill only the rest. A radix tree over token ids:
// each edge holds a run of tokens and the KV slots of those tokens. Owned and called by the
// scheduler thread only.
//
// Ownership of slots: every slot stored in the tree is owned by the tree until evict() or
// reset() hands it to the free_slots callback. A request that matched a prefix uses the tree's
// slots for it (and must lock() the node so they stay); the slots it allocated itself stay its own.
//
// With page_size > 1 only whole pages are matched and inserted (lengths are rounded down to a
// multiple of page_size), so a cached prefix always ends on a page boundary of the
// TokenSlotAllocator layout and the tree holds whole pages only.
//
// --disable-radix-cache: the scheduler does not construct a RadixCache at all (requests free
// their slots when they finish and always match nothing); this class has no disabled mode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace mlaserve {

class RadixCache {
 public:
  struct Node;  // defined in radix_cache.cc; callers only pass handles back

  struct MatchResult {
    int64_t length = 0;          // matched tokens, a multiple of page_size
    std::vector<int32_t> slots;  // [length] the tree's KV slots of the matched prefix
    // The deepest matched node (the root when nothing matched). Valid while locked; an unlocked
    // handle may be evicted, so lock it before anything can call evict().
    Node* node = nullptr;
  };

  using FreeSlots = std::function<void(const std::vector<int32_t>& slots)>;

  explicit RadixCache(int64_t page_size = 1);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // The longest cached prefix of tokens (whole pages only). Splits a node when the match ends
  // inside its edge, so that the returned node covers exactly the matched prefix. Marks the
  // matched path as used now (LRU). The scheduler should match at most len - 1 prompt tokens,
  // so at least one token is computed and gives logits.
  MatchResult match_prefix(std::span<const int32_t> tokens);

  // Caches tokens (rounded down to whole pages) with their slots; returns how many leading
  // tokens were already cached. The tree takes ownership of slots[returned, aligned length);
  // the caller still owns, and must free, its own slots among [0, returned) (duplicates of
  // cached ones: all of them past the prefix it got from match_prefix) and the unaligned tail.
  int64_t insert(std::span<const int32_t> tokens, std::span<const int32_t> slots);

  // Pins node and its ancestors (reference counts): pinned tokens are never evicted. lock(root)
  // and unlock(root) do nothing. Unlocking a node that is not locked throws Error.
  void lock(Node* node);
  void unlock(Node* node);

  // Removes least-recently-used unlocked leaves, passing each one's slots to free_slots, until
  // at least num_tokens tokens are freed or nothing unlocked is left. Returns the tokens freed
  // (may exceed num_tokens by part of the last leaf: a leaf is evicted whole).
  int64_t evict(int64_t num_tokens, const FreeSlots& free_slots);

  // For /flush_cache: evicts everything unlocked; returns the tokens freed.
  int64_t reset(const FreeSlots& free_slots);

  int64_t evictable_size() const { return evictable_size_; }  // cached tokens no request pins
  int64_t protected_size() const { return protected_size_; }  // cached tokens some request pins
  int64_t total_size() const { return evictable_size_ + protected_size_; }
  int64_t page_size() const { return page_size_; }
  Node* root() const { return root_.get(); }

  // For tests: throws Error when the tree is inconsistent (sizes, child keys, parent links, lock
  // counts, access times, a slot held twice).
  void check_integrity() const;

 private:
  Node* split(Node* child, int64_t at);
  Node* find_child(Node* node, std::span<const int32_t> rest) const;
  int64_t matching_length(const Node* child, std::span<const int32_t> rest) const;

  int64_t page_size_;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;    // advances once per match_prefix / insert: the LRU time
  uint64_t next_id_ = 0;  // node creation order: breaks LRU ties deterministically
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
};

}  // namespace mlaserve
