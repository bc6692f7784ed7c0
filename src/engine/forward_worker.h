// ForwardWorker: runs the scheduler's batches (forward pass, then sampling) in launch order,
// either on the calling thread or, for the overlap schedule, on a thread of its own so that the
// device computes batch i while the scheduler processes batch i-1 and prepares batch i+1.
//
// A launched batch may use tokens that are not sampled yet: a negative input id is a *future*,
// `future_token(k)`, standing for the token the previous batch samples under id k. The worker
// resolves futures itself, so the scheduler never waits for a batch before launching the next.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/forward_batch.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace mlaserve {

// Future ids are below 2^31 - 1 (the scheduler wraps them), so every future is a negative int32.
inline int32_t future_token(int64_t id) { return int32_t(-1 - id); }
inline bool is_future_token(int32_t token) { return token < 0; }

// One token to draw from the logits of one sequence of the batch.
struct StepSample {
  int64_t seq = 0;                     // index into StepLaunch::seqs
  int64_t future = 0;                  // the id the drawn token is published under
  const GenerationParams* params = nullptr;  // owned by the request, which outlives the batch
  std::vector<int32_t> history;        // prompt + output so far, only when penalties need it
  int64_t prompt_len = 0;
  uint64_t seed = 0, step = 0;
};

struct StepLaunch {
  std::vector<SequenceInput> seqs;  // new_tokens may hold futures of the previous batch
  std::vector<StepSample> samples;
};

class ForwardWorker {
 public:
  ForwardWorker(ModelRunner& runner, bool overlap);
  ~ForwardWorker();
  ForwardWorker(const ForwardWorker&) = delete;
  ForwardWorker& operator=(const ForwardWorker&) = delete;

  // Queues a batch. Without overlap it runs before launch returns.
  void launch(StepLaunch step);
  // The draws of the oldest launched batch not yet collected, one per StepSample; rethrows what
  // its forward threw. Requires an outstanding launch.
  std::vector<SampleOutput> collect();
  int64_t outstanding() const { return outstanding_; }

 private:
  struct Done {
    std::vector<SampleOutput> sampled;
    std::exception_ptr error;
  };
  Done run(StepLaunch& step);
  void resolve(std::vector<int32_t>& tokens) const;
  void loop();

  ModelRunner& runner_;
  Sampler sampler_;
  bool overlap_;
  int64_t outstanding_ = 0;  // launched, not collected (scheduler thread only)
  // The tokens the last batch drew, by future id (worker side only).
  std::unordered_map<int64_t, int32_t> last_drawn_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StepLaunch> queue_;
  std::deque<Done> done_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlaserve
