// The memory plan: the KV pool gets what --mem-fraction-static leaves after the weights, never more
// than is free beside the forward's reserve, and impossible plans are refused with the reason.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/memory_plan.h"

namespace mlaserve {
namespace {

constexpr uint64_t GiB = 1ull << 30;

MemoryPlanInput h200_like() {
  MemoryPlanInput in;
  in.device_total = 140 * GiB;
  in.device_free = 110 * GiB;  // 30 GiB of weights and context
  in.kv_bytes_per_token = 27 * 576 * 2;
  in.activation_bytes = 4 * GiB;
  in.workspace_bytes = GiB / 4;
  in.page_size = 64;
  return in;
}

TEST(MemoryPlan, TheStaticFractionHoldsWeightsAndKvPool) {
  MemoryPlanInput in = h200_like();
  MemoryPlan p = plan_memory(in);
  EXPECT_DOUBLE_EQ(p.fraction, kDefaultMemFractionStatic);
  uint64_t kv = uint64_t(140.0 * double(GiB) * kDefaultMemFractionStatic) - 30 * GiB;
  EXPECT_EQ(p.kv_tokens, int64_t(kv / in.kv_bytes_per_token) / 64 * 64);
  EXPECT_EQ(p.kv_pool, uint64_t(p.kv_tokens) * in.kv_bytes_per_token);
  EXPECT_LE(p.in_use_before + p.kv_pool, p.static_limit);
  EXPECT_NE(p.summary().find("KV pool"), std::string::npos);

  in.max_total_tokens = 100000;  // a cap, rounded to pages
  EXPECT_EQ(plan_memory(in).kv_tokens, 100000 / 64 * 64);
  in.max_total_tokens = 0;
  in.mem_fraction_static = 0.5;
  EXPECT_LT(plan_memory(in).kv_tokens, p.kv_tokens);
}

TEST(MemoryPlan, MemoryOtherProcessesHoldIsNotPlanned) {
  MemoryPlanInput in = h200_like();
  in.device_free = 40 * GiB;  // someone else holds 70 GiB
  MemoryPlan p = plan_memory(in);
  EXPECT_LE(p.kv_pool + in.activation_bytes + in.workspace_bytes, in.device_free);
  // As in SGLang: what others hold counts against the static fraction (119 - 100 GiB here).
  EXPECT_GT(p.kv_pool, 18 * GiB);
  EXPECT_LT(p.kv_pool, 19 * GiB);
}

TEST(MemoryPlan, ImpossiblePlansAreRefusedWithTheReason) {
  MemoryPlanInput in = h200_like();
  in.mem_fraction_static = 0.99;  // 1.4 GiB left for a 4.25 GiB forward
  try {
    plan_memory(in);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lower it"), std::string::npos) << e.what();
  }
  in = h200_like();
  in.mem_fraction_static = 0.2;  // 28 GiB cannot hold 30 GiB of weights
  try {
    plan_memory(in);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, ForwardActivationsGrowWithTokensAndContext) {
  ModelConfig c = *ModelConfig::preset("deepseek-v3");
  uint64_t decode = forward_activation_bytes(c, 256, 256, 256, 2);
  uint64_t prefill = forward_activation_bytes(c, 8192, 8192 + 163840, 256, 2);
  EXPECT_GT(prefill, decode);
  EXPECT_LT(forward_activation_bytes(c, 1, 2, 1, 2), forward_activation_bytes(c, 2, 4, 2, 2));
  // The MHA prefill form decompresses the whole context: 172k tokens x 128 heads x 256 in BF16.
  EXPECT_GT(prefill, uint64_t(172032) * 128 * 256 * 2);
  EXPECT_LT(prefill, 40 * GiB);
}

TEST(MemoryPlan, TheCpuPoolIsMaxTotalTokensInWholePages) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *ModelConfig::preset("deepseek-v3-tiny");
  KvPoolRequest r;
  r.max_total_tokens = 1000;
  r.page_size = 64;
  EXPECT_EQ(kv_pool_tokens(*cpu, c, DType::F32, r), 960);
}

}  // namespace
}  // namespace mlaserve
