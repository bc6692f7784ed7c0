// Chat templates against Python jinja2 (configured as transformers configures it): DeepSeek-V3's
// template from tokenizer_config.json, the R1-style fixture template, and one small template per
// Jinja feature, all rendered by tests/tools/make_tokenizer_fixtures.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "test_paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_config.h"

namespace mlaserve {
namespace {

std::string source_dir() { return MLASERVE_SOURCE_DIR; }
std::string tokenizer_dir() { return source_dir() + "/../shared/tokenizers/deepseek-v3"; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const nlohmann::ordered_json& chat_fixture() {
  static const nlohmann::ordered_json fixture =
      nlohmann::ordered_json::parse(read_file(source_dir() + "/tests/fixtures/tokenizer/chat.json"));
  return fixture;
}

void check_conversations(const std::string& template_name, const std::string& source) {
  const TokenizerConfig config = TokenizerConfig::from_dir(tokenizer_dir());
  const ChatTemplate chat_template(source);
  int checked = 0;
  for (const auto& c : chat_fixture().at("conversations")) {
    if (c.at("template") != template_name) continue;
    ++checked;
    ChatRequest request;
    request.messages = c.at("messages");
    request.tools = c.at("tools");
    request.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const std::string name = c.at("name").get<std::string>();
    if (c.contains("error")) {
      EXPECT_THROW(chat_template.render(request, config), Error) << name;
      continue;
    }
    try {
      EXPECT_EQ(chat_template.render(request, config), c.at("expected").get<std::string>()) << name;
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
  }
  EXPECT_GE(checked, 20) << template_name;
}

TEST(ChatTemplate, DeepSeekV3MatchesJinja2) {
  const auto source = TokenizerConfig::from_dir(tokenizer_dir()).chat_template();
  ASSERT_TRUE(source.has_value());
  check_conversations("deepseek-v3", *source);
}

TEST(ChatTemplate, R1StyleWithThinkPrefixMatchesJinja2) {
  const std::string source = read_file(source_dir() + "/tests/fixtures/tokenizer/r1_style.jinja");
  check_conversations("r1-style", source);
  // The generation prompt opens the reasoning block.
  ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "2+2?"}])");
  request.add_generation_prompt = true;
  const std::string prompt = ChatTemplate(source).render(request, TokenizerConfig::from_dir(tokenizer_dir()));
  EXPECT_TRUE(prompt.ends_with("<｜Assistant｜><think>\n")) << prompt;
}

TEST(ChatTemplate, JinjaFeaturesMatchJinja2) {
  int checked = 0;
  for (const auto& c : chat_fixture().at("features")) {
    ++checked;
    const std::string name = c.at("name").get<std::string>();
    try {
      const ChatTemplate chat_template(c.at("source").get<std::string>());
      if (c.contains("error")) {
        EXPECT_THROW(chat_template.render(c.at("variables")), Error) << name;
      } else {
        EXPECT_EQ(chat_template.render(c.at("variables")), c.at("expected").get<std::string>()) << name;
      }
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(ChatTemplate, ErrorsNameTheLineAndTheProblem) {
  auto message_of = [](const std::string& source, const nlohmann::ordered_json& variables) {
    try {
      ChatTemplate(source).render(variables);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto none = nlohmann::ordered_json::object();
  EXPECT_NE(message_of("a\n{% if %}", none).find("line 2"), std::string::npos);
  EXPECT_NE(message_of("{% for x in y %}no end", none).find("expected 'endfor'"), std::string::npos);
  EXPECT_NE(message_of("{{ x", none).find("missing }}"), std::string::npos);
  EXPECT_NE(message_of("{% include 'x' %}", none).find("unsupported tag 'include'"), std::string::npos);
  EXPECT_NE(message_of("{{ raise_exception('Bad roles') }}", none).find("Bad roles"), std::string::npos);
  EXPECT_NE(message_of("{{ x | nosuchfilter }}", none).find("no filter named 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(message_of("{{ a.b }}", none).find("'a' is undefined"), std::string::npos);
}

TEST(ChatTemplate, CommandLineRendersMessagesAndTools) {
  const auto& c = chat_fixture().at("conversations");
  // Find a DeepSeek-V3 case with tools and a generation prompt, and replay it through the CLI.
  for (const auto& item : c) {
    if (item.at("template") != "deepseek-v3" || item.at("tools").is_null() ||
        !item.at("add_generation_prompt").get<bool>() || item.contains("error")) {
      continue;
    }
    const nlohmann::ordered_json input = {{"messages", item.at("messages")}, {"tools", item.at("tools")}};
    testing::TempDir dir("chatcli");
    const std::string in_path = dir.file("input.json");
    std::ofstream(in_path, std::ios::binary) << input.dump();
    testing::CommandResult r =
        testing::run_mlaserve("chat-template --tokenizer " + tokenizer_dir() + " --add-generation-prompt < " + in_path);
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, item.at("expected").get<std::string>());
    return;
  }
  FAIL() << "no DeepSeek-V3 fixture case with tools";
}

}  // namespace
}  // namespace mlaserve
