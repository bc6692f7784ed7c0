// The normalizer of tokenizer.json, applied to text outside non-normalized added tokens before
// pre-tokenization. Supported: Sequence, Replace, Prepend, Strip. Unicode normal forms and case
// mapping are refused with an error rather than approximated, since a near miss changes ids.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/pcre_regex.h"

namespace mlaserve {

class Normalizer {
 public:
  // `config` is the "normalizer" value of tokenizer.json (null: none).
  static Normalizer from_json(const nlohmann::json& config);

  // True when normalize() returns its input unchanged (DeepSeek: an empty Sequence).
  bool is_identity() const { return steps_.empty(); }
  std::string normalize(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kReplace, kPrepend, kStrip } kind;
    std::shared_ptr<const Pcre2Regex> pattern;  // kReplace
    std::string content;                        // kReplace: replacement; kPrepend: prefix
    bool left = false, right = false;           // kStrip
  };

  void add_from_json(const nlohmann::json& config);

  std::vector<Step> steps_;
};

}  // namespace mlaserve
