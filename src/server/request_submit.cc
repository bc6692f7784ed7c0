#include "server/request_submit.h"

#include "common/error.h"
#include "server/api_error.h"

namespace mlaserve {

std::vector<int32_t> prompt_ids(ServerContext& ctx, const Prompt& prompt, bool add_special_tokens) {
  std::vector<int32_t> ids;
  if (auto* text = std::get_if<std::string>(&prompt)) {
    try {
      ids = ctx.tokenizer->encode(*text, add_special_tokens);
    } catch (const Error& e) {
      throw ApiError(400, std::string("the prompt cannot be tokenized: ") + e.what(), "prompt");
    }
  } else {
    ids = std::get<std::vector<int32_t>>(prompt);
  }
  if (ids.empty()) throw ApiError(400, "the prompt is empty", "prompt");
  if (int64_t(ids.size()) >= ctx.context_length)
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens; this model's context holds {} (prompt and output)",
                               ids.size(), ctx.context_length),
                   "prompt", "invalid_request_error", "context_length_exceeded");
  return ids;
}

std::vector<std::unique_ptr<TextStream>> submit(ServerContext& ctx, const std::vector<int32_t>& ids,
                                                const GenerationParams& params, int n) {
  std::vector<std::unique_ptr<TextStream>> streams;
  for (int i = 0; i < n; ++i) {
    auto r = std::make_shared<Request>();
    r->id = ctx.next_request_id++;
    r->input_ids = ids;
    r->params = params;
    r->params.max_new_tokens =
        int32_t(std::min<int64_t>(params.max_new_tokens, ctx.context_length - int64_t(ids.size())));
    if (params.seed) r->params.seed = *params.seed + uint64_t(i);
    streams.push_back(std::make_unique<TextStream>(r, *ctx.tokenizer));
    ctx.scheduler->submit(r);
  }
  return streams;
}

std::vector<std::unique_ptr<TextStream>> submit_named(ServerContext& ctx,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      std::vector<std::string>& rids, const GenerationParams& params,
                                                      int n, RegisteredRids& registered) {
  if (rids.empty())
    for (size_t i = 0; i < prompts.size(); ++i) rids.push_back(new_rid());
  std::vector<std::unique_ptr<TextStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (auto& s : submit(ctx, prompts[i], params, n)) {
      channels.push_back(s->channel());
      streams.push_back(std::move(s));
    }
    if (!registered.add(rids[i], channels)) {
      for (auto& s : streams) s->cancel();
      throw ApiError(400, fmt::format("the rid '{}' is already in flight", rids[i]), "rid");
    }
  }
  return streams;
}

std::vector<StreamResult> wait_all(ServerContext& ctx, std::vector<std::unique_ptr<TextStream>>& streams,
                                   const ClientConnection& client) {
  auto start = std::chrono::steady_clock::now(), checked = start;
  std::vector<StreamResult> results(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    TextStream& s = *streams[i];
    while (!s.finished()) {
      auto d = s.next(std::chrono::milliseconds(200));
      if (auto now = std::chrono::steady_clock::now(); now - checked >= std::chrono::milliseconds(200)) {
        checked = now;
        if (client.closed()) {
          for (auto& other : streams) other->cancel();
          throw ApiError(499, "the client closed the connection", "", "client_closed");
        }
      }
      if (!d) continue;
      results[i].logprobs.insert(results[i].logprobs.end(), d->logprobs.begin(), d->logprobs.end());
      results[i].last = *d;
    }
    if (!results[i].last.error.empty()) {
      for (auto& other : streams) other->cancel();
      throw ApiError(500, "generation failed: " + results[i].last.error, "", "server_error");
    }
    auto now = std::chrono::steady_clock::now();
    if (s.completion_tokens() > 0)
      ctx.metrics.time_to_first_token.observe(std::chrono::duration<double>(s.first_token_time() - start).count());
    ctx.metrics.e2e_request_latency.observe(std::chrono::duration<double>(now - start).count());
  }
  return results;
}

nlohmann::json usage_of(const std::vector<std::unique_ptr<TextStream>>& streams, int n) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    if (i % size_t(n) == 0) {
      prompt += streams[i]->prompt_tokens();
      cached += streams[i]->cached_tokens();
    }
    completion += streams[i]->completion_tokens();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

const char* finish_reason_of(const TextDelta& d) {
  if (!d.error.empty()) throw ApiError(500, "generation failed: " + d.error, "", "server_error");
  return d.finish == FinishReason::Length ? "length" : d.finish == FinishReason::Abort ? "abort" : "stop";
}

}  // namespace mlaserve
