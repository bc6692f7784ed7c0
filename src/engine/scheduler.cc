#include "engine/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "common/error.h"

namespace mlaserve {

// The engine's state of one request. tokens = prompt + output; slots hold the KV of
// tokens[0, slots.size()); the first prefix_len of them belong to the radix cache (locked).
// The newest one or two output tokens may be futures of launches not yet processed; every token
// with KV is always known (a launch's draw is processed before the launch after next).
struct Scheduler::Sequence : std::enable_shared_from_this<Sequence> {
  std::shared_ptr<Request> req;
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  std::vector<int32_t> slots;
  int64_t prefix_len = 0;
  RadixCache::Node* locked = nullptr;
  int64_t cached_tokens = -1;  // prompt tokens the cache served at first admission
  uint64_t seed = 0;
  bool prefill_done = false;   // the last pending token ran (or is running) and draws the next
  int64_t unresolved = 0;      // futures among tokens
  int64_t chunk = 0;           // tokens this step computes
  bool done = false;

  int64_t kv_len() const { return int64_t(slots.size()); }
  int64_t pending() const { return int64_t(tokens.size()) - kv_len(); }
  int64_t num_output() const { return int64_t(tokens.size()) - prompt_len; }
  // Every output token it may have is drawn or in flight.
  bool drawn_all(int64_t context_length) const {
    return num_output() >= req->params.max_new_tokens || int64_t(tokens.size()) >= context_length;
  }
};

// A launched batch as the scheduler remembers it: where each draw lands.
struct Scheduler::Launched {
  std::vector<std::shared_ptr<Sequence>> seqs;
  std::vector<int64_t> token_index;  // of the future in seqs[i]->tokens
};

Scheduler::Scheduler(SchedulerConfig config, ModelRunner& runner)
    : config_(std::move(config)),
      runner_(runner),
      allocator_(runner.num_slots() / config_.page_size * config_.page_size, config_.page_size),
      worker_(runner, config_.overlap_schedule) {
  if (config_.radix_cache) cache_ = std::make_unique<RadixCache>(config_.page_size);
  MLA_CHECK(config_.context_length > 0, "scheduler: context length must be positive");
  MLA_CHECK(config_.page_size % runner.kv_page_size() == 0,
            "scheduler: pages of {} slots break the KV pool's promise of runs of {} (ModelRunner::set_kv_page_size)",
            config_.page_size, runner.kv_page_size());
  publish_stats();
}

Scheduler::~Scheduler() { stop(false); }

void Scheduler::start() { thread_ = std::thread([this] { loop(); }); }

void Scheduler::stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    drain_ = drain;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::submit(std::shared_ptr<Request> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(std::move(request));
  }
  cv_.notify_all();
}

bool Scheduler::flush_cache() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return false;
  flush_requested_ = true;
  cv_.notify_all();
  flush_cv_.wait(lock, [&] { return !flush_requested_; });
  return flush_result_;
}

EngineStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Scheduler::loop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool idle = incoming_.empty() && waiting_.empty() && running_.empty() && launched_.empty();
      if (stop_ && (!drain_ || idle)) break;
    }
    bool worked = false;
    try {
      worked = step();
    } catch (const std::exception& e) {
      // A failed forward fails the requests in flight, never the server.
      spdlog::error("scheduler step failed: {}", e.what());
      abandon_launches(e.what());
    }
    if (!worked) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(20),
                   [&] { return !incoming_.empty() || stop_ || flush_requested_; });
    }
  }
  // Not draining: whatever is left is aborted.
  while (!launched_.empty()) {
    try {
      process_oldest_launch();
    } catch (const std::exception& e) {
      abandon_launches(e.what());
    }
  }
  take_new_requests();
  for (auto& s : waiting_) finish(*s, FinishReason::Abort);
  for (auto& s : running_) finish(*s, FinishReason::Abort);
  waiting_.clear();
  running_.clear();
  publish_stats();
}

void Scheduler::take_new_requests() {
  std::vector<std::shared_ptr<Request>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(incoming_);
  }
  for (auto& r : fresh) {
    auto s = std::make_shared<Sequence>();
    s->tokens = r->input_ids;
    s->prompt_len = int64_t(r->input_ids.size());
    s->seed = r->params.seed ? *r->params.seed : std::random_device{}();
    s->req = std::move(r);
    // With its first output token, the prompt must fit the context and, alone, the KV pool.
    int64_t pool = allocator_.num_slots();
    if (s->tokens.empty() || s->prompt_len >= config_.context_length || s->prompt_len + 1 > pool) {
      RequestOutput out;
      out.finish = FinishReason::Abort;
      out.error = s->prompt_len >= config_.context_length
                      ? fmt::format("prompt of {} tokens does not fit the context of {}", s->prompt_len,
                                    config_.context_length)
                      : fmt::format("prompt of {} tokens does not fit the KV pool of {} tokens", s->prompt_len, pool);
      s->req->output->push(std::move(out));
      continue;
    }
    waiting_.push_back(std::move(s));
  }
}

void Scheduler::drop_cancelled() {
  for (auto& s : waiting_)
    if (s->req->output->cancelled()) finish(*s, s->req->output->cancel_reason());
  std::erase_if(waiting_, [](auto& s) { return s->done; });
  for (auto& s : running_)
    if (s->req->output->cancelled()) finish(*s, s->req->output->cancel_reason());
  std::erase_if(running_, [](auto& s) { return s->done; });
}

bool Scheduler::step() {
  take_new_requests();
  drop_cancelled();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (flush_requested_) {
      flush_result_ = running_.empty() && waiting_.empty();
      if (flush_result_ && cache_) cache_->reset([&](const std::vector<int32_t>& s) { allocator_.free(s); });
      flush_requested_ = false;
      flush_cv_.notify_all();
    }
  }
  // Prefill first (new and chunked requests); otherwise one decode step for every running one.
  // Mixed: the decoding requests' tokens join the prefill batch.
  std::vector<Sequence*> batch = schedule_prefill();
  if (batch.empty()) {
    batch = schedule_decode();
  } else if (config_.mixed_chunk) {
    std::vector<Sequence*> decode = schedule_decode(batch);
    batch.insert(batch.end(), decode.begin(), decode.end());
    if (!decode.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      counters_.mixed_steps++;
    }
  }
  bool worked = !batch.empty() || !launched_.empty();
  if (!batch.empty()) launch(batch);
  // Overlap: the batch just launched computes while the one before it is processed.
  size_t keep = !batch.empty() && config_.overlap_schedule ? 1 : 0;
  while (launched_.size() > keep) process_oldest_launch();
  std::erase_if(running_, [](auto& s) { return s->done; });
  std::erase_if(waiting_, [](auto& s) { return s->done; });
  publish_stats();
  return worked;
}

bool Scheduler::grow(Sequence& s, int64_t n) {
  auto got = allocator_.allocate_extend(s.slots, n);
  while (!got && cache_ && cache_->evictable_size() > 0) {
    cache_->evict(n + config_.page_size, [&](const std::vector<int32_t>& slots) { allocator_.free(slots); });
    got = allocator_.allocate_extend(s.slots, n);
  }
  if (!got) return false;
  s.slots.insert(s.slots.end(), got->begin(), got->end());
  return true;
}

bool Scheduler::admit(Sequence& s, int64_t budget, bool first_in_batch) {
  if (cache_) {
    // Match at most all but the last token: one token must run to give the next token's logits.
    auto m = cache_->match_prefix(std::span<const int32_t>(s.tokens).first(s.tokens.size() - 1));
    cache_->lock(m.node);
    s.slots = std::move(m.slots);
    s.prefix_len = m.length;
    s.locked = m.node;
  }
  int64_t n = std::min(s.pending(), budget);
  bool chunking = config_.chunked_prefill_size > 0;
  bool ok = chunking || n == s.pending() || first_in_batch;
  if (!chunking) n = s.pending();
  if (ok) {
    // Keep room for the running requests' next tokens, so admitting does not force retraction.
    int64_t reserve = int64_t(running_.size()) * reserve_pages_per_request();
    int64_t available = pages_available();
    int64_t need = allocator_.pages_needed(s.kv_len(), n);
    ok = need <= available && (running_.empty() || available - need >= reserve) && grow(s, n);
  }
  if (!ok) {
    if (cache_) cache_->unlock(s.locked);
    s.slots.clear();
    s.prefix_len = 0;
    s.locked = nullptr;
    return false;
  }
  if (s.cached_tokens < 0) {
    s.cached_tokens = s.prefix_len;
    std::lock_guard<std::mutex> lock(mu_);
    counters_.prompt_tokens += s.prompt_len;
    counters_.cached_prompt_tokens += s.prefix_len;
  }
  s.chunk = n;
  s.prefill_done = false;
  return true;
}

std::vector<Scheduler::Sequence*> Scheduler::schedule_prefill() {
  int64_t budget = config_.chunked_prefill_size > 0 ? config_.chunked_prefill_size : config_.max_prefill_tokens;
  std::vector<Sequence*> batch;
  // Requests in the middle of a chunked prefill continue first, oldest first, leaving the
  // decoding requests their reserve. If none decodes (nothing else could free KV), newer
  // requests are retracted to make room; the oldest always fits alone (take_new_requests).
  std::vector<Sequence*> chunked;
  for (auto& s : running_)
    if (!s->prefill_done && !s->done) chunked.push_back(s.get());
  std::stable_sort(chunked.begin(), chunked.end(),
                   [](Sequence* a, Sequence* b) { return a->req->arrival < b->req->arrival; });
  for (Sequence* s : chunked) {
    if (budget <= 0 || s->done) break;
    if (std::none_of(running_.begin(), running_.end(), [&](auto& r) { return r.get() == s; })) continue;  // retracted
    int64_t n = std::min(s->pending(), budget);
    bool decoders = num_decoding() > 0;
    int64_t need = allocator_.pages_needed(s->kv_len(), n);
    if (decoders && need + decode_reserve_pages() > pages_available()) break;
    bool grown = grow(*s, n);
    while (!grown && !decoders && retract_newest_after(*s)) grown = grow(*s, n);
    if (!grown) break;
    s->chunk = n;
    budget -= n;
    batch.push_back(s);
  }
  if (waiting_.empty() || budget <= 0) return batch;
  if (config_.policy == SchedulePolicy::Lpm && cache_ && waiting_.size() > 1) {
    // Longest cached prefix first (a read-only match: nothing is locked yet).
    std::vector<std::pair<int64_t, size_t>> order;
    for (size_t i = 0; i < waiting_.size(); ++i) {
      auto& t = waiting_[i]->tokens;
      order.push_back({cache_->match_prefix(std::span<const int32_t>(t).first(t.size() - 1)).length, i});
    }
    std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::deque<std::shared_ptr<Sequence>> sorted;
    for (auto& [len, i] : order) sorted.push_back(std::move(waiting_[i]));
    waiting_.swap(sorted);
  }
  while (!waiting_.empty() && budget > 0 && int64_t(running_.size()) < config_.max_running_requests) {
    Sequence& s = *waiting_.front();
    if (s.unresolved > 0) break;  // retracted with a draw in flight: it is processed this step
    if (!admit(s, budget, batch.empty())) break;
    budget -= s.chunk;
    batch.push_back(&s);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return batch;
}

std::vector<Scheduler::Sequence*> Scheduler::schedule_decode(const std::vector<Sequence*>& busy) {
  std::vector<Sequence*> batch;
  for (auto& s : running_)
    if (s->prefill_done && !s->done && !s->drawn_all(config_.context_length) &&
        std::find(busy.begin(), busy.end(), s.get()) == busy.end())
      batch.push_back(s.get());
  // Out of KV: retract the latest arrivals (their progress kept), decoding or in the middle of a
  // chunked prefill, until the rest fit. The oldest decoding request stays: it fits alone.
  auto pages_needed = [&] {
    int64_t n = 0;
    for (Sequence* s : batch) n += allocator_.pages_needed(s->kv_len(), 1);
    return n;
  };
  if (batch.empty()) return batch;
  Sequence* oldest = *std::min_element(batch.begin(), batch.end(), [](Sequence* a, Sequence* b) {
    return a->req->arrival < b->req->arrival;
  });
  while (pages_needed() > pages_available()) {
    Sequence* victim = newest_running(oldest, busy);
    if (!victim) break;
    retract(*victim);
    std::erase(batch, victim);
  }
  for (Sequence* s : batch) {
    if (!grow(*s, 1)) {
      spdlog::warn("request {}: the KV pool cannot hold its next token; finishing it", s->req->id);
      finish(*s, FinishReason::Length);
    }
    s->chunk = 1;
  }
  std::erase_if(batch, [](Sequence* s) { return s->done; });
  return batch;
}

void Scheduler::retract(Sequence& s) {
  release(s);
  s.prefill_done = false;
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->get() == &s) {
      waiting_.push_front(std::move(*it));
      running_.erase(it);
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.requests_retracted++;
}

int64_t Scheduler::pages_available() const {
  return allocator_.num_free_pages() + (cache_ ? cache_->evictable_size() / config_.page_size : 0);
}

int64_t Scheduler::reserve_pages_per_request() const {
  return (config_.decode_reserve_tokens + config_.page_size - 1) / config_.page_size;
}

int64_t Scheduler::num_decoding() const {
  return std::count_if(running_.begin(), running_.end(), [](auto& s) { return s->prefill_done && !s->done; });
}

int64_t Scheduler::decode_reserve_pages() const { return num_decoding() * reserve_pages_per_request(); }

Scheduler::Sequence* Scheduler::newest_running(const Sequence* except, const std::vector<Sequence*>& busy) const {
  Sequence* newest = nullptr;
  for (auto& s : running_)
    if (s.get() != except && !s->done && std::find(busy.begin(), busy.end(), s.get()) == busy.end() &&
        (!newest || s->req->arrival > newest->req->arrival))
      newest = s.get();
  return newest;
}

bool Scheduler::retract_newest_after(const Sequence& s) {
  Sequence* victim = newest_running(&s);
  if (!victim || victim->req->arrival < s.req->arrival) return false;
  retract(*victim);
  return true;
}

void Scheduler::release(Sequence& s, bool keep_in_cache) {
  auto free_range = [&](int64_t begin, int64_t end) {
    if (end > begin) allocator_.free(std::span<const int32_t>(s.slots).subspan(size_t(begin), size_t(end - begin)));
  };
  int64_t kv = s.kv_len(), owned_by_cache_to = s.prefix_len;
  if (cache_ && keep_in_cache && kv > 0) {
    // The computed prefix goes into the cache (it owns [cached, aligned)); duplicates and the
    // partial last page go back to the allocator. Only known tokens can be matched later.
    auto known_end = std::find_if(s.tokens.begin(), s.tokens.begin() + kv, is_future_token);
    int64_t known = known_end - s.tokens.begin();
    int64_t cached = cache_->insert(std::span<const int32_t>(s.tokens).first(size_t(known)),
                                    std::span<const int32_t>(s.slots).first(size_t(known)));
    free_range(s.prefix_len, cached);
    owned_by_cache_to = std::max(known / config_.page_size * config_.page_size, s.prefix_len);
  }
  free_range(owned_by_cache_to, kv);
  if (cache_ && s.locked) cache_->unlock(s.locked);
  s.slots.clear();
  s.prefix_len = 0;
  s.locked = nullptr;
}

void Scheduler::finish(Sequence& s, FinishReason reason, int32_t stop_token) {
  if (s.done) return;
  release(s);
  s.done = true;
  RequestOutput out;
  out.finish = reason;
  out.matched_stop_token = stop_token;
  out.prompt_tokens = s.prompt_len;
  out.cached_tokens = std::max<int64_t>(s.cached_tokens, 0);
  s.req->output->push(std::move(out));
  std::lock_guard<std::mutex> lock(mu_);
  (reason == FinishReason::Abort ? counters_.requests_aborted : counters_.requests_finished)++;
}

bool Scheduler::is_eos(int32_t token) const {
  return std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) != config_.eos_token_ids.end();
}

void Scheduler::launch(const std::vector<Sequence*>& batch) {
  StepLaunch step;
  Launched launched;
  for (Sequence* s : batch) {
    int64_t start = s->kv_len() - s->chunk;
    step.seqs.push_back({{s->tokens.begin() + start, s->tokens.begin() + start + s->chunk}, s->slots, false});
    if (s->pending() > 0) continue;  // a prefill chunk with more to come: nothing to draw yet
    // Its last pending token runs: it draws the next one, known to later launches as a future.
    const GenerationParams& p = s->req->params;
    step.samples.push_back({int64_t(step.seqs.size() - 1), next_future_, &p,
                            has_penalties(p) ? s->tokens : std::vector<int32_t>{}, s->prompt_len, s->seed,
                            uint64_t(s->num_output())});
    s->tokens.push_back(future_token(next_future_));
    next_future_ = (next_future_ + 1) % (int64_t(1) << 30);
    s->unresolved++;
    s->prefill_done = true;
    launched.seqs.push_back(s->shared_from_this());
    launched.token_index.push_back(int64_t(s->tokens.size()) - 1);
  }
  worker_.launch(std::move(step));
  launched_.push_back(std::move(launched));
  std::lock_guard<std::mutex> lock(mu_);
  counters_.forward_steps++;
}

void Scheduler::process_oldest_launch() {
  Launched launched = std::move(launched_.front());
  launched_.pop_front();
  std::vector<SampleOutput> drawn = worker_.collect();
  for (size_t i = 0; i < drawn.size(); ++i) {
    Sequence& s = *launched.seqs[i];
    s.tokens[size_t(launched.token_index[i])] = drawn[i].token;
    s.unresolved--;
    // Finished or aborted while this launch was in flight: the draw is not part of its output.
    if (!s.done) emit(s, launched.token_index[i], drawn[i]);
  }
}

// Streams output token tokens[index] and finishes the request when it ends it.
void Scheduler::emit(Sequence& s, int64_t index, const SampleOutput& drawn) {
  const GenerationParams& p = s.req->params;
  int32_t token = drawn.token;
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.generation_tokens++;
  }
  RequestOutput out;
  out.tokens = {token};
  if (p.logprobs >= 0) out.logprobs = {drawn.logprob};
  out.prompt_tokens = s.prompt_len;
  out.cached_tokens = std::max<int64_t>(s.cached_tokens, 0);
  bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  FinishReason reason = FinishReason::None;
  if (stop_id || (!p.ignore_eos && is_eos(token))) reason = FinishReason::Stop;
  else if (index + 1 - s.prompt_len >= p.max_new_tokens || index + 1 >= config_.context_length)
    reason = FinishReason::Length;
  if (reason != FinishReason::None) {
    release(s);
    s.done = true;
    out.finish = reason;
    out.matched_stop_token = reason == FinishReason::Stop ? token : -1;
    std::lock_guard<std::mutex> lock(mu_);
    counters_.requests_finished++;
  }
  s.req->output->push(std::move(out));
}

// After a failed launch: collects what is left and fails every request whose state depends on it
// (all running ones, and waiting ones with a draw in flight), never the server.
void Scheduler::abandon_launches(const std::string& error) {
  while (!launched_.empty()) {
    launched_.pop_front();
    try {
      worker_.collect();
    } catch (const std::exception&) {
    }
  }
  auto fail = [&](Sequence& s) {
    if (s.done) return;
    RequestOutput out;
    out.finish = FinishReason::Abort;
    out.error = error;
    s.req->output->push(std::move(out));
    release(s, /*keep_in_cache=*/false);  // its KV may be half written
    s.done = true;
    std::lock_guard<std::mutex> lock(mu_);
    counters_.requests_aborted++;
  };
  for (auto& s : running_) fail(*s);
  for (auto& s : waiting_)
    if (s->unresolved > 0) fail(*s);
  running_.clear();
  std::erase_if(waiting_, [](auto& s) { return s->done; });
  publish_stats();
}

void Scheduler::publish_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats st = counters_;
  st.num_waiting = int64_t(waiting_.size() + incoming_.size());
  st.num_running = int64_t(std::count_if(running_.begin(), running_.end(), [](auto& s) { return !s->done; }));
  st.kv_slots_total = allocator_.num_slots();
  st.kv_slots_used = allocator_.num_slots() - allocator_.num_free_slots();
  st.kv_slots_cached = cache_ ? cache_->total_size() : 0;
  stats_ = st;
}

}  // namespace mlaserve
