// CudaBackend::mla_prefill: checks the views and the metadata, then launches the flash kernel
// (mla_prefill.cu). The metadata tensors stay on the device; the grid is sized from T and
// max_seq_len, and tiles past a seq's queries exit at once.
#include <algorithm>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/mla_prefill.h"

namespace mlaserve::cuda {

namespace {

// A device BF16 tensor of `shape` whose last dim is contiguous and whose rows start on 16 bytes.
void check_view(const Tensor& t, const Shape& shape, const char* what) {
  bool ok = t.defined() && t.device() == Device::CUDA && t.dtype() == DType::BF16 && t.shape() == shape &&
            t.stride(-1) == 1 && reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
  for (int d = 0; ok && d + 1 < t.ndim(); ++d) ok = t.stride(d) % 8 == 0;
  MLA_CHECK(ok, "mla_prefill {}: expected a device BF16 {} view with 16-byte aligned rows, got {}", what,
            shape_str(shape), t.defined() ? t.describe() : "nothing");
}

void check_index(const Tensor& t, int64_t n, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::I32 && t.ndim() == 1 &&
                t.size(0) == n && t.is_contiguous(),
            "mla_prefill {}: expected {} device I32 values, got {}", what, n, t.defined() ? t.describe() : "nothing");
}

}  // namespace

MlaPrefillParams mla_prefill_params(const Tensor& q, const Tensor& kv, const Tensor& k_pe,
                                    const AttentionMetadata& md, float scale, Tensor& out) {
  MLA_CHECK(q.defined() && q.ndim() == 3 && kv.defined() && kv.ndim() == 3,
            "mla_prefill: q and kv must be [tokens, heads, dim]");
  int64_t T = q.size(0), H = q.size(1), S = kv.size(0);
  check_view(q, {T, H, kMlaNope + kMlaRope}, "q");
  check_view(kv, {S, H, kMlaNope + kMlaV}, "kv");
  check_view(k_pe, {S, kMlaRope}, "k_pe");
  check_view(out, {T, H, kMlaV}, "out");
  check_index(md.seq_lens, md.num_seqs, "seq_lens");
  check_index(md.query_start, md.num_seqs + 1, "query_start");
  check_index(md.kv_start, md.num_seqs + 1, "kv_start");
  MLA_CHECK(H <= 65535 && md.num_seqs <= 65535, "mla_prefill: {} heads, {} seqs exceed the grid", H, md.num_seqs);
  MlaPrefillParams p;
  p.q = q.raw();
  p.kv = kv.raw();
  p.k_pe = k_pe.raw();
  p.out = out.raw();
  p.query_start = md.query_start.data<int32_t>();
  p.kv_start = md.kv_start.data<int32_t>();
  p.seq_lens = md.seq_lens.data<int32_t>();
  p.q_st0 = q.stride(0);
  p.q_st1 = q.stride(1);
  p.kv_st0 = kv.stride(0);
  p.kv_st1 = kv.stride(1);
  p.kpe_st0 = k_pe.stride(0);
  p.o_st0 = out.stride(0);
  p.o_st1 = out.stride(1);
  p.num_seqs = md.num_seqs;
  p.num_heads = int(H);
  // A seq has at most min(T, seq_len) queries; max_seq_len 0 means unknown.
  p.max_queries = int(md.max_seq_len > 0 ? std::min<int64_t>(T, md.max_seq_len) : T);
  p.scale = scale;
  return p;
}

void CudaBackend::mla_prefill(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const AttentionMetadata& md,
                              float scale, Tensor& out) {
  MlaPrefillParams p = mla_prefill_params(q, kv, k_pe, md, scale, out);
  if (q.size(0) == 0 || md.num_seqs == 0) return;
  launch_mla_prefill(p, stream_);
}

}  // namespace mlaserve::cuda
