// /v1/completions and /v1/chat/completions.
#include <httplib.h>

#include <chrono>

#include "common/error.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/sse_stream.h"

namespace mlaserve {

namespace {

using nlohmann::json;

ParseLimits limits(const ServerContext& ctx) {
  return {ctx.args.max_n, ctx.context_length, ctx.model.vocab_size};
}

void check_model(const ServerContext& ctx, const std::string& model) {
  if (!model.empty() && model != ctx.model_name)
    throw ApiError(404, "the model '" + model + "' does not exist; this server serves '" + ctx.model_name + "'",
                   "model", "invalid_request_error", "model_not_found");
}

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_id(const char* prefix, ServerContext& ctx) {
  return fmt::format("{}-{:x}{:08x}", prefix, now_seconds(), uint32_t(ctx.next_request_id.load() * 2654435761u));
}

json completion_logprobs(const ServerContext& ctx, const std::vector<TokenLogprob>& lps, size_t text_offset,
                         bool with_top) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    std::string t = token_text(ctx, lp.token);
    tokens.push_back(t);
    values.push_back(lp.logprob);
    offsets.push_back(text_offset);
    text_offset += t.size();
    json top = json::object();
    for (auto& [id, v] : lp.top) top[token_text(ctx, id)] = v;
    tops.push_back(with_top ? top : json(nullptr));
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json token_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json chat_logprobs(const ServerContext& ctx, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    std::string raw(ctx.tokenizer->token_bytes(lp.token, false));
    json top = json::array();
    for (auto& [id, v] : lp.top) {
      std::string r(ctx.tokenizer->token_bytes(id, false));
      top.push_back({{"token", token_text(ctx, id)}, {"logprob", v}, {"bytes", token_bytes(r)}});
    }
    content.push_back({{"token", token_text(ctx, lp.token)}, {"logprob", lp.logprob}, {"bytes", token_bytes(raw)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

}  // namespace

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  CompletionRequest r = parse_completion_request(parse_json_body(req.body), limits(ctx));
  check_model(ctx, r.model);
  std::vector<std::vector<int32_t>> ids;
  for (const Prompt& p : r.prompts) ids.push_back(prompt_ids(ctx, p));
  if (r.stream && ids.size() > 1) throw ApiError(400, "streaming takes one prompt", "prompt");
  RegisteredRids registered(ctx.rids);
  auto streams = submit_named(ctx, ids, r.rids, r.params, r.n, registered);
  std::string id = new_id("cmpl", ctx);
  int64_t created = now_seconds();
  bool want_logprobs = r.params.logprobs >= 0, with_top = r.params.logprobs > 0;
  if (r.stream) {
    auto offsets = std::make_shared<std::vector<size_t>>(streams.size(), 0);
    auto chunk = [&ctx, id, created, want_logprobs, with_top, offsets](size_t i, const TextStream&, const TextDelta& d, bool) {
      json c = {{"index", i}, {"text", d.text}, {"logprobs", nullptr},
                {"finish_reason", d.finished ? json(finish_reason_of(d)) : json(nullptr)}};
      if (want_logprobs) c["logprobs"] = completion_logprobs(ctx, d.logprobs, (*offsets)[i], with_top);
      (*offsets)[i] += d.text.size();
      return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", ctx.model_name},
                  {"choices", {c}}};
    };
    UsageMaker usage;
    if (r.include_usage)
      usage = [&ctx, id, created, n = r.n](const std::vector<std::unique_ptr<TextStream>>& s) {
        return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", ctx.model_name},
                    {"choices", json::array()}, {"usage", usage_of(s, n)}};
      };
    registered.keep();  // the rids expire with the stream's requests
    stream_sse(ctx, res, std::move(streams), chunk, usage);
    return;
  }
  std::vector<StreamResult> results = wait_all(ctx, streams, ClientConnection(req));
  json choices = json::array();
  for (size_t i = 0; i < streams.size(); ++i)
    choices.push_back({{"index", i}, {"text", streams[i]->text()},
                       {"logprobs", want_logprobs ? completion_logprobs(ctx, results[i].logprobs, 0, with_top) : json(nullptr)},
                       {"finish_reason", finish_reason_of(results[i].last)}});
  res.set_content(dump({{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", ctx.model_name},
                        {"choices", choices}, {"usage", usage_of(streams, r.n)}}),
                  "application/json");
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ChatCompletionRequest r = parse_chat_request(parse_json_body(req.body), limits(ctx));
  check_model(ctx, r.model);
  if (!ctx.chat_template) throw ApiError(400, "this model's tokenizer has no chat template", "messages");
  // Tools reach the template and the answer's calls are parsed only where the server can read them.
  const bool tools = r.tools && r.tool_choice != "none";
  if (tools && ctx.args.tool_call_parser.empty())
    throw ApiError(400, "this server reads no tool calls: start it with --tool-call-parser deepseekv3", "tools");
  if (tools && !ctx.chat_template_takes_tools)
    throw ApiError(400, "this chat template does not render tools: start the server with --chat-template FILE "
                        "whose template does", "tools");
  ChatRequest chat;
  chat.messages = r.messages;
  // The tools as the client wrote them: templates print their schemas (tojson) in that key order.
  if (tools) chat.tools = nlohmann::ordered_json::parse(req.body)["tools"];
  chat.add_generation_prompt = true;
  chat.extra = r.template_kwargs;
  std::string prompt;
  try {
    prompt = ctx.chat_template->render(chat, ctx.tokenizer->config());
  } catch (const Error& e) {
    throw ApiError(400, std::string("the chat template rejected the messages: ") + e.what(), "messages");
  }
  RegisteredRids registered(ctx.rids);
  std::vector<int32_t> ids = prompt_ids(ctx, Prompt(prompt), /*add_special_tokens=*/false);  // BOS is in it
  auto streams = submit_named(ctx, {ids}, r.rids, r.params, r.n, registered);
  std::string id = new_id("chatcmpl", ctx);
  int64_t created = now_seconds();
  bool want_logprobs = r.logprobs;
  const bool thinking = r.template_kwargs.contains("thinking") && r.template_kwargs["thinking"] == true;
  ChatOutputMode mode;
  mode.split_reasoning = !ctx.args.reasoning_parser.empty() && r.separate_reasoning;
  mode.starts_in_reasoning = starts_in_reasoning(ctx.args.reasoning_parser, thinking);
  mode.stream_reasoning = r.stream_reasoning;
  mode.parse_tool_calls = tools;
  if (r.stream) {
    auto outputs = std::make_shared<std::vector<ChatOutput>>(size_t(r.n), ChatOutput(mode));
    auto chunk = [&ctx, id, created, want_logprobs, outputs](size_t i, const TextStream&, const TextDelta& d,
                                                             bool first) {
      ChatOutput& out = (*outputs)[i];
      json delta = out.next(d.text, d.finished, first);
      if (first) delta["role"] = "assistant";
      json finish = nullptr;
      if (d.finished) finish = out.called() && d.finish == FinishReason::Stop ? "tool_calls" : finish_reason_of(d);
      json c = {{"index", i}, {"delta", delta},
                {"logprobs", want_logprobs ? chat_logprobs(ctx, d.logprobs) : json(nullptr)},
                {"finish_reason", finish}};
      return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", ctx.model_name},
                  {"choices", {c}}};
    };
    UsageMaker usage;
    if (r.include_usage)
      usage = [&ctx, id, created, n = r.n](const std::vector<std::unique_ptr<TextStream>>& s) {
        return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created},
                    {"model", ctx.model_name}, {"choices", json::array()}, {"usage", usage_of(s, n)}};
      };
    registered.keep();  // the rids expire with the stream's requests
    stream_sse(ctx, res, std::move(streams), chunk, usage);
    return;
  }
  std::vector<StreamResult> results = wait_all(ctx, streams, ClientConnection(req));
  json choices = json::array();
  for (size_t i = 0; i < streams.size(); ++i) {
    ChatOutput out(mode);
    json message = out.message(streams[i]->text());
    const char* finish = finish_reason_of(results[i].last);
    if (out.called() && results[i].last.finish == FinishReason::Stop) finish = "tool_calls";
    choices.push_back({{"index", i}, {"message", message},
                       {"logprobs", want_logprobs ? chat_logprobs(ctx, results[i].logprobs) : json(nullptr)},
                       {"finish_reason", finish}});
  }
  res.set_content(dump({{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", ctx.model_name},
                        {"choices", choices}, {"usage", usage_of(streams, r.n)}}),
                  "application/json");
}

}  // namespace mlaserve
