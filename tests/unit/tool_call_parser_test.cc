// ToolCallParser: DeepSeek-V3 / V3.1 tool calls in an answer, whole and in every cut into deltas.
#ifdef MLASERVE_WITH_SERVER
#include "server/tool_call_parser.h"

#include "server/chat_output.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mlaserve {
namespace {

using Parts = ToolCallParser::Parts;

const std::string kBegin = "<｜tool▁calls▁begin｜>", kEnd = "<｜tool▁calls▁end｜>";

std::string v3_call(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
}

Parts parse(const std::vector<std::string>& deltas) {
  ToolCallParser p;
  Parts all;
  auto add = [&](Parts part) {
    all.content += part.content;
    for (auto& c : part.calls) all.calls.push_back(c);
  };
  for (const std::string& d : deltas) add(p.feed(d, false));
  add(p.feed("", true));
  return all;
}

void expect_parse(const std::string& text, const std::string& content, const std::vector<ToolCall>& calls) {
  auto check = [&](const Parts& got, const std::string& where) {
    ASSERT_EQ(got.content, content) << where;
    ASSERT_EQ(got.calls.size(), calls.size()) << where;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, calls[i].name) << where;
      EXPECT_EQ(got.calls[i].arguments, calls[i].arguments) << where;
    }
  };
  check(parse_tool_calls(text), "whole");
  // Every cut into two deltas (a byte at a time through the markers' UTF-8 too).
  for (size_t i = 0; i <= text.size(); ++i) check(parse({text.substr(0, i), text.substr(i)}), std::to_string(i));
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  check(parse(bytes), "byte by byte");
}

TEST(ToolCallParser, V3CallsAfterText) {
  const std::string args = R"({"city": "Paris", "days": 3})";
  expect_parse("Let me look.\n" + kBegin + v3_call("get_weather", args) + kEnd, "Let me look.\n",
               {{"get_weather", args}});
  expect_parse(kBegin + v3_call("a", "{}") + "\n" + v3_call("b", R"({"x": [1, 2]})") + kEnd, "",
               {{"a", "{}"}, {"b", R"({"x": [1, 2]})"}});
}

TEST(ToolCallParser, V31Calls) {
  expect_parse(kBegin + "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"mla\"}<｜tool▁call▁end｜>" + kEnd, "",
               {{"search", "{\"q\": \"mla\"}"}});
}

TEST(ToolCallParser, TextWithoutCallsIsUnchanged) {
  expect_parse("No tools needed: 4.", "No tools needed: 4.", {});
  expect_parse("", "", {});
  expect_parse("a <｜tool▁calls", "a <｜tool▁calls", {});  // a marker cut off by the end is text
}

TEST(ToolCallParser, WhatDoesNotFollowTheFormatStaysText) {
  // An unfinished call (the tokens ran out): the calls before it stand, the rest is text.
  const std::string open = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{\"x\":";
  expect_parse(kBegin + v3_call("a", "{}") + open, open, {{"a", "{}"}});
  expect_parse(kBegin + "plain words", "plain words", {});
  expect_parse(kBegin + v3_call("a", "{}") + kEnd + " done", " done", {{"a", "{}"}});
}

// ChatOutput puts the parsers together: reasoning first, then the calls in what follows it.
TEST(ChatOutput, ReasoningContentAndToolCalls) {
  const std::string text =
      "Need the weather.</think>Checking." + kBegin + v3_call("get_weather", R"({"city": "Oslo"})") + kEnd;
  ChatOutputMode mode{.split_reasoning = true, .starts_in_reasoning = true, .parse_tool_calls = true};
  ChatOutput whole(mode);
  nlohmann::json m = whole.message(text);
  EXPECT_EQ(m["reasoning_content"], "Need the weather.");
  EXPECT_EQ(m["content"], "Checking.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_TRUE(m["tool_calls"][0]["id"].get<std::string>().starts_with("call_"));
  EXPECT_TRUE(whole.called());

  ChatOutput streamed(mode);
  std::string reasoning, content;
  nlohmann::json calls = nlohmann::json::array();
  for (size_t i = 0; i < text.size(); i += 5) {
    nlohmann::json d = streamed.next(text.substr(i, 5), i + 5 >= text.size(), i == 0);
    reasoning += d.value("reasoning_content", "");
    content += d.value("content", "");
    for (auto& c : d.value("tool_calls", nlohmann::json::array())) calls.push_back(c);
  }
  EXPECT_EQ(reasoning, "Need the weather.");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_TRUE(streamed.called());

  ChatOutput plain(ChatOutputMode{});  // no parsers: the text as it is
  EXPECT_EQ(plain.message(text)["content"], text);
  EXPECT_FALSE(plain.message(text).contains("tool_calls"));
  EXPECT_FALSE(plain.called());
}

}  // namespace
}  // namespace mlaserve
#endif
