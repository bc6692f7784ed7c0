// Shared by the route handlers: submitting prompts to the engine and reading them back.
#pragma once

#include <memory>
#include <vector>

#include "server/client_connection.h"
#include "server/http_server.h"
#include "server/request_parser.h"
#include "server/text_stream.h"

namespace mlaserve {

// Prompt ids, checked against the context. Text is encoded with the tokenizer's special tokens
// (BOS) as SGLang encodes prompts, except a rendered chat template, which holds its own (as HF's
// apply_chat_template(tokenize=True)): `add_special_tokens` false.
std::vector<int32_t> prompt_ids(ServerContext& ctx, const Prompt& prompt, bool add_special_tokens = true);

// Submits `n` samples of one prompt (seed + i when a seed is given) and returns their streams.
std::vector<std::unique_ptr<TextStream>> submit(ServerContext& ctx, const std::vector<int32_t>& ids,
                                                const GenerationParams& params, int n);

// Submits each prompt (`n` samples each) under its rid, made where `rids` is empty, and registers
// them for /abort_request through `registered` (which drops them when the handler returns, unless
// kept for a stream). A rid still in flight cancels what was submitted and throws ApiError 400.
std::vector<std::unique_ptr<TextStream>> submit_named(ServerContext& ctx,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      std::vector<std::string>& rids, const GenerationParams& params,
                                                      int n, RegisteredRids& registered);

// What a non-streaming response needs of a stream once it ended.
struct StreamResult {
  std::vector<TokenLogprob> logprobs;
  TextDelta last;  // the final delta: finish reason, matched stop, error
};

// Reads every stream to its end (non-streaming responses), recording latency metrics. If the
// client closes its connection first, every stream is cancelled and ApiError 499 thrown.
std::vector<StreamResult> wait_all(ServerContext& ctx, std::vector<std::unique_ptr<TextStream>>& streams,
                                   const ClientConnection& client);

// The OpenAI usage object of a set of streams (each prompt counted once).
nlohmann::json usage_of(const std::vector<std::unique_ptr<TextStream>>& streams, int n);

// A JSON dump that never throws on odd bytes (they become U+FFFD).
std::string dump(const nlohmann::json& j);

// Why a stream ended, for the response; an engine failure becomes an ApiError 500.
const char* finish_reason_of(const TextDelta& d);

}  // namespace mlaserve
