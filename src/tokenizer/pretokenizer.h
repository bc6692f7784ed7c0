// The pre-tokenizer of tokenizer.json: cuts a text into the pieces ("words") that BPE encodes one
// at a time. Supported: Sequence, Split (String or Regex pattern, every split behavior, invert),
// ByteLevel (prefix space, GPT-2 regex) and Digits. The byte-to-character mapping of ByteLevel is
// not done here: the BPE model starts from raw bytes, which is the same thing.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/pcre_regex.h"

namespace mlaserve {

// Scratch space for one split: reused between calls so the hot path does not allocate.
// A match of a split pattern or the text between two matches, as offsets into one piece.
struct PieceSegment {
  size_t begin;
  size_t end;
  bool is_match;
};

struct PieceBuffer {
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> next;
  std::vector<ByteSpan> matches;
  std::vector<PieceSegment> segments;
  std::vector<PieceSegment> kept;
  std::deque<std::string> owned;  // text the pre-tokenizer made (a prepended space)

  void clear() {
    pieces.clear();
    owned.clear();
  }
};

class PreTokenizer {
 public:
  // What each Split does with the pieces that matched (HF's SplitDelimiterBehavior).
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

  // `config` is the "pre_tokenizer" value of tokenizer.json (null: the whole text is one piece).
  static PreTokenizer from_json(const nlohmann::json& config);

  // Appends the pieces of `text` to buffer.pieces; they point into `text` or into buffer.owned.
  void split(std::string_view text, PieceBuffer& buffer) const;

  // Whether a ByteLevel step is present, i.e. the model sees bytes rather than characters.
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    enum class Kind { kSplit, kPrefixSpace } kind;
    std::shared_ptr<const Pcre2Regex> regex;  // kSplit
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
  };

  void add_from_json(const nlohmann::json& config);
  void apply(const Step& step, std::string_view piece, PieceBuffer& buffer) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace mlaserve
