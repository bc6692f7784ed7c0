// Absorbed MLA projections: one strided-batched cuBLASLt GEMM over the heads for each, and a
// small copy kernel for the rope half of the latent query.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/mla_absorb.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

__global__ void copy_q_pe_kernel(const uint4* q_pe, int64_t pe_st0, int64_t pe_st1, uint4* dst, int64_t ql_st0,
                                 int64_t ql_st1, int64_t H, int chunks, int64_t total) {
  pdl_wait_and_trigger();
  // Strides here are in 16-byte chunks; dst already points at q_latent[0, 0, L].
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  int c = int(i % chunks);
  int64_t th = i / chunks, t = th / H, h = th % H;
  dst[t * ql_st0 + h * ql_st1 + c] = q_pe[t * pe_st0 + h * pe_st1 + c];
}

__global__ void copy_q_pe_scalar_kernel(const __nv_bfloat16* q_pe, int64_t pe_st0, int64_t pe_st1,
                                        __nv_bfloat16* dst, int64_t ql_st0, int64_t ql_st1, int64_t H, int rope,
                                        int64_t total) {
  pdl_wait_and_trigger();
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  int r = int(i % rope);
  int64_t th = i / rope, t = th / H, h = th % H;
  dst[t * ql_st0 + h * ql_st1 + r] = q_pe[t * pe_st0 + h * pe_st1 + r];
}

// Largest power of two up to 256 dividing every value (addresses and byte strides).
int alignment_of(std::initializer_list<uint64_t> values) {
  int a = 256;
  for (uint64_t v : values)
    while (a > 1 && v % uint64_t(a) != 0) a /= 2;
  return a;
}

}  // namespace

void launch_copy_q_pe(const MlaAbsorbQParams& p, cudaStream_t stream) {
  int64_t rows = p.T * p.H;
  if (rows == 0 || p.rope == 0) return;
  auto* dst = static_cast<__nv_bfloat16*>(p.q_latent) + p.L;
  const uint64_t q_pe_at = reinterpret_cast<uintptr_t>(p.q_pe), dst_at = reinterpret_cast<uintptr_t>(dst);
  bool vec = p.rope % 8 == 0 && p.pe_st0 % 8 == 0 && p.pe_st1 % 8 == 0 && p.ql_st0 % 8 == 0 && p.ql_st1 % 8 == 0 &&
             alignment_of({q_pe_at, dst_at}) >= 16;
  constexpr int kThreads = 256;
  if (vec) {
    int chunks = int(p.rope / 8);
    int64_t total = rows * chunks;
    launch_pdl(copy_q_pe_kernel, unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream,
               static_cast<const uint4*>(p.q_pe), p.pe_st0 / 8, p.pe_st1 / 8, reinterpret_cast<uint4*>(dst),
               p.ql_st0 / 8, p.ql_st1 / 8, p.H, chunks, total);
  } else {
    int64_t total = rows * p.rope;
    launch_pdl(copy_q_pe_scalar_kernel, unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream,
               static_cast<const __nv_bfloat16*>(p.q_pe), p.pe_st0, p.pe_st1, dst, p.ql_st0, p.ql_st1, p.H, int(p.rope),
               total);
  }
}

namespace {

cublasLtMatrixLayout_t batched_layout(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, uint64_t(rows), uint64_t(cols), ld));
  int32_t count = int32_t(batch);
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return l;
}

}  // namespace

void MlaAbsorbRunner::run(const Gemm& g, cudaStream_t stream) {
  // cuBLASLt picks kernels by the alignment it is promised; heads of a strided view may start on
  // as little as 16 bytes, so the promise is computed from the actual pointers and strides.
  int align = alignment_of({uint64_t(reinterpret_cast<uintptr_t>(g.a)), uint64_t(reinterpret_cast<uintptr_t>(g.b)),
                            uint64_t(reinterpret_cast<uintptr_t>(g.c)), uint64_t(g.lda * 2), uint64_t(g.ldb * 2),
                            uint64_t(g.ldc * 2), uint64_t(g.stride_a * 2), uint64_t(g.stride_b * 2),
                            uint64_t(g.stride_c * 2)});
  Key key{g.trans_a, g.m, g.n, g.k, g.batch, g.lda, g.stride_a, g.ldb, g.stride_b, g.ldc, g.stride_c, align};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto p = std::make_unique<CublasLtPlan>();
    p->describe(g.trans_a, /*trans_b=*/false);
    p->a = g.trans_a ? batched_layout(g.k, g.m, g.lda, g.batch, g.stride_a)
                     : batched_layout(g.m, g.k, g.lda, g.batch, g.stride_a);
    p->b = batched_layout(g.k, g.n, g.ldb, g.batch, g.stride_b);
    p->c = batched_layout(g.m, g.n, g.ldc, g.batch, g.stride_c);
    MLA_CHECK(lt_.choose_algorithm(*p, uint32_t(align)),
              "cuBLASLt has no batched BF16 algorithm for m={} n={} k={} batch={} (alignment {})", g.m, g.n, g.k,
              g.batch, align);
    it = plans_.emplace(key, std::move(p)).first;
  }
  lt_.matmul(*it->second, g.a, g.b, g.c, stream);
}

// Row-major q_latent_h[T, L] = q_nope_h[T, nope] · w_uk[h][nope, L] is, column-major,
// C[L, T] = W[L, nope] (w_uk[h] read as column-major, ld L) · X[nope, T] (ld = the token stride).
void MlaAbsorbRunner::absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.T == 0 || (few_token_kernels && launch_mla_absorb_q_few(p, stream))) return;
  run({false, p.L, p.T, p.nope, p.H, p.w_uk, p.L, p.nope * p.L, p.q_nope, p.qn_st0, p.qn_st1, p.q_latent, p.ql_st0,
       p.ql_st1},
      stream);
  launch_copy_q_pe(p, stream);
}

// Row-major out_h[T, V] = latent_h[T, L] · w_uv[h][V, L]^T is, column-major,
// C[V, T] = op_T(W[L, V] as stored, ld L) · X[L, T] (ld = the token stride).
void MlaAbsorbRunner::absorb_out(const MlaAbsorbOutParams& p, cudaStream_t stream) {
  if (p.T == 0 || (few_token_kernels && launch_mla_absorb_out_few(p, stream))) return;
  run({true, p.V, p.T, p.L, p.H, p.w_uv, p.L, p.V * p.L, p.latent, p.lat_st0, p.lat_st1, p.out, p.o_st0, p.o_st1},
      stream);
}

}  // namespace mlaserve::cuda
