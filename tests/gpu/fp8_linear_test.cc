// The CUDA FP8 W8A8 linear against the CPU reference: per-token-group quantization (exact), the
// block-scaled GEMM (same e4m3 inputs and scales, fp32 accumulation), and the whole apply_linear.
#include "gpu_test_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/fp8_gemm_wgmma.h"
#include "weights/fp8_block_quant.h"

namespace mlaserve {
namespace {

using namespace gputest;

class Fp8Linear : public GpuTest {
 protected:
  // Random activations that BF16 holds exactly, so both backends quantize the same values.
  Tensor bf16_exact(Shape shape, uint64_t s, float std) {
    return to_dtype(random_f32(shape, s, std), DType::BF16).to_f32();
  }
};

// A weight [N, K].
struct WeightShape {
  int64_t N, K;
};

// Groups of 128 take the vectorized kernel (384 with odd T: a warp with one item), others the warp a
// group one.
TEST_F(Fp8Linear, QuantizationMatchesTheReferenceExactly) {
  for (int64_t K : {7168, 1536, 384, 576, 200}) {
    for (int64_t T : {1, 7, 130}) {
      Tensor x = bf16_exact({T, K}, seed + K + T, 3.0f);
      int64_t G = (K + 127) / 128;
      Tensor want_q = Tensor::empty(DType::F8_E4M3, {T, K}), want_s = Tensor::empty(DType::F32, {T, G});
      cpu->quantize_fp8_per_token_group(x, 128, want_q, want_s);
      Tensor q = poisoned(gpu, DType::F8_E4M3, {T, K}), s = poisoned(gpu, DType::F32, {T, G});
      gpu.quantize_fp8_per_token_group(dev_bf16(x), 128, q, s);
      Tensor got_q = gpu.to_host(q), got_s = gpu.to_host(s);
      int64_t q_diff = 0, s_diff = 0;
      for (int64_t i = 0; i < T * K; ++i) q_diff += got_q.data<uint8_t>()[i] != want_q.data<uint8_t>()[i];
      for (int64_t i = 0; i < T * G; ++i) s_diff += got_s.data<float>()[i] != want_s.data<float>()[i];
      EXPECT_EQ(q_diff, 0) << "T=" << T << " K=" << K;
      EXPECT_EQ(s_diff, 0) << "T=" << T << " K=" << K;
    }
  }
}

// Weights quantized on the device (dummy weights with --quantization fp8) get the host's codes and
// scales bit for bit, in the padded scale rows to_backend keeps; a ragged last block of rows gets
// its rows of zeros through the host, as host weights do; weights the GEMM cannot take in blocks
// (a ragged K, or blocks other than 128 x 128) go through the host to BF16.
TEST_F(Fp8Linear, DeviceQuantizationOfWeightsIsTheHosts) {
  struct Case {
    int64_t N, K, bn, bk;
  };
  for (Case c : {Case{576, 7168, 128, 128}, Case{256, 384, 128, 128}, Case{1000, 300, 128, 128},
                 Case{512, 1024, 128, 128}, Case{96, 64, 32, 64}}) {
    SCOPED_TRACE(testing::Message() << c.N << "x" << c.K << " in " << c.bn << "x" << c.bk);
    Tensor w = bf16_exact({c.N, c.K}, seed + c.N + c.K, 0.05f);
    for (int64_t i = 0; i < c.K; ++i) w.data<float>()[i] = 0.0f;  // an all-zero row: scale 1 where a block is zero
    LinearWeight want = quantize_fp8_blocks(w, c.bn, c.bk), got;
    ASSERT_TRUE(gpu.quantize_fp8_blocks(dev_bf16(w), c.bn, c.bk, got));
    Tensor gq = gpu.to_host(got.weight), gs = gpu.to_host(got.scale_inv);
    ASSERT_EQ(gs.shape(), want.scale_inv.shape());
    EXPECT_EQ(std::memcmp(gq.raw(), want.weight.raw(), want.weight.nbytes()), 0);
    EXPECT_EQ(std::memcmp(gs.raw(), want.scale_inv.raw(), want.scale_inv.nbytes()), 0);
    LinearWeight dev = gpu.to_backend(got), host = gpu.to_backend(want);
    const bool blocks = c.bn == 128 && c.bk == 128 && c.K % 128 == 0;
    EXPECT_EQ(dev.is_fp8_block(), blocks);
    EXPECT_EQ(dev.weight.raw() == got.weight.raw(), blocks && c.N % 128 == 0) << "kept as it is where whole";
    EXPECT_EQ(dev.pad_rows, blocks ? (128 - c.N % 128) % 128 : 0);
    EXPECT_EQ(host.pad_rows, dev.pad_rows);
    Tensor a = gpu.to_host(dev.weight), b = gpu.to_host(host.weight);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), b.nbytes()), 0) << "the same weight as from the host";
  }
}

// DeepSeek-V3 dense shapes (scaled down in N where the CPU reference would be slow), token counts
// that are not multiples of 16, and ragged last blocks of rows: kv_a (N = 576) and a tiny model's q
// stacked over it (704), which cuBLASLt takes as they are past 16 tokens.
TEST_F(Fp8Linear, BlockScaledGemmMatchesTheReference) {
  // The small ones are the tiny presets' (hidden 256): q_proj, o_proj, kv_b_proj, a dense MLP.
  for (WeightShape sh : std::initializer_list<WeightShape>{
           {576, 7168}, {1536, 7168}, {2048, 1536}, {1024, 2048}, {768, 256}, {704, 256}, {256, 512}, {1024, 512},
           {256, 256}}) {
    LinearWeight w = quantize_fp8_blocks(random_f32({sh.N, sh.K}, seed + sh.N, 0.05f), 128, 128);
    LinearWeight wd = gpu.to_backend(w);
    ASSERT_TRUE(wd.is_fp8_block()) << "FP8 blocks stay FP8 on the device, a ragged last one too";
    EXPECT_EQ(wd.pad_rows, (128 - sh.N % 128) % 128);
    for (int64_t T : {1, 5, 64, 300}) {
      Tensor x = bf16_exact({T, sh.K}, seed + T, 1.0f);
      int64_t G = (sh.K + 127) / 128;
      Tensor q = Tensor::empty(DType::F8_E4M3, {T, sh.K}), s = Tensor::empty(DType::F32, {T, G});
      cpu->quantize_fp8_per_token_group(x, 128, q, s);
      Tensor want = Tensor::empty(DType::F32, {T, sh.N});
      cpu->linear_fp8_w8a8(q, s, w, want);
      for (DType out_dt : {DType::BF16, DType::F32}) {
        Tensor out = poisoned(gpu, out_dt, {T, sh.N});
        gpu.linear_fp8_w8a8(gpu.to_device(q), gpu.to_device(s), wd, out);
        double err = rel_l2(gpu.to_host(out), want);
        std::printf("  fp8 gemm T=%lld N=%lld K=%lld %s: rel_l2 %.2e\n", (long long)T, (long long)sh.N,
                    (long long)sh.K, std::string(dtype_name(out_dt)).c_str(), err);
        worst = std::max(worst, err);
        EXPECT_LE(err, out_dt == DType::BF16 ? kBf16Tolerance : 5e-4) << "T=" << T << " N=" << sh.N;
      }
    }
  }
}

// The whole W8A8 linear from BF16 activations, which CUDA quantizes straight into the GEMM's
// padded layout: token counts on and off the 16-row padding, and a strided activation.
TEST_F(Fp8Linear, ApplyLinearQuantizesAndMultiplies) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{1536, 7168}, {256, 512}}) {
    LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed, 0.05f), 128, 128);
    LinearWeight wd = gpu.to_backend(w);
    for (int64_t T : {1, 9, 16, 33, 37}) {
      Tensor x_wide = bf16_exact({T, K + 64}, seed + T, 1.0f), x = x_wide.narrow(1, 0, K).contiguous();
      Tensor want = Tensor::empty(DType::F32, {T, N});
      apply_linear(*cpu, x, w, want);
      Tensor out = poisoned(gpu, DType::BF16, {T, N});
      apply_linear(gpu, dev_bf16(x), wd, out);
      double err = rel_l2(gpu.to_host(out), want);
      EXPECT_LE(err, kBf16Tolerance) << "T=" << T << " N=" << N << " K=" << K;
      worst = std::max(worst, err);
      // The plain linear op takes an FP8 weight the same way.
      Tensor out_f32 = poisoned(gpu, DType::F32, {T, N});
      gpu.linear(dev_bf16(x_wide).narrow(1, 0, K), wd, out_f32);
      EXPECT_LE(rel_l2(gpu.to_host(out_f32), want), kBf16Tolerance) << "T=" << T << " N=" << N << " K=" << K;
    }
  }
}

// The warp-specialized GEMM for many tokens, in both tile heights, alone and in clusters of two: token
// counts off the tiles, a ragged last block of weight rows (kv_a, an odd count of weight tiles, so a
// cluster's partner repeats one), and few persistent CTAs, so that each walks several tiles and its
// ring of stages wraps many times.
TEST_F(Fp8Linear, WarpSpecializedGemmMatchesTheReference) {
  for (WeightShape sh : std::initializer_list<WeightShape>{{576, 7168}, {1536, 1536}, {2048, 1024}, {256, 512}}) {
    LinearWeight w = quantize_fp8_blocks(random_f32({sh.N, sh.K}, seed + sh.N, 0.05f), 128, 128);
    LinearWeight wd = gpu.to_backend(w);
    for (int64_t T : {1, 130, 300, 600}) {
      Tensor x = bf16_exact({T, sh.K}, seed + T, 1.0f);
      const int64_t G = sh.K / 128;
      Tensor q = Tensor::empty(DType::F8_E4M3, {T, sh.K}), s = Tensor::empty(DType::F32, {T, G});
      cpu->quantize_fp8_per_token_group(x, 128, q, s);
      Tensor want = Tensor::empty(DType::F32, {T, sh.N});
      cpu->linear_fp8_w8a8(q, s, w, want);
      Fp8Activation xq = gpu.empty_fp8_activation(T, sh.K, 128);
      gpu.quantize_fp8_per_token_group(dev_bf16(x), 128, xq.q, xq.scales);
      for (int waves : {1, 2})
        for (auto [ctas, cluster] : {std::pair{0, 1}, {5, 1}, {0, 2}, {6, 2}}) {
          // Rows 64 columns wider than N where one CTA: the TMA stores stop at N.
          const int64_t pad = ctas == 5 ? 64 : 0;
          Tensor wide = poisoned(gpu, DType::BF16, {T, sh.N + pad}), out = wide.narrow(1, 0, sh.N);
          cuda::Fp8GemmWgmmaArgs a;
          a.x = xq.q.raw(), a.ldx = xq.q.stride(0);
          a.x_scales = xq.scales.data<float>(), a.ld_x_scales = xq.scales.stride(1);
          a.w = wd.weight.raw(), a.ldw = wd.weight.stride(0), a.w_rows = wd.weight.size(0);
          a.w_scales = wd.scale_inv.data<float>(), a.ld_w_scales = wd.scale_inv.stride(0);
          a.out = out.data<__nv_bfloat16>(), a.ldo = out.stride(0);
          a.T = int(T), a.N = int(sh.N), a.K = int(sh.K), a.waves = waves, a.group_m = 3, a.ctas = ctas;
          a.cluster = cluster;
          ASSERT_TRUE(cuda::fp8_gemm_wgmma_fits(a));
          cuda::fp8_gemm_wgmma(a, gpu.stream());
          const Tensor got = gpu.to_host(wide);
          const double err = rel_l2(got.narrow(1, 0, sh.N).contiguous(), want);
          worst = std::max(worst, err);
          if (pad) {
            const Tensor rest = got.narrow(1, sh.N, pad).contiguous();
            const uint16_t* bits = static_cast<const uint16_t*>(rest.raw());
            EXPECT_TRUE(std::all_of(bits, bits + rest.numel(), [](uint16_t b) { return b == 0xffff; }))
                << "columns past N written: T=" << T << " N=" << sh.N;
          }
          EXPECT_LE(err, kBf16Tolerance) << "T=" << T << " N=" << sh.N << " K=" << sh.K << " waves " << waves
                                         << " ctas " << ctas << " cluster " << cluster;
        }
    }
  }
}

// Every count of K-blocks, not only multiples of 4 (cuBLASLt reads the weight scales in rows of a
// multiple of 4 floats: with contiguous rows K = 256, 384, 640 or 768 gave wrong products), with
// one N-block and several.
TEST_F(Fp8Linear, AnyNumberOfKBlocksMatchesTheReference) {
  for (int64_t K : {128, 256, 384, 640, 1024})
    for (int64_t N : {128, 256, 768}) {
      LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed + N + K, 0.05f), 128, 128);
      LinearWeight wd = gpu.to_backend(w);
      for (int64_t T : {1, 37}) {
        Tensor x = bf16_exact({T, K}, seed + T, 1.0f);
        Tensor want = Tensor::empty(DType::F32, {T, N});
        apply_linear(*cpu, x, w, want);
        Tensor out = poisoned(gpu, DType::F32, {T, N});
        apply_linear(gpu, dev_bf16(x), wd, out);
        double err = rel_l2(gpu.to_host(out), want);
        EXPECT_LE(err, 5e-4) << "K=" << K << " N=" << N << " T=" << T;
        worst = std::max(worst, err);
      }
    }
}

// The skinny kernel of decode-sized batches (activation quantization inside) in every launch it
// has: warps on K 8, 4, 2, 1; row tiles 1, 2, 4; split-K 1 to 8 (as many as K has blocks); one and
// two 8-token tiles, and past 16 tokens several CTAs' token tiles; N not a multiple of the CTA's
// rows; a strided activation; BF16 and F32 outputs.
TEST_F(Fp8Linear, SkinnyKernelMatchesTheReferenceInEveryLaunch) {
  for (WeightShape sh : std::initializer_list<WeightShape>{{1536, 7168}, {640, 1536}, {2048, 512}, {384, 256}}) {
    LinearWeight w = quantize_fp8_blocks(random_f32({sh.N, sh.K}, seed + sh.N, 0.05f), 128, 128);
    LinearWeight wd = gpu.to_backend(w);
    ASSERT_TRUE(wd.is_fp8_block());
    for (int64_t T : {1, 3, 8, 9, 16, 37}) {
      Tensor x_wide = bf16_exact({T, sh.K + 128}, seed + T, 2.0f), x = x_wide.narrow(1, 8, sh.K).contiguous();
      Tensor want = Tensor::empty(DType::F32, {T, sh.N});
      apply_linear(*cpu, x, w, want);
      Tensor xd = dev_bf16(x_wide).narrow(1, 8, sh.K);
      for (int k_warps : {8, 4, 2, 1})
        for (int row_tiles : {1, 2, 4})
          for (int splits : {1, 2, 4, 8}) {
            if (!cuda::skinny_gemm_fp8_valid({row_tiles, splits, k_warps}, sh.K) || (k_warps < 8 && splits > 2))
              continue;
            for (DType out_dt : {DType::F32, DType::BF16}) {
              Tensor register_form;  // depth 0's output, which the staged form must give bit for bit
              for (int depth : {0, 2, 3, 4}) {
                const cuda::SkinnyFp8Config c{row_tiles, splits, k_warps, depth};
                if (!cuda::skinny_gemm_fp8_valid(c, sh.K) ||
                    (depth && !cuda::skinny_gemm_fp8_staged_fits(T, sh.K, c)))
                  continue;
                Tensor out = poisoned(gpu, out_dt, {T, sh.N});
                gpu.linear_w8a8_skinny(xd, wd, out, c);
                Tensor got = gpu.to_host(out);
                const double err = rel_l2(got, want);
                worst = std::max(worst, err);
                const std::string where = fmt::format("N={} K={} T={} {} {}", sh.N, sh.K, T, cuda::to_string(c),
                                                      dtype_name(out_dt));
                EXPECT_LE(err, out_dt == DType::F32 ? 1e-3 : kBf16Tolerance) << where;
                if (depth == 0) register_form = got;
                else EXPECT_EQ(std::memcmp(got.raw(), register_form.raw(), got.nbytes()), 0) << where;
              }
            }
          }
    }
  }
}

// An activation's scales [T, G] on the host, from either layout (contiguous, or
// empty_fp8_activation's token-contiguous columns).
Tensor scales_to_host(cuda::CudaBackend& gpu, const Tensor& s) {
  if (s.stride(1) == 1) return gpu.to_host(s);
  const int64_t T = s.size(0), G = s.size(1), ld = s.stride(1);
  Tensor cols = gpu.to_host(s.as_strided({G, ld}, {ld, 1})), out = Tensor::empty(DType::F32, {T, G});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g) out.data<float>()[t * G + g] = cols.data<float>()[g * ld + t];
  return out;
}

// Both layouts an activation comes in: empty_fp8_activation's and plain contiguous tensors.
std::vector<Fp8Activation> activation_layouts(cuda::CudaBackend& gpu, int64_t T, int64_t K) {
  return {gpu.empty_fp8_activation(T, K, 128),
          {gpu.empty(DType::F8_E4M3, {T, K}), gpu.empty(DType::F32, {T, (K + 127) / 128}), 128}};
}

// rmsnorm (with and without the residual add) and silu_and_mul quantizing their output in the same
// kernel: the same BF16 output and residual as the plain ops, and the codes and scales of quantizing
// that output, bit for bit; also without the BF16 output, in both activation layouts, on strided
// rows, and where the kernel cannot fuse (200 channels: the default's two launches).
TEST_F(Fp8Linear, FusedProducersQuantizeTheirOutputExactly) {
  for (int64_t D : {7168, 1536, 512, 200})
    for (int64_t T : {1, 7, 33}) {
      SCOPED_TRACE(testing::Message() << "T=" << T << " D=" << D);
      Tensor x = dev_bf16(random_f32({T, D + 64}, seed + D + T, 2.0f)).narrow(1, 0, D);
      Tensor up = dev_bf16(random_f32({T, D}, seed + 1, 2.0f));
      Tensor res0 = random_f32({T, D}, seed + 2, 1.0f);
      Tensor norm = gpu.to_backend(random_f32({D}, seed + 3, 0.3f));
      for (int op = 0; op < 3; ++op) {  // rmsnorm, add_rmsnorm, silu_and_mul
        Tensor want = gpu.empty(DType::BF16, {T, D}), res_want = dev_bf16(res0);
        if (op == 0) gpu.rmsnorm(x, norm, 1e-6f, want);
        if (op == 1) gpu.add_rmsnorm(x, res_want, norm, 1e-6f, want);
        if (op == 2) gpu.silu_and_mul(x, up, want);
        Tensor wq = gpu.empty(DType::F8_E4M3, {T, D}), ws = gpu.empty(DType::F32, {T, (D + 127) / 128});
        gpu.quantize_fp8_per_token_group(want, 128, wq, ws);
        Tensor want_h = gpu.to_host(want), wq_h = gpu.to_host(wq), ws_h = gpu.to_host(ws);
        Tensor res_want_h = gpu.to_host(res_want);
        for (bool with_out : {true, false})
          for (Fp8Activation f : activation_layouts(gpu, T, D)) {
            Tensor out = with_out ? poisoned(gpu, DType::BF16, {T, D}) : Tensor{}, res = dev_bf16(res0);
            if (op == 2) gpu.silu_and_mul_fp8(x, up, out, f);
            else gpu.rmsnorm_fp8(x, op == 1 ? &res : nullptr, norm, 1e-6f, out, f);
            Tensor q = gpu.to_host(f.q), sc = scales_to_host(gpu, f.scales);
            EXPECT_EQ(std::memcmp(q.raw(), wq_h.raw(), size_t(T * D)), 0) << "op " << op << " out " << with_out;
            EXPECT_EQ(std::memcmp(sc.raw(), ws_h.raw(), ws_h.nbytes()), 0) << "op " << op << " out " << with_out;
            if (with_out) {
              EXPECT_EQ(std::memcmp(gpu.to_host(out).raw(), want_h.raw(), want_h.nbytes()), 0) << "op " << op;
            }
            if (op == 1) {
              EXPECT_EQ(std::memcmp(gpu.to_host(res).raw(), res_want_h.raw(), res_want_h.nbytes()), 0);
            }
          }
      }
    }
}

// The W8A8 linear of an activation that comes quantized: the skinny kernel reading the codes and
// scales where they are, in every launch shape, and the op (skinny or cuBLASLt by token count) in
// both activation layouts, against the CPU reference.
TEST_F(Fp8Linear, QuantizedInputsMatchTheReference) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{1536, 7168}, {640, 1536}, {384, 256}}) {
    LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed + N, 0.05f), 128, 128);
    LinearWeight wd = gpu.to_backend(w);
    for (int64_t T : {1, 3, 8, 9, 16, 17, 37}) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " K=" << K << " T=" << T);
      Tensor x = bf16_exact({T, K}, seed + T, 2.0f), xd = dev_bf16(x);
      Tensor want = Tensor::empty(DType::F32, {T, N});
      apply_linear(*cpu, x, w, want);
      // Untuned, the skinny kernel quantizes BF16 rows itself up to 8 tokens.
      EXPECT_EQ(gpu.wants_fp8_input(T, wd), T > cuda::kSkinnyFp8DefaultMaxRows);
      for (Fp8Activation f : activation_layouts(gpu, T, K)) {
        gpu.quantize_fp8_per_token_group(xd, 128, f.q, f.scales);
        Tensor out = poisoned(gpu, DType::BF16, {T, N});
        apply_linear(gpu, Tensor{}, f, wd, out);
        double err = rel_l2(gpu.to_host(out), want);
        worst = std::max(worst, err);
        EXPECT_LE(err, kBf16Tolerance);
        if (T > cuda::kSkinnyFp8MaxRows) continue;
        for (int k_warps : {8, 2})
          for (int row_tiles : {1, 2, 4})
            for (int splits : {1, 2}) {
              Tensor register_form;  // depth 0's output, which the staged form must give bit for bit
              for (int depth : {0, 2, 3}) {
                const cuda::SkinnyFp8Config c{row_tiles, splits, k_warps, depth};
                if (!cuda::skinny_gemm_fp8_valid(c, K) || (depth && !cuda::skinny_gemm_fp8_staged_fits(T, K, c)))
                  continue;
                Tensor o32 = poisoned(gpu, DType::F32, {T, N});
                gpu.linear_fp8_w8a8_skinny(f.q, f.scales, wd, o32, c);
                Tensor got = gpu.to_host(o32);
                err = rel_l2(got, want);
                worst = std::max(worst, err);
                EXPECT_LE(err, 1e-3) << cuda::to_string(c);
                if (depth == 0) register_form = got;
                else EXPECT_EQ(std::memcmp(got.raw(), register_form.raw(), got.nbytes()), 0) << cuda::to_string(c);
              }
            }
      }
    }
  }
}

// A staged launch first made inside a CUDA graph capture (its shared-memory size is set on first
// use) is captured, and replays to the bits of the same launch run eagerly. The launch (rows 2,
// warps on K 2, depth 4, codes in) is one no earlier test of this suite runs.
TEST_F(Fp8Linear, StagedLaunchIsCapturedOnFirstUse) {
  const int64_t T = 3, N = 640, K = 1536;
  LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed + 11, 0.05f), 128, 128);
  LinearWeight wd = gpu.to_backend(w);
  Tensor x = bf16_exact({T, K}, seed + 12, 2.0f), xd = dev_bf16(x);
  Fp8Activation f = gpu.empty_fp8_activation(T, K, 128);
  gpu.quantize_fp8_per_token_group(xd, 128, f.q, f.scales);
  const cuda::SkinnyFp8Config c{2, 1, 2, 4};
  ASSERT_TRUE(cuda::skinny_gemm_fp8_valid(c, K) && cuda::skinny_gemm_fp8_staged_fits(T, K, c));
  Tensor replayed = poisoned(gpu, DType::F32, {T, N}), eager = poisoned(gpu, DType::F32, {T, N});
  gpu.synchronize();
  std::unique_ptr<BackendGraph> graph =
      gpu.capture([&] { gpu.linear_fp8_w8a8_skinny(f.q, f.scales, wd, replayed, c); });
  graph->replay();
  gpu.linear_fp8_w8a8_skinny(f.q, f.scales, wd, eager, c);
  Tensor got = gpu.to_host(replayed), want = gpu.to_host(eager);
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
  Tensor ref = Tensor::empty(DType::F32, {T, N});
  apply_linear(*cpu, x, w, ref);
  EXPECT_LE(rel_l2(got, ref), 1e-3);
}

// The op follows a tuned table: cuBLASLt where it says so, the tuned skinny launch, an entry's
// launch from rows where the input comes as rows (one on codes of a quantization launch, where
// tuned so), and the default where the table's launch does not fit the shape (a file from another
// model or GPU).
TEST_F(Fp8Linear, TunedChoicesAreFollowedAndBadOnesFallBack) {
  const int64_t N = 1024, K = 256;
  LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed, 0.05f), 128, 128);
  LinearWeight wd = gpu.to_backend(w);
  Fp8GemmTuning tuning;
  tuning.set(N, K, 1, {Fp8GemmChoice::Kernel::Cublaslt});
  tuning.set(N, K, 4, {Fp8GemmChoice::Kernel::Skinny, 1, 2});
  tuning.set(N, K, 8, {Fp8GemmChoice::Kernel::Skinny, 4, 8});  // 8 splits of 2 K-blocks: not a launch
  tuning.set(N, K, 2, {Fp8GemmChoice::Kernel::Skinny, 1, 1, 0.0, 8, 2, true});  // staged, from codes
  // cuBLASLt from codes; from rows the staged form over two token tiles.
  tuning.set(N, K, 16, {Fp8GemmChoice::Kernel::Cublaslt},
             Fp8GemmChoice{Fp8GemmChoice::Kernel::Skinny, 2, 1, 0.0, 4, 3});
  // From rows at 12 (and 13) tokens: quantized first, then the register form, 2 splits, on the codes.
  const cuda::SkinnyFp8Config quantized_first{2, 2, 8};
  tuning.set(N, K, 12, {Fp8GemmChoice::Kernel::Cublaslt},
             Fp8GemmChoice{Fp8GemmChoice::Kernel::Skinny, 2, 2, 0.0, 8, 0, true});
  gpu.set_fp8_gemm_tuning(tuning);
  // The producers write codes where the table's launch takes them (and for cuBLASLt).
  EXPECT_TRUE(gpu.wants_fp8_input(1, wd));
  EXPECT_TRUE(gpu.wants_fp8_input(2, wd));
  EXPECT_FALSE(gpu.wants_fp8_input(4, wd));
  EXPECT_TRUE(gpu.wants_fp8_input(16, wd));
  {
    const int64_t T = 2;
    Tensor x = bf16_exact({T, K}, seed + 40, 1.0f), want = Tensor::empty(DType::F32, {T, N});
    apply_linear(*cpu, x, w, want);
    Fp8Activation f = gpu.empty_fp8_activation(T, K, 128);
    gpu.quantize_fp8_per_token_group(dev_bf16(x), 128, f.q, f.scales);
    Tensor out = poisoned(gpu, DType::F32, {T, N});
    apply_linear(gpu, Tensor{}, f, wd, out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), 1e-3) << "from codes";
  }
  for (int64_t T : {1, 2, 4, 8, 13, 16}) {
    Tensor x = bf16_exact({T, K}, seed + T, 1.0f);
    Tensor want = Tensor::empty(DType::F32, {T, N});
    apply_linear(*cpu, x, w, want);
    Tensor out = poisoned(gpu, DType::F32, {T, N});
    apply_linear(gpu, dev_bf16(x), wd, out);
    Tensor got = gpu.to_host(out);
    const double err = rel_l2(got, want);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-3) << "T=" << T;
    if (T != 13) continue;
    Fp8Activation f = gpu.empty_fp8_activation(T, K, 128);
    gpu.quantize_fp8_per_token_group(dev_bf16(x), 128, f.q, f.scales);
    Tensor direct = poisoned(gpu, DType::F32, {T, N});
    gpu.linear_fp8_w8a8_skinny(f.q, f.scales, wd, direct, quantized_first);
    Tensor direct_host = gpu.to_host(direct);
    EXPECT_EQ(std::memcmp(got.raw(), direct_host.raw(), got.nbytes()), 0) << "T=13 runs the quantized-first launch";
  }
}

// cuBLASLt's configurations past 16 tokens: a tuned one (a 64 x 128 tile where cuBLASLt offers it,
// as tune-fp8-gemm picked for q_kv_a at 1024 tokens) runs from the table and matches the
// reference; one cuBLASLt rejects (an algorithm id it does not have) falls back to the heuristic's.
TEST_F(Fp8Linear, TunedCublasLtConfigurationsRunAndRejectedOnesFallBack) {
  const int64_t T = 80, N = 640, K = 1024;
  LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed + 50, 0.05f), 128, 128);
  LinearWeight wd = gpu.to_backend(w);
  const std::vector<CublasLtConfig> configs = gpu.fp8_gemm_configs(T, wd, false);
  ASSERT_FALSE(configs.empty());
  CublasLtConfig chosen = configs.front();
  for (const CublasLtConfig& c : configs)
    if (c.tile == 17) chosen = c;  // CUBLASLT_MATMUL_TILE_64x128
  Tensor x = bf16_exact({T, K}, seed + 51, 1.0f), want = Tensor::empty(DType::F32, {T, N});
  apply_linear(*cpu, x, w, want);
  const CublasLtConfig rejected{9999, 17, 0, 0, 0, 0};
  for (const CublasLtConfig& c : {chosen, rejected}) {
    Fp8GemmTuning tuning;
    Fp8GemmChoice choice;  // cuBLASLt
    choice.lt = c;
    tuning.set(N, K, T, choice);
    gpu.set_fp8_gemm_tuning(tuning);
    Tensor out = poisoned(gpu, DType::BF16, {T, N});
    apply_linear(gpu, dev_bf16(x), wd, out);
    const double err = rel_l2(gpu.to_host(out), want);
    worst = std::max(worst, err);
    EXPECT_LE(err, kBf16Tolerance) << to_string(c);
  }
}

// A tuned "wgmma" entry runs the warp-specialized kernel in the op, from rows and from codes, into
// out of T rows (no padded scratch), a ragged last block of weight rows (kv_a) included.
TEST_F(Fp8Linear, TunedWgmmaChoiceRunsTheWarpSpecializedKernel) {
  const int64_t N = 576, K = 1024;
  LinearWeight w = quantize_fp8_blocks(random_f32({N, K}, seed + 60, 0.05f), 128, 128);
  LinearWeight wd = gpu.to_backend(w);
  for (int64_t T : {40, 300})
    for (auto [waves, cluster] : {std::pair{1, 1}, {2, 1}, {2, 2}}) {
      Fp8GemmTuning tuning;
      Fp8GemmChoice choice;
      choice.kernel = Fp8GemmChoice::Kernel::Wgmma, choice.waves = waves, choice.group_m = 2, choice.cluster = cluster;
      tuning.set(N, K, T, choice);
      gpu.set_fp8_gemm_tuning(tuning);
      Tensor x = bf16_exact({T, K}, seed + 61 + T, 1.0f), want = Tensor::empty(DType::F32, {T, N});
      apply_linear(*cpu, x, w, want);
      Tensor out = poisoned(gpu, DType::BF16, {T, N});
      apply_linear(gpu, dev_bf16(x), wd, out);
      double err = rel_l2(gpu.to_host(out), want);
      worst = std::max(worst, err);
      EXPECT_LE(err, kBf16Tolerance) << "from rows, T=" << T << " " << to_string(choice);
      Fp8Activation xq = gpu.empty_fp8_activation(T, K, 128);
      gpu.quantize_fp8_per_token_group(dev_bf16(x), 128, xq.q, xq.scales);
      out = poisoned(gpu, DType::BF16, {T, N});
      gpu.linear_fp8_w8a8(xq.q, xq.scales, wd, out);
      err = rel_l2(gpu.to_host(out), want);
      worst = std::max(worst, err);
      EXPECT_LE(err, kBf16Tolerance) << "from codes, T=" << T << " " << to_string(choice);
    }
  gpu.set_fp8_gemm_tuning(Fp8GemmTuning{});
}

}  // namespace
}  // namespace mlaserve
