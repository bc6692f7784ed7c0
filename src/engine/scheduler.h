// Scheduler: one thread that owns every request's engine state, the KV slot allocator and the
// radix cache. Each step it picks a batch (prefill chunks of waiting requests, or one decode token
// for every running request), launches it on the ForwardWorker (forward + sampling), and streams
// the drawn tokens to each request's OutputChannel. With the overlap schedule a step launches batch
// i before it processes the draws of batch i-1: batch i takes those draws as token futures, and a
// request that finished in batch i-1 wastes one draw in batch i. It knows nothing of kernels or HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/radix_cache.h"
#include "cache/token_slot_allocator.h"
#include "engine/forward_worker.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace mlaserve {

enum class SchedulePolicy : uint8_t { Fcfs, Lpm };

struct SchedulerConfig {
  int64_t max_running_requests = 256;
  int64_t chunked_prefill_size = 8192;  // tokens of prefill per step; <= 0: a whole prompt per step
  int64_t max_prefill_tokens = 16384;   // prefill tokens per step when chunking is off
  SchedulePolicy policy = SchedulePolicy::Fcfs;
  bool radix_cache = true;
  int64_t page_size = 1;
  int64_t context_length = 0;               // prompt + output limit
  std::vector<int32_t> eos_token_ids;
  int64_t decode_reserve_tokens = 16;       // KV kept free per running request when admitting
  bool overlap_schedule = true;             // launch batch i+1 before processing batch i
  bool mixed_chunk = false;                 // decode tokens join a prefill batch (else it waits)
};

// A consistent snapshot for /metrics and /get_server_info.
struct EngineStats {
  int64_t num_waiting = 0, num_running = 0;
  int64_t kv_slots_total = 0, kv_slots_used = 0, kv_slots_cached = 0;
  int64_t requests_finished = 0, requests_aborted = 0, requests_retracted = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generation_tokens = 0;
  int64_t forward_steps = 0, mixed_steps = 0;  // mixed: prefill chunks and decode tokens together
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, ModelRunner& runner);
  ~Scheduler();

  void start();
  // drain: finish what was submitted first; otherwise abort it.
  void stop(bool drain);
  // Thread-safe. The request's channel receives its outputs; cancel() on the channel aborts it.
  void submit(std::shared_ptr<Request> request);
  // Thread-safe; evicts every unlocked cached prefix. False when requests are running.
  bool flush_cache();
  EngineStats stats() const;
  const SchedulerConfig& config() const { return config_; }

  // Runs one scheduling step on the calling thread (tests drive the scheduler without a thread).
  // Returns false when there was nothing to do.
  bool step();

 private:
  struct Sequence;
  void loop();
  void take_new_requests();
  void drop_cancelled();
  struct Launched;
  std::vector<Sequence*> schedule_prefill();
  // One token for every decoding request not in `busy` (the prefill part of a mixed batch).
  std::vector<Sequence*> schedule_decode(const std::vector<Sequence*>& busy = {});
  bool admit(Sequence& s, int64_t token_budget, bool first_in_batch);
  bool grow(Sequence& s, int64_t n);
  void retract(Sequence& s);
  // KV pages free or held only by evictable cache entries.
  int64_t pages_available() const;
  int64_t reserve_pages_per_request() const;
  int64_t num_decoding() const;
  int64_t decode_reserve_pages() const;
  // The latest-arrived running request other than `except` and those in `busy` (nullptr if none).
  Sequence* newest_running(const Sequence* except, const std::vector<Sequence*>& busy = {}) const;
  // Retracts the newest running request if it arrived after s; false if there is none.
  bool retract_newest_after(const Sequence& s);
  void release(Sequence& s, bool keep_in_cache = true);
  void finish(Sequence& s, FinishReason reason, int32_t stop_token = -1);
  void launch(const std::vector<Sequence*>& batch);
  void process_oldest_launch();
  void emit(Sequence& s, int64_t index, const SampleOutput& drawn);
  void abandon_launches(const std::string& error);
  bool is_eos(int32_t token) const;
  void publish_stats();

  SchedulerConfig config_;
  ModelRunner& runner_;
  Sampler sampler_;
  TokenSlotAllocator allocator_;
  std::unique_ptr<RadixCache> cache_;

  // Shared with the launches still in flight that hold them.
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admitted: prefilling (chunks left) or decoding
  ForwardWorker worker_;
  std::deque<Launched> launched_;  // oldest first; at most two with the overlap schedule
  int64_t next_future_ = 0;

  mutable std::mutex mu_;  // guards incoming_, flush_requested_, stats_, stopping flags
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Request>> incoming_;
  bool flush_requested_ = false;
  bool flush_result_ = false;
  std::condition_variable flush_cv_;
  EngineStats stats_, counters_;
  std::atomic<bool> stop_{false};
  bool drain_ = true;
  std::thread thread_;
};

}  // namespace mlaserve
