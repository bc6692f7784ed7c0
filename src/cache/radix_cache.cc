#include "cache/radix_cache.h"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_set>

#include "common/error.h"

namespace mlaserve {
namespace {

// Orders child keys (a page of tokens) and accepts spans, so lookups need no allocation.
struct PageLess {
  using is_transparent = void;
  bool operator()(std::span<const int32_t> a, std::span<const int32_t> b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
};

}  // namespace

struct RadixCache::Node {
  std::vector<int32_t> key;    // the edge's tokens, from parent to this node
  std::vector<int32_t> slots;  // [key.size()] KV slot of each token of key
  Node* parent = nullptr;
  // Keyed by the child's first page (its first token when page_size is 1): children differ there.
  std::map<std::vector<int32_t>, std::unique_ptr<Node>, PageLess> children;
  int64_t lock_ref = 0;      // locked descendants-or-self; > 0 means not evictable
  uint64_t last_access = 0;  // clock_ of the last match/insert through this node
  uint64_t id = 0;

  int64_t length() const { return int64_t(key.size()); }
  std::vector<int32_t> first_page(int64_t page_size) const { return {key.begin(), key.begin() + page_size}; }
};

RadixCache::RadixCache(int64_t page_size) : page_size_(page_size), root_(std::make_unique<Node>()) {
  MLA_CHECK(page_size >= 1, "--page-size must be at least 1, got {}", page_size);
  root_->id = next_id_++;
}

RadixCache::~RadixCache() = default;

RadixCache::Node* RadixCache::find_child(Node* node, std::span<const int32_t> rest) const {
  if (int64_t(rest.size()) < page_size_) return nullptr;
  auto it = node->children.find(rest.first(size_t(page_size_)));
  return it == node->children.end() ? nullptr : it->second.get();
}

// Tokens of child's edge that rest starts with, rounded down to whole pages.
int64_t RadixCache::matching_length(const Node* child, std::span<const int32_t> rest) const {
  int64_t limit = std::min(child->length(), int64_t(rest.size()));
  int64_t n = 0;
  while (n < limit && child->key[size_t(n)] == rest[size_t(n)]) ++n;
  return n / page_size_ * page_size_;
}

// Moves the first `at` tokens of child's edge into a new node between child and its parent and
// returns it. The child keeps its identity, so handles of locked nodes stay valid; the new node
// is on the path of every lock of child, so it takes child's lock count and access time.
RadixCache::Node* RadixCache::split(Node* child, int64_t at) {
  auto prefix = std::make_unique<Node>();
  prefix->key.assign(child->key.begin(), child->key.begin() + at);
  prefix->slots.assign(child->slots.begin(), child->slots.begin() + at);
  prefix->parent = child->parent;
  prefix->lock_ref = child->lock_ref;
  prefix->last_access = child->last_access;
  prefix->id = next_id_++;
  child->key.erase(child->key.begin(), child->key.begin() + at);
  child->slots.erase(child->slots.begin(), child->slots.begin() + at);

  // The parent's entry keeps its key (the shared first page) but now points to the prefix.
  auto& entry = child->parent->children.find(std::span<const int32_t>(prefix->key).first(size_t(page_size_)))->second;
  Node* prefix_raw = prefix.get();
  child->parent = prefix_raw;
  prefix_raw->children.emplace(child->first_page(page_size_), std::move(entry));
  entry = std::move(prefix);
  return prefix_raw;
}

RadixCache::MatchResult RadixCache::match_prefix(std::span<const int32_t> tokens) {
  tokens = tokens.first(tokens.size() / size_t(page_size_) * size_t(page_size_));
  ++clock_;
  MatchResult result;
  Node* node = root_.get();
  size_t pos = 0;
  while (Node* child = find_child(node, tokens.subspan(pos))) {
    int64_t common = matching_length(child, tokens.subspan(pos));
    bool whole_edge = common == child->length();
    if (!whole_edge) child = split(child, common);
    child->last_access = clock_;
    result.slots.insert(result.slots.end(), child->slots.begin(), child->slots.end());
    pos += size_t(common);
    node = child;
    if (!whole_edge) break;
  }
  result.length = int64_t(pos);
  result.node = node;
  return result;
}

int64_t RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) {
  MLA_CHECK(tokens.size() == slots.size(), "radix insert: {} tokens but {} slots", tokens.size(), slots.size());
  size_t aligned = tokens.size() / size_t(page_size_) * size_t(page_size_);
  ++clock_;
  Node* node = root_.get();
  size_t pos = 0;
  while (pos < aligned) {
    std::span<const int32_t> rest = tokens.subspan(pos, aligned - pos);
    Node* child = find_child(node, rest);
    if (child == nullptr) {
      auto leaf = std::make_unique<Node>();
      leaf->key.assign(rest.begin(), rest.end());
      leaf->slots.assign(slots.begin() + pos, slots.begin() + aligned);
      leaf->parent = node;
      leaf->last_access = clock_;
      leaf->id = next_id_++;
      evictable_size_ += leaf->length();
      node->children.emplace(leaf->first_page(page_size_), std::move(leaf));
      return int64_t(pos);
    }
    int64_t common = matching_length(child, rest);
    if (common < child->length()) child = split(child, common);
    child->last_access = clock_;
    pos += size_t(common);
    node = child;
  }
  return int64_t(pos);
}

void RadixCache::lock(Node* node) {
  MLA_CHECK(node != nullptr, "radix lock: null node");
  for (; node != root_.get(); node = node->parent) {
    if (node->lock_ref++ == 0) {
      evictable_size_ -= node->length();
      protected_size_ += node->length();
    }
  }
}

void RadixCache::unlock(Node* node) {
  MLA_CHECK(node != nullptr, "radix unlock: null node");
  // Ancestors count every lock of their descendants, so checking the node checks the path.
  MLA_CHECK(node == root_.get() || node->lock_ref > 0, "radix unlock: node is not locked");
  for (; node != root_.get(); node = node->parent) {
    if (--node->lock_ref == 0) {
      evictable_size_ += node->length();
      protected_size_ -= node->length();
    }
  }
}

int64_t RadixCache::evict(int64_t num_tokens, const FreeSlots& free_slots) {
  // Min-heap of unlocked leaves by (last access, creation order).
  auto later = [](const Node* a, const Node* b) {
    return std::tie(a->last_access, a->id) > std::tie(b->last_access, b->id);
  };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> leaves(later);
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node != root_.get() && node->children.empty() && node->lock_ref == 0) leaves.push(node);
    for (auto& [key, child] : node->children) stack.push_back(child.get());
  }

  int64_t freed = 0;
  while (freed < num_tokens && !leaves.empty()) {
    Node* leaf = leaves.top();
    leaves.pop();
    free_slots(leaf->slots);  // before erasing: if it throws, the leaf is still cached
    freed += leaf->length();
    evictable_size_ -= leaf->length();
    Node* parent = leaf->parent;
    parent->children.erase(parent->children.find(std::span<const int32_t>(leaf->key).first(size_t(page_size_))));
    // A parent's access time is at least its children's, so it joins the heap in LRU order.
    if (parent != root_.get() && parent->children.empty() && parent->lock_ref == 0) leaves.push(parent);
  }
  return freed;
}

int64_t RadixCache::reset(const FreeSlots& free_slots) {
  // Every unlocked node ends up a leaf (locks cover whole paths), so this empties all of them.
  return evict(evictable_size_, free_slots);
}

void RadixCache::check_integrity() const {
  MLA_CHECK(root_->key.empty() && root_->lock_ref == 0 && root_->parent == nullptr, "radix root was modified");
  int64_t evictable = 0, protected_tokens = 0;
  std::unordered_set<int32_t> seen_slots;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    int64_t child_locks = 0;
    for (const auto& [key, child] : node->children) {
      MLA_CHECK(child->parent == node, "radix node {} has a wrong parent link", child->id);
      MLA_CHECK(child->length() > 0 && child->length() % page_size_ == 0,
                "radix node {} holds {} tokens, not whole pages of {}", child->id, child->length(), page_size_);
      MLA_CHECK(child->slots.size() == child->key.size(), "radix node {} has {} tokens but {} slots", child->id,
                child->key.size(), child->slots.size());
      MLA_CHECK(key == child->first_page(page_size_), "radix node {} is keyed by {} but starts with {}", child->id,
                key, child->first_page(page_size_));
      MLA_CHECK(child->lock_ref >= 0, "radix node {} has lock count {}", child->id, child->lock_ref);
      MLA_CHECK(child->last_access <= clock_, "radix node {} was accessed in the future", child->id);
      MLA_CHECK(node == root_.get() || child->last_access <= node->last_access,
                "radix node {} was accessed after its parent {}", child->id, node->id);
      for (int32_t s : child->slots) MLA_CHECK(seen_slots.insert(s).second, "KV slot {} is cached twice", s);
      (child->lock_ref > 0 ? protected_tokens : evictable) += child->length();
      child_locks += child->lock_ref;
      stack.push_back(child.get());
    }
    MLA_CHECK(node == root_.get() || child_locks <= node->lock_ref,
              "radix node {} has lock count {} below its children's {}", node->id, node->lock_ref, child_locks);
  }
  MLA_CHECK(evictable == evictable_size_, "radix evictable size {} but the tree holds {}", evictable_size_, evictable);
  MLA_CHECK(protected_tokens == protected_size_, "radix protected size {} but the tree holds {}", protected_size_,
            protected_tokens);
}

}  // namespace mlaserve
