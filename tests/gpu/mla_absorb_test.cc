// CUDA mla_absorb_q / mla_absorb_out against the CPU reference, with q_nope and q_pe as the
// model's views of q [T, H, 192] and the latent as a view, for 16 and 128 heads and odd T.
#include "gpu_test_util.h"

#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

using namespace gputest;

class MlaAbsorb : public GpuTest {};

constexpr int64_t kNope = 128, kRope = 64, kLora = 512, kV = 128;

TEST_F(MlaAbsorb, QueryIntoLatent) {
  for (int64_t H : {16, 128}) {
    for (int64_t T : {1, 7, 20, 130}) {
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
    for (int64_t T : {1, 7, 20, 130}) {
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

}  // namespace
}  // namespace mlaserve
