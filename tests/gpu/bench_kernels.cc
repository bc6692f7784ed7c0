// Kernel benchmark: measures the two ceilings of this GPU in the same run (device-to-device copy
// bandwidth, counting bytes read and written; dense BF16 GEMM rate at 8192^3 on random data), then
// times each kernel per shape and prints its floor (bytes / copy bandwidth or FLOPs / GEMM rate)
// and the fraction of it reached. Times are medians of CUDA-event-timed repeats after warm-up,
// rotating among input sets larger than L2 where the inputs are small.
//   bench_kernels [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/random.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gemm_runner.h"

using namespace mlaserve;

namespace {

cuda::CudaBackend* g_gpu;

Tensor random_bf16(Shape shape, uint64_t seed, float std = 1.0f) {
  Tensor h = Tensor::empty(DType::BF16, shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<uint16_t>()[i] = f32_to_bf16(std * normal01(seed, uint64_t(i)));
  return g_gpu->to_device(h);
}

// Median milliseconds of `fn` (given the repeat index) over `reps` timed runs.
double time_ms(const std::function<void(int)>& fn, int reps = 50, int warmup = 5) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, g_gpu->stream()));
    fn(i);
    CUDA_CHECK(cudaEventRecord(b, g_gpu->stream()));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string kernel, shape;
  double ms, achieved, floor_ms, fraction;
  std::string unit;
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  cuda::CudaBackend gpu;
  g_gpu = &gpu;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  // Ceiling 1: copy bandwidth, 2 GiB each way.
  size_t bytes = size_t(2) << 30;
  void *src, *dst;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemset(src, 1, bytes));
  double copy_ms = time_ms([&](int) { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu.stream())); }, 20);
  double copy_bw = 2.0 * double(bytes) / (copy_ms * 1e-3);  // bytes/s, read + written
  cudaFree(src);
  cudaFree(dst);

  // Ceiling 2: dense BF16 GEMM rate on random data.
  cuda::GemmRunner gemm;
  int64_t M = 8192;
  Tensor A = random_bf16({M, M}, 1), B = random_bf16({M, M}, 2), C = gpu.empty(DType::BF16, {M, M});
  double gemm_ms = time_ms([&](int) { gemm.bf16_nt(A.raw(), M, B.raw(), M, C.raw(), M, false, M, M, M, gpu.stream()); }, 20);
  double gemm_rate = 2.0 * double(M) * M * M / (gemm_ms * 1e-3);
  A = B = C = Tensor();

  std::vector<Row> rows;
  auto mem_row = [&](const std::string& k, const std::string& shape, double ms, double moved) {
    double floor_ms = moved / copy_bw * 1e3;
    rows.push_back({k, shape, ms, moved / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms, "TB/s"});
  };
  auto flop_row = [&](const std::string& k, const std::string& shape, double ms, double flops, double moved) {
    double floor_ms = std::max(flops / gemm_rate, moved / copy_bw) * 1e3;
    rows.push_back({k, shape, ms, flops / (ms * 1e-3) / 1e12, floor_ms, floor_ms / ms, "TFLOP/s"});
  };

  // RMSNorm and add+RMSNorm over a hidden state: 4 rotating sets of 16k x 7168 (235 MB each).
  for (int64_t D : {2048, 7168}) {
    int64_t T = 16384;
    std::vector<Tensor> xs, outs, res;
    for (int i = 0; i < 4; ++i) {
      xs.push_back(random_bf16({T, D}, 10 + i));
      res.push_back(random_bf16({T, D}, 20 + i));
      outs.push_back(gpu.empty(DType::BF16, {T, D}));
    }
    Tensor w = random_bf16({D}, 3);
    double ms = time_ms([&](int i) { gpu.rmsnorm(xs[i % 4], w, 1e-6f, outs[i % 4]); });
    mem_row("rmsnorm", fmt::format("{}x{}", T, D), ms, 2.0 * 2 * T * D);
    ms = time_ms([&](int i) { gpu.add_rmsnorm(xs[i % 4], res[i % 4], w, 1e-6f, outs[i % 4]); });
    mem_row("add_rmsnorm", fmt::format("{}x{}", T, D), ms, 4.0 * 2 * T * D);
    ms = time_ms([&](int i) { gpu.silu_and_mul(xs[i % 4], res[i % 4], outs[i % 4]); });
    mem_row("silu_and_mul", fmt::format("{}x{}", T, D), ms, 3.0 * 2 * T * D);
  }

  // Linear layers at decode (weight-bound) and prefill (FLOP-bound) sizes.
  struct Lin {
    const char* name;
    int64_t N, K;
  };
  for (Lin l : std::vector<Lin>{{"v3.q_b", 24576, 1536}, {"v3.kv_a", 576, 7168}, {"v3.o", 7168, 16384},
                               {"v3.dense_gate_up", 36864, 7168}, {"v2lite.q", 3072, 2048}}) {
    int n_sets = int(std::max<int64_t>(1, std::min<int64_t>(8, (int64_t(200) << 20) / (l.N * l.K * 2) + 1)));
    std::vector<Tensor> ws;
    for (int i = 0; i < n_sets; ++i) ws.push_back(random_bf16({l.N, l.K}, 100 + i, 0.02f));
    for (int64_t T : {1, 16, 4096}) {
      Tensor x = random_bf16({T, l.K}, 5), y = gpu.empty(DType::BF16, {T, l.N});
      double ms = time_ms([&](int i) { gpu.linear(x, LinearWeight{ws[i % n_sets], {}}, y); });
      double moved = 2.0 * (l.N * l.K + T * l.K + T * l.N), flops = 2.0 * T * l.N * l.K;
      flop_row(std::string("linear ") + l.name, fmt::format("T={} N={} K={}", T, l.N, l.K), ms, flops, moved);
    }
  }

  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("copy bandwidth (read+write): %.2f TB/s; dense BF16 GEMM 8192^3: %.0f TFLOP/s\n", copy_bw / 1e12,
              gemm_rate / 1e12);
  std::printf("%-24s %-26s %10s %12s %10s %9s\n", "kernel", "shape", "ms", "achieved", "floor ms", "of floor");
  nlohmann::json out = {{"device", prop.name}, {"copy_tb_s", copy_bw / 1e12}, {"gemm_bf16_tflops", gemm_rate / 1e12}};
  for (const Row& r : rows) {
    std::printf("%-24s %-26s %10.4f %7.2f %-7s %9.4f %8.0f%%\n", r.kernel.c_str(), r.shape.c_str(), r.ms, r.achieved,
                r.unit.c_str(), r.floor_ms, 100 * r.fraction);
    out["rows"].push_back({{"kernel", r.kernel}, {"shape", r.shape}, {"ms", r.ms}, {"achieved", r.achieved},
                           {"unit", r.unit}, {"floor_ms", r.floor_ms}, {"fraction", r.fraction}});
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    std::fputs(out.dump(1).c_str(), f);
    std::fclose(f);
  }
  return 0;
}
