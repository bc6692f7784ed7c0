// Times FlashMLA's Hopper dense decode (its splitkv kernel, then its combine) on bench_kernels'
// 128-head shape, so that #5's "at least as fast as FlashMLA" is measured in the same call as our
// kernel: B seqs of ctx tokens each, pages of 64 in a random order, one query token, 128 heads.
// Times come from the repo's median_ms (event_timer.h), as bench_kernels' time_ms; FLOPs are counted as
// there (2 * B * 128 * ctx * (576 + 512)). Not part of the build: FlashMLA's sources stay outside
// the repo; tests/tools/build_flashmla_bench.sh compiles this file against a checkout of them.
// Usage: flashmla_bench [B [ctx]]   (default 64 4096)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cuda/event_timer.h"  // the repo's, as bench_kernels times
#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace {

void* random_bf16(size_t n, unsigned seed) {
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& x : h) x = __float2bfloat16(normal(rng));
  void* d;
  CK(cudaMalloc(&d, n * 2));
  CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* d;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 64, ctx = argc > 2 ? std::atoi(argv[2]) : 4096;
  constexpr int H = 128, D = 576, DV = 512, kPage = 64;
  if (B < 1 || ctx < kPage || ctx % kPage != 0) {
    std::fprintf(stderr, "usage: flashmla_bench [B >= 1 [ctx, a multiple of 64]]\n");
    return 2;
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const int pages_per_seq = ctx / kPage, num_pages = B * pages_per_seq;
  std::vector<int> table(size_t(num_pages), 0);
  for (int i = 0; i < num_pages; ++i) table[size_t(i)] = i;
  std::shuffle(table.begin(), table.end(), std::mt19937(99));
  void* q = random_bf16(size_t(B) * H * D, 5);
  void* cache = random_bf16(size_t(num_pages) * kPage * D, 4);
  int* block_table = to_device(table);
  int* seqlens = to_device(std::vector<int>(size_t(B), ctx));
  // FlashMLA's own choice (dense_decode.h): SMs / (KV heads * 64-row head blocks) parts.
  const int num_sm_parts = std::max(sms / ((H + 63) / 64), 1);
  DecodingSchedMeta* meta;
  int* num_splits;
  CK(cudaMalloc(&meta, num_sm_parts * sizeof(DecodingSchedMeta)));
  CK(cudaMalloc(&num_splits, (B + 1) * sizeof(int)));
  GetDecodeSchedMetaParams sched = {B, 1, kPage, 5, -1, -1, nullptr, nullptr, seqlens, meta, num_splits,
                                    num_sm_parts, stream};
  smxx::decode::run_get_decoding_sched_meta_kernel(sched);
  const int total_splits = B + num_sm_parts;
  void* out;
  float *lse, *lse_accum, *o_accum;
  CK(cudaMalloc(&out, size_t(B) * H * DV * 2));
  CK(cudaMalloc(&lse, size_t(B) * H * 4));
  CK(cudaMalloc(&lse_accum, size_t(total_splits) * H * 4));
  CK(cudaMalloc(&o_accum, size_t(total_splits) * H * DV * 4));

  DenseAttnDecodeParams p{};
  p.b = B, p.s_q = 1, p.q_seq_per_hk = H, p.h_q = H, p.h_k = 1, p.q_head_per_hk = H;
  p.num_blocks = num_pages, p.is_causal = false, p.d = D, p.d_v = DV, p.seqlens_k_ptr = seqlens;
  const float scale = 1.0f / std::sqrt(192.0f);
  p.scale_softmax = scale, p.scale_softmax_log2 = float(scale * M_LOG2E);
  p.q_ptr = q, p.k_ptr = cache, p.o_ptr = out, p.softmax_lse_ptr = lse;
  p.q_batch_stride = int64_t(H) * D, p.q_row_stride = D, p.q_head_stride = D;
  p.k_batch_stride = int64_t(kPage) * D, p.k_row_stride = D, p.k_head_stride = D;
  p.o_batch_stride = int64_t(H) * DV, p.o_row_stride = DV, p.o_head_stride = int64_t(H) * DV;
  p.block_table = block_table, p.block_table_batch_stride = pages_per_seq, p.page_block_size = kPage;
  p.tile_scheduler_metadata_ptr = meta, p.num_sm_parts = num_sm_parts, p.num_splits_ptr = num_splits;
  p.total_num_splits = total_splits, p.softmax_lseaccum_ptr = lse_accum, p.oaccum_ptr = o_accum;
  p.stream = stream;
  // Strides as FlashMLA's dense_decode.h sets them for one query token (lse, out, then the partials').
  CombineParams combine = {B, 1, H, DV,
                           lse, out, H, H, H * DV, H * DV, DV,
                           lse_accum, o_accum, H, H, H * DV, H * DV, DV,
                           meta, num_splits, num_sm_parts, nullptr, stream};
  auto attention = [&] { sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(p); };
  auto both = [&] {
    attention();
    smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(combine);
  };
  both();
  CK(cudaStreamSynchronize(stream));
  const double flops = 2.0 * H * double(B) * ctx * (D + DV);
  for (int rep = 0; rep < 2; ++rep) {
    const double t_both = mlaserve::cuda::median_ms(stream, [&](int) { both(); }, 100, 10);
    const double t_attention = mlaserve::cuda::median_ms(stream, [&](int) { attention(); }, 100, 10);
    std::printf("flashmla H=%d B=%d ctx=%d pg=64: splitkv+combine %.4f ms %.1f TFLOP/s, splitkv alone %.4f ms %.1f "
                "TFLOP/s (%d sm parts)\n",
                H, B, ctx, t_both, flops / t_both / 1e9, t_attention, flops / t_attention / 1e9, num_sm_parts);
  }
  return 0;
}
