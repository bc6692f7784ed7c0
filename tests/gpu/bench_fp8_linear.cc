// The FP8 W8A8 linear on DeepSeek-V3's dense shapes, and the kernels that make its input.
#include <algorithm>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/cuda/skinny_gemm_fp8.h"

namespace mlaserve::bench {

// DeepSeek-V3's dense FP8 shapes from BF16 activations (the per-token-group quantization
// included), against their own ceiling measured here: the block-scaled cuBLASLt GEMM at 8192^3.
// Floor = max(FLOPs / that rate, bytes (weights 1 byte, scales, BF16 in and out) / copy bandwidth).
void bench_fp8_linear(cuda::CudaBackend& gpu, double copy_bw, std::vector<Row>& rows) {
  const int64_t M = 8192;
  double fp8_rate = 0;
  {
    LinearWeight w = random_fp8_weight(M, M, 7);
    Tensor x = random_bf16({M, M}, 8), y = gpu.empty(DType::BF16, {M, M});
    Tensor q = gpu.empty(DType::F8_E4M3, {M, M}), sc = gpu.empty(DType::F32, {M, M / 128});
    gpu.quantize_fp8_per_token_group(x, 128, q, sc);
    double ms = time_ms([&](int) { gpu.linear_fp8_w8a8(q, sc, w, y); }, 20);
    fp8_rate = 2.0 * double(M) * M * M / (ms * 1e-3);
    std::printf("block-scaled FP8 GEMM (cuBLASLt) 8192^3: %.0f TFLOP/s\n", fp8_rate / 1e12);
  }
  struct Lin {
    const char* name;
    int64_t N, K;
  };
  // kv_a (N = 576) ends in a ragged block of rows, and so does q_a stacked over it (the model's
  // q_kv_a); both run in FP8. Up to 16 tokens the op runs the skinny kernel (its default launch, or
  // the tuned one where a file was loaded); cuBLASLt beside it.
  for (Lin l : std::vector<Lin>{{"v3.q_a", 1536, 7168},
                                {"v3.kv_a", 576, 7168},
                                {"v3.q_kv_a", 2112, 7168},
                                {"v3.q_b", 24576, 1536},
                                {"v3.o", 7168, 16384},
                                {"v3.dense_gate_up", 36864, 7168},
                                {"v3.dense_down", 7168, 18432}}) {
    int n_sets = int(std::max<int64_t>(1, std::min<int64_t>(8, (int64_t(200) << 20) / (l.N * l.K) + 1)));
    std::vector<LinearWeight> ws;
    for (int i = 0; i < n_sets; ++i) ws.push_back(random_fp8_weight(l.N, l.K, 300 + i));
    for (int64_t T : {1, 2, 4, 8, 16, 1024, 4096}) {
      if (fmt::format("T={} ", T).find(g_shape_filter) == std::string::npos) continue;
      Tensor x = random_bf16({T, l.K}, 5), y = gpu.empty(DType::BF16, {T, l.N});
      double moved = double(l.N * l.K) + 4.0 * ws[0].scale_inv.numel() + 2.0 * (T * l.K + T * l.N);
      double flops = 2.0 * T * l.N * l.K, floor_ms = std::max(flops / fp8_rate, moved / copy_bw) * 1e3;
      bool flop_bound = flops / fp8_rate > moved / copy_bw;
      auto row = [&](const std::string& kernel, double ms) {
        rows.push_back({kernel, fmt::format("T={} N={} K={}", T, l.N, l.K), ms,
                        flop_bound ? flops / (ms * 1e-3) / 1e12 : moved / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms,
                        flop_bound ? "TFLOP/s" : "TB/s"});
      };
      row(std::string("fp8 linear ") + l.name, time_ms([&](int i) { apply_linear(gpu, x, ws[i % n_sets], y); }));
      // x quantized by the kernel that made it (rmsnorm_fp8, silu_and_mul_fp8): the op from the
      // codes and scales, and at decode sizes the skinny kernel's launches on them.
      Fp8Activation xq = gpu.empty_fp8_activation(T, l.K, 128);
      gpu.quantize_fp8_per_token_group(x, 128, xq.q, xq.scales);
      row(std::string("  quantized x ") + l.name,
          time_ms([&](int i) { apply_linear(gpu, Tensor{}, xq, ws[i % n_sets], y); }));
      if (T > cuda::kSkinnyFp8MaxRows) continue;
      row(std::string("  cublaslt ") + l.name,
          time_ms([&](int i) { gpu.linear_w8a8_cublaslt(x, ws[i % n_sets], y); }));
      if (T != 1 && T != 8 && T != 16) continue;
      for (int rt : {1, 2, 4})
        for (int splits : {1, 2, 4, 8}) {
          const cuda::SkinnyFp8Config c{rt, splits, 8};
          if (!cuda::skinny_gemm_fp8_valid(c, l.K)) continue;
          row(fmt::format("  quantized x skinny rt{} s{} {}", rt, splits, l.name),
              time_ms([&](int i) { gpu.linear_fp8_w8a8_skinny(xq.q, xq.scales, ws[i % n_sets], y, c); }));
        }
      // The staged form (x in shared memory, a ring of `depth` K-blocks of weights a warp); at 16
      // tokens long K needs 4 splits for x to fit.
      for (int kw : {8, 4, 2, 1})
        for (int rt : {1, 2, 4})
          for (int splits : {1, 2, 4, 8})
            for (int depth : {2, 3, 4}) {
              const cuda::SkinnyFp8Config c{rt, splits, kw, depth};
              if (!cuda::skinny_gemm_fp8_valid(c, l.K) || !cuda::skinny_gemm_fp8_staged_fits(T, l.K, c)) continue;
              row(fmt::format("  quantized x staged rt{} kw{} s{} d{} {}", rt, kw, splits, depth, l.name),
                  time_ms([&](int i) { gpu.linear_fp8_w8a8_skinny(xq.q, xq.scales, ws[i % n_sets], y, c); }));
              row(fmt::format("  staged rt{} kw{} s{} d{} {}", rt, kw, splits, depth, l.name),
                  time_ms([&](int i) { gpu.linear_w8a8_skinny(x, ws[i % n_sets], y, c); }));
            }
    }
  }
  // The producers of an FP8 linear's input, fused with its quantization against the two launches
  // (V3's hidden 7168 and dense intermediate 18432). Floor: BF16 in, BF16 out, e4m3 and scales out.
  for (int64_t T : {1, 32, 4096}) {
    if (fmt::format("T={} ", T).find(g_shape_filter) == std::string::npos) continue;
    for (int64_t D : {7168, 18432}) {
      const bool norm = D == 7168;
      Tensor x = random_bf16({T, D}, 11), up = random_bf16({T, D}, 12), res = random_bf16({T, D}, 13);
      Tensor w = norm ? gpu.to_backend(Tensor::from_f32(std::vector<float>(size_t(D), 1.0f), {D})) : Tensor{};
      Tensor out = gpu.empty(DType::BF16, {T, D});
      Fp8Activation f = gpu.empty_fp8_activation(T, D, 128);
      const double moved = double(T) * D * (norm ? 2 * 2 + 2 * 2 : 2 * 2 + 2) + T * D + 4.0 * T * D / 128;
      const double floor_ms = moved / copy_bw * 1e3;
      auto row = [&](const std::string& k, double ms) {
        rows.push_back({k, fmt::format("T={} D={}", T, D), ms, moved / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms,
                        "TB/s"});
      };
      const std::string name = norm ? "add_rmsnorm" : "silu_and_mul";
      auto plain = [&] {
        if (norm) gpu.add_rmsnorm(x, res, w, 1e-6f, out);
        else gpu.silu_and_mul(x, up, out);
      };
      row(name + " + quantize, fused", time_ms([&](int) {
            if (norm) gpu.rmsnorm_fp8(x, &res, w, 1e-6f, out, f);
            else gpu.silu_and_mul_fp8(x, up, out, f);
          }));
      row("  " + name + ", then quantize", time_ms([&](int) {
            plain();
            gpu.quantize_fp8_per_token_group(out, 128, f.q, f.scales);
          }));
      row("  " + name + " alone", time_ms([&](int) { plain(); }));
    }
  }
}

}  // namespace mlaserve::bench
