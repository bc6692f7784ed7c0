#include "tokenizer/normalizer.h"

#include "common/error.h"
#include "tokenizer/unicode_supplement.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

// Rust's str::trim_start / trim_end with char::is_whitespace.
std::string_view strip(std::string_view text, bool left, bool right) {
  if (left) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t after = pos;
      if (!is_hf_whitespace(utf8::next(text, after))) break;
      pos = after;
    }
    text.remove_prefix(pos);
  }
  if (right) {
    while (!text.empty()) {
      size_t start = text.size() - 1;
      while (start > 0 && (uint8_t(text[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!is_hf_whitespace(utf8::next(text, pos))) break;
      text = text.substr(0, start);
    }
  }
  return text;
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& config) {
  Normalizer n;
  if (!config.is_null()) n.add_from_json(config);
  return n;
}

void Normalizer::add_from_json(const nlohmann::json& config) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : config.at("normalizers")) add_from_json(child);
  } else if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    const std::string source = pattern.contains("Regex")
                                   ? pattern["Regex"].get<std::string>()
                                   : regex_escape(pattern.at("String").get<std::string>());
    steps_.push_back({Step::Kind::kReplace, std::make_shared<Pcre2Regex>(source),
                      config.at("content").get<std::string>()});
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::kPrepend, nullptr, config.at("prepend").get<std::string>()});
  } else if (type == "Strip") {
    Step step{Step::Kind::kStrip, nullptr, ""};
    step.left = config.value("strip_left", false);
    step.right = config.value("strip_right", false);
    steps_.push_back(step);
  } else {
    fail("tokenizer.json: normalizer {:?} is not supported (supported: Sequence, Replace, "
         "Prepend, Strip)", type);
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string current(text);
  std::vector<ByteSpan> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kReplace: {
        matches.clear();
        step.pattern->find_all(current, matches);
        std::string out;
        size_t previous = 0;
        for (const ByteSpan& m : matches) {
          out.append(current, previous, m.begin - previous);
          out += step.content;
          previous = m.end;
        }
        out.append(current, previous);
        current = std::move(out);
        break;
      }
      case Step::Kind::kPrepend:
        if (!current.empty()) current = step.content + current;
        break;
      case Step::Kind::kStrip:
        current = std::string(strip(current, step.left, step.right));
        break;
    }
  }
  return current;
}

}  // namespace mlaserve
