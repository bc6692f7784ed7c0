// ChatTemplate: a HF chat template (Jinja) parsed once and rendered per request, giving the prompt
// text that transformers' apply_chat_template(..., tokenize=False) gives: the same variables
// (messages, tools, documents, add_generation_prompt and the special tokens by name) in the same
// environment (trim_blocks, lstrip_blocks, loop controls, json.dumps-style tojson).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_config.h"

namespace mlaserve {

namespace jinja {
struct Stmt;
}

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null when the request has none (templates see None)
  nlohmann::ordered_json documents;  // null when none
  bool add_generation_prompt = false;
  // Extra template variables (chat_template_kwargs such as enable_thinking); override the rest.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Throws mlaserve::Error ("chat template line N: ...") when the source does not parse.
  explicit ChatTemplate(std::string_view source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The prompt for `request`, with bos_token/eos_token/... taken from `config`. Thread-safe.
  std::string render(const ChatRequest& request, const TokenizerConfig& config) const;
  // Renders with exactly these variables (a JSON object).
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::unique_ptr<std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

}  // namespace mlaserve
