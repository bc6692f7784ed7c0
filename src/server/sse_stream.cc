#include "server/sse_stream.h"

#include <httplib.h>

#include "server/api_error.h"

namespace mlaserve {

std::string token_text(const ServerContext& ctx, int32_t token) {
  int32_t ids[1] = {token};
  return ctx.tokenizer->decode(ids, false);
}

void stream_sse(ServerContext& ctx, httplib::Response& res, std::vector<std::unique_ptr<TextStream>> streams,
                ChunkMaker make_chunk, UsageMaker make_usage, bool done_marker) {
  auto shared = std::make_shared<std::vector<std::unique_ptr<TextStream>>>(std::move(streams));
  auto start = std::chrono::steady_clock::now();
  auto counted = std::make_shared<InFlight>(ctx);  // until the response is done with the provider
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [&ctx, shared, make_chunk, make_usage, done_marker, start,
                                                         counted](size_t, httplib::DataSink& sink) {
    auto& streams = *shared;
    auto cancel_all = [&] {
      for (auto& s : streams) s->cancel();
      return false;
    };
    auto send = [&](const nlohmann::json& event) {
      std::string line = "data: " + dump(event) + "\n\n";
      return sink.write(line.data(), line.size());
    };
    std::vector<bool> first(streams.size(), true);
    std::vector<std::chrono::steady_clock::time_point> last(streams.size(), start);
    auto wait = std::chrono::milliseconds(streams.size() > 1 ? 5 : 50);
    while (true) {
      bool all_done = true;
      for (size_t i = 0; i < streams.size(); ++i) {
        if (streams[i]->finished()) continue;
        all_done = false;
        auto d = streams[i]->next(wait);
        if (!sink.is_writable()) return cancel_all();
        if (!d) continue;
        auto now = std::chrono::steady_clock::now();
        if (!d->tokens.empty()) {
          double gap = std::chrono::duration<double>(now - last[i]).count();
          (first[i] ? ctx.metrics.time_to_first_token : ctx.metrics.inter_token_latency).observe(gap);
          last[i] = now;
        }
        if (d->finished) ctx.metrics.e2e_request_latency.observe(std::chrono::duration<double>(now - start).count());
        if (!d->error.empty()) {
          send(ApiError(500, "generation failed: " + d->error, "", "server_error").body());
          cancel_all();
          continue;
        }
        if (d->text.empty() && !d->finished && d->logprobs.empty() && !first[i]) continue;
        if (!send(make_chunk(i, *streams[i], *d, first[i]))) return cancel_all();
        first[i] = false;
      }
      if (all_done) break;
    }
    if (make_usage && !send(make_usage(streams))) return cancel_all();
    if (done_marker) {
      static const std::string done = "data: [DONE]\n\n";
      if (!sink.write(done.data(), done.size())) return false;
    }
    sink.done();
    return true;
  });
}

}  // namespace mlaserve
