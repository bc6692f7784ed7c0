// The BPE model of tokenizer.json for byte-level vocabularies: the vocabulary, the ranked merges,
// and the merge loop that turns one pre-tokenized piece (raw bytes) into ids, with a per-thread
// cache of recent pieces. The merge order is HF's: lowest rank first, leftmost among equals.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlaserve {

class BpeModel {
 public:
  // `config` is the "model" value of tokenizer.json; options that change results and are not
  // implemented (continuing_subword_prefix, end_of_word_suffix, byte_fallback, dropout) throw.
  static BpeModel from_json(const nlohmann::json& config);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one piece of raw bytes (one "word" from the pre-tokenizer).
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  // Vocabulary lookups use the byte-level spelling of tokens, as tokenizer.json writes them.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when the id has no token
  // The bytes a token stands for (its own UTF-8 when it is not byte-level spelled).
  const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
  // Number of entries in the vocabulary (HF's get_vocab_size of the model).
  size_t vocab_size() const { return vocab_.size(); }
  // One past the largest id.
  size_t id_limit() const { return tokens_.size(); }

 private:
  BpeModel() = default;

  struct MergeTable;  // pair of ids -> (rank, merged id), open addressing
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };

  void merge(std::string_view piece, std::vector<int32_t>& ids) const;
  void merge_small(std::vector<Symbol>& symbols) const;
  void merge_large(std::vector<Symbol>& symbols) const;
  bool lookup_merge(int32_t left, int32_t right, uint32_t& rank, int32_t& merged) const;

  std::unordered_map<std::string, int32_t> vocab_;  // byte-level spelling -> id
  std::vector<std::string> tokens_;                 // id -> spelling ("" when unused)
  std::vector<std::string> bytes_;                  // id -> raw bytes
  std::vector<bool> has_token_;
  int32_t byte_ids_[256];                           // initial symbol of each byte; -1: none
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> raw_vocab_;  // raw bytes -> id, for ignore_merges
  std::unique_ptr<MergeTable> merges_;
  uint64_t serial_ = 0;  // names this model's entries in the per-thread cache
};

}  // namespace mlaserve
