// DecodeGraphs on the CPU, through a backend whose "graph" keeps the captured work and runs it
// again at replay: the batch layout (static index buffers, padding rows on the scratch slot,
// sizes that fall back to eager forwards) gives exactly the eager logits, in CI without a GPU.
// tests/gpu/decode_graphs_test.cc checks the same with real CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/model_runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/load_model.h"
#include "common/error.h"
#include "test_paths.h"

namespace mlaserve {
namespace {

class ReplayingCpuBackend final : public cpu::CpuBackend {
 public:
  bool supports_graphs() const override { return true; }
  std::unique_ptr<BackendGraph> capture(const std::function<void()>& work) override {
    work();
    ++captures;
    return std::make_unique<Replay>(work);
  }
  int captures = 0;

 private:
  struct Replay final : BackendGraph {
    explicit Replay(std::function<void()> w) : work(std::move(w)) {}
    void replay() override { work(); }
    std::function<void()> work;
  };
};

struct Runners {
  std::unique_ptr<ModelRunner> graphs, eager;
};

Runners make_runners(const std::vector<int>& sizes) {
  std::string dir = testing::model_fixture("v3_mla_dims");
  LoadedModel a = load_model({.model = dir}), b = load_model({.model = dir});
  Runners r;
  r.graphs = std::make_unique<ModelRunner>(std::make_unique<ReplayingCpuBackend>(), a.config, std::move(a.weights),
                                           1024, DType::F32);
  r.eager = std::make_unique<ModelRunner>(make_cpu_backend(), b.config, std::move(b.weights), 1024, DType::F32);
  r.graphs->capture_decode_graphs(sizes);
  return r;
}

// n sequences of different lengths, prefilled in both runners; then `steps` decode steps of the
// eager runner's argmax. True when every step's logits are bit-identical.
bool same_decode(Runners& r, int n, int steps) {
  std::vector<SequenceInput> seqs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int t = 0; t < 4 + 7 * i; ++t) {
      seqs[size_t(i)].new_tokens.push_back(int32_t(3 + (i * 31 + t * 7) % 500));
      seqs[size_t(i)].slots.push_back(int32_t(1000 - 100 * i - t));
    }
  r.eager->forward(seqs);
  r.graphs->forward(seqs);
  std::vector<int32_t> next(seqs.size(), 7);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].new_tokens = {next[i]};
      seqs[i].slots.push_back(seqs[i].slots.back() - 1);
    }
    Tensor want = r.eager->forward(seqs), got = r.graphs->forward(seqs);
    if (got.shape() != want.shape() || std::memcmp(got.raw(), want.raw(), want.nbytes()) != 0) return false;
    int64_t V = want.size(1);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const float* row = want.data<float>() + int64_t(i) * V;
      next[i] = int32_t(std::max_element(row, row + V) - row);
    }
  }
  return true;
}

TEST(DecodeGraphsOnCpu, CapturedPaddedAndUncapturedSizesGiveTheEagerLogits) {
  Runners r = make_runners({1, 4, 2});
  EXPECT_EQ(r.graphs->decode_graph_sizes(), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(static_cast<ReplayingCpuBackend&>(r.graphs->backend()).captures, 3);
  EXPECT_TRUE(same_decode(r, 1, 4));  // its own size
  EXPECT_TRUE(same_decode(r, 3, 4));  // padded to 4: the padding row writes the scratch slot only
  EXPECT_TRUE(same_decode(r, 4, 3));
  EXPECT_TRUE(same_decode(r, 6, 3));  // no graph holds 6: eager
}

TEST(DecodeGraphsOnCpu, TheCpuBackendItselfHasNoGraphs) {
  std::string dir = testing::model_fixture("v3_mla_dims");
  LoadedModel m = load_model({.model = dir});
  ModelRunner runner(make_cpu_backend(), m.config, std::move(m.weights), 64, DType::F32);
  try {
    runner.capture_decode_graphs({1, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need --device cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mlaserve
