// The tuners on CUDA. tune-fp8-gemm: every launch of the FP8 W8A8 linear timed per weight shape
// and token count behind the kernel that makes its input, each checked against cuBLASLt's product
// first, the fastest kept. tune-moe: every
// launch of the FP8 MoE's two grouped GEMMs, timed in the whole layer, each checked against the
// planned launches' output.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "common/relative_l2.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/moe_experts.h"

namespace mlaserve::cuda {

namespace {

// Both kernels compute the same W8A8 math in fp32, in other orders: far below this.
constexpr double kAgreement = 1e-3;

// Two BF16 roundings of the same fp32 sums, added in other orders, differ by an ulp here and there;
// some configurations cuBLASLt accepts compute wrong products (256 x 64 tiles, CUDA 13.0, H100).
constexpr double kLtAgreement = 1e-2;

// Launches of a MoE layer differ in the order of the fp32 sums, which moves an e4m3 rounding of the
// SiLU output now and then (the GPU test measured 2.4e-3 against the CPU at worst): a broken
// launch lies far above this.
constexpr double kMoeAgreement = 1e-2;

// ids [T, pairs] on the host: per token, top_k distinct routed experts drawn uniformly, then (with
// route_shared) the shared experts.
Tensor even_routing(const MoeTuneCase& c, uint64_t seed) {
  const int64_t k = c.pairs_per_token();
  Tensor ids = Tensor::empty(DType::I32, {c.tokens, k});
  std::mt19937_64 rng(seed);
  std::vector<int32_t> routed(size_t(c.routed));
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::iota(routed.begin(), routed.end(), 0);
    int32_t* row = ids.data<int32_t>() + t * k;
    for (int64_t j = 0; j < c.top_k; ++j) {
      std::swap(routed[size_t(j)], routed[size_t(j + int64_t(rng() % uint64_t(c.routed - j)))]);
      row[j] = routed[size_t(j)];
    }
    for (int64_t j = c.top_k; j < k; ++j) row[j] = int32_t(c.routed + j - c.top_k);
  }
  return ids;
}

// The configurations cuBLASLt accepts, enumerated once per weight shape. The full enumeration
// (CublasLt::configs) is host-bound: about 318,000 cublasLtMatmulAlgoCheck calls, 2-3 s a product.
// Acceptance depends on the product's layouts and types, all of them the shape's but the token
// count, so a later token count only re-checks those the shape's first one accepted: what the full
// enumeration would give, save configurations cuBLASLt would accept at that token count but
// rejected at the first, which go untried.
class LtConfigsByShape {
 public:
  std::vector<CublasLtConfig> configs(CudaBackend& gpu, int64_t T, const LinearWeight& w, bool out_f32) {
    const Shape shape{w.out_features(), w.in_features(), w.weight.stride(0), out_f32};
    auto it = accepted_.find(shape);
    if (it == accepted_.end()) return accepted_[shape] = gpu.fp8_gemm_configs(T, w, out_f32);
    return gpu.fp8_gemm_configs(T, w, out_f32, &it->second);
  }

 private:
  using Shape = std::tuple<int64_t, int64_t, int64_t, bool>;  // N, K, the weight's row stride, F32 out
  std::map<Shape, std::vector<CublasLtConfig>> accepted_;     // at the shape's first token count
};

// Times `here` in full from codes behind the producer writing them (from_codes(i)) and from rows
// (from_rows(i): quantized first), and keeps it in `best` / `best_rows` where faster.
void time_candidate(CudaBackend& gpu, Fp8GemmChoice here, const std::function<void(bool)>& produce,
                    const std::function<void(int)>& from_codes, const std::function<void(int)>& from_rows,
                    Fp8GemmChoice& best, Fp8GemmChoice& best_rows, const std::string& product,
                    const std::function<void(const std::string&)>& progress) {
  here.ms = median_ms(gpu.stream(), [&](int i) {
    produce(true);
    from_codes(i);
  });
  const double rows_ms = median_ms(gpu.stream(), [&](int i) {
    produce(false);
    from_rows(i);
  });
  progress(fmt::format("{}: {} {:.4f} ms, from rows {:.4f}", product, to_string(here), here.ms, rows_ms));
  if (here.ms < best.ms) best = here;
  if (rows_ms < best_rows.ms) best_rows = here, best_rows.ms = rows_ms;
}

// cuBLASLt's configurations of one product (`lt_configs`) against `best` and
// `best_rows` (its heuristic's pick from codes and from rows, timed into `out`; `want`: that pick's
// BF16 product of xq, on the host, in F32): each timed in one sample behind the producer writing
// codes, the fastest 16 again in ten; the fastest few of those checked against the heuristic's
// product, then timed in full from codes and from rows (the same configuration after a quantization
// launch). Most configurations run 2-4x the fastest: ten samples of every one took 43 s of dense_gate_up
// at 4096 tokens (1.8 ms a product) on an H100.
void tune_cublaslt_configs(CudaBackend& gpu, const std::vector<LinearWeight>& ws, const Fp8Activation& xq,
                           const Tensor& want, const Fp8Activation& codes, const Tensor& rows, Tensor& out,
                           const std::function<void(bool)>& produce, LtConfigsByShape& lt_configs,
                           Fp8GemmChoice& best, Fp8GemmChoice& best_rows,
                           const std::function<void(const std::string&)>& progress) {
  constexpr size_t kChecked = 4, kRetimed = 16;
  const int64_t T = out.size(0), N = out.size(1), K = ws[0].in_features();
  const size_t copies = ws.size();
  auto from_codes_ms = [&](const CublasLtConfig& c, int reps, int warmup) {
    return median_ms(gpu.stream(), [&](int i) {
      produce(true);
      gpu.linear_fp8_w8a8_cublaslt(codes.q, codes.scales, ws[size_t(i) % copies], out, c);
    }, reps, warmup);
  };
  std::vector<std::pair<double, CublasLtConfig>> quick;
  for (const CublasLtConfig& c : lt_configs.configs(gpu, T, ws[0], out.dtype() == DType::F32)) {
    try {  // an accepted configuration that cuBLASLt then refuses to run is left out, not fatal
      quick.emplace_back(from_codes_ms(c, 1, 0), c);
    } catch (const Error& e) {
      progress(fmt::format("N={} K={} T={}: {} does not run: {}", N, K, T, to_string(c), e.what()));
    }
  }
  std::sort(quick.begin(), quick.end());
  progress(fmt::format("N={} K={} T={}: {} cuBLASLt configurations", N, K, T, quick.size()));
  quick.resize(std::min(quick.size(), kRetimed));
  for (auto& [ms, c] : quick) ms = from_codes_ms(c, 10, 2);
  std::sort(quick.begin(), quick.end());
  for (size_t k = 0; k < std::min(quick.size(), kChecked); ++k) {
    const CublasLtConfig& c = quick[k].second;
    gpu.linear_fp8_w8a8_cublaslt(xq.q, xq.scales, ws[0], out, c);
    const double err = relative_l2(gpu.to_host(out), want);
    if (!(err <= kLtAgreement)) {
      progress(fmt::format("N={} K={} T={}: {} differs from the heuristic's by {:.2e}: skipped", N, K, T,
                           to_string(c), err));
      continue;
    }
    Fp8GemmChoice here;  // cuBLASLt
    here.lt = c;
    time_candidate(
        gpu, here, produce,
        [&](int i) { gpu.linear_fp8_w8a8_cublaslt(codes.q, codes.scales, ws[size_t(i) % copies], out, c); },
        [&](int i) { gpu.linear_w8a8_cublaslt(rows, ws[size_t(i) % copies], out, c); }, best, best_rows,
        fmt::format("N={} K={} T={}", N, K, T), progress);
  }
}

// The warp-specialized kernel's launches (fp8_gemm_wgmma.h) against `best` and `best_rows`, as
// tune_cublaslt_configs does cuBLASLt's configurations: each checked against cuBLASLt's product,
// then timed from codes behind the producer, and from rows after a quantization launch.
void tune_wgmma_launches(CudaBackend& gpu, const std::vector<LinearWeight>& ws, const Fp8Activation& xq,
                         const Tensor& want, const Fp8Activation& codes, const Tensor& rows, Tensor& out,
                         const std::function<void(bool)>& produce, Fp8GemmChoice& best, Fp8GemmChoice& best_rows,
                         const std::function<void(const std::string&)>& progress) {
  const int64_t T = out.size(0), N = out.size(1), K = ws[0].in_features();
  const size_t copies = ws.size();
  Fp8Activation requant = gpu.empty_fp8_activation(T, K, 128);
  for (int cluster : {1, 2})
    for (int waves : {1, 2})
      for (int group_m : {4, 8, 16}) {
        Fp8GemmChoice here;
        here.kernel = Fp8GemmChoice::Kernel::Wgmma, here.waves = waves, here.group_m = group_m, here.cluster = cluster;
        gpu.linear_fp8_w8a8_wgmma(xq.q, xq.scales, ws[0], out, waves, group_m, cluster);
        const double err = relative_l2(gpu.to_host(out), want);
        if (!(err <= kLtAgreement)) {
          progress(fmt::format("N={} K={} T={}: {} differs from cuBLASLt by {:.2e}: skipped", N, K, T, to_string(here),
                               err));
          continue;
        }
        auto launch = [&](const Fp8Activation& a, int i) {
          gpu.linear_fp8_w8a8_wgmma(a.q, a.scales, ws[size_t(i) % copies], out, waves, group_m, cluster);
        };
        time_candidate(
            gpu, here, produce, [&](int i) { launch(codes, i); },
            [&](int i) {
              gpu.quantize_fp8_per_token_group(rows, 128, requant.q, requant.scales);
              launch(requant, i);
            },
            best, best_rows, fmt::format("N={} K={} T={}", N, K, T), progress);
      }
}

MoeGemmChoice to_choice(const MoeFp8Launch& l, double ms) {
  return {l.kernel == MoeFp8Launch::Kernel::Wgmma ? MoeGemmChoice::Kernel::Wgmma : MoeGemmChoice::Kernel::MmaSync,
          l.tile_rows, l.k_splits, l.n_tiles_per_block, ms};
}

}  // namespace

Fp8GemmTuning CudaBackend::tune_fp8_gemm(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                         const std::vector<int64_t>& tokens,
                                         const std::function<void(const std::string&)>& progress) {
  Fp8GemmTuning out;
  out.set_device(device_name());
  uint64_t seed = 1;
  LtConfigsByShape lt_configs;
  for (auto [N, K] : shapes) {
    MLA_CHECK(N > 0 && K > 0 && N % 16 == 0 && K % 128 == 0,
              "tune-fp8-gemm: N={} K={}: the block-scaled FP8 linear takes N a multiple of 16 and K of 128", N, K);
    // Copies of the weight to rotate among, together larger than L2, so every call reads HBM as
    // a decode step does.
    const int copies = int(std::clamp<int64_t>((int64_t(256) << 20) / (N * K) + 1, 1, 8));
    std::vector<LinearWeight> ws(static_cast<size_t>(copies));
    for (LinearWeight& w : ws) {
      Tensor b = empty(DType::BF16, {N, K});
      MLA_CHECK(fill_normal(b, seed++, 0.0f, 0.05f) && quantize_fp8_blocks(b, 128, 128, w),
                "tune-fp8-gemm: cannot make a random FP8 weight");
      w = to_backend(w);  // a ragged last block of rows gets the pad rows cuBLASLt reads
    }
    for (int64_t T : tokens) {
      MLA_CHECK(T > 0, "tune-fp8-gemm: token count {} must be positive", T);
      Tensor x = empty(DType::BF16, {T, K}), ref = empty(DType::F32, {T, N}), got = empty(DType::F32, {T, N});
      MLA_CHECK(fill_normal(x, seed++, 0.0f, 1.0f), "tune-fp8-gemm: cannot fill the activations");
      linear_w8a8_cublaslt(x, ws[0], ref, CublasLtConfig{});
      const Tensor want = to_host(ref);
      Fp8Activation xq = empty_fp8_activation(T, K, 128);
      quantize_fp8_per_token_group(x, 128, xq.q, xq.scales);

      // Each launch is timed behind the kernel that makes its input in a decode step: the RMSNorm
      // of a residual sum (K up to kRmsNormMaxWidth) or an MLP's SiLU-and-mul (down's input),
      // writing BF16 rows for a skinny launch that quantizes them, codes for one that takes codes
      // and for cuBLASLt. Launches from codes timed alone, plus the producer's extra time alone,
      // won by more than they did in the model (twenty-ninth and thirtieth sessions): the two
      // kernels overlap (PDL) differently. The residual grows by `a` each call: small, it stays
      // far from BF16's range.
      Tensor a = empty(DType::BF16, {T, K}), b = empty(DType::BF16, {T, K}), norm_w = empty(DType::BF16, {K});
      Tensor rows = empty(DType::BF16, {T, K}), none;
      MLA_CHECK(fill_normal(a, seed++, 0.0f, 1e-3f) && fill_normal(b, seed++, 0.0f, 1.0f) &&
                    fill_normal(norm_w, seed++, 1.0f, 0.1f),
                "tune-fp8-gemm: cannot fill the producer's inputs");
      Fp8Activation codes = empty_fp8_activation(T, K, 128);
      const bool norm = K <= kRmsNormMaxWidth;
      auto produce = [&](bool to_codes) {
        if (norm && to_codes) rmsnorm_fp8(a, &b, norm_w, 1e-6f, none, codes);
        else if (norm) add_rmsnorm(a, b, norm_w, 1e-6f, rows);
        else if (to_codes) silu_and_mul_fp8(a, b, none, codes);
        else silu_and_mul(a, b, rows);
      };

      // best: the fastest of all; best_rows: of the launches from rows, for inputs that come so.
      // Past the skinny kernel's token counts the products go out as BF16, as in the model, and
      // cuBLASLt's configurations and the warp-specialized kernel's launches compete with its
      // heuristic's pick.
      const bool lt_only = T > kSkinnyFp8MaxRows;
      Tensor lt_out = lt_only ? empty(DType::BF16, {T, N}) : got;
      const CublasLtConfig heuristic;
      Fp8GemmChoice best, best_rows;
      best.ms = median_ms(stream_, [&](int i) {
        produce(true);
        linear_fp8_w8a8_cublaslt(codes.q, codes.scales, ws[size_t(i % copies)], lt_out, heuristic);
      });
      best_rows.ms = median_ms(stream_, [&](int i) {
        produce(false);
        linear_w8a8_cublaslt(rows, ws[size_t(i % copies)], lt_out, heuristic);
      });
      progress(fmt::format("N={} K={} T={}: cublaslt {:.4f} ms, from rows {:.4f}", N, K, T, best.ms, best_rows.ms));
      if (lt_only) {
        linear_fp8_w8a8_cublaslt(xq.q, xq.scales, ws[0], lt_out, heuristic);
        const Tensor lt_want = to_host(lt_out).to_f32();
        tune_cublaslt_configs(*this, ws, xq, lt_want, codes, rows, lt_out, produce, lt_configs, best, best_rows,
                              progress);
        tune_wgmma_launches(*this, ws, xq, lt_want, codes, rows, lt_out, produce, best, best_rows, progress);
      }
      const SkinnyFp8Problem p = skinny_problem(x, ws[0], nullptr, N);
      if (T <= kSkinnyFp8MaxRows && skinny_gemm_fp8_fits(p)) {
        for (bool codes_in : {false, true})
          for (int k_warps : {8, 4, 2, 1})
            for (int row_tiles : {1, 2, 4})
              for (int splits : {1, 2, 4, 8})
                for (int depth : {0, 2, 3, 4}) {
                  const SkinnyFp8Config c{row_tiles, splits, k_warps, depth};
                  // With x in registers, fewer than 8 warps on K only for short K (under 4 blocks a
                  // warp): long K keeps all 8 streaming. Staged, 4 or 2 warps on K won on long K too.
                  if (depth == 0 && k_warps < 8 && K / 128 >= 4 * 8) continue;
                  if (!skinny_gemm_fp8_valid(c, K) || (depth && !skinny_gemm_fp8_staged_fits(T, K, c)))
                    continue;
                  const std::string what = to_string(c) + (codes_in ? " from codes" : "");
                  if (codes_in)
                    linear_fp8_w8a8_skinny(xq.q, xq.scales, ws[0], got, c);
                  else
                    linear_w8a8_skinny(x, ws[0], got, c);
                  const double err = relative_l2(to_host(got), want);
                  if (!(err <= kAgreement)) {
                    progress(fmt::format("N={} K={} T={}: skinny {} differs from cuBLASLt by {:.2e}: skipped", N,
                                         K, T, what, err));
                    continue;
                  }
                  const double ms = median_ms(stream_, [&](int i) {
                    produce(codes_in);
                    if (codes_in)
                      linear_fp8_w8a8_skinny(codes.q, codes.scales, ws[size_t(i % copies)], got, c);
                    else
                      linear_w8a8_skinny(rows, ws[size_t(i % copies)], got, c);
                  });
                  progress(fmt::format("N={} K={} T={}: skinny {} {:.4f} ms", N, K, T, what, ms));
                  const Fp8GemmChoice here{Fp8GemmChoice::Kernel::Skinny, row_tiles, splits, ms, k_warps, depth,
                                           codes_in};
                  if (ms < best.ms) best = here;
                  if (!codes_in && ms < best_rows.ms) best_rows = here;
                  // From rows, the same launch on codes that a quantization launch makes first: past 8
                  // tokens every CTA quantizing all the rows itself costs more than that launch.
                  if (!codes_in || T <= kSkinnyFp8DefaultMaxRows) continue;
                  const double qms = median_ms(stream_, [&](int i) {
                    produce(false);
                    quantize_fp8_per_token_group(rows, 128, codes.q, codes.scales);
                    linear_fp8_w8a8_skinny(codes.q, codes.scales, ws[size_t(i % copies)], got, c);
                  });
                  progress(fmt::format("N={} K={} T={}: quantize, skinny {} {:.4f} ms", N, K, T, what, qms));
                  if (qms < best_rows.ms) {
                    best_rows = here;  // codes in: in a launch from rows, quantized first
                    best_rows.ms = qms;
                  }
                }
      }
      const bool takes_codes = best.kernel != Fp8GemmChoice::Kernel::Skinny || best.codes_in;
      out.set(N, K, T, best, takes_codes ? std::optional<Fp8GemmChoice>(best_rows) : std::nullopt);
    }
  }
  return out;
}

}  // namespace mlaserve::cuda

namespace mlaserve::cuda {

MoeTuning CudaBackend::tune_moe(const std::vector<MoeTuneCase>& cases,
                                const std::function<void(const std::string&)>& progress) {
  MoeTuning out;
  out.set_device(device_name());
  MoeRunner& moe = moe_runner();
  // The runner's table and forced launches are set aside while tuning, and put back after.
  struct Restore {
    MoeRunner& moe;
    std::shared_ptr<const MoeTuning> tuning = moe.tuning;
    std::optional<MoeFp8Launch> gate_up = moe.fp8_gate_up_launch, down = moe.fp8_down_launch;
    ~Restore() { moe.tuning = tuning, moe.fp8_gate_up_launch = gate_up, moe.fp8_down_launch = down; }
  } restore{moe};
  moe.tuning = nullptr;

  std::vector<GatedMlpWeights> experts;
  std::array<int64_t, 3> made{};  // E, H, I of `experts`
  uint64_t seed = 1;
  auto random_fp8 = [&](int64_t rows, int64_t cols) {
    Tensor b = empty(DType::BF16, {rows, cols});
    LinearWeight w;
    MLA_CHECK(fill_normal(b, seed++, 0.0f, 1.0f / std::sqrt(float(cols))) && quantize_fp8_blocks(b, 128, 128, w),
              "tune-moe: cannot make a random FP8 expert");
    return w;
  };
  for (const MoeTuneCase& c : cases) {
    const int64_t E = c.experts(), H = c.hidden, I = c.inter, T = c.tokens, k = c.pairs_per_token(), P = T * k;
    MLA_CHECK(c.routed > 0 && c.shared >= 0 && E <= kMoeMaxExperts && H % 128 == 0 && I % 128 == 0 && H > 0 &&
                  I > 0 && T > 0 && c.top_k > 0 && c.top_k <= c.routed,
              "tune-moe: {} routed + {} shared experts of {} x {}, {} tokens of top-{}: not a shape the FP8 MoE "
              "takes (hidden and inter multiples of 128, at most {} experts)",
              c.routed, c.shared, I, H, T, c.top_k, kMoeMaxExperts);
    if (made != std::array<int64_t, 3>{E, H, I}) {
      experts.clear();
      for (int64_t e = 0; e < E; ++e) experts.push_back({random_fp8(I, H), random_fp8(I, H), random_fp8(H, I)});
      pack_moe_experts(experts, size_t(c.routed));  // as the model lays them out
      made = {E, H, I};
    }
    // Routings to rotate among, so that a small batch does not find its experts in L2.
    const int n_sets = 4;
    Tensor x = empty(DType::BF16, {T, H}), y = empty(DType::BF16, {T, H});
    MLA_CHECK(fill_normal(x, seed++, 0.0f, 1.0f), "tune-moe: cannot fill the activations");
    Tensor w_host = Tensor::empty(DType::F32, {T, k});
    for (int64_t i = 0; i < T * k; ++i) w_host.data<float>()[i] = 1.0f / float(k);
    const Tensor w = to_device(w_host);
    std::vector<Tensor> ids;
    for (int s = 0; s < n_sets; ++s) ids.push_back(to_device(even_routing(c, seed++)));

    moe.fp8_gate_up_launch = moe.fp8_down_launch = std::nullopt;
    moe_experts(x, ids[0], w, experts, y);
    const Tensor want = to_host(y).to_f32();
    // The whole layer (quantization, align, both GEMMs, SiLU, combine) over the n_sets routings,
    // as a CUDA graph replays it: ms a layer.
    auto time_layer = [&](const std::string& what) -> double {
      moe_experts(x, ids[0], w, experts, y);
      const double err = relative_l2(to_host(y), want);
      if (!(err <= kMoeAgreement)) {
        progress(fmt::format("E={} T={}: {} differs from the planned launches by {:.2e}: skipped", E, T, what, err));
        return INFINITY;
      }
      std::unique_ptr<BackendGraph> graph = capture([&] {
        for (int s = 0; s < n_sets; ++s) moe_experts(x, ids[size_t(s)], w, experts, y);
      });
      const double ms = median_ms(stream_, [&](int) { graph->replay(); }, P >= 8192 ? 10 : 30, 3) / n_sets;
      progress(fmt::format("E={} T={}: {} {:.4f} ms", E, T, what, ms));
      return ms;
    };
    // Candidates: tiles no taller than 4x the rows an expert averages (taller ones compute empty
    // rows), K splits only while the blocks do not oversubscribe the device 8 times over.
    const int64_t avg = (P + std::min(P, E) - 1) / std::min(P, E);
    auto candidates = [&](int64_t N, int64_t K, bool allow_k_splits) {
      MoeFp8GemmParams shape{};
      shape.N = int32_t(N), shape.K = int32_t(K);
      std::vector<MoeFp8Launch> keep;
      for (const MoeFp8Launch& l : moe_grouped_gemm_fp8_launches(shape, allow_k_splits)) {
        const int64_t row_tiles = std::max((P + l.tile_rows - 1) / l.tile_rows, std::min(P, E));
        const int64_t blocks = (N / 128 + l.n_tiles_per_block - 1) / l.n_tiles_per_block * row_tiles * l.k_splits;
        if (l.tile_rows > 16 && l.tile_rows > 4 * avg) continue;
        if (l.k_splits > 1 && blocks > 16 * int64_t(num_sms_)) continue;
        keep.push_back(l);
      }
      return keep;
    };
    MoeFp8Launch best_gu;
    double best_gu_ms = INFINITY;
    for (const MoeFp8Launch& l : candidates(2 * I, H, true)) {
      moe.fp8_gate_up_launch = l;
      const double ms = time_layer("gate_up " + to_string(l));
      if (ms < best_gu_ms) best_gu = l, best_gu_ms = ms;
    }
    MLA_CHECK(std::isfinite(best_gu_ms), "tune-moe: E={} T={}: no gate_up launch agreed with the planned one", E, T);
    moe.fp8_gate_up_launch = best_gu;
    MoeFp8Launch best_down = best_gu;
    double best_down_ms = INFINITY;
    for (const MoeFp8Launch& l : candidates(H, I, false)) {
      moe.fp8_down_launch = l;
      const double ms = time_layer("down " + to_string(l));
      if (ms < best_down_ms) best_down = l, best_down_ms = ms;
    }
    MLA_CHECK(std::isfinite(best_down_ms), "tune-moe: E={} T={}: no down launch agreed with the planned one", E, T);
    out.set(E, 2 * I, H, P, to_choice(best_gu, best_gu_ms));
    out.set(E, H, I, P, to_choice(best_down, best_down_ms));
  }
  return out;
}

}  // namespace mlaserve::cuda
