// The `bench-one-batch` command's contract on the CPU: a row (and a --result-filename JSON line) per
// configuration, --num-layers, and clear errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "test_paths.h"

namespace mlaserve {
namespace {

testing::CommandResult run(const std::string& args) {
  return testing::run_mlaserve("--log-level error bench-one-batch " + args + " 2>&1");
}

// A run with --result-filename: what it printed, and the JSON lines it wrote.
struct Results {
  testing::CommandResult r;
  std::vector<nlohmann::json> lines;
};
Results run_with_results(const std::string& args) {
  testing::TempDir dir("bench");
  const std::string file = dir.file("results.jsonl");
  Results x{run(args + " --result-filename " + file), {}};
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) x.lines.push_back(nlohmann::json::parse(line));
  return x;
}

TEST(BenchOneBatchCli, OneRowAndOneJsonLineAConfiguration) {
  auto [r, lines] = run_with_results("--model deepseek-v3-tiny --batch-size 1 2 --input-len 5 --output-len 2 3");
  ASSERT_EQ(r.status, 0) << r.out;
  std::istringstream rows(r.out);
  std::string header;
  std::getline(rows, header);
  EXPECT_NE(header.find("decode ms"), std::string::npos) << r.out;
  ASSERT_EQ(lines.size(), 4u) << r.out;
  int i = 0;
  for (int bs : {1, 2})
    for (int out : {2, 3}) {
      const nlohmann::json& j = lines[size_t(i++)];
      EXPECT_EQ(j["batch_size"], bs);
      EXPECT_EQ(j["input_len"], 5);
      EXPECT_EQ(j["output_len"], out);
      EXPECT_EQ(j["num_layers"], 4);
      EXPECT_EQ(j["device"], "cpu");
      EXPECT_GT(j["median_decode_latency_s"].get<double>(), 0.0);
      EXPECT_GT(j["prefill_throughput"].get<double>(), 0.0);
      EXPECT_GT(j["decode_weight_bytes"].get<double>(), 0.0);
      std::string row;
      ASSERT_TRUE(std::getline(rows, row)) << r.out;
      std::istringstream fields(row);
      int row_bs = 0, row_in = 0, row_out = 0;
      fields >> row_bs >> row_in >> row_out;
      EXPECT_EQ(row_bs, bs) << row;
      EXPECT_EQ(row_in, 5) << row;
      EXPECT_EQ(row_out, out) << row;
    }
}

TEST(BenchOneBatchCli, NumLayersCutsTheModelAndFp8Loads) {
  auto [r, lines] = run_with_results("--model deepseek-v3-tiny --num-layers 2 --quantization fp8 "
                                     "--kv-cache-dtype fp8_e4m3 --input-len 4 --output-len 2");
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0]["num_layers"], 2);
  EXPECT_EQ(lines[0]["quantization"], "fp8");
  EXPECT_EQ(lines[0]["kv_cache_dtype"], "F8_E4M3");
}

TEST(BenchOneBatchCli, BadArgumentsAreClearErrors) {
  testing::CommandResult r = run("--model deepseek-v3-tiny --num-layers 9");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--num-layers 9 exceeds the model's 4"), std::string::npos) << r.out;
  r = run("--model " + testing::model_fixture("v2_greedy") + " --load-format auto --num-layers 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--num-layers needs --load-format dummy"), std::string::npos) << r.out;
  r = run("--model deepseek-v3-tiny --kv-cache-dtype fp8_e5m2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("fp8_e5m2 is not supported"), std::string::npos) << r.out;
  r = run("--model deepseek-v3-tiny --quantization awq");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--quantization awq: only fp8"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mlaserve
