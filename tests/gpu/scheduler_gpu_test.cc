// The serving scheduler on the CUDA backend: the overlap schedule launches the same batches as the
// plain one, so greedy tokens are identical; the radix cache and chunking change batch shapes (and
// so BF16 rounding), so there tokens must agree almost everywhere.
#include <gtest/gtest.h>

#include <map>

#include "engine/scheduler.h"
#include "model/load_model.h"

namespace mlaserve {
namespace {

std::vector<int32_t> prompt_of(int i, int len) {
  std::vector<int32_t> p;
  for (int t = 0; t < len; ++t) p.push_back(2 + (i * 37 + t * 11 + (t % 5) * 3) % 500);
  return p;
}

std::map<int, std::vector<int32_t>> serve_greedy(SchedulerConfig cfg, const std::vector<std::vector<int32_t>>& prompts,
                                                 int max_new) {
  LoadedModel m = load_model({.model = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/models/v3_noaux_tc"});
  cfg.context_length = 4096;
  ModelRunner runner(make_backend("cuda"), m.config, std::move(m.weights), 4096, DType::BF16);
  Scheduler sched(cfg, runner);
  std::vector<std::shared_ptr<Request>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = std::make_shared<Request>();
    r->id = i;
    r->input_ids = prompts[i];
    r->params.temperature = 0;
    r->params.max_new_tokens = max_new;
    r->params.ignore_eos = true;  // lengths known ahead: both schedules launch the same batches
    reqs.push_back(r);
    sched.submit(r);
  }
  std::map<int, std::vector<int32_t>> out;
  size_t finished = 0;
  for (int step = 0; finished < reqs.size() && step < 10000; ++step) {
    sched.step();
    for (auto& r : reqs)
      while (auto o = r->output->pop(std::chrono::milliseconds(0))) {
        auto& v = out[int(r->id)];
        v.insert(v.end(), o->tokens.begin(), o->tokens.end());
        if (o->finish != FinishReason::None) finished++;
      }
  }
  EXPECT_EQ(finished, reqs.size());
  EngineStats st = sched.stats();
  EXPECT_EQ(st.kv_slots_used, st.kv_slots_cached);
  return out;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> p;
  auto common = prompt_of(99, 48);
  for (int i = 0; i < 10; ++i) {
    auto q = common;
    auto tail = prompt_of(i, 3 + 7 * i);
    q.insert(q.end(), tail.begin(), tail.end());
    p.push_back(q);
  }
  return p;
}

TEST(SchedulerOnCuda, OverlapScheduleGivesTheSameGreedyTokens) {
  for (bool radix : {true, false}) {
    SchedulerConfig plain, overlap;
    plain.radix_cache = overlap.radix_cache = radix;
    plain.overlap_schedule = false;
    overlap.overlap_schedule = true;
    EXPECT_EQ(serve_greedy(plain, prompts(), 24), serve_greedy(overlap, prompts(), 24)) << "radix " << radix;
  }
}

TEST(SchedulerOnCuda, RadixCacheAndChunkingAgreeWithThePlainSchedule) {
  SchedulerConfig plain;
  plain.radix_cache = false;
  plain.overlap_schedule = false;
  SchedulerConfig cached;
  cached.chunked_prefill_size = 32;
  cached.page_size = 4;
  auto want = serve_greedy(plain, prompts(), 24), got = serve_greedy(cached, prompts(), 24);
  int64_t same = 0, total = 0;
  for (auto& [i, w] : want) {
    // Count up to the first difference: after it the continuations rightly diverge.
    size_t n = 0;
    while (n < w.size() && n < got[i].size() && w[n] == got[i][n]) ++n;
    same += int64_t(n);
    total += int64_t(w.size());
  }
  EXPECT_GE(double(same), 0.9 * double(total)) << same << " of " << total;
}

}  // namespace
}  // namespace mlaserve
