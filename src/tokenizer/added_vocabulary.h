// Added tokens ("added_tokens" of tokenizer.json): strings matched in the text before any
// pre-tokenization and encoded as one id each. Matching is leftmost-longest over all tokens, as
// HF's Aho-Corasick does, and honours single_word / lstrip / rstrip. Tokens with normalized=false
// are matched on the raw text first, the others on the normalized remainder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"

namespace mlaserve {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  // What the text is matched against and what decode() gives back: the content, normalized
  // when `normalized` is set (HF's normalized_cache).
  std::string match_text;
};

// A run of text that is either one added token (id >= 0) or plain text to encode (id == -1).
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // `tokens` is the "added_tokens" array; ids are assigned the way HF does (a content already in
  // the model vocabulary keeps that id), and a disagreement with the file's "id" is an error.
  static AddedVocabulary from_json(const nlohmann::json& tokens, const BpeModel& model,
                                   const Normalizer& normalizer);

  // Splits `text` by the tokens with normalized == `normalized_set`; appends the segments.
  void split(std::string_view text, bool normalized_set, std::vector<TextSegment>& out) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // Added tokens whose id is not a model id (what HF adds to the model's vocabulary size).
  size_t num_beyond_model() const { return num_beyond_model_; }

 private:
  // A byte trie over token contents; each set (normalized or not) has its own.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token = -1;  // index into tokens_ ending here
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view key, int32_t token);
    // Longest token starting at text[pos]: its index and length, or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  };

  bool single_word_ok(std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, int32_t> index_of_content_;
  std::unordered_map<int32_t, int32_t> index_of_id_;
  Trie raw_trie_;
  Trie normalized_trie_;
  size_t num_beyond_model_ = 0;
};

}  // namespace mlaserve
