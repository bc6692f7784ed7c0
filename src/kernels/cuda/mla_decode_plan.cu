// MLA decode plan kernel (see mla_decode.h): cuts the batch into jobs of 64-key tiles and hands
// every persistent CTA an equal, contiguous run of tiles (or, where that is about as even, a whole
// job each), on the device so a graph can replay it.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_decode_device.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using mla::Job;
using mla::kBN;

// CTA c < P takes tiles [c * total / P, (c + 1) * total / P) of the jobs' concatenation (or job c
// whole: whole_jobs), so everything about a job follows from its seq, its index in the seq, and
// the jobs and tiles before it: prefix sums over a block. Jobs from index max_jobs on are dropped
// (and their tiles not counted), as the serial loop did. A few blocks each compute the whole plan
// (that is cheap) and write their share of it (one SM's stores drain too slowly for thousands of
// jobs):
//   small batches (decode: seqs <= threads, a few jobs each): a thread a seq with its jobs in
//     registers, numbered level-major: every seq's first job, then every seq's second, and so on.
//     A seq's jobs (its row groups: 128 heads are two jobs of 64 rows) read the same tiles; so
//     numbered, with the same tile count at every level, they fall on CTAs P / levels apart at the
//     same step of their runs, where the second read of a tile can find it in L2. Numbered
//     seq-major, mixed lengths put a seq's two reads of a tile tens of microseconds apart (the
//     bench's ctx~4096 batch: 19 tiles' steps at the median, by a host simulation), while about
//     100 MB stream through the 50 MB L2. (On an H200, whose DRAM keeps up, the two measured even.)
//     The CTAs then launch interleaved, CTA c of the cut as blockIdx (c % (P / levels)) * levels +
//     c / (P / levels), so that a seq's jobs run on neighbouring blocks, as seq-major put them: on
//     H100s, partners P / 2 blocks apart ran the uniform batch 8-31% slower (0.146 and 0.180
//     against 0.137 ms at 128 heads, B 64, ctx 4096), likely each tile fetched into both halves of
//     the L2. A CTA's record keeps c, from which a cut job's CTAs number their partials.
//     A prefix sum of jobs and tiles a level, one of splits a level (plan_small_batch).
//   any batch: seq-major (then by row0); windows of seqs and chunks of jobs through shared
//     memory, swept twice (plan_any_batch).

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

// P rounded down to a multiple of `levels` where that leaves some.
__device__ __forceinline__ int aligned_ctas(int P, int levels) {
  return levels > 1 && P >= levels ? P - P % levels : P;
}

// Whole jobs: CTA c of P = min(num_ctas, jobs) takes jobs [c * jobs / P, (c + 1) * jobs / P) whole
// (a CtaCut over jobs instead of tiles) when its longest run (`makespan` tiles) exceeds an even
// cut's share of the tiles by at most one tile for every 16 rows of the widest job. A job cut
// between CTAs costs its partials' stores and the combine kernel, which grow with its rows: at 128
// heads, B 64, ctx 4096 (64 rows a job) the combine took 15 us against 175 us of attention, about
// five tiles' time. Uniform lengths (benchmarks) meet it; mixed ones mostly not. The general path
// (plan_any_batch) takes whole jobs only when jobs <= num_ctas (runs of one).
// That cost is the partials' bytes over the whole GPU, so a batch of fewer jobs than CTAs gets that
// much less slack (one tile for 16 rows, times jobs / num_ctas, rounded up). At 128 heads, batch 1
// and 257 keys (two jobs of 5 tiles) the full slack gave whole jobs: 28.1 us of attention a layer
// on 2 SMs, against 9.2 + 4.3 us (combine) with the tiles cut over 10 CTAs (H200, FP8 cache).
__device__ __forceinline__ bool whole_jobs(int64_t makespan, int64_t tiles, int widest, int jobs, int num_ctas) {
  const int P = plan_ctas(tiles, num_ctas);
  const int64_t slack = (int64_t((widest + 15) / 16) * min(jobs, num_ctas) + num_ctas - 1) / num_ctas;
  return P > 0 && makespan - (tiles + P - 1) / P <= slack;
}

// The largest of one value a thread over the block. Every thread must call it.
template <typename T>
__device__ T block_max(T v) {
  __shared__ T warp_max[kPlanThreads / 32];
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    const T o = __shfl_xor_sync(~0u, v, d);
    v = o > v ? o : v;
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  T m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kPlanThreads / 32; ++w) m = warp_max[w] > m ? warp_max[w] : m;
  __syncthreads();  // warp_max is free for the next call
  return m;
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
  int keys[kSmallJobs], tiles[kSmallJobs], widest = 0;
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
    const int r0 = j * M, nr = min(M, rows - r0);
    keys[j] = max(len - n + int(by_h(r0 + nr - 1)) + 1, 1);
    tiles[j] = j < nj ? (keys[j] + kBN - 1) / kBN : 0;
    widest = max(widest, j < nj ? nr : 0);
  }
  // Level-major numbering: every seq's job j (index idx[j], tile_before[j] tiles before it) after
  // all seqs' jobs j - 1, one prefix sum a level.
  const int levels = block_max(nj);
  int idx[kSmallJobs];
  int64_t tile_before[kSmallJobs];
  JobsTiles all{0, 0};
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < levels; ++j) {
    JobsTiles level;
    const JobsTiles before = block_exclusive_sum(JobsTiles{j < nj ? 1 : 0, j < nj ? tiles[j] : 0}, level);
    idx[j] = all.jobs + before.jobs;
    tile_before[j] = all.tiles + before.tiles;
    all = all + level;
  }
  if (all.jobs > max(s.max_jobs, 0)) return false;  // the serial plan stops part-way: see plan_any_batch
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < warp_nj; ++j)
    if (j < nj) sm.tile[idx[j]] = tile_before[j];
  __syncthreads();  // sm.tile: the tiles before each job
  // Tiles of the jobs [j0, j1).
  auto tiles_of = [&](int j0, int j1) { return (j1 < all.jobs ? sm.tile[j1] : all.tiles) - sm.tile[j0]; };
  const CtaCut runs(all.jobs, min(all.jobs, s.num_ctas));  // whole jobs: CTA c's are [start(c), start(c + 1))
  int64_t makespan = 0;
  for (int c = tid; c < runs.P; c += kPlanThreads)
    makespan = max(makespan, tiles_of(int(runs.start(c)), int(runs.start(c + 1))));
  const bool whole = whole_jobs(block_max(makespan), all.tiles, block_max(widest), all.jobs, s.num_ctas);
  // A multiple of the levels, so that a seq's jobs start their runs at the same step (132 CTAs and
  // 8 levels would put every other level half a run behind).
  const int P = whole ? runs.P : aligned_ctas(plan_ctas(all.tiles, s.num_ctas), levels);
  const CtaCut cut(all.tiles, P);
  int first[kSmallJobs], splits[kSmallJobs], split_offset[kSmallJobs];
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
    if (j < nj) {
      first[j] = whole ? runs.cta_of(idx[j]) : cut.cta_of(tile_before[j]);
      splits[j] = whole ? 1 : cut.cta_of(tile_before[j] + tiles[j] - 1) - first[j] + 1;
    }
  }
  int splits_before = 0;  // the partials' slots in job order too
#pragma unroll
  for (int j = 0; j < kSmallJobs && j < levels; ++j) {
    int level;
    split_offset[j] = splits_before + block_exclusive_sum(j < nj ? splits[j] : 0, level);
    splits_before += level;
  }
  const int part = blockIdx.x, parts = gridDim.x;
  const int per_level = levels > 1 && P % levels == 0 ? P / levels : 0;  // 0: launched in order
  // CTA c starts in the last job at or before its first tile (whole jobs: its run's first).
  for (int c = part * kPlanThreads + tid; c < P; c += parts * kPlanThreads) {
    int4 run;
    if (whole) {
      const int j0 = int(runs.start(c)), j1 = int(runs.start(c + 1));
      run = make_int4(j0, 0, int(tiles_of(j0, j1)), c);
    } else {
      const int64_t g0 = cut.start(c), g1 = cut.start(c + 1);
      const int j = last_le(sm.tile, 0, all.jobs, g0);
      run = make_int4(j, int(g0 - sm.tile[j]), int(g1 - g0), c);
    }
    reinterpret_cast<int4*>(s.ctas)[per_level ? c % per_level * levels + c / per_level : c] = run;
  }
  plan_finish(s, P, all.jobs, part, parts);
  // This block's jobs [lo, hi) go out through shared memory, kStage at a time, so that a warp
  // stores contiguous bytes (a thread's own jobs lie a level apart).
  constexpr int kStage = sizeof(PlanSmem) / sizeof(Job);
  int4* stage = reinterpret_cast<int4*>(&sm);  // a Job is two int4
  const int lo = int(int64_t(all.jobs) * part / parts), hi = int(int64_t(all.jobs) * (part + 1) / parts);
  for (int j0 = lo; j0 < hi; j0 += kStage) {
    const int count = min(kStage, hi - j0);
    __syncthreads();  // sm.tile, or the last round, has been read
#pragma unroll
    for (int j = 0; j < kSmallJobs && j < warp_nj; ++j) {
      const int i = j < nj ? idx[j] - j0 : -1;
      if (i >= 0 && i < count) {
        stage[2 * i] = make_int4(tid, j * M, min(M, rows - j * M), tiles[j]);
        stage[2 * i + 1] = make_int4(keys[j], first[j], splits[j], split_offset[j]);
      }
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
//   sweep 0 counts the tiles (P and every CTA boundary depend on the total) and finds the longest job;
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
  bool whole = false;  // whole_jobs, decided after sweep 0
  int longest = 0, widest = 0;  // this thread's longest job (tiles) and widest (rows), sweep 0
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
          longest = max(longest, tiles[i]);
          widest = max(widest, nr[i]);
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
            first[i] = whole ? c0 + jl : cut.cta_of(b);
            splits[i] = whole ? 1 : cut.cta_of(b + tiles[i] - 1) - first[i] + 1;
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
            if (whole) ctas[j] = make_int4(j, 0, tiles[i], j);  // CTA j takes job j
            offset += splits[i];
          }
          // The CTAs whose first tile g0 is in this chunk: each starts in the last job at or before g0.
          if (!whole && cut.P > 0) {
            const int c_end = cut.cta_from(tiles_before + chunk_tiles);
            const int c_begin = cut.cta_from(tiles_before) + part * kPlanThreads + tid;
            for (int c = c_begin; c < c_end; c += parts * kPlanThreads) {
              const int64_t g0 = cut.start(c), g1 = cut.start(c + 1);
              const int jl = last_le(s_tile, 0, nc, g0);
              ctas[c] = make_int4(c0 + jl, int(g0 - s_tile[jl]), int(g1 - g0), c);
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
      const int num_jobs = min(job0, max_jobs);
      const int most = block_max(longest), wide = block_max(widest);
      whole = num_jobs > 0 && num_jobs <= s.num_ctas && whole_jobs(most, tiles_before, wide, num_jobs, s.num_ctas);
      const int P = whole ? num_jobs : plan_ctas(tiles_before, s.num_ctas);
      cut = CtaCut(tiles_before, P);
      plan_finish(s, P, num_jobs, part, parts);
    }
  }
}

__global__ void __launch_bounds__(kPlanThreads) mla_decode_plan_kernel(MlaDecodeParams p, MlaDecodeSchedule s) {
  pdl_wait_and_trigger();
  __shared__ PlanSmem sm;
  if (!plan_small_batch(p, s, sm)) plan_any_batch(p, s, sm);
}


}  // namespace

void launch_mla_decode_plan(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  // Blocks to share the stores of a small batch's jobs: one for every few hundred jobs.
  const int blocks = std::clamp(s.max_jobs / 256 + 1, 1, 8);
  launch_pdl(mla_decode_plan_kernel, blocks, kPlanThreads, 0, stream, p, s);
}

}  // namespace mlaserve::cuda
