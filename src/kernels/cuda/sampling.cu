// The sampler kernel (see sampling.h for the method). One block of 1024 threads per row; each
// pass reads the row (from L2 after the first) and keeps its state in shared memory.
#include <cfloat>
#include <climits>

#include "common/random.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling.h"

namespace mlaserve::cuda {

namespace {

using u64 = unsigned long long;
constexpr int kThreads = 1024, kWarps = kThreads / 32;
constexpr int kBins = 2048;  // level 0 and 1: 11 bits; level 2: 10 bits
constexpr unsigned kFull = 0xffffffffu;
constexpr double kFix = 70368744177664.0;  // 2^46: the fixed-point unit of probability mass

struct Smem {
  uint32_t cnt[kBins];
  u64 mass[kBins];
  uint32_t min_index[kBins / 2];  // last level only: lowest index holding each key
  uint32_t sel_bin, sel_count_above, sel_ties, sel_first, sel_reached;
  u64 sel_mass_above, sel_mass;
  float red_v[kWarps];
  int red_i[kWarps];
  u64 red_m[kWarps];
  uint32_t red_c[kWarps];
  int found;
};

// Larger logit <=> larger key; -0 and +0 are one key, as they compare equal.
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t b = x == 0.0f ? 0u : __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Row {
  const float* logits;
  int V;
  float temperature;
  double max_scaled;  // double(max_logit / temperature), as the reference's `mx`
  uint32_t lo_key;    // keys below this are outside the top-k and never counted
};

// exp(l / T - mx) as the reference computes it (float division, double exp), in fixed point.
__device__ __forceinline__ double weight(const Row& r, float x) {
  return exp(double(x / r.temperature) - r.max_scaled);
}
__device__ __forceinline__ u64 weight_fix(const Row& r, float x) { return u64(weight(r, x) * kFix); }

enum Mode { kByCount, kByMassAtLeast, kByMassAbove };

// The element at a position of the descending order: all keys above `key` (count_above of
// them, mass_above) plus the first m of the `ties` elements equal to `key` (each of mass w).
struct Found {
  uint32_t key, count_above, ties, m;
  u64 mass_above, w;
  int first_index;  // lowest index whose key is `key`
  __device__ uint32_t position() const { return count_above + m; }
  __device__ u64 prefix_mass() const { return mass_above + u64(m) * w; }
};

__device__ u64 block_sum(u64 v, uint32_t& c, Smem& sm) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(kFull, v, o);
    c += __shfl_xor_sync(kFull, c, o);
  }
  if (lane == 0) {
    sm.red_m[warp] = v;
    sm.red_c[warp] = c;
  }
  __syncthreads();
  v = 0;
  c = 0;
  for (int w = 0; w < kWarps; ++w) {  // same order in every thread: deterministic
    v += sm.red_m[w];
    c += sm.red_c[w];
  }
  __syncthreads();
  return v;
}

// Finds the first position (in descending key order, over keys >= lo_key) where the count
// reaches `count` (kByCount) or the prefix mass reaches (>=) or passes (>) `mass`. If it is never
// reached, the result is the last element.
__device__ Found descend(const Row& r, Smem& sm, Mode mode, uint32_t count, u64 mass) {
  const int tid = threadIdx.x, lane = tid % 32;
  uint32_t prefix = 0, pmask = 0, count_above = 0, ties = 0;
  u64 mass_above = 0, tie_mass = 0;
  bool reached = true;
  auto hit = [&](uint32_t c, u64 m) {
    return mode == kByCount ? c >= count : mode == kByMassAtLeast ? m >= mass : m > mass;
  };
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : level == 1 ? 10 : 0, nb = level == 2 ? kBins / 2 : kBins;
    const bool last = level == 2;
    for (int i = tid; i < nb; i += kThreads) {
      sm.cnt[i] = 0;
      sm.mass[i] = 0;
      if (last) sm.min_index[i] = UINT_MAX;
    }
    __syncthreads();
    // Plain shared atomics: warp aggregation (labeled_partition + reduce) measured slower here.
    for (int i = tid; i < r.V; i += kThreads) {
      float x = r.logits[i];
      uint32_t k = order_key(x);
      if (k < r.lo_key || (k & pmask) != prefix) continue;
      uint32_t d = (k >> shift) & uint32_t(nb - 1);
      atomicAdd(&sm.cnt[d], 1u);
      u64 w = weight_fix(r, x);
      if (w) atomicAdd(&sm.mass[d], w);
      if (last) atomicMin(&sm.min_index[d], uint32_t(i));
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l sums the bins of descending ranks [l * per, (l + 1) * per); a warp scan finds the
      // lane whose range is crossed, and that lane walks its bins.
      const int per = nb / 32;
      uint32_t lc = 0;
      u64 lm = 0;
      for (int j = lane * per; j < (lane + 1) * per; ++j) {
        lc += sm.cnt[nb - 1 - j];
        lm += sm.mass[nb - 1 - j];
      }
      uint32_t ic = lc;
      u64 im = lm;
      for (int o = 1; o < 32; o <<= 1) {
        uint32_t c = __shfl_up_sync(kFull, ic, o);
        u64 m = __shfl_up_sync(kFull, im, o);
        if (lane >= o) {
          ic += c;
          im += m;
        }
      }
      // Only a non-empty bin can hold the position (a zero target is "reached" by empty bins).
      unsigned hits = __ballot_sync(kFull, lc > 0 && hit(count_above + ic, mass_above + im));
      unsigned nonempty = __ballot_sync(kFull, lc > 0);
      bool reach = hits != 0;
      int owner = reach ? __ffs(hits) - 1 : 31 - __clz(nonempty);
      if (lane == owner) {
        uint32_t c = count_above + ic - lc, sc = c;
        u64 m = mass_above + im - lm, smass = m;
        int sel = nb - 1 - lane * per;
        for (int j = lane * per; j < (lane + 1) * per; ++j) {
          int d = nb - 1 - j;
          if (sm.cnt[d] > 0 && (!reach || hit(c + sm.cnt[d], m + sm.mass[d]))) {
            sel = d;
            sc = c;
            smass = m;
            if (reach) break;
          }
          c += sm.cnt[d];
          m += sm.mass[d];
        }
        sm.sel_bin = uint32_t(sel);
        sm.sel_count_above = sc;
        sm.sel_mass_above = smass;
        sm.sel_ties = sm.cnt[sel];
        sm.sel_mass = sm.mass[sel];
        sm.sel_reached = reach;
        sm.sel_first = last ? sm.min_index[sel] : 0u;
      }
    }
    __syncthreads();
    prefix |= sm.sel_bin << shift;
    pmask |= uint32_t(nb - 1) << shift;
    count_above = sm.sel_count_above;
    mass_above = sm.sel_mass_above;
    ties = sm.sel_ties;
    tie_mass = sm.sel_mass;
    reached = reached && sm.sel_reached;
    __syncthreads();
  }
  Found f;
  f.key = prefix;
  f.count_above = count_above;
  f.mass_above = mass_above;
  f.ties = ties;
  f.w = ties ? tie_mass / ties : 0;  // equal keys have equal weights: exact
  f.first_index = int(sm.sel_first);
  int64_t m;
  if (!reached) {
    m = ties;
  } else if (mode == kByCount) {
    m = int64_t(count) - count_above;
  } else if (f.w == 0 || mass < mass_above) {
    m = 1;
  } else {
    u64 need = mass - mass_above;
    m = mode == kByMassAtLeast ? int64_t((need + f.w - 1) / f.w) : int64_t(need / f.w + 1);
  }
  f.m = uint32_t(m < 1 ? 1 : m > int64_t(ties) ? int64_t(ties) : m);
  return f;
}

// The m-th (1-based) index, in index order, whose key is `key`.
__device__ int nth_with_key(const Row& r, Smem& sm, uint32_t key, uint32_t m) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) sm.found = -1;
  uint32_t base = 0;
  for (int start = 0; start < r.V; start += kThreads) {
    int i = start + threadIdx.x;
    bool match = i < r.V && order_key(r.logits[i]) == key;
    unsigned bal = __ballot_sync(kFull, match);
    if (lane == 0) sm.red_c[warp] = __popc(bal);
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? sm.red_c[w] : 0;
      total += sm.red_c[w];
    }
    if (match && base + before + __popc(bal & ((1u << lane) - 1)) == m - 1) sm.found = i;
    base += total;
    __syncthreads();
    if (sm.found >= 0) break;
  }
  return sm.found;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p) {
  __shared__ Smem sm;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const float* logits = p.logits + int64_t(blockIdx.x) * p.ld;
  const int V = p.vocab;
  const SampleRow rp = p.rows[blockIdx.x];

  // Arg-max (first index of the largest logit).
  float bv = -INFINITY;
  int bi = -1;
  for (int i = tid; i < V; i += kThreads) {
    float x = logits[i];
    if (bi < 0 || x > bv) {
      bv = x;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(kFull, bv, o);
    int oi = __shfl_xor_sync(kFull, bi, o);
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    sm.red_v[warp] = bv;
    sm.red_i[warp] = bi;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) {
    float ov = sm.red_v[w];
    int oi = sm.red_i[w];
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  __syncthreads();
  const int argmax = bi;
  if (rp.temperature <= 0.0f || rp.top_k == 1) {
    if (tid == 0) p.out[blockIdx.x] = argmax;
    return;
  }

  Row r{logits, V, rp.temperature, double(bv / rp.temperature), 0u};
  // top-k: the kept tokens are the first K of the order; S is their mass.
  const uint32_t K = (rp.top_k > 0 && rp.top_k < V) ? uint32_t(rp.top_k) : uint32_t(V);
  u64 S;
  if (K < uint32_t(V)) {
    Found f = descend(r, sm, kByCount, K, 0);
    S = f.prefix_mass();
    r.lo_key = f.key;
  } else {
    u64 s = 0;
    uint32_t c = 0;
    for (int i = tid; i < V; i += kThreads) s += weight_fix(r, logits[i]);
    S = block_sum(s, c, sm);
  }
  // top-p: the shortest prefix whose mass reaches top_p * S.
  uint32_t n = K;
  u64 n_mass = S;
  if (rp.top_p < 1.0f) {
    Found f = descend(r, sm, kByMassAtLeast, 0, u64(fmax(0.0, ceil(double(rp.top_p) * double(S)))));
    if (f.position() < n) {
      n = f.position();
      n_mass = f.prefix_mass();
    }
  }
  // min-p: tokens under min_p times the best probability (weight 1) go; they form a suffix.
  if (rp.min_p > 0.0f) {
    u64 s = 0;
    uint32_t c = 0;
    for (int i = tid; i < V; i += kThreads) {
      float x = logits[i];
      if (order_key(x) < r.lo_key) continue;
      double w = weight(r, x);
      if (w >= double(rp.min_p)) {
        s += u64(w * kFix);
        ++c;
      }
    }
    s = block_sum(s, c, sm);
    if (c == 0) {
      if (tid == 0) p.out[blockIdx.x] = argmax;
      return;
    }
    if (c < n) {
      n = c;
      n_mass = s;
    }
  }
  // The draw: the first position whose prefix mass passes u * mass (else the last kept one).
  double u = uniform01(rp.seed, rp.step);
  Found f = descend(r, sm, kByMassAbove, 0, u64(u * double(n_mass)));
  if (f.position() > n) f = descend(r, sm, kByCount, n, 0);
  int token = f.m == 1 ? f.first_index : nth_with_key(r, sm, f.key, f.m);
  if (tid == 0) p.out[blockIdx.x] = token;
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.batch == 0) return;
  sample_kernel<<<p.batch, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
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
