// HttpServer: the OpenAI-compatible and SGLang-style HTTP API over the engine (cpp-httplib). It
// parses and checks requests, tokenizes and renders chat templates on its own threads, submits
// Requests to the Scheduler and streams their TextStreams back. Errors are OpenAI-style bodies.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "config/model_config.h"
#include "config/server_args.h"
#include "engine/scheduler.h"
#include "server/metrics.h"
#include "server/request_registry.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace mlaserve {

struct ServerContext {
  ServerArgs args;
  ModelConfig model;
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;
  bool chat_template_takes_tools = false;  // its source names "tools": a request's tools reach the prompt
  std::string model_name;
  int64_t context_length = 0;
  ServerMetrics metrics;
  RequestRegistry rids;  // the generation requests in flight, for /abort_request
  std::atomic<uint64_t> next_request_id{1};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};  // HTTP requests not yet answered (streams until they end)
};

// Counts one in-flight HTTP request for as long as it lives (drain waits for zero).
class InFlight {
 public:
  explicit InFlight(ServerContext& ctx) : ctx_(ctx) { ctx_.in_flight++; }
  ~InFlight() { ctx_.in_flight--; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ServerContext& ctx_;
};

class HttpServer {
 public:
  explicit HttpServer(ServerContext& context);
  ~HttpServer();
  // Binds and serves until stop(); false when the address could not be bound.
  bool listen();
  // Refuses new requests, waits (up to `timeout`) for those in flight, then stops listening.
  void drain_and_stop(std::chrono::seconds timeout);
  void stop();
  // For tests that bind port 0.
  int bound_port() const { return bound_port_; }

 private:
  void add_routes();
  ServerContext& ctx_;
  std::unique_ptr<httplib::Server> server_;
  int bound_port_ = 0;
  int listen_socket_ = -1;
};

// Route handlers (openai_routes.cc, native_routes.cc). Each throws ApiError for client errors.
void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_generate(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_abort_request(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
bool run_health_generate(ServerContext& ctx);

}  // namespace mlaserve
