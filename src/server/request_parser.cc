#include "server/request_parser.h"

#include <set>

#include "common/error.h"
#include "server/api_error.h"

namespace mlaserve {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

bool has(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

double number(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number");
  double d = v.get<double>();
  if (!(d >= lo && d <= hi)) bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d));
  return d;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, std::string("'") + key + "' must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) bad(key, std::string("'") + key + "' is too large");
  int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, i));
  return i;
}

bool boolean(const json& j, const char* key) {
  if (!j[key].is_boolean()) bad(key, std::string("'") + key + "' must be true or false");
  return j[key].get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const char* key, const ParseLimits& lim) {
  std::vector<int32_t> ids;
  for (const json& t : v) {
    if (!t.is_number_integer()) bad(key, std::string("'") + key + "' must hold token ids (integers)");
    int64_t id = t.get<int64_t>();
    if (id < 0 || id >= lim.vocab_size) bad(key, fmt::format("token id {} is outside the vocabulary ({})", id, lim.vocab_size));
    ids.push_back(int32_t(id));
  }
  return ids;
}

// OpenAI's prompt forms: "text", ["a", "b"], [1, 2, 3], [[1, 2], [3]].
std::vector<Prompt> prompts(const json& v, const char* key, const ParseLimits& lim, bool* batch = nullptr) {
  std::vector<Prompt> out;
  if (batch) *batch = false;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    out.push_back(token_ids(v, key, lim));
  } else if (v.is_array() && !v.empty()) {
    if (batch) *batch = true;
    for (const json& p : v) {
      if (p.is_string()) out.push_back(p.get<std::string>());
      else if (p.is_array() && !p.empty()) out.push_back(token_ids(p, key, lim));
      else bad(key, std::string("'") + key + "' must be a string, a list of strings, or token ids");
    }
  } else {
    bad(key, std::string("'") + key + "' must be a non-empty string, list of strings, or token ids");
  }
  if (out.size() > 64) bad(key, "at most 64 prompts per request");
  return out;
}

std::vector<std::string> stops(const json& v) {
  std::vector<std::string> out;
  if (v.is_string()) out.push_back(v.get<std::string>());
  else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or a list of strings");
  }
  if (out.size() > 16) bad("stop", "at most 16 stop strings");
  for (auto& s : out)
    if (s.empty()) bad("stop", "stop strings must not be empty");
  return out;
}

// SGLang's "rid": a string for one prompt, a list of them (one a prompt) for a batch; none given,
// none returned (the server makes them).
std::vector<std::string> rids(const json& j, size_t prompts, bool batch) {
  std::vector<std::string> out;
  if (!has(j, "rid")) return out;
  const json& rid = j["rid"];
  if (rid.is_string() && !batch) {
    out.push_back(rid.get<std::string>());
  } else if (rid.is_array() && batch && rid.size() == prompts) {
    for (const json& one : rid) {
      if (!one.is_string()) bad("rid", "'rid' must hold strings");
      out.push_back(one.get<std::string>());
    }
  } else {
    bad("rid", "'rid' must be a string for one prompt, or a list of strings, one a prompt, for a batch");
  }
  for (const std::string& one : out)
    if (one.empty()) bad("rid", "a 'rid' must not be empty");
  if (std::set<std::string>(out.begin(), out.end()).size() != out.size()) bad("rid", "the rids of a batch must differ");
  return out;
}

// The sampling fields OpenAI and SGLang share, read from `j` into `p`.
void sampling_fields(const json& j, GenerationParams& p, const ParseLimits& lim) {
  if (has(j, "temperature")) p.temperature = float(number(j, "temperature", 0, 100));
  if (has(j, "top_p")) p.top_p = float(number(j, "top_p", 1e-9, 1));
  if (has(j, "top_k")) {
    p.top_k = int32_t(integer(j, "top_k", -1, 1 << 30));
    if (p.top_k == 0) bad("top_k", "'top_k' must be -1 (off) or positive");
  }
  if (has(j, "min_p")) p.min_p = float(number(j, "min_p", 0, 1));
  if (has(j, "frequency_penalty")) p.frequency_penalty = float(number(j, "frequency_penalty", -2, 2));
  if (has(j, "presence_penalty")) p.presence_penalty = float(number(j, "presence_penalty", -2, 2));
  if (has(j, "repetition_penalty")) p.repetition_penalty = float(number(j, "repetition_penalty", 1e-6, 100));
  if (has(j, "stop")) p.stop = stops(j["stop"]);
  if (has(j, "stop_token_ids")) {
    if (!j["stop_token_ids"].is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    p.stop_token_ids = token_ids(j["stop_token_ids"], "stop_token_ids", lim);
  }
  if (has(j, "ignore_eos")) p.ignore_eos = boolean(j, "ignore_eos");
  if (has(j, "skip_special_tokens")) p.skip_special_tokens = boolean(j, "skip_special_tokens");
  if (has(j, "seed")) p.seed = uint64_t(integer(j, "seed", INT64_MIN, INT64_MAX));
}

int64_t max_tokens(const json& j, const char* key, const ParseLimits& lim) {
  return integer(j, key, 1, std::max<int64_t>(1, lim.context_length));
}

void stream_options(const json& j, bool stream, bool& include_usage) {
  if (!has(j, "stream_options")) return;
  const json& o = j["stream_options"];
  if (!o.is_object()) bad("stream_options", "'stream_options' must be an object");
  if (!stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
  for (auto it = o.begin(); it != o.end(); ++it)
    if (it.key() != "include_usage" && it.key() != "continuous_usage_stats")
      bad("stream_options", "unknown field 'stream_options." + it.key() + "'");
  if (has(o, "include_usage")) include_usage = boolean(o, "include_usage");
}

void reject_unsupported(const json& j, const char* key, const std::string& why) {
  if (has(j, key)) bad(key, std::string("'") + key + "' is not supported: " + why);
}

}  // namespace

bool optional_bool(const json& body, const char* key, bool fallback) {
  return body.contains(key) ? boolean(body, key) : fallback;
}

void check_known_fields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!known.count(it.key())) bad(it.key(), "unknown field '" + it.key() + "'");
}

json parse_json_body(const std::string& body) {
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

CompletionRequest parse_completion_request(const json& j, const ParseLimits& lim) {
  check_known_fields(j, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream",
                         "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty",
                         "repetition_penalty", "seed", "user", "best_of", "logit_bias", "suffix", "ignore_eos",
                         "stop_token_ids", "skip_special_tokens", "rid"});
  CompletionRequest r;
  if (has(j, "model")) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (!has(j, "prompt")) bad("prompt", "'prompt' is required");
  bool batch = false;
  r.prompts = prompts(j["prompt"], "prompt", lim, &batch);
  r.rids = rids(j, r.prompts.size(), batch);
  r.params.max_new_tokens = 16;  // OpenAI's default for completions
  if (has(j, "max_tokens")) r.params.max_new_tokens = int32_t(max_tokens(j, "max_tokens", lim));
  sampling_fields(j, r.params, lim);
  if (has(j, "n")) r.n = int(integer(j, "n", 1, lim.max_n));
  if (has(j, "best_of") && integer(j, "best_of", 1, lim.max_n) != r.n)
    bad("best_of", "'best_of' different from 'n' is not supported");
  if (has(j, "stream")) r.stream = boolean(j, "stream");
  stream_options(j, r.stream, r.include_usage);
  if (has(j, "logprobs")) r.params.logprobs = int32_t(integer(j, "logprobs", 0, 20));
  if (has(j, "echo") && boolean(j, "echo")) bad("echo", "'echo': true is not supported");
  if (has(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    bad("logit_bias", "'logit_bias' is not supported");
  reject_unsupported(j, "suffix", "no fill-in-the-middle");
  if (has(j, "user") && !j["user"].is_string()) bad("user", "'user' must be a string");
  return r;
}

ChatCompletionRequest parse_chat_request(const json& j, const ParseLimits& lim) {
  check_known_fields(j, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                         "min_p", "n", "stream", "stream_options", "logprobs", "top_logprobs", "stop",
                         "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "user",
                         "logit_bias", "tools", "tool_choice", "response_format", "ignore_eos", "stop_token_ids",
                         "skip_special_tokens", "chat_template_kwargs", "parallel_tool_calls", "separate_reasoning",
                         "stream_reasoning", "rid"});
  ChatCompletionRequest r;
  if (has(j, "model")) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (!has(j, "messages") || !j["messages"].is_array() || j["messages"].empty())
    bad("messages", "'messages' must be a non-empty list");
  for (const json& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad("messages", "each message must be an object with a string 'role'");
    std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad("messages", "unknown message role '" + role + "'");
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string()) {
      // Content parts: only text parts can be rendered by a text-only model.
      if (!m["content"].is_array()) bad("messages", "message content must be a string or a list of parts");
      for (const json& part : m["content"])
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad("messages", "only text content parts are supported");
    }
  }
  r.messages = nlohmann::ordered_json::parse(j["messages"].dump());
  // Text parts are joined into one string, as the chat templates of DeepSeek expect.
  for (auto& m : r.messages)
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (auto& part : m["content"]) text += part["text"].get<std::string>();
      m["content"] = text;
    }
  r.params.max_new_tokens = int32_t(std::min<int64_t>(lim.context_length, 4096));
  if (has(j, "max_tokens")) r.params.max_new_tokens = int32_t(max_tokens(j, "max_tokens", lim));
  if (has(j, "max_completion_tokens"))
    r.params.max_new_tokens = int32_t(max_tokens(j, "max_completion_tokens", lim));
  sampling_fields(j, r.params, lim);
  if (has(j, "n")) r.n = int(integer(j, "n", 1, lim.max_n));
  if (has(j, "stream")) r.stream = boolean(j, "stream");
  stream_options(j, r.stream, r.include_usage);
  if (has(j, "logprobs")) r.logprobs = boolean(j, "logprobs");
  if (has(j, "top_logprobs")) {
    if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.params.logprobs = int32_t(integer(j, "top_logprobs", 0, 20));
  } else if (r.logprobs) {
    r.params.logprobs = 0;
  }
  if (has(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    bad("logit_bias", "'logit_bias' is not supported");
  if (has(j, "tools")) {
    const json& tools = j["tools"];
    if (!tools.is_array()) bad("tools", "'tools' must be a list");
    for (const json& t : tools)
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r.tools = !tools.empty();
  }
  if (has(j, "tool_choice")) {
    const json& choice = j["tool_choice"];
    if (choice != "none" && choice != "auto")
      bad("tool_choice", "'tool_choice' must be \"auto\" or \"none\": a forced call needs constrained decoding, "
                         "which this server does not do");
    r.tool_choice = choice.get<std::string>();
  }
  if (has(j, "response_format") && j["response_format"] != json{{"type", "text"}})
    bad("response_format", "only {\"type\": \"text\"} is supported");
  if (has(j, "chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_kwargs = nlohmann::ordered_json::parse(j["chat_template_kwargs"].dump());
  }
  if (has(j, "user") && !j["user"].is_string()) bad("user", "'user' must be a string");
  r.rids = rids(j, 1, false);
  if (has(j, "separate_reasoning")) r.separate_reasoning = boolean(j, "separate_reasoning");
  if (has(j, "stream_reasoning")) r.stream_reasoning = boolean(j, "stream_reasoning");
  return r;
}

GenerateRequest parse_generate_request(const json& j, const ParseLimits& lim) {
  check_known_fields(j, {"text", "input_ids", "sampling_params", "stream", "return_logprob", "top_logprobs_num", "rid"});
  GenerateRequest r;
  if (has(j, "text") == has(j, "input_ids")) bad("text", "give exactly one of 'text' and 'input_ids'");
  const bool text = has(j, "text");
  const char* key = text ? "text" : "input_ids";
  r.prompts = prompts(j[key], key, lim, &r.batch);
  for (const Prompt& p : r.prompts)  // SGLang's two fields each take one kind
    if (std::holds_alternative<std::string>(p) != text)
      bad(key, text ? "'text' must be a string or a list of strings"
                    : "'input_ids' must be token ids or a list of lists of token ids");
  r.params.max_new_tokens = 128;
  if (has(j, "sampling_params")) {
    const json& sp = j["sampling_params"];
    check_known_fields(sp, {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
                            "presence_penalty", "repetition_penalty", "stop", "stop_token_ids", "ignore_eos",
                            "skip_special_tokens", "n", "seed"});
    if (has(sp, "max_new_tokens")) r.params.max_new_tokens = int32_t(max_tokens(sp, "max_new_tokens", lim));
    sampling_fields(sp, r.params, lim);
    if (has(sp, "n")) r.n = int(integer(sp, "n", 1, lim.max_n));
  }
  r.rids = rids(j, r.prompts.size(), r.batch);
  if (has(j, "stream")) r.stream = boolean(j, "stream");
  if (r.stream && (r.batch || r.n > 1)) bad("stream", "streaming takes one prompt with n = 1");
  bool lp = has(j, "return_logprob") && boolean(j, "return_logprob");
  if (lp) r.params.logprobs = has(j, "top_logprobs_num") ? int32_t(integer(j, "top_logprobs_num", 0, 20)) : 0;
  return r;
}

}  // namespace mlaserve
