// The CPU reference of FP8 W8A8 and the FP8 KV cache: per-token-group activation quantization,
// the block-scaled linear against a double-precision emulation, block weight quantization, and the
// cache's store / gather / decode round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "common/error.h"
#include "config/quantization_flags.h"
#include "config/server_args.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/absorbed_weights.h"
#include "weights/fp8_block_quant.h"

namespace mlaserve {
namespace {

Tensor random_f32(Shape shape, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

struct Quantized {
  Tensor q, scales;
};

Quantized quantize(Backend& ops, const Tensor& x, int64_t group) {
  int64_t T = x.size(0), K = x.size(1);
  Quantized r{Tensor::empty(DType::F8_E4M3, {T, K}), Tensor::empty(DType::F32, {T, (K + group - 1) / group})};
  ops.quantize_fp8_per_token_group(x, group, r.q, r.scales);
  return r;
}

uint8_t code(const Quantized& r, int64_t t, int64_t k) { return r.q.data<uint8_t>()[t * r.q.stride(0) + k]; }
float scale(const Quantized& r, int64_t t, int64_t g) { return r.scales.data<float>()[t * r.scales.size(1) + g]; }

TEST(Fp8Quant, GroupScalesAndCodesWithAPartialLastGroup) {
  auto cpu = make_cpu_backend();
  // K = 300: groups of 128, 128 and 44 channels, each with its own scale.
  Tensor x = random_f32({3, 300}, 1);
  x.data<float>()[5] = 9.0f;  // the first group's amax on row 0
  Quantized r = quantize(*cpu, x, 128);
  ASSERT_EQ(r.scales.shape(), Shape({3, 3}));
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t g = 0; g < 3; ++g) {
      float amax = 0;
      for (int64_t k = g * 128; k < std::min<int64_t>(300, (g + 1) * 128); ++k)
        amax = std::max(amax, std::fabs(x.data<float>()[t * 300 + k]));
      float s = amax / 448.0f;
      EXPECT_EQ(scale(r, t, g), s) << t << "," << g;
      for (int64_t k = g * 128; k < std::min<int64_t>(300, (g + 1) * 128); ++k) {
        float v = x.data<float>()[t * 300 + k];
        ASSERT_EQ(code(r, t, k), f32_to_e4m3(v / s)) << t << "," << k;
        // Round trip: 3 mantissa bits give half a step of 1/16 relative; values scaled into the
        // subnormal range keep an absolute error of half the smallest step (2^-10 of the scale).
        float back = e4m3_to_f32(code(r, t, k)) * s;
        EXPECT_LE(std::fabs(back - v), std::max(std::fabs(v) / 16, s * 0x1p-10f)) << v;
      }
    }
  }
  EXPECT_EQ(scale(r, 0, 0), 9.0f / 448.0f);
  EXPECT_EQ(code(r, 0, 5), 0x7e);  // the amax lands on 448
}

TEST(Fp8Quant, ZeroGroupsGiveZeroCodesAndATinyScale) {
  auto cpu = make_cpu_backend();
  Tensor x = Tensor::zeros(DType::F32, {2, 256});
  x.data<float>()[256 + 200] = -3.0f;  // row 1, group 1: one nonzero value
  Quantized r = quantize(*cpu, x, 128);
  EXPECT_EQ(scale(r, 0, 0), 1e-10f / 448.0f);
  EXPECT_EQ(scale(r, 1, 0), 1e-10f / 448.0f);
  EXPECT_EQ(scale(r, 1, 1), 3.0f / 448.0f);
  for (int64_t k = 0; k < 256; ++k) {
    EXPECT_EQ(code(r, 0, k), 0x00);
    if (k != 200) {
      EXPECT_EQ(code(r, 1, k), 0x00) << k;
    }
  }
  EXPECT_EQ(code(r, 1, 200), 0xfe);  // -448
}

TEST(Fp8Quant, AmaxOf448HasScaleOneAndKeepsExactValues) {
  auto cpu = make_cpu_backend();
  std::vector<float> v = {448.0f, -448.0f, 1.0f, 0.5f, 0.001953125f, 3.0f, -240.0f, 0.0f};
  Quantized r = quantize(*cpu, Tensor::from_f32(v, {1, 8}), 128);
  EXPECT_EQ(scale(r, 0, 0), 1.0f);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(e4m3_to_f32(code(r, 0, k)), v[size_t(k)]) << k;
}

TEST(Fp8Quant, ValuesRoundingAbove448Saturate) {
  auto cpu = make_cpu_backend();
  // For this amax, amax / (amax / 448) rounds to 448.00003 in fp32: past the e4m3 maximum.
  const float amax = 0x1.c00b42p-4f;
  volatile float s = amax / 448.0f;
  ASSERT_GT(amax / s, 448.0f);
  Quantized r = quantize(*cpu, Tensor::from_f32({amax, -amax, amax / 2}, {1, 3}), 128);
  EXPECT_EQ(code(r, 0, 0), 0x7e);  // +448, not NaN (0x7f)
  EXPECT_EQ(code(r, 0, 1), 0xfe);  // -448
}

TEST(Fp8Quant, StridedRowsAndOtherGroupSizes) {
  auto cpu = make_cpu_backend();
  Tensor wide = random_f32({4, 100}, 2);
  Tensor x = wide.narrow(1, 10, 64);  // rows 100 apart
  Quantized strided = quantize(*cpu, x, 32), packed = quantize(*cpu, x.contiguous(), 32);
  ASSERT_EQ(strided.scales.shape(), Shape({4, 2}));
  for (int64_t i = 0; i < 4 * 64; ++i) EXPECT_EQ(strided.q.data<uint8_t>()[i], packed.q.data<uint8_t>()[i]);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(strided.scales.data<float>()[i], packed.scales.data<float>()[i]);
}

// The block-scaled product in double: per K-block partial dot of the e4m3 values, times both scales.
double w8a8_in_double(const Quantized& a, int64_t t, const LinearWeight& w, int64_t n, double* magnitude) {
  int64_t K = w.in_features(), G = a.scales.size(1);
  double sum = 0, mag = 0;
  for (int64_t g = 0; g < G; ++g) {
    double block = 0, block_mag = 0;
    for (int64_t k = g * w.block_k; k < std::min(K, (g + 1) * w.block_k); ++k) {
      double p = double(e4m3_to_f32(code(a, t, k))) * e4m3_to_f32(w.weight.data<uint8_t>()[n * K + k]);
      block += p;
      block_mag += std::fabs(p);
    }
    double s = double(scale(a, t, g)) * w.scale_inv.data<float>()[(n / w.block_n) * G + g];
    sum += block * s;
    mag += block_mag * s;
  }
  *magnitude = mag;
  return sum;
}

TEST(Fp8Linear, W8A8MatchesADoubleEmulation) {
  auto cpu = make_cpu_backend();
  // Neither dim a multiple of 128: partial blocks on both sides. One token 100x larger than the
  // others; one weight row 100x smaller than the rest of its block (its codes go subnormal).
  int64_t T = 5, K = 300, N = 200;
  Tensor x = random_f32({T, K}, 3), wf = random_f32({N, K}, 4, 0.05f);
  for (int64_t k = 0; k < K; ++k) x.data<float>()[2 * K + k] *= 100.0f;
  for (int64_t k = 0; k < K; ++k) wf.data<float>()[150 * K + k] *= 0.01f;
  LinearWeight w = quantize_fp8_blocks(wf, 128, 128);
  ASSERT_EQ(w.scale_inv.shape(), Shape({2, 3}));
  Quantized a = quantize(*cpu, x, 128);
  Tensor out = Tensor::empty(DType::F32, {T, N}), exact = Tensor::empty(DType::F32, {T, N});
  cpu->linear_fp8_w8a8(a.q, a.scales, w, out);
  cpu->linear(x, LinearWeight{wf, {}}, exact);
  double worst = 0, worst_vs_exact = 0, exact_max = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double mag = 0, want = w8a8_in_double(a, t, w, n, &mag);
      double got = out.data<float>()[t * N + n];
      // The e4m3 products are exact in fp32; n fp32 additions lose at most n * 2^-24 of the terms'
      // magnitude: 128 in a block, 3 across blocks and 2 scale products.
      EXPECT_LE(std::fabs(got - want), 133 * 0x1p-24 * mag + 1e-30) << t << "," << n;
      worst = std::max(worst, std::fabs(got - want) / (mag + 1e-30));
      worst_vs_exact = std::max(worst_vs_exact, std::fabs(got - double(exact.data<float>()[t * N + n])));
      exact_max = std::max(exact_max, std::fabs(double(exact.data<float>()[t * N + n])));
    }
  }
  // Against the unquantized product the error is FP8's: a few percent of the outputs' range.
  EXPECT_LT(worst_vs_exact / exact_max, 0.05);
  std::printf("[w8a8] max error vs double emulation %.3g of the terms' magnitude; vs fp32 weights %.3g of max\n",
              worst, worst_vs_exact / exact_max);
}

// The FP8 BMM of the absorbed projections: W_UK / W_UV cut from an FP8 kv_b_proj keep its e4m3
// codes and scales (W_UK's blocks transposed), and each head's product is the W8A8 linear of that
// head's rows: checked against a double emulation that reads kv_b_proj itself.
TEST(Fp8Bmm, AbsorbedProductsRunOnKvBsOwnBlocks) {
  auto cpu = make_cpu_backend();
  const int64_t T = 4, H = 3, nope = 128, v = 128, L = 256, R = 64;
  LinearWeight kv_b = quantize_fp8_blocks(random_f32({H * (nope + v), L}, 11, 0.05f), 128, 128);
  AbsorbedWeights a = make_absorbed_weights(kv_b, H, nope, v, *cpu);
  ASSERT_TRUE(a.fp8());
  EXPECT_TRUE(a.w_uk.defined()) << "the dense pair stays for batches past kFp8BmmMaxTokens";
  EXPECT_EQ(a.w_uk_t.weight.shape(), Shape({H * L, nope}));
  EXPECT_EQ(a.w_uv_fp8.weight.shape(), Shape({H * v, L}));

  // One head's row through quantize, then sum_k code * scale * kv_b(row0 + row(n), k) in double.
  auto emulate = [&](const Tensor& x3, int64_t t, int64_t h, int64_t K, const std::function<float(int64_t, int64_t)>& w,
                     int64_t n, double* mag) {
    Tensor row = Tensor::empty(DType::F32, {1, K});
    std::copy_n(x3.data<float>() + t * x3.stride(0) + h * x3.stride(1), K, row.data<float>());
    Quantized q = quantize(*cpu, row, 128);
    double sum = 0;
    *mag = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double p = double(e4m3_to_f32(code(q, 0, k))) * scale(q, 0, k / 128) * w(n, k);
      sum += p;
      *mag += std::fabs(p);
    }
    return sum;
  };

  Tensor q = random_f32({T, H, nope + R}, 12);
  Tensor q_latent = Tensor::empty(DType::F32, {T, H, L + R});
  cpu->mla_absorb_q_w8a8(q.narrow(2, 0, nope), q.narrow(2, nope, R), a.w_uk_t, q_latent);
  Tensor q_nope = q.narrow(2, 0, nope).contiguous();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* got = q_latent.data<float>() + (t * H + h) * (L + R);
      for (int64_t l = 0; l < L; ++l) {
        double mag = 0;
        const double want = emulate(
            q_nope, t, h, nope, [&](int64_t n, int64_t k) { return dequant_fp8_block(kv_b, h * (nope + v) + k, n); },
            l, &mag);
        EXPECT_LE(std::fabs(got[l] - want), 1e-6 * mag + 1e-30) << t << "," << h << "," << l;
      }
      for (int64_t r = 0; r < R; ++r) EXPECT_EQ(got[L + r], q.data<float>()[(t * H + h) * (nope + R) + nope + r]);
    }

  Tensor latent = random_f32({T, H, L}, 13), out = Tensor::empty(DType::F32, {T, H, v});
  cpu->mla_absorb_out_w8a8(latent, a.w_uv_fp8, out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < v; ++d) {
        double mag = 0;
        const double want = emulate(
            latent, t, h, L,
            [&](int64_t n, int64_t k) { return dequant_fp8_block(kv_b, h * (nope + v) + nope + n, k); }, d, &mag);
        EXPECT_LE(std::fabs(out.data<float>()[(t * H + h) * v + d] - want), 1e-6 * mag + 1e-30) << t << "," << h;
      }

  // Past kFp8BmmMaxTokens tokens the model's products take the dense pair.
  const int64_t big = kFp8BmmMaxTokens + 1;
  Tensor qb = random_f32({big, H, nope + R}, 15), via_model = Tensor::empty(DType::F32, {big, H, L + R}),
         dense_q = Tensor::empty(DType::F32, {big, H, L + R});
  absorb_q(*cpu, a, qb.narrow(2, 0, nope), qb.narrow(2, nope, R), via_model);
  cpu->mla_absorb_q(qb.narrow(2, 0, nope).contiguous(), qb.narrow(2, nope, R).contiguous(), a.w_uk, dense_q);
  for (int64_t i = 0; i < dense_q.numel(); ++i) ASSERT_EQ(via_model.data<float>()[i], dense_q.data<float>()[i]) << i;

  // --disable-fp8-bmm: the dense pair alone.
  EXPECT_FALSE(make_absorbed_weights(kv_b, H, nope, v, *cpu, /*fp8_bmm=*/false).fp8());

  // Blocks that straddle heads (nope 64 with 128-row blocks): the dense, dequantized pair.
  LinearWeight narrow_heads = quantize_fp8_blocks(random_f32({4 * 128, L}, 14, 0.05f), 128, 128);
  AbsorbedWeights dense = make_absorbed_weights(narrow_heads, 4, 64, 64, *cpu);
  EXPECT_FALSE(dense.fp8());
  EXPECT_EQ(dense.w_uk.shape(), Shape({4, 64, L}));
}

TEST(Fp8Linear, ApplyLinearRunsFp8WeightsAsW8A8OnTheCpu) {
  auto cpu = make_cpu_backend();
  ASSERT_TRUE(cpu->supports_fp8_w8a8());
  Tensor x = random_f32({3, 256}, 5), wf = random_f32({64, 256}, 6, 0.06f);
  LinearWeight w = quantize_fp8_blocks(wf, 128, 128);
  Quantized a = quantize(*cpu, x, 128);
  Tensor via_ops = Tensor::empty(DType::F32, {3, 64}), applied = Tensor::empty(DType::F32, {3, 64}),
         w8a16 = Tensor::empty(DType::F32, {3, 64});
  cpu->linear_fp8_w8a8(a.q, a.scales, w, via_ops);
  apply_linear(*cpu, x, w, applied);
  cpu->linear(x, w, w8a16);  // fp32 activations: differs from W8A8
  bool differs = false;
  for (int64_t i = 0; i < 3 * 64; ++i) {
    EXPECT_EQ(applied.data<float>()[i], via_ops.data<float>()[i]) << i;
    differs |= applied.data<float>()[i] != w8a16.data<float>()[i];
  }
  EXPECT_TRUE(differs);
  // Unquantized weights go through the plain linear.
  apply_linear(*cpu, x, LinearWeight{wf, {}}, applied);
  cpu->linear(x, LinearWeight{wf, {}}, via_ops);
  for (int64_t i = 0; i < 3 * 64; ++i) EXPECT_EQ(applied.data<float>()[i], via_ops.data<float>()[i]) << i;
}

// The producers that also quantize their output (what a faster backend fuses) give the plain op's
// output and its quantization; an input that comes quantized runs the W8A8 linear on it, and one
// that a weight cannot take quantized is refused unless the plain rows are there too.
TEST(Fp8Linear, NormAndSiluProducersQuantizeTheirOutputForTheLinear) {
  auto cpu = make_cpu_backend();
  const int64_t T = 3, D = 256;
  Tensor x = random_f32({T, D}, 7), res = random_f32({T, D}, 8), norm = random_f32({D}, 9, 0.2f);
  for (bool with_residual : {false, true}) {
    Tensor res_a = Tensor::empty(DType::F32, {T, D}), res_b = Tensor::empty(DType::F32, {T, D});
    std::memcpy(res_a.raw(), res.raw(), res.nbytes());
    Tensor want = Tensor::empty(DType::F32, {T, D}), got = Tensor::empty(DType::F32, {T, D});
    if (with_residual) cpu->add_rmsnorm(x, res_a, norm, 1e-6f, want);
    else cpu->rmsnorm(x, norm, 1e-6f, want);
    Quantized wq = quantize(*cpu, want, 128);
    for (bool with_out : {true, false}) {
      Fp8Activation f = cpu->empty_fp8_activation(T, D, 128);
      Tensor out = with_out ? got : Tensor{};
      if (with_residual) std::memcpy(res_b.raw(), res.raw(), res.nbytes());
      cpu->rmsnorm_fp8(x, with_residual ? &res_b : nullptr, norm, 1e-6f, out, f);
      EXPECT_EQ(std::memcmp(f.q.raw(), wq.q.raw(), size_t(T * D)), 0);
      EXPECT_EQ(std::memcmp(f.scales.raw(), wq.scales.raw(), wq.scales.nbytes()), 0);
      if (with_out) {
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
      }
      if (with_residual) {
        EXPECT_EQ(std::memcmp(res_b.raw(), res_a.raw(), res_a.nbytes()), 0);
      }
    }
  }
  Tensor up = random_f32({T, D}, 10), h = Tensor::empty(DType::F32, {T, D});
  cpu->silu_and_mul(x, up, h);
  Quantized hq = quantize(*cpu, h, 128);
  Fp8Activation f = cpu->empty_fp8_activation(T, D, 128);
  Tensor none;
  cpu->silu_and_mul_fp8(x, up, none, f);
  EXPECT_EQ(std::memcmp(f.q.raw(), hq.q.raw(), size_t(T * D)), 0);
  EXPECT_EQ(std::memcmp(f.scales.raw(), hq.scales.raw(), hq.scales.nbytes()), 0);

  LinearWeight w = quantize_fp8_blocks(random_f32({64, D}, 11, 0.06f), 128, 128);
  Tensor from_q = Tensor::empty(DType::F32, {T, 64}), from_x = Tensor::empty(DType::F32, {T, 64});
  apply_linear(*cpu, Tensor{}, f, w, from_q);
  apply_linear(*cpu, h, w, from_x);
  EXPECT_EQ(std::memcmp(from_q.raw(), from_x.raw(), from_x.nbytes()), 0);
  // Unquantized weights read the plain rows, which must then be given.
  LinearWeight plain{random_f32({64, D}, 12, 0.06f), {}};
  apply_linear(*cpu, h, f, plain, from_q);
  cpu->linear(h, plain, from_x);
  EXPECT_EQ(std::memcmp(from_q.raw(), from_x.raw(), from_x.nbytes()), 0);
  EXPECT_THROW(apply_linear(*cpu, Tensor{}, f, plain, from_q), Error);
}

TEST(Fp8Linear, BlockQuantizedWeightsDequantizeCloseToTheOriginal) {
  Tensor wf = random_f32({130, 260}, 7, 0.02f);
  wf.data<float>()[0] = 0.5f;  // one block with a large amax
  LinearWeight w = quantize_fp8_blocks(wf, 128, 128);
  ASSERT_EQ(w.scale_inv.shape(), Shape({2, 3}));
  EXPECT_EQ(w.scale_inv.data<float>()[0], 0.5f / 448.0f);
  Tensor back = dequantize(w);
  for (int64_t r = 0; r < 130; ++r)
    for (int64_t c = 0; c < 260; ++c) {
      float v = wf.data<float>()[r * 260 + c], s = w.scale_inv.data<float>()[(r / 128) * 3 + c / 128];
      EXPECT_LE(std::fabs(back.data<float>()[r * 260 + c] - v), std::max(std::fabs(v) / 16, s * 0x1p-10f));
    }
}

TEST(Fp8KvCache, StoreGatherAndDecodeDequantizeWithTheLayerScale) {
  auto cpu = make_cpu_backend();
  int64_t slots = 6, D = 576, L = 512;
  for (float kv_scale : {1.0f, 0.25f}) {
    Tensor latent = random_f32({3, D}, 8, 4.0f);
    latent.data<float>()[7] = 1000.0f;  // past 448 * kv_scale: saturates
    Tensor cache = Tensor::zeros(DType::F8_E4M3, {slots, D});
    Tensor where = Tensor::from_i32({4, 0, 2});
    cpu->kv_store(latent, where, cache, kv_scale);
    Tensor back = Tensor::empty(DType::F32, {3, D});
    cpu->kv_gather(cache, kv_scale, where, back);
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t i = 0; i < D; ++i) {
        float v = latent.data<float>()[t * D + i];
        float want = e4m3_to_f32(f32_to_e4m3(v / kv_scale)) * kv_scale;
        ASSERT_EQ(back.data<float>()[t * D + i], want) << t << "," << i;
      }
    EXPECT_EQ(back.data<float>()[7], 448.0f * kv_scale);

    // Decode over the FP8 cache equals decode over an fp32 cache holding the dequantized rows.
    Tensor wide = Tensor::zeros(DType::F32, {slots, D});
    cpu->kv_store(back, where, wide, 1.0f);
    AttentionMetadata md;
    md.num_seqs = 1;
    md.seq_lens = Tensor::from_i32({3});
    md.query_start = Tensor::from_i32({0, 2});
    md.kv_start = Tensor::from_i32({0, 3});
    md.kv_indices = where;
    md.max_seq_len = 3;
    Tensor q = random_f32({2, 4, D}, 9, 0.05f);
    Tensor out8 = Tensor::empty(DType::F32, {2, 4, L}), out32 = Tensor::empty(DType::F32, {2, 4, L});
    cpu->mla_decode(q, cache, kv_scale, md, 0.1f, out8);
    cpu->mla_decode(q, wide, 1.0f, md, 0.1f, out32);
    for (int64_t i = 0; i < out8.numel(); ++i) ASSERT_EQ(out8.data<float>()[i], out32.data<float>()[i]) << i;
  }
}

TEST(Fp8Flags, QuantizationAndKvCacheDtypeNamesAreChecked) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message([] { check_quantization_flag(""); }), "");
  EXPECT_EQ(message([] { check_quantization_flag("fp8"); }), "");
  EXPECT_NE(message([] { check_quantization_flag("awq"); }).find("--quantization awq: only fp8"), std::string::npos);
  EXPECT_EQ(message([] { check_kv_cache_dtype_flag("auto"); }), "");
  EXPECT_EQ(message([] { check_kv_cache_dtype_flag("fp8_e4m3"); }), "");
  EXPECT_NE(message([] { check_kv_cache_dtype_flag("fp8_e5m2"); }).find("fp8_e5m2 is not supported"),
            std::string::npos);
  EXPECT_NE(message([] { check_kv_cache_dtype_flag("bf16"); }).find("expected auto"), std::string::npos);
  EXPECT_EQ(kv_cache_dtype_for("fp8_e4m3", DType::F32), DType::F8_E4M3);
  EXPECT_EQ(kv_cache_dtype_for("auto", DType::BF16), DType::BF16);
  // serve refuses them in ServerArgs::validate, before any weight is read.
  ServerArgs args;
  args.model_path = "deepseek-v3-tiny";
  args.device = "cuda";
  args.max_total_tokens = 1024;
  args.kv_cache_dtype = "fp8_e4m3";  // on both backends
  EXPECT_EQ(message([&] { args.validate(); }), "");
  args.device = "cpu";
  EXPECT_EQ(message([&] { args.validate(); }), "");
  args.quantization = "int8";
  EXPECT_NE(message([&] { args.validate(); }).find("--quantization int8"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve
