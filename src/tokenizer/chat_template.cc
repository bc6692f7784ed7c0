#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace mlaserve {

ChatTemplate::ChatTemplate(std::string_view source)
    : body_(std::make_unique<jinja::Body>(jinja::parse(jinja::tokenize(source)))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  MLA_CHECK(variables.is_object(), "chat template variables must be a JSON object");
  std::vector<std::pair<std::string, jinja::Value>> globals;
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    globals.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  }
  return jinja::Interpreter(std::move(globals)).render(*body_);
}

std::string ChatTemplate::render(const ChatRequest& request, const TokenizerConfig& config) const {
  MLA_CHECK(request.messages.is_array(), "chat messages must be a JSON list");
  // transformers passes its special_tokens_map (only the tokens that are set) as variables.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  if (config.bos_token) variables["bos_token"] = *config.bos_token;
  if (config.eos_token) variables["eos_token"] = *config.eos_token;
  if (config.unk_token) variables["unk_token"] = *config.unk_token;
  if (config.pad_token) variables["pad_token"] = *config.pad_token;
  variables["messages"] = request.messages;
  variables["tools"] = request.tools;
  variables["documents"] = request.documents;
  variables["add_generation_prompt"] = request.add_generation_prompt;
  for (auto it = request.extra.begin(); it != request.extra.end(); ++it) variables[it.key()] = it.value();
  return render(variables);
}

}  // namespace mlaserve
