// Streaming detokenization: every piece is valid UTF-8, and the pieces joined equal the full decode
// (which tokenizer_test checks against HF), including characters split over byte tokens and
// invalid byte sequences.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

const Tokenizer& deepseek() {
  static const Tokenizer t =
      Tokenizer::from_dir(std::string(MLASERVE_SOURCE_DIR) + "/../shared/tokenizers/deepseek-v3");
  return t;
}

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name);
  EXPECT_TRUE(in) << "missing fixture " << name;
  return nlohmann::json::parse(in);
}

// Streams `ids` in chunks of the given sizes (cycled); checks each piece; returns the joined text.
std::string stream(const std::vector<int32_t>& ids, bool skip_special, const std::vector<size_t>& chunks) {
  IncrementalDetokenizer detok(deepseek(), skip_special);
  std::string joined;
  size_t pos = 0;
  for (size_t c = 0; pos < ids.size(); ++c) {
    const size_t n = std::min(chunks[c % chunks.size()], ids.size() - pos);
    const std::string piece = detok.push(std::span<const int32_t>(ids.data() + pos, n));
    pos += n;
    EXPECT_TRUE(utf8::is_valid(piece));
    EXPECT_LE(detok.num_pending_bytes(), 3u);
    joined += piece;
  }
  const std::string tail = detok.finish();
  EXPECT_TRUE(utf8::is_valid(tail));
  return joined + tail;
}

int32_t byte_token(unsigned char b) {
  std::string spelled;
  utf8::append(spelled, byte_level::char_of(b));
  return *deepseek().token_to_id(spelled);
}

TEST(Detokenizer, PiecesJoinToTheFullDecodeForEveryFixture) {
  int failures = 0;
  for (const auto& c : load_fixture("encode.json").at("cases")) {
    for (const char* key : {"ids", "ids_with_special"}) {
      const auto ids = c.at(key).get<std::vector<int32_t>>();
      for (bool skip : {false, true}) {
        if (stream(ids, skip, {1}) != deepseek().decode(ids, skip) && ++failures <= 5) {
          ADD_FAILURE() << "stream differs from decode for " << c.at("text").dump().substr(0, 120);
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Detokenizer, SplitAndInvalidBytesMatchHuggingFace) {
  std::mt19937 rng(7);
  for (const auto& c : load_fixture("decode.json").at("cases")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<size_t> chunks = {size_t(rng() % 3 + 1), size_t(rng() % 5 + 1)};
    EXPECT_EQ(stream(ids, false, {1}), c.at("text").get<std::string>()) << c.at("ids").dump();
    EXPECT_EQ(stream(ids, true, chunks), c.at("text_skip_special").get<std::string>()) << c.at("ids").dump();
  }
}

TEST(Detokenizer, HoldsAnEmojiUntilItsLastByte) {
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600 as four byte tokens
  IncrementalDetokenizer detok(deepseek(), false);
  EXPECT_EQ(detok.push(byte_token('a')), "a");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(detok.push(byte_token(uint8_t(emoji[i]))), "");
    EXPECT_EQ(detok.num_pending_bytes(), size_t(i + 1));
  }
  EXPECT_EQ(detok.push(byte_token(uint8_t(emoji[3]))), emoji);
  EXPECT_EQ(detok.num_pending_bytes(), 0u);
  EXPECT_EQ(detok.finish(), "");
}

TEST(Detokenizer, CjkAcrossTokensAndSpecialTokens) {
  // "中" is E4 B8 AD; put a special token after its first two bytes: the broken character becomes
  // one U+FFFD right before the special token, exactly as decode() gives.
  const std::vector<int32_t> ids = {byte_token(0xE4), byte_token(0xB8), 0, byte_token(0xE4),
                                    byte_token(0xB8), byte_token(0xAD)};
  EXPECT_EQ(stream(ids, false, {1}), "\xEF\xBF\xBD<｜begin▁of▁sentence｜>中");
  EXPECT_EQ(stream(ids, false, {1}), deepseek().decode(ids));
  // Skipping the special token joins the bytes around it, as HF's decode does.
  EXPECT_EQ(stream(ids, true, {1}), deepseek().decode(ids, true));
}

TEST(Detokenizer, TruncatedCharacterAtTheEndBecomesOneReplacement) {
  IncrementalDetokenizer detok(deepseek(), false);
  EXPECT_EQ(detok.push(byte_token('x')), "x");
  EXPECT_EQ(detok.push(byte_token(0xF0)), "");
  EXPECT_EQ(detok.push(byte_token(0x9F)), "");
  EXPECT_EQ(detok.finish(), "\xEF\xBF\xBD");
}

TEST(Detokenizer, Utf8Helpers) {
  EXPECT_EQ(utf8::decode_lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // Maximal subparts: E0 80 is two errors, F0 9F 98 then 'x' is one.
  EXPECT_EQ(utf8::decode_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::decode_lossy("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(utf8::incomplete_tail("ab\xE4\xB8"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xE0\x80"), 0u);  // already invalid: nothing to wait for
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\x80\x80"), 0u);
}

}  // namespace
}  // namespace mlaserve
