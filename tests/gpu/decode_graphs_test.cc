// Decode through CUDA graphs against eager forwards of the same model on the same GPU: a batch
// whose size was captured gives the very same logits; a padded one (3 sequences in the graph of
// 4) gives logits within BF16 rounding; batches no graph takes (prefill, too many sequences) run
// eagerly. Also with FP8 weights and with an FP8 KV cache.
#include "gpu_test_util.h"

#include "engine/model_runner.h"
#include "kernels/cuda/moe_experts.h"
#include "model/load_model.h"

namespace mlaserve {
namespace {

using namespace gputest;

struct Pair {
  std::unique_ptr<ModelRunner> graphs, eager;
};

ModelLoadOptions fixture_model() {
  return {.model = std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/models/v3_mla_dims"};
}

// grouped: the MoE prefill path through the grouped GEMM (capturable) or per-expert GEMMs (not).
Pair make_runners(const std::vector<int>& sizes, bool grouped = true, const ModelLoadOptions& model = fixture_model(),
                  DType kv_dtype = DType::BF16) {
  LoadedModel a = load_model(model), b = load_model(model);
  Pair p;
  p.graphs = std::make_unique<ModelRunner>(make_backend("cuda"), a.config, std::move(a.weights), 1024, kv_dtype);
  p.eager = std::make_unique<ModelRunner>(make_backend("cuda"), b.config, std::move(b.weights), 1024, kv_dtype);
  for (ModelRunner* r : {p.graphs.get(), p.eager.get()})
    dynamic_cast<cuda::CudaBackend&>(r->backend()).moe_runner().grouped_gemm = grouped;
  p.graphs->capture_decode_graphs(sizes);
  return p;
}

// n sequences of different lengths at slots spread over the pool; prefilled in both runners.
std::vector<SequenceInput> prefill(Pair& p, int n) {
  std::vector<SequenceInput> seqs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    // Up to 8 sequences: long ones 100 slots apart; more: short ones 10 apart (a few decode steps).
    int len = n <= 8 ? 5 + 9 * i : 2 + i % 5, base = 1000 - (n <= 8 ? 100 : 10) * i;
    for (int t = 0; t < len; ++t) {
      seqs[size_t(i)].new_tokens.push_back(int32_t(3 + (i * 31 + t * 7) % 500));
      seqs[size_t(i)].slots.push_back(int32_t(base - t));
    }
  }
  Tensor want = p.eager->backend().to_host(p.eager->forward(seqs));
  Tensor got = p.graphs->backend().to_host(p.graphs->forward(seqs));
  EXPECT_LE(rel_l2(got, want), 0.0) << "prefill runs eagerly in both";
  return seqs;
}

// Decode `steps` tokens (the eager runner's argmax) for all seqs; the largest rel. L2 difference.
double decode(Pair& p, std::vector<SequenceInput> seqs, int steps) {
  double worst = 0;
  std::vector<int32_t> next(seqs.size(), 7);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].new_tokens = {next[i]};
      seqs[i].slots.push_back(seqs[i].slots.back() - 1);
    }
    Tensor want = p.eager->backend().to_host(p.eager->forward(seqs));
    Tensor got = p.graphs->backend().to_host(p.graphs->forward(seqs));
    EXPECT_EQ(got.shape(), want.shape());
    worst = std::max(worst, rel_l2(got, want));
    int64_t V = want.size(1);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const float* row = want.data<float>() + int64_t(i) * V;
      next[i] = int32_t(std::max_element(row, row + V) - row);
    }
  }
  return worst;
}

TEST(DecodeGraphs, CapturedSizeGivesTheEagerLogits) {
  Pair p = make_runners({1, 2, 4});
  ASSERT_EQ(p.graphs->decode_graph_sizes(), (std::vector<int>{1, 2, 4}));
  for (int n : {1, 2, 4}) EXPECT_EQ(decode(p, prefill(p, n), 6), 0.0) << n << " sequences";
}

TEST(DecodeGraphs, SizesWhoseForwardCannotBeCapturedAreLeftEager) {
  // 400 sequences at top-4 are 1600 token-expert pairs: the MoE takes its sorted path, whose
  // per-expert GEMMs wait on the host, so that size is not captured; the others are.
  Pair p = make_runners({2, 400}, /*grouped=*/false);
  EXPECT_EQ(p.graphs->decode_graph_sizes(), (std::vector<int>{2}));
  EXPECT_EQ(decode(p, prefill(p, 2), 3), 0.0);
}

TEST(DecodeGraphs, LargeBatchesAreCapturedThroughTheGroupedGemm) {
  // 100 sequences at top-4: 400 pairs, past the decode kernels, so the grouped GEMM in the graph.
  Pair p = make_runners({100});
  ASSERT_EQ(p.graphs->decode_graph_sizes(), (std::vector<int>{100}));
  EXPECT_EQ(decode(p, prefill(p, 100), 3), 0.0);
}

TEST(DecodeGraphs, Fp8ExpertsAreCapturedAndGiveTheEagerLogits) {
  // Every linear weight FP8 (the experts whole 128 x 128 blocks, so the FP8 grouped GEMM runs).
  Pair p = make_runners({1, 4, 64}, true,
                        {.model = "deepseek-v3-tiny", .load_format = "dummy", .seed = 1, .quantization = "fp8"});
  ASSERT_EQ(p.graphs->decode_graph_sizes(), (std::vector<int>{1, 4, 64}));
  for (int n : {1, 4, 64}) EXPECT_EQ(decode(p, prefill(p, n), 3), 0.0) << n << " sequences";
}

TEST(DecodeGraphs, Fp8KvCacheIsCapturedAndGivesTheEagerLogits) {
  // The real MLA widths with an e4m3 latent cache: the store, the prefill's gather and the decode
  // kernels (16 heads: the 16-row kernel) all read and write it, in graphs as eagerly.
  Pair p = make_runners({1, 4, 64}, true, fixture_model(), DType::F8_E4M3);
  ASSERT_EQ(p.graphs->decode_graph_sizes(), (std::vector<int>{1, 4, 64}));
  for (int n : {1, 4, 64}) EXPECT_EQ(decode(p, prefill(p, n), 3), 0.0) << n << " sequences";
}

TEST(DecodeGraphs, PaddedBatchesAgreeAndLargerOnesRunEagerly) {
  Pair p = make_runners({4});
  EXPECT_LT(decode(p, prefill(p, 3), 6), 2e-2);  // padded to 4
  EXPECT_EQ(decode(p, prefill(p, 6), 4), 0.0);    // no graph takes 6: eager in both
}

}  // namespace
}  // namespace mlaserve
