// serve's CUDA graph flags: what they parse to, the batch sizes captured, and the combinations
// refused at start; the other flags that parse to more than themselves.
#include <gtest/gtest.h>

#include "common/error.h"
#include "config/server_args.h"

namespace mlaserve {
namespace {

ServerArgs parse(std::vector<std::string> argv) {
  CLI::App app;
  ServerArgs a;
  register_server_args(app, a);
  argv.insert(argv.begin(), {"serve", "--model", "deepseek-v3-tiny"});
  std::vector<const char*> ptrs;
  for (auto& s : argv) ptrs.push_back(s.c_str());
  app.parse(int(ptrs.size()), ptrs.data());
  return a;
}

std::string refusal(const ServerArgs& a) {
  try {
    a.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ServerArgs, CudaGraphBatchSizesFollowSGLangsDefaultList) {
  EXPECT_TRUE(parse({}).decode_graph_batch_sizes().empty()) << "the CPU has no graphs";
  std::vector<int> sizes = parse({"--device", "cuda"}).decode_graph_batch_sizes();
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(std::vector<int>(sizes.begin(), sizes.begin() + 7), (std::vector<int>{1, 2, 4, 8, 12, 16, 24}));
  EXPECT_EQ(sizes.back(), 128);
  EXPECT_EQ(parse({"--device", "cuda", "--max-running-requests", "20"}).decode_graph_batch_sizes(),
            (std::vector<int>{1, 2, 4, 8, 12, 16, 20}));
  EXPECT_EQ(parse({"--device", "cuda", "--cuda-graph-max-bs", "10"}).decode_graph_batch_sizes(),
            (std::vector<int>{1, 2, 4, 8, 10}));
  EXPECT_EQ(parse({"--device", "cuda", "--cuda-graph-bs", "32", "1", "8", "8"}).decode_graph_batch_sizes(),
            (std::vector<int>{1, 8, 32}));
  EXPECT_TRUE(parse({"--device", "cuda", "--disable-cuda-graph"}).decode_graph_batch_sizes().empty());
}

TEST(ServerArgs, CudaGraphFlagsThatCannotWorkAreRefused) {
  EXPECT_EQ(refusal(parse({"--device", "cuda", "--cuda-graph-bs", "1", "4"})), "");
  EXPECT_NE(refusal(parse({"--cuda-graph-max-bs", "8"})).find("need --device cuda"), std::string::npos);
  EXPECT_NE(refusal(parse({"--device", "cuda", "--cuda-graph-bs", "0"})).find("must be positive"), std::string::npos);
  EXPECT_NE(refusal(parse({"--device", "cuda", "--disable-cuda-graph", "--cuda-graph-max-bs", "8"}))
                .find("contradicts"),
            std::string::npos);
}

TEST(ServerArgs, SharedExpertsFusionIsOnUnlessDisabled) {
  EXPECT_FALSE(parse({}).disable_shared_experts_fusion);
  ServerArgs off = parse({"--disable-shared-experts-fusion"});
  EXPECT_TRUE(off.disable_shared_experts_fusion);
  EXPECT_EQ(refusal(off), "");
  EXPECT_EQ(off.to_json()["disable_shared_experts_fusion"], true);
}

TEST(ServerArgs, MixedChunkNeedsChunkedPrefill) {
  EXPECT_EQ(refusal(parse({"--enable-mixed-chunk"})), "");
  EXPECT_NE(refusal(parse({"--enable-mixed-chunk", "--chunked-prefill-size", "-1"})).find("needs chunked prefill"),
            std::string::npos);
}

TEST(ServerArgs, ReasoningParserNamesOneOfDeepSeeks) {
  EXPECT_EQ(parse({}).reasoning_parser, "");
  for (const char* name : {"deepseek-r1", "deepseek-v3"}) {
    ServerArgs a = parse({"--reasoning-parser", name});
    EXPECT_EQ(refusal(a), "");
    EXPECT_EQ(a.to_json()["reasoning_parser"], name);
  }
  EXPECT_NE(refusal(parse({"--reasoning-parser", "qwen3"})).find("expected deepseek-r1 or deepseek-v3"),
            std::string::npos);
}

}  // namespace
}  // namespace mlaserve
