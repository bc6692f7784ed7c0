// The tuned FP8 GEMM and FP8 MoE tables: nearest-count lookup, the files' round trip, clear errors
// for bad files, where the folder is looked for, and what the CPU backend and the CLI do with tuning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "kernels/gemm_tuning.h"
#include "kernels/moe_tuning.h"
#include "kernels/ops.h"
#include "test_paths.h"

namespace mlaserve {
namespace {

Fp8GemmChoice skinny(int row_tiles, int splits, int k_warps = 8, int depth = 0) {
  return {Fp8GemmChoice::Kernel::Skinny, row_tiles, splits, 0.01, k_warps, depth};
}
const Fp8GemmChoice kCublaslt{Fp8GemmChoice::Kernel::Cublaslt, 0, 0, 0.02};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8GemmTuning, FindsTheNearestTunedTokenCount) {
  Fp8GemmTuning t;
  t.set(7168, 16384, 1, skinny(2, 2));
  t.set(7168, 16384, 4, skinny(2, 1));
  t.set(7168, 16384, 16, kCublaslt);
  EXPECT_EQ(t.find(7168, 16384, 1), skinny(2, 2));
  EXPECT_EQ(t.find(7168, 16384, 2), skinny(2, 2)) << "a tie goes to the smaller count";
  EXPECT_EQ(t.find(7168, 16384, 3), skinny(2, 1));
  EXPECT_EQ(t.find(7168, 16384, 10), skinny(2, 1));
  EXPECT_EQ(t.find(7168, 16384, 11), kCublaslt);
  EXPECT_EQ(t.find(7168, 16384, 24), kCublaslt) << "up to half past the largest count";
  EXPECT_FALSE(t.find(7168, 16384, 25)) << "far past what was tuned: the defaults";
  EXPECT_FALSE(t.find(7168, 1536, 1)) << "a shape not tuned";
}

TEST(Fp8GemmTuning, FileRoundTripsAndIsNamedByDevice) {
  testing::TempDir dir("tuning");
  Fp8GemmTuning t;
  t.set_device("NVIDIA H200");
  t.set(24576, 1536, 1, skinny(1, 1, 1, 4));
  t.set(24576, 1536, 4, skinny(2, 1, 2));
  Fp8GemmChoice from_codes = skinny(1, 1, 1, 3);
  from_codes.codes_in = true;
  t.set(24576, 1536, 8, from_codes, skinny(2, 1, 1));
  t.set(24576, 1536, 16, kCublaslt, skinny(2, 1, 1, 3));
  t.set(24576, 1536, 12, kCublaslt, from_codes);  // from rows: quantized by a launch of their own first
  Fp8GemmChoice configured = kCublaslt;
  configured.lt = {66, 17, 36, 2, 0, 4};
  t.set(2112, 7168, 1024, configured);
  Fp8GemmChoice warp_specialized;
  warp_specialized.kernel = Fp8GemmChoice::Kernel::Wgmma, warp_specialized.waves = 2, warp_specialized.group_m = 8;
  t.set(2112, 7168, 4096, warp_specialized, kCublaslt);
  Fp8GemmChoice pairs = warp_specialized;
  pairs.cluster = 2;
  t.set(2112, 7168, 2048, pairs);
  const std::string path = dir.file(Fp8GemmTuning::file_name(t.device()));
  EXPECT_EQ(Fp8GemmTuning::file_name("NVIDIA H200"), "fp8_gemm_NVIDIA_H200.json");
  EXPECT_EQ(Fp8GemmTuning::file_name("NVIDIA H100 80GB HBM3"), "fp8_gemm_NVIDIA_H100_80GB_HBM3.json");
  t.save(path);
  t.save(path);  // over a file that exists: replaced whole, no scratch file left beside it
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  Fp8GemmTuning back = Fp8GemmTuning::load(path);
  EXPECT_EQ(back.device(), "NVIDIA H200");
  EXPECT_EQ(back.shapes(), 2u);
  EXPECT_EQ(back.find(24576, 1536, 1), skinny(1, 1, 1, 4));
  EXPECT_EQ(back.find(24576, 1536, 4), skinny(2, 1, 2));
  EXPECT_EQ(back.find(24576, 1536, 8), from_codes);
  EXPECT_EQ(back.find(24576, 1536, 16), kCublaslt);
  EXPECT_EQ(back.find(2112, 7168, 1024), configured);
  EXPECT_EQ(back.find(2112, 7168, 4096), warp_specialized);
  EXPECT_EQ(back.find(2112, 7168, 2048), pairs);
  EXPECT_EQ(back.find_from_rows(2112, 7168, 4096), kCublaslt);
  EXPECT_EQ(back.find(24576, 1536, 16).value().lt, CublasLtConfig{}) << "no \"lt\": the heuristic's pick";
  // An input that comes as BF16 rows gets the entry's launch from rows where it has one.
  EXPECT_EQ(back.find_from_rows(24576, 1536, 4), skinny(2, 1, 2));
  EXPECT_EQ(back.find_from_rows(24576, 1536, 8), skinny(2, 1, 1));
  EXPECT_EQ(back.find_from_rows(24576, 1536, 15), skinny(2, 1, 1, 3));
  EXPECT_EQ(back.find_from_rows(24576, 1536, 12), from_codes);
  EXPECT_EQ(back.to_json()["shapes"]["N=24576,K=1536"]["12"]["rows"]["x"], "quantized");
  EXPECT_FALSE(back.find_from_rows(24576, 1536, 25));
  EXPECT_EQ(back.to_json(), t.to_json());
  Fp8GemmTuning merged;
  merged.set(24576, 1536, 16, skinny(4, 1));
  merged.set(7168, 2048, 1, skinny(4, 1));
  merged.merge(back);
  EXPECT_EQ(merged.shapes(), 3u);
  EXPECT_EQ(merged.find_from_rows(24576, 1536, 16), skinny(2, 1, 1, 3)) << "the merged entry, with its rows";
  EXPECT_EQ(to_string(from_codes), "skinny row_tiles=1 splits=1 k_warps=1 depth=3 x=codes");
  EXPECT_EQ(to_string(kCublaslt), "cublaslt");
  EXPECT_EQ(to_string(configured), "cublaslt algo=66 tile=17 stages=36 cluster=2 swizzle=0 custom=4");
  EXPECT_EQ(to_string(warp_specialized), "wgmma waves=2 group_m=8");
  EXPECT_EQ(to_string(pairs), "wgmma waves=2 group_m=8 cluster=2");
  // Files written before the launches had k_warps: all 8 warps on K; before depth: x in registers.
  const auto old = Fp8GemmTuning::from_json(
      nlohmann::json::parse(R"({"kernel": "fp8_w8a8_block128", "shapes": {"N=128,K=1024": {"1": )"
                            R"({"kernel": "skinny", "row_tiles": 2, "splits": 1}}}})"),
      "old.json");
  EXPECT_EQ(old.find(128, 1024, 1), skinny(2, 1, 8));
  // Before clusters: single CTAs.
  const auto single = Fp8GemmTuning::from_json(
      nlohmann::json::parse(R"({"kernel": "fp8_w8a8_block128", "shapes": {"N=128,K=1024": {"1": )"
                            R"({"kernel": "wgmma", "waves": 2, "group_m": 8}}}})"),
      "single.json");
  EXPECT_EQ(single.find(128, 1024, 1), warp_specialized);
}

// The tables committed for the GPUs we tuned on load as the runtime reads them, each naming its device.
TEST(Fp8GemmTuning, CommittedTablesLoad) {
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(MLASERVE_SOURCE_DIR) + "/configs/tuning")) {
    const std::string name = f.path().filename().string(), path = f.path().string();
    SCOPED_TRACE(name);
    if (name.rfind("fp8_gemm_", 0) == 0) {
      const Fp8GemmTuning t = Fp8GemmTuning::load(path);
      EXPECT_EQ(Fp8GemmTuning::file_name(t.device()), name);
      EXPECT_GT(t.shapes(), 0u);
    } else {
      ASSERT_EQ(name.rfind("moe_fp8_", 0), 0u) << "a file of neither table";
      EXPECT_EQ(MoeTuning::file_name(MoeTuning::load(path).device()), name);
    }
    ++files;
  }
  EXPECT_GE(files, 4);
}

TEST(Fp8GemmTuning, BadFilesGetErrorsNamingTheFault) {
  auto from = [](const char* text) {
    return error_of([&] { Fp8GemmTuning::from_json(nlohmann::json::parse(text), "f.json"); });
  };
  const std::string head = R"({"kernel": "fp8_w8a8_block128", "shapes": )";
  EXPECT_NE(from(R"({"kernel": "other", "shapes": {}})").find("\"kernel\" must be"), std::string::npos);
  EXPECT_NE(from((head + R"({"N=1,K": {}}})").c_str()).find("shape key \"N=1,K\""), std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"x": {"kernel": "cublaslt"}}}})").c_str()).find("count \"x\""),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "magic"}}}})").c_str()).find("unknown kernel \"magic\""),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "skinny", "row_tiles": 3, "splits": 1}}}})").c_str())
                .find("row_tiles 3"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "skinny", "row_tiles": 2, "splits": 1, )"
                          R"("k_warps": 3}}}})").c_str())
                .find("k_warps 3"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "skinny", "row_tiles": 2, "splits": 1, )"
                          R"("depth": 1}}}})").c_str())
                .find("depth 1"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "skinny", "row_tiles": 2, "splits": 1, )"
                          R"("x": "fp4"}}}})").c_str())
                .find("\"x\" must be"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "skinny"}}}})").c_str()).find("needs integer"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "cublaslt", "rows": {"kernel": "skinny", )"
                          R"("row_tiles": 2, "splits": 1, "x": "codes"}}}}})").c_str())
                .find("tokens 1 rows: \"x\" must be \"quantized\" or \"rows\""),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "cublaslt", "lt": {"algo": 66, "tile": 17}}}}})").c_str())
                .find("\"lt\" needs a non-negative integer \"stages\""),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "wgmma", "waves": 3, "group_m": 8}}}})").c_str())
                .find("waves 3"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "wgmma", "waves": 2, "group_m": 8, "cluster": 4}}}})")
                     .c_str())
                .find("cluster 4"),
            std::string::npos);
  EXPECT_NE(from((head + R"({"N=128,K=128": {"1": {"kernel": "wgmma", "waves": 2}}}})").c_str())
                .find("needs integer \"waves\" and \"group_m\""),
            std::string::npos);
  testing::TempDir dir("tuning_bad");
  std::ofstream(dir.file("broken.json")) << "{ not json";
  EXPECT_NE(error_of([&] { Fp8GemmTuning::load(dir.file("broken.json")); }).find("broken.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Fp8GemmTuning::load(dir.file("missing.json")); }).find("cannot read"), std::string::npos);
}

TEST(Fp8GemmTuning, TuningDirComesFromTheFlagTheEnvironmentOrBesideTheBinary) {
  EXPECT_EQ(tuning_dir("/x/y"), "/x/y");
  ::setenv("MLASERVE_TUNING_DIR", "/from/env", 1);
  EXPECT_EQ(tuning_dir(""), "/from/env");
  ::unsetenv("MLASERVE_TUNING_DIR");
  const std::string d = tuning_dir("");
  EXPECT_EQ(d.substr(d.size() - std::string("configs/tuning").size()), "configs/tuning");
}

TEST(Fp8GemmTuning, TheCpuBackendHasNothingToTuneAndLoadsNothing) {
  auto cpu = make_cpu_backend();
  EXPECT_EQ(cpu->device_name(), "");
  EXPECT_NE(error_of([&] { cpu->tune_fp8_gemm({{128, 128}}, {1}, [](const std::string&) {}); }).find("--device cuda"),
            std::string::npos);
  load_tuned_configs(*cpu, "/no/such/folder");  // nothing to load for the CPU: no error
}

// What `mlaserve ARGS` prints (stdout and stderr); it must fail.
std::string failing_command_output(const std::string& args) {
  testing::CommandResult r = testing::run_mlaserve(args + " 2>&1");
  EXPECT_NE(r.status, 0) << args;
  return r.out;
}

TEST(Fp8GemmTuning, TuneCommandOnTheCpuIsRefusedClearly) {
  const std::string out = failing_command_output("tune-fp8-gemm --device cpu --shape 256,256");
  EXPECT_NE(out.find("no kernels to tune"), std::string::npos) << out;
}

MoeGemmChoice wgmma(int rows, int k_splits, int n_tiles) {
  return {MoeGemmChoice::Kernel::Wgmma, rows, k_splits, n_tiles, 0.05};
}

TEST(MoeTuning, FindsTheNearestRowCountOfTheSameProduct) {
  MoeTuning t;
  t.set(257, 512, 7168, 9, wgmma(16, 8, 1));
  t.set(257, 512, 7168, 288, wgmma(16, 1, 1));
  t.set(257, 7168, 256, 9, wgmma(16, 1, 8));
  EXPECT_EQ(t.find(257, 512, 7168, 9), wgmma(16, 8, 1));
  EXPECT_EQ(t.find(257, 512, 7168, 100), wgmma(16, 8, 1));
  EXPECT_EQ(t.find(257, 512, 7168, 200), wgmma(16, 1, 1));
  EXPECT_EQ(t.find(257, 7168, 256, 9), wgmma(16, 1, 8)) << "down is its own product";
  EXPECT_FALSE(t.find(256, 512, 7168, 9)) << "other experts: another layer";
  EXPECT_FALSE(t.find(257, 512, 7168, 433)) << "far past what was tuned";
}

TEST(MoeTuning, FileRoundTripsAndBadFilesGetErrorsNamingTheFault) {
  testing::TempDir dir("moe_tuning");
  MoeTuning t;
  t.set_device("NVIDIA H200");
  t.set(257, 512, 7168, 9, wgmma(16, 8, 1));
  t.set(257, 512, 7168, 4096, {MoeGemmChoice::Kernel::MmaSync, 32, 1, 2, 0.4});
  EXPECT_EQ(MoeTuning::file_name("NVIDIA H200"), "moe_fp8_NVIDIA_H200.json");
  const std::string path = dir.file(MoeTuning::file_name(t.device()));
  t.save(path);
  MoeTuning back = MoeTuning::load(path);
  EXPECT_EQ(back.device(), "NVIDIA H200");
  EXPECT_EQ(back.to_json(), t.to_json());
  EXPECT_EQ(back.find(257, 512, 7168, 4096), (MoeGemmChoice{MoeGemmChoice::Kernel::MmaSync, 32, 1, 2}));

  auto from = [](const std::string& text) {
    return error_of([&] { MoeTuning::from_json(nlohmann::json::parse(text), "m.json"); });
  };
  const std::string head = R"({"kernel": "moe_fp8_w8a8_block128", "shapes": )";
  EXPECT_NE(from(R"({"kernel": "fp8_w8a8_block128", "shapes": {}})").find("\"kernel\" must be"), std::string::npos);
  EXPECT_NE(from(head + R"({"N=1,K=2": {}}})").find("shape key \"N=1,K=2\""), std::string::npos);
  const std::string shape = head + R"({"E=8,N=256,K=256": {"1": )";
  EXPECT_NE(from(shape + R"({"kernel": "triton", "tile_rows": 16, "k_splits": 1, "n_tiles": 1}}}})")
                .find("unknown kernel \"triton\""),
            std::string::npos);
  EXPECT_NE(from(shape + R"({"kernel": "wgmma", "tile_rows": 48, "k_splits": 1, "n_tiles": 1}}}})")
                .find("tile_rows 48"),
            std::string::npos);
  EXPECT_NE(from(shape + R"({"kernel": "mma", "tile_rows": 16, "k_splits": 1, "n_tiles": 1}}}})")
                .find("tile_rows 16"),
            std::string::npos);
  EXPECT_NE(from(shape + R"({"kernel": "wgmma", "tile_rows": 16, "n_tiles": 1}}}})").find("\"k_splits\" must be"),
            std::string::npos);
  EXPECT_NE(from(shape + R"({"kernel": "wgmma", "tile_rows": 16, "k_splits": 0, "n_tiles": 1}}}})")
                .find("k_splits 0"),
            std::string::npos);
  EXPECT_NE(from(head + R"({"E=8,N=256,K=256": {"0": {"kernel": "wgmma", "tile_rows": 16, "k_splits": 1, )"
                         R"("n_tiles": 1}}}})")
                .find("count \"0\""),
            std::string::npos);
}

TEST(MoeTuning, TuneMoeOnTheCpuIsRefusedClearly) {
  auto cpu = make_cpu_backend();
  EXPECT_NE(error_of([&] { cpu->tune_moe({}, [](const std::string&) {}); }).find("--device cuda"), std::string::npos);
  std::string out = failing_command_output("tune-moe --device cpu --model deepseek-v2-lite");
  EXPECT_NE(out.find("no kernels to tune"), std::string::npos) << out;
  out = failing_command_output("tune-moe --device cpu --model deepseek-v2-lite --tp-size 3");
  EXPECT_NE(out.find("--tp-size 3"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlaserve
