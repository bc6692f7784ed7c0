#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <thread>

#include "server/api_error.h"
#include "server/request_submit.h"

namespace mlaserve {

namespace {

void send_error(ServerContext& ctx, httplib::Response& res, const ApiError& e) {
  ctx.metrics.http_errors++;
  res.status = e.status;
  res.set_content(dump(e.body()), "application/json");
}

bool authorized(const ServerContext& ctx, const httplib::Request& req) {
  if (ctx.args.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + ctx.args.api_key;
}

}  // namespace

HttpServer::HttpServer(ServerContext& context) : ctx_(context), server_(std::make_unique<httplib::Server>()) {
  // One thread per open connection: streaming responses hold theirs until the request ends.
  server_->new_task_queue = [] { return new httplib::ThreadPool(1024); };
  server_->set_payload_max_length(size_t(ctx_.args.max_request_bytes));
  server_->set_read_timeout(60, 0);
  server_->set_write_timeout(60, 0);
  server_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket_ = sock;
  });
  add_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::listen() {
  bound_port_ = ctx_.args.port;
  if (ctx_.args.port == 0) {
    bound_port_ = server_->bind_to_any_port(ctx_.args.host);
    if (bound_port_ < 0) return false;
  } else {
    if (!server_->bind_to_port(ctx_.args.host, ctx_.args.port)) return false;
    spdlog::info("serving on http://{}:{}", ctx_.args.host, bound_port_);
  }
  // The packaged cpp-httplib listens with a backlog of 5: a burst of clients connecting at once
  // overflows it and some see their connection reset. Listening again raises the backlog.
  if (listen_socket_ >= 0 && ::listen(listen_socket_, SOMAXCONN) != 0)
    spdlog::warn("could not raise the listen backlog; bursts of new connections may be refused");
  return server_->listen_after_bind();
}

void HttpServer::stop() { server_->stop(); }

void HttpServer::drain_and_stop(std::chrono::seconds timeout) {
  ctx_.draining = true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ctx_.in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ctx_.in_flight > 0) spdlog::warn("stopping with {} requests still in flight", ctx_.in_flight.load());
  server_->stop();
}

void HttpServer::add_routes() {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Every route: the API key, draining, and errors as OpenAI-style bodies.
  auto wrap = [this](Handler h, bool open = false) {
    return [this, h, open](const httplib::Request& req, httplib::Response& res) {
      ctx_.metrics.http_requests++;
      InFlight counted(ctx_);
      try {
        if (!open && !authorized(ctx_, req))
          throw ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", "", "authentication_error",
                         "invalid_api_key");
        if (ctx_.draining && !open) throw ApiError(503, "the server is shutting down", "", "server_error");
        h(req, res);
      } catch (const ApiError& e) {
        send_error(ctx_, res, e);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(ctx_, res, ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
      }
    };
  };
  auto& s = *server_;
  s.Post("/v1/completions", wrap([this](auto& q, auto& r) { handle_completions(ctx_, q, r); }));
  s.Post("/v1/chat/completions", wrap([this](auto& q, auto& r) { handle_chat_completions(ctx_, q, r); }));
  s.Post("/generate", wrap([this](auto& q, auto& r) { handle_generate(ctx_, q, r); }));
  s.Post("/abort_request", wrap([this](auto& q, auto& r) { handle_abort_request(ctx_, q, r); }));
  for (const char* prefix : {"", "/v1"}) {
    s.Post(std::string(prefix) + "/tokenize", wrap([this](auto& q, auto& r) { handle_tokenize(ctx_, q, r); }));
    s.Post(std::string(prefix) + "/detokenize", wrap([this](auto& q, auto& r) { handle_detokenize(ctx_, q, r); }));
  }
  s.Get("/v1/models", wrap([this](auto&, auto& r) {
    nlohmann::json model = {{"id", ctx_.model_name}, {"object", "model"}, {"created", 0},
                            {"owned_by", "mlaserve"}, {"root", ctx_.model_name},
                            {"max_model_len", ctx_.context_length}};
    r.set_content(dump({{"object", "list"}, {"data", {model}}}), "application/json");
  }));
  s.Get("/health", wrap([](auto&, auto& r) { r.set_content("", "text/plain"); }, true));
  s.Get("/health_generate", wrap([this](auto&, auto& r) {
    if (!run_health_generate(ctx_)) throw ApiError(503, "the engine did not generate in time", "", "server_error");
    r.set_content("", "text/plain");
  }));
  s.Get("/get_model_info", wrap([this](auto&, auto& r) {
    r.set_content(dump({{"model_path", ctx_.args.model_path}, {"tokenizer_path", ctx_.args.tokenizer_path},
                        {"is_generation", true}, {"config", ctx_.model.to_json()}}),
                  "application/json");
  }));
  s.Get("/get_server_info", wrap([this](auto&, auto& r) {
    EngineStats st = ctx_.scheduler->stats();
    nlohmann::json info = ctx_.args.to_json();
    info["context_length"] = ctx_.context_length;
    info["max_total_num_tokens"] = st.kv_slots_total;
    info["num_running_requests"] = st.num_running;
    info["num_waiting_requests"] = st.num_waiting;
    info["kv_slots_used"] = st.kv_slots_used;
    info["kv_slots_cached"] = st.kv_slots_cached;
    info["version"] = "0.1.0";
    r.set_content(dump(info), "application/json");
  }));
  auto flush = wrap([this](auto&, auto& r) {
    if (!ctx_.scheduler->flush_cache())
      throw ApiError(400, "the cache cannot be flushed while requests are running", "", "invalid_request_error");
    r.set_content("Cache flushed.\n", "text/plain");
  });
  s.Post("/flush_cache", flush);
  s.Get("/flush_cache", flush);
  s.Get("/metrics", wrap([this](auto&, auto& r) {
    r.set_content(ctx_.metrics.render(ctx_.scheduler->stats(), ctx_.model_name), "text/plain; version=0.0.4");
  }));
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      send_error(ctx_, res, ApiError(404, "no route " + req.method + " " + req.path, "", "not_found_error"));
    else if (res.status == 413)
      send_error(ctx_, res, ApiError(413, "the request body is too large", "", "invalid_request_error"));
  });
}

}  // namespace mlaserve
