// The sampler kernel (see sampling.h for the method). A row is one thread-block cluster: each
// block holds a slice of the vocabulary, and histograms are merged through distributed shared
// memory, so nothing goes to global memory but the token.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <climits>

#include "common/random.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling.h"

namespace mlaserve::cuda {

namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kMaxThreads = 512, kMaxWarps = kMaxThreads / 32, kMinThreads = 256;
constexpr int kMinCluster = 8, kMaxCluster = 16;  // 16 is beyond the portable size: asked for
constexpr int kBins = 2048, kDigitBits = 11;      // every histogram: the coarse one and the radix levels
constexpr int kMaxShare = kBins / kMinCluster;    // bins whose cluster-wide sums one block keeps
constexpr int kCap = 256;                         // candidates a block keeps (one coarse bin's)
constexpr unsigned kFull = 0xffffffffu;
constexpr double kFix = 70368744177664.0;  // 2^46: the fixed-point unit of probability mass
// Below the best logit by more than 32 temperatures, exp(-32) * 2^46 < 1: weight 0. The coarse
// bins cover that span only, so that outliers (masked tokens) do not make them wide.
constexpr float kWeightSpan = 32.0f;
static_assert(kMaxShare <= kMinThreads && kMaxShare % 32 == 0, "a block merges its share in one step");
static_assert(kCap <= kMinThreads, "the rank selection takes one candidate a thread");

// ---- Values combined across threads, blocks and the cluster (commutative and associative) ----

struct Sum {  // a count and a fixed-point mass
  uint32_t cnt;
  u64 mass;
  static __device__ Sum none() { return {0u, 0ull}; }
  __device__ Sum shfl(int o) const { return {__shfl_xor_sync(kFull, cnt, o), __shfl_xor_sync(kFull, mass, o)}; }
  __device__ void merge(const Sum& s) {
    cnt += s.cnt;
    mass += s.mass;
  }
};

struct KeyRange {  // the smallest and largest order key seen
  uint32_t lo, hi;
  static __device__ KeyRange none() { return {UINT_MAX, 0u}; }
  __device__ KeyRange shfl(int o) const { return {__shfl_xor_sync(kFull, lo, o), __shfl_xor_sync(kFull, hi, o)}; }
  __device__ void merge(const KeyRange& k) {
    lo = min(lo, k.lo);
    hi = max(hi, k.hi);
  }
};

struct Best {  // the arg-max (first index of the largest logit) and the smallest finite logit
  float v;
  int i;
  float lo;
  static __device__ Best none() { return {-INFINITY, -1, INFINITY}; }
  __device__ Best shfl(int o) const {
    return {__shfl_xor_sync(kFull, v, o), __shfl_xor_sync(kFull, i, o), __shfl_xor_sync(kFull, lo, o)};
  }
  __device__ void merge(const Best& b) {
    if (b.i >= 0 && (i < 0 || b.v > v || (b.v == v && b.i < i))) {
      v = b.v;
      i = b.i;
    }
    lo = fminf(lo, b.lo);
  }
};

// ---- Descents: what is looked for, and what a histogram gives back ----

enum Mode { kByCount, kByMassAtLeast, kByMassAbove };

// The first position of the descending order where the count reaches `count` (kByCount) or the
// prefix mass reaches (>=) or passes (>) `mass`.
struct Target {
  Mode mode;
  uint32_t count;
  u64 mass;
  __device__ bool hit(uint32_t c, u64 m) const {
    return mode == kByCount ? c >= count : mode == kByMassAtLeast ? m >= mass : m > mass;
  }
};

// The bin where a target falls: what it holds and what precedes it in the order. reached is
// false when the target lies past the end; the bin is then the last non-empty one.
struct Pick {
  uint32_t bin, cnt, count_above;
  u64 mass, mass_above;
  bool reached;
};

// The element at a position of the descending order: all keys above `key` (count_above of
// them, mass_above) plus the first m of the elements equal to `key` (each of mass w).
struct Found {
  uint32_t key, count_above, m;
  u64 mass_above, w;
  __device__ uint32_t position() const { return count_above + m; }
  __device__ u64 prefix_mass() const { return mass_above + u64(m) * w; }
};

// ---- Shared memory ----

// The cluster-wide sums of a block's share of a histogram, bins [rank * share, (rank + 1) * share).
struct Share {
  uint32_t cnt[kMaxShare];
  u64 mass[kMaxShare];
  uint32_t total_cnt;
  u64 total_mass;
};

// This block's elements of one coarse bin. Past kCap (n > kCap) the list is not kept, and the
// block's passes go over its slice again instead.
struct Cands {
  float x[kCap];
  uint32_t index[kCap];
  u64 w[kCap];
  uint32_t n, bin;
};

struct Smem {
  uint32_t cnt[kBins];  // this block's histogram
  u64 mass[kBins];
  Share coarse, fine;  // this block's share of the coarse histogram (kept) and of a radix level's
  uint32_t pick_cnt[kMaxShare];  // select's copy of the share it walks
  u64 pick_mass[kMaxShare];
  Cands cand;
  Sum minp;       // this block's min-p sums from the coarse pass
  Sum totals[2];  // the row's: every element, and min-p
  Pick pick;
  uint32_t warp_cnt[kMaxWarps];
  int found;
  alignas(16) unsigned char part[kMaxWarps][16];  // block_reduce
  alignas(16) unsigned char slot[2][16];          // cluster_combine: this block's value
  alignas(16) unsigned char result[16];
};

// ---- The row and this block's part of it ----

struct Row {
  const float* logits;
  int begin, end;  // this block's slice
  float temperature;
  float max_logit, scale;  // coarse bins: (max_logit - x) * scale
  double max_scaled;       // double(max_logit / temperature), as the reference's `mx`
};

// The block's shared memory, at file scope so that every function knows it is shared.
__shared__ Smem sm;

struct Ctx {
  cg::cluster_group cluster;
  int rank, size, row;           // this block in the row's cluster
  int tid, lane, warp, nwarps;   // this thread in the block
  unsigned phase;                // cluster_combine's slot
  Row r;
};

// Larger logit <=> larger key; -0 and +0 are one key, as they compare equal.
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t b = x == 0.0f ? 0u : __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// exp(l / T - mx) as the reference computes it (float division, double exp), in fixed point.
__device__ __forceinline__ double weight(const Row& r, float x) {
  return exp(double(x / r.temperature) - r.max_scaled);
}
__device__ __forceinline__ u64 weight_fix(const Row& r, float x) { return u64(weight(r, x) * kFix); }

// The coarse bin: equal widths of logit below the best one, larger logits in higher bins as with
// radix digits; bin 0 also takes the far tail. Non-decreasing in x (rounding is monotone), so a
// bin is a run of the descending order, as a radix bin is; unlike the leading bits of the key,
// it spreads the bulk of a row over many bins.
__device__ __forceinline__ uint32_t coarse_digit(const Row& r, float x) {
  float t = (r.max_logit - x) * r.scale;
  return !(t > 0.0f) ? kBins - 1u : t < float(kBins - 1) ? kBins - 1u - uint32_t(t) : 0u;
}

// ---- Reductions ----

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

template <class T>
__device__ T warp_reduce(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v.merge(v.shfl(o));
  return v;
}

// Every thread gets the block's combined value.
template <class T>
__device__ T block_reduce(Ctx& c, T v) {
  static_assert(sizeof(T) <= 16, "a part slot is 16 bytes");
  v = warp_reduce(v);
  T* part = reinterpret_cast<T*>(sm.part);
  if (c.lane == 0) part[c.warp] = v;
  __syncthreads();
  T all = part[0];
  for (int w = 1; w < c.nwarps; ++w) all.merge(part[w]);
  __syncthreads();  // `part` is free again
  return all;
}

// Combines one value a block (the same in all its threads) over the blocks of rank < upto; every
// thread gets the result. The slot alternates: a peer may still read the last one while this
// block writes the next.
template <class T>
__device__ T cluster_combine(Ctx& c, const T& mine, int upto) {
  T* slot = reinterpret_cast<T*>(sm.slot[c.phase++ & 1u]);
  T* result = reinterpret_cast<T*>(sm.result);
  if (c.tid == 0) *slot = mine;
  c.cluster.sync();
  if (c.warp == 0) {
    T v = c.lane < upto ? *c.cluster.map_shared_rank(slot, c.lane) : T::none();
    v = warp_reduce(v);
    if (c.lane == 0) *result = v;
  }
  __syncthreads();
  return *result;
}

template <class T>
__device__ T cluster_reduce(Ctx& c, T v) {
  return cluster_combine(c, block_reduce(c, v), c.size);
}

// ---- Passes over this block's slice or candidates ----

// Calls f(valid, i, x) over this block's slice with kLoads loads in flight per thread. Whole warps
// call f together (valid is false past the end), so f may use warp collectives.
template <int kLoads, class F>
__device__ void for_each_logit(const Ctx& c, F&& f) {
  const int stride = int(blockDim.x);
  for (int i0 = c.r.begin + c.warp * 32; i0 < c.r.end; i0 += kLoads * stride) {
    float x[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      int i = i0 + u * stride + c.lane;
      x[u] = i < c.r.end ? __ldg(c.r.logits + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      int i = i0 + u * stride + c.lane;
      if (i0 + u * stride < c.r.end) f(i < c.r.end, i, x[u]);
    }
  }
}

// Calls f(valid, key, index, weight) for this block's elements of the gathered coarse bin, from
// the list or, past its capacity, from the slice (the weight is 0 unless asked for).
template <bool kWeights, class F>
__device__ void for_each_cand(const Ctx& c, F&& f) {
  const Cands& cd = sm.cand;
  const int n = int(cd.n);
  if (n <= kCap) {
    for (int j0 = c.warp * 32; j0 < n; j0 += int(blockDim.x)) {
      int j = j0 + c.lane;
      bool valid = j < n;
      f(valid, valid ? order_key(cd.x[j]) : 0u, valid ? int(cd.index[j]) : 0, valid && kWeights ? cd.w[j] : 0ull);
    }
  } else {
    for_each_logit<2>(c, [&](bool valid, int i, float x) {
      valid = valid && coarse_digit(c.r, x) == cd.bin;
      f(valid, order_key(x), i, valid && kWeights ? weight_fix(c.r, x) : 0ull);
    });
  }
}

__device__ void clear_hist(Ctx& c) {
  for (int i = c.tid; i < kBins; i += int(blockDim.x)) {
    sm.cnt[i] = 0;
    sm.mass[i] = 0;
  }
  __syncthreads();
}

// mass += w from two native 32-bit shared atomics (a 64-bit one is a compare-and-swap loop): the
// add that wraps the low word carries into the high one, so the sum is exact once all are done.
__device__ __forceinline__ void add_mass(u64& mass, u64 w) {
  uint32_t* word = reinterpret_cast<uint32_t*>(&mass);
  const uint32_t lo = uint32_t(w), old = atomicAdd(&word[0], lo);
  const uint32_t hi = uint32_t(w >> 32) + (old + lo < old ? 1u : 0u);
  if (hi) atomicAdd(&word[1], hi);
}

// Adds one element per lane (where valid) to bin d of this block's histogram; the whole warp
// calls it. A warp whose elements share one bin (ties, the far tail) adds once, as atomics on
// one shared address serialize.
__device__ void hist_add(Ctx& c, bool valid, uint32_t d, u64 w) {
  const unsigned lanes = __ballot_sync(kFull, valid);
  if (!lanes) return;
  const int first = __ffs(lanes) - 1;
  const uint32_t d0 = __shfl_sync(kFull, d, first);
  if (__all_sync(kFull, !valid || d == d0)) {
    u64 m = warp_sum(valid ? w : 0ull);
    if (c.lane == first) {
      atomicAdd(&sm.cnt[d0], uint32_t(__popc(lanes)));
      if (m) add_mass(sm.mass[d0], m);
    }
  } else if (valid) {
    atomicAdd(&sm.cnt[d], 1u);
    if (w) add_mass(sm.mass[d], w);
  }
}

// Sums every block's histogram into the blocks' shares. Starts once every block's histogram is
// complete and ends once every share is, so both syncs are needed.
__device__ void merge(Ctx& c, Share& share) {
  c.cluster.sync();
  const int n = kBins / c.size, base = c.rank * n;
  Sum s = Sum::none();
  if (c.tid < n) {
#pragma unroll 4
    for (int q = 0; q < kMaxCluster; ++q) {
      if (q < c.size) {
        const Smem* peer = c.cluster.map_shared_rank(&sm, q);
        s.cnt += peer->cnt[base + c.tid];
        s.mass += peer->mass[base + c.tid];
      }
    }
    share.cnt[c.tid] = s.cnt;
    share.mass[c.tid] = s.mass;
  }
  s = block_reduce(c, s);
  if (c.tid == 0) {
    share.total_cnt = s.cnt;
    share.total_mass = s.mass;
  }
  c.cluster.sync();
}

// ---- Finding the bin of a target ----

// In one warp: the first of n bins, in the order get(0), get(1), ..., where the running count
// and mass (from count_above, mass_above) hit the target, else the last non-empty one. Lane l
// sums bins [l * per, (l + 1) * per); a warp scan finds the lane whose range is crossed, and that
// lane walks its bins. The result is in every lane; bin is the position in the get order.
template <class Get>
__device__ Pick warp_find(int lane, int n, Get get, const Target& t, uint32_t count_above, u64 mass_above) {
  const int per = (n + 31) / 32, lo = min(n, lane * per), hi = min(n, lo + per);
  Sum mine = Sum::none();
  for (int j = lo; j < hi; ++j) mine.merge(get(j));
  uint32_t ic = mine.cnt;
  u64 im = mine.mass;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    uint32_t c = __shfl_up_sync(kFull, ic, o);
    u64 m = __shfl_up_sync(kFull, im, o);
    if (lane >= o) {
      ic += c;
      im += m;
    }
  }
  // Only a non-empty bin can hold the position (a zero target is "reached" by empty bins).
  const unsigned hits = __ballot_sync(kFull, mine.cnt > 0 && t.hit(count_above + ic, mass_above + im));
  const unsigned nonempty = __ballot_sync(kFull, mine.cnt > 0);
  const bool reach = hits != 0;
  const int owner = reach ? __ffs(hits) - 1 : nonempty ? 31 - __clz(nonempty) : 0;
  Pick p{uint32_t(lo), 0u, 0u, 0ull, 0ull, reach};
  if (lane == owner) {
    uint32_t c = count_above + ic - mine.cnt;
    u64 m = mass_above + im - mine.mass;
    for (int j = lo; j < hi; ++j) {
      Sum b = get(j);
      if (b.cnt > 0 && (!reach || t.hit(c + b.cnt, m + b.mass))) {
        p = {uint32_t(j), b.cnt, c, b.mass, m, reach};
        if (reach) break;
      }
      c += b.cnt;
      m += b.mass;
    }
  }
  p.bin = __shfl_sync(kFull, p.bin, owner);
  p.cnt = __shfl_sync(kFull, p.cnt, owner);
  p.count_above = __shfl_sync(kFull, p.count_above, owner);
  p.mass = __shfl_sync(kFull, p.mass, owner);
  p.mass_above = __shfl_sync(kFull, p.mass_above, owner);
  return p;
}

// The bin of a merged histogram (`share` in every block) where the target falls, after
// count_above elements of mass_above. Warp 0 reads the shares' totals (the last rank holds the
// highest bins, which come first in the order), then walks the one share that holds the target.
__device__ Pick select(Ctx& c, Share& share, const Target& t, uint32_t count_above, u64 mass_above) {
  if (c.warp == 0) {
    auto total = [&](int j) {
      const Share* s = c.cluster.map_shared_rank(&share, c.size - 1 - j);
      return Sum{s->total_cnt, s->total_mass};
    };
    const Pick range = warp_find(c.lane, c.size, total, t, count_above, mass_above);
    const int owner = c.size - 1 - int(range.bin), n = kBins / c.size;
    const Share* s = c.cluster.map_shared_rank(&share, owner);
    constexpr int kPerLane = kMaxShare / 32;
    uint32_t cnt[kPerLane];
    u64 mass[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {  // every remote load in flight before the first store
      const int j = k * 32 + c.lane;
      cnt[k] = j < n ? s->cnt[j] : 0u;
      mass[k] = j < n ? s->mass[j] : 0ull;
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      sm.pick_cnt[k * 32 + c.lane] = cnt[k];
      sm.pick_mass[k * 32 + c.lane] = mass[k];
    }
    __syncwarp();
    auto bin = [&](int j) { return Sum{sm.pick_cnt[n - 1 - j], sm.pick_mass[n - 1 - j]}; };
    Pick p = warp_find(c.lane, n, bin, t, range.count_above, range.mass_above);
    if (c.lane == 0) {
      p.bin = uint32_t(owner * n + (n - 1 - int(p.bin)));
      p.reached = range.reached;
      sm.pick = p;
    }
  }
  __syncthreads();
  Pick p = sm.pick;
  __syncthreads();  // the next select may write sm.pick
  return p;
}

// Collects this block's elements of coarse bin `bin` and returns the cluster-wide range of their
// keys.
__device__ KeyRange gather(Ctx& c, uint32_t bin) {
  Cands& cd = sm.cand;
  if (c.tid == 0) {
    cd.n = 0;
    cd.bin = bin;
  }
  __syncthreads();
  KeyRange keys = KeyRange::none();
  for_each_logit<8>(c, [&](bool valid, int i, float x) {
    const bool in = valid && coarse_digit(c.r, x) == bin;
    const unsigned lanes = __ballot_sync(kFull, in);
    if (!lanes) return;
    const int first = __ffs(lanes) - 1;
    uint32_t at = 0;
    if (c.lane == first) at = atomicAdd(&cd.n, uint32_t(__popc(lanes)));
    at = __shfl_sync(kFull, at, first) + __popc(lanes & ((1u << c.lane) - 1u));
    if (in) {
      const uint32_t k = order_key(x);
      keys.merge({k, k});
      if (at < kCap) {
        cd.x[at] = x;
        cd.index[at] = uint32_t(i);
      }
    }
  });
  keys = block_reduce(c, keys);  // its syncs also complete the list
  for (int j = c.tid; j < min(int(cd.n), kCap); j += int(blockDim.x)) cd.w[j] = weight_fix(c.r, cd.x[j]);
  return cluster_combine(c, keys, c.size);
}

// The element at the target: the coarse bin, then radix levels over the bits that vary among
// the keys in that bin (none when they are all equal), 11 bits at a time.
// Not inlined: one copy of its code serves its four call sites.
__device__ __noinline__ Found descend(Ctx& c, const Target& t) {
  Pick p = select(c, sm.coarse, t, 0, 0);
  const KeyRange keys = gather(c, p.bin);
  const int bits = keys.lo == keys.hi ? 0 : 32 - __clz(keys.lo ^ keys.hi);
  uint32_t pmask = bits == 32 ? 0u : ~0u << bits, prefix = keys.lo & pmask;
  for (int done = 0; done < bits; done += kDigitBits) {
    const int shift = max(0, bits - done - kDigitBits);
    const uint32_t dmask = (1u << (bits - done - shift)) - 1u;
    clear_hist(c);
    for_each_cand<true>(c, [&](bool valid, uint32_t key, int, u64 w) {
      hist_add(c, valid && (key & pmask) == prefix, (key >> shift) & dmask, w);
    });
    merge(c, sm.fine);
    const bool reached = p.reached;
    p = select(c, sm.fine, t, p.count_above, p.mass_above);
    p.reached = p.reached && reached;
    prefix |= p.bin << shift;
    pmask |= dmask << shift;
  }
  Found f;
  f.key = prefix;
  f.count_above = p.count_above;
  f.mass_above = p.mass_above;
  f.w = p.cnt ? p.mass / p.cnt : 0;  // equal keys have equal weights: exact
  int64_t m;
  if (!p.reached) {
    m = p.cnt;
  } else if (t.mode == kByCount) {
    m = int64_t(t.count) - p.count_above;
  } else if (f.w == 0 || t.mass < p.mass_above) {
    m = 1;
  } else {
    u64 need = t.mass - p.mass_above;
    m = t.mode == kByMassAtLeast ? int64_t((need + f.w - 1) / f.w) : int64_t(need / f.w + 1);
  }
  f.m = uint32_t(m < 1 ? 1 : m > int64_t(p.cnt) ? int64_t(p.cnt) : m);
  return f;
}

// The j-th (1-based) index, in index order, of this block's elements whose key is `key`, written
// to *out by the thread that finds it.
__device__ void write_nth_here(Ctx& c, uint32_t key, uint32_t j, int32_t* out) {
  const Cands& cd = sm.cand;
  if (cd.n <= kCap) {  // rank among the list's matches
    const int n = int(cd.n);
    for (int a = c.tid; a < n; a += int(blockDim.x)) {
      if (order_key(cd.x[a]) != key) continue;
      uint32_t before = 0;
      for (int b = 0; b < n; ++b) before += order_key(cd.x[b]) == key && cd.index[b] < cd.index[a];
      if (before == j - 1) *out = int32_t(cd.index[a]);
    }
    return;
  }
  // The slice, one block-wide chunk at a time.
  if (c.tid == 0) sm.found = 0;
  uint32_t base = 0;
  for (int s = c.r.begin; s < c.r.end; s += int(blockDim.x)) {
    const int i = s + c.tid;
    const bool match = i < c.r.end && order_key(c.r.logits[i]) == key;
    const unsigned ball = __ballot_sync(kFull, match);
    if (c.lane == 0) sm.warp_cnt[c.warp] = uint32_t(__popc(ball));
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (int w = 0; w < c.nwarps; ++w) {
      before += w < c.warp ? sm.warp_cnt[w] : 0u;
      total += sm.warp_cnt[w];
    }
    if (match && base + before + uint32_t(__popc(ball & ((1u << c.lane) - 1u))) == j - 1) {
      *out = i;
      sm.found = 1;
    }
    base += total;
    __syncthreads();
    if (sm.found) break;
  }
}

// The m-th (1-based) index, in index order, whose key is `key` (all in the gathered bin): the
// blocks hold the row in index order, so the block where the running count passes m has it.
__device__ void write_nth(Ctx& c, uint32_t key, uint32_t m, int32_t* out) {
  Sum mine = Sum::none();
  for_each_cand<false>(c, [&](bool valid, uint32_t k, int, u64) { mine.cnt += valid && k == key; });
  const uint32_t here = block_reduce(c, mine).cnt;
  const uint32_t before = cluster_combine(c, Sum{here, 0ull}, c.rank).cnt;
  if (before < m && m <= before + here) write_nth_here(c, key, m - before, out);
}

// ---- The passes of a row ----

__device__ Best max_pass(Ctx& c) {
  Best b = Best::none();
  for_each_logit<8>(c, [&](bool valid, int i, float x) {
    if (!valid) return;
    if (b.i < 0 || x > b.v) {
      b.v = x;
      b.i = i;
    }
    if (fabsf(x) < INFINITY) b.lo = fminf(b.lo, x);
  });
  return cluster_reduce(c, b);
}

// Every element's weight, once: the coarse histogram of counts and masses, and the min-p sums
// (the tokens of weight >= min_p) when `minp`. Ends merged, with the row's totals in sm.totals.
__device__ void coarse_pass(Ctx& c, bool minp, double min_p) {
  clear_hist(c);
  Sum mp = Sum::none();
  for_each_logit<4>(c, [&](bool valid, int, float x) {
    const double w = valid ? weight(c.r, x) : 0.0;
    const u64 fw = u64(w * kFix);
    hist_add(c, valid, coarse_digit(c.r, x), fw);
    if (valid && minp && w >= min_p) mp.merge({1u, fw});
  });
  mp = block_reduce(c, mp);
  if (c.tid == 0) sm.minp = mp;
  merge(c, sm.coarse);
  if (c.warp == 0) {
    Sum all = Sum::none(), sums = Sum::none();
    if (c.lane < c.size) {
      const Smem* peer = c.cluster.map_shared_rank(&sm, c.lane);
      all = {peer->coarse.total_cnt, peer->coarse.total_mass};
      sums = peer->minp;
    }
    all = warp_reduce(all);
    sums = warp_reduce(sums);
    if (c.lane == 0) {
      sm.totals[0] = all;
      sm.totals[1] = sums;
    }
  }
  __syncthreads();
}

// The min-p sums over the top-k only (keys from lo_key up).
__device__ Sum minp_pass(Ctx& c, double min_p, uint32_t lo_key) {
  Sum mp = Sum::none();
  for_each_logit<8>(c, [&](bool valid, int, float x) {
    if (!valid || order_key(x) < lo_key) return;
    const double w = weight(c.r, x);
    if (w >= min_p) mp.merge({1u, u64(w * kFix)});
  });
  return cluster_reduce(c, mp);
}

// One row, as CpuBackend::sample draws it. Every decision depends on cluster-wide values only,
// so all blocks of the cluster take the same path through the same cluster syncs.
__device__ void sample_row(Ctx& c, const SampleParams& p) {
  const SampleRow rp = p.rows[c.row];
  int32_t* out = p.out + c.row;
  const bool leader = c.rank == 0 && c.tid == 0;
  const Best best = max_pass(c);
  if (rp.temperature <= 0.0f || rp.top_k == 1) {
    if (leader) *out = best.i;
    return;
  }
  c.r.temperature = rp.temperature;
  c.r.max_logit = best.v;
  c.r.max_scaled = double(best.v / rp.temperature);
  const float span = fminf(best.v - best.lo, kWeightSpan * rp.temperature);
  c.r.scale = span > 0.0f ? float(kBins - 1) / span : 0.0f;

  const uint32_t V = uint32_t(p.vocab);
  const uint32_t K = (rp.top_k > 0 && uint32_t(rp.top_k) < V) ? uint32_t(rp.top_k) : V;
  coarse_pass(c, rp.min_p > 0.0f && K == V, double(rp.min_p));
  // top-k: the kept tokens are the first K of the order; S is their mass. The later descents go
  // over the whole row: top-k drops a suffix of the order, and where a descent lands past it, the
  // position is compared with n <= K, which keeps n as the filtered descent would.
  u64 S = sm.totals[0].mass;
  uint32_t lo_key = 0;
  if (K < V) {
    Found f = descend(c, {kByCount, K, 0});
    S = f.prefix_mass();
    lo_key = f.key;
  }
  // top-p: the shortest prefix whose mass reaches top_p * S.
  uint32_t n = K;
  u64 n_mass = S;
  if (rp.top_p < 1.0f) {
    Found f = descend(c, {kByMassAtLeast, 0, u64(fmax(0.0, ceil(double(rp.top_p) * double(S))))});
    if (f.position() < n) {
      n = f.position();
      n_mass = f.prefix_mass();
    }
  }
  // min-p: tokens under min_p times the best probability (weight 1) go; they form a suffix.
  if (rp.min_p > 0.0f) {
    const Sum mp = K < V ? minp_pass(c, double(rp.min_p), lo_key) : sm.totals[1];
    if (mp.cnt == 0) {
      if (leader) *out = best.i;
      return;
    }
    if (mp.cnt < n) {
      n = mp.cnt;
      n_mass = mp.mass;
    }
  }
  // The draw: the first position whose prefix mass passes u * mass (else the last kept one).
  const double u = uniform01(rp.seed, rp.step);
  Found f = descend(c, {kByMassAbove, 0, u64(u * double(n_mass))});
  if (f.position() > n) f = descend(c, {kByCount, n, 0});
  write_nth(c, f.key, f.m, out);
}

__global__ void __launch_bounds__(kMaxThreads, 2) sample_kernel(SampleParams p) {
  cg::cluster_group cluster = cg::this_cluster();
  const int size = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t chunk = (int64_t(p.vocab) + size - 1) / size;
  const int begin = int(std::min<int64_t>(p.vocab, rank * chunk));
  const int end = int(std::min<int64_t>(p.vocab, begin + chunk));
  const int row = int(blockIdx.x) / size;
  Ctx c{cluster, rank, size, row, int(threadIdx.x), int(threadIdx.x % 32), int(threadIdx.x / 32),
        int(blockDim.x / 32), 0u, Row{p.logits + int64_t(row) * p.ld, begin, end, 1.0f, 0.0f, 0.0f, 0.0}};
  sample_row(c, p);
  cluster.sync();  // no block may exit while another can still read its shared memory
}

struct Limits {
  int sms, max_cluster;
};

// The device's SM count, and whether it can place clusters of 16 of these blocks.
Limits limits() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int max_cluster = kMinCluster;
  if (cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kMaxCluster;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kMaxCluster);
    cfg.blockDim = dim3(kMaxThreads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &cfg) == cudaSuccess && clusters > 0)
      max_cluster = kMaxCluster;
  }
  (void)cudaGetLastError();  // a refused query is not the next launch's error
  return {sms, max_cluster};
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.batch == 0) return;
  static const Limits lim = limits();
  // Threads per row such that all rows are resident at once (64 registers a thread: 1024 threads
  // an SM), as many as that allows: a row's time is mostly the latency of its cluster syncs.
  const int64_t per_row = std::max<int64_t>(kMinCluster * kMinThreads, int64_t(lim.sms) * 1024 / p.batch);
  const int cluster = per_row >= int64_t(lim.max_cluster) * kMinThreads ? lim.max_cluster : kMinCluster;
  int threads = kMinThreads;
  while (threads < kMaxThreads && int64_t(cluster) * threads * 2 <= per_row) threads *= 2;

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cluster);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(p.batch) * unsigned(cluster));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, sample_kernel, p));
}

SamplerState::~SamplerState() {
  if (dev_) cudaFree(dev_);
}

const SampleRow* SamplerState::upload(const std::vector<SampleRow>& rows, cudaStream_t stream) {
  if (rows.size() > capacity_) {
    if (dev_) CUDA_CHECK(cudaFree(dev_));
    dev_ = nullptr;
    CUDA_CHECK(cudaMalloc(&dev_, rows.size() * sizeof(SampleRow)));
    capacity_ = rows.size();
  }
  // From pageable memory the copy is staged before the call returns, so `rows` may go away.
  CUDA_CHECK(cudaMemcpyAsync(dev_, rows.data(), rows.size() * sizeof(SampleRow), cudaMemcpyHostToDevice, stream));
  return dev_;
}

}  // namespace mlaserve::cuda
