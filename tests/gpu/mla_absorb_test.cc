// CUDA mla_absorb_q / mla_absorb_out against the CPU reference, with q_nope and q_pe as the
// model's views of q [T, H, 192] and the latent as a view, for 16 and 128 heads and odd T (the
// few-token kernels up to 256 token-heads, cuBLASLt past that); and
// their FP8 forms (the FP8 BMM) on weights cut from an FP8 kv_b_proj, in every launch.
#include "gpu_test_util.h"

#include "kernels/cpu/cpu_backend.h"
#include "model/absorbed_weights.h"
#include "weights/fp8_block_quant.h"

namespace mlaserve {
namespace {

using namespace gputest;

class MlaAbsorb : public GpuTest {};

constexpr int64_t kNope = 128, kRope = 64, kLora = 512, kV = 128;

TEST_F(MlaAbsorb, QueryIntoLatent) {
  for (int64_t H : {16, 128}) {
    for (int64_t T : {1, 2, 4, 7, 8, 20, 130}) {
      Tensor q = random_f32({T, H, kNope + kRope}, seed + T * H), w = random_f32({H, kNope, kLora}, seed + H, 0.05f);
      Tensor q_nope = q.narrow(2, 0, kNope), q_pe = q.narrow(2, kNope, kRope);
      Tensor want = Tensor::empty(DType::F32, {T, H, kLora + kRope});
      cpu->mla_absorb_q(q_nope.contiguous(), q_pe.contiguous(), w, want);
      Tensor q_dev = dev_bf16(q);
      Tensor out = poisoned(gpu, DType::BF16, {T, H, kLora + kRope});
      gpu.mla_absorb_q(q_dev.narrow(2, 0, kNope), q_dev.narrow(2, kNope, kRope), dev_bf16(w), out);
      double err = rel_l2(gpu.to_host(out), want);
      EXPECT_LE(err, kBf16Tolerance) << "H=" << H << " T=" << T;
      worst = std::max(worst, err);
      // the rope half is a plain copy: exact
      Tensor got = gpu.to_host(out).to_f32();
      double max_diff = 0;
      for (int64_t i = 0; i < T * H; ++i)
        for (int64_t r = 0; r < kRope; ++r)
          max_diff = std::max(max_diff, double(std::abs(got.data<float>()[i * (kLora + kRope) + kLora + r] -
                                                        want.data<float>()[i * (kLora + kRope) + kLora + r])));
      EXPECT_EQ(max_diff, 0.0) << "q_pe copy, H=" << H << " T=" << T;
    }
  }
}

TEST_F(MlaAbsorb, LatentOutToValues) {
  for (int64_t H : {16, 128}) {
    for (int64_t T : {1, 2, 4, 7, 8, 20, 130}) {
      for (bool strided : {false, true}) {
        // strided: the latent sits in the first 512 of 576-wide rows
        int64_t width = strided ? kLora + kRope : kLora;
        Tensor lat = random_f32({T, H, width}, seed + 3 * T + H + width), w = random_f32({H, kV, kLora}, seed + 9, 0.05f);
        Tensor want = Tensor::empty(DType::F32, {T, H, kV});
        cpu->mla_absorb_out(lat.narrow(2, 0, kLora).contiguous(), w, want);
        Tensor out = poisoned(gpu, DType::BF16, {T, H, kV});
        gpu.mla_absorb_out(dev_bf16(lat).narrow(2, 0, kLora), dev_bf16(w), out);
        double err = rel_l2(gpu.to_host(out), want);
        EXPECT_LE(err, kBf16Tolerance) << "H=" << H << " T=" << T << " strided=" << strided;
        worst = std::max(worst, err);
      }
    }
  }
}

// Activations BF16 holds exactly, so both backends quantize the same values.
Tensor bf16_exact(Shape shape, uint64_t s, float std) {
  return to_dtype(random_f32(shape, s, std), DType::BF16).to_f32();
}

// The FP8 BMM on the skinny FP8 kernel batched over heads: the op's default launch and every
// launch the kernel has (warps on K 1-8, row tiles, split-K), tokens 1 to 130 (token tiles past 16).
TEST_F(MlaAbsorb, Fp8ProductsMatchTheCpuInEveryLaunch) {
  for (int64_t H : {16, 128}) {
    LinearWeight kv_b = quantize_fp8_blocks(random_f32({H * (kNope + kV), kLora}, seed + H, 0.05f), 128, 128);
    AbsorbedWeights host = make_absorbed_weights(kv_b, H, kNope, kV, *cpu);
    AbsorbedWeights dev = make_absorbed_weights(kv_b, H, kNope, kV, gpu);
    ASSERT_TRUE(host.fp8() && dev.fp8());
    for (int64_t T : {1, 5, 16, 20, 130}) {
      Tensor q = bf16_exact({T, H, kNope + kRope}, seed + T * H, 1.0f);
      Tensor want_q = Tensor::empty(DType::F32, {T, H, kLora + kRope});
      cpu->mla_absorb_q_w8a8(q.narrow(2, 0, kNope), q.narrow(2, kNope, kRope), host.w_uk_t, want_q);
      // The latent as the decode kernel leaves it: the first 512 of 576-wide rows.
      Tensor lat = bf16_exact({T, H, kLora + kRope}, seed + 7 * T + H, 1.0f);
      Tensor want_o = Tensor::empty(DType::F32, {T, H, kV});
      cpu->mla_absorb_out_w8a8(lat.narrow(2, 0, kLora), host.w_uv_fp8, want_o);
      Tensor q_dev = dev_bf16(q), lat_dev = dev_bf16(lat);
      auto check = [&](const cuda::SkinnyFp8Config* c) {
        const std::string what = fmt::format("H={} T={} {}", H, T, c ? cuda::to_string(*c) : "default");
        Tensor out_q = poisoned(gpu, DType::BF16, {T, H, kLora + kRope});
        Tensor out_o = poisoned(gpu, DType::BF16, {T, H, kV});
        Tensor q_nope = q_dev.narrow(2, 0, kNope), q_pe = q_dev.narrow(2, kNope, kRope);
        if (c) {
          gpu.mla_absorb_q_w8a8(q_nope, q_pe, dev.w_uk_t, out_q, *c);
          gpu.mla_absorb_out_w8a8(lat_dev.narrow(2, 0, kLora), dev.w_uv_fp8, out_o, *c);
        } else {
          gpu.mla_absorb_q_w8a8(q_nope, q_pe, dev.w_uk_t, out_q);
          gpu.mla_absorb_out_w8a8(lat_dev.narrow(2, 0, kLora), dev.w_uv_fp8, out_o);
        }
        const double eq = rel_l2(gpu.to_host(out_q), want_q), eo = rel_l2(gpu.to_host(out_o), want_o);
        EXPECT_LE(eq, kBf16Tolerance) << "q " << what;
        EXPECT_LE(eo, kBf16Tolerance) << "out " << what;
        worst = std::max({worst, eq, eo});
      };
      check(nullptr);
      for (int k_warps : {1, 2, 4, 8})
        for (int row_tiles : {1, 2, 4})
          for (int splits : {1, 2}) {
            const cuda::SkinnyFp8Config c{row_tiles, splits, k_warps};
            if (splits == 1) {
              check(&c);
              continue;
            }
            // Split K: the output product's 4 K-blocks (q's K is one block), at the smaller T.
            if (T > 20) continue;
            Tensor out_o = poisoned(gpu, DType::BF16, {T, H, kV});
            gpu.mla_absorb_out_w8a8(lat_dev.narrow(2, 0, kLora), dev.w_uv_fp8, out_o, c);
            const double eo = rel_l2(gpu.to_host(out_o), want_o);
            EXPECT_LE(eo, kBf16Tolerance) << "out H=" << H << " T=" << T << " " << cuda::to_string(c);
            worst = std::max(worst, eo);
          }
    }
  }
}

}  // namespace
}  // namespace mlaserve
