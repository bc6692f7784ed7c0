// MLA decode attention kernels (see mla_decode.h): plan, attention, combine.
//
// Attention block: 8 warps, M = 16 * MT query rows, 64-key tiles of the paged cache brought in by
// cp.async into a 2-stage ring (each key row: 1152 contiguous bytes at its slot). Per tile:
//   S = Q K^T   [M, 64]: warps tiled MT (rows) x 8/MT (keys), A and B by ldmatrix from shared memory
//   softmax     row max across the key-warps through shared memory; P (bf16) to shared memory
//   O += P V    [M, 512]: each warp all M rows x 64 columns, V^T fragments by ldmatrix.trans from
//               the same tile (V is the first 512 columns of K), fp32 accumulators in registers.
// Shared rows are XOR-swizzled by 16-byte chunk (chunk ^ (row & 7)) so ldmatrix is conflict-free.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_decode.h"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kD = kMlaKvDim, kL = kMlaLatentDim, kBN = kMlaBlockKeys;
constexpr int kChunks = kD / 8;  // 16-byte chunks per cache row: 72
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kCombineThreads = kL / 4;

struct Job {
  int seq, row0, num_rows, num_tiles, num_keys, first_cta, num_splits, split_offset;
};
static_assert(sizeof(Job) == 8 * sizeof(int32_t));

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Byte offset of 16-byte chunk c of row r in a swizzled tile of `chunks` chunks a row (a multiple of 8).
__device__ __forceinline__ uint32_t swz(int r, int c, int chunks) { return uint32_t(r * chunks + (c ^ (r & 7))) * 16; }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
// c[4] += a[4] (16x16, row) * b[2] (16x8, col), BF16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Query token of row `row` (of a seq's n * H rows, query-major) and the keys it sees.
struct RowPlace {
  int token, head, visible;
};
__device__ __forceinline__ RowPlace place_row(const MlaDecodeParams& p, const Job& job, int r) {
  int rho = job.row0 + r, i = rho / p.num_heads;
  int q0 = p.query_start[job.seq], n = p.query_start[job.seq + 1] - q0;
  return {q0 + i, rho - i * p.num_heads, p.seq_lens[job.seq] - n + i + 1};
}

// ---- plan ------------------------------------------------------------------------------------
//
// Jobs are numbered seq-major (then by row0) and CTA c < P takes tiles [c * total / P,
// (c + 1) * total / P) of their concatenation, so everything about a job follows from its seq, its
// index in the seq, and the jobs and tiles before it: prefix sums over a block. Jobs from index
// max_jobs on are dropped (and their tiles not counted), as the serial loop did. A few blocks
// each compute the whole plan (that is cheap) and write their share of it (one SM's stores drain
// too slowly for thousands of jobs):
//   small batches (decode: seqs <= threads, a few jobs each): a thread a seq with its jobs in
//     registers; one prefix sum of jobs and tiles, one of splits (plan_small_batch).
//   any batch: windows of seqs and chunks of jobs through shared memory, swept twice
//     (plan_any_batch).

constexpr int kPlanThreads = 512, kPlanItems = 4, kPlanSpan = kPlanThreads * kPlanItems;
constexpr int kSmallJobs = 8;  // jobs of a seq at most on the small-batch path

// a / b (b != 0), in 32 bits when both fit: 64-bit division is a long software routine.
__device__ __forceinline__ int64_t div64(int64_t a, int64_t b) {
  return ((uint64_t(a) | uint64_t(b)) >> 32) == 0 ? int64_t(uint32_t(a) / uint32_t(b)) : a / b;
}

// x / d for a divisor d >= 1 that many threads share: a multiply-high by floor((2^32 - 1) / d)
// is at most 2 below the quotient, and the remainder corrects it.
struct FastDiv {
  uint32_t d, m;
  __device__ explicit FastDiv(uint32_t divisor) : d(divisor), m(0xffffffffu / divisor) {}
  __device__ __forceinline__ uint32_t operator()(uint32_t x) const {
    uint32_t q = __umulhi(x, m), r = x - q * d;
    if (r >= d) ++q, r -= d;
    if (r >= d) ++q;
    return q;
  }
};

// `total` tiles cut between P CTAs: CTA c starts at tile c * total / P. 32-bit math when every
// numerator fits (below about 2^32 / 133 tiles), 64-bit otherwise. start and cta_from need P > 0.
struct CtaCut {
  int64_t total;
  int P;
  bool narrow;
  FastDiv by_total, by_p;
  __device__ CtaCut(int64_t total_, int P_)
      : total(total_), P(P_),
        narrow(P_ > 0 && uint64_t(total_) >> 32 == 0 && uint64_t(total_) * (uint64_t(P_) + 1) >> 32 == 0),
        by_total(narrow ? uint32_t(total_) : 1u), by_p(narrow ? uint32_t(P_) : 1u) {}
  // First tile of CTA c.
  __device__ __forceinline__ int64_t start(int c) const {
    return narrow ? int64_t(by_p(uint32_t(c) * uint32_t(total))) : div64(c * total, P);
  }
  // Largest CTA whose range starts at or before tile g (the serial plan's formula, also for P <= 0).
  __device__ __forceinline__ int cta_of(int64_t g) const {
    return narrow ? int(by_total(uint32_t((g + 1) * P - 1))) : int(div64((g + 1) * P - 1, total));
  }
  // Smallest CTA whose range starts at or after tile g (P for g = total), 0 <= g <= total.
  __device__ __forceinline__ int cta_from(int64_t g) const {
    return narrow ? int(by_total(uint32_t(g * P + total - 1))) : int(div64(g * P + total - 1, total));
  }
};

// Jobs and tiles, summed together in one prefix sum.
struct JobsTiles {
  int jobs;
  int64_t tiles;
  __device__ JobsTiles operator+(const JobsTiles& o) const { return {jobs + o.jobs, tiles + o.tiles}; }
  __device__ JobsTiles operator-(const JobsTiles& o) const { return {jobs - o.jobs, tiles - o.tiles}; }
};
__device__ __forceinline__ int shfl_up(int v, int d) { return __shfl_up_sync(~0u, v, d); }
__device__ __forceinline__ int64_t shfl_up(int64_t v, int d) { return __shfl_up_sync(~0u, v, d); }
__device__ __forceinline__ JobsTiles shfl_up(JobsTiles v, int d) { return {shfl_up(v.jobs, d), shfl_up(v.tiles, d)}; }

// Exclusive prefix sum of one value a thread over the block; `total` gets the sum of all. Every
// thread must call it; it synchronizes the block (before returning, too).
template <typename T>
__device__ T block_exclusive_sum(T v, T& total) {
  __shared__ T warp_sums[kPlanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T incl = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    T y = shfl_up(incl, d);
    if (lane >= d) incl = incl + y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  T before{}, all{};
#pragma unroll
  for (int w = 0; w < kPlanThreads / 32; ++w) {
    T x = warp_sums[w];
    if (w < warp) before = before + x;
    all = all + x;
  }
  total = all;
  __syncthreads();  // warp_sums is free for the next call
  return before + (incl - v);
}

// Last i in [lo, hi) with a[i] <= x, for a sorted and a[lo] <= x.
template <typename T>
__device__ __forceinline__ int last_le(const T* a, int lo, int hi, T x) {
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (a[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Shared memory of the two paths.
union PlanSmem {
  struct {
    int qs[kPlanSpan + 1];     // window: query_start of its seqs and of the next
    int len[kPlanSpan];        // window: seq_lens
    int job[kPlanSpan + 1];    // window: first job of each seq, then the window's end
    int64_t tile[kPlanSpan];   // chunk: tiles before each job
  } any;
  int64_t tile[kPlanThreads * kSmallJobs];  // small batch: tiles before each job
};

// CTAs [P, num_ctas) get no work; num_jobs. Shared by `parts` blocks, this one `part`.
__device__ void plan_finish(const MlaDecodeSchedule& s, int P, int num_jobs, int part, int parts) {
  for (int c = P + part * kPlanThreads + int(threadIdx.x); c < s.num_ctas; c += parts * kPlanThreads)
    reinterpret_cast<int4*>(s.ctas)[c] = make_int4(0, 0, 0, 0);
  if (part == 0 && threadIdx.x == 0) *s.num_jobs = num_jobs;
}

// At most one CTA a tile, so that every CTA between a job's first and last has a share of it.
__device__ __forceinline__ int plan_ctas(int64_t total, int num_ctas) {
  return int(total < num_ctas ? total : int64_t(num_ctas));
}

// Thread t plans seq t. Every block of the grid computes the whole plan and writes its share
// (one SM's stores drain too slowly for thousands of jobs). Returns false, having written
// nothing, unless num_seqs <= kPlanThreads, num_heads > 0, every seq has at most kSmallJobs
// jobs and all of them fit in max_jobs: the same answer in every block.
__device__ bool plan_small_batch(const MlaDecodeParams& p, const MlaDecodeSchedule& s, PlanSmem& sm) {
  const int tid = threadIdx.x, H = p.num_heads, M = 16 * s.m_tiles;
  if (p.num_seqs > kPlanThreads || H <= 0) return false;
  int n = 0, len = 0;
  if (tid < p.num_seqs) {
    const int q0 = p.query_start[tid];
    n = p.query_start[tid + 1] - q0;
    len = p.seq_lens[tid];
  }
  const int rows = n * H, nj = rows > 0 ? (rows - 1) / M + 1 : 0;  // r0 = 0, M, ... < rows
  if (__syncthreads_or(nj > kSmallJobs)) return false;
  // Loops over a seq's jobs stop at the most any seq of the warp has (most have 1 or 2).
  const int warp_nj = __reduce_max_sync(~0u, nj);
  const FastDiv by_h(H);
  int keys[kSmallJobs], tiles[kSmallJobs];
  JobsTiles mine{nj, 0};
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
    const int r0 = j * M, nr = min(M, rows - r0);
    keys[j] = max(len - n + int(by_h(r0 + nr - 1)) + 1, 1);
    tiles[j] = j < nj ? (keys[j] + kBN - 1) / kBN : 0;
    mine.tiles += tiles[j];
  }
  JobsTiles all;
  const JobsTiles before = block_exclusive_sum(mine, all);
  if (all.jobs > max(s.max_jobs, 0)) return false;  // the serial plan stops part-way: see plan_any_batch
  const int P = plan_ctas(all.tiles, s.num_ctas);
  const CtaCut cut(all.tiles, P);
  int first[kSmallJobs], splits[kSmallJobs], my_splits = 0;
  int64_t b = before.tiles;
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
    if (j < nj) {
      first[j] = cut.cta_of(b);
      splits[j] = cut.cta_of(b + tiles[j] - 1) - first[j] + 1;
      my_splits += splits[j];
      sm.tile[before.jobs + j] = b;
      b += tiles[j];
    }
  }
  int all_splits;
  const int offset = block_exclusive_sum(my_splits, all_splits);  // (its barrier publishes sm.tile)
  const int part = blockIdx.x, parts = gridDim.x;
  // CTA c starts in the last job at or before its first tile.
  for (int c = part * kPlanThreads + tid; c < P; c += parts * kPlanThreads) {
    const int64_t g0 = cut.start(c), g1 = cut.start(c + 1);
    const int j = last_le(sm.tile, 0, all.jobs, g0);
    reinterpret_cast<int4*>(s.ctas)[c] = make_int4(j, int(g0 - sm.tile[j]), int(g1 - g0), 0);
  }
  plan_finish(s, P, all.jobs, part, parts);
  // This block's jobs [lo, hi) go out through shared memory, kStage at a time, so that a warp
  // stores contiguous bytes (a thread's own jobs lie 32 * nj bytes from the next thread's).
  constexpr int kStage = sizeof(PlanSmem) / sizeof(Job);
  int4* stage = reinterpret_cast<int4*>(&sm);  // a Job is two int4
  const int lo = int(int64_t(all.jobs) * part / parts), hi = int(int64_t(all.jobs) * (part + 1) / parts);
  for (int j0 = lo; j0 < hi; j0 += kStage) {
    const int count = min(kStage, hi - j0);
    __syncthreads();  // sm.tile, or the last round, has been read
    int o = offset;
#pragma unroll
    for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
      const int i = before.jobs + j - j0;
      if (j < nj && i >= 0 && i < count) {
        stage[2 * i] = make_int4(tid, j * M, min(M, rows - j * M), tiles[j]);
        stage[2 * i + 1] = make_int4(keys[j], first[j], splits[j], o);
      }
      o += j < nj ? splits[j] : 0;
    }
    __syncthreads();
    int4* out = reinterpret_cast<int4*>(s.jobs) + 2 * j0;
    for (int i = tid; i < 2 * count; i += kPlanThreads) out[i] = stage[i];
  }
  return true;
}

// Any batch, in two sweeps over windows of kPlanSpan seqs (their query starts, lengths and first
// job in shared memory) and, inside a window, chunks of kPlanSpan of its jobs (kPlanItems
// consecutive jobs a thread), carrying the running job, tile and split counts between them:
//   sweep 0 counts the tiles (P and every CTA boundary depend on the total);
//   sweep 1 writes each job (first CTA and split count from its first tile, split offset a prefix
//           sum of the counts), then each CTA whose first tile falls in the chunk.
// Every block of the grid sweeps the whole batch and writes its share of each chunk.
__device__ void plan_any_batch(const MlaDecodeParams& p, const MlaDecodeSchedule& s, PlanSmem& sm) {
  const int tid = threadIdx.x, S = p.num_seqs, H = p.num_heads, M = 16 * s.m_tiles;
  const int max_jobs = max(s.max_jobs, 0), part = blockIdx.x, parts = gridDim.x;
  int4* jobs = reinterpret_cast<int4*>(s.jobs);  // a Job is two int4
  int4* ctas = reinterpret_cast<int4*>(s.ctas);
  int* s_qs = sm.any.qs;
  int* s_len = sm.any.len;
  int* s_job = sm.any.job;
  int64_t* s_tile = sm.any.tile;
  int loaded = -1, win_jobs = 0;  // the window in shared memory, and its number of jobs
  CtaCut cut(0, 0);
  for (int sweep = 0; sweep < 2; ++sweep) {
    int job0 = 0;               // first job of the window
    int64_t tiles_before = 0;   // tiles of the jobs before the chunk
    int splits_before = 0;      // splits of the jobs before the chunk
    for (int w0 = 0; w0 < S && job0 < max_jobs; w0 += kPlanSpan) {
      const int nw = min(kPlanSpan, S - w0);
      if (w0 != loaded) {  // a batch of one window keeps it from sweep 0
        __syncthreads();   // readers of the last window are done
        for (int i = tid; i <= nw; i += kPlanThreads) s_qs[i] = p.query_start[w0 + i];
        for (int i = tid; i < nw; i += kPlanThreads) s_len[i] = p.seq_lens[w0 + i];
        __syncthreads();
        int count[kPlanItems], sum = 0;
#pragma unroll
        for (int i = 0; i < kPlanItems; ++i) {
          const int k = tid * kPlanItems + i, rows = k < nw ? (s_qs[k + 1] - s_qs[k]) * H : 0;
          count[i] = rows > 0 ? (rows - 1) / M + 1 : 0;  // r0 = 0, M, ... < rows
          sum += count[i];
        }
        int first = job0 + block_exclusive_sum(sum, win_jobs);
#pragma unroll
        for (int i = 0; i < kPlanItems; ++i) {
          const int k = tid * kPlanItems + i;
          if (k < nw) s_job[k] = first;
          first += count[i];
        }
        if (tid == 0) s_job[nw] = job0 + win_jobs;
        __syncthreads();
        loaded = w0;
      }
      const int jobs_end = min(job0 + win_jobs, max_jobs);
      for (int c0 = job0; c0 < jobs_end; c0 += kPlanSpan) {
        const int nc = min(kPlanSpan, jobs_end - c0);
        // This thread's jobs c0 + tid * kPlanItems + i: find the seq (k, in the window) of the
        // first by binary search; the next ones are in the same seq or (mostly) the next.
        int seq[kPlanItems], r0[kPlanItems], nr[kPlanItems], keys[kPlanItems], tiles[kPlanItems];
        int64_t sum = 0;
        int k = -1;
#pragma unroll
        for (int i = 0; i < kPlanItems; ++i) {
          const int jl = tid * kPlanItems + i, j = c0 + jl;
          tiles[i] = 0;
          if (jl >= nc) continue;
          if (k < 0) {
            k = last_le(s_job, 0, nw, j);
          } else if (s_job[k + 1] <= j) {
            ++k;
            if (s_job[k + 1] <= j) k = last_le(s_job, k + 1, nw, j);  // skip seqs without jobs
          }
          const int n = s_qs[k + 1] - s_qs[k], rows = n * H;
          seq[i] = w0 + k;
          r0[i] = (j - s_job[k]) * M;
          nr[i] = min(M, rows - r0[i]);
          keys[i] = max(s_len[k] - n + (r0[i] + nr[i] - 1) / H + 1, 1);
          tiles[i] = (keys[i] + kBN - 1) / kBN;
          sum += tiles[i];
        }
        int64_t chunk_tiles;
        const int64_t before = tiles_before + block_exclusive_sum(sum, chunk_tiles);
        if (sweep == 1) {
          int first[kPlanItems], splits[kPlanItems], split_sum = 0;
          int64_t b = before;
#pragma unroll
          for (int i = 0; i < kPlanItems; ++i) {
            const int jl = tid * kPlanItems + i;
            splits[i] = 0;
            if (jl >= nc) continue;
            first[i] = cut.cta_of(b);
            splits[i] = cut.cta_of(b + tiles[i] - 1) - first[i] + 1;
            split_sum += splits[i];
            s_tile[jl] = b;
            b += tiles[i];
          }
          int chunk_splits;
          // (its barrier also publishes s_tile to the CTA search below)
          int offset = splits_before + block_exclusive_sum(split_sum, chunk_splits);
          // This block's share of the chunk's jobs: [lo, hi).
          const int lo = int(int64_t(nc) * part / parts), hi = int(int64_t(nc) * (part + 1) / parts);
#pragma unroll
          for (int i = 0; i < kPlanItems; ++i) {
            const int jl = tid * kPlanItems + i, j = c0 + jl;
            if (jl < lo || jl >= hi) {
              offset += splits[i];
              continue;
            }
            jobs[2 * j] = make_int4(seq[i], r0[i], nr[i], tiles[i]);
            jobs[2 * j + 1] = make_int4(keys[i], first[i], splits[i], offset);
            offset += splits[i];
          }
          // The CTAs whose first tile g0 is in this chunk: each starts in the last job at or before g0.
          if (cut.P > 0) {
            const int c_end = cut.cta_from(tiles_before + chunk_tiles);
            const int c_begin = cut.cta_from(tiles_before) + part * kPlanThreads + tid;
            for (int c = c_begin; c < c_end; c += parts * kPlanThreads) {
              const int64_t g0 = cut.start(c), g1 = cut.start(c + 1);
              const int jl = last_le(s_tile, 0, nc, g0);
              ctas[c] = make_int4(c0 + jl, int(g0 - s_tile[jl]), int(g1 - g0), 0);
            }
          }
          splits_before += chunk_splits;
          __syncthreads();  // s_tile is read before the next chunk writes it
        }
        tiles_before += chunk_tiles;
      }
      job0 += win_jobs;
    }
    if (sweep == 0) {
      const int P = plan_ctas(tiles_before, s.num_ctas);
      cut = CtaCut(tiles_before, P);
      plan_finish(s, P, min(job0, max_jobs), part, parts);
    }
  }
}

__global__ void __launch_bounds__(kPlanThreads) mla_decode_plan_kernel(MlaDecodeParams p, MlaDecodeSchedule s) {
  __shared__ PlanSmem sm;
  if (!plan_small_batch(p, s, sm)) plan_any_batch(p, s, sm);
}

// ---- attention -------------------------------------------------------------------------------

template <int MT>
struct Smem {
  static constexpr int M = 16 * MT, WN = kWarps / MT;
  static constexpr size_t q = 0;                                  // [M, 576] bf16, swizzled
  static constexpr size_t kv = q + size_t(M) * kD * 2;            // [2][64, 576] bf16, swizzled
  static constexpr size_t p = kv + size_t(2) * kBN * kD * 2;      // [M, 64] bf16, swizzled
  static constexpr size_t red = p + size_t(M) * kBN * 2;          // [WN, M] f32: row max / row sum
  static constexpr size_t alpha = red + size_t(WN) * M * 4;       // [M] f32: rescale of O this tile
  static constexpr size_t row_m = alpha + size_t(M) * 4;          // [M] f32: final row max
  static constexpr size_t row_l = row_m + size_t(M) * 4;          // [M] f32: final row sum
  static constexpr size_t bytes = row_l + size_t(M) * 4;
};

template <int MT>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(MlaDecodeParams p, MlaDecodeSchedule s) {
  using SM = Smem<MT>;
  constexpr int M = SM::M, WN = SM::WN, KW = kBN / WN, NTS = KW / 8;  // S: warp = 16 rows x KW keys
  constexpr int NTO = kL / kWarps / 8;                                // O: warp = M rows x 8 n-tiles
  static_assert(NTS == 1 || NTS % 2 == 0, "key tiling");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_addr(smem + SM::q), sKV = smem_addr(smem + SM::kv), sP = smem_addr(smem + SM::p);
  float* s_red = reinterpret_cast<float*>(smem + SM::red);
  float* s_alpha = reinterpret_cast<float*>(smem + SM::alpha);
  float* s_row_m = reinterpret_cast<float*>(smem + SM::row_m);
  float* s_row_l = reinterpret_cast<float*>(smem + SM::row_l);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int warp_m = warp / WN, warp_n = warp % WN;
  const int4 cta = reinterpret_cast<const int4*>(s.ctas)[blockIdx.x];
  const int count = cta.z;
  if (count == 0) return;
  const Job* jobs = reinterpret_cast<const Job*>(s.jobs);
  const bf16* cache = static_cast<const bf16*>(p.cache);
  const bf16* q = static_cast<const bf16*>(p.q);
  const float scale_log2 = p.scale * 1.4426950408889634f;

  auto load_q = [&](const Job& job) {
    for (int idx = tid; idx < M * kChunks; idx += kThreads) {
      int r = idx / kChunks, c = idx - r * kChunks;
      bool valid = r < job.num_rows;
      const bf16* src = q;
      if (valid) {
        RowPlace rp = place_row(p, job, r);
        src = q + rp.token * p.q_stride_t + rp.head * p.q_stride_h + c * 8;
      }
      cp_async16(sQ + swz(r, c, kChunks), src, valid);
    }
  };
  // 4 threads a key row: the slot of this thread's key in tile `tl` of `jb` (-1 past the job's end).
  auto slot_of = [&](const Job& jb, int tl) {
    int key = tl * kBN + tid / 4;
    return key < jb.num_keys ? p.kv_indices[p.kv_start[jb.seq] + key] : -1;
  };
  // Each thread 18 of its row's 72 chunks; rows past the job's end are zero-filled so that
  // 0-probability columns never multiply garbage.
  auto load_kv = [&](int slot, int stage) {
    bool valid = slot >= 0;
    const bf16* src = valid ? cache + int64_t(slot) * kD : cache;
    uint32_t dst = sKV + stage * (kBN * kD * 2);
#pragma unroll
    for (int c = tid % 4; c < kChunks; c += 4) cp_async16(dst + swz(tid / 4, c, kChunks), src + c * 8, valid);
  };
  // The tile after next goes to L2 ahead of its cp.async: twice the bytes in flight without
  // the shared memory of a third stage (a row is 9 lines of 128 bytes).
  auto prefetch_kv = [&](int slot) {
    if (slot < 0) return;
    const char* row = reinterpret_cast<const char*>(cache + int64_t(slot) * kD);
    for (int l = tid % 4; l < kD * 2 / 128; l += 4) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + l * 128));
  };
  // The tile after (idx, jb, tl) in this CTA's run.
  auto advance = [&](int& idx, Job& jb, int& tl) {
    if (++tl == jb.num_tiles) jb = jobs[++idx], tl = 0;
  };
  static_assert(kThreads == 4 * kBN, "load_kv maps 4 threads to a key");

  // Keys visible to this thread's two S rows (warp_m * 16 + g and + 8) in the current job.
  auto visible_of = [&](const Job& job, int r) { return r < job.num_rows ? place_row(p, job, r).visible : 0; };

  int job_idx = cta.x, tile = cta.y;
  Job job = jobs[job_idx];
  int vis[2] = {visible_of(job, warp_m * 16 + g), visible_of(job, warp_m * 16 + g + 8)};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc_o[MT][NTO][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;

  load_q(job);
  load_kv(slot_of(job, tile), 0);
  cp_async_commit();
  int slot_next = -1;  // this thread's slot in the tile after the current one, loaded a tile early
  if (count > 1) {
    int i1 = job_idx, t1 = tile;
    Job j1 = job;
    advance(i1, j1, t1);
    slot_next = slot_of(j1, t1);
  }

  for (int n = 0; n < count; ++n) {
    const int stage = n & 1;
    const bool job_ends = tile + 1 == job.num_tiles || n + 1 == count;
    int next_idx = job_idx, next_tile = tile;
    Job next = job;
    int slot_after = -1;
    if (n + 1 < count) {
      advance(next_idx, next, next_tile);
      load_kv(slot_next, stage ^ 1);
      if (n + 2 < count) {
        int i2 = next_idx, t2 = next_tile;
        Job j2 = next;
        advance(i2, j2, t2);
        slot_after = slot_of(j2, t2);  // used after the S phase: its latency hides behind the MMAs
      }
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    // ---- S = Q K^T for rows warp_m*16.. and keys warp_n*KW.. of this tile
    const uint32_t sK = sKV + stage * (kBN * kD * 2);
    float acc_s[NTS][4];
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = 0.f;
#pragma unroll(MT == 1 ? 4 : 2)
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(sQ + swz(warp_m * 16 + (lane & 15), kk * 2 + (lane >> 4), kChunks), a[0], a[1], a[2], a[3]);
      if constexpr (NTS == 1) {
        uint32_t b0, b1;
        ldsm_x2(sK + swz(warp_n * KW + (lane & 7), kk * 2 + ((lane >> 3) & 1), kChunks), b0, b1);
        mma_bf16(acc_s[0], a, b0, b1);
      } else {
#pragma unroll
        for (int np = 0; np < NTS / 2; ++np) {
          uint32_t b[4];
          int mat = lane >> 3;
          ldsm_x4(sK + swz(warp_n * KW + np * 16 + (mat >> 1) * 8 + (lane & 7), kk * 2 + (mat & 1), kChunks), b[0],
                  b[1], b[2], b[3]);
          mma_bf16(acc_s[2 * np], a, b[0], b[1]);
          mma_bf16(acc_s[2 * np + 1], a, b[2], b[3]);
        }
      }
    }

    prefetch_kv(slot_after);
    slot_next = slot_after;

    // ---- online softmax (log2 domain); c[0..1] are row g, c[2..3] row g + 8
    const int key0 = tile * kBN + warp_n * KW;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key = key0 + nt * 8 + 2 * t4 + (e & 1);
        float v = key < vis[e >> 1] ? acc_s[nt][e] * scale_log2 : -INFINITY;
        acc_s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
      if (t4 == 0) s_red[warp_n * M + warp_m * 16 + g + 8 * h] = mx[h];
    }
    __syncthreads();
    float m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = warp_m * 16 + g + 8 * h;
      float tm = -INFINITY;
#pragma unroll
      for (int w = 0; w < WN; ++w) tm = fmaxf(tm, s_red[w * M + r]);
      float m_new = fmaxf(m_run[h], tm);
      m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: keep everything 0
      float alpha = exp2f(m_run[h] - m_use[h]);
      m_run[h] = m_new;
      l_run[h] *= alpha;
      if (warp_n == 0 && t4 == 0) s_alpha[r] = alpha;
    }
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt) {
      float p0 = exp2f(acc_s[nt][0] - m_use[0]), p1 = exp2f(acc_s[nt][1] - m_use[0]);
      float p2 = exp2f(acc_s[nt][2] - m_use[1]), p3 = exp2f(acc_s[nt][3] - m_use[1]);
      l_run[0] += p0 + p1;
      l_run[1] += p2 + p3;
      int col = warp_n * KW + nt * 8 + 2 * t4, r = warp_m * 16 + g;
      uint8_t* base = smem + SM::p;
      *reinterpret_cast<uint32_t*>(base + swz(r, col / 8, kBN / 8) + (col % 8) * 2) = pack_bf16(p0, p1);
      *reinterpret_cast<uint32_t*>(base + swz(r + 8, col / 8, kBN / 8) + (col % 8) * 2) = pack_bf16(p2, p3);
    }
    __syncthreads();

    // ---- O = O * alpha + P V for all M rows and this warp's 64 columns
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      float a0 = s_alpha[mi * 16 + g], a1 = s_alpha[mi * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < NTO; ++nt) {
        acc_o[mi][nt][0] *= a0;
        acc_o[mi][nt][1] *= a0;
        acc_o[mi][nt][2] *= a1;
        acc_o[mi][nt][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      uint32_t b[NTO][2];
#pragma unroll
      for (int np = 0; np < NTO / 2; ++np) {
        int mat = lane >> 3, key = ks * 16 + (mat & 1) * 8 + (lane & 7);
        int chunk = warp * NTO + np * 2 + (mat >> 1);
        ldsm_x4_t(sK + swz(key, chunk, kChunks), b[2 * np][0], b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        uint32_t a[4];
        ldsm_x4(sP + swz(mi * 16 + (lane & 15), ks * 2 + (lane >> 4), kBN / 8), a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int nt = 0; nt < NTO; ++nt) mma_bf16(acc_o[mi][nt], a, b[nt][0], b[nt][1]);
      }
    }

    if (job_ends) {
      // Row sums: the quad, then the key-warps through shared memory.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        if (t4 == 0) s_red[warp_n * M + warp_m * 16 + g + 8 * h] = l;
      }
      __syncthreads();
      if (warp_n == 0 && t4 == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int r = warp_m * 16 + g + 8 * h;
          float l = 0;
          for (int w = 0; w < WN; ++w) l += s_red[w * M + r];
          s_row_l[r] = l;
          s_row_m[r] = m_run[h];
        }
      }
      __syncthreads();
      const bool split = job.num_splits > 1;
      const int slot = job.split_offset + int(blockIdx.x) - job.first_cta;
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int r = mi * 16 + g + 8 * h;
          if (r >= job.num_rows) continue;
          float l = s_row_l[r], inv = l > 0 ? 1.f / l : 0.f;
          if (!split) {
            RowPlace rp = place_row(p, job, r);
            bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h;
#pragma unroll
            for (int nt = 0; nt < NTO; ++nt) {
              int col = warp * NTO * 8 + nt * 8 + 2 * t4;
              *reinterpret_cast<__nv_bfloat162*>(dst + col) =
                  __floats2bfloat162_rn(acc_o[mi][nt][2 * h] * inv, acc_o[mi][nt][2 * h + 1] * inv);
            }
          } else {
            float* dst = s.partial_o + (int64_t(slot) * M + r) * kL;
#pragma unroll
            for (int nt = 0; nt < NTO; ++nt) {
              int col = warp * NTO * 8 + nt * 8 + 2 * t4;
              *reinterpret_cast<float2*>(dst + col) =
                  make_float2(acc_o[mi][nt][2 * h] * inv, acc_o[mi][nt][2 * h + 1] * inv);
            }
            if (warp == 0 && t4 == 0)
              s.partial_lse[int64_t(slot) * M + r] = l > 0 ? s_row_m[r] + log2f(l) : -INFINITY;
          }
        }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;
      m_run[0] = m_run[1] = -INFINITY;
      l_run[0] = l_run[1] = 0.f;
      if (n + 1 < count) {
        // sQ is no longer read (the S phase is behind two barriers): bring the next job's queries.
        load_q(next);
        cp_async_commit();
        cp_async_wait<0>();
        vis[0] = visible_of(next, warp_m * 16 + g);
        vis[1] = visible_of(next, warp_m * 16 + g + 8);
      }
    }
    __syncthreads();  // the stage just read is refilled next iteration; sQ / s_red settle
    job = next;
    job_idx = next_idx;
    tile = next_tile;
  }
}

// ---- combine ---------------------------------------------------------------------------------

// One block per (job, row): out = sum_k w_k o_k / sum_k w_k with w_k = 2^(lse_k - max).
template <int MT>
__global__ void __launch_bounds__(kCombineThreads) mla_decode_combine_kernel(MlaDecodeParams p, MlaDecodeSchedule s) {
  constexpr int M = 16 * MT;
  const int j = blockIdx.x, r = blockIdx.y;
  if (j >= *s.num_jobs) return;
  const Job job = reinterpret_cast<const Job*>(s.jobs)[j];
  if (job.num_splits <= 1 || r >= job.num_rows) return;
  const float* lse = s.partial_lse + int64_t(job.split_offset) * M + r;
  float mx = -INFINITY;
#pragma unroll 8
  for (int k = 0; k < job.num_splits; ++k) mx = fmaxf(mx, lse[int64_t(k) * M]);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float sum = 0;
  const int col = threadIdx.x * 4;
#pragma unroll 4
  for (int k = 0; k < job.num_splits; ++k) {
    float lk = lse[int64_t(k) * M];
    if (lk == -INFINITY) continue;
    float w = exp2f(lk - mx);
    float4 o = *reinterpret_cast<const float4*>(s.partial_o + ((int64_t(job.split_offset) + k) * M + r) * kL + col);
    sum += w;
    acc.x += w * o.x, acc.y += w * o.y, acc.z += w * o.z, acc.w += w * o.w;
  }
  float inv = sum > 0 ? 1.f / sum : 0.f;
  RowPlace rp = place_row(p, job, r);
  bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h + col;
  reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

template <int MT>
void run_mt(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  constexpr size_t smem = Smem<MT>::bytes;
  static bool configured = false;  // per device in practice: one GPU per process here
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  mla_decode_kernel<MT><<<s.num_ctas, kThreads, smem, stream>>>(p, s);
  CUDA_CHECK_LAUNCH();
  mla_decode_combine_kernel<MT><<<dim3(s.max_jobs, 16 * MT), kCombineThreads, 0, stream>>>(p, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t mla_decode_smem_bytes(int m_tiles) { return m_tiles == 4 ? Smem<4>::bytes : Smem<1>::bytes; }

void launch_mla_decode_plan(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  // Blocks to share the stores of a small batch's jobs: one for every few hundred jobs.
  const int blocks = std::clamp(s.max_jobs / 256 + 1, 1, 8);
  mla_decode_plan_kernel<<<blocks, kPlanThreads, 0, stream>>>(p, s);
  CUDA_CHECK_LAUNCH();
}

void launch_mla_decode_run(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  if (s.m_tiles == 4)
    run_mt<4>(p, s, stream);
  else
    run_mt<1>(p, s, stream);
}

}  // namespace mlaserve::cuda
