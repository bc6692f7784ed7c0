#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <queue>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/word_cache.h"

namespace mlaserve {

// Open addressing over 64-bit keys (left id << 32 | right id); at most half full.
struct BpeModel::MergeTable {
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;  // never a key: ids are below 2^31

  std::vector<Entry> entries;
  uint64_t mask = 0;

  explicit MergeTable(size_t count) : entries(std::bit_ceil(std::max<size_t>(count * 2, 16))) {
    mask = entries.size() - 1;
  }
  static uint64_t slot_of(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }

  // A later merge of the same pair replaces the earlier one, as HF's map construction does.
  void put(uint64_t key, uint32_t rank, int32_t merged) {
    for (uint64_t i = slot_of(key) & mask;; i = (i + 1) & mask) {
      if (entries[i].key == kEmpty || entries[i].key == key) {
        entries[i] = {key, rank, merged};
        return;
      }
    }
  }
  const Entry* get(uint64_t key) const {
    for (uint64_t i = slot_of(key) & mask;; i = (i + 1) & mask) {
      const Entry& e = entries[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
};

namespace {

// Pieces up to this many bytes merge with a linear scan per step; longer ones use a heap.
constexpr size_t kSmallPiece = 48;
constexpr size_t kCacheWords = 1 << 16;

std::atomic<uint64_t> next_serial{1};

WordCache& thread_cache(uint64_t serial) {
  thread_local std::unordered_map<uint64_t, std::unique_ptr<WordCache>> caches;
  thread_local uint64_t last_serial = 0;
  thread_local WordCache* last = nullptr;
  if (serial != last_serial) {
    auto& slot = caches[serial];
    if (!slot) slot = std::make_unique<WordCache>(kCacheWords);
    last = slot.get();
    last_serial = serial;
  }
  return *last;
}

}  // namespace

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

BpeModel BpeModel::from_json(const nlohmann::json& config) {
  const std::string type = config.value("type", "BPE");
  MLA_CHECK(type == "BPE", "tokenizer.json: model type {:?} is not supported (only BPE)", type);
  auto refuse = [&](const char* key) {
    MLA_CHECK(!config.contains(key) || config[key].is_null() || config[key] == false,
              "tokenizer.json: BPE option {:?} is not supported", key);
  };
  refuse("continuing_subword_prefix");
  refuse("end_of_word_suffix");
  refuse("byte_fallback");
  MLA_CHECK(!config.contains("dropout") || config["dropout"].is_null() || config["dropout"] == 0.0,
            "tokenizer.json: BPE dropout is not supported (encoding must be deterministic)");

  BpeModel m;
  const auto& vocab = config.at("vocab");
  int32_t max_id = -1;
  m.vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    MLA_CHECK(id >= 0 && id < (int64_t(1) << 31), "tokenizer.json: bad id {} for {:?}", id, it.key());
    m.vocab_[it.key()] = int32_t(id);
    max_id = std::max(max_id, int32_t(id));
  }
  m.tokens_.assign(size_t(max_id + 1), std::string());
  m.bytes_.assign(size_t(max_id + 1), std::string());
  m.has_token_.assign(size_t(max_id + 1), false);
  for (const auto& [token, id] : m.vocab_) {
    m.tokens_[id] = token;
    m.has_token_[id] = true;
    auto raw = byte_level::decode(token);
    m.bytes_[id] = raw ? *raw : token;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab_.find(byte_level::encode(std::string(1, char(b))));
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  if (config.contains("unk_token") && config["unk_token"].is_string()) {
    m.unk_id_ = m.token_to_id(config["unk_token"].get<std::string>());
  }
  m.fuse_unk_ = config.value("fuse_unk", false);
  m.ignore_merges_ = config.value("ignore_merges", false);
  if (m.ignore_merges_) {
    // Only byte-level spelled tokens can equal a piece's spelling.
    for (const auto& [token, id] : m.vocab_) {
      if (auto raw = byte_level::decode(token)) m.raw_vocab_[*raw] = id;
    }
  }

  const auto& merges = config.at("merges");
  m.merges_ = std::make_unique<MergeTable>(merges.size());
  uint32_t rank = 0;
  for (const auto& entry : merges) {
    std::string left, right;
    if (entry.is_array()) {
      MLA_CHECK(entry.size() == 2, "tokenizer.json: merge {} is not a pair", rank + 1);
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      const std::string line = entry.get<std::string>();
      if (line.starts_with("#version")) continue;
      const size_t space = line.find(' ');
      MLA_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                "tokenizer.json: merge {} ({:?}) is not two tokens", rank + 1, line);
      left = line.substr(0, space);
      right = line.substr(space + 1);
    }
    const auto a = m.token_to_id(left), b = m.token_to_id(right), ab = m.token_to_id(left + right);
    MLA_CHECK(a && b && ab, "tokenizer.json: merge {} ({:?} + {:?}) uses a token not in the vocabulary",
              rank + 1, left, right);
    m.merges_->put((uint64_t(*a) << 32) | uint32_t(*b), rank, *ab);
    ++rank;
  }
  m.serial_ = next_serial.fetch_add(1);
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

bool BpeModel::lookup_merge(int32_t left, int32_t right, uint32_t& rank, int32_t& merged) const {
  const MergeTable::Entry* e = merges_->get((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
  if (!e) return false;
  rank = e->rank;
  merged = e->merged;
  return true;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1 && byte_ids_[uint8_t(piece[0])] >= 0) {
    ids.push_back(byte_ids_[uint8_t(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto it = raw_vocab_.find(std::string(piece));
    if (it != raw_vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (piece.size() > WordCache::kMaxWordBytes) {
    merge(piece, ids);
    return;
  }
  WordCache& cache = thread_cache(serial_);
  const uint64_t hash = hash_bytes(piece);
  const auto hit = cache.find(piece, hash);
  if (!hit.empty()) {
    ids.insert(ids.end(), hit.begin(), hit.end());
    return;
  }
  const size_t first = ids.size();
  merge(piece, ids);
  cache.insert(piece, hash, std::span<const int32_t>(ids.data() + first, ids.size() - first));
}

void BpeModel::merge(std::string_view piece, std::vector<int32_t>& ids) const {
  // One symbol per byte, as HF's model sees one byte-level character per byte. A byte missing
  // from the vocabulary becomes the unknown token (fused if asked) or is dropped, as in HF.
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  bool previous_unk = false;
  for (unsigned char b : piece) {
    int32_t id = byte_ids_[b];
    if (id < 0) {
      if (!unk_id_) continue;
      if (fuse_unk_ && previous_unk) continue;
      id = *unk_id_;
      previous_unk = true;
    } else {
      previous_unk = false;
    }
    const int32_t index = int32_t(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  if (symbols.size() <= kSmallPiece) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  for (int32_t i = 0; i != -1; i = symbols[i].next) ids.push_back(symbols[i].id);
  if (symbols.capacity() > (1u << 20)) std::vector<Symbol>().swap(symbols);  // after a huge word
}

void BpeModel::merge_small(std::vector<Symbol>& symbols) const {
  // Repeatedly merges the live pair of lowest rank, leftmost on ties: the order HF's heap
  // produces, found by a scan that is cheaper than a heap for short words.
  for (;;) {
    uint32_t best_rank = UINT32_MAX;
    int32_t best = -1, best_merged = 0;
    for (int32_t i = 0; symbols[i].next != -1; i = symbols[i].next) {
      uint32_t rank;
      int32_t merged;
      if (lookup_merge(symbols[i].id, symbols[symbols[i].next].id, rank, merged) &&
          rank < best_rank) {
        best_rank = rank;
        best = i;
        best_merged = merged;
      }
    }
    if (best < 0) return;
    Symbol& left = symbols[best];
    const Symbol right = symbols[left.next];
    left.id = best_merged;
    left.next = right.next;
    if (right.next != -1) symbols[right.next].prev = best;
  }
}

void BpeModel::merge_large(std::vector<Symbol>& symbols) const {
  // The heap holds rank << 32 | position for candidate pairs. An entry is stale when the pair at
  // its position has changed since; the pair's rank identifies it, so stale entries are skipped.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
  std::vector<bool> removed(symbols.size(), false);
  auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    uint32_t rank;
    int32_t merged;
    if (next != -1 && lookup_merge(symbols[pos].id, symbols[next].id, rank, merged)) {
      heap.push((uint64_t(rank) << 32) | uint32_t(pos));
    }
  };
  for (int32_t i = 0; i + 1 < int32_t(symbols.size()); ++i) push(i);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const int32_t pos = int32_t(top & 0xFFFFFFFFu);
    const int32_t next = symbols[pos].next;
    if (removed[pos] || next == -1) continue;
    uint32_t rank;
    int32_t merged;
    if (!lookup_merge(symbols[pos].id, symbols[next].id, rank, merged) || rank != (top >> 32)) {
      continue;
    }
    symbols[pos].id = merged;
    symbols[pos].next = symbols[next].next;
    removed[next] = true;
    if (symbols[next].next != -1) symbols[symbols[next].next].prev = pos;
    if (symbols[pos].prev != -1) push(symbols[pos].prev);
    push(pos);
  }
}

}  // namespace mlaserve
