// Tokenizer against HF `tokenizers` on the real DeepSeek-V3 tokenizer: exact ids for every fixture
// string (tests/fixtures/tokenizer, made by tests/tools/make_tokenizer_fixtures.py), decoding,
// the regex classes, bad input, a 10 MB input and concurrent use.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <map>
#include <unordered_map>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "test_paths.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pcre_regex.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

std::string tokenizer_dir() { return std::string(MLASERVE_SOURCE_DIR) + "/../shared/tokenizers/deepseek-v3"; }
std::string fixture_path(const std::string& name) {
  return std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

const nlohmann::json& fixture(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream in(fixture_path(name));
    EXPECT_TRUE(in) << "missing fixture " << name << "; run tests/tools/make_tokenizer_fixtures.py";
    it = cache.emplace(name, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

// Loading tokenizer.json takes a moment; every test shares one instance, as the server would.
const Tokenizer& deepseek() {
  static const Tokenizer t = Tokenizer::from_dir(tokenizer_dir());
  return t;
}

size_t max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return size_t(usage.ru_maxrss);
}

TEST(Tokenizer, EncodeMatchesHuggingFace) {
  const auto& cases = fixture("encode.json").at("cases");
  ASSERT_GE(cases.size(), 500u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids = deepseek().encode(text, false);
    const auto ids_special = deepseek().encode(text, true);
    const bool ok = ids == c.at("ids").get<std::vector<int32_t>>() &&
                    ids_special == c.at("ids_with_special").get<std::vector<int32_t>>();
    if (!ok && ++failures <= 5) ADD_FAILURE() << "ids differ from HF for " << nlohmann::json(text).dump().substr(0, 200);
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " strings";
}

TEST(Tokenizer, DecodeMatchesHuggingFace) {
  int failures = 0;
  for (const auto& c : fixture("encode.json").at("cases")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_special = c.at("ids_with_special").get<std::vector<int32_t>>();
    if (deepseek().decode(ids) != c.at("decoded").get<std::string>() ||
        deepseek().decode(ids_special, true) != c.at("decoded_skip_special").get<std::string>()) {
      if (++failures <= 5) ADD_FAILURE() << "decode differs for " << c.at("text").dump().substr(0, 200);
    }
  }
  for (const auto& c : fixture("decode.json").at("cases")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    if (deepseek().decode(ids) != c.at("text").get<std::string>() ||
        deepseek().decode(ids, true) != c.at("text_skip_special").get<std::string>()) {
      if (++failures <= 5) ADD_FAILURE() << "decode differs for ids " << c.at("ids").dump();
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Tokenizer, VocabularyAndSpecialTokens) {
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.vocab_size(), 128815u);  // 128000 BPE tokens + 815 added tokens past them
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.token_to_id("Ġthe"), 270);
  EXPECT_EQ(t.id_to_token(128803), "<｜User｜>");
  EXPECT_EQ(t.id_to_token(270), "Ġthe");
  EXPECT_FALSE(t.id_to_token(1 << 20).has_value());
  EXPECT_FALSE(t.token_to_id("no such token").has_value());
  EXPECT_TRUE(t.is_special(0));
  EXPECT_FALSE(t.is_special(128814));  // <｜tool▁sep｜> is an added token but not a special one
  EXPECT_FALSE(t.is_special(270));
  EXPECT_TRUE(t.config().chat_template().has_value());
  // Added tokens are matched before pre-tokenization, even glued to words.
  EXPECT_EQ(t.encode("a<｜User｜>b"), (std::vector<int32_t>{67, 128803, 68}));
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(t.encode("", true), std::vector<int32_t>{0});
}

TEST(Tokenizer, InvalidUtf8IsRejectedWithClearError) {
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"abc\xff", 3},              // never valid
      {"\xe4\xbd", 0},             // truncated CJK character
      {"ok \xed\xa0\x80", 3},      // UTF-16 surrogate
      {"\xc0\xaf", 0},             // overlong '/'
      {"x\xf4\x90\x80\x80", 1},    // past U+10FFFF
      {"emoji \xf0\x9f\x98", 6},   // truncated emoji
  };
  for (const auto& [text, offset] : bad) {
    try {
      deepseek().encode(text);
      ADD_FAILURE() << "accepted invalid UTF-8 at offset " << offset;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("not valid UTF-8"), std::string::npos) << message;
      EXPECT_NE(message.find("offset " + std::to_string(offset)), std::string::npos) << message;
    }
  }
}

TEST(Tokenizer, TenMegabyteInputRoundTripsInBoundedMemory) {
  std::ifstream in(fixture_path("corpus.txt"), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string corpus = buffer.str();
  ASSERT_FALSE(corpus.empty());
  std::string text;
  while (text.size() < (10u << 20)) text += corpus;
  const size_t rss_before = max_rss_kib();
  const auto ids = deepseek().encode(text);
  const size_t growth_mib = (max_rss_kib() - rss_before) / 1024;
  EXPECT_GT(ids.size(), text.size() / 16);
  EXPECT_EQ(deepseek().decode(ids), text);
  // ids (4 bytes each) plus pre-tokenizer pieces (16 bytes each): a small multiple of the input.
  EXPECT_LT(growth_mib, 400u) << "encoding 10 MB grew the peak RSS by " << growth_mib << " MiB";

  // One 1 MB "word" takes the heap merge path; it must round-trip too.
  const std::string word(1u << 20, 'a');
  EXPECT_EQ(deepseek().decode(deepseek().encode(word)), word);
}

TEST(Tokenizer, ConcurrentEncodingGivesTheSameIds) {
  const auto& cases = fixture("encode.json").at("cases");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < cases.size(); i += 1) {
        const auto& c = cases[(i * 7 + size_t(t)) % cases.size()];
        if (deepseek().encode(c.at("text").get<std::string>()) != c.at("ids").get<std::vector<int32_t>>()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// The regex translation must give HF's (Oniguruma's) Unicode classes for every code point.
TEST(Tokenizer, RegexClassesMatchHuggingFaceOnEveryCodePoint) {
  std::string all;
  std::vector<char32_t> code_point_at;  // byte offset -> code point, at character starts
  std::vector<size_t> offsets;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    offsets.push_back(all.size());
    code_point_at.push_back(c);
    utf8::append(all, c);
  }
  std::unordered_map<size_t, size_t> index_of_offset;
  for (size_t i = 0; i < offsets.size(); ++i) index_of_offset[offsets[i]] = i;
  for (const auto& [name, cls] : fixture("unicode_classes.json").at("classes").items()) {
    const Pcre2Regex re("(?:" + cls.at("pattern").get<std::string>() + ")+");
    std::vector<ByteSpan> matches;
    re.find_all(all, matches);
    std::vector<std::pair<char32_t, char32_t>> ours;
    for (const ByteSpan& m : matches) {
      const size_t first = index_of_offset.at(m.begin);
      const size_t last = m.end == all.size() ? offsets.size() - 1 : index_of_offset.at(m.end) - 1;
      // Matches break at the surrogate gap; join ranges that touch.
      if (!ours.empty() && ours.back().second + 1 == code_point_at[first]) {
        ours.back().second = code_point_at[last];
      } else {
        ours.emplace_back(code_point_at[first], code_point_at[last]);
      }
    }
    std::vector<std::pair<char32_t, char32_t>> expected;
    for (const auto& r : cls.at("ranges")) {
      const char32_t a = r[0].get<uint32_t>(), b = r[1].get<uint32_t>();
      if (!expected.empty() && expected.back().second + 1 == a) {
        expected.back().second = b;
      } else {
        expected.emplace_back(a, b);
      }
    }
    EXPECT_EQ(ours, expected) << "class " << name << " (" << cls.at("pattern") << ") differs from HF";
  }
}

// The same patch make_tokenizer_fixtures.py's apply_variant makes to DeepSeek-V3's tokenizer.json.
nlohmann::json apply_variant(nlohmann::json t, const nlohmann::json& patch) {
  for (const auto& [key, value] : patch.items()) {
    if (key == "model.ignore_merges") {
      t["model"]["ignore_merges"] = value;
    } else if (key == "added_tokens.flags") {
      for (auto& token : t["added_tokens"]) {
        const std::string content = token["content"];
        if (value.contains(content)) token.update(value[content]);
      }
    } else if (key == "added_tokens.new") {
      for (const auto& token : value) t["added_tokens"].push_back(token);
    } else {
      t[key] = value;
    }
  }
  return t;
}

// Options DeepSeek-V3's own file does not use: other regexes, prefix spaces, digits, every split
// behaviour, normalizers, added-token flags, TemplateProcessing and ignore_merges.
TEST(Tokenizer, OtherConfigurationsMatchHuggingFace) {
  std::ifstream in(tokenizer_dir() + "/tokenizer.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& variant : fixture("variants.json").at("variants")) {
    const std::string name = variant.at("name");
    const Tokenizer t = Tokenizer::from_json(apply_variant(base, variant.at("patch")), TokenizerConfig{});
    int failures = 0;
    for (const auto& c : variant.at("cases")) {
      const std::string text = c.at("text");
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      const auto with_special = c.contains("ids_with_special") ? c.at("ids_with_special").get<std::vector<int32_t>>() : ids;
      if ((t.encode(text) != ids || t.encode(text, true) != with_special) && ++failures <= 3) {
        ADD_FAILURE() << name << ": ids differ from HF for " << nlohmann::json(text).dump().substr(0, 160);
      }
      ++checked;
    }
    EXPECT_EQ(failures, 0) << name;
  }
  EXPECT_GE(checked, 2000);
}

TEST(Tokenizer, MissingTokenizerIsAClearError) {
  try {
    Tokenizer::from_dir("/nonexistent/tokenizer/dir");
    FAIL() << "loaded a tokenizer from nowhere";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.json in /nonexistent/tokenizer/dir"), std::string::npos);
  }
}

std::string run_cli(const std::string& args, const std::string& input) {
  testing::TempDir dir("tokcli");
  const std::string in_path = dir.file("in.txt");
  std::ofstream(in_path, std::ios::binary) << input;
  testing::CommandResult r = testing::run_mlaserve(args + " < " + in_path);
  EXPECT_EQ(r.status, 0) << args;
  return r.out;
}

TEST(Tokenizer, CommandLineTokenizeAndDetokenize) {
  const auto& cases = fixture("encode.json").at("cases");
  std::string input, expected_ids, id_lines, expected_text;
  for (size_t i = 0; i < cases.size(); i += 37) {
    input += cases[i].at("text").dump() + "\n";
    expected_ids += cases[i].at("ids_with_special").dump() + "\n";
    id_lines += cases[i].at("ids").dump() + "\n";
    expected_text += nlohmann::json(cases[i].at("decoded")).dump() + "\n";
  }
  EXPECT_EQ(run_cli("tokenize --tokenizer " + tokenizer_dir() + " --add-special-tokens", input), expected_ids);
  EXPECT_EQ(run_cli("detokenize --tokenizer " + tokenizer_dir(), id_lines), expected_text);
}

}  // namespace
}  // namespace mlaserve
