#include "tokenizer/bpe_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

constexpr uint8_t kKnown = 1;
constexpr uint8_t kSpecial = 2;

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MLA_CHECK(in, "cannot open {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", path.string(), e.what());
  }
}

// Only byte-level decoding is implemented; anything else would decode to different text.
void check_decoder(const nlohmann::json& decoder) {
  const std::string type = decoder.is_object() ? decoder.value("type", "") : "";
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& child : decoder.at("decoders")) check_decoder(child);
    return;
  }
  fail("tokenizer.json: decoder {:?} is not supported (only ByteLevel)", type);
}

// Drops scratch buffers that one huge input grew, so a 10 MB request does not pin memory.
template <class Vector>
void release_if_large(Vector& v) {
  if (v.capacity() > (1u << 20)) Vector().swap(v);
}

}  // namespace

Tokenizer::Tokenizer(BpeModel model, TokenizerConfig config)
    : model_(std::move(model)), config_(std::move(config)) {}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::filesystem::path folder(dir);
  const auto json_path = folder / "tokenizer.json";
  MLA_CHECK(std::filesystem::exists(json_path), "no tokenizer.json in {}", dir);
  try {
    return from_json(read_json(json_path), TokenizerConfig::from_dir(dir));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", json_path.string(), e.what());
  }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, TokenizerConfig config) {
  Tokenizer t(BpeModel::from_json(tokenizer_json.at("model")), std::move(config));
  t.normalizer_ = Normalizer::from_json(tokenizer_json.value("normalizer", nlohmann::json()));
  t.pre_tokenizer_ = PreTokenizer::from_json(tokenizer_json.value("pre_tokenizer", nlohmann::json()));
  MLA_CHECK(t.pre_tokenizer_.byte_level(),
            "tokenizer.json: only byte-level BPE is supported (no ByteLevel pre-tokenizer found)");
  check_decoder(tokenizer_json.value("decoder", nlohmann::json()));
  t.added_ = AddedVocabulary::from_json(tokenizer_json.value("added_tokens", nlohmann::json::array()),
                                        t.model_, t.normalizer_);

  // Decoding bytes per id: added tokens override model tokens of the same id, and the byte-level
  // decoder applies to both (a token outside the byte alphabet keeps its own UTF-8).
  size_t limit = t.model_.id_limit();
  for (const AddedToken& a : t.added_.tokens()) limit = std::max(limit, size_t(a.id) + 1);
  t.id_bytes_.assign(limit, std::string());
  t.id_flags_.assign(limit, 0);
  for (size_t id = 0; id < t.model_.id_limit(); ++id) {
    if (!t.model_.id_to_token(int32_t(id))) continue;
    t.id_bytes_[id] = t.model_.token_bytes(int32_t(id));
    t.id_flags_[id] = kKnown;
  }
  for (const AddedToken& a : t.added_.tokens()) {
    const auto raw = byte_level::decode(a.match_text);
    t.id_bytes_[a.id] = raw ? *raw : a.match_text;
    t.id_flags_[a.id] = kKnown | (a.special ? kSpecial : 0);
  }

  if (t.config_.bos_token) t.bos_id_ = t.token_to_id(*t.config_.bos_token);
  if (t.config_.eos_token) t.eos_id_ = t.token_to_id(*t.config_.eos_token);
  t.load_post_processor(tokenizer_json.value("post_processor", nlohmann::json()));
  return t;
}

void Tokenizer::load_post_processor(const nlohmann::json& post_processor) {
  if (config_.add_bos_token || config_.add_eos_token) {
    // transformers' LlamaTokenizerFast replaces the file's post-processor with BOS/EOS from these
    // flags, which is what a server built on transformers (SGLang) sends to the model.
    if (config_.add_bos_token.value_or(false)) {
      MLA_CHECK(bos_id_, "tokenizer_config.json: add_bos_token is set but bos_token is unknown");
      prefix_ids_ = {*bos_id_};
    }
    if (config_.add_eos_token.value_or(false)) {
      MLA_CHECK(eos_id_, "tokenizer_config.json: add_eos_token is set but eos_token is unknown");
      suffix_ids_ = {*eos_id_};
    }
    return;
  }
  if (post_processor.is_null()) return;
  const std::string type = post_processor.value("type", "");
  if (type == "ByteLevel") return;  // it only trims offsets
  if (type == "Sequence") {
    for (const auto& child : post_processor.at("processors")) load_post_processor(child);
    return;
  }
  if (type == "TemplateProcessing") {
    const auto& specials = post_processor.at("special_tokens");
    bool after_sequence = false;
    for (const auto& item : post_processor.at("single")) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      for (const auto& id : specials.at(name).at("ids")) {
        (after_sequence ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
      }
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix_ids_.push_back(post_processor.at("cls").at(1).get<int32_t>());
    suffix_ids_.push_back(post_processor.at("sep").at(1).get<int32_t>());
    return;
  }
  fail("tokenizer.json: post-processor {:?} is not supported", type);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  utf8::require_valid(text, "text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());

  thread_local std::vector<TextSegment> raw_segments;
  thread_local std::vector<TextSegment> normalized_segments;
  raw_segments.clear();
  added_.split(text, /*normalized_set=*/false, raw_segments);
  for (const TextSegment& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string_view part = text.substr(raw.begin, raw.end - raw.begin);
    std::string normalized;
    if (!normalizer_.is_identity()) {
      normalized = normalizer_.normalize(part);
      part = normalized;
    }
    normalized_segments.clear();
    added_.split(part, /*normalized_set=*/true, normalized_segments);
    for (const TextSegment& segment : normalized_segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
      } else {
        encode_text(part.substr(segment.begin, segment.end - segment.begin), ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  release_if_large(raw_segments);
  release_if_large(normalized_segments);
  return ids;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  thread_local PieceBuffer buffer;
  buffer.clear();
  pre_tokenizer_.split(text, buffer);
  for (std::string_view piece : buffer.pieces) model_.encode_piece(piece, ids);
  release_if_large(buffer.pieces);
  release_if_large(buffer.next);
  release_if_large(buffer.matches);
  release_if_large(buffer.segments);
  release_if_large(buffer.kept);
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || size_t(id) >= id_flags_.size() || !(id_flags_[id] & kKnown)) return {};
  if (skip_special_tokens && (id_flags_[id] & kSpecial)) return {};
  return id_bytes_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(token_bytes(id, skip_special_tokens));
  return utf8::decode_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_.by_id(id)) return a->match_text;
  if (const std::string* t = model_.id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < id_flags_.size() && (id_flags_[id] & kSpecial);
}

}  // namespace mlaserve
