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
// the other's MMAs keep the tensor core busy. A finished tile goes out through shared memory: each
// warpgroup writes its rows there by stmatrix and one of its threads asks the TMA to store them, so
// the global writes run behind the next tile's MMAs (kv_b's short K-loop made 4-byte stores from
// registers the larger part of a tile).
#include <cooperative_groups.h>

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

namespace cg = cooperative_groups;

constexpr int kBK = 128, kBN = 128, kThreads = 384;
constexpr int kLoaderRegs = 40, kMmaRegs = 232;
static_assert(wgmma::regs_split_fits(2, kLoaderRegs, kMmaRegs), "the MMA warpgroups take what the loader gives");

template <int kWaves>
struct Layout {
  static constexpr int kBM = 128 * kWaves;
  static constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK;
  static constexpr int kSBytes = (kBM * 4 + 1023) / 1024 * 1024;  // x's scales; stages stay 1024-aligned
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes;
  // The output tile in bf16 as the output map's boxes: [wave][warpgroup][64-column half] of 64 rows x
  // 128 bytes in the 128-byte swizzle, 8 KB each.
  static constexpr int kCBytes = kBM * kBN * 2;
  static constexpr int kStages = std::min(8, (227 * 1024 - kCBytes - 2048) / kStageBytes);
  static constexpr int kC = kStages * kStageBytes;
  static constexpr int kBars = kC + kCBytes;  // full[s], then empty[s]
  static constexpr int kSmemBytes = kBars + 2 * kStages * 8 + 1024;  // + alignment
  static_assert(kSmemBytes <= 227 * 1024 && kStages >= 3, "a ring of 3 or more stages fits shared memory");
};

struct Params {
  CUtensorMap x_map, w_map, xs_map, out_map;
  const float* w_scales;
  int64_t ld_w_scales;
  int T, N, K, group_m;
  unsigned long long* trace;  // Fp8GemmWgmmaArgs::trace
  int trace_tiles;
};

__device__ __forceinline__ void stamp(const Params& p, int tile_iter, int what) {
  if (p.trace && tile_iter < p.trace_tiles)
    p.trace[(int64_t(blockIdx.x) * p.trace_tiles + tile_iter) * 4 + what] = clock64();
}

// Output tile t as (token tile, weight tile): group_m token tiles are walked a weight tile at a
// time, so the CTAs in flight share both operands' panels in L2.
__device__ __forceinline__ void tile_at(int t, int num_m, int num_n, int group_m, int& mb, int& nb) {
  const int group = group_m * num_n, first = t / group * group_m, in = t % group;
  const int gm = min(num_m - first, group_m);
  mb = first + in % gm, nb = in / gm;
}

template <int kWaves, int kCluster>
__global__ void __launch_bounds__(kThreads, 1) fp8_gemm_wgmma_kernel(const __grid_constant__ Params p) {
  using L = Layout<kWaves>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = mma::align_smem_1024(smem_raw);
  const uint32_t base = mma::smem_u32(smem);
  auto full = [&](int s) { return base + L::kBars + 8 * s; };
  auto empty = [&](int s) { return base + L::kBars + 8 * (L::kStages + s); };
  const int tid = threadIdx.x, wg = tid / 128;
  // In a cluster of two, both CTAs take the same token tile and neighbouring weight tiles: each
  // asks the TMA for half of x's tile, written into both, so a stage is refilled only once the
  // MMA warps of both CTAs are done with it.
  const uint32_t rank = kCluster > 1 ? cg::this_cluster().block_rank() : 0;
  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) mbar::init(full(s), 1), mbar::init(empty(s), 8 * kCluster);
    if constexpr (kCluster > 1) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    wgmma::fence_async_smem();  // the barriers as the TMA sees them
    tma::prefetch_map(&p.x_map), tma::prefetch_map(&p.w_map), tma::prefetch_map(&p.xs_map);
    tma::prefetch_map(&p.out_map);
  }
  if constexpr (kCluster > 1)
    cg::this_cluster().sync();  // the partner's barriers are initialized before any copy or arrive
  else
    __syncthreads();
  pdl_wait_and_trigger();
  const int num_m = (p.T + L::kBM - 1) / L::kBM, num_n = (p.N + kBN - 1) / kBN;
  const int num_nc = (num_n + kCluster - 1) / kCluster, tiles = num_m * num_nc;  // a cluster's tiles
  const int first = int(blockIdx.x) / kCluster, step = int(gridDim.x) / kCluster, kbs = p.K / kBK;

  if (wg == 0) {
    wgmma::regs_dec<kLoaderRegs>();
    if (tid == 0) {
      int s = 0, iter = 0;
      uint32_t phase = 0;
      for (int t = first; t < tiles; t += step, ++iter) {
        int mb, nc;
        tile_at(t, num_m, num_nc, p.group_m, mb, nc);
        const int nb = std::min(nc * kCluster + int(rank), num_n - 1);  // a missing partner tile: repeat the last
        for (int kb = 0; kb < kbs; ++kb) {
          mbar::wait(empty(s), phase ^ 1);  // a fresh barrier passes parity 1 at once
          if (kb == 0) stamp(p, iter, 0);
          const uint32_t st = base + s * L::kStageBytes;
          mbar::arrive_expect_tx(full(s), L::kABytes + L::kBBytes + L::kBM * 4);
          if constexpr (kCluster > 1)
            tma::load_2d_multicast(st + rank * (L::kABytes / kCluster), &p.x_map, kb * kBK,
                                   mb * L::kBM + int(rank) * (L::kBM / kCluster), full(s), (1 << kCluster) - 1);
          else
            tma::load_2d(st, &p.x_map, kb * kBK, mb * L::kBM, full(s));
          tma::load_2d(st + L::kABytes, &p.w_map, kb * kBK, nb * kBN, full(s));
          tma::load_2d(st + L::kABytes + L::kBBytes, &p.xs_map, mb * L::kBM, kb, full(s));
          if (++s == L::kStages) s = 0, phase ^= 1;
        }
      }
    }
  } else {
    wgmma::regs_inc<kMmaRegs>();
    const int g = wg - 1, warp = (tid / 32) % 4, lane = tid % 32;
    const int row_in_wave = g * 64 + warp * 16 + lane / 4;  // and + 8: this thread's rows of a wave
    const bool leader = tid % 128 == 0;  // asks for the warpgroup's stores
    const bool stamps = tid == 128;      // warpgroup 1's first thread
    int s = 0, iter = 0;
    uint32_t phase = 0;
    for (int t = first; t < tiles; t += step, ++iter) {
      int mb, nc;
      tile_at(t, num_m, num_nc, p.group_m, mb, nc);
      const int nb_own = nc * kCluster + int(rank), nb = std::min(nb_own, num_n - 1);
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
        if (stamps && kb == 0) stamp(p, iter, 1);
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
          if (w == kWaves - 1) {  // the stage is free here, and in a cluster in the partner too
            if (lane == 0) mbar::arrive(empty(s));
            if (kCluster > 1 && lane == 1) mbar::arrive_cluster(empty(s), rank ^ 1);
          }
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
      if (stamps) stamp(p, iter, 2);
      if (nb_own >= num_n) continue;  // the repeated tile of a cluster whose partner has none
      // acc[w][4j + e]: token mb * kBM + 128 w + row_in_wave (+ 8 for e >= 2), weight row
      // nb * 128 + 8 j + 2 (lane % 4) (+ 1 for odd e). Columns j, j + 1 and both row halves make
      // one stmatrix's four 8 x 8 matrices; lanes 8 q..8 q + 7 give matrix q's row addresses.
      if (leader) tma::store_wait_read<0>();  // the last tile's stores have read the staging
      wgmma::bar_sync(1 + g, 128);
      const int q = lane / 8, row = warp * 16 + (q & 1) * 8 + lane % 8;
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
          const uint32_t r[4] = {mma::pack_bf16(acc[w][4 * j], acc[w][4 * j + 1]),
                                 mma::pack_bf16(acc[w][4 * j + 2], acc[w][4 * j + 3]),
                                 mma::pack_bf16(acc[w][4 * j + 4], acc[w][4 * j + 5]),
                                 mma::pack_bf16(acc[w][4 * j + 6], acc[w][4 * j + 7])};
          const int box = (w * 2 + g) * 2 + j / 8, chunk = (j + q / 2) % 8;
          mma::stsm_x4(base + L::kC + box * 8192 + row * 128 + ((chunk ^ (row % 8)) * 16), r);
        }
      wgmma::fence_async_smem();  // the stmatrix writes as the TMA reads them
      wgmma::bar_sync(1 + g, 128);
      if (leader) {
#pragma unroll
        for (int w = 0; w < kWaves; ++w)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            tma::store_2d(&p.out_map, base + L::kC + ((w * 2 + g) * 2 + h) * 8192, (nb * kBN + h * 64) * 2,
                          mb * L::kBM + w * 128 + g * 64);
        tma::store_commit();
      }
      if (stamps) stamp(p, iter, 3);
    }
    if (leader) tma::store_wait<0>();  // written before the CTA (and its shared memory) is gone
  }
  // No CTA leaves while its partner may still copy into its shared memory or arrive on its barriers.
  if constexpr (kCluster > 1) cg::this_cluster().sync();
}

template <int kWaves, int kCluster>
void launch(const Fp8GemmWgmmaArgs& a, cudaStream_t stream) {
  using L = Layout<kWaves>;
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(fp8_gemm_wgmma_kernel<kWaves, kCluster>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
    configured = true;
  }
  Params p;
  p.x_map = bytes_tensor_map_sw128(a.x, a.T, a.K, a.ldx, L::kBM / kCluster);
  p.w_map = bytes_tensor_map_sw128(a.w, a.w_rows, a.K, a.ldw, kBN);
  p.xs_map = f32_tensor_map(a.x_scales, a.K / kBK, a.T, a.ld_x_scales * 4, L::kBM);
  p.out_map = bytes_tensor_map_sw128(a.out, a.T, a.N * 2, a.ldo * 2, 64);
  p.w_scales = a.w_scales, p.ld_w_scales = a.ld_w_scales;
  p.T = a.T, p.N = a.N, p.K = a.K, p.group_m = std::max(1, a.group_m);
  p.trace = a.trace, p.trace_tiles = a.trace_tiles;
  int ctas = a.ctas;
  if (ctas <= 0) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, device));
  }
  // Persistent clusters: only as many as the GPU holds at once (its GPCs may leave SMs a pair short).
  static int resident = [&] {
    if (kCluster == 1) return ctas;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(ctas / kCluster * kCluster)), cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = L::kSmemBytes;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kCluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, fp8_gemm_wgmma_kernel<kWaves, kCluster>, &cfg));
    return n * kCluster;
  }();
  const int num_nc = ((a.N + kBN - 1) / kBN + kCluster - 1) / kCluster;
  const int clusters = std::max(1, std::min(std::min(ctas, resident) / kCluster, (a.T + L::kBM - 1) / L::kBM * num_nc));
  launch_pdl_clusters(fp8_gemm_wgmma_kernel<kWaves, kCluster>, dim3(unsigned(clusters * kCluster)),
                      dim3(kCluster, 1, 1), dim3(kThreads), size_t(L::kSmemBytes), stream, p);
}

}  // namespace

bool fp8_gemm_wgmma_fits(const Fp8GemmWgmmaArgs& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.T > 0 && a.N > 0 && a.K >= kBK && a.K % kBK == 0 && a.N % 16 == 0 && a.w_rows >= a.N &&
         a.ldx % 16 == 0 && a.ldw % 16 == 0 && a.ld_x_scales >= a.T && a.ld_x_scales % 4 == 0 &&
         a.ld_w_scales >= a.K / kBK && a.N >= 64 && a.ldo >= a.N && a.ldo % 8 == 0 && aligned(a.x) &&
         aligned(a.out) && aligned(a.w) && aligned(a.x_scales) &&
         (a.waves == 1 || a.waves == 2) && (a.cluster == 1 || a.cluster == 2);
}

void fp8_gemm_wgmma(const Fp8GemmWgmmaArgs& a, cudaStream_t stream) {
  MLA_CHECK(fp8_gemm_wgmma_fits(a), "fp8_gemm_wgmma: T={} N={} K={} waves={} does not fit the kernel", a.T, a.N, a.K,
            a.waves);
  if (a.cluster == 2) return a.waves == 1 ? launch<1, 2>(a, stream) : launch<2, 2>(a, stream);
  if (a.waves == 1) return launch<1, 1>(a, stream);
  launch<2, 1>(a, stream);
}

}  // namespace mlaserve::cuda
