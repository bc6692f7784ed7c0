// SGLang-style routes: /generate, /tokenize, /detokenize, and the generation health check.
#include <httplib.h>

#include <algorithm>

#include "common/error.h"
#include "server/api_error.h"
#include "server/request_parser.h"
#include "server/sse_stream.h"

namespace mlaserve {

namespace {

using nlohmann::json;

json meta_info(const TextStream& s, const StreamResult* r, const std::string& id, double latency) {
  json finish = nullptr;
  if (r) {
    finish = {{"type", finish_reason_of(r->last)}};
    if (!r->last.matched_stop.empty()) finish["matched"] = r->last.matched_stop;
  }
  return {{"id", id}, {"prompt_tokens", s.prompt_tokens()},
          {"completion_tokens", s.completion_tokens()}, {"cached_tokens", s.cached_tokens()},
          {"finish_reason", finish}, {"e2e_latency", latency}};
}

json output_logprobs(const std::vector<TokenLogprob>& lps) {
  json out = json::array(), tops = json::array();
  for (auto& lp : lps) {
    out.push_back({lp.logprob, lp.token, nullptr});
    json top = json::array();
    for (auto& [id, v] : lp.top) top.push_back({v, id, nullptr});
    tops.push_back(top);
  }
  return {{"output_token_logprobs", out}, {"output_top_logprobs", tops}};
}

}  // namespace

void handle_generate(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  GenerateRequest r = parse_generate_request(parse_json_body(req.body),
                                             {ctx.args.max_n, ctx.context_length, ctx.model.vocab_size});
  auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> prompt_tokens;  // every prompt checked before any is submitted
  for (const Prompt& p : r.prompts) prompt_tokens.push_back(prompt_ids(ctx, p));
  RegisteredRids registered(ctx.rids);
  auto streams = submit_named(ctx, prompt_tokens, r.rids, r.params, r.n, registered);
  if (r.stream) {
    registered.keep();  // the entry outlives this handler with the stream; it expires when that ends
    // SGLang streams the text so far in every event.
    auto text = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<int32_t>>();
    auto chunk = [text, ids, start, rid = r.rids[0]](size_t, const TextStream& stream, const TextDelta& d, bool) {
      *text += d.text;
      ids->insert(ids->end(), d.tokens.begin(), d.tokens.end());
      json finish = nullptr;
      if (d.finished) finish = {{"type", finish_reason_of(d)}};
      return json{{"text", *text},
                  {"output_ids", *ids},
                  {"meta_info",
                   {{"id", rid},
                    {"prompt_tokens", stream.prompt_tokens()},
                    {"cached_tokens", stream.cached_tokens()},
                    {"completion_tokens", ids->size()},
                    {"finish_reason", finish},
                    {"e2e_latency", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}}}};
    };
    stream_sse(ctx, res, std::move(streams), chunk, nullptr);
    return;
  }
  std::vector<StreamResult> results = wait_all(ctx, streams, ClientConnection(req));
  double latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json out = json::array();
  for (size_t i = 0; i < streams.size(); ++i) {
    json meta = meta_info(*streams[i], &results[i], r.rids[i / size_t(r.n)], latency);
    if (r.params.logprobs >= 0) meta.update(output_logprobs(results[i].logprobs));
    out.push_back({{"text", streams[i]->text()}, {"output_ids", streams[i]->tokens()}, {"meta_info", meta}});
  }
  res.set_content(dump(r.batch || r.n > 1 ? out : out[0]), "application/json");
}

// As SGLang: {"rid": "..."} stops that request, {"abort_all": true} every one. A rid that
// is unknown or already finished is no error (the request may have ended meanwhile); "aborted"
// says how many requests were reached. A stopped request answers with finish type "abort".
void handle_abort_request(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  json body = parse_json_body(req.body);
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_known_fields(body, {"rid", "abort_all"});
  const bool all = optional_bool(body, "abort_all", false);
  if (all == body.contains("rid")) throw ApiError(400, "give either 'rid' or \"abort_all\": true", "rid");
  if (!all && !(body["rid"].is_string() && !body["rid"].get<std::string>().empty()))
    throw ApiError(400, "'rid' must be a non-empty string", "rid");
  const size_t n = all ? ctx.rids.abort_all() : ctx.rids.abort(body["rid"].get<std::string>());
  res.set_content(dump({{"aborted", n}}), "application/json");
}

// As SGLang: "prompt" is a string or a list of them (then "tokens" and "count" are lists);
// special tokens (BOS) are added unless add_special_tokens is false.
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  json body = parse_json_body(req.body);
  auto is_strings = [](const json& p) {
    return p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_string(); });
  };
  if (!body.is_object() || !body.contains("prompt") || !(body["prompt"].is_string() || is_strings(body["prompt"])))
    throw ApiError(400, "'prompt' must be a string or a list of strings", "prompt");
  check_known_fields(body, {"prompt", "add_special_tokens", "model"});
  bool special = optional_bool(body, "add_special_tokens", true);
  auto encode = [&](const json& text) {
    try {
      return ctx.tokenizer->encode(text.get<std::string>(), special);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "prompt");
    }
  };
  json out = {{"max_model_len", ctx.context_length}};
  if (body["prompt"].is_string()) {
    std::vector<int32_t> ids = encode(body["prompt"]);
    out["tokens"] = ids;
    out["count"] = ids.size();
  } else {
    out["tokens"] = json::array();
    out["count"] = json::array();
    for (const json& p : body["prompt"]) {
      std::vector<int32_t> ids = encode(p);
      out["tokens"].push_back(ids);
      out["count"].push_back(ids.size());
    }
  }
  res.set_content(dump(out), "application/json");
}

// "tokens" is a list of ids or a list of such lists (then "text" is a list); special tokens are
// skipped unless skip_special_tokens is false.
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  json body = parse_json_body(req.body);
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    throw ApiError(400, "'tokens' must be a list of token ids or a list of such lists", "tokens");
  check_known_fields(body, {"tokens", "skip_special_tokens", "model"});
  bool skip = optional_bool(body, "skip_special_tokens", true);
  auto decode = [&](const json& list) {
    std::vector<int32_t> ids;
    for (auto& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.model.vocab_size)
        throw ApiError(400, "'tokens' must hold token ids of this vocabulary", "tokens");
      ids.push_back(t.get<int32_t>());
    }
    return ctx.tokenizer->decode(ids, skip);
  };
  const json& tokens = body["tokens"];
  bool nested = !tokens.empty() && tokens[0].is_array();
  if (!nested) {
    res.set_content(dump({{"text", decode(tokens)}}), "application/json");
    return;
  }
  json texts = json::array();
  for (const json& list : tokens) {
    if (!list.is_array()) throw ApiError(400, "'tokens' mixes lists and ids", "tokens");
    texts.push_back(decode(list));
  }
  res.set_content(dump({{"text", texts}}), "application/json");
}

bool run_health_generate(ServerContext& ctx) {
  GenerationParams p;
  p.max_new_tokens = 1;
  p.temperature = 0;
  int32_t bos = int32_t(ctx.model.bos_token_id);
  auto streams = submit(ctx, {bos}, p, 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!streams[0]->finished()) {
    if (std::chrono::steady_clock::now() > deadline) {
      streams[0]->cancel();
      return false;
    }
    streams[0]->next(std::chrono::milliseconds(100));
  }
  return streams[0]->completion_tokens() == 1;
}

}  // namespace mlaserve
