// The warp-specialized block-scaled FP8 GEMM (kernels/cuda/fp8_gemm_wgmma.h) against cuBLASLt's on
// DeepSeek-V3's dense shapes: each launch form's product checked against cuBLASLt's (relative L2
// of the BF16 outputs), then timed from the same codes, both alternated twice, weights rotated
// among copies larger than L2. Usage: fp8_gemm_probe [--trace] [--only NAME] [--soak S] [T ...]
// (default 1024 4096).
// --trace: each form also runs once with the kernel's clock stamps, and the mean SM cycles of a
// tile's phases are printed: the loader's first copy to the first stage landed, the K loop, the
// stores, and from the stores to the next tile's first stage; and the SM clock the launch ran at
// (the busiest CTA's cycles from its first stamp to its last over the launch's time by events), to
// tell a K loop slow in cycles from a GPU that lowered its clock.
// --soak S: after the forms, cuBLASLt's product and then the first form's, each back to back for S
// seconds, between lines giving the host's clock (epoch ms), for a clock and power log taken beside
// it (tests/tools/clocks_during.py reads both).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/relative_l2.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/fp8_gemm_wgmma.h"

using namespace mlaserve;
using namespace mlaserve::cuda;

namespace {

struct GemmShape {
  const char* name;
  int64_t N, K;
};

struct Form {
  int waves, group_m, cluster;
};

// One run of the launch with its stamps on (Fp8GemmWgmmaArgs::trace), summarized.
void trace_phases(Fp8GemmWgmmaArgs a, cudaStream_t stream) {
  constexpr int kTiles = 64;
  int ctas = 0;
  cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, 0);
  const size_t n = size_t(ctas) * kTiles * 4;
  unsigned long long* d = nullptr;
  if (cudaMalloc(&d, n * 8) != cudaSuccess) return;
  cudaMemsetAsync(d, 0, n * 8, stream);
  a.trace = d, a.trace_tiles = kTiles, a.ctas = ctas;
  cudaEvent_t start, stop;
  cudaEventCreate(&start), cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  fp8_gemm_wgmma(a, stream);
  cudaEventRecord(stop, stream);
  std::vector<unsigned long long> h(n);
  cudaMemcpyAsync(h.data(), d, n * 8, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start), cudaEventDestroy(stop);
  cudaFree(d);
  double fill = 0, loop = 0, store = 0, gap = 0, span = 0;
  int tiles = 0, gaps = 0;
  for (int c = 0; c < ctas; ++c)
    for (int i = 0; i < kTiles; ++i) {
      const unsigned long long* t = &h[(size_t(c) * kTiles + i) * 4];
      if (!t[0] || !t[1] || !t[2]) break;
      if (t[3]) span = std::max(span, double(t[3]) - double(h[size_t(c) * kTiles * 4]));
      fill += double(t[1]) - double(t[0]), loop += double(t[2]) - double(t[1]);
      if (t[3]) store += double(t[3]) - double(t[2]);
      ++tiles;
      const unsigned long long* next = t + 4;
      if (i + 1 < kTiles && next[1] && t[3]) gap += double(next[1]) - double(t[3]), ++gaps;
    }
  if (!tiles) return;
  std::printf("    trace: %d tiles; cycles a tile: first copy -> first stage %.0f, K loop %.0f, stores %.0f, "
              "stores -> next tile's first stage %.0f; SM clock at least %.2f GHz (%.0f cycles in %.4f ms)\n",
              tiles, fill / tiles, loop / tiles, store / tiles, gaps ? gap / gaps : 0.0, span / (ms * 1e6), span, ms);
}

int64_t epoch_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// fn(i) back to back on the stream for `seconds`, bracketed by "soak NAME from/to" lines.
void soak(const char* name, double seconds, cudaStream_t stream, const std::function<void(int)>& fn) {
  const int64_t from = epoch_ms();
  int64_t n = 0;
  while (epoch_ms() - from < seconds * 1000) {
    for (int i = 0; i < 20; ++i, ++n) fn(int(n));
    cudaStreamSynchronize(stream);
  }
  const int64_t to = epoch_ms();
  std::printf("    soak %s from %lld to %lld: %lld products, %.4f ms each\n", name, (long long)from, (long long)to,
              (long long)n, double(to - from) / double(n));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens;
  bool trace = false;
  std::string only;
  double soak_s = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--trace") trace = true;
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--soak" && i + 1 < argc) soak_s = std::atof(argv[++i]);
    else tokens.push_back(std::atoll(arg.c_str()));
  }
  if (tokens.empty()) tokens = {1024, 4096};
  CudaBackend gpu(0);
  const std::vector<GemmShape> shapes = {{"q_b", 24576, 1536},         {"o", 7168, 16384},
                                     {"dense_gate_up", 36864, 7168}, {"dense_down", 7168, 18432},
                                     {"q_kv_a", 2112, 7168},         {"kv_b", 32768, 512}};
  const std::vector<Form> forms = {{2, 8, 1}, {2, 8, 2}, {2, 16, 2}, {1, 8, 1}, {1, 8, 2}};
  uint64_t seed = 1;
  for (const GemmShape& sh : shapes) {
    if (!only.empty() && only != sh.name) continue;
    const int copies = int(std::clamp<int64_t>((int64_t(256) << 20) / (sh.N * sh.K) + 1, 1, 8));
    std::vector<LinearWeight> ws(static_cast<size_t>(copies));
    for (LinearWeight& w : ws) {
      Tensor b = gpu.empty(DType::BF16, {sh.N, sh.K});
      if (!gpu.fill_normal(b, seed++, 0.0f, 0.05f) || !gpu.quantize_fp8_blocks(b, 128, 128, w)) return 1;
      w = gpu.to_backend(w);
    }
    for (int64_t T : tokens) {
      Tensor x = gpu.empty(DType::BF16, {T, sh.K});
      if (!gpu.fill_normal(x, seed++, 0.0f, 1.0f)) return 1;
      Fp8Activation xq = gpu.empty_fp8_activation(T, sh.K, 128);
      gpu.quantize_fp8_per_token_group(x, 128, xq.q, xq.scales);
      Tensor ref = gpu.empty(DType::BF16, {T, sh.N}), got = gpu.empty(DType::BF16, {T, sh.N});
      gpu.linear_fp8_w8a8_cublaslt(xq.q, xq.scales, ws[0], ref);
      const Tensor want = gpu.to_host(ref).to_f32();
      auto args = [&](const LinearWeight& w, const Form& f) {
        Fp8GemmWgmmaArgs a;
        a.x = xq.q.raw(), a.ldx = xq.q.stride(0);
        a.x_scales = xq.scales.data<float>(), a.ld_x_scales = xq.scales.stride(1);
        a.w = w.weight.raw(), a.ldw = w.weight.stride(0), a.w_rows = w.weight.size(0);
        a.w_scales = w.scale_inv.data<float>(), a.ld_w_scales = w.scale_inv.stride(0);
        a.out = got.data<__nv_bfloat16>(), a.ldo = got.stride(0);
        a.T = int(T), a.N = int(sh.N), a.K = int(sh.K), a.waves = f.waves, a.group_m = f.group_m;
        a.cluster = f.cluster;
        return a;
      };
      const double flops = 2.0 * double(T) * double(sh.N) * double(sh.K);
      for (const Form& f : forms) {
        gpu.fill_normal(got, seed++, 0.0f, 1.0f);  // nothing left from the previous form
        fp8_gemm_wgmma(args(ws[0], f), gpu.stream());
        const double err = relative_l2(gpu.to_host(got), want);
        double ours[2], lt[2];
        for (int r = 0; r < 2; ++r) {
          lt[r] = median_ms(gpu.stream(), [&](int i) {
            gpu.linear_fp8_w8a8_cublaslt(xq.q, xq.scales, ws[size_t(i % copies)], ref);
          });
          ours[r] = median_ms(gpu.stream(),
                              [&](int i) { fp8_gemm_wgmma(args(ws[size_t(i % copies)], f), gpu.stream()); });
        }
        std::printf("%-14s T=%-5lld waves %d group_m %-2d cluster %d  err %.2e  ours %.4f %.4f ms (%4.0f TFLOP/s)  "
                    "cublaslt %.4f %.4f ms (%4.0f)  lt/ours %.3f\n",
                    sh.name, (long long)T, f.waves, f.group_m, f.cluster, err, ours[0], ours[1],
                    flops / (std::min(ours[0], ours[1]) * 1e-3) / 1e12, lt[0], lt[1],
                    flops / (std::min(lt[0], lt[1]) * 1e-3) / 1e12,
                    std::min(lt[0], lt[1]) / std::min(ours[0], ours[1]));
        if (trace) trace_phases(args(ws[0], f), gpu.stream());
        std::fflush(stdout);
      }
      if (soak_s > 0) {
        soak("cublaslt", soak_s, gpu.stream(), [&](int i) {
          gpu.linear_fp8_w8a8_cublaslt(xq.q, xq.scales, ws[size_t(i % copies)], ref);
        });
        soak("ours", soak_s, gpu.stream(),
             [&](int i) { fp8_gemm_wgmma(args(ws[size_t(i % copies)], forms[0]), gpu.stream()); });
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
