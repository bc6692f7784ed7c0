#include "engine/forward_worker.h"

#include <algorithm>

#include "common/error.h"

namespace mlaserve {

ForwardWorker::ForwardWorker(ModelRunner& runner, bool overlap) : runner_(runner), overlap_(overlap) {
  if (overlap_) thread_ = std::thread([this] { loop(); });
}

ForwardWorker::~ForwardWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ForwardWorker::launch(StepLaunch step) {
  outstanding_++;
  if (!overlap_) {
    done_.push_back(run(step));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(step));
  }
  cv_.notify_all();
}

std::vector<SampleOutput> ForwardWorker::collect() {
  MLA_CHECK(outstanding_ > 0, "forward worker: nothing was launched");
  Done d;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !done_.empty(); });
    d = std::move(done_.front());
    done_.pop_front();
  }
  outstanding_--;
  if (d.error) std::rethrow_exception(d.error);
  return std::move(d.sampled);
}

void ForwardWorker::loop() {
  std::exception_ptr unbound;
  try {
    runner_.backend().bind_thread();
  } catch (...) {
    unbound = std::current_exception();  // every batch fails with it, the server stays up
  }
  while (true) {
    StepLaunch step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      step = std::move(queue_.front());
      queue_.pop_front();
    }
    Done d;
    if (unbound) d.error = unbound;
    else d = run(step);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(d));
    }
    cv_.notify_all();
  }
}

void ForwardWorker::resolve(std::vector<int32_t>& tokens) const {
  for (int32_t& t : tokens) {
    if (!is_future_token(t)) continue;
    auto it = last_drawn_.find(int64_t(-1 - t));
    MLA_CHECK(it != last_drawn_.end(), "forward worker: token future {} is not of the previous batch", -1 - t);
    t = it->second;
  }
}

ForwardWorker::Done ForwardWorker::run(StepLaunch& step) {
  Done d;
  std::unordered_map<int64_t, int32_t> drawn;
  try {
    for (SequenceInput& s : step.seqs) resolve(s.new_tokens);
    Tensor logits = runner_.forward(step.seqs);
    std::vector<SampleInput> inputs;
    bool every_row = step.samples.size() == step.seqs.size();  // decode, or whole prompts
    for (size_t i = 0; i < step.samples.size(); ++i) {
      StepSample& s = step.samples[i];
      resolve(s.history);
      inputs.push_back({s.params, &s.history, s.prompt_len, s.seed, s.step});
      every_row = every_row && s.seq == int64_t(i);
    }
    if (every_row) {
      d.sampled = sampler_.sample(runner_.backend(), logits, inputs);
    } else if (!inputs.empty()) {
      // Some sequences are mid-prefill: draw from the host copies of the rows that sample.
      Tensor host = runner_.backend().to_host(logits);
      int64_t V = host.size(1);
      Tensor rows = Tensor::empty(DType::F32, {int64_t(inputs.size()), V});
      for (size_t i = 0; i < step.samples.size(); ++i)
        std::copy_n(host.data<float>() + step.samples[i].seq * host.stride(0), V, rows.data<float>() + int64_t(i) * V);
      d.sampled = sampler_.sample(rows, inputs);
    }
    for (size_t i = 0; i < d.sampled.size(); ++i) drawn[step.samples[i].future] = d.sampled[i].token;
  } catch (...) {
    d.error = std::current_exception();
  }
  // A failed batch publishes nothing: the batch after it, which may use its futures, fails too.
  last_drawn_ = std::move(drawn);
  return d;
}

}  // namespace mlaserve
