// How fast a weight matrix streams from HBM in the skinny FP8 GEMM's read pattern against other
// patterns, reads only (no math), with per-warp timestamps: the launch's ramp (last warp's start),
// the median warp's first-load latency, the tail (last end - median end) and the span, in us, of
// the last launch; ms is the median of 25 runs of 10 back-to-back launches (weights rotated past
// L2; PDL only where a row says "pdl"), each run queued behind a kernel holding the stream. It told
// the twenty-ninth session that q_b's launch was short of bytes in flight, not of whole lines, and
// the forty-fourth what a launch costs with and without PDL beside reads of small weights, and that
// two launches sharing an SM read them faster (docs/benchmarks.md).
// Built with the GPU targets (read_pattern_probe); run it on the GPU machine with no arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/pdl.cuh"

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e = (x);                                                    \
    if (e != cudaSuccess) {                                                 \
      std::printf("CUDA %s at line %d\n", cudaGetErrorString(e), __LINE__); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

__device__ __forceinline__ uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint4 ldcs(const void* p) { return __ldcs(static_cast<const uint4*>(p)); }
__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

struct Ts {
  unsigned long long start, first, end;
  unsigned sm, pad;
};
__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %smid;" : "=r"(r));
  return r;
}

// Whole buffer, grid-stride, U loads in flight a thread, under our PDL contract (kernels/cuda/pdl.cuh):
// each thread's first U loads (weights, which no kernel writes) before the wait, the rest after the
// wait and the trigger. Launched plainly the wait returns at once; launched with launch_pdl, the
// next launch's CTAs start while this one runs where an SM has room for them, which the dynamic
// shared memory a launch asks for decides.
template <int U>
__global__ void __launch_bounds__(256) stream_read(const uint8_t* p, size_t n16, uint32_t* sink, Ts* ts) {
  uint64_t t0 = gtime();
  const uint4* q = reinterpret_cast<const uint4*>(p);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) v[u] = i + u * stride < n16 ? ldcs(q + i + u * stride) : make_uint4(0, 0, 0, 0);
  mlaserve::cuda::pdl_wait_and_trigger();
  uint32_t acc = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
  const uint64_t t1 = gtime() | (acc & 0);
  for (i += stride * U; i < n16; i += stride * U) {
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * stride < n16 ? ldcs(q + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
  }
  if (acc == 0x12345678u) sink[0] = acc;
  if (threadIdx.x % 32 == 0) {
    int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    ts[w] = {t0, t1, gtime(), smid(), 0};
  }
}

// The skinny kernel's addressing (RT 16-row tiles a warp, WK warps on K, 8 / WK on rows), one
// K-block in flight plus the next. LINES: each load instruction covers 4 whole 128-byte lines
// (lane / 8 = row, lane % 8 = 16-byte piece) instead of half-lines of 8 rows.
template <int RT, int WK, bool LINES>
__global__ void __launch_bounds__(256, 1) skinny_read(const uint8_t* w, int ldw, int N, int K, uint32_t* sink, Ts* ts) {
  uint64_t t0 = gtime(), t1 = 0;
  constexpr int WR = 8 / WK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int wr = warp / WK, wk = warp % WK;
  const int n0 = blockIdx.x * 16 * RT * WR + wr * 16 * RT;
  const int kblocks = K / 128;
  const uint8_t* ptr[RT][4];
  bool ok[RT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // skinny: i = (r, h): row g + 8 r, byte 16 t4 + 64 h. lines: row 4 i + lane / 8, byte 16 (lane % 8).
      int n = LINES ? n0 + rt * 16 + 4 * i + lane / 8 : n0 + rt * 16 + g + 8 * (i / 2);
      int off = LINES ? 16 * (lane % 8) : 16 * t4 + 64 * (i % 2);
      ok[rt][i] = n < N;
      ptr[rt][i] = w + size_t(ok[rt][i] ? n : 0) * ldw + off;
    }
  uint4 cur[RT][4], nxt[RT][4];
  uint32_t acc = 0;
  auto load = [&](uint4(&b)[RT][4], int kb) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) b[rt][i] = ok[rt][i] ? ldcs(ptr[rt][i] + kb * 128) : make_uint4(0, 0, 0, 0);
  };
  if (wk < kblocks) load(cur, wk);
  for (int kb = wk; kb < kblocks; kb += WK) {
    if (kb + WK < kblocks) load(nxt, kb + WK);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc ^= fold(cur[rt][i]);
    if (!t1) t1 = gtime() | (acc & 0);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) cur[rt][i] = nxt[rt][i];
  }
  if (acc == 0x12345678u) sink[0] = acc;
  if (lane == 0) ts[blockIdx.x * 8 + warp] = {t0, t1, gtime(), smid(), 0};
}

// A warp streams R whole rows: lane l reads bytes 16 l + 512 c of a row; U pieces in flight.
template <int R, int U>
__global__ void __launch_bounds__(256) row_read(const uint8_t* w, int ldw, int N, int K, uint32_t* sink, Ts* ts) {
  uint64_t t0 = gtime(), t1 = 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = (blockIdx.x * 8 + warp) * R, chunks = K / 512, total = R * chunks;
  uint32_t acc = 0;
  for (int i = 0; i < total; i += U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int j = i + u, r = r0 + j / chunks, c = j % chunks;
      v[u] = j < total && r < N ? ldcs(w + size_t(r) * ldw + 512 * c + 16 * lane) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
    if (!t1) t1 = gtime() | (acc & 0);
  }
  if (acc == 0x12345678u) sink[0] = acc;
  if (lane == 0) ts[blockIdx.x * 8 + warp] = {t0, t1, gtime(), smid(), 0};
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n / 4; i += size_t(gridDim.x) * blockDim.x)
    reinterpret_cast<uint32_t*>(p)[i] = uint32_t(i * 2654435761u) ^ seed;
}

constexpr int kAloneSmem = 120 * 1024;  // two CTAs asking this much do not fit one SM (228 KB)

struct Stats {
  double ms, ramp_us, first_us, tail_us, span_us;
};

template <typename F>
Stats measure(F launch, int sets, int warps, Ts* ts_d) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 6; ++i) launch(i % sets);
  std::vector<double> ms;
  for (int r = 0; r < 25; ++r) {
    const int n = 10;
    // The run's launches queued while the stream is held: they then start back to back on the GPU,
    // and the time holds none of the host's submission (about 5 us a launch).
    mlaserve::cuda::hold_stream(nullptr, 200);
    CK(cudaEventRecord(a));
    for (int i = 0; i < n; ++i) launch((r * n + i) % sets);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / n);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaGetLastError());
  // The last launch's timestamps.
  std::vector<Ts> h(warps);
  CK(cudaMemcpy(h.data(), ts_d, warps * sizeof(Ts), cudaMemcpyDeviceToHost));
  uint64_t s0 = ~0ull, s1 = 0, e1 = 0;
  std::vector<double> first, ends;
  for (auto& t : h) {
    s0 = std::min(s0, (uint64_t)t.start);
    s1 = std::max(s1, (uint64_t)t.start);
    e1 = std::max(e1, (uint64_t)t.end);
  }
  for (auto& t : h) {
    if (t.first) first.push_back(double(t.first - t.start) / 1e3);
    ends.push_back(double(t.end - s0) / 1e3);
  }
  std::sort(first.begin(), first.end());
  std::sort(ends.begin(), ends.end());
  Stats s{ms[ms.size() / 2], double(s1 - s0) / 1e3, first.empty() ? 0 : first[first.size() / 2],
          double(e1 - s0) / 1e3 - ends[ends.size() / 2], double(e1 - s0) / 1e3};
  return s;
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs\n", prop.name, sms);
  uint32_t* sink;
  CK(cudaMalloc(&sink, 4));
  CK(cudaFuncSetAttribute(stream_read<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, kAloneSmem));
  Ts* ts;
  CK(cudaMalloc(&ts, 1 << 22));
  struct Shape {
    const char* name;
    int N, K;
  };
  printf("%-10s %-28s %9s %7s %8s %8s %8s %8s\n", "shape", "pattern", "ms", "TB/s", "ramp_us", "first_us", "tail_us",
         "span_us");
  for (Shape s :
       {Shape{"kv_a", 576, 7168}, Shape{"q_a", 1536, 7168}, Shape{"q_kv_a", 2112, 7168}, Shape{"q_b", 24576, 1536},
        Shape{"o", 7168, 16384}}) {
    size_t bytes = size_t(s.N) * s.K;
    int sets = int(std::min<size_t>(8, std::max<size_t>(2, (size_t(200) << 20) / bytes + 1)));
    std::vector<uint8_t*> bufs(sets);
    for (int i = 0; i < sets; ++i) {
      CK(cudaMalloc(&bufs[i], bytes));
      fill<<<1024, 256>>>(bufs[i], bytes, 77u + i);
    }
    CK(cudaDeviceSynchronize());
    auto report = [&](const std::string& pat, Stats st) {
      printf("%-10s %-28s %9.5f %7.3f %8.2f %8.2f %8.2f %8.2f\n", s.name, pat.c_str(), st.ms,
             bytes / (st.ms * 1e-3) / 1e12, st.ramp_us, st.first_us, st.tail_us, st.span_us);
    };
    // "alone" asks for shared memory enough that no two CTAs share an SM (as the skinny launches of
    // two or more row tiles a warp, by their registers), so the next launch waits for this one's CTAs.
    for (bool pdl : {false, true})
      for (int bps : {0, 1, 2, 4}) {
        const int grid = sms * std::max(bps, 1);
        const size_t smem = bps == 0 ? kAloneSmem : 0;
        const std::string name = std::string(pdl ? "pdl" : "nopdl") + " U4 " +
                                 (bps == 0 ? std::string("1cta/sm alone") : std::to_string(bps) + "cta/sm");
        for (bool empty : {true, false}) {  // empty: the launch alone, reading nothing
          const size_t n16 = empty ? 0 : bytes / 16;
          auto launch = [&](int i) {
            if (pdl)
              mlaserve::cuda::launch_pdl(stream_read<4>, grid, 256, smem, nullptr, bufs[i], n16, sink, ts);
            else
              stream_read<4><<<grid, 256, smem>>>(bufs[i], n16, sink, ts);
          };
          report((empty ? "empty " : "") + name, measure(launch, sets, grid * 8, ts));
        }
      }
#define SK(RT, WK, L)                                                                                             \
  {                                                                                                               \
    int rows = 16 * RT * (8 / WK), grid = (s.N + rows - 1) / rows;                                                \
    report(std::string(L ? "lines" : "skinny") + " rt" #RT " wk" #WK " ctas" + std::to_string(grid),              \
           measure([&](int i) { skinny_read<RT, WK, L><<<grid, 256>>>(bufs[i], s.K, s.N, s.K, sink, ts); }, sets, \
                   grid * 8, ts));                                                                                \
  }
    SK(1, 1, false)
    SK(2, 1, false) SK(4, 1, false) SK(2, 8, false) SK(4, 8, false) SK(2, 4, false) SK(1, 1, true) SK(2, 1, true)
        SK(2, 8, true)
#define RR(R, U)                                                                                                       \
  {                                                                                                                    \
    int grid = (s.N + 8 * R - 1) / (8 * R);                                                                            \
    report(                                                                                                            \
        "rows R" #R " U" #U " ctas" + std::to_string(grid),                                                            \
        measure([&](int i) { row_read<R, U><<<grid, 256>>>(bufs[i], s.K, s.N, s.K, sink, ts); }, sets, grid * 8, ts)); \
  }
            RR(4, 4) RR(8, 4) RR(16, 4) RR(16, 8) RR(32, 8) for (auto p : bufs) CK(cudaFree(p));
  }
  return 0;
}
