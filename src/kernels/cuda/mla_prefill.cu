// MLA prefill attention: the tile configurations (the op runs the wgmma kernel of
// mla_prefill_wgmma.cu), and a flash-attention 2 style kernel on mma.sync (m16n8k16 BF16, fp32
// accumulators).
//
// One block = (query tile of kBM rows, head, seq). Each warp owns 16 * kMRep query rows. The Q tile
// stays in shared memory; key/value tiles of kBN rows are double-buffered with cp.async while the
// previous tile is multiplied. Per tile: S = Q·K^T (K row = [k_nope of the head | k_pe shared by all
// heads], 192 wide), causal mask, online softmax in fp32 (exp2 with the scale folded in), then
// O += P·V with P re-packed from the S accumulators as the A operand (no shared-memory round trip).
//
// Shared tiles are row-major with 16-byte chunks XOR-swizzled by (row & 7), so the 8 row addresses
// of every ldmatrix phase fall on distinct bank groups (rows are 384 or 256 bytes: without the
// swizzle all rows would start on bank 0).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_prefill.h"
#include "kernels/cuda/mla_prefill_tile.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace mma;
constexpr int kDqk = kMlaNope + kMlaRope;  // 192
constexpr int kDv = kMlaV;                 // 128

// Element offset of (row, col) in a swizzled row-major tile W elements wide; col is a multiple of 8.
template <int W>
__device__ __forceinline__ int swz(int row, int col) {
  return row * W + ((((col >> 3) ^ (row & 7))) << 3);
}

template <int kWarps, int kMRep, int kBN>
struct Tile {
  static constexpr int kBM = 16 * kMRep * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr size_t kSmem = size_t(kBM * kDqk + 2 * kBN * (kDqk + kDv)) * sizeof(bf16);
};

template <int kWarps, int kMRep, int kBN>
__global__ void __launch_bounds__(32 * kWarps, 1) mla_prefill_kernel(const MlaPrefillParams p) {
  pdl_wait_and_trigger();
  using Cfg = Tile<kWarps, kMRep, kBN>;
  constexpr int kBM = Cfg::kBM, kThreads = Cfg::kThreads;
  MlaPrefillTile tl;
  if (!mla_prefill_tile<kBM, kBN>(p, tl)) return;
  const int head = tl.head, q0 = tl.q0, m0 = tl.m0, rows = tl.rows, k_base = tl.k_base;
  const int prefix = tl.prefix, kv_end = tl.kv_end, num_tiles = tl.num_tiles;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBM, 192]
  bf16* sK = sQ + kBM * kDqk;                    // [2][kBN, 192]
  bf16* sV = sK + 2 * kBN * kDqk;                // [2][kBN, 128]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const bf16* qg = static_cast<const bf16*>(p.q) + int64_t(q0 + m0) * p.q_st0 + int64_t(head) * p.q_st1;
  for (int i = tid; i < kBM * (kDqk / 8); i += kThreads) {
    int r = i / (kDqk / 8), c = (i % (kDqk / 8)) * 8;
    bool ok = r < rows;
    cp_async16(smem_u32(sQ + swz<kDqk>(r, c)), qg + (ok ? int64_t(r) * p.q_st0 + c : 0), ok);
  }
  const bf16* kvg = static_cast<const bf16*>(p.kv) + int64_t(head) * p.kv_st1;
  const bf16* kpe = static_cast<const bf16*>(p.k_pe);
  auto load_kv = [&](int tile, int stage) {
    bf16* k_s = sK + stage * kBN * kDqk;
    bf16* v_s = sV + stage * kBN * kDv;
    for (int i = tid; i < kBN * (kDqk / 8); i += kThreads) {
      int r = i / (kDqk / 8), c = (i % (kDqk / 8)) * 8, key = tile * kBN + r;
      bool ok = key < kv_end;
      int64_t row = k_base + (ok ? key : 0);
      const bf16* src = c < kMlaNope ? kvg + row * p.kv_st0 + c : kpe + row * p.kpe_st0 + (c - kMlaNope);
      cp_async16(smem_u32(k_s + swz<kDqk>(r, c)), src, ok);
    }
    for (int i = tid; i < kBN * (kDv / 8); i += kThreads) {
      int r = i / (kDv / 8), c = (i % (kDv / 8)) * 8, key = tile * kBN + r;
      bool ok = key < kv_end;
      int64_t row = k_base + (ok ? key : 0);
      cp_async16(smem_u32(v_s + swz<kDv>(r, c)), kvg + row * p.kv_st0 + kMlaNope + c, ok);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  const int wrow = warp * 16 * kMRep;
  float acc_o[kMRep][kDv / 8][4];
  float m_i[kMRep][2], l_i[kMRep][2];
#pragma unroll
  for (int mr = 0; mr < kMRep; ++mr) {
#pragma unroll
    for (int d = 0; d < kDv / 8; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mr][d][e] = 0.0f;
    m_i[mr][0] = m_i[mr][1] = -INFINITY;
    l_i[mr][0] = l_i[mr][1] = 0.0f;
  }
  const float sl2 = p.scale * 1.4426950408889634f;  // scores in log2 units

  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait_all();
    __syncthreads();  // tile t landed for all; everyone is done with tile t-1's buffer
    if (t + 1 < num_tiles) load_kv(t + 1, (t + 1) & 1);
    cp_async_commit();
    const bf16* k_s = sK + (t & 1) * kBN * kDqk;
    const bf16* v_s = sV + (t & 1) * kBN * kDv;

    // S = Q · K^T over the 192-wide head dim.
    float acc_s[kMRep][kBN / 8][4];
#pragma unroll
    for (int mr = 0; mr < kMRep; ++mr)
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mr][n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      uint32_t a[kMRep][4];
#pragma unroll
      for (int mr = 0; mr < kMRep; ++mr)
        ldsm_x4(a[mr], smem_u32(sQ + swz<kDqk>(wrow + mr * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)));
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, smem_u32(k_s + swz<kDqk>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                             kk * 16 + ((lane >> 3) & 1) * 8)));
#pragma unroll
        for (int mr = 0; mr < kMRep; ++mr) {
          mma_bf16(acc_s[mr][2 * np], a[mr], b[0], b[1]);
          mma_bf16(acc_s[mr][2 * np + 1], a[mr], b[2], b[3]);
        }
      }
    }

    // Causal mask: key > prefix + row is hidden. Only tiles reaching past the tile's first query.
    const int n0 = t * kBN;
    if (n0 + kBN - 1 > prefix + m0) {
#pragma unroll
      for (int mr = 0; mr < kMRep; ++mr)
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int row = m0 + wrow + mr * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
            int key = n0 + n * 8 + (lane & 3) * 2 + (e & 1);
            if (key > prefix + row) acc_s[mr][n][e] = -INFINITY;
          }
    }

    // Online softmax. A thread holds rows g and g + 8 of each 16-row slab; a row's 4 owners are
    // one quad of lanes. The running max m_i (log2 units) moves only when a score passes it by more
    // than kLazy, so p <= 2^kLazy and O and l share one stale base exactly; most tiles then skip
    // the rescale of O (the branch is warp-uniform).
    constexpr float kLazy = 8.0f;
    float cand[kMRep][2];
    bool need = false;
#pragma unroll
    for (int mr = 0; mr < kMRep; ++mr) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n) mx = fmaxf(mx, fmaxf(acc_s[mr][n][2 * hh], acc_s[mr][n][2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        cand[mr][hh] = mx * sl2;
        need |= cand[mr][hh] > m_i[mr][hh] + kLazy;
      }
    }
    if (__any_sync(0xffffffff, need)) {
#pragma unroll
      for (int mr = 0; mr < kMRep; ++mr) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float m_new = fmaxf(m_i[mr][hh], cand[mr][hh]);
          float corr = m_new == -INFINITY ? 1.0f : fast_exp2(m_i[mr][hh] - m_new);
          m_i[mr][hh] = m_new;
          l_i[mr][hh] *= corr;
#pragma unroll
          for (int d = 0; d < kDv / 8; ++d) {
            acc_o[mr][d][2 * hh] *= corr;
            acc_o[mr][d][2 * hh + 1] *= corr;
          }
        }
      }
    }
#pragma unroll
    for (int mr = 0; mr < kMRep; ++mr) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float base = m_i[mr][hh] == -INFINITY ? 0.0f : m_i[mr][hh];
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float pv = fast_exp2(fmaf(acc_s[mr][n][2 * hh + e], sl2, -base));
            acc_s[mr][n][2 * hh + e] = pv;
            sum += pv;
          }
        l_i[mr][hh] += sum;
      }
    }

    // O += P · V; P's accumulator layout is exactly the A-operand layout of the next mma.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[kMRep][4];
#pragma unroll
      for (int mr = 0; mr < kMRep; ++mr) {
        a[mr][0] = pack_bf16(acc_s[mr][2 * kk][0], acc_s[mr][2 * kk][1]);
        a[mr][1] = pack_bf16(acc_s[mr][2 * kk][2], acc_s[mr][2 * kk][3]);
        a[mr][2] = pack_bf16(acc_s[mr][2 * kk + 1][0], acc_s[mr][2 * kk + 1][1]);
        a[mr][3] = pack_bf16(acc_s[mr][2 * kk + 1][2], acc_s[mr][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDv / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, smem_u32(v_s + swz<kDv>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                  dp * 16 + ((lane >> 4) << 3))));
#pragma unroll
        for (int mr = 0; mr < kMRep; ++mr) {
          mma_bf16(acc_o[mr][2 * dp], a[mr], b[0], b[1]);
          mma_bf16(acc_o[mr][2 * dp + 1], a[mr], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait_all();

  // O / l, rows of this tile only.
#pragma unroll
  for (int mr = 0; mr < kMRep; ++mr) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = l_i[mr][hh];
      l += __shfl_xor_sync(0xffffffff, l, 1);
      l += __shfl_xor_sync(0xffffffff, l, 2);
      float inv = l > 0.0f ? 1.0f / l : 0.0f;
      int r = wrow + mr * 16 + (lane >> 2) + hh * 8;
      if (r < rows) {
        bf16* o = static_cast<bf16*>(p.out) + int64_t(q0 + m0 + r) * p.o_st0 + int64_t(head) * p.o_st1 +
                  (lane & 3) * 2;
#pragma unroll
        for (int d = 0; d < kDv / 8; ++d)
          *reinterpret_cast<uint32_t*>(o + d * 8) =
              pack_bf16(acc_o[mr][d][2 * hh] * inv, acc_o[mr][d][2 * hh + 1] * inv);
      }
    }
  }
}

template <int kWarps, int kMRep, int kBN>
void launch_config(const MlaPrefillParams& p, cudaStream_t stream) {
  using Cfg = Tile<kWarps, kMRep, kBN>;
  auto kernel = mla_prefill_kernel<kWarps, kMRep, kBN>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kSmem)));
  dim3 grid((p.max_queries + Cfg::kBM - 1) / Cfg::kBM, p.num_heads, p.num_seqs);
  launch_pdl(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, p);
}

struct Config {
  const char* name;
  void (*launch)(const MlaPrefillParams&, cudaStream_t);
};

void launch_wgmma(const MlaPrefillParams& p, cudaStream_t stream) { launch_mla_prefill_wgmma(p, false, stream); }
void launch_wgmma_ping_pong(const MlaPrefillParams& p, cudaStream_t stream) {
  launch_mla_prefill_wgmma(p, true, stream);
}

// Config 0 is what the op runs (the fastest on an H200); the mma.sync kernel stays as a second
// implementation the tests hold the wgmma one against.
const Config kConfigs[] = {
    {"wgmma", launch_wgmma},
    {"wgmma ping-pong", launch_wgmma_ping_pong},
    {"mma.sync w8 m32 n32", launch_config<8, 2, 32>},
};

}  // namespace

int mla_prefill_num_configs() { return int(sizeof(kConfigs) / sizeof(kConfigs[0])); }
const char* mla_prefill_config_name(int config) { return kConfigs[config].name; }

void launch_mla_prefill(const MlaPrefillParams& p, cudaStream_t stream) {
  if (p.max_queries <= 0 || p.num_seqs <= 0 || p.num_heads <= 0) return;
  MLA_CHECK(p.config >= 0 && p.config < mla_prefill_num_configs(), "mla_prefill: no tile configuration {}", p.config);
  kConfigs[p.config].launch(p, stream);
}

}  // namespace mlaserve::cuda
