// Block-scaled FP8 GEMM for many tokens (fp8_gemm_wgmma.h) on Hopper warpgroup MMA.
//
// Persistent CTAs of three warpgroups walk output tiles of 128 * kWaves tokens x 128 weight rows.
// Warpgroup 0 gives up its registers and one of its threads asks the TMA for each K-block's codes of
// x and W and x's scales, into a ring of stages; warpgroups 1 and 2 compute. Each K-block's four k32
// MMAs go into a temporary accumulator, which the warpgroup waits for and adds to its fp32 sums
// times x_scale[token] * w_scale (so the tensor core never sums across blocks: its accumulator
// keeps fewer bits than fp32). A warpgroup owns 64 tokens of each 128-token wave and runs its waves
// one after another through the one temporary, so a 256 x 128 tile holds 64 + 128 accumulators a
// thread, and a weight tile in shared memory serves four waves. While one warpgroup scales its sums
// the other's MMAs keep the tensor core busy.
#include <algorithm>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_gemm_wgmma.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kBK = 128, kBN = 128, kThreads = 384;
constexpr int kLoaderRegs = 40, kMmaRegs = 232;
static_assert(wgmma::regs_split_fits(2, kLoaderRegs, kMmaRegs), "the MMA warpgroups take what the loader gives");

template <int kWaves>
struct Layout {
  static constexpr int kBM = 128 * kWaves;
  static constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK;
  static constexpr int kSBytes = (kBM * 4 + 1023) / 1024 * 1024;  // x's scales; stages stay 1024-aligned
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes;
  static constexpr int kStages = std::min(8, 200 * 1024 / kStageBytes);
  static constexpr int kBars = kStages * kStageBytes;  // full[s], then empty[s]
  static constexpr int kSmemBytes = kBars + 2 * kStages * 8 + 1024;  // + alignment
  static_assert(kSmemBytes <= 227 * 1024 && kStages >= 3, "a ring of 3 or more stages fits shared memory");
};

struct Params {
  CUtensorMap x_map, w_map, xs_map;
  const float* w_scales;
  int64_t ld_w_scales;
  __nv_bfloat16* out;
  int64_t ldo;
  int T, N, K, group_m;
};

// Output tile t as (token tile, weight tile): group_m token tiles are walked a weight tile at a
// time, so the CTAs in flight share both operands' panels in L2.
__device__ __forceinline__ void tile_at(int t, int num_m, int num_n, int group_m, int& mb, int& nb) {
  const int group = group_m * num_n, first = t / group * group_m, in = t % group;
  const int gm = min(num_m - first, group_m);
  mb = first + in % gm, nb = in / gm;
}

template <int kWaves>
__global__ void __launch_bounds__(kThreads, 1) fp8_gemm_wgmma_kernel(const __grid_constant__ Params p) {
  using L = Layout<kWaves>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = mma::align_smem_1024(smem_raw);
  const uint32_t base = mma::smem_u32(smem);
  auto full = [&](int s) { return base + L::kBars + 8 * s; };
  auto empty = [&](int s) { return base + L::kBars + 8 * (L::kStages + s); };
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) mbar::init(full(s), 1), mbar::init(empty(s), 8);  // 8 MMA warps
    wgmma::fence_async_smem();  // the barriers as the TMA sees them
    tma::prefetch_map(&p.x_map), tma::prefetch_map(&p.w_map), tma::prefetch_map(&p.xs_map);
  }
  __syncthreads();
  pdl_wait_and_trigger();
  const int num_m = (p.T + L::kBM - 1) / L::kBM, num_n = (p.N + kBN - 1) / kBN, tiles = num_m * num_n;
  const int kbs = p.K / kBK;

  if (wg == 0) {
    wgmma::regs_dec<kLoaderRegs>();
    if (tid != 0) return;
    int s = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int mb, nb;
      tile_at(t, num_m, num_n, p.group_m, mb, nb);
      for (int kb = 0; kb < kbs; ++kb) {
        mbar::wait(empty(s), phase ^ 1);  // a fresh barrier passes parity 1 at once
        const uint32_t st = base + s * L::kStageBytes;
        mbar::arrive_expect_tx(full(s), L::kABytes + L::kBBytes + L::kBM * 4);
        tma::load_2d(st, &p.x_map, kb * kBK, mb * L::kBM, full(s));
        tma::load_2d(st + L::kABytes, &p.w_map, kb * kBK, nb * kBN, full(s));
        tma::load_2d(st + L::kABytes + L::kBBytes, &p.xs_map, mb * L::kBM, kb, full(s));
        if (++s == L::kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }

  wgmma::regs_inc<kMmaRegs>();
  const int g = wg - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int row_in_wave = g * 64 + warp * 16 + lane / 4;  // and + 8: this thread's rows of a wave
  int s = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int mb, nb;
    tile_at(t, num_m, num_n, p.group_m, mb, nb);
    float acc[kWaves][64];
#pragma unroll
    for (int w = 0; w < kWaves; ++w)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[w][i] = 0.f;
    const float* w_scales = p.w_scales + int64_t(nb) * p.ld_w_scales;
    float ws_next = __ldg(w_scales);
    for (int kb = 0; kb < kbs; ++kb) {
      const float ws = ws_next;
      if (kb + 1 < kbs) ws_next = __ldg(w_scales + kb + 1);
      mbar::wait(full(s), phase);
      const uint32_t st = base + s * L::kStageBytes;
      const float* xs = reinterpret_cast<const float*>(smem + s * L::kStageBytes + L::kABytes + L::kBBytes);
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
        const float s0 = xs[w * 128 + row_in_wave] * ws, s1 = xs[w * 128 + row_in_wave + 8] * ws;
        float part[64];
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk)
          wgmma::mma_m64k32_e4m3_ss<128>(part, wgmma::desc_sw128(st + (w * 128 + g * 64) * kBK + kk * 32, 16, 1024),
                                         wgmma::desc_sw128(st + L::kABytes + kk * 32, 16, 1024), kk > 0);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_operand(part);
        if (w == kWaves - 1 && lane == 0) mbar::arrive(empty(s));
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          acc[w][4 * j + 0] = fmaf(part[4 * j + 0], s0, acc[w][4 * j + 0]);
          acc[w][4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[w][4 * j + 1]);
          acc[w][4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[w][4 * j + 2]);
          acc[w][4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[w][4 * j + 3]);
        }
      }
      if (++s == L::kStages) s = 0, phase ^= 1;
    }
    // acc[w][4j + e]: token mb * kBM + 128 w + row_in_wave (+ 8 for e >= 2), weight row
    // nb * 128 + 8 j + 2 (lane % 4) (+ 1 for odd e).
#pragma unroll
    for (int w = 0; w < kWaves; ++w) {
      const int r = mb * L::kBM + w * 128 + row_in_wave;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int col = nb * kBN + 8 * j + 2 * (lane % 4);
        if (col >= p.N) continue;
        if (r < p.T)
          *reinterpret_cast<__nv_bfloat162*>(p.out + int64_t(r) * p.ldo + col) =
              __floats2bfloat162_rn(acc[w][4 * j], acc[w][4 * j + 1]);
        if (r + 8 < p.T)
          *reinterpret_cast<__nv_bfloat162*>(p.out + int64_t(r + 8) * p.ldo + col) =
              __floats2bfloat162_rn(acc[w][4 * j + 2], acc[w][4 * j + 3]);
      }
    }
  }
}

template <int kWaves>
void launch(const Fp8GemmWgmmaArgs& a, cudaStream_t stream) {
  using L = Layout<kWaves>;
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(fp8_gemm_wgmma_kernel<kWaves>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    L::kSmemBytes));
    configured = true;
  }
  Params p;
  p.x_map = bytes_tensor_map_sw128(a.x, a.T, a.K, a.ldx, L::kBM);
  p.w_map = bytes_tensor_map_sw128(a.w, a.w_rows, a.K, a.ldw, kBN);
  p.xs_map = f32_tensor_map(a.x_scales, a.K / kBK, a.T, a.ld_x_scales * 4, L::kBM);
  p.w_scales = a.w_scales, p.ld_w_scales = a.ld_w_scales, p.out = a.out, p.ldo = a.ldo;
  p.T = a.T, p.N = a.N, p.K = a.K, p.group_m = std::max(1, a.group_m);
  int ctas = a.ctas;
  if (ctas <= 0) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, device));
  }
  const int tiles = (a.T + L::kBM - 1) / L::kBM * ((a.N + kBN - 1) / kBN);
  launch_pdl(fp8_gemm_wgmma_kernel<kWaves>, dim3(unsigned(std::min(ctas, tiles))), dim3(kThreads),
             size_t(L::kSmemBytes), stream, p);
}

}  // namespace

bool fp8_gemm_wgmma_fits(const Fp8GemmWgmmaArgs& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.T > 0 && a.N > 0 && a.K >= kBK && a.K % kBK == 0 && a.N % 16 == 0 && a.w_rows >= a.N &&
         a.ldx % 16 == 0 && a.ldw % 16 == 0 && a.ld_x_scales >= a.T && a.ld_x_scales % 4 == 0 &&
         a.ld_w_scales >= a.K / kBK && a.ldo % 2 == 0 && aligned(a.x) && aligned(a.w) && aligned(a.x_scales) &&
         (a.waves == 1 || a.waves == 2);
}

void fp8_gemm_wgmma(const Fp8GemmWgmmaArgs& a, cudaStream_t stream) {
  MLA_CHECK(fp8_gemm_wgmma_fits(a), "fp8_gemm_wgmma: T={} N={} K={} waves={} does not fit the kernel", a.T, a.N, a.K,
            a.waves);
  if (a.waves == 1) return launch<1>(a, stream);
  launch<2>(a, stream);
}

}  // namespace mlaserve::cuda
