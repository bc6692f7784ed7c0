#include "tokenizer/added_vocabulary.h"

#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "tokenizer/pcre_regex.h"
#include "tokenizer/unicode_supplement.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

// Start of the code point that ends at text[end - 1].
size_t previous_char_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (uint8_t(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

// Where the run of white space that ends `text` begins (text.size() when there is none).
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = previous_char_start(text, end);
    size_t pos = start;
    if (!is_hf_whitespace(utf8::next(text, pos))) break;
    end = start;
  }
  return end;
}

size_t leading_space_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t after = pos;
    if (!is_hf_whitespace(utf8::next(text, after))) break;
    pos = after;
  }
  return pos;
}

// HF decides single_word with Rust regex's \w: Alphabetic, marks, decimal digits, connector
// punctuation and the joiners.
const Pcre2Regex& word_char() {
  static const Pcre2Regex re(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
  return re;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (unsigned char b : key) {
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == b) child = index;
    }
    if (child < 0) {
      child = int32_t(nodes.size());
      nodes[node].children.push_back({b, child});
      nodes.emplace_back();
    }
    node = child;
  }
  nodes[node].token = token;
  first_byte[uint8_t(key[0])] = true;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0, found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == uint8_t(text[i])) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes[node].token >= 0) {
      found = nodes[node].token;
      length = i + 1 - pos;
    }
  }
  return found;
}

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& tokens, const BpeModel& model,
                                           const Normalizer& normalizer) {
  AddedVocabulary v;
  // HF hands out ids past the model's vocabulary (its entry count) to contents the model lacks.
  int32_t next_id = int32_t(model.vocab_size());
  for (const auto& entry : tokens) {
    AddedToken t;
    t.content = entry.at("content").get<std::string>();
    t.special = entry.value("special", false);
    t.single_word = entry.value("single_word", false);
    t.lstrip = entry.value("lstrip", false);
    t.rstrip = entry.value("rstrip", false);
    t.normalized = entry.value("normalized", !t.special);
    if (t.content.empty()) continue;
    utf8::require_valid(t.content, "added token");

    std::optional<int32_t> id = v.id_of(t.content);
    if (!id) id = model.token_to_id(t.content);
    if (!id) id = next_id++;
    t.id = *id;
    const int32_t file_id = entry.value("id", t.id);
    if (file_id != t.id) {
      spdlog::warn("tokenizer.json: added token {:?} has id {} in the file but {} by HF's rules; "
                   "using {}", t.content, file_id, t.id, t.id);
    }
    // A later entry for the same content or id replaces the earlier one, as in HF's maps.
    if (const auto it = v.index_of_id_.find(t.id); it != v.index_of_id_.end()) {
      v.tokens_[it->second] = t;
    } else {
      v.index_of_id_[t.id] = int32_t(v.tokens_.size());
      v.tokens_.push_back(t);
    }
    v.index_of_content_[t.content] = v.index_of_id_[t.id];
  }

  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    AddedToken& t = v.tokens_[i];
    t.match_text = t.normalized && !normalizer.is_identity() ? normalizer.normalize(t.content)
                                                              : t.content;
    if (!model.id_to_token(t.id)) ++v.num_beyond_model_;
    if (v.index_of_content_[t.content] != int32_t(i)) continue;  // content re-assigned later
    if (!t.match_text.empty()) {
      (t.normalized ? v.normalized_trie_ : v.raw_trie_).insert(t.match_text, int32_t(i));
    }
  }
  return v;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  const auto it = index_of_id_.find(id);
  return it == index_of_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  const auto it = index_of_content_.find(std::string(content));
  if (it == index_of_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

bool AddedVocabulary::single_word_ok(std::string_view text, size_t begin, size_t end) const {
  auto is_word = [&](size_t char_begin) {
    size_t pos = char_begin;
    utf8::next(text, pos);
    return word_char().full_match(text.substr(char_begin, pos - char_begin));
  };
  const bool space_before = begin == 0 || !is_word(previous_char_start(text, begin));
  const bool space_after = end == text.size() || !is_word(end);
  return space_before && space_after;
}

void AddedVocabulary::split(std::string_view text, bool normalized_set,
                            std::vector<TextSegment>& out) const {
  const Trie& trie = normalized_set ? normalized_trie_ : raw_trie_;
  if (trie.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t emitted = 0;  // everything before this is in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    // Jump to the next byte that can begin a token.
    while (pos < text.size() && !trie.first_byte[uint8_t(text[pos])]) ++pos;
    if (pos >= text.size()) break;
    size_t length = 0;
    const int32_t index = trie.longest_at(text, pos, length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos, end = pos + length;
    pos = end;
    if (token.single_word && !single_word_ok(text, begin, end)) continue;
    if (token.lstrip) begin = std::max(trailing_space_start(text.substr(0, begin)), emitted);
    if (token.rstrip) end += leading_space_length(text.substr(end));
    begin = std::max(begin, emitted);
    if (emitted < begin) out.push_back({emitted, begin, -1});
    out.push_back({begin, end, token.id});
    emitted = end;
    // Resume after any stripped space too: HF resumes inside it and could emit overlapping
    // pieces, which no tokenizer relies on.
    pos = std::max(pos, end);
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace mlaserve
