// Tokenizer: a HuggingFace tokenizer.json (byte-level BPE) plus tokenizer_config.json, giving the
// ids HF `tokenizers` gives. encode() runs HF's pipeline: added tokens are cut out first, the rest
// is normalized, pre-tokenized into pieces and each piece BPE-merged; then BOS/EOS are added the
// way transformers does when asked. Immutable after loading, so one instance serves all threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace mlaserve {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json and chat_template.jinja.
  static Tokenizer from_dir(const std::string& dir);
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, TokenizerConfig config);

  // Text must be valid UTF-8 (an mlaserve::Error says where it is not): HF's Python API only
  // takes str, which cannot hold invalid UTF-8, so there is no HF behaviour to follow for it.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

  // HF's decode: unknown ids are dropped, special added tokens too when skip_special_tokens, and
  // bytes that are not valid UTF-8 become U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes one token contributes to a decode (empty for unknown or skipped ids). They may
  // be part of a character; IncrementalDetokenizer reassembles them.
  std::string_view token_bytes(int32_t id, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const TokenizerConfig& config() const { return config_; }
  // Model vocabulary plus added tokens beyond it (HF's get_vocab_size(with_added_tokens=True)).
  size_t vocab_size() const { return model_.vocab_size() + added_.num_beyond_model(); }

 private:
  Tokenizer(BpeModel model, TokenizerConfig config);

  void load_post_processor(const nlohmann::json& post_processor);
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;

  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  AddedVocabulary added_;
  TokenizerConfig config_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  std::vector<int32_t> prefix_ids_;  // what add_special_tokens puts before the text
  std::vector<int32_t> suffix_ids_;  // ... and after it
  std::vector<std::string> id_bytes_;  // id -> decoded bytes (model and added tokens)
  std::vector<uint8_t> id_flags_;      // id -> kKnown | kSpecial
};

}  // namespace mlaserve
