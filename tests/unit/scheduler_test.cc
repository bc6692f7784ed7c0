// The scheduler on the CPU backend with a fixture model: greedy outputs do not depend on radix
// cache, chunking, paging, batch composition, retraction or the overlap schedule; KV is returned;
// aborts free it.
#include <gtest/gtest.h>

#include <map>

#include "engine/scheduler.h"
#include "model/load_model.h"
#include "../common/scheduler_prompts.h"
#include "test_paths.h"

namespace mlaserve {
namespace {

struct RunResult {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  std::map<uint64_t, FinishReason> finish;
  std::map<uint64_t, int64_t> cached;
  std::map<uint64_t, std::vector<float>> logprobs;
  EngineStats stats;
};

using testing::prompt_of;

class SchedulerTest : public ::testing::Test {
 protected:
  RunResult run(SchedulerConfig cfg, int64_t slots, const std::vector<std::vector<int32_t>>& prompts, int max_new,
          int cancel_after = -1, uint64_t cancel_id = 0, const GenerationParams* params = nullptr) {
    LoadedModel m = load_model({.model = testing::model_fixture("v3_noaux_tc")});
    cfg.context_length = 8192;
    ModelRunner runner(make_cpu_backend(), m.config, std::move(m.weights), slots, DType::F32);
    Scheduler sched(cfg, runner);
    std::vector<std::shared_ptr<Request>> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto r = std::make_shared<Request>();
      r->id = i;
      r->input_ids = prompts[i];
      if (params) r->params = *params;
      else r->params.temperature = 0;
      r->params.max_new_tokens = max_new;
      r->params.ignore_eos = true;
      reqs.push_back(r);
      sched.submit(r);
    }
    RunResult out;
    size_t finished = 0;
    for (int steps = 0; finished < reqs.size() && steps < 10000; ++steps) {
      sched.step();
      for (auto& r : reqs) {
        while (auto o = r->output->pop(std::chrono::milliseconds(0))) {
          auto& v = out.outputs[r->id];
          v.insert(v.end(), o->tokens.begin(), o->tokens.end());
          for (auto& lp : o->logprobs) out.logprobs[r->id].push_back(lp.logprob);
          out.cached[r->id] = o->cached_tokens;
          if (o->finish != FinishReason::None) {
            out.finish[r->id] = o->finish;
            finished++;
          }
        }
        if (cancel_after >= 0 && r->id == cancel_id && int(out.outputs[r->id].size()) >= cancel_after)
          r->output->cancel();
      }
    }
    EXPECT_EQ(finished, reqs.size());
    out.stats = sched.stats();
    // Everything not held by the radix cache went back to the allocator.
    EXPECT_EQ(out.stats.kv_slots_used, out.stats.kv_slots_cached);
    return out;
  }
};

std::vector<std::vector<int32_t>> shared_prefix_prompts() {
  auto prompts = testing::shared_prefix_prompts(40, 6, [](int i) { return 5 + 3 * i; });
  prompts.push_back(prompt_of(7, 3));
  prompts.push_back(prompt_of(8, 1));
  return prompts;
}

TEST_F(SchedulerTest, GreedyOutputsDoNotDependOnCacheChunkingPagingOrBatching) {
  auto prompts = shared_prefix_prompts();
  // Reference: each request alone, no cache, no chunking.
  std::map<uint64_t, std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SchedulerConfig cfg;
    cfg.radix_cache = false;
    cfg.chunked_prefill_size = -1;
    cfg.overlap_schedule = false;
    alone[i] = run(cfg, 512, {prompts[i]}, 10).outputs[0];
  }
  struct Variant {
    bool radix;
    int64_t chunk, page, max_running;
    SchedulePolicy policy;
    bool overlap;
    bool mixed = false;
  };
  for (Variant v : {Variant{true, 8192, 1, 256, SchedulePolicy::Fcfs, true},
                    Variant{true, 8192, 1, 256, SchedulePolicy::Fcfs, false},
                    Variant{false, 8192, 1, 256, SchedulePolicy::Fcfs, true},
                    Variant{true, 7, 1, 256, SchedulePolicy::Lpm, true}, Variant{true, 16, 4, 3, SchedulePolicy::Fcfs, true},
                    Variant{true, 16, 4, 3, SchedulePolicy::Fcfs, false}, Variant{false, -1, 4, 2, SchedulePolicy::Lpm, true},
                    Variant{true, 7, 1, 256, SchedulePolicy::Fcfs, true, true},
                    Variant{false, 16, 4, 3, SchedulePolicy::Fcfs, false, true}}) {
    SchedulerConfig cfg;
    cfg.overlap_schedule = v.overlap;
    cfg.radix_cache = v.radix;
    cfg.chunked_prefill_size = v.chunk;
    cfg.page_size = v.page;
    cfg.max_running_requests = v.max_running;
    cfg.policy = v.policy;
    cfg.mixed_chunk = v.mixed;
    RunResult r = run(cfg, 1024, prompts, 10);
    if (v.mixed) {
      EXPECT_GT(r.stats.mixed_steps, 0);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(r.outputs[i], alone[i]) << "request " << i << " radix " << v.radix << " chunk " << v.chunk << " page "
                                        << v.page << " overlap " << v.overlap << " mixed " << v.mixed;
      EXPECT_EQ(r.finish[i], FinishReason::Length);
    }
  }
}

TEST_F(SchedulerTest, SharedPrefixesAreServedFromTheCache) {
  auto prompts = shared_prefix_prompts();
  SchedulerConfig cfg;
  cfg.max_running_requests = 1;  // one at a time: each later request finds the earlier ones' prefix
  RunResult r = run(cfg, 1024, prompts, 4);
  EXPECT_EQ(r.cached[0], 0);
  for (int i = 1; i < 6; ++i) EXPECT_GE(r.cached[i], 40) << i;
  EXPECT_GE(r.stats.cached_prompt_tokens, 5 * 40);
}

TEST_F(SchedulerTest, ASmallPoolRetractsAndStillCompletesEveryRequestCorrectly) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt_of(i, 20 + i));
  std::map<uint64_t, std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SchedulerConfig cfg;
    cfg.radix_cache = false;
    alone[i] = run(cfg, 512, {prompts[i]}, 30).outputs[0];
  }
  for (auto [radix, overlap] : {std::pair{false, true}, std::pair{true, true}, std::pair{true, false}}) {
    SchedulerConfig cfg;
    cfg.radix_cache = radix;
    cfg.overlap_schedule = overlap;
    cfg.decode_reserve_tokens = 1;  // admit greedily so that decode runs out of KV
    RunResult r = run(cfg, 160, prompts, 30);  // 8 x ~55 tokens do not fit in 160 slots
    EXPECT_GT(r.stats.requests_retracted, 0);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(r.outputs[i], alone[i]) << "request " << i << " radix " << radix << " overlap " << overlap;
  }
}

TEST_F(SchedulerTest, ChunkedPrefillUnderKvPressureRetractsInsteadOfCuttingOffARequest) {
  // Two 150-token prompts in 32-token chunks with 50 new tokens each: 400 tokens, 255 slots. The
  // second's chunks must not take the first's next tokens; one of them is retracted and both
  // still give their full, unchanged outputs.
  std::vector<std::vector<int32_t>> prompts = {prompt_of(30, 150), prompt_of(31, 150)};
  std::map<uint64_t, std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SchedulerConfig cfg;
    cfg.radix_cache = false;
    alone[i] = run(cfg, 512, {prompts[i]}, 50).outputs[0];
  }
  for (auto [radix, overlap, mixed] : {std::tuple{false, false, false}, std::tuple{false, true, false},
                                       std::tuple{true, true, false}, std::tuple{true, true, true}}) {
    SchedulerConfig cfg;
    cfg.radix_cache = radix;
    cfg.overlap_schedule = overlap;
    cfg.mixed_chunk = mixed;
    cfg.chunked_prefill_size = 32;
    RunResult r = run(cfg, 256, prompts, 50);
    EXPECT_GT(r.stats.requests_retracted, 0) << "radix " << radix << " overlap " << overlap;
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(r.outputs[i], alone[i]) << "request " << i << " radix " << radix << " overlap " << overlap;
  }
}

TEST_F(SchedulerTest, APromptLargerThanTheKvPoolIsRefusedWithTheReason) {
  LoadedModel m = load_model({.model = testing::model_fixture("v3_noaux_tc")});
  ModelRunner runner(make_cpu_backend(), m.config, std::move(m.weights), 64, DType::F32);
  SchedulerConfig cfg;
  cfg.context_length = 8192;
  Scheduler sched(cfg, runner);
  auto r = std::make_shared<Request>();
  r->input_ids = prompt_of(3, 100);
  sched.submit(r);
  sched.step();
  auto o = r->output->pop(std::chrono::milliseconds(0));
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->finish, FinishReason::Abort);
  EXPECT_NE(o->error.find("does not fit the KV pool"), std::string::npos) << o->error;
}

TEST_F(SchedulerTest, OverlapScheduleDrawsTheSameSeededSamplesWithPenaltiesAndLogprobs) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(prompt_of(i + 20, 6 + 5 * i));
  GenerationParams p;
  p.temperature = 0.9f;
  p.top_k = 50;
  p.top_p = 0.95f;
  p.seed = 1234;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.2f;
  p.logprobs = 2;
  RunResult want, got;
  for (bool overlap : {false, true}) {
    SchedulerConfig cfg;
    cfg.overlap_schedule = overlap;
    cfg.chunked_prefill_size = 9;
    (overlap ? got : want) = run(cfg, 1024, prompts, 12, -1, 0, &p);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got.outputs[i], want.outputs[i]) << i;
    EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << i;
    EXPECT_EQ(got.outputs[i].size(), 12u);
  }
}

TEST_F(SchedulerTest, StopTokenIdsAndMaxTokensFinishRequests) {
  auto p = prompt_of(4, 12);
  SchedulerConfig cfg;
  RunResult plain = run(cfg, 512, {p}, 10);
  ASSERT_EQ(plain.outputs[0].size(), 10u);
  int32_t third = plain.outputs[0][2];
  LoadedModel m = load_model({.model = testing::model_fixture("v3_noaux_tc")});
  cfg.context_length = 8192;
  ModelRunner runner(make_cpu_backend(), m.config, std::move(m.weights), 512, DType::F32);
  Scheduler sched(cfg, runner);
  auto r = std::make_shared<Request>();
  r->input_ids = p;
  r->params.temperature = 0;
  r->params.max_new_tokens = 10;
  r->params.stop_token_ids = {third};
  sched.submit(r);
  std::vector<int32_t> got;
  FinishReason finish = FinishReason::None;
  int32_t matched = -1;
  for (int i = 0; i < 100 && finish == FinishReason::None; ++i) {
    sched.step();
    while (auto o = r->output->pop(std::chrono::milliseconds(0))) {
      got.insert(got.end(), o->tokens.begin(), o->tokens.end());
      if (o->finish != FinishReason::None) {
        finish = o->finish;
        matched = o->matched_stop_token;
      }
    }
  }
  // It stops at the first occurrence of the stop id (kept in the output, as SGLang does).
  size_t first = std::find(plain.outputs[0].begin(), plain.outputs[0].end(), third) - plain.outputs[0].begin();
  EXPECT_EQ(got, std::vector<int32_t>(plain.outputs[0].begin(), plain.outputs[0].begin() + int64_t(first) + 1));
  EXPECT_EQ(finish, FinishReason::Stop);
  EXPECT_EQ(matched, third);
  // The draw the overlap schedule launched past the stop is dropped, and its KV returned.
  for (int i = 0; i < 10 && sched.step(); ++i) {
  }
  EXPECT_FALSE(r->output->pop(std::chrono::milliseconds(0)));
  EngineStats st = sched.stats();
  EXPECT_EQ(st.kv_slots_used, st.kv_slots_cached);
  EXPECT_EQ(st.generation_tokens, int64_t(got.size()));
}

TEST_F(SchedulerTest, CancelledRequestsAreAbortedAndTheirKvFreed) {
  std::vector<std::vector<int32_t>> prompts = {prompt_of(1, 10), prompt_of(2, 12), prompt_of(3, 9)};
  SchedulerConfig cfg;
  RunResult r = run(cfg, 512, prompts, 40, /*cancel_after=*/3, /*cancel_id=*/1);
  EXPECT_EQ(r.finish[1], FinishReason::Abort);
  EXPECT_LT(r.outputs[1].size(), 40u);
  EXPECT_EQ(r.finish[0], FinishReason::Length);
  EXPECT_EQ(r.stats.requests_aborted, 1);
}

}  // namespace
}  // namespace mlaserve
