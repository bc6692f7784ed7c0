// CUDA mla_decode (absorbed MLA over the paged latent cache) against the CPU reference, on fresh
// random inputs: DeepSeek head counts (16 = V3 TP8 shard / V2-Lite, 128 = V3), one or several queries
// per sequence, odd lengths, scattered cache slots, contexts long enough to be split across blocks,
// both row tilings, caches in pages of 64 keys (read by the TMA; slots no seq owns hold NaN), plan
// reuse by batch_id and replay inside a CUDA graph with new lengths. The
// plan kernel alone against a host port of the serial plan, byte for byte, on large batches too.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_check.h"
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
  bool mma_sync = false;   // 64-row jobs on the mma.sync kernel instead of warpgroup MMA
  bool two_stage = false;  // BF16 64-row jobs on the 2-stage wgmma kernel instead of the paired one
  float fp8_kv_scale = 0;  // > 0: an e4m3 cache holding latent / this scale
  bool pages64 = false;    // seqs in random whole pages of 64 slots (kv_page_size 64), as --page-size 64
  bool cp_async = false;   // no TMA even over pages of 64
  bool absorb = false;     // mla_decode_absorb_out: W_UV's projection (v = 128) checked too
  // Keys of tile t (64 t.. of each seq) times tile_gain[t] (the last gain for the tiles after):
  // scores whose maximum jumps from tile to tile, so that the kernels rescale their running sums.
  std::vector<float> tile_gain;

  // Captures plan + run of a 3-seq batch in a graph and replays it with other lengths (below).
  void replay_with_new_lengths(int64_t H);

  // Metadata of `b` with every token at a distinct random slot of a pool of `num_slots` (pages64:
  // each seq's keys 64 k.. at the start of a distinct random page of 64 slots).
  HostMd make_md(const Batch& b, int64_t num_slots, uint64_t s) {
    HostMd m;
    int n = int(b.seq_lens.size());
    std::vector<int32_t> qs(n + 1, 0), ks(n + 1, 0);
    for (int i = 0; i < n; ++i) {
      qs[i + 1] = qs[i] + b.queries[i];
      ks[i + 1] = ks[i] + b.seq_lens[i];
    }
    const int64_t page = pages64 ? 64 : 1;
    std::vector<int32_t> pages(static_cast<size_t>(num_slots / page));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937_64(s));
    std::vector<int32_t> pool;
    size_t next_page = 0;
    for (int i = 0; i < n; ++i)
      for (int32_t k = 0; k < b.seq_lens[i]; ++k) {
        if (k % page == 0) {
          EXPECT_LT(next_page, pages.size()) << "pool too small";
          ++next_page;
        }
        pool.push_back(int32_t(pages[next_page - 1] * page + k % page));
      }
    int32_t mx = *std::max_element(b.seq_lens.begin(), b.seq_lens.end());
    m.host = {n, Tensor::from_i32(b.seq_lens), Tensor::from_i32(qs), Tensor::from_i32(ks), Tensor::from_i32(pool), mx};
    m.dev = {n, gpu.to_device(m.host.seq_lens), gpu.to_device(m.host.query_start), gpu.to_device(m.host.kv_start),
             gpu.to_device(m.host.kv_indices), mx};
    m.dev.kv_page_size = int32_t(page);
    m.T = qs[n];
    m.num_kv = ks[n];
    return m;
  }

  // The cache both backends read: BF16, or (kv_scale > 0) e4m3 codes of cache / kv_scale, which
  // spread over e4m3's range as kv_store's would and which the kernels multiply by kv_scale.
  static Tensor stored_cache(const Tensor& cache, float kv_scale) {
    if (kv_scale <= 0) return to_dtype(cache, DType::BF16);
    Tensor spread = Tensor::empty(DType::F32, cache.shape());
    for (int64_t i = 0; i < cache.numel(); ++i) spread.data<float>()[i] = cache.data<float>()[i] / kv_scale;
    return to_dtype(spread, DType::F8_E4M3);
  }

  // Runs both backends on fresh inputs and returns the relative L2 error of the CUDA output: the
  // worse of two CUDA calls, the one that plans and one that reuses the plan (batch_id, or a fresh
  // id when 0), whose attention kernel starts its loads before the PDL wait (plan_settled).
  double check(const Batch& b, int64_t H, int force_m_tiles = 0, int64_t batch_id = 0) {
    static int64_t fresh_id = 1 << 20;
    if (batch_id == 0) batch_id = ++fresh_id;
    gpu.mla_decode_plan().force_m_tiles = force_m_tiles;
    gpu.mla_decode_plan().force_mma_sync = mma_sync;
    gpu.mla_decode_plan().force_two_stage = two_stage;
    gpu.mla_decode_plan().force_cp_async = cp_async;
    int64_t num_slots = 0;
    for (int32_t l : b.seq_lens) num_slots += pages64 ? (l + 63) / 64 * 64 : l;
    num_slots = pages64 ? (num_slots * 3 / 2 / 64 + 1) * 64 : num_slots * 3 / 2 + 7;
    HostMd m = make_md(b, num_slots, seed + 11);
    m.dev.batch_id = batch_id;
    Tensor q = random_f32({m.T, H, 576}, seed + 1), cache = random_f32({num_slots, 576}, seed + 2);
    if (!tile_gain.empty()) {
      const int32_t* ks = m.host.kv_start.data<int32_t>();
      for (size_t i = 0; i < b.seq_lens.size(); ++i)
        for (int32_t k = 0; k < b.seq_lens[i]; ++k) {
          float* row = cache.data<float>() + int64_t(m.host.kv_indices.data<int32_t>()[ks[i] + k]) * 576;
          const float gain = tile_gain[std::min(size_t(k / 64), tile_gain.size() - 1)];
          for (int c = 0; c < 576; ++c) row[c] *= gain;
        }
    }
    const bool fp8 = fp8_kv_scale > 0;
    const float kv_scale = fp8 ? fp8_kv_scale : 1.0f;
    Tensor stored = stored_cache(cache, fp8_kv_scale);
    // Slots no seq owns (in pages64: the rest of each seq's last page) hold NaN.
    std::vector<bool> owned(size_t(num_slots), false);
    for (int64_t i = 0; i < m.num_kv; ++i) owned[size_t(m.host.kv_indices.data<int32_t>()[i])] = true;
    for (int64_t r = 0; r < num_slots; ++r) {
      if (owned[size_t(r)]) continue;
      if (fp8)
        std::fill_n(static_cast<uint8_t*>(stored.raw()) + r * 576, 576, uint8_t(0x7f));
      else
        std::fill_n(static_cast<uint16_t*>(stored.raw()) + r * 576, 576, uint16_t(0x7fc0));
    }
    float scale = 1.0f / std::sqrt(192.0f);
    Tensor want = Tensor::empty(DType::F32, {m.T, H, 512});
    cpu->mla_decode(q, stored, kv_scale, m.host, scale, want);
    Tensor w_uv, want_out, w_uv_dev;
    if (absorb) {
      w_uv = random_f32({H, 128, 512}, seed + 3, 0.05f);
      want_out = Tensor::empty(DType::F32, {m.T, H, 128});
      cpu->mla_absorb_out(want, w_uv, want_out);
      w_uv_dev = gpu.to_device(to_dtype(w_uv, DType::BF16));
    }
    Tensor qd = gpu.to_device(to_dtype(q, DType::BF16)), cd = gpu.to_device(stored);
    auto run = [&] {  // the error of one call
      Tensor out = poisoned(gpu, DType::BF16, {m.T, H, 512});
      if (!absorb) {
        gpu.mla_decode(qd, cd, kv_scale, m.dev, scale, out);
        return rel_l2(gpu.to_host(out), want);
      }
      Tensor projected = poisoned(gpu, DType::BF16, {m.T, H, 128});
      gpu.mla_decode_absorb_out(qd, cd, kv_scale, m.dev, scale, w_uv_dev, out, projected);
      return std::max(rel_l2(gpu.to_host(out), want), rel_l2(gpu.to_host(projected), want_out));
    };
    double err = run();
    err = std::max(err, run());  // the plan reused
    std::printf("  mla_decode H=%lld seqs=%zu T=%lld m_tiles=%d%s%s%s%s%s%s: rel_l2 %.2e\n", (long long)H,
                b.seq_lens.size(), (long long)m.T, force_m_tiles, mma_sync ? " mma.sync" : "",
                two_stage ? " 2-stage" : "", fp8 ? " fp8" : "", pages64 ? " pages64" : "", cp_async ? " cp.async" : "",
                absorb ? (gpu.merge_splits_in_absorb_out ? " absorb_out merging" : " absorb_out") : "", err);
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

TEST_F(MlaDecode, AbsorbOutMergesSplitRows) {
  // mla_decode_absorb_out: up to 8 tokens and 32 heads the projection merges the split rows' partials
  // itself (no combine kernel), and writes them to o_latent too; past that, the combine and the
  // projection as two launches. Both against the CPU's mla_decode then mla_absorb_out.
  absorb = true;
  for (bool merge : {true, false}) {
    gpu.merge_splits_in_absorb_out = merge;
    for (int64_t H : {16, 32}) {
      EXPECT_LE(check({{200}, {1}}, H), kTol) << H;
      EXPECT_LE(check({{12345}, {1}}, H), kTol) << H;  // cut between every CTA
      EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, H), kTol) << H;
      EXPECT_LE(check({{5, 300, 2049}, {3, 4, 1}}, H), kTol) << H;
      EXPECT_LE(check({{5, 300, 2049}, {3, 4, 1}}, H, 4), kTol) << "64-row jobs, H=" << H;
    }
    fp8_kv_scale = 0.0625f;
    EXPECT_LE(check({{3000, 17}, {1, 1}}, 16), kTol);
    fp8_kv_scale = 0;
    pages64 = true;
    EXPECT_LE(check({{4000, 70}, {1, 2}}, 16), kTol);
    pages64 = false;
  }
  gpu.merge_splits_in_absorb_out = true;
  // Past the few-token form: 9 tokens, 128 heads.
  EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129, 4000}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}, 16), kTol);
  EXPECT_LE(check({{9001}, {1}}, 128), kTol);
}

TEST_F(MlaDecode, MmaSyncKernelFor64RowJobs) {
  // 64-row jobs run on the warpgroup-MMA kernel by default; the mma.sync one stays as a fallback.
  mma_sync = true;
  EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, 128), kTol);
  EXPECT_LE(check({{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}}, 16, 4), kTol);
  EXPECT_LE(check({{9001}, {1}}, 128), kTol);
}

TEST_F(MlaDecode, TwoStageKernelFor64RowJobs) {
  // BF16 64-row jobs run on the paired kernel by default; the 2-stage one (which FP8 caches use)
  // stays as a fallback.
  two_stage = true;
  EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, 128), kTol);
  EXPECT_LE(check({{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}}, 16, 4), kTol);
  EXPECT_LE(check({{9001}, {1}}, 128), kTol);
}

TEST_F(MlaDecode, PairedKernelOnOddRuns) {
  // The paired kernel takes a job's tiles two at a time: runs of one tile, odd runs (the second of
  // the last pair absent), jobs cut between CTAs at odd tiles, and many short jobs in one CTA.
  EXPECT_LE(check({{1, 64, 65, 128, 129, 191, 192, 193}, {1, 1, 1, 1, 1, 1, 1, 1}}, 128), kTol);
  EXPECT_LE(check({{64 * 133 + 5, 64 * 7}, {1, 1}}, 128), kTol);
  std::vector<int32_t> lens, queries;
  for (int i = 0; i < 300; ++i) lens.push_back(1 + (i * 37) % 190), queries.push_back(1);
  EXPECT_LE(check({lens, queries}, 128), kTol);
  EXPECT_LE(check({{33, 64 * 9 + 1, 700}, {33, 2, 5}}, 16, 4), kTol);
}

TEST_F(MlaDecode, ScoresThatJumpRescaleTheSums) {
  // Scores whose row maximum jumps by more than the kernels let a running maximum lag (2^8) at
  // tiles 1 and 2, and at 3 passes the running maximum by more than 2^8 but not tile 2's, then
  // stays: in the paired kernel's pair (0, 1) the second tile's maximum is the larger, in (2, 3)
  // the first's, so each warpgroup rescales the other's P and its own O and sums. Over the TMA and
  // cp.async; the other kernels alike. `many`: 140 jobs of 6-7 tiles at 128 heads, whole to CTAs,
  // so that every CTA runs the pairs (0, 1), (2, 3), (4, 5); `few`: jobs cut between CTAs.
  tile_gain = {1.f, 4.f, 25.f, 10.f};
  Batch many;
  for (int i = 0; i < 70; ++i) many.seq_lens.push_back(64 * 6 + (i * 37) % 64), many.queries.push_back(1);
  const Batch few{{700, 129, 64 * 9 + 1, 64 * 6}, {1, 1, 1, 1}};
  for (bool pages : {false, true}) {
    pages64 = pages;
    for (bool no_tma : {false, true}) {
      cp_async = no_tma;
      EXPECT_LE(check(many, 128), kTol) << pages << no_tma;
      EXPECT_LE(check(few, 16, 4), kTol) << pages << no_tma;
    }
  }
  cp_async = pages64 = false;
  EXPECT_LE(check(few, 16), kTol);
  two_stage = true;
  EXPECT_LE(check(many, 128), kTol);
  two_stage = false;
  mma_sync = true;
  EXPECT_LE(check(few, 128), kTol);
}

TEST_F(MlaDecode, Fp8CacheOnEveryKernel) {
  // e4m3 rows staged and widened to BF16 in shared memory by each kernel (16-row mma.sync, 64-row
  // warpgroup MMA and its mma.sync fallback), scaled back by kv_scale; split jobs too, and (`many`)
  // 16-row jobs of one or two queries whose CTAs each run across many jobs.
  Batch many;
  for (int i = 0; i < 300; ++i) many.seq_lens.push_back(1 + (i * 37) % 190), many.queries.push_back(1 + i % 2);
  for (float kv_scale : {1.0f, 0.0625f, 3.0f}) {
    fp8_kv_scale = kv_scale;
    for (bool fallback : {false, true}) {
      mma_sync = fallback;
      EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, 16), kTol) << kv_scale;
      EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, 128), kTol) << kv_scale;
      EXPECT_LE(check({{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}}, 16, 4), kTol) << kv_scale;
    }
    mma_sync = false;
    EXPECT_LE(check(many, 16), kTol) << kv_scale;
    EXPECT_LE(check({{12345, 77}, {1, 1}}, 16), kTol) << kv_scale;
    EXPECT_LE(check({{9001}, {1}}, 128), kTol) << kv_scale;
  }
  // The op refuses what it cannot read: a scale that is not positive, a BF16 cache with a scale.
  Tensor q = gpu.empty(DType::BF16, {1, 16, 576}), out = gpu.empty(DType::BF16, {1, 16, 512});
  Tensor c8 = gpu.empty(DType::F8_E4M3, {8, 576});
  HostMd m = make_md({{3}, {1}}, 8, seed);
  EXPECT_THROW(gpu.mla_decode(q, c8, 0.0f, m.dev, 0.1f, out), Error);
  EXPECT_THROW(gpu.mla_decode(q, c8, NAN, m.dev, 0.1f, out), Error);
  EXPECT_THROW(gpu.mla_decode(q, gpu.empty(DType::BF16, {8, 576}), 2.0f, m.dev, 0.1f, out), Error);
}

TEST_F(MlaDecode, PagesOf64TakeTheTma) {
  // kv_page_size 64: each tile is one page, brought in by the TMA (16-row jobs and 64-row pairs over
  // BF16, one bulk copy for 16-row jobs over e4m3); the rest of a seq's last page holds NaN, which
  // must not reach the output. The same batches without them (cp.async over the same pages) agree.
  pages64 = true;
  std::vector<int32_t> lens, queries;
  for (int i = 0; i < 300; ++i) lens.push_back(1 + (i * 37) % 190), queries.push_back(1);
  for (bool no_tma : {false, true}) {
    cp_async = no_tma;
    for (int64_t H : {16, 128}) {
      EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, H), kTol) << H << no_tma;
      EXPECT_LE(check({{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}}, H), kTol) << H << no_tma;
      EXPECT_LE(check({{12345, 77}, {1, 1}}, H), kTol) << H << no_tma;
      EXPECT_LE(check({lens, queries}, H), kTol) << H << no_tma;
    }
    EXPECT_LE(check({{64 * 133 + 5, 64 * 7, 1}, {1, 1, 1}}, 128), kTol) << no_tma;
    EXPECT_LE(check({{33, 64 * 9 + 1, 700}, {33, 2, 5}}, 16, 4), kTol) << no_tma;
    EXPECT_LE(check({{97}, {97}}, 16, 1), kTol) << no_tma;
  }
  cp_async = false;
  for (const int64_t H : {16, 128}) replay_with_new_lengths(H);  // a captured TMA kernel, new pages
  fp8_kv_scale = 0.5f;  // 16-row jobs take an e4m3 page as one bulk copy
  for (bool no_tma : {false, true}) {
    cp_async = no_tma;
    EXPECT_LE(check({{1, 63, 64, 65, 200, 1031, 7, 129}, {1, 1, 1, 1, 1, 1, 1, 1}}, 16), kTol) << no_tma;
    EXPECT_LE(check({lens, queries}, 16), kTol) << no_tma;
    EXPECT_LE(check({{12345, 77}, {1, 1}}, 16), kTol) << no_tma;
    EXPECT_LE(check({{5, 70, 300, 2049, 3}, {3, 2, 4, 1, 3}}, 128), kTol) << no_tma;
  }
}

TEST_F(MlaDecode, WholeJobsPlan) {
  // Uniform lengths: jobs go whole to CTAs (no partials, no combine). 64 seqs at 128 heads are 128
  // 64-row jobs of 5 tiles (an even cut: 5 a CTA); 128 seqs at 16 heads, 128 jobs of 16 rows; 256
  // seqs, or 128 seqs at 128 heads, runs of two jobs. With one seq much longer, the even cut again.
  for (bool tma : {false, true}) {
    pages64 = tma;
    for (float kv_scale : {0.f, 0.5f}) {
      fp8_kv_scale = kv_scale;
      const Batch b64{std::vector<int32_t>(64, 300), std::vector<int32_t>(64, 1)};
      const Batch b128{std::vector<int32_t>(128, 300), std::vector<int32_t>(128, 1)};
      EXPECT_LE(check(b64, 128), kTol) << tma << kv_scale;
      EXPECT_LE(check(b128, 16), kTol) << tma << kv_scale;
      EXPECT_LE(check(b128, 16, 1), kTol) << tma << kv_scale;
      Batch skewed = b64;
      skewed.seq_lens[5] = 3000;
      EXPECT_LE(check(skewed, 128), kTol) << tma << kv_scale;
      const Batch b256{std::vector<int32_t>(256, 200), std::vector<int32_t>(256, 1)};  // two jobs a CTA
      EXPECT_LE(check(b256, 16), kTol) << tma << kv_scale;
      EXPECT_LE(check(b128, 128), kTol) << tma << kv_scale;
    }
  }
}

TEST_F(MlaDecode, PlanReusedByBatchId) {
  Batch b{{4000, 1, 999, 64}, {1, 1, 1, 1}};
  EXPECT_LE(check(b, 16, 0, 42), kTol);
  EXPECT_LE(check(b, 128, 0, 43), kTol);
}

TEST_F(MlaDecode, PlanRemadeWhenTheJobSizeChanges) {
  // One batch (same batch_id, same metadata tensors) over a BF16 then an e4m3 cache: 16 heads at
  // 130 seqs take 64-row jobs over BF16 pages of 1 but 16-row jobs over e4m3, so the second call
  // must plan again rather than reuse the first plan.
  std::vector<int32_t> lens, queries;
  for (int i = 0; i < 130; ++i) lens.push_back(1 + (i * 53) % 700), queries.push_back(1);
  const Batch b{lens, queries};
  const int64_t H = 16, num_slots = std::accumulate(lens.begin(), lens.end(), int64_t(0)) * 3 / 2;
  HostMd m = make_md(b, num_slots, seed + 3);
  m.dev.batch_id = 77;
  Tensor q = random_f32({m.T, H, 576}, seed + 1), cache = random_f32({num_slots, 576}, seed + 2);
  const float scale = 1.0f / std::sqrt(192.0f), kv_scale = 0.25f;
  const Tensor stored_bf16 = stored_cache(cache, 0.f), stored_fp8 = stored_cache(cache, kv_scale);
  const Tensor qd = gpu.to_device(to_dtype(q, DType::BF16));
  cuda::MlaDecodePlan& plan = gpu.mla_decode_plan();
  plan.force_m_tiles = 0, plan.force_mma_sync = plan.force_two_stage = plan.force_cp_async = false;
  for (const bool fp8 : {false, true}) {
    const Tensor& stored = fp8 ? stored_fp8 : stored_bf16;
    const float s = fp8 ? kv_scale : 1.0f;
    Tensor want = Tensor::empty(DType::F32, {m.T, H, 512}), out = poisoned(gpu, DType::BF16, {m.T, H, 512});
    cpu->mla_decode(q, stored, s, m.host, scale, want);
    gpu.mla_decode(qd, gpu.to_device(stored), s, m.dev, scale, out);
    EXPECT_EQ(plan.planned_rows_per_job(), fp8 ? 16 : 64);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kTol) << (fp8 ? "e4m3" : "bf16");
  }
}

TEST_F(MlaDecode, GraphReplayWithNewLengths) {
  // Plan + run captured once; replayed after the metadata buffers get another batch of the same
  // shape (same seqs and tokens, other lengths and slots).
  for (const int64_t H : {16, 128}) replay_with_new_lengths(H);
}

void MlaDecode::replay_with_new_lengths(int64_t H) {
  const int64_t slots = 20000;
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

// ---- the plan kernel against the serial plan --------------------------------------------------

// What the plan kernel writes: jobs [num_jobs, 8], ctas [num_ctas, 4], num_jobs.
struct PlanOut {
  std::vector<int32_t> jobs, ctas;
  int32_t num_jobs = 0;
};

// The plan as one serial loop computes it (the first plan kernel, ported to the host): jobs of
// 16 * m_tiles rows in seq then row order (none from index max_jobs on; on the kernel's
// small-batch path level-major: every seq's first job, then every seq's second...), the
// concatenation of their 64-key tiles cut evenly between P = min(tiles, num_ctas) CTAs (on the
// small-batch path P rounded down to a multiple of the most jobs a seq has); or whole jobs, CTA c of
// Pw = min(num_ctas, jobs) taking jobs [c * jobs / Pw, (c + 1) * jobs / Pw), when the most tiles a
// CTA gets that way exceed ceil(tiles / P) by at most ceil(rows of the widest job / 16 * min(jobs,
// num_ctas) / num_ctas) (a batch of few jobs has few partials to combine). The
// kernel's general path (more than 512 seqs, or a seq of more than 8 jobs) takes whole jobs only
// when there are no more jobs than CTAs. A CTA's record holds its index c in the cut; on the
// small-batch path, where P is a multiple of the levels L, it goes to block (c % (P / L)) * L + c / (P / L).
PlanOut plan_reference(const std::vector<int32_t>& seq_lens, const std::vector<int32_t>& query_start, int H,
                       int m_tiles, int max_jobs, int num_ctas) {
  PlanOut out;
  const int M = 16 * m_tiles;
  int most_jobs_a_seq = 0, all_jobs = 0;
  for (int q = 0; q < int(seq_lens.size()); ++q) {
    const int rows = (query_start[q + 1] - query_start[q]) * H, n = (rows + M - 1) / M;
    most_jobs_a_seq = std::max(most_jobs_a_seq, n);
    all_jobs += n;
  }
  const bool small_path = seq_lens.size() <= 512 && most_jobs_a_seq <= 8 && all_jobs <= max_jobs;
  std::vector<int32_t>& jobs = out.jobs;
  int nj = 0;
  int64_t total = 0;
  // Job `level` of seq q (the rows from level * M), if it has one and max_jobs is not reached.
  auto add_job = [&](int q, int level) {
    int n = query_start[q + 1] - query_start[q], len = seq_lens[q], rows = n * H, r0 = level * M;
    if (r0 >= rows || nj >= max_jobs) return;
    int nr = std::min(M, rows - r0), keys = std::max(len - n + (r0 + nr - 1) / H + 1, 1);
    int tiles = (keys + cuda::kMlaBlockKeys - 1) / cuda::kMlaBlockKeys;
    jobs.insert(jobs.end(), {q, r0, nr, tiles, keys, 0, 0, 0});
    ++nj;
    total += tiles;
  };
  for (int level = 0; small_path && level < most_jobs_a_seq; ++level)
    for (int q = 0; q < int(seq_lens.size()); ++q) add_job(q, level);
  for (int q = 0; !small_path && q < int(seq_lens.size()); ++q)
    for (int level = 0; level * M < (query_start[q + 1] - query_start[q]) * H; ++level) add_job(q, level);
  out.num_jobs = nj;
  auto cta_of = [&](int64_t g, int P) { return int(((g + 1) * P - 1) / total); };
  const int P = int(std::min<int64_t>(total, num_ctas));
  out.ctas.assign(size_t(std::max(num_ctas, 0)) * 4, 0);
  // Whole jobs: the kernel's small-batch path takes runs of them, the general one runs of one.
  int widest = 0;
  for (int j = 0; j < nj; ++j) widest = std::max(widest, jobs[size_t(j) * 8 + 2]);
  const int Pw = std::min(num_ctas, nj);
  auto run_begin = [&](int c) { return int(int64_t(c) * nj / Pw); };
  std::vector<int64_t> job_tile(size_t(nj) + 1, 0);
  for (int j = 0; j < nj; ++j) job_tile[size_t(j) + 1] = job_tile[size_t(j)] + jobs[size_t(j) * 8 + 3];
  int64_t makespan = 0;
  auto run_tiles = [&](int c) { return job_tile[size_t(run_begin(c + 1))] - job_tile[size_t(run_begin(c))]; };
  for (int c = 0; c < Pw; ++c) makespan = std::max(makespan, run_tiles(c));
  const int64_t slack = (int64_t((widest + 15) / 16) * std::min(nj, num_ctas) + num_ctas - 1) / std::max(num_ctas, 1);
  auto record = [&](int c, int Pc) {  // CTA c's record of a cut between Pc CTAs, its index in it set
    const int L = small_path ? most_jobs_a_seq : 1;
    const int block = L > 1 && Pc % L == 0 ? c % (Pc / L) * L + c / (Pc / L) : c;
    int32_t* e = &out.ctas[size_t(block) * 4];
    e[3] = c;
    return e;
  };
  if (Pw > 0 && P > 0 && (small_path || nj <= num_ctas) && makespan - (total + P - 1) / P <= slack) {
    for (int j = 0; j < nj; ++j) {
      int32_t* job = &jobs[size_t(j) * 8];
      job[5] = int((int64_t(j + 1) * Pw - 1) / nj), job[6] = 1, job[7] = j;
    }
    for (int c = 0; c < Pw; ++c) {
      int32_t* e = record(c, Pw);
      e[0] = run_begin(c), e[1] = 0, e[2] = int(run_tiles(c));
    }
    return out;
  }
  // The small-batch path's cut: a multiple of the levels.
  const int Pc = small_path && most_jobs_a_seq > 1 && P >= most_jobs_a_seq ? P - P % most_jobs_a_seq : P;
  int j = 0;
  int64_t before = 0;
  for (int c = 0; c < Pc; ++c) {
    int64_t g0 = c * total / Pc, g1 = (c + 1) * total / Pc;
    while (j < nj && before + jobs[j * 8 + 3] <= g0) before += jobs[j++ * 8 + 3];
    int32_t* e = record(c, Pc);
    e[0] = j, e[1] = int(g0 - before), e[2] = int(g1 - g0);
  }
  int offset = 0;
  before = 0;
  for (j = 0; j < nj; ++j) {
    int32_t* job = &jobs[size_t(j) * 8];
    int first = cta_of(before, Pc), last = cta_of(before + job[3] - 1, Pc);
    job[5] = first, job[6] = last - first + 1, job[7] = offset;
    offset += last - first + 1;
    before += job[3];
  }
  return out;
}

// A cudaMalloc'd buffer of n int32.
struct DevInts {
  int32_t* p = nullptr;
  size_t n = 0;
  explicit DevInts(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * 4)); }
  ~DevInts() { cudaFree(p); }
  DevInts(const DevInts&) = delete;
  DevInts& operator=(const DevInts&) = delete;
};

// Jobs of a batch as MlaDecodePlan::plan sizes them: ceil(T * H / rows) + num_seqs.
int64_t plan_max_jobs(const std::vector<int32_t>& query_start, int H, int m_tiles) {
  int64_t rows = 16 * m_tiles, T = query_start.back();
  return (T * H + rows - 1) / rows + int64_t(query_start.size()) - 1;
}

// Runs the plan kernel on device copies of the batch (outputs poisoned first) and compares all it
// writes with plan_reference; `max_jobs` < 0 sizes the jobs as the backend does. Returns the jobs.
int check_plan(const std::vector<int32_t>& seq_lens, const std::vector<int32_t>& query_start, int H, int m_tiles,
               int num_ctas, int64_t max_jobs = -1) {
  const int S = int(seq_lens.size());
  const int64_t cap = plan_max_jobs(query_start, H, m_tiles);
  if (max_jobs < 0) max_jobs = cap;
  SCOPED_TRACE(testing::Message() << "seqs=" << S << " T=" << query_start.back() << " H=" << H
                                  << " m_tiles=" << m_tiles << " num_ctas=" << num_ctas << " max_jobs=" << max_jobs);
  DevInts lens(S), qs(S + 1), jobs(size_t(std::max<int64_t>(cap, max_jobs)) * 8), ctas(size_t(num_ctas) * 4),
      nj(1);
  CUDA_CHECK(cudaMemcpy(lens.p, seq_lens.data(), S * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(qs.p, query_start.data(), (S + 1) * 4, cudaMemcpyHostToDevice));
  for (DevInts* b : {&jobs, &ctas, &nj}) CUDA_CHECK(cudaMemset(b->p, 0xff, b->n * 4));
  cuda::MlaDecodeParams p{};
  p.seq_lens = lens.p, p.query_start = qs.p, p.num_seqs = S, p.num_heads = H;
  cuda::MlaDecodeSchedule s{};
  s.jobs = jobs.p, s.ctas = ctas.p, s.num_jobs = nj.p;
  s.max_jobs = int(max_jobs), s.num_ctas = num_ctas, s.m_tiles = m_tiles;
  cuda::launch_mla_decode_plan(p, s, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());

  PlanOut want = plan_reference(seq_lens, query_start, H, m_tiles, int(max_jobs), num_ctas);
  PlanOut got;
  CUDA_CHECK(cudaMemcpy(&got.num_jobs, nj.p, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got.num_jobs, want.num_jobs);
  got.jobs.resize(jobs.n);
  got.ctas.resize(ctas.n);
  CUDA_CHECK(cudaMemcpy(got.jobs.data(), jobs.p, jobs.n * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got.ctas.data(), ctas.p, ctas.n * 4, cudaMemcpyDeviceToHost));
  // Jobs: the first num_jobs as the reference, the rest untouched.
  const size_t nw = want.jobs.size();
  for (size_t i = 0; i < got.jobs.size(); ++i) {
    int32_t w = i < nw ? want.jobs[i] : -1;
    if (got.jobs[i] != w) {
      ADD_FAILURE() << "job " << i / 8 << " field " << i % 8 << ": got " << got.jobs[i] << ", want " << w
                    << (i < nw ? "" : " (past num_jobs: not written)");
      break;
    }
  }
  for (size_t i = 0; i < got.ctas.size(); ++i) {
    if (got.ctas[i] != want.ctas[i]) {
      ADD_FAILURE() << "cta " << i / 4 << " field " << i % 4 << ": got " << got.ctas[i] << ", want " << want.ctas[i];
      break;
    }
  }
  return want.num_jobs;
}

// A random batch: `S` seqs of min_q..max_q queries, lengths 1..40000 (a quarter of them short).
void random_batch(std::mt19937_64& rng, int S, int min_q, int max_q, std::vector<int32_t>& seq_lens,
                  std::vector<int32_t>& query_start) {
  seq_lens.resize(S);
  query_start.assign(S + 1, 0);
  for (int i = 0; i < S; ++i) {
    int n = std::uniform_int_distribution<int>(min_q, max_q)(rng);
    query_start[i + 1] = query_start[i] + n;
    bool is_short = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    seq_lens[i] = std::uniform_int_distribution<int>(1, is_short ? 130 : 40000)(rng);
  }
}

TEST_F(MlaDecode, PlanMatchesSerialPlan) {
  // Up to 512 seqs of up to 8 jobs take the kernel's small-batch path; more seqs, or more jobs in
  // a seq (128 heads in 16-row jobs with several queries, or hundreds of queries), the general one.
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lens, qs;
  for (int S : {1, 3, 64, 200, 1500, 3000})
    for (int H : {16, 128})
      for (int mt : {1, 4}) {
        random_batch(rng, S, 1, 4, lens, qs);
        check_plan(lens, qs, H, mt, 132);
        random_batch(rng, S, 1, 1, lens, qs);  // plain decode
        check_plan(lens, qs, H, mt, 132);
      }
  // Uniform lengths: jobs whole to CTAs (or not, one job too long), 132 or 264 of them, on the
  // small-batch path and (2 queries at 128 heads in 16-row jobs: 16 jobs a seq) the general one.
  for (int len : {4096, 300, 64})
    for (int H : {16, 128})
      for (int mt : {1, 4})
        for (int n : {1, 2})
          for (int per_cta : {1, 2}) {
            const int S = per_cta * 132 / ((n * H + 16 * mt - 1) / (16 * mt));
            lens.assign(S, len);
            qs.assign(S + 1, 0);
            for (int i = 0; i < S; ++i) qs[i + 1] = qs[i] + n;
            check_plan(lens, qs, H, mt, 132);
            lens[S / 2] += 64 * (mt + 2);  // the longest run now past the rule's slack (at most mt tiles)
            check_plan(lens, qs, H, mt, 132);
          }
  // One seq of many queries (a chunk of extend in absorbed form): hundreds of jobs in one seq.
  for (int H : {16, 128})
    for (int mt : {1, 4}) {
      random_batch(rng, 1, 300, 300, lens, qs);
      check_plan(lens, qs, H, mt, 132);
      lens[0] = 300;  // the first query sees one key
      check_plan(lens, qs, H, mt, 132);
      random_batch(rng, 5, 1, 4, lens, qs);  // and among others
      qs.insert(qs.begin() + 3, qs[2]);
      for (size_t i = 3; i < qs.size(); ++i) qs[i] += 300;
      lens.insert(lens.begin() + 2, 20000);
      check_plan(lens, qs, H, mt, 132);
    }
}

TEST_F(MlaDecode, PlanEdgeShapes) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lens, qs;
  for (int H : {16, 128})
    for (int mt : {1, 4}) {
      // Fewer tiles than CTAs (P = tiles), one CTA, more CTAs than threads, one key.
      random_batch(rng, 3, 1, 1, lens, qs);
      for (int32_t& l : lens) l = 1 + l % 100;
      for (int ctas : {132, 1, 7, 2000}) check_plan(lens, qs, H, mt, ctas);
      check_plan({1}, {0, 1}, H, mt, 132);
      for (int S : {200, 3000}) {
        random_batch(rng, S, 1, 4, lens, qs);
        for (int ctas : {1, 7, 2000}) check_plan(lens, qs, H, mt, ctas);
      }
      // Seqs without queries have no jobs.
      for (int S : {400, 2500}) {
        random_batch(rng, S, 0, 2, lens, qs);
        check_plan(lens, qs, H, mt, 132);
      }
      random_batch(rng, 300, 0, 0, lens, qs);
      check_plan(lens, qs, H, mt, 132);
      // Billions of keys: tile counts past 32-bit products with the CTA count.
      for (int S : {4, 600}) {
        random_batch(rng, S, 1, 2, lens, qs);
        for (int32_t& l : lens) l = 1000000000 + l * 25000;
        check_plan(lens, qs, H, mt, 132);
      }
    }
}

TEST_F(MlaDecode, PlanStopsAtMaxJobs) {
  // The host sizes max_jobs so that this does not happen; if it did, the jobs from index max_jobs
  // on are dropped and the tiles of the kept ones are shared out.
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lens, qs;
  for (int S : {3, 200, 3000})
    for (int mt : {1, 4}) {
      random_batch(rng, S, 1, 4, lens, qs);
      int need = check_plan(lens, qs, 128, mt, 132);
      for (int64_t max_jobs : {0, 1, need / 3, need - 1, need})
        check_plan(lens, qs, 128, mt, 132, max_jobs);
    }
}

}  // namespace
}  // namespace mlaserve
