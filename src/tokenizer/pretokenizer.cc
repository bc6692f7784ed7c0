#include "tokenizer/pretokenizer.h"

#include <algorithm>

#include "common/error.h"

namespace mlaserve {
namespace {

// GPT-2's word regex, which ByteLevel applies when "use_regex" is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

PreTokenizer::Behavior parse_behavior(const std::string& name) {
  using B = PreTokenizer::Behavior;
  if (name == "Removed") return B::kRemoved;
  if (name == "Isolated") return B::kIsolated;
  if (name == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (name == "MergedWithNext") return B::kMergedWithNext;
  if (name == "Contiguous") return B::kContiguous;
  fail("tokenizer.json: unknown Split behavior {:?}", name);
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer p;
  if (!config.is_null()) p.add_from_json(config);
  return p;
}

void PreTokenizer::add_from_json(const nlohmann::json& config) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : config.at("pretokenizers")) add_from_json(child);
  } else if (type == "Split") {
    const auto& pattern = config.at("pattern");
    std::string source;
    if (pattern.contains("Regex")) {
      source = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String")) {
      source = regex_escape(pattern["String"].get<std::string>());
    } else {
      fail("tokenizer.json: Split pattern must be a String or a Regex");
    }
    steps_.push_back({Step::Kind::kSplit, std::make_shared<Pcre2Regex>(source),
                      parse_behavior(config.at("behavior").get<std::string>()),
                      config.value("invert", false)});
  } else if (type == "ByteLevel") {
    if (config.value("add_prefix_space", false)) steps_.push_back({Step::Kind::kPrefixSpace, nullptr});
    if (config.value("use_regex", true)) {
      steps_.push_back({Step::Kind::kSplit, std::make_shared<Pcre2Regex>(kGpt2Pattern),
                        Behavior::kIsolated, false});
    }
    byte_level_ = true;
  } else if (type == "Digits") {
    // Rust's char::is_numeric is the Unicode N category, one character at a time.
    steps_.push_back({Step::Kind::kSplit, std::make_shared<Pcre2Regex>(R"(\p{N})"),
                      config.value("individual_digits", false) ? Behavior::kIsolated
                                                               : Behavior::kContiguous,
                      false});
  } else {
    fail("tokenizer.json: pre-tokenizer {:?} is not supported (supported: Sequence, Split, "
         "ByteLevel, Digits)", type);
  }
}

void PreTokenizer::split(std::string_view text, PieceBuffer& buffer) const {
  const size_t first = buffer.pieces.size();
  if (!text.empty()) buffer.pieces.push_back(text);
  for (const Step& step : steps_) {
    buffer.next.clear();
    for (size_t i = first; i < buffer.pieces.size(); ++i) apply(step, buffer.pieces[i], buffer);
    buffer.pieces.resize(first);
    buffer.pieces.insert(buffer.pieces.end(), buffer.next.begin(), buffer.next.end());
  }
}

void PreTokenizer::apply(const Step& step, std::string_view piece, PieceBuffer& buffer) const {
  if (step.kind == Step::Kind::kPrefixSpace) {
    if (piece.front() == ' ') {
      buffer.next.push_back(piece);
    } else {
      buffer.owned.push_back(" " + std::string(piece));
      buffer.next.push_back(buffer.owned.back());
    }
    return;
  }

  buffer.matches.clear();
  step.regex->find_all(piece, buffer.matches);
  if (buffer.matches.empty() && !step.invert && step.behavior != Behavior::kContiguous) {
    buffer.next.push_back(piece);  // the common case: nothing to cut
    return;
  }

  // Matches and the gaps between them, as HF's Pattern::find_matches lists them.
  std::vector<PieceSegment>& segments = buffer.segments;
  segments.clear();
  size_t previous = 0;
  for (const ByteSpan& m : buffer.matches) {
    if (previous != m.begin) segments.push_back({previous, m.begin, false});
    segments.push_back({m.begin, m.end, true});
    previous = m.end;
  }
  if (previous != piece.size()) segments.push_back({previous, piece.size(), false});
  if (step.invert) {
    for (PieceSegment& s : segments) s.is_match = !s.is_match;
  }

  // Folds each segment into the output list the way the behavior says.
  std::vector<PieceSegment>& kept = buffer.kept;
  kept.clear();
  switch (step.behavior) {
    case Behavior::kIsolated:
      break;  // every segment stays as it is
    case Behavior::kRemoved:
      for (const PieceSegment& s : segments) {
        if (!s.is_match) kept.push_back(s);
      }
      break;
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const PieceSegment& s : segments) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const PieceSegment& s : segments) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = segments.size(); i-- > 0;) {
        const PieceSegment& s = segments[i];
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().begin = s.begin;
        } else {
          kept.push_back(s);
        }
        previous_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const PieceSegment& s : step.behavior == Behavior::kIsolated ? segments : kept) {
    if (s.end > s.begin) buffer.next.push_back(piece.substr(s.begin, s.end - s.begin));
  }
}

}  // namespace mlaserve
