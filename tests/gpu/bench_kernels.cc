// Kernel benchmark: measures the two ceilings of this GPU in the same run (device-to-device copy
// bandwidth, counting bytes read and written; dense BF16 GEMM rate at 8192^3 on random data), then
// times each kernel per shape and prints its floor (bytes / copy bandwidth or FLOPs / GEMM rate)
// and the fraction of it reached. Times are medians of CUDA-event-timed repeats after warm-up,
// rotating among input sets larger than L2 where the inputs are small.
//   bench_kernels [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/random.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/gemm_runner.h"
#include "kernels/cuda/moe_experts.h"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mla_prefill.h"
#include "kernels/cuda/mla_absorb.h"
#include "kernels/cuda/skinny_gemm.h"
#include "model/absorbed_weights.h"
#include "bench_common.h"

using namespace mlaserve;
using namespace mlaserve::bench;

namespace {

// ---- MLA prefill and absorbed projections (bench_mla_prefill, bench_mla_absorb) ----

// flop_row(kernel, shape, ms, flops, bytes moved) of main.
using FlopRowFn = std::function<void(const std::string&, const std::string&, double, double, double)>;

// A large device BF16 tensor filled with a 32 MB block of random values repeated (generating
// billions of values on the host would take minutes; timing does not depend on the values).
Tensor filled_bf16(Shape shape, uint64_t seed) {
  constexpr int64_t kBlock = int64_t(16) << 20;
  static std::vector<uint16_t> block;
  if (block.empty()) {
    block.resize(size_t(kBlock));
    for (int64_t i = 0; i < kBlock; ++i) block[size_t(i)] = f32_to_bf16(normal01(7, uint64_t(i)));
  }
  Tensor t = g_gpu->empty(DType::BF16, std::move(shape));
  int64_t n = t.numel(), off = int64_t(seed * 7919) % (kBlock / 2);
  for (int64_t i = 0; i < n; i += kBlock / 2) {
    int64_t len = std::min(kBlock / 2, n - i);
    CUDA_CHECK(cudaMemcpy(t.data<uint16_t>() + i, block.data() + off, size_t(len) * 2, cudaMemcpyHostToDevice));
  }
  return t;
}

// MHA-form MLA prefill: causal FLOPs 2 * sum over queries of visible keys * H * (192 + 128);
// every tile configuration of the kernel is timed (config 0 is what the op uses).
void bench_mla_prefill(cuda::CudaBackend& gpu, const FlopRowFn& flop_row) {
  struct Case {
    int num_seqs, seq_len, num_queries, H;
  };
  for (Case c : {Case{8, 4096, 4096, 128}, Case{8, 4096, 4096, 16}, Case{4, 8192, 2048, 128}}) {
    int64_t T = int64_t(c.num_seqs) * c.num_queries, S = int64_t(c.num_seqs) * c.seq_len, H = c.H;
    Tensor q = filled_bf16({T, H, 192}, 1), kv = filled_bf16({S, H, 256}, 2), ctx = filled_bf16({S, 576}, 3);
    Tensor out = gpu.empty(DType::BF16, {T, H, 128});
    std::vector<int32_t> qs{0}, ks{0}, lens;
    double pairs = 0;  // (query, visible key) pairs
    for (int s = 0; s < c.num_seqs; ++s) {
      qs.push_back(qs.back() + c.num_queries);
      ks.push_back(ks.back() + c.seq_len);
      lens.push_back(c.seq_len);
      double prefix = c.seq_len - c.num_queries, n = c.num_queries;
      pairs += n * prefix + n * (n + 1) / 2;
    }
    Tensor d_qs = gpu.to_device(Tensor::from_i32(qs)), d_ks = gpu.to_device(Tensor::from_i32(ks)),
           d_lens = gpu.to_device(Tensor::from_i32(lens));
    double flops = 2.0 * pairs * double(H) * (192 + 128);
    double moved = 2.0 * double(T * H * 192 + S * H * 256 + S * 64 + T * H * 128);
    for (int cfg = 0; cfg < cuda::mla_prefill_num_configs(); ++cfg) {
      cuda::MlaPrefillParams p;
      p.q = q.raw();
      p.kv = kv.raw();
      p.k_pe = ctx.data<uint16_t>() + 512;
      p.out = out.raw();
      p.query_start = d_qs.data<int32_t>();
      p.kv_start = d_ks.data<int32_t>();
      p.seq_lens = d_lens.data<int32_t>();
      p.q_st0 = H * 192;
      p.q_st1 = 192;
      p.kv_st0 = H * 256;
      p.kv_st1 = 256;
      p.kpe_st0 = 576;
      p.o_st0 = H * 128;
      p.o_st1 = 128;
      p.num_seqs = c.num_seqs;
      p.num_heads = int(H);
      p.max_queries = c.num_queries;
      p.scale = 0.0723f;
      p.config = cfg;
      double ms = time_ms([&](int) { cuda::launch_mla_prefill(p, gpu.stream()); }, 10, 2);
      flop_row(fmt::format("mla_prefill c{}", cfg),
               fmt::format("{}x{}{} H={} [{}]", c.num_seqs, c.num_queries,
                           c.seq_len > c.num_queries ? fmt::format("+{}", c.seq_len - c.num_queries) : "", H,
                           cuda::mla_prefill_config_name(cfg)),
               ms, flops, moved);
    }
  }
}

// Absorbed projections as batched GEMMs over heads (BF16, cuBLASLt) and as the FP8 BMM (the skinny
// FP8 kernel over heads, weights cut from an FP8 kv_b_proj): weight-bound at decode sizes. The FP8
// rows: the op's default launch, then the fastest launch of the kernel (warps on K, row tiles,
// split-K) with its name. fp8_flop_row's floor counts FP8 FLOPs at twice the BF16 rate.
void bench_mla_absorb(cuda::CudaBackend& gpu, const FlopRowFn& flop_row, const FlopRowFn& fp8_flop_row) {
  for (int64_t H : {128, 16}) {
    int64_t w_bytes = H * 128 * 512 * 2;
    int n_sets = int(std::min<int64_t>(8, (int64_t(200) << 20) / w_bytes + 1));
    std::vector<Tensor> w_uk, w_uv;
    std::vector<AbsorbedWeights> fp8;
    for (int i = 0; i < n_sets; ++i) {
      w_uk.push_back(filled_bf16({H, 128, 512}, 40 + i));
      w_uv.push_back(filled_bf16({H, 128, 512}, 50 + i));
      fp8.push_back(make_absorbed_weights(random_fp8_host(H * 256, 512, 70 + i), H, 128, 128, gpu));
    }
    const double fp8_w_bytes = double(w_bytes) / 2 + 4.0 * double(H * 4);
    cuda::MlaAbsorbRunner absorb_runner;
    for (int64_t T : {1, 8, 32, 64, 128, 256, 4096}) {
      Tensor q = filled_bf16({T, H, 192}, 60), q_latent = gpu.empty(DType::BF16, {T, H, 576});
      Tensor latent = filled_bf16({T, H, 512}, 61), out = gpu.empty(DType::BF16, {T, H, 128});
      Tensor q_nope = q.narrow(2, 0, 128), q_pe = q.narrow(2, 128, 64);
      const std::string shape = fmt::format("T={} H={}", T, H);
      double flops = 2.0 * double(T * H) * 128 * 512;
      const double q_io = double(T * H * (192 + 576) * 2), out_io = double(T * H * (512 + 128) * 2);
      double ms = time_ms([&](int i) { gpu.mla_absorb_q(q_nope, q_pe, w_uk[i % n_sets], q_latent); });
      flop_row("mla_absorb_q", shape, ms, flops, double(w_bytes) + q_io);
      ms = time_ms([&](int i) { gpu.mla_absorb_out(latent, w_uv[i % n_sets], out); });
      flop_row("mla_absorb_out", shape, ms, flops, double(w_bytes) + out_io);
      if (T == 8 && H <= cuda::kMlaAbsorbFewMaxHeads) {  // the few-token kernels (the default) against the GEMMs
        for (int64_t t : {1, 2, 4, 8}) {
          cuda::MlaAbsorbQParams qp{q.raw(), q.raw(), nullptr, q_latent.raw(), q.stride(0), q.stride(1), q.stride(0),
                                    q.stride(1), q_latent.stride(0), q_latent.stride(1), t, H, 128, 64, 512};
          qp.q_pe = static_cast<const char*>(q.raw()) + 128 * 2;
          cuda::MlaAbsorbOutParams op{latent.raw(), nullptr, out.raw(), latent.stride(0), latent.stride(1),
                                      out.stride(0), out.stride(1), t, H, 128, 512};
          for (bool few : {true, false}) {
            absorb_runner.few_token_kernels = few;
            const std::string form = few ? "few-token" : "GEMM";
            flop_row("  absorb_q " + form, fmt::format("T={} H={}", t, H), time_ms([&](int i) {
                       qp.w_uk = w_uk[i % n_sets].raw();
                       absorb_runner.absorb_q(qp, gpu.stream());
                     }), flops * double(t) / double(T), double(w_bytes));
            flop_row("  absorb_out " + form, fmt::format("T={} H={}", t, H), time_ms([&](int i) {
                       op.w_uv = w_uv[i % n_sets].raw();
                       absorb_runner.absorb_out(op, gpu.stream());
                     }), flops * double(t) / double(T), double(w_bytes));
          }
        }
      }
      if (T > 256) continue;  // the absorbed form runs decode batches
      for (bool is_q : {true, false}) {
        auto launch = [&](int i, const cuda::SkinnyFp8Config* c) {
          const AbsorbedWeights& w = fp8[size_t(i % n_sets)];
          if (is_q && c) gpu.mla_absorb_q_w8a8(q_nope, q_pe, w.w_uk_t, q_latent, *c);
          if (is_q && !c) gpu.mla_absorb_q_w8a8(q_nope, q_pe, w.w_uk_t, q_latent);
          if (!is_q && c) gpu.mla_absorb_out_w8a8(latent, w.w_uv_fp8, out, *c);
          if (!is_q && !c) gpu.mla_absorb_out_w8a8(latent, w.w_uv_fp8, out);
        };
        const std::string name = is_q ? "fp8 mla_absorb_q" : "fp8 mla_absorb_out";
        const double moved = fp8_w_bytes + (is_q ? q_io : out_io);
        const cuda::SkinnyFp8Config def = is_q ? gpu.absorb_fp8_default(T, H, 512, 128)
                                               : gpu.absorb_fp8_default(T, H, 128, 512);
        fp8_flop_row(name, shape + " " + cuda::to_string(def), time_ms([&](int i) { launch(i, nullptr); }), flops,
                     moved);
        double best = 1e30;
        cuda::SkinnyFp8Config best_c;
        for (int k_warps : {1, 2, 4, 8})
          for (int row_tiles : {1, 2, 4})
            for (int splits : {1, 2, 4}) {
              const cuda::SkinnyFp8Config c{row_tiles, splits, k_warps};
              if (!cuda::skinny_gemm_fp8_valid(c, is_q ? 128 : 512)) continue;
              const double t = time_ms([&](int i) { launch(i, &c); });
              if (t < best) best = t, best_c = c;
            }
        fp8_flop_row("  fastest", shape + " " + cuda::to_string(best_c), best, flops, moved);
      }
    }
  }
}

// ---- MLA decode, absorbed form (bench_mla_decode) ----

// mem_row(kernel, shape, ms, bytes moved) of main.
using MemRowFn = std::function<void(const std::string&, const std::string&, double, double)>;

// One query per seq over a paged cache: every token at a random slot (page 1, as SGLang's pool), or
// random 64-token pages (FlashMLA's block size; contiguous within a page, kv_page_size 64: the
// kernels take tiles by TMA; " cp.async" rows force the per-thread copies there). Floors: the KV bytes
// read (B * ctx * 576 * 2) over the copy bandwidth, and for 128 heads also 2 * B * H * ctx *
// (576 + 512) FLOPs over the GEMM rate. "run" reuses the batch's plan (md.batch_id, as every layer
// after the first does); "plan+run" plans at each call. Caches under 200 MB rotate among 4 slot sets.
// "fp8kv": the same cache in e4m3 (half the bytes; its floor counts 576 bytes a token), at 16 heads
// also as 64-row jobs ("fp8kv 64-row"). "ctx~N": mixed lengths, multiples of 64 from N / 4 to 7 N / 4
// (mean about N), as a server's batch has, where the plan cuts jobs between CTAs rather than giving
// them whole.
void bench_mla_decode(cuda::CudaBackend& gpu, const MemRowFn& mem_row, const FlopRowFn& flop_row) {
  struct Case {
    int64_t H, B, ctx, page;
    bool mixed = false;
  };
  for (Case c : {Case{16, 64, 4096, 1}, Case{16, 64, 4096, 64}, Case{16, 128, 8192, 1}, Case{16, 128, 8192, 64},
                 Case{128, 64, 4096, 1}, Case{128, 64, 4096, 64}, Case{128, 1, 32768, 1}, Case{128, 1, 32768, 64},
                 Case{16, 1, 32768, 1}, Case{16, 1, 32768, 64}, Case{128, 128, 1024, 1}, Case{128, 128, 1024, 64},
                 Case{16, 32, 4096, 1}, Case{16, 32, 4096, 64}, Case{16, 128, 1024, 1}, Case{16, 128, 1024, 64},
                 Case{16, 256, 2048, 1}, Case{16, 256, 2048, 64}, Case{16, 8, 2048, 64}, Case{16, 1, 2048, 64},
                 Case{128, 64, 4096, 64, true}, Case{16, 128, 4096, 64, true}, Case{128, 1, 256, 1},
                 Case{128, 4, 256, 1}}) {
    std::string shape = fmt::format("H={} B={} ctx{}{} pg={}", c.H, c.B, c.mixed ? "~" : "=", c.ctx, c.page);
    if (shape.find(g_shape_filter) == std::string::npos) continue;
    std::vector<int32_t> lens(static_cast<size_t>(c.B), int32_t(c.ctx)), qs{0}, ks{0};
    for (int64_t s = 0; s < c.B; ++s) {
      if (c.mixed)
        lens[size_t(s)] = int32_t(64 * (c.ctx / 256 + int64_t(hash64(7, uint64_t(s)) % uint64_t(3 * c.ctx / 128 + 1))));
      qs.push_back(qs.back() + 1);
      ks.push_back(ks.back() + lens[size_t(s)]);
    }
    const int32_t longest = *std::max_element(lens.begin(), lens.end());
    int64_t tokens = ks.back(), kv_bytes = tokens * 576 * 2;
    int n_sets = kv_bytes < (int64_t(200) << 20) ? 4 : 1;
    Tensor cache = filled_bf16({tokens * n_sets, 576}, 4);
    Tensor q = filled_bf16({c.B, c.H, 576}, 5), out = gpu.empty(DType::BF16, {c.B, c.H, 512});
    std::vector<AttentionMetadata> mds;
    AttentionMetadata md{int32_t(c.B), gpu.to_device(Tensor::from_i32(lens)), gpu.to_device(Tensor::from_i32(qs)),
                         gpu.to_device(Tensor::from_i32(ks)), Tensor(), longest};
    md.kv_page_size = int32_t(c.page);
    for (int set = 0; set < n_sets; ++set) {
      int64_t pages = tokens / c.page;
      std::vector<int32_t> perm(static_cast<size_t>(pages)), slots(static_cast<size_t>(tokens));
      for (int64_t i = 0; i < pages; ++i) perm[size_t(i)] = int32_t(i);
      for (int64_t i = pages - 1; i > 0; --i)  // Fisher-Yates on the counter hash
        std::swap(perm[size_t(i)], perm[size_t(hash64(99 + set, uint64_t(i)) % uint64_t(i + 1))]);
      for (int64_t i = 0; i < tokens; ++i)
        slots[size_t(i)] = int32_t(set * tokens + perm[size_t(i / c.page)] * c.page + i % c.page);
      md.kv_indices = gpu.to_device(Tensor::from_i32(slots));
      mds.push_back(md);
    }
    float scale = 1.0f / std::sqrt(192.0f);
    double flops = 2.0 * c.H * double(tokens) * (576 + 512);
    // Variants beside the default kernel choice: 64-row jobs on the 2-stage wgmma kernel and on the
    // mma.sync kernel (H = 128), and a 16-head batch as 16-row jobs and as 64-row jobs on the paired
    // wgmma kernel (3/4 of the rows padding; the default from 128 seqs on).
    struct Variant {
      const char* tag;
      int m_tiles;
      bool mma_sync, two_stage, cp_async;
    };
    std::vector<Variant> variants{{"", 0, false, false, false}};
    if (c.page == 64) variants.push_back({" cp.async", 0, false, false, true});
    if (c.H >= 128) {
      variants.push_back({" 2-stage", 0, false, true, false});
      variants.push_back({" mma.sync", 0, true, false, false});
    } else {
      variants.push_back({" 16-row", 1, false, false, false});
      variants.push_back({" 64-row pairs", 4, false, false, false});
      if (c.page == 64) variants.push_back({" 64-row pairs cp.async", 4, false, false, true});
    }
    cuda::MlaDecodePlan& plan = gpu.mla_decode_plan();
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Variant& v = variants[vi];
      plan.force_m_tiles = v.m_tiles, plan.force_mma_sync = v.mma_sync, plan.force_two_stage = v.two_stage;
      plan.force_cp_async = v.cp_async;
      for (int64_t batch_id : {1, 0}) {
        for (auto& m : mds) m.batch_id = batch_id ? batch_id + int64_t(vi) * 1000 : 0;  // 0: plan every call
        double ms = time_ms([&](int i) { gpu.mla_decode(q, cache, 1.0f, mds[i % n_sets], scale, out); }, 100, 10);
        std::string name = std::string(batch_id ? "mla_decode run" : "mla_decode plan+run") + v.tag;
        if (c.H >= 128)
          flop_row(name, shape, ms, flops, double(kv_bytes));
        else
          mem_row(name, shape, ms, double(kv_bytes));
      }
    }
    plan.force_m_tiles = 0, plan.force_mma_sync = false, plan.force_two_stage = false, plan.force_cp_async = false;

    // Attention then W_UV's projection (mla_decode_absorb_out), a decode step's few tokens: the
    // projection merging the split rows itself, and the combine kernel before it. Bytes: the cache's
    // and W_UV's (128 x 512 a head).
    if (c.B <= cuda::kMlaAbsorbFewMaxTokens && c.H <= cuda::kMlaAbsorbFewMaxHeads) {
      Tensor w_uv = filled_bf16({c.H, 128, 512}, 6), projected = gpu.empty(DType::BF16, {c.B, c.H, 128});
      for (auto& m : mds) m.batch_id = 1;
      for (bool merge : {true, false}) {
        gpu.merge_splits_in_absorb_out = merge;
        double ms = time_ms(
            [&](int i) { gpu.mla_decode_absorb_out(q, cache, 1.0f, mds[i % n_sets], scale, w_uv, out, projected); },
            100, 10);
        mem_row(merge ? "mla_decode+absorb_out merged" : "mla_decode+absorb_out combine", shape, ms,
                double(kv_bytes + c.H * 128 * 512 * 2));
      }
      gpu.merge_splits_in_absorb_out = true;
    }

    // The FP8 cache: the BF16 one stored through kv_store (device-side), scaled into e4m3's range.
    const float kv_scale = 1.0f / 64;
    Tensor cache8 = gpu.empty(DType::F8_E4M3, {tokens * n_sets, 576});
    std::vector<int32_t> all(static_cast<size_t>(tokens * n_sets));
    for (size_t i = 0; i < all.size(); ++i) all[i] = int32_t(i);
    gpu.kv_store(cache, gpu.to_device(Tensor::from_i32(all)), cache8, kv_scale);
    // 16 heads also as 64-row jobs (the 2-stage wgmma kernel, 3/4 of the rows padding).
    for (int m_tiles : c.H >= 128 ? std::vector<int>{0} : std::vector<int>{0, 4}) {
      plan.force_m_tiles = m_tiles;
      for (auto& m : mds) m.batch_id = int64_t(variants.size() + m_tiles) * 1000 + 1;  // a plan of its own
      double ms = time_ms([&](int i) { gpu.mla_decode(q, cache8, kv_scale, mds[i % n_sets], scale, out); }, 100, 10);
      const std::string name = m_tiles ? "mla_decode run fp8kv 64-row" : "mla_decode run fp8kv";
      if (c.H >= 128)
        flop_row(name, shape, ms, flops, double(kv_bytes / 2));
      else
        mem_row(name, shape, ms, double(kv_bytes / 2));
    }
    plan.force_m_tiles = 0;
  }
}

// ---- MoE routing and experts (bench_moe) ----

// k distinct random experts per token and positive weights, as device tensors; returns how many
// distinct experts the batch touches.
int64_t random_routing(int64_t T, int64_t k, int64_t E, uint64_t seed, Tensor& ids_dev, Tensor& w_dev) {
  Tensor ids = Tensor::empty(DType::I32, {T, k}), w = Tensor::empty(DType::F32, {T, k});
  std::vector<int32_t> perm(static_cast<size_t>(E));
  std::vector<bool> touched(static_cast<size_t>(E), false);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = int32_t(e);
    for (int64_t j = 0; j < k; ++j) {
      std::swap(perm[size_t(j)], perm[size_t(j + int64_t(hash64(seed + t, uint64_t(j)) % uint64_t(E - j)))]);
      ids.data<int32_t>()[t * k + j] = perm[size_t(j)];
      w.data<float>()[t * k + j] = float(0.05 + uniform01(seed, uint64_t(t * k + j)));
      touched[size_t(perm[size_t(j)])] = true;
    }
  }
  ids_dev = g_gpu->to_device(ids);
  w_dev = g_gpu->to_device(w);
  return int64_t(std::count(touched.begin(), touched.end(), true));
}

// V2-Lite routed experts: 64 x (gate, up [1408, 2048], down [2048, 1408]) BF16, top-6. Floors:
// T <= 128, the bytes of the experts the batch touches (3 * I * H * 2 each, averaged over
// 8 rotating random routings) over the copy bandwidth; T = 4096, 2 * T * k * 3 * I * H FLOPs over
// the GEMM rate. Router rows: logits read and ids + weights written.
void bench_moe(cuda::CudaBackend& gpu, const MemRowFn& mem_row, const FlopRowFn& flop_row) {
  const int64_t E = 64, k = 6, H = 2048, I = 1408, n_sets = 8;
  const double expert_bytes = 3.0 * I * H * 2;
  std::vector<GatedMlpWeights> experts;
  for (int64_t e = 0; e < E; ++e)
    experts.push_back({{filled_bf16({I, H}, uint64_t(3 * e + 11)), {}},
                       {filled_bf16({I, H}, uint64_t(3 * e + 12)), {}},
                       {filled_bf16({H, I}, uint64_t(3 * e + 13)), {}}});
  cuda::MoeRunner& runner = gpu.moe_runner();
  const int default_max_pairs = runner.decode_max_pairs;
  const bool default_grouped = runner.grouped_gemm;
  // A path of the MoeRunner: decode kernels, grouped GEMM, per-expert cuBLASLt GEMMs.
  auto use_path = [&](const char* path) {
    runner.decode_max_pairs = std::string(path) == "decode" ? cuda::kMoeDecodeMaxPairs : 0;
    runner.grouped_gemm = std::string(path) == "grouped";
  };
  // ms per layer of n_sets layers captured in a CUDA graph and replayed (-1 if capture failed).
  auto graph_ms = [&](const std::function<void(int64_t)>& layer, int reps) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    double ms = -1;
    try {
      CUDA_CHECK(cudaStreamBeginCapture(gpu.stream(), cudaStreamCaptureModeRelaxed));
      for (int64_t s = 0; s < n_sets; ++s) layer(s);
      CUDA_CHECK(cudaStreamEndCapture(gpu.stream(), &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      ms = time_ms([&](int) { CUDA_CHECK(cudaGraphLaunch(exec, gpu.stream())); }, reps, 5) / double(n_sets);
    } catch (const std::exception& e) {
      std::printf("moe_experts graph capture failed: %s\n", e.what());
      cudaStreamEndCapture(gpu.stream(), &graph);
      cudaGetLastError();
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return ms;
  };
  for (int64_t T : {1, 4, 8, 16, 32, 64, 128, 4096}) {
    std::vector<Tensor> ids(n_sets), w(n_sets);
    double touched = 0;
    for (int64_t s = 0; s < n_sets; ++s) touched += double(random_routing(T, k, E, 1000 * T + s, ids[s], w[s]));
    touched /= double(n_sets);
    Tensor x = filled_bf16({T, H}, 21), out = gpu.empty(DType::BF16, {T, H});
    std::string shape = fmt::format("T={} E=64 k=6 ({:.1f} touched)", T, touched);
    const double bytes = touched * expert_bytes + 2.0 * T * H * 2, flops = 2.0 * T * k * 3 * I * H;
    auto row = [&](const std::string& name, double ms) {
      if (T <= 128)
        mem_row(name, shape, ms, bytes);
      else
        flop_row(name, shape, ms, flops, bytes);
    };
    runner.decode_max_pairs = default_max_pairs;
    runner.grouped_gemm = default_grouped;
    row("moe_experts v2-lite", time_ms([&](int i) { gpu.moe_experts(x, ids[i % n_sets], w[i % n_sets], experts, out); },
                                       T >= 1024 ? 30 : 200, 10));
    for (const char* path : {"decode", "grouped", "per-expert"}) {
      if (std::string(path) == "decode" && T * k > cuda::kMoeDecodeMaxPairs) continue;
      use_path(path);
      if (std::string(path) == "per-expert") {  // waits on the host: eager only
        if (T > 64)
          row("moe_experts per-expert", time_ms([&](int i) {
                gpu.moe_experts(x, ids[i % n_sets], w[i % n_sets], experts, out);
              }, 30, 10));
        continue;
      }
      // As a CUDA graph replays it (no per-call host work between kernels): the 8 routings
      // captured back to back, like 8 layers; time per layer.
      const double gms =
          graph_ms([&](int64_t s) { gpu.moe_experts(x, ids[s], w[s], experts, out); }, T >= 1024 ? 10 : 50);
      if (gms > 0) row(fmt::format("moe_experts graph {}", path), gms);
    }
  }
  runner.decode_max_pairs = default_max_pairs;
  runner.grouped_gemm = default_grouped;
  // V3 at one token: its 8 routed experts and the fused shared one, 9 slots of [2048, 7168] (only
  // those allocated), as the runner picks and with down and the combine forced into two launches
  // (MoeRunner::fuse_one_token_down off). Floor: the 9 experts' bytes.
  {
    const int64_t E3 = 9, H3 = 7168, I3 = 2048;
    std::vector<GatedMlpWeights> v3;
    for (int64_t e = 0; e < E3; ++e)
      v3.push_back({{filled_bf16({I3, H3}, uint64_t(3 * e + 51)), {}},
                    {filled_bf16({I3, H3}, uint64_t(3 * e + 52)), {}},
                    {filled_bf16({H3, I3}, uint64_t(3 * e + 53)), {}}});
    std::vector<Tensor> ids(n_sets), w(n_sets);
    for (int64_t s = 0; s < n_sets; ++s) random_routing(1, E3, E3, 500 + s, ids[s], w[s]);
    Tensor x = filled_bf16({1, H3}, 23), out = gpu.empty(DType::BF16, {1, H3});
    for (bool fused : {true, false}) {
      runner.fuse_one_token_down = fused;
      const double gms = graph_ms([&](int64_t s) { gpu.moe_experts(x, ids[s], w[s], v3, out); }, 50);
      if (gms > 0)
        mem_row(fmt::format("moe_experts graph v3{}", fused ? "" : " down, combine"), "T=1 E=9 k=9", gms,
                double(E3) * 3.0 * I3 * H3 * 2);
    }
    runner.fuse_one_token_down = true;
  }
  // V2-Lite at one token as the model runs it: the routing (greedy softmax over 64, top-6, and the
  // 2 shared experts fused in as slots 7 and 8) and the experts, the routing a launch of its own or
  // inside the expert kernels (MoeRunner::route_in_experts). Floor: the 8 experts' bytes.
  {
    MoeRouting r{TopkMethod::Greedy, ScoringFunc::Softmax, 64, 6, 1, 1, false, 1.0f};
    r.num_fused_shared = 2;
    std::vector<GatedMlpWeights> with_shared = experts;
    for (int64_t e = E; e < E + 2; ++e)
      with_shared.push_back({{filled_bf16({I, H}, uint64_t(3 * e + 11)), {}},
                             {filled_bf16({I, H}, uint64_t(3 * e + 12)), {}},
                             {filled_bf16({H, I}, uint64_t(3 * e + 13)), {}}});
    std::vector<Tensor> logits(n_sets);
    for (int64_t s = 0; s < n_sets; ++s) {
      Tensor lh = Tensor::empty(DType::F32, {1, E});
      for (int64_t i = 0; i < E; ++i) lh.data<float>()[i] = 2.0f * normal01(uint64_t(600 + s), uint64_t(i));
      logits[size_t(s)] = gpu.to_device(lh);
    }
    Tensor x = filled_bf16({1, H}, 21), out = gpu.empty(DType::BF16, {1, H});
    Tensor ids = gpu.empty(DType::I32, {1, r.slots()}), w = gpu.empty(DType::F32, {1, r.slots()});
    for (bool inside : {true, false}) {
      runner.route_in_experts = inside;
      const double gms = graph_ms(
          [&](int64_t s) { gpu.moe_route_experts(logits[size_t(s)], Tensor(), r, x, with_shared, ids, w, out); }, 50);
      if (gms > 0)
        mem_row(fmt::format("moe_route_experts graph v2-lite{}", inside ? "" : " route apart"), "T=1 E=66 k=8", gms,
                8.0 * expert_bytes);
    }
    runner.route_in_experts = true;
  }
  struct RouteCase {
    const char* name;
    MoeRouting r;
    bool bias;
  };
  for (const RouteCase& c : {RouteCase{"moe_route v2-lite", {TopkMethod::Greedy, ScoringFunc::Softmax, 64, 6, 1, 1,
                                                              false, 1.0f}, false},
                             RouteCase{"moe_route v3 noaux_tc", {TopkMethod::NoauxTc, ScoringFunc::Sigmoid, 256, 8, 8,
                                                                  4, true, 2.5f}, true}}) {
    for (int64_t T : {1, 16, 128, 256, 512, 1024, 4096}) {
      int64_t Er = c.r.num_experts, kr = c.r.top_k;
      Tensor lh = Tensor::empty(DType::F32, {T, Er});
      for (int64_t i = 0; i < T * Er; ++i) lh.data<float>()[i] = 2.0f * normal01(77, uint64_t(i));
      Tensor logits = gpu.to_device(lh), bias = gpu.to_device(Tensor::zeros(DType::F32, {Er}));
      Tensor ids = gpu.empty(DType::I32, {T, kr}), wts = gpu.empty(DType::F32, {T, kr});
      // Both kernels, to place kRouteWarpPerTokenFromScores where they cross.
      for (auto [form, warp_from] : {std::pair{"block/token", int64_t(1) << 40}, std::pair{"warp/token", int64_t(0)}}) {
        gpu.route_warp_per_token_from_scores = warp_from;
        double ms = time_ms([&](int) { gpu.moe_route(logits, c.bias ? bias : Tensor(), c.r, ids, wts); }, 100, 10);
        mem_row(fmt::format("{} {}", c.name, form), fmt::format("T={} E={} k={}", T, Er, kr), ms,
                double(T * Er * 4 + T * kr * 8));
      }
      gpu.route_warp_per_token_from_scores = cuda::kRouteWarpPerTokenFromScores;
    }
  }
}

// ---- FP8 MoE (bench_moe_fp8) ----

// DeepSeek-V3's routed experts as one TP8 shard holds them: 256 x (gate, up [256, 7168], down
// [7168, 256]) e4m3 with 128 x 128 block scales, top-8 by noaux_tc. Everything of the layer but the
// router GEMM: routing from the logits, the activation quantizations, both GEMMs, SiLU-and-mul and
// the combine, as a CUDA graph replays them (8 random routings back to back; time per layer).
// Floor: the bytes of the experts the batch touches (weights and scales) over the copy bandwidth.
void bench_moe_fp8(cuda::CudaBackend& gpu, double copy_bw, std::vector<Row>& rows) {
  const int64_t E = 256, k = 8, H = 7168, I = 256, n_sets = 8;
  MoeRouting r{TopkMethod::NoauxTc, ScoringFunc::Sigmoid, int32_t(E), int32_t(k), 8, 4, true, 2.5f};
  std::vector<GatedMlpWeights> experts;
  for (int64_t e = 0; e < E; ++e)
    experts.push_back({random_fp8_weight(I, H, 3 * e + 11), random_fp8_weight(I, H, 3 * e + 12),
                       random_fp8_weight(H, I, 3 * e + 13)});
  gpu.pack_moe_experts(experts, experts.size());  // as the model lays them out
  const double expert_bytes = 3.0 * I * H + 3.0 * (I / 128) * (H / 128) * 4;
  // A zero correction bias: tokens spread over the experts evenly, as a balanced model's do (a
  // random bias as wide as the scores' spread crowds them onto fewer experts).
  Tensor bias = gpu.to_device(Tensor::zeros(DType::F32, {E}));
  for (int64_t T : {1, 4, 32, 128, 512, 4096}) {
    if (fmt::format("T={} ", T).find(g_shape_filter) == std::string::npos) continue;
    std::vector<Tensor> logits, ids, w;
    double touched = 0;
    Tensor x = random_bf16({T, H}, 21), out = gpu.empty(DType::BF16, {T, H});
    for (int64_t s = 0; s < n_sets; ++s) {
      Tensor lh = Tensor::empty(DType::F32, {T, E});
      for (int64_t i = 0; i < T * E; ++i) lh.data<float>()[i] = 2.0f * normal01(1000 * T + s, uint64_t(i));
      logits.push_back(gpu.to_device(lh));
      ids.push_back(gpu.empty(DType::I32, {T, k}));
      w.push_back(gpu.empty(DType::F32, {T, k}));
      gpu.moe_route(logits.back(), bias, r, ids.back(), w.back());
      Tensor ih = gpu.to_host(ids.back());
      std::vector<bool> hit(size_t(E), false);
      for (int64_t i = 0; i < ih.numel(); ++i) hit[size_t(ih.data<int32_t>()[i])] = true;
      touched += double(std::count(hit.begin(), hit.end(), true)) / double(n_sets);
    }
    auto time_layer = [&] {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(gpu.stream(), cudaStreamCaptureModeRelaxed));
      for (int64_t s = 0; s < n_sets; ++s) {
        gpu.moe_route(logits[s], bias, r, ids[s], w[s]);
        gpu.moe_experts(x, ids[s], w[s], experts, out);
      }
      CUDA_CHECK(cudaStreamEndCapture(gpu.stream(), &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      double ms = time_ms([&](int) { CUDA_CHECK(cudaGraphLaunch(exec, gpu.stream())); }, T >= 1024 ? 10 : 50, 5) /
                  double(n_sets);
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(graph));
      return ms;
    };
    double bytes = touched * expert_bytes + 4.0 * T * H, floor_ms = bytes / copy_bw * 1e3;
    double flops = 2.0 * T * k * 3 * I * H;
    // The launches the runtime takes (tuned, else planned), then the mma.sync kernel with the same
    // K splits and column tiles.
    cuda::MoeRunner& runner = gpu.moe_runner();
    cuda::MoeFp8GemmParams gu{}, down{};
    gu.N = int32_t(2 * I), gu.K = int32_t(H), down.N = int32_t(H), down.K = int32_t(I);
    gu.max_rows = down.max_rows = int32_t(T * k);
    gu.num_experts = down.num_experts = int32_t(E);
    auto as_mma = [](cuda::MoeFp8Launch l) {
      l.kernel = cuda::MoeFp8Launch::Kernel::MmaSync, l.tile_rows = 32;
      return l;
    };
    for (bool mma : {false, true}) {
      runner.fp8_gate_up_launch = runner.fp8_down_launch = std::nullopt;
      if (mma) {
        runner.fp8_gate_up_launch = as_mma(cuda::plan_moe_grouped_gemm_fp8(gu, gpu.num_sms(), true));
        runner.fp8_down_launch = as_mma(cuda::plan_moe_grouped_gemm_fp8(down, gpu.num_sms(), false));
      }
      const double ms = time_layer();
      rows.push_back({mma ? "fp8 moe v3-tp8 graph mma.sync" : "fp8 moe v3-tp8 graph",
                      fmt::format("T={} E=256 k=8 ({:.1f} touched)", T, touched), ms, bytes / (ms * 1e-3) / 1e12,
                      floor_ms, floor_ms / ms, "TB/s"});
      std::printf("fp8 moe T=%lld%s: %.4f ms, %.0f TFLOP/s\n", (long long)T, mma ? " (mma.sync)" : "", ms,
                  flops / (ms * 1e-3) / 1e12);
    }
    runner.fp8_gate_up_launch = runner.fp8_down_launch = std::nullopt;
  }
}

// ---- Sampling (bench_sampling) ----

// One token per row over the V3 vocabulary (129280 fp32 logits). Floor: reading the logits once.
// Inputs rotate among 4 sets; the parameters are uploaded in every call (part of the op).
void bench_sampling(cuda::CudaBackend& gpu, const MemRowFn& mem_row) {
  const int64_t V = 129280;
  struct Mode {
    const char* name;
    SamplingParams p;
  };
  std::vector<Mode> modes = {{"greedy", {0.0f, -1, 1.0f, 0.0f, 1, 0}},
                             {"top-k 50 top-p 0.9", {0.7f, 50, 0.9f, 0.0f, 1, 0}},
                             {"temperature only", {1.0f, -1, 1.0f, 0.0f, 1, 0}},
                             {"top-p 0.9 min-p 0.05", {1.0f, -1, 0.9f, 0.05f, 1, 0}}};
  for (int64_t B : {1, 16, 64}) {
    std::vector<Tensor> logits;
    for (int s = 0; s < 4; ++s) {
      Tensor h = Tensor::empty(DType::F32, {B, V});
      for (int64_t i = 0; i < B * V; ++i) h.data<float>()[i] = 2.0f * normal01(500 + uint64_t(s), uint64_t(i));
      logits.push_back(gpu.to_device(h));
    }
    Tensor out = gpu.empty(DType::I32, {B});
    for (const Mode& m : modes) {
      std::vector<SamplingParams> params(static_cast<size_t>(B), m.p);
      for (int64_t b = 0; b < B; ++b) params[size_t(b)].seed = uint64_t(b);
      double ms = time_ms([&](int i) { gpu.sample(logits[i % 4], params, out); }, 100, 10);
      mem_row(std::string("sample ") + m.name, fmt::format("B={} V={}", B, V), ms, double(B * V * 4));
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  // --json FILE: the rows as JSON too; --only GROUP (rows, linear, mla_prefill, mla_absorb,
  // mla_decode, moe, moe_fp8, sampling, fp8_linear, skinny): run only that group, after the two ceilings; --shape TEXT:
  // only the mla_decode cases whose shape contains TEXT, or moe_fp8's token count "T=N " (to profile one).
  std::string json_path, only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
    if (std::string(argv[i]) == "--shape") g_shape_filter = argv[i + 1];
  }
  auto run = [&](const char* group) { return only.empty() || only == group; };
  cuda::CudaBackend gpu;
  load_tuned_configs(gpu, "");  // the op follows this device's tuned file where there is one
  g_gpu = &gpu;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  // Ceiling 1: copy bandwidth, 2 GiB each way.
  size_t bytes = size_t(2) << 30;
  void *src, *dst;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemset(src, 1, bytes));
  double copy_ms = time_ms([&](int) { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu.stream())); }, 20);
  double copy_bw = 2.0 * double(bytes) / (copy_ms * 1e-3);  // bytes/s, read + written
  cudaFree(src);
  cudaFree(dst);

  // Ceiling 2: dense BF16 GEMM rate on random data.
  cuda::GemmRunner gemm;
  int64_t M = 8192;
  Tensor A = random_bf16({M, M}, 1), B = random_bf16({M, M}, 2), C = gpu.empty(DType::BF16, {M, M});
  double gemm_ms = time_ms([&](int) { gemm.bf16_nt(A.raw(), M, B.raw(), M, C.raw(), M, false, M, M, M, gpu.stream()); }, 20);
  double gemm_rate = 2.0 * double(M) * M * M / (gemm_ms * 1e-3);
  A = B = C = Tensor();

  std::vector<Row> rows;
  auto mem_row = [&](const std::string& k, const std::string& shape, double ms, double moved) {
    double floor_ms = moved / copy_bw * 1e3;
    rows.push_back({k, shape, ms, moved / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms, "TB/s"});
  };
  auto flop_row = [&](const std::string& k, const std::string& shape, double ms, double flops, double moved) {
    double floor_ms = std::max(flops / gemm_rate, moved / copy_bw) * 1e3;
    rows.push_back({k, shape, ms, flops / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms, "TFLOP/s"});
  };
  // Hopper's dense FP8 tensor-core rate is twice its BF16 one.
  auto fp8_flop_row = [&](const std::string& k, const std::string& shape, double ms, double flops, double moved) {
    double floor_ms = std::max(flops / (2 * gemm_rate), moved / copy_bw) * 1e3;
    rows.push_back({k, shape, ms, flops / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms, "TFLOP/s"});
  };

  // RMSNorm and add+RMSNorm over a hidden state: 4 rotating sets of 16k x 7168 (235 MB each).
  for (int64_t D : {2048, 7168}) {
    if (!run("rows")) break;
    int64_t T = 16384;
    std::vector<Tensor> xs, outs, res;
    for (int i = 0; i < 4; ++i) {
      xs.push_back(random_bf16({T, D}, 10 + i));
      res.push_back(random_bf16({T, D}, 20 + i));
      outs.push_back(gpu.empty(DType::BF16, {T, D}));
    }
    Tensor w = random_bf16({D}, 3);
    double ms = time_ms([&](int i) { gpu.rmsnorm(xs[i % 4], w, 1e-6f, outs[i % 4]); });
    mem_row("rmsnorm", fmt::format("{}x{}", T, D), ms, 2.0 * 2 * T * D);
    ms = time_ms([&](int i) { gpu.add_rmsnorm(xs[i % 4], res[i % 4], w, 1e-6f, outs[i % 4]); });
    mem_row("add_rmsnorm", fmt::format("{}x{}", T, D), ms, 4.0 * 2 * T * D);
    ms = time_ms([&](int i) { gpu.silu_and_mul(xs[i % 4], res[i % 4], outs[i % 4]); });
    mem_row("silu_and_mul", fmt::format("{}x{}", T, D), ms, 3.0 * 2 * T * D);
  }

  // Linear layers at decode (weight-bound) and prefill (FLOP-bound) sizes.
  struct Lin {
    const char* name;
    int64_t N, K;
  };
  for (Lin l : std::vector<Lin>{{"v3.q_b", 24576, 1536}, {"v3.kv_a", 576, 7168}, {"v3.o", 7168, 16384},
                               {"v3.dense_gate_up", 36864, 7168}, {"v2lite.q", 3072, 2048}}) {
    if (!run("linear")) break;
    int n_sets = int(std::max<int64_t>(1, std::min<int64_t>(8, (int64_t(200) << 20) / (l.N * l.K * 2) + 1)));
    std::vector<Tensor> ws;
    for (int i = 0; i < n_sets; ++i) ws.push_back(random_bf16({l.N, l.K}, 100 + i, 0.02f));
    for (int64_t T : {1, 16, 4096}) {
      Tensor x = random_bf16({T, l.K}, 5), y = gpu.empty(DType::BF16, {T, l.N});
      double ms = time_ms([&](int i) { gpu.linear(x, LinearWeight{ws[i % n_sets], {}}, y); });
      double moved = 2.0 * (l.N * l.K + T * l.K + T * l.N), flops = 2.0 * T * l.N * l.K;
      flop_row(std::string("linear ") + l.name, fmt::format("T={} N={} K={}", T, l.N, l.K), ms, flops, moved);
    }
  }

  // The skinny GEMM at one token over the decode shapes, each split-K count beside the default.
  for (Lin l : std::vector<Lin>{{"v2lite.q", 3072, 2048},
                                {"v2lite.kv_a", 576, 2048},
                                {"v2lite.o", 2048, 2048},
                                {"v2lite.router", 64, 2048},
                                {"v2lite.shared_gate_up", 5632, 2048},
                                {"v2lite.shared_down", 2048, 2816},
                                {"v3.q_a", 1536, 7168},
                                {"v3.kv_a", 576, 7168},
                                {"v3.o", 7168, 16384}}) {
    if (!run("skinny")) break;
    int n_sets = int(std::max<int64_t>(1, std::min<int64_t>(16, (int64_t(400) << 20) / (l.N * l.K * 2) + 1)));
    std::vector<Tensor> ws;
    for (int i = 0; i < n_sets; ++i) ws.push_back(random_bf16({l.N, l.K}, 300 + i, 0.02f));
    Tensor x = random_bf16({1, l.K}, 6), y = gpu.empty(DType::F32, {1, l.N});
    Tensor partials =
        gpu.empty(DType::F32, {int64_t(cuda::skinny_gemm_partial_floats(l.N, cuda::kSkinnyGemmMaxSplits))});
    int* counters;
    CUDA_CHECK(cudaMalloc(&counters, size_t(l.N / 16 + 1) * sizeof(int)));
    CUDA_CHECK(cudaMemset(counters, 0, size_t(l.N / 16 + 1) * sizeof(int)));
    int chosen = cuda::skinny_gemm_splits(l.N, l.K, prop.multiProcessorCount);
    for (int splits : {1, 2, 4, 8}) {
      cuda::SkinnySplit split{splits, partials.data<float>(), counters};
      double ms = time_ms([&](int i) {
        cuda::launch_skinny_gemm(x.raw(), l.K, ws[size_t(i % n_sets)].raw(), l.K, y.raw(), l.N, true, 1, l.N, l.K,
                                 split, gpu.stream());
      });
      mem_row(fmt::format("skinny {}{}", l.name, splits == chosen ? " (default)" : ""),
              fmt::format("N={} K={} splits={}", l.N, l.K, splits), ms, 2.0 * l.N * l.K);
    }
    CUDA_CHECK(cudaFree(counters));
  }

  // A block's first linear with its input's add+RMSNorm at one token: folded into the skinny GEMM,
  // and as the ops in turn (add_rmsnorm, then the linear). Floor: the weight's bytes.
  for (Lin l : std::vector<Lin>{{"v2lite.q_kv_a", 3648, 2048}, {"v2lite.router", 64, 2048}}) {
    if (!run("skinny")) break;
    const bool router = l.N == 64;  // fp32 logits, and the normalized row kept for the experts
    int n_sets = int(std::max<int64_t>(1, std::min<int64_t>(16, (int64_t(400) << 20) / (l.N * l.K * 2) + 1)));
    std::vector<Tensor> ws;
    for (int i = 0; i < n_sets; ++i) ws.push_back(random_bf16({l.N, l.K}, 400 + i, 0.02f));
    Tensor x = random_bf16({1, l.K}, 7), residual = random_bf16({1, l.K}, 8), norm = random_bf16({l.K}, 9);
    Tensor normed = gpu.empty(DType::BF16, {1, l.K}), y = gpu.empty(router ? DType::F32 : DType::BF16, {1, l.N});
    for (bool fold : {true, false}) {
      gpu.fold_norm_into_linear = fold;
      // The residual is rebound to a new buffer by each folded call: the next call reads that one.
      double ms = time_ms([&](int i) {
        gpu.rmsnorm_linear(x, &residual, norm, 1e-6f, router ? &normed : nullptr, LinearWeight{ws[size_t(i % n_sets)], {}},
                           y);
      });
      mem_row(fmt::format("rmsnorm_linear {} {}", l.name, fold ? "folded" : "ops"),
              fmt::format("N={} K={}", l.N, l.K), ms, 2.0 * l.N * l.K);
    }
    gpu.fold_norm_into_linear = true;
  }

  if (run("fp8_linear")) bench_fp8_linear(gpu, copy_bw, rows);
  if (run("mla_prefill")) bench_mla_prefill(gpu, flop_row);
  if (run("mla_absorb")) bench_mla_absorb(gpu, flop_row, fp8_flop_row);
  if (run("mla_decode")) bench_mla_decode(gpu, mem_row, flop_row);
  if (run("moe")) bench_moe(gpu, mem_row, flop_row);
  if (run("moe_fp8")) bench_moe_fp8(gpu, copy_bw, rows);
  if (run("sampling")) bench_sampling(gpu, mem_row);

  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("copy bandwidth (read+write): %.2f TB/s; dense BF16 GEMM 8192^3: %.0f TFLOP/s\n", copy_bw / 1e12,
              gemm_rate / 1e12);
  std::printf("%-24s %-26s %10s %12s %10s %9s\n", "kernel", "shape", "ms", "achieved", "floor ms", "of floor");
  nlohmann::json out = {{"device", prop.name}, {"copy_tb_s", copy_bw / 1e12}, {"gemm_bf16_tflops", gemm_rate / 1e12}};
  for (const Row& r : rows) {
    std::printf("%-24s %-26s %10.4f %7.2f %-7s %9.4f %8.0f%%\n", r.kernel.c_str(), r.shape.c_str(), r.ms, r.achieved,
                r.unit.c_str(), r.floor_ms, 100 * r.fraction);
    out["rows"].push_back({{"kernel", r.kernel}, {"shape", r.shape}, {"ms", r.ms}, {"achieved", r.achieved},
                           {"unit", r.unit}, {"floor_ms", r.floor_ms}, {"fraction", r.fraction}});
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    std::fputs(out.dump(1).c_str(), f);
    std::fclose(f);
  }
  return 0;
}
