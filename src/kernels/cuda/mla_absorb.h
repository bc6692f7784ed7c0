// The absorbed MLA projections as strided-batched BF16 GEMMs over heads (cuBLASLt, fp32
// accumulation), plus the copy of the rope part of the query into the latent query; a decode
// step's few tokens take weight-streaming kernels instead (fp32 accumulation too).
//   absorb_q:   q_latent[t, h, :L] = q_nope[t, h] · w_uk[h];  q_latent[t, h, L:] = q_pe[t, h]
//   absorb_out: out[t, h] = w_uv[h] · latent[t, h]
// with nope = v = 128, L = kv_lora = 512, rope = 64 for DeepSeek.
#pragma once

#include <map>
#include <tuple>

#include <memory>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/mla_decode.h"

namespace mlaserve::cuda {

struct MlaAbsorbQParams {
  const void* q_nope;  // [T, H, nope] BF16, strides (qn_st0, qn_st1, 1)
  const void* q_pe;    // [T, H, rope] BF16, strides (pe_st0, pe_st1, 1)
  const void* w_uk;    // [H, nope, L] BF16, contiguous
  void* q_latent;      // [T, H, L + rope] BF16, strides (ql_st0, ql_st1, 1)
  int64_t qn_st0, qn_st1, pe_st0, pe_st1, ql_st0, ql_st1;  // in elements
  int64_t T, H, nope, rope, L;
};

struct MlaAbsorbOutParams {
  const void* latent;  // [T, H, L] BF16, strides (lat_st0, lat_st1, 1)
  const void* w_uv;    // [H, V, L] BF16, contiguous
  void* out;           // [T, H, V] BF16, strides (o_st0, o_st1, 1)
  int64_t lat_st0, lat_st1, o_st0, o_st1;  // in elements
  int64_t T, H, V, L;
};

// q_latent[t, h, L + r] = q_pe[t, h, r]: one 16-byte chunk a thread when rope % 8 == 0.
void launch_copy_q_pe(const MlaAbsorbQParams& p, cudaStream_t stream);

// The few-token forms (mla_absorb_few.cu), which MlaAbsorbRunner runs when they take the call:
// T <= 8, H <= 32, nope <= 128, L a multiple of 64 (absorb_q) or at most 512 and rows 16-byte
// aligned (absorb_out), weights 16-byte aligned. They return false, having launched nothing,
// otherwise. Up to 32 heads their 8 blocks a head are one wave; more waves (128 heads: 1024
// blocks) lost in a decode step to the attention kernel launched behind them (PDL), whose
// persistent CTAs take SMs as the first wave leaves (H200: V3 dims, batch 1, +0.08 ms a step,
// though each kernel alone took half the GEMM's time).
constexpr int64_t kMlaAbsorbFewMaxTokens = 8, kMlaAbsorbFewMaxHeads = 32, kMlaAbsorbFewMaxNope = 128,
                  kMlaAbsorbFewMaxL = 512;
bool launch_mla_absorb_q_few(const MlaAbsorbQParams& p, cudaStream_t stream);
bool launch_mla_absorb_out_few(const MlaAbsorbOutParams& p, cudaStream_t stream);
// absorb_out's few-token form reading the attention of `d` as `s` planned it, launched right after
// its attention kernel without the combine: it merges the split rows' partials itself (writing them
// to p.latent too) and reads the others from p.latent. Takes what launch_mla_absorb_out_few takes,
// with L = 512 (the partials' width).
bool mla_absorb_out_merge_fits(const MlaAbsorbOutParams& p);
void launch_mla_absorb_out_merge(const MlaAbsorbOutParams& p, const MlaDecodeParams& d, const MlaDecodeSchedule& s,
                                 cudaStream_t stream);

// Owns a cuBLASLt handle, a workspace and the algorithm chosen per shape.
class MlaAbsorbRunner {
 public:
  MlaAbsorbRunner() = default;
  MlaAbsorbRunner(const MlaAbsorbRunner&) = delete;
  MlaAbsorbRunner& operator=(const MlaAbsorbRunner&) = delete;

  void absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream);
  void absorb_out(const MlaAbsorbOutParams& p, cudaStream_t stream);

  // Calls the few-token kernels take run on them (H200, bench_kernels --only mla_absorb, 16 heads,
  // 1 token: absorb_q 3.8 us against the GEMM's 11.3). Benchmarks: false forces the GEMMs.
  bool few_token_kernels = true;

 private:
  // Column-major, as cuBLASLt sees it, per batch b: C_b[m, n] = op(A_b)[m, k] · B_b[k, n], A
  // stored [m, k] (lda) or, transposed, [k, m]; B [k, n] (ldb); C [m, n] (ldc); BF16 everywhere.
  struct Gemm {
    bool trans_a;
    int64_t m, n, k, batch;
    const void* a;
    int64_t lda, stride_a;
    const void* b;
    int64_t ldb, stride_b;
    void* c;
    int64_t ldc, stride_c;
  };
  void run(const Gemm& g, cudaStream_t stream);

  using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int>;
  CublasLt lt_;
  std::map<Key, std::unique_ptr<CublasLtPlan>> plans_;
};

}  // namespace mlaserve::cuda
