// Turns the JSON bodies of the OpenAI and native APIs into engine terms, checking every field:
// types, ranges, unknown fields. Violations are ApiError 400s naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "engine/request.h"

namespace mlaserve {

// 400 unless `body` is an object whose every field is in `known`.
void check_known_fields(const nlohmann::json& body, const std::set<std::string>& known);
// body[key] as a bool, `fallback` when absent; anything else (null too) is a 400 naming the field.
bool optional_bool(const nlohmann::json& body, const char* key, bool fallback);

struct ParseLimits {
  int max_n = 16;
  int64_t context_length = 0;
  int64_t vocab_size = 0;
};

// A prompt as the client gave it: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  std::string model;
  std::vector<Prompt> prompts;  // a batch of prompts (OpenAI allows lists)
  GenerationParams params;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> rids;  // one a prompt when the client named them ("rid", as SGLang)
};

struct ChatCompletionRequest {
  std::string model;
  nlohmann::ordered_json messages;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  GenerationParams params;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  // With --reasoning-parser (SGLang's fields): the reasoning apart from the answer, and streamed as
  // it comes (else given at once when it ends).
  bool separate_reasoning = true, stream_reasoning = true;
  std::vector<std::string> rids;  // the one prompt's, when the client named it
  bool tools = false;             // the request offers tools (checked; the route reads them in order)
  std::string tool_choice = "auto";  // auto | none
};

struct GenerateRequest {
  std::vector<Prompt> prompts;
  bool batch = false;  // the client sent a list
  GenerationParams params;
  int n = 1;
  bool stream = false;
  std::vector<std::string> rids;  // one a prompt when the client named them ("rid")
};

CompletionRequest parse_completion_request(const nlohmann::json& body, const ParseLimits& limits);
ChatCompletionRequest parse_chat_request(const nlohmann::json& body, const ParseLimits& limits);
GenerateRequest parse_generate_request(const nlohmann::json& body, const ParseLimits& limits);

// Parses a body, or throws an ApiError 400 that says why it is not JSON.
nlohmann::json parse_json_body(const std::string& body);

}  // namespace mlaserve
