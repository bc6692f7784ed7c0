// CUDA mla_decode (absorbed MLA over the paged latent cache) against the CPU reference, on fresh
// random inputs: DeepSeek head counts (16 = V3 TP8 shard / V2-Lite, 128 = V3), one or several queries
// per sequence, odd lengths, scattered cache slots, contexts long enough to be split across blocks,
// both row tilings, plan reuse by batch_id and replay inside a CUDA graph with new lengths.
#include <algorithm>
#include <numeric>
#include <random>

#include "gpu_test_util.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/mla_decode.h"

namespace mlaserve {
namespace {

using namespace gputest;

struct Batch {
  std::vector<int32_t> seq_lens, queries;  // per seq
};

struct HostMd {
  AttentionMetadata host, dev;
  int64_t T = 0, num_kv = 0;
};

class MlaDecode : public GpuTest {
 protected:

  // Metadata of `b` with every token at a distinct random slot of a pool of `num_slots`.
  HostMd make_md(const Batch& b, int64_t num_slots, uint64_t s) {
    HostMd m;
    int n = int(b.seq_lens.size());
    std::vector<int32_t> qs(n + 1, 0), ks(n + 1, 0);
    for (int i = 0; i < n; ++i) {
      qs[i + 1] = qs[i] + b.queries[i];
      ks[i + 1] = ks[i] + b.seq_lens[i];
    }
    std::vector<int32_t> pool(static_cast<size_t>(num_slots));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937_64(s));
    pool.resize(size_t(ks[n]));
    int32_t mx = *std::max_element(b.seq_lens.begin(), b.seq_lens.end());
    m.host = {n, Tensor::from_i32(b.seq_lens), Tensor::from_i32(qs), Tensor::from_i32(ks), Tensor::from_i32(pool), mx};
    m.dev = {n, gpu.to_device(m.host.seq_lens), gpu.to_device(m.host.query_start), gpu.to_device(m.host.kv_start),
             gpu.to_device(m.host.kv_indices), mx};
    m.T = qs[n];
    m.num_kv = ks[n];
    return m;
  }

  // Runs both backends on fresh inputs and returns the relative L2 error of the CUDA output.
  double check(const Batch& b, int64_t H, int force_m_tiles = 0, int64_t batch_id = 0) {
    gpu.mla_decode_plan().force_m_tiles = force_m_tiles;
    int64_t num_slots = 0;
    for (int32_t l : b.seq_lens) num_slots += l;
    num_slots = num_slots * 3 / 2 + 7;
    HostMd m = make_md(b, num_slots, seed + 11);
    m.dev.batch_id = batch_id;
    Tensor q = random_f32({m.T, H, 576}, seed + 1), cache = random_f32({num_slots, 576}, seed + 2);
    float scale = 1.0f / std::sqrt(192.0f);
    Tensor want = Tensor::empty(DType::F32, {m.T, H, 512});
    cpu->mla_decode(q, cache, 1.0f, m.host, scale, want);
    Tensor out = poisoned(gpu, DType::BF16, {m.T, H, 512});
    Tensor qd = gpu.to_device(to_dtype(q, DType::BF16)), cd = gpu.to_device(to_dtype(cache, DType::BF16));
    gpu.mla_decode(qd, cd, 1.0f, m.dev, scale, out);
    double err = rel_l2(gpu.to_host(out), want);
    if (batch_id != 0) {  // a second call reuses the plan and must give the same answer
      Tensor out2 = poisoned(gpu, DType::BF16, {m.T, H, 512});
      gpu.mla_decode(qd, cd, 1.0f, m.dev, scale, out2);
      err = std::max(err, rel_l2(gpu.to_host(out2), want));
    }
    std::printf("  mla_decode H=%lld seqs=%zu T=%lld m_tiles=%d: rel_l2 %.2e\n", (long long)H, b.seq_lens.size(),
                (long long)m.T, force_m_tiles, err);
    ++seed;
    return err;
  }
};

constexpr double kTol = 1e-2;

TEST_F(MlaDecode, OneQueryPerSeq) {
  for (int64_t H : {16, 128}) {
    Batch b{{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}};
    EXPECT_LE(check(b, H), kTol) << "H=" << H;
    Batch odd{{333, 17, 4095}, {1, 1, 1}};
    EXPECT_LE(check(odd, H), kTol) << "odd H=" << H;
  }
}

TEST_F(MlaDecode, LongContextsAreSplit) {
  // One or two long sequences on 132 SMs: every job is cut between many blocks.
  EXPECT_LE(check({{9001}, {1}}, 128), kTol);
  EXPECT_LE(check({{12345, 77}, {1, 1}}, 16), kTol);
  EXPECT_LE(check({{5000, 3001}, {1, 1}}, 16, 4), kTol) << "64-row jobs";
}

TEST_F(MlaDecode, SeveralQueriesPerSeq) {
  // MTP verify / chunked extend: query i of n sees keys [0, len - n + i].
  Batch b{{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}};
  for (int64_t H : {16, 128}) {
    EXPECT_LE(check(b, H), kTol) << "H=" << H;
    EXPECT_LE(check(b, H, 1), kTol) << "16-row jobs, H=" << H;
    EXPECT_LE(check(b, H, 4), kTol) << "64-row jobs, H=" << H;
  }
  // A whole chunk of queries in one seq (n == len: the first sees one key).
  EXPECT_LE(check({{97}, {97}}, 16), kTol);
  EXPECT_LE(check({{130, 6000}, {40, 2}}, 16, 1), kTol);
}

TEST_F(MlaDecode, PlanReusedByBatchId) {
  Batch b{{4000, 1, 999, 64}, {1, 1, 1, 1}};
  EXPECT_LE(check(b, 16, 0, 42), kTol);
  EXPECT_LE(check(b, 128, 0, 43), kTol);
}

TEST_F(MlaDecode, GraphReplayWithNewLengths) {
  // Plan + run captured once; replayed after the metadata buffers get another batch of the same
  // shape (same seqs and tokens, other lengths and slots).
  const int64_t H = 16, slots = 20000;
  Batch b1{{100, 2000, 37}, {1, 1, 1}}, b2{{5000, 3, 1234}, {1, 1, 1}};
  HostMd m1 = make_md(b1, slots, seed + 5), m2 = make_md(b2, slots, seed + 6);
  // The kv_indices buffer is sized for the larger batch and reused.
  Tensor kv_dev = gpu.empty(DType::I32, {std::max(m1.num_kv, m2.num_kv)});
  auto upload = [&](const HostMd& m) {
    CUDA_CHECK(cudaMemcpy(m1.dev.seq_lens.raw(), m.host.seq_lens.raw(), 3 * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m1.dev.query_start.raw(), m.host.query_start.raw(), 4 * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m1.dev.kv_start.raw(), m.host.kv_start.raw(), 4 * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(kv_dev.raw(), m.host.kv_indices.raw(), m.num_kv * 4, cudaMemcpyHostToDevice));
  };
  AttentionMetadata md = m1.dev;
  md.kv_indices = kv_dev;
  Tensor q = random_f32({3, H, 576}, seed + 1), cache = random_f32({slots, 576}, seed + 2);
  Tensor qd = gpu.to_device(to_dtype(q, DType::BF16)), cd = gpu.to_device(to_dtype(cache, DType::BF16));
  Tensor out = poisoned(gpu, DType::BF16, {3, H, 512});
  float scale = 0.1f;
  upload(m1);
  gpu.mla_decode(qd, cd, 1.0f, md, scale, out);  // sizes the plan buffers outside the capture
  gpu.synchronize();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(gpu.stream(), cudaStreamCaptureModeThreadLocal));
  gpu.mla_decode(qd, cd, 1.0f, md, scale, out);
  CUDA_CHECK(cudaStreamEndCapture(gpu.stream(), &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const HostMd* m : {&m2, &m1}) {
    upload(*m);
    CUDA_CHECK(cudaMemset(out.raw(), 0xff, out.nbytes()));
    CUDA_CHECK(cudaGraphLaunch(exec, gpu.stream()));
    gpu.synchronize();
    Tensor want = Tensor::empty(DType::F32, {3, H, 512});
    cpu->mla_decode(q, cache, 1.0f, m->host, scale, want);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kTol) << "replay with lengths " << m->host.seq_lens.data<int32_t>()[0];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mlaserve
