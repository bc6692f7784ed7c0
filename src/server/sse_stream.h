// Server-sent events for a set of streams (the choices of one request): one `data:` event per
// delta, then an optional usage event and `data: [DONE]`. A client that goes away cancels every
// stream, so the engine frees their KV.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "server/request_submit.h"

namespace httplib {
struct Response;
}

namespace mlaserve {

using ChunkMaker =
    std::function<nlohmann::json(size_t choice, const TextStream& stream, const TextDelta& delta, bool first)>;
using UsageMaker = std::function<nlohmann::json(const std::vector<std::unique_ptr<TextStream>>& streams)>;

void stream_sse(ServerContext& ctx, httplib::Response& res, std::vector<std::unique_ptr<TextStream>> streams,
                ChunkMaker make_chunk, UsageMaker make_usage /* null: no usage event */, bool done_marker = true);

// The token as text for logprob listings (a lone byte of a character shows as U+FFFD).
std::string token_text(const ServerContext& ctx, int32_t token);

}  // namespace mlaserve
