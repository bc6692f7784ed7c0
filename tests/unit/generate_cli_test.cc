// The `generate` command's contract: --json output and --dump-logits, and clear errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "test_paths.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

testing::CommandResult run(const std::string& args) {
  return testing::run_mlaserve("--log-level error " + args + " 2>&1");
}

TEST(GenerateCli, JsonOutputMatchesTheFixture) {
  std::ifstream in(testing::model_fixture("v3_noaux_tc") + "/reference.json");
  auto ref = nlohmann::json::parse(in);
  auto prompt = ref["prompts"][2].get<std::vector<int>>();
  std::string ids;
  for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  testing::TempDir dir("gen");
  testing::CommandResult r = run("generate --model " + testing::model_fixture("v3_noaux_tc") + " --input-ids " + ids +
                 " --max-new-tokens 12 --temperature 0 --ignore-eos --json --dump-logits " + dir.file("l.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["input_ids"], ref["prompts"][2]);
  EXPECT_EQ(j["output_ids"], ref["greedy_continuations"][2]);
  auto logits = SafetensorsFile::open(dir.file("l.safetensors"));
  EXPECT_EQ(logits->info("logits").shape, (Shape{int64_t(prompt.size()), 512}));
  EXPECT_EQ(logits->info("logits").dtype, DType::F32);
}

TEST(GenerateCli, SharedExpertsFusionOffGivesTheSameTokens) {
  // v2_greedy has two shared experts: fused by default, apart with the flag; transformers' tokens both ways.
  std::ifstream in(testing::model_fixture("v2_greedy") + "/reference.json");
  auto ref = nlohmann::json::parse(in);
  std::string ids;
  for (int id : ref["prompts"][0].get<std::vector<int>>()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  size_t n = ref["greedy_continuations"][0].size();
  for (std::string flag : {"", " --disable-shared-experts-fusion"}) {
    testing::CommandResult r = run("generate --model " + testing::model_fixture("v2_greedy") + " --input-ids " + ids +
                   " --max-new-tokens " + std::to_string(n) + " --ignore-eos --json" + flag);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"], ref["greedy_continuations"][0]) << flag;
  }
}

TEST(GenerateCli, SmallPresetPrintsTokens) {
  testing::CommandResult r = run("generate --model deepseek-v3-tiny --load-format dummy --input-ids 0,100,2000 --max-new-tokens 4 "
                 "--ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["output_ids"].size(), 4u);
  // Sampling with a seed is reproducible.
  std::string sampled = "generate --model deepseek-v2-lite-tiny --input-ids 5,6,7 --max-new-tokens 5 --ignore-eos "
                        "--temperature 0.8 --top-p 0.9 --sampling-seed 42 --json";
  EXPECT_EQ(run(sampled).out, run(sampled).out);
}

TEST(GenerateCli, PromptTextGoesThroughTheTokenizer) {
  std::string tok = testing::source_dir() + "/../shared/tokenizers/deepseek-v3";
  testing::CommandResult r = run("generate --model deepseek-v3-tiny --prompt 'Hello, world' --tokenizer-path " + tok +
                 " --max-new-tokens 3 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["input_ids"], nlohmann::json({0, 19923, 14, 2058}));  // BOS "Hello" "," " world"
  EXPECT_EQ(j["output_ids"].size(), 3u);
  EXPECT_TRUE(j["text"].is_string());
}

TEST(GenerateCli, BadArgumentsAreClearErrors) {
  testing::CommandResult r = run("generate --model deepseek-v3-tiny --input-ids 1,x,3");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("'x' is not an integer"), std::string::npos) << r.out;
  r = run("generate --model deepseek-v3-tiny --input-ids 1,999999999");
  EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
  r = run("generate --model /nonexistent/folder --input-ids 1");
  EXPECT_NE(r.out.find("neither a checkpoint folder nor a preset"), std::string::npos) << r.out;
}

TEST(GenerateCli, Fp8WeightsAndKvCache) {
  std::string model = "generate --model " + testing::model_fixture("v3_noaux_tc") + " --input-ids 5,6,7 ";
  testing::CommandResult r = run(model + "--max-new-tokens 4 --ignore-eos --json --quantization fp8 --kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"].size(), 4u);
  r = run(model + "--kv-cache-dtype fp8_e5m2");
  EXPECT_NE(r.out.find("fp8_e5m2 is not supported"), std::string::npos) << r.out;
  r = run(model + "--quantization awq");
  EXPECT_NE(r.out.find("--quantization awq: only fp8"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mlaserve
