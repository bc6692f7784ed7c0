// MoeRunner: picks the decode kernels or the sorted per-expert GEMM path, and owns what they need.
#include "kernels/cuda/moe_experts.h"

#include <array>
#include <map>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/gemm_runner.h"
#include "kernels/cuda/growing_buffer.h"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/moe_tuning.h"

namespace mlaserve::cuda {

struct MoeRunner::State {
  // One layer's pointer table: host copy (to recognise the list) and device copy [gate | up | down],
  // then for FP8 experts [gate_scale | up_scale | down_scale].
  struct Table {
    std::vector<const void*> host;
    GrowingBuffer dev;
    bool aligned = true;
    int32_t H = 0, I = 0;
  };
  std::map<const void*, Table> tables;
  GrowingBuffer act, y, xs, gu, offsets, sorted, pos, align_scratch;
  const void* align_scratch_zeroed = nullptr;  // the align_scratch block whose barrier was zeroed
  GrowingBuffer xq, x_scale, act_scale;  // FP8 experts: the quantized activations' scales
  int num_sms = 0;
  int32_t* host_offsets = nullptr;  // pinned [kMoeMaxExperts + 1]
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> done;
  std::vector<std::unique_ptr<GemmRunner>> gemms;
  cudaEvent_t fork = nullptr;
  // FP8 experts: the tokens' quantization runs on `quant_stream` beside the pair sort.
  cudaStream_t quant_stream = nullptr;
  cudaEvent_t quant_fork = nullptr, quant_done = nullptr;

  ~State() {
    for (auto s : streams) cudaStreamDestroy(s);
    for (auto e : done) cudaEventDestroy(e);
    if (fork) cudaEventDestroy(fork);
    if (quant_stream) cudaStreamDestroy(quant_stream);
    if (quant_fork) cudaEventDestroy(quant_fork);
    if (quant_done) cudaEventDestroy(quant_done);
    if (host_offsets) cudaFreeHost(host_offsets);
  }

  // The pointer lists a table holds, in this order: the first 3, or all 6 for FP8 experts.
  static std::array<const std::vector<const void*>*, 6> lists(const Experts& ex) {
    return {&ex.gate, &ex.up, &ex.down, &ex.gate_scale, &ex.up_scale, &ex.down_scale};
  }
  static size_t num_lists(const Experts& ex) { return ex.fp8() ? 6 : 3; }

  static bool same(const Table& t, const Experts& ex) {
    const size_t E = ex.gate.size(), n = num_lists(ex);
    const auto ls = lists(ex);
    bool same = t.host.size() == n * E;
    for (size_t j = 0, i = 0; same && j < n; ++j)
      for (size_t e = 0; same && e < E; ++e) same = t.host[i++] == (*ls[j])[e];
    return same;
  }

  Table& table(const Experts& ex, cudaStream_t stream) {
    Table& t = tables[ex.key];
    if (!same(t, ex)) {
      t.host.clear();
      const auto ls = lists(ex);
      for (size_t j = 0; j < num_lists(ex); ++j) t.host.insert(t.host.end(), ls[j]->begin(), ls[j]->end());
      t.aligned = true;
      for (const void* p : t.host) t.aligned = t.aligned && aligned16(p);
      t.dev.ensure(t.host.size() * sizeof(void*));
      // t.host outlives the copy: it stays in the map until the next rebuild of this key.
      CUDA_CHECK(cudaMemcpyAsync(t.dev.get(), t.host.data(), t.host.size() * sizeof(void*), cudaMemcpyHostToDevice,
                                 stream));
    }
    return t;
  }

  // Side streams wait for `main`'s work so far; `join` makes main wait for theirs.
  void fork_from(cudaStream_t main) {
    CUDA_CHECK(cudaEventRecord(fork, main));
    for (auto s : streams) CUDA_CHECK(cudaStreamWaitEvent(s, fork, 0));
  }
  void join_into(cudaStream_t main) {
    for (size_t i = 0; i < streams.size(); ++i) {
      CUDA_CHECK(cudaEventRecord(done[i], streams[i]));
      CUDA_CHECK(cudaStreamWaitEvent(main, done[i], 0));
    }
  }
};

MoeRunner::MoeRunner() : st_(std::make_unique<State>()) {
  CUDA_CHECK(cudaMallocHost(&st_->host_offsets, (kMoeMaxExperts + 1) * sizeof(int32_t)));
  CUDA_CHECK(cudaEventCreateWithFlags(&st_->fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamCreateWithFlags(&st_->quant_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&st_->quant_fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&st_->quant_done, cudaEventDisableTiming));
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&st_->num_sms, cudaDevAttrMultiProcessorCount, device));
}

MoeRunner::~MoeRunner() = default;

bool MoeRunner::run_grouped(const void* const* dptr, int32_t E, const void* x, int64_t x_ld, const float* weights,
                            int64_t w_ld, int32_t T, int32_t k, int32_t H, int32_t I, const int32_t* offsets,
                            const int32_t* sorted, const int32_t* pos, void* out, int64_t out_ld,
                            cudaStream_t stream) {
  const int32_t P = T * k;
  auto act = static_cast<char*>(st_->act.ensure(size_t(P) * I * 2));
  auto y = static_cast<char*>(st_->y.ensure(size_t(P) * H * 2));
  MoeGroupedGemmParams down{act, offsets, dptr + 2 * E, nullptr, y, H, P, E, H, I, H};
  if (moe_grouped_gemm_wide(P, E)) {
    // Wide tiles hold gate and up of the same columns: silu-and-mul is their epilogue.
    MoeGroupedGemmParams gate_up{x, offsets, dptr, dptr + E, act, I, P, E, I, H, 0, true, sorted, k, x_ld};
    if (moe_grouped_gemm_fits(gate_up) && moe_grouped_gemm_fits(down)) {  // tokens read in place
      launch_moe_grouped_gemm(gate_up, stream);
    } else {
      auto xs = static_cast<char*>(st_->xs.ensure(size_t(P) * H * 2));
      gate_up.a = xs, gate_up.a_rows = nullptr, gate_up.a_rows_div = 1, gate_up.lda = H;
      if (!moe_grouped_gemm_fits(gate_up) || !moe_grouped_gemm_fits(down)) return false;
      launch_moe_gather(x, x_ld, sorted, P, k, H, xs, stream, offsets + E);
      launch_moe_grouped_gemm(gate_up, stream);
    }
  } else {
    auto xs = static_cast<char*>(st_->xs.ensure(size_t(P) * H * 2));
    auto gu = static_cast<char*>(st_->gu.ensure(size_t(P) * 2 * I * 2));
    // gate | up as one [2I, H] product when I is whole column tiles, else one launch each.
    MoeGroupedGemmParams gate{xs, offsets, dptr, dptr + E, gu, 2 * int64_t(I), P, E, 2 * I, H, I};
    MoeGroupedGemmParams up = gate;
    if (!moe_grouped_gemm_fits(gate)) {
      gate.w_hi = nullptr;
      gate.N = gate.n_split = I;
      up.w = dptr + E;
      up.w_hi = nullptr;
      up.c = gu + size_t(I) * 2;
      up.N = up.n_split = I;
    }
    if (!moe_grouped_gemm_fits(gate) || !moe_grouped_gemm_fits(down)) return false;
    launch_moe_gather(x, x_ld, sorted, P, k, H, xs, stream, offsets + E);
    launch_moe_grouped_gemm(gate, stream);
    if (gate.w_hi == nullptr) launch_moe_grouped_gemm(up, stream);
    launch_silu_and_mul(gu, 2 * I, gu + size_t(I) * 2, 2 * I, act, I, P, I, stream);
  }
  launch_moe_grouped_gemm(down, stream);
  launch_moe_combine(y, false, pos, weights, w_ld, T, k, H, out, out_ld, stream);
  return true;
}

void MoeRunner::run_fp8(const Experts& ex, const void* const* dptr, int32_t E, const void* x, int64_t x_ld,
                        const float* weights, int64_t w_ld, int32_t T, int32_t k, int32_t H, int32_t I,
                        const int32_t* offsets, const int32_t* sorted, const int32_t* pos, void* out, int64_t out_ld,
                        cudaStream_t stream) {
  const int32_t P = T * k, GH = H / 128, GI = I / 128;
  void* xq = st_->xq.get();  // quantized by run() beside the sort
  auto x_scale = static_cast<float*>(st_->x_scale.get());
  auto scales = reinterpret_cast<const float* const*>(dptr + 3 * E);
  // gate | up as one [2I, H] product over the pairs' tokens in place; fp32 partial sums per K range.
  MoeFp8GemmParams gate_up{.a = xq, .a_scale = x_scale, .lda = H, .ld_a_scale = GH, .a_rows = sorted,
                           .a_rows_div = k, .offsets = offsets, .w = dptr, .w_scale = scales, .w_hi = dptr + E,
                           .w_hi_scale = scales + E, .ld_w_scale = ex.gate_up_scale_ld, .c = nullptr,
                           .ldc = 2 * int64_t(I), .split_stride = int64_t(P) * 2 * I, .c_f32 = true, .launch = {},
                           .max_rows = P, .num_experts = E, .N = 2 * I, .K = H, .n_split = I,
                           .tiled_experts = ex.tiled};
  gate_up.launch = fp8_launch(gate_up, fp8_gate_up_launch, /*allow_k_splits=*/true);
  gate_up.c = st_->gu.ensure(size_t(gate_up.launch.k_splits) * gate_up.split_stride * 4);
  auto act = st_->act.ensure(size_t(P) * I);
  auto act_scale = static_cast<float*>(st_->act_scale.ensure(size_t(P) * GI * 4));
  MoeFp8GemmParams down{.a = act, .a_scale = act_scale, .lda = I, .ld_a_scale = GI, .a_rows = nullptr,
                        .a_rows_div = 1, .offsets = offsets, .w = dptr + 2 * E, .w_scale = scales + 2 * E,
                        .w_hi = nullptr, .w_hi_scale = nullptr, .ld_w_scale = ex.down_scale_ld,
                        .c = st_->y.ensure(size_t(P) * H * 2), .ldc = H, .split_stride = 0, .c_f32 = false,
                        .launch = {}, .max_rows = P, .num_experts = E, .N = H, .K = I, .n_split = H,
                        .tiled_experts = ex.tiled};
  down.launch = fp8_launch(down, fp8_down_launch, /*allow_k_splits=*/false);
  launch_moe_grouped_gemm_fp8(gate_up, stream);
  launch_moe_silu_mul_quant(static_cast<const float*>(gate_up.c), gate_up.split_stride, gate_up.launch.k_splits, I,
                            offsets + E, P, act, act_scale, stream);
  launch_moe_grouped_gemm_fp8(down, stream);
  launch_moe_combine(down.c, false, pos, weights, w_ld, T, k, H, out, out_ld, stream);
}

MoeFp8Launch MoeRunner::fp8_launch(const MoeFp8GemmParams& p, const std::optional<MoeFp8Launch>& forced,
                                    bool allow_k_splits) const {
  if (forced) return *forced;
  if (std::optional<MoeGemmChoice> c = tuning ? tuning->find(p.num_experts, p.N, p.K, p.max_rows) : std::nullopt) {
    MoeFp8GemmParams tuned = p;
    tuned.launch = {c->kernel == MoeGemmChoice::Kernel::Wgmma ? MoeFp8Launch::Kernel::Wgmma
                                                              : MoeFp8Launch::Kernel::MmaSync,
                    c->tile_rows, c->k_splits, c->n_tiles};
    if ((allow_k_splits || c->k_splits == 1) && moe_grouped_gemm_fp8_fits(tuned)) return tuned.launch;
  }
  return plan_moe_grouped_gemm_fp8(p, st_->num_sms, allow_k_splits);
}

bool MoeRunner::knows(const Experts& ex, int32_t H, int32_t I) const {
  auto it = st_->tables.find(ex.key);
  return it != st_->tables.end() && it->second.H == H && it->second.I == I && State::same(it->second, ex);
}

void MoeRunner::run(const Experts& ex, const void* x, int64_t x_ld, const int32_t* ids, const float* weights,
                    int64_t w_ld, int32_t T, int32_t k, int32_t H, int32_t I, void* out, int64_t out_ld,
                    GemmRunner& gemm, cudaStream_t stream, const MoeRoute* route) {
  const int32_t E = int32_t(ex.gate.size()), P = T * k;
  State::Table& tb = st_->table(ex, stream);
  tb.H = H;
  tb.I = I;
  if (T == 0) return;
  auto dptr = static_cast<const void* const*>(tb.dev.get());
  MLA_CHECK(!ex.fp8() || tb.aligned, "moe_experts: FP8 expert weights and scales must start 16-byte aligned");
  bool decode = !ex.fp8() && P <= decode_pair_limit(E) && P <= kMoeDecodeMaxPairs && E <= kMoeMaxExperts &&
                H % 8 == 0 && I % 8 == 0 && x_ld % 8 == 0 && aligned16(x) && tb.aligned;
  const MoeRouteParams* self_routed = nullptr;  // the routing the expert kernels run themselves
  if (route) {
    if (decode && T == 1 && route_in_experts && moe_route_warp_fits(route->params))
      self_routed = &route->params;
    else
      launch_moe_route(route->params, route->warp_per_token_from_scores, stream);
  }
  if (decode) {
    MoeDecodeParams p{x, x_ld, ids, dptr, dptr + E, dptr + 2 * E,
                      st_->act.ensure(size_t(P) * I * 2), static_cast<float*>(st_->y.ensure(size_t(P) * H * 4)),
                      T, k, E, H, I};
    launch_moe_decode_gate_up(p, stream, st_->num_sms, self_routed);
    if (fuse_one_token_down && moe_decode_down_combine_fits(p, st_->num_sms)) {
      launch_moe_decode_down_combine(p, weights, out, stream, self_routed);
      return;
    }
    launch_moe_decode_down(p, stream, st_->num_sms);
    launch_moe_combine(p.y, true, nullptr, weights, w_ld, T, k, H, out, out_ld, stream);
    return;
  }

  // Prefill: sort the pairs by expert on the device.
  auto offsets = static_cast<int32_t*>(st_->offsets.ensure(size_t(E + 1) * 4));
  auto sorted = static_cast<int32_t*>(st_->sorted.ensure(size_t(P) * 4));
  auto pos = static_cast<int32_t*>(st_->pos.ensure(size_t(P) * 4));
  auto scratch = static_cast<int32_t*>(st_->align_scratch.ensure(size_t(moe_align_scratch_ints(P, E)) * 4));
  if (scratch != st_->align_scratch_zeroed) {  // a new block: its barrier counters start at zero
    CUDA_CHECK(cudaMemsetAsync(scratch, 0, kMoeAlignZeroedInts * sizeof(int32_t), stream));
    st_->align_scratch_zeroed = scratch;
  }
  if (ex.fp8()) {
    // Two small launches at once: each alone leaves most SMs idle for a few microseconds.
    void* xq = st_->xq.ensure(size_t(T) * H);
    auto x_scale = static_cast<float*>(st_->x_scale.ensure(size_t(T) * (H / 128) * 4));
    CUDA_CHECK(cudaEventRecord(st_->quant_fork, stream));
    CUDA_CHECK(cudaStreamWaitEvent(st_->quant_stream, st_->quant_fork, 0));
    launch_quantize_fp8_per_token_group(x, x_ld, T, H, 128, xq, H, x_scale, H / 128, 1, st_->quant_stream);
    CUDA_CHECK(cudaEventRecord(st_->quant_done, st_->quant_stream));
  }
  launch_moe_align(ids, P, E, offsets, sorted, pos, stream, scratch, st_->num_sms);
  if (ex.fp8()) {
    CUDA_CHECK(cudaStreamWaitEvent(stream, st_->quant_done, 0));
    run_fp8(ex, dptr, E, x, x_ld, weights, w_ld, T, k, H, I, offsets, sorted, pos, out, out_ld, stream);
    return;
  }
  if (grouped_gemm && tb.aligned &&
      run_grouped(dptr, E, x, x_ld, weights, w_ld, T, k, H, I, offsets, sorted, pos, out, out_ld, stream))
    return;
  // Per-expert GEMMs: the host needs the counts to size them, which a CUDA graph cannot wait for
  // (the decode kernels and the grouped GEMM read them on the device).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  MLA_CHECK(capture == cudaStreamCaptureStatusNone,
            "moe_experts: {} token-expert pairs at H={} I={} take the per-expert GEMMs (grouped GEMM {}), which "
            "wait on the host and so cannot run inside a CUDA graph", P, H, I, grouped_gemm ? "does not fit" : "off");
  CUDA_CHECK(cudaMemcpyAsync(st_->host_offsets, offsets, size_t(E + 1) * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t* off = st_->host_offsets;
  const int32_t routed = off[E];
  auto xs = static_cast<char*>(st_->xs.ensure(size_t(std::max(routed, 1)) * H * 2));
  auto gu = static_cast<char*>(st_->gu.ensure(size_t(std::max(routed, 1)) * 2 * I * 2));
  auto act = static_cast<char*>(st_->act.ensure(size_t(std::max(routed, 1)) * I * 2));
  auto y = static_cast<char*>(st_->y.ensure(size_t(std::max(routed, 1)) * H * 2));
  launch_moe_gather(x, x_ld, sorted, routed, k, H, xs, stream);

  while (int(st_->streams.size()) + 1 < num_streams) {
    cudaStream_t s;
    cudaEvent_t e;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    st_->streams.push_back(s);
    st_->done.push_back(e);
    st_->gemms.push_back(std::make_unique<GemmRunner>(size_t(8) << 20));
  }
  int nstreams = int(st_->streams.size()) + 1;
  // Expert e's GEMMs go to stream (its rank among the touched experts) % nstreams; 0 is `stream`.
  auto on = [&](int i, auto&& fn) {
    if (i == 0)
      fn(gemm, stream);
    else
      fn(*st_->gemms[i - 1], st_->streams[i - 1]);
  };
  st_->fork_from(stream);
  for (int32_t e = 0, n_used = 0; e < E; ++e) {
    int32_t n = off[e + 1] - off[e];
    if (n == 0) continue;
    on(n_used++ % nstreams, [&](GemmRunner& g, cudaStream_t s) {
      const char* xe = xs + size_t(off[e]) * H * 2;
      char* ge = gu + size_t(off[e]) * 2 * I * 2;
      g.bf16_nt(xe, H, tb.host[e], H, ge, 2 * I, false, n, I, H, s);
      g.bf16_nt(xe, H, tb.host[E + e], H, ge + size_t(I) * 2, 2 * I, false, n, I, H, s);
    });
  }
  st_->join_into(stream);
  launch_silu_and_mul(gu, 2 * I, gu + size_t(I) * 2, 2 * I, act, I, routed, I, stream);
  st_->fork_from(stream);
  for (int32_t e = 0, n_used = 0; e < E; ++e) {
    int32_t n = off[e + 1] - off[e];
    if (n == 0) continue;
    on(n_used++ % nstreams, [&](GemmRunner& g, cudaStream_t s) {
      g.bf16_nt(act + size_t(off[e]) * I * 2, I, tb.host[2 * E + e], I, y + size_t(off[e]) * H * 2, H, false, n, H,
                I, s);
    });
  }
  st_->join_into(stream);
  launch_moe_combine(y, false, pos, weights, w_ld, T, k, H, out, out_ld, stream);
}

}  // namespace mlaserve::cuda
