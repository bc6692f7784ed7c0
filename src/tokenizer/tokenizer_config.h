// tokenizer_config.json: the special tokens by name, whether encoding adds BOS/EOS, and the chat
// templates. Values may be plain strings or {"content": ...} objects; chat_template may be one
// string or a list of named templates, and a chat_template.jinja file beside it takes precedence.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlaserve {

struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // Set when the file has add_bos_token / add_eos_token: transformers then builds the
  // post-processor from them (LlamaTokenizerFast) instead of using tokenizer.json's.
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string tokenizer_class;
  std::map<std::string, std::string> chat_templates;  // name -> source; "default" when unnamed

  // `dir` is the folder holding tokenizer_config.json (optional) and chat_template.jinja.
  static TokenizerConfig from_dir(const std::string& dir);
  static TokenizerConfig from_json(const nlohmann::json& config);

  // The template transformers would pick: "tool_use" when tools are given and it exists, else
  // "default"; nullopt when there is none.
  std::optional<std::string> chat_template(bool with_tools = false) const;
};

}  // namespace mlaserve
