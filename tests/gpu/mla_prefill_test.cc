// CUDA mla_prefill against the CPU reference: varlen batches mixing lengths 1, odd and past one
// tile, with and without a cached prefix, 16 heads (V2-Lite, V3 TP8) and 128 heads (V3), strided
// q and k_pe views as the model passes them. Every tile configuration of the kernel is checked.
#include "gpu_test_util.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/mla_prefill.h"

namespace mlaserve {
namespace {

using namespace gputest;

struct SeqShape {
  int32_t seq_len, num_queries;  // num_queries < seq_len: the rest is a cached prefix
};

class MlaPrefill : public GpuTest {
 protected:

  // Checks the op and every tile configuration; `worst` keeps the largest relative L2 error.
  void check(const std::vector<SeqShape>& seqs, int64_t H) {
    constexpr int64_t kQk = 192, kV = 128, kLatent = 576, kPad = 200;
    std::vector<int32_t> qs{0}, ks{0}, lens;
    int32_t max_len = 0;
    for (SeqShape s : seqs) {
      qs.push_back(qs.back() + s.num_queries);
      ks.push_back(ks.back() + s.seq_len);
      lens.push_back(s.seq_len);
      max_len = std::max(max_len, s.seq_len);
    }
    int64_t T = qs.back(), S = ks.back();
    AttentionMetadata host_md{int32_t(seqs.size()), Tensor::from_i32(lens), Tensor::from_i32(qs),
                              Tensor::from_i32(ks), Tensor(), max_len};
    AttentionMetadata dev_md{host_md.num_seqs, gpu.to_device(host_md.seq_lens), gpu.to_device(host_md.query_start),
                             gpu.to_device(host_md.kv_start), Tensor(), max_len};
    // q rows padded to 200 and k_pe inside the 576-wide latent rows: the kernel must use strides.
    Tensor q_full = random_f32({T, H, kPad}, seed, 1.5f), kv = random_f32({S, H, 256}, seed + 1);
    Tensor ctx = random_f32({S, kLatent}, seed + 2);
    Tensor q = q_full.narrow(2, 0, kQk).contiguous(), k_pe = ctx.narrow(1, 512, 64).contiguous();
    float scale = 1.0f / std::sqrt(float(kQk));
    Tensor want = Tensor::empty(DType::F32, {T, H, kV});
    cpu->mla_prefill(q, kv, k_pe, host_md, scale, want);

    Tensor q_dev = gpu.to_device(to_dtype(q_full, DType::BF16)).narrow(2, 0, kQk);
    Tensor kv_dev = gpu.to_device(to_dtype(kv, DType::BF16));
    Tensor kpe_dev = gpu.to_device(to_dtype(ctx, DType::BF16)).narrow(1, 512, 64);
    Tensor out = poisoned(gpu, DType::BF16, {T, H, kV});
    gpu.mla_prefill(q_dev, kv_dev, kpe_dev, dev_md, scale, out);
    double err = rel_l2(gpu.to_host(out), want);
    EXPECT_LE(err, 1e-2) << "op, H=" << H << " T=" << T;
    worst = std::max(worst, err);

    for (int c = 1; c < cuda::mla_prefill_num_configs(); ++c) {
      Tensor o2 = poisoned(gpu, DType::BF16, {T, H, kV});
      cuda::MlaPrefillParams p = cuda::mla_prefill_params(q_dev, kv_dev, kpe_dev, dev_md, scale, o2);
      p.config = c;
      cuda::launch_mla_prefill(p, gpu.stream());
      double e2 = rel_l2(gpu.to_host(o2), want);
      EXPECT_LE(e2, 1e-2) << cuda::mla_prefill_config_name(c) << ", H=" << H << " T=" << T;
      worst = std::max(worst, e2);
    }
  }
};

TEST_F(MlaPrefill, SixteenHeadsMixedLengths) {
  // lengths 1, odd, one tile and a bit, long; prefixes of all sizes incl. a single new token
  check({{1, 1}, {37, 37}, {200, 77}, {129, 129}, {65, 1}, {700, 700}, {1100, 517}, {64, 64}}, 16);
  std::printf("worst relative L2 error: %.3g\n", worst);
}

TEST_F(MlaPrefill, SixteenHeadsOneSeq) {
  check({{333, 333}}, 16);
  check({{4097, 3}}, 16);
  std::printf("worst relative L2 error: %.3g\n", worst);
}

TEST_F(MlaPrefill, V3HeadsWithPrefix) {
  check({{1, 1}, {75, 75}, {300, 45}, {129, 129}, {200, 3}}, 128);
  std::printf("worst relative L2 error: %.3g\n", worst);
}

}  // namespace
}  // namespace mlaserve
