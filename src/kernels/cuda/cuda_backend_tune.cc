// tune-fp8-gemm on CUDA: every launch of the FP8 W8A8 linear timed per weight shape and token
// count, each checked against cuBLASLt's product first, the fastest kept.
#include <cmath>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/event_timer.h"

namespace mlaserve::cuda {

namespace {

// ||a - b|| / ||b|| of two host F32 tensors of the same size.
double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

// Both kernels compute the same W8A8 math in fp32, in other orders: far below this.
constexpr double kAgreement = 1e-3;

}  // namespace

Fp8GemmTuning CudaBackend::tune_fp8_gemm(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                         const std::vector<int64_t>& tokens,
                                         const std::function<void(const std::string&)>& progress) {
  Fp8GemmTuning out;
  out.set_device(device_name());
  uint64_t seed = 1;
  for (auto [N, K] : shapes) {
    MLA_CHECK(N > 0 && K > 0 && N % 128 == 0 && K % 128 == 0,
              "tune-fp8-gemm: N={} K={}: the block-scaled FP8 linear takes multiples of 128", N, K);
    // Copies of the weight to rotate among, together larger than L2, so every call reads HBM as
    // a decode step does.
    const int copies = int(std::clamp<int64_t>((int64_t(256) << 20) / (N * K) + 1, 1, 8));
    std::vector<LinearWeight> ws(static_cast<size_t>(copies));
    for (LinearWeight& w : ws) {
      Tensor b = empty(DType::BF16, {N, K});
      MLA_CHECK(fill_normal(b, seed++, 0.0f, 0.05f) && quantize_fp8_blocks(b, 128, 128, w),
                "tune-fp8-gemm: cannot make a random FP8 weight");
    }
    for (int64_t T : tokens) {
      MLA_CHECK(T > 0, "tune-fp8-gemm: token count {} must be positive", T);
      Tensor x = empty(DType::BF16, {T, K}), ref = empty(DType::F32, {T, N}), got = empty(DType::F32, {T, N});
      MLA_CHECK(fill_normal(x, seed++, 0.0f, 1.0f), "tune-fp8-gemm: cannot fill the activations");
      linear_w8a8_cublaslt(x, ws[0], ref);
      const Tensor want = to_host(ref);
      Fp8GemmChoice best;
      best.ms = median_ms(stream_, [&](int i) { linear_w8a8_cublaslt(x, ws[size_t(i % copies)], got); });
      progress(fmt::format("N={} K={} T={}: cublaslt {:.4f} ms", N, K, T, best.ms));
      const SkinnyFp8Problem p = skinny_problem(x, ws[0], nullptr, N);
      if (T <= kSkinnyFp8MaxRows && skinny_gemm_fp8_fits(p)) {
        for (int k_warps : {8, 4, 2, 1})
          for (int row_tiles : {1, 2, 4})
            for (int splits : {1, 2, 4, 8}) {
              const SkinnyFp8Config c{row_tiles, splits, k_warps};
              // Fewer than 8 warps on K only for short K (under 4 blocks a warp): long K keeps all 8
              // streaming.
              if (k_warps < 8 && K / 128 >= 4 * 8) continue;
              if (!skinny_gemm_fp8_valid(c, K) || (splits > 1 && skinny_gemm_fp8_blocks(p, c) > kSkinnyCounters))
                continue;
              linear_w8a8_skinny(x, ws[0], got, c);
              const double err = rel_l2(to_host(got), want);
              if (!(err <= kAgreement)) {
                progress(fmt::format("N={} K={} T={}: skinny {} differs from cuBLASLt by {:.2e}: skipped", N, K, T,
                                     to_string(c), err));
                continue;
              }
              const double ms =
                  median_ms(stream_, [&](int i) { linear_w8a8_skinny(x, ws[size_t(i % copies)], got, c); });
              progress(fmt::format("N={} K={} T={}: skinny {} {:.4f} ms", N, K, T, to_string(c), ms));
              if (ms < best.ms) best = {Fp8GemmChoice::Kernel::Skinny, row_tiles, splits, ms, k_warps};
            }
      }
      out.set(N, K, T, best);
    }
  }
  return out;
}

}  // namespace mlaserve::cuda
