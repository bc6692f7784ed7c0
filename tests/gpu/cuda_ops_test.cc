// Every CUDA op against the CPU reference on fresh random inputs, over DeepSeek shapes.
#include <cmath>
#include <cstring>
#include <sstream>

#include "gpu_test_util.h"

#include "kernels/cpu/cpu_backend.h"

namespace mlaserve {
namespace {

using namespace gputest;

class CudaOps : public ::testing::Test {
 protected:
  cuda::CudaBackend gpu;
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  uint64_t seed = fresh_seed();
  void TearDown() override {
    if (HasFailure()) std::printf("inputs seed: %llu\n", (unsigned long long)seed);
  }
  Tensor dev_bf16(const Tensor& f32) { return gpu.to_device(to_dtype(f32, DType::BF16)); }
};

TEST_F(CudaOps, Embedding) {
  for (DType table_dt : {DType::BF16, DType::F32}) {
    Tensor table = random_f32({1000, 576}, seed);
    std::vector<int32_t> ids = {0, 999, 5, 5, 123, 77, 1};
    Tensor want = Tensor::empty(DType::F32, {7, 576});
    cpu->embedding(Tensor::from_i32(ids), table, want);
    Tensor out = poisoned(gpu, DType::BF16, {7, 576});
    gpu.embedding(gpu.to_device(Tensor::from_i32(ids)), gpu.to_device(to_dtype(table, table_dt)), out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance);
  }
}

TEST_F(CudaOps, RmsNormAndAddRmsNorm) {
  // hidden sizes of V2-Lite, V3, and the latent / q_lora norms
  for (int64_t D : {2048, 7168, 512, 1536, 5120}) {
    for (int64_t T : {1, 3, 129}) {
      Tensor x = random_f32({T, D}, seed + D + T, 2.0f), res = random_f32({T, D}, seed + 7 * D + T);
      Tensor w = random_f32({D}, seed + 3, 0.2f, 1.0f);
      Tensor want = Tensor::empty(DType::F32, {T, D});
      cpu->rmsnorm(x, w, 1e-6f, want);
      Tensor out = poisoned(gpu, DType::BF16, {T, D});
      gpu.rmsnorm(dev_bf16(x), dev_bf16(w), 1e-6f, out);
      EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance) << "rmsnorm D=" << D << " T=" << T;

      Tensor res_cpu = res.to_f32(), want2 = Tensor::empty(DType::F32, {T, D});
      cpu->add_rmsnorm(x, res_cpu, w, 1e-6f, want2);
      Tensor res_gpu = dev_bf16(res), out2 = poisoned(gpu, DType::BF16, {T, D});
      gpu.add_rmsnorm(dev_bf16(x), res_gpu, gpu.to_device(w), 1e-6f, out2);
      EXPECT_LE(rel_l2(gpu.to_host(out2), want2), kBf16Tolerance) << "add_rmsnorm D=" << D << " T=" << T;
      EXPECT_LE(rel_l2(gpu.to_host(res_gpu), res_cpu), kBf16Tolerance) << "residual D=" << D;
    }
  }
}

TEST_F(CudaOps, RmsNormLinearFoldsTheNormIntoTheGemm) {
  // A block's first linear with its input's norm: folded into the skinny GEMM (one row, a BF16 norm,
  // K <= 2048 in one split, a wave of CTAs) or the ops in turn. Against the CPU, and the fold against the ops in turn
  // on the device: the residual bit for bit, the output and the normalized rows within BF16 rounding
  // (the fold rounds r * g where the ops round the normalized rows). Shapes: V2-Lite's q_kv_a and
  // router, V3's q_b (after q_a's norm; past a wave of CTAs: not folded), V3's q_kv_a and router
  // (split K: not folded), odd widths.
  struct Case {
    int64_t N, K;
    bool f32_out, folds;  // folds: at T = 1 with a BF16 norm
  };
  for (Case c : {Case{3648, 2048, false, true}, Case{64, 2048, true, true}, Case{24576, 1536, false, false},
                 Case{2112, 7168, false, false}, Case{256, 7168, true, false}, Case{100, 136, false, true},
                 Case{48, 1000, true, true}}) {
    for (int64_t T : {1, 3, 9}) {
      for (bool with_residual : {true, false}) {
        for (DType norm_dt : {DType::BF16, DType::F32}) {
          for (bool with_normed : {true, false}) {
            // The CPU reference of the wide shapes and the unfolded norm weights: fewer row counts.
            if ((c.N * c.K > 8 * 1024 * 1024 || norm_dt == DType::F32) && T != 1) continue;
            const uint64_t s = seed + uint64_t(c.N * 131 + c.K * 7 + T * 3 + (with_residual ? 1 : 0));
            Tensor x = random_f32({T, c.K}, s, 2.0f), res = random_f32({T, c.K}, s + 1);
            Tensor norm = random_f32({c.K}, s + 2, 0.2f, 1.0f);
            Tensor w = random_f32({c.N, c.K}, s + 3, 1.0f / std::sqrt(float(c.K)));
            const DType out_dt = c.f32_out ? DType::F32 : DType::BF16;
            std::ostringstream what;
            what << "N=" << c.N << " K=" << c.K << " T=" << T << " residual=" << with_residual
                 << " norm f32=" << (norm_dt == DType::F32) << " normed=" << with_normed;
            Tensor xd = dev_bf16(x), nd = gpu.to_device(to_dtype(norm, norm_dt)), wd = dev_bf16(w);
            std::vector<Tensor> outs, residuals, normeds;
            for (bool fold : {true, false}) {
              gpu.fold_norm_into_linear = fold;
              Tensor r = dev_bf16(res), normed = poisoned(gpu, DType::BF16, {T, c.K});
              const void* r_before = r.raw();
              Tensor out = poisoned(gpu, out_dt, {T, c.N});
              gpu.rmsnorm_linear(xd, with_residual ? &r : nullptr, nd, 1e-6f, with_normed ? &normed : nullptr,
                                 LinearWeight{wd, {}}, out);
              if (fold && with_residual) {
                EXPECT_EQ(r.raw() != r_before, c.folds && T == 1 && norm_dt == DType::BF16) << what.str();
              }
              outs.push_back(gpu.to_host(out)), residuals.push_back(gpu.to_host(r));
              normeds.push_back(gpu.to_host(normed));
            }
            gpu.fold_norm_into_linear = true;
            EXPECT_EQ(std::memcmp(residuals[0].raw(), residuals[1].raw(), residuals[1].nbytes()), 0) << what.str();
            EXPECT_LE(rel_l2(outs[0], outs[1].to_f32()), kBf16Tolerance) << what.str();
            Tensor res_cpu = res.to_f32(), normed_cpu = Tensor::empty(DType::F32, {T, c.K});
            Tensor want = Tensor::empty(DType::F32, {T, c.N});
            cpu->rmsnorm_linear(x, with_residual ? &res_cpu : nullptr, norm, 1e-6f, &normed_cpu, LinearWeight{w, {}},
                                want);
            EXPECT_LE(rel_l2(outs[0], want), kBf16Tolerance) << what.str();
            if (with_residual) {
              EXPECT_LE(rel_l2(residuals[0], res_cpu), kBf16Tolerance) << what.str();
            }
            if (with_normed) {
              EXPECT_LE(rel_l2(normeds[0], normed_cpu), kBf16Tolerance) << what.str();
              EXPECT_LE(rel_l2(normeds[0], normeds[1].to_f32()), kBf16Tolerance) << what.str();
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaOps, SiluAndMulAndAdd) {
  for (int64_t I : {1408, 2048, 18432 / 8, 10944}) {
    int64_t T = 5;
    Tensor g = random_f32({T, I}, seed + I, 3.0f), u = random_f32({T, I}, seed + 2 * I);
    Tensor want = Tensor::empty(DType::F32, {T, I});
    cpu->silu_and_mul(g, u, want);
    Tensor out = poisoned(gpu, DType::BF16, {T, I});
    gpu.silu_and_mul(dev_bf16(g), dev_bf16(u), out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance) << I;
    Tensor xg = dev_bf16(g), xc = g.to_f32();
    cpu->add(xc, u);
    gpu.add(xg, dev_bf16(u));
    EXPECT_LE(rel_l2(gpu.to_host(xg), xc), kBf16Tolerance) << I;
  }
}

TEST_F(CudaOps, RowOpsOnStridedViewsAndOddSizes) {
  // Rows that are not 16-byte aligned (odd offset or leading dimension, D % 8 != 0) take the scalar
  // kernels; aligned strided views (ld != D) take the 16-byte ones.
  struct Case {
    int64_t D, ld, off;
  };
  int64_t T = 7;
  for (Case c : {Case{576, 579, 1}, Case{136, 272, 136}, Case{130, 131, 0}, Case{1000, 1000, 0}, Case{2048, 2056, 8}}) {
    Tensor x = random_f32({T, c.ld}, seed + c.D, 2.0f), res = random_f32({T, c.ld}, seed + c.ld);
    Tensor w = random_f32({c.D}, seed + 3, 0.2f, 1.0f);
    Tensor xv = x.narrow(1, c.off, c.D), want = Tensor::empty(DType::F32, {T, c.D});
    cpu->rmsnorm(xv, w, 1e-6f, want);
    Tensor xg = dev_bf16(x), out = poisoned(gpu, DType::BF16, {T, c.D});
    gpu.rmsnorm(xg.narrow(1, c.off, c.D), dev_bf16(w), 1e-6f, out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance) << "rmsnorm D=" << c.D << " ld=" << c.ld;

    Tensor res_cpu = res.to_f32(), rv = res_cpu.narrow(1, c.off, c.D);
    cpu->add_rmsnorm(xv, rv, w, 1e-6f, want);
    Tensor res_gpu = dev_bf16(res), rgv = res_gpu.narrow(1, c.off, c.D);
    gpu.add_rmsnorm(xg.narrow(1, c.off, c.D), rgv, gpu.to_device(w), 1e-6f, out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance) << "add_rmsnorm D=" << c.D << " ld=" << c.ld;
    EXPECT_LE(rel_l2(gpu.to_host(res_gpu), res_cpu), kBf16Tolerance) << "residual D=" << c.D << " ld=" << c.ld;

    // gate and up as the two halves of one [T, 2 * D] buffer, as the MoE experts lay them out.
    Tensor gu = random_f32({T, 2 * c.D}, seed + 5 * c.D, 3.0f), gug = dev_bf16(gu);
    Tensor want2 = Tensor::empty(DType::F32, {T, c.D});
    cpu->silu_and_mul(gu.narrow(1, 0, c.D), gu.narrow(1, c.D, c.D), want2);
    Tensor out2 = poisoned(gpu, DType::BF16, {T, c.D});
    gpu.silu_and_mul(gug.narrow(1, 0, c.D), gug.narrow(1, c.D, c.D), out2);
    EXPECT_LE(rel_l2(gpu.to_host(out2), want2), kBf16Tolerance) << "silu_and_mul D=" << c.D;

    Tensor sum_cpu = res.to_f32(), sum_gpu = dev_bf16(res);
    Tensor sv = sum_cpu.narrow(1, c.off, c.D), sgv = sum_gpu.narrow(1, c.off, c.D);
    cpu->add(sv, xv);
    gpu.add(sgv, xg.narrow(1, c.off, c.D));
    EXPECT_LE(rel_l2(gpu.to_host(sum_gpu), sum_cpu), kBf16Tolerance) << "add D=" << c.D << " ld=" << c.ld;
  }
}

TEST_F(CudaOps, RopeOnQueryHeadsAndTheLatent) {
  // q [T, 16, 192] with rope on [128, 192); the latent [T, 576] with rope on [512, 576).
  int64_t T = 37;
  Tensor inv = Tensor::empty(DType::F32, {32});
  for (int i = 0; i < 32; ++i) inv.data<float>()[i] = std::pow(10000.0f, -float(2 * i) / 64.0f);
  RopeTable host{inv, 1.3f}, dev{gpu.to_device(inv), 1.3f};
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = int32_t((t * 977) % 5000);
  Tensor q = random_f32({T, 16, 192}, seed), latent = random_f32({T, 576}, seed + 1);
  Tensor qc = q.to_f32(), lc = latent.to_f32();
  Tensor qv = qc.narrow(2, 128, 64), lv = lc.narrow(1, 512, 64).as_strided({T, 1, 64}, {576, 64, 1});
  cpu->rope(qv, Tensor::from_i32(pos), host);
  cpu->rope(lv, Tensor::from_i32(pos), host);
  Tensor qg = dev_bf16(q), lg = dev_bf16(latent), pg = gpu.to_device(Tensor::from_i32(pos));
  Tensor qgv = qg.narrow(2, 128, 64), lgv = lg.narrow(1, 512, 64).as_strided({T, 1, 64}, {576, 64, 1});
  gpu.rope(qgv, pg, dev);
  gpu.rope(lgv, pg, dev);
  EXPECT_LE(rel_l2(gpu.to_host(qg), qc), kBf16Tolerance);
  EXPECT_LE(rel_l2(gpu.to_host(lg), lc), kBf16Tolerance);
}

TEST_F(CudaOps, MlaNormRopeStoreMatchesTheSeparateOps) {
  // The fused op against the CPU reference (the separate ops): V3 / V2-Lite heads, a token count
  // that is not a multiple of anything, a latent view inside a wider row, BF16 and F32 norm weights,
  // BF16 and FP8 caches; heads of 192 (16-byte rope parts: the kernel's 16-byte path) and of 194
  // (its pair-a-thread path).
  for (int64_t H : {16, 128})
    for (DType norm_dtype : {DType::BF16, DType::F32})
      for (DType cache_dtype : {DType::BF16, DType::F8_E4M3})
        for (int64_t head_width : {192, 194}) {
          if (head_width == 194 && norm_dtype == DType::F32) continue;
          int64_t T = 37, slots = 300, L = 512, R = 64;
          Tensor inv = Tensor::empty(DType::F32, {R / 2});
          for (int i = 0; i < R / 2; ++i) inv.data<float>()[i] = std::pow(10000.0f, -float(2 * i) / float(R));
          RopeTable host{inv, 0.7f}, dev{gpu.to_device(inv), 0.7f};
          std::vector<int32_t> pos(T), where(T);
          for (int64_t t = 0; t < T; ++t) pos[t] = int32_t((t * 977) % 5000), where[t] = int32_t((t * 7 + 11) % slots);
          Tensor q = random_f32({T, H, head_width}, seed), wide = random_f32({T, L + R + 8}, seed + 1);
          Tensor norm = random_f32({L}, seed + 2, 0.5f, 1.0f), cache0 = random_f32({slots, L + R}, seed + 3);

          const bool fp8 = cache_dtype == DType::F8_E4M3;
          const float kv_scale = fp8 ? 0.03125f : 1.0f;  // normalized latents of ~1 spread over e4m3's range
          Tensor qc = q.to_f32(), wc = wide.to_f32(), cc = to_dtype(cache0, fp8 ? DType::F8_E4M3 : DType::F32);
          Tensor lat = wc.narrow(1, 0, L + R), qpe = qc.narrow(2, 128, R);
          cpu->mla_norm_rope_store(lat, qpe, norm, 1e-6f, Tensor::from_i32(pos), host, Tensor::from_i32(where), cc,
                                   kv_scale);

          Tensor qg = dev_bf16(q), wg = dev_bf16(wide),
                 cg = gpu.to_device(to_dtype(cache0, fp8 ? cache_dtype : DType::BF16));
          Tensor latg = wg.narrow(1, 0, L + R), qpeg = qg.narrow(2, 128, R);
          gpu.mla_norm_rope_store(latg, qpeg, gpu.to_device(to_dtype(norm, norm_dtype)), 1e-6f,
                                  gpu.to_device(Tensor::from_i32(pos)), dev, gpu.to_device(Tensor::from_i32(where)), cg,
                                  kv_scale);
          const std::string where_s = fmt::format("H={} cache {} head {}", H, dtype_name(cache_dtype), head_width);
          EXPECT_LE(rel_l2(gpu.to_host(qg), qc), kBf16Tolerance) << "q_pe " << where_s;
          EXPECT_LE(rel_l2(gpu.to_host(wg), wc), kBf16Tolerance) << "latent " << where_s;
          // FP8: the GPU quantizes the BF16-rounded latents, the CPU its fp32 ones; a value near an e4m3
          // rounding boundary may land one step apart (a step is 6-12%), rarely.
          EXPECT_LE(rel_l2(gpu.to_host(cg).to_f32(), cc.to_f32()), fp8 ? 2e-2 : kBf16Tolerance) << "cache " << where_s;
        }
}

TEST_F(CudaOps, KvStoreAndGather) {
  int64_t slots = 300, T = 41;
  Tensor latent = random_f32({T, 576}, seed);
  std::vector<int32_t> where(T);
  for (int64_t t = 0; t < T; ++t) where[t] = int32_t((t * 7 + 11) % slots);
  Tensor cache = poisoned(gpu, DType::BF16, {slots, 576});
  gpu.kv_store(dev_bf16(latent), gpu.to_device(Tensor::from_i32(where)), cache, 1.0f);
  Tensor back = poisoned(gpu, DType::BF16, {T, 576});
  gpu.kv_gather(cache, 1.0f, gpu.to_device(Tensor::from_i32(where)), back);
  EXPECT_EQ(rel_l2(gpu.to_host(back), latent), 0.0);
  EXPECT_THROW(gpu.kv_store(dev_bf16(latent), gpu.to_device(Tensor::from_i32(where)), cache, 2.0f), Error)
      << "a scale on a BF16 cache";
}

TEST_F(CudaOps, KvStoreAndGatherFp8) {
  // e4m3 rows holding latent / kv_scale, bit for bit as the CPU's (IEEE division, nearest even,
  // saturating at 448: the latents reach ~1000 / kv_scale); the gather scales them back.
  int64_t slots = 300, T = 41;
  std::vector<int32_t> where(T);
  for (int64_t t = 0; t < T; ++t) where[t] = int32_t((t * 7 + 11) % slots);
  Tensor latent = to_dtype(random_f32({T, 576}, seed, 200.0f), DType::BF16).to_f32();  // BF16 values on both sides
  for (float kv_scale : {1.0f, 0.25f, 3.0f}) {
    Tensor want = to_dtype(Tensor::zeros(DType::F32, {slots, 576}), DType::F8_E4M3);
    cpu->kv_store(latent, Tensor::from_i32(where), want, kv_scale);
    Tensor cache = gpu.to_device(want);
    CUDA_CHECK(cudaMemset(cache.raw(), 0, cache.nbytes()));
    gpu.kv_store(dev_bf16(latent), gpu.to_device(Tensor::from_i32(where)), cache, kv_scale);
    Tensor got = gpu.to_host(cache);
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "kv_scale " << kv_scale;

    Tensor back_want = Tensor::empty(DType::F32, {T, 576});
    cpu->kv_gather(want, kv_scale, Tensor::from_i32(where), back_want);
    Tensor back = poisoned(gpu, DType::BF16, {T, 576});
    gpu.kv_gather(cache, kv_scale, gpu.to_device(Tensor::from_i32(where)), back);
    // Exact where kv_scale is a power of two; else one BF16 rounding of the product.
    EXPECT_LE(rel_l2(gpu.to_host(back), back_want), kv_scale == 3.0f ? kBf16Tolerance : 0.0) << kv_scale;
  }
  Tensor cache = gpu.empty(DType::F8_E4M3, {slots, 576});
  EXPECT_THROW(gpu.kv_store(dev_bf16(latent), gpu.to_device(Tensor::from_i32(where)), cache, 0.0f), Error);
  EXPECT_THROW(gpu.kv_store(dev_bf16(latent), gpu.to_device(Tensor::from_i32(where)), cache, -1.0f), Error);
}

TEST_F(CudaOps, LinearOverDeepSeekShapes) {
  struct Shape3 {
    int64_t N, K;
  };
  // V3: q_a, q_b, kv_a, kv_b, o (TP1); V2-Lite: q, expert gate, router; odd sizes.
  std::vector<Shape3> shapes = {{1536, 7168}, {24576, 1536}, {576, 7168}, {32768, 512}, {7168, 16384},
                                {3072, 2048},  {1408, 2048},   {64, 2048},  {1000, 136}};
  for (auto [N, K] : shapes) {
    for (int64_t T : {1, 7, 8, 9, 64}) {  // <= 8: the skinny kernel (split-K for narrow N); else cuBLASLt
      Tensor x = random_f32({T, K}, seed + N + T), w = random_f32({N, K}, seed + K, 1.0f / std::sqrt(float(K)));
      Tensor want = Tensor::empty(DType::F32, {T, N});
      cpu->linear(x, LinearWeight{w, {}}, want);
      Tensor out = poisoned(gpu, DType::BF16, {T, N});
      gpu.linear(dev_bf16(x), LinearWeight{dev_bf16(w), {}}, out);
      EXPECT_LE(rel_l2(gpu.to_host(out), want), kBf16Tolerance) << "N=" << N << " K=" << K << " T=" << T;
    }
  }
  // fp32 output (router logits) and a strided input (a narrow() of the latent).
  for (int64_t T : {5, 9}) {  // the skinny kernel (split-K) and cuBLASLt
    Tensor lat = random_f32({T, 576}, seed), w = random_f32({256, 512}, seed + 1, 0.05f);
    Tensor want = Tensor::empty(DType::F32, {T, 256});
    cpu->linear(lat.narrow(1, 0, 512), LinearWeight{w, {}}, want);
    Tensor out = poisoned(gpu, DType::F32, {T, 256});
    gpu.linear(dev_bf16(lat).narrow(1, 0, 512), LinearWeight{dev_bf16(w), {}}, out);
    EXPECT_LE(rel_l2(gpu.to_host(out), want), 1e-4) << "T=" << T;
  }
}

}  // namespace
}  // namespace mlaserve
