// ReasoningSplitter: the reasoning / answer split of DeepSeek reasoning models' output, whole and in
// every cut of it into deltas.
#ifdef MLASERVE_WITH_SERVER
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mlaserve {
namespace {

using Parts = ReasoningSplitter::Parts;

Parts split(const std::vector<std::string>& deltas, bool in_reasoning) {
  ReasoningSplitter s(in_reasoning);
  Parts all;
  auto add = [&](const Parts& p) {
    all.reasoning += p.reasoning;
    all.content += p.content;
  };
  for (const std::string& d : deltas) add(s.feed(d, false));
  add(s.feed("", true));
  return all;
}

void expect_split(const std::string& text, bool in_reasoning, const std::string& reasoning,
                  const std::string& content) {
  Parts whole = split({text}, in_reasoning);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  // Every cut into two and three deltas (the tags split anywhere) gives the same parts.
  for (size_t i = 0; i <= text.size(); ++i)
    for (size_t j = i; j <= text.size(); ++j) {
      Parts cut = split({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, in_reasoning);
      ASSERT_EQ(cut.reasoning, reasoning) << text << " cut at " << i << ", " << j;
      ASSERT_EQ(cut.content, content) << text << " cut at " << i << ", " << j;
    }
}

TEST(ReasoningSplitter, OutputOpenedByTheTemplate) {
  expect_split("Let me think.</think>\n\nThe answer is 4.", true, "Let me think.", "The answer is 4.");
  expect_split("<think>\nhmm</think>ok", true, "\nhmm", "ok");
  expect_split("still thinking when the tokens ran out", true, "still thinking when the tokens ran out", "");
  expect_split("a</thi", true, "a</thi", "");                  // a tag cut off by the end is text
  expect_split("a<think>b</think>c", true, "a<think>b", "c");  // only a leading <think> is a tag
  expect_split("x</think>", true, "x", "");
  expect_split("</think>only an answer", true, "", "only an answer");
  expect_split("", true, "", "");
}

TEST(ReasoningSplitter, OutputThatMayOpenItself) {
  expect_split("<think>abc</think> x", false, "abc", "x");
  expect_split("\n <think>abc</think>x", false, "abc", "x");
  expect_split("Hello <think>no</think>", false, "", "Hello <think>no</think>");
  expect_split("  \n", false, "", "  \n");
  expect_split("<thin", false, "", "<thin");
  expect_split("", false, "", "");
}

TEST(ReasoningSplitter, AWholeAnswerLosesTheBlanksAroundItsReasoning) {
  Parts p = split_reasoning("\n  Two and two.\n\n</think>\n\nFour.", true);
  EXPECT_EQ(p.reasoning, "Two and two.");
  EXPECT_EQ(p.content, "Four.");
  EXPECT_EQ(split_reasoning("Four.", false).reasoning, "");
}

TEST(ReasoningSplitter, StreamedReasoningMayComeAtOnce) {
  StreamedReasoning live(true, true), held(true, false);
  EXPECT_EQ(live.next("Two and", false).reasoning, "Two and");
  EXPECT_EQ(held.next("Two and", false).reasoning, "");
  for (StreamedReasoning* s : {&live, &held}) {
    Parts p = s->next(" two.</think>Four", false);
    EXPECT_EQ(p.reasoning, s == &live ? " two." : "Two and two.");
    EXPECT_EQ(p.content, "Four");
    EXPECT_EQ(s->next(".", true).content, ".");
  }
  StreamedReasoning cut_off(true, false);  // the tokens ran out inside the reasoning
  EXPECT_EQ(cut_off.next("Hmm", false).reasoning, "");
  EXPECT_EQ(cut_off.next("", true).reasoning, "Hmm");
}

TEST(ReasoningSplitter, WhereEachParserStarts) {
  EXPECT_TRUE(starts_in_reasoning("deepseek-r1", false));
  EXPECT_FALSE(starts_in_reasoning("deepseek-v3", false));
  EXPECT_TRUE(starts_in_reasoning("deepseek-v3", true));
}

}  // namespace
}  // namespace mlaserve
#endif
