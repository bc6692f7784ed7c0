// MLA attention on the CPU, in both forms. Scores and softmax in fp32 with the running max
// subtracted; each query sees the keys at positions up to its own.
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::cpu {

namespace {

// num_kv: the kv rows given; the ranges must cover them all, or with `kv_capacity` fit in them.
void check_metadata(const AttentionMetadata& md, int64_t num_tokens, int64_t num_kv, bool kv_capacity = false) {
  int64_t n = md.num_seqs;
  check_i32(md.seq_lens, n, "attention seq_lens");
  check_i32(md.query_start, n + 1, "attention query_start");
  check_i32(md.kv_start, n + 1, "attention kv_start");
  const int32_t *qs = md.query_start.data<int32_t>(), *ks = md.kv_start.data<int32_t>(),
                *sl = md.seq_lens.data<int32_t>();
  MLA_CHECK(qs[0] == 0 && qs[n] == num_tokens, "attention: queries of the seqs cover {} of {} tokens", qs[n],
            num_tokens);
  MLA_CHECK(ks[0] == 0 && (ks[n] == num_kv || (kv_capacity && ks[n] <= num_kv)),
            "attention: kv ranges cover {} of {} rows", ks[n], num_kv);
  for (int64_t s = 0; s < n; ++s) {
    MLA_CHECK(ks[s + 1] - ks[s] == sl[s], "attention: seq {} has {} kv rows for a length of {}", s, ks[s + 1] - ks[s],
              sl[s]);
    MLA_CHECK(qs[s + 1] - qs[s] <= sl[s], "attention: seq {} has more queries than tokens", s);
  }
}

// Softmax of scores[0..n) in place; returns nothing, leaves probabilities.
void softmax_inplace(float* scores, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, scores[j]);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  float inv = float(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) scores[j] *= inv;
}

// Seq index and causal length for each query token.
struct QueryPlace {
  int32_t seq;
  int32_t visible;  // keys [0, visible)
};

std::vector<QueryPlace> place_queries(const AttentionMetadata& md, int64_t T) {
  std::vector<QueryPlace> places(static_cast<size_t>(T));
  const int32_t *qs = md.query_start.data<int32_t>(), *sl = md.seq_lens.data<int32_t>();
  for (int32_t s = 0; s < md.num_seqs; ++s) {
    int32_t nq = qs[s + 1] - qs[s];
    for (int32_t i = 0; i < nq; ++i) places[qs[s] + i] = {s, sl[s] - nq + i + 1};
  }
  return places;
}

}  // namespace

void CpuBackend::mla_prefill(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const AttentionMetadata& md,
                             float scale, Tensor& out) {
  int64_t T = q.size(0), H = q.size(1), S = kv.size(0), R = k_pe.size(1);
  int64_t nope = q.size(2) - R, V = kv.size(2) - nope;
  check_f32(q, {T, H, nope + R}, "mla_prefill q");
  check_f32(kv, {S, H, nope + V}, "mla_prefill kv");
  check_f32(k_pe, {S, R}, "mla_prefill k_pe");
  check_f32(out, {T, H, V}, "mla_prefill out");
  check_metadata(md, T, S);
  auto places = place_queries(md, T);
  const int32_t* ks = md.kv_start.data<int32_t>();
#pragma omp parallel if (worth_threads(int64_t(T) * H * md.max_seq_len * (nope + R + V)))
  {
    std::vector<float> p(static_cast<size_t>(md.max_seq_len > 0 ? md.max_seq_len : S));
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const QueryPlace qp = places[t];
        int64_t base = ks[qp.seq], n = qp.visible;
        if (int64_t(p.size()) < n) p.resize(size_t(n));
        const float* qv = row_ptr(q, t, h);
        for (int64_t j = 0; j < n; ++j) {
          const float* k = row_ptr(kv, base + j, h);
          const float* kr = row_ptr(k_pe, base + j);
          float acc = 0;
          for (int64_t d = 0; d < nope; ++d) acc += qv[d] * k[d];
          for (int64_t d = 0; d < R; ++d) acc += qv[nope + d] * kr[d];
          p[j] = acc * scale;
        }
        softmax_inplace(p.data(), n);
        float* o = row_ptr(out, t, h);
        for (int64_t d = 0; d < V; ++d) o[d] = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float* v = row_ptr(kv, base + j, h) + nope;
          for (int64_t d = 0; d < V; ++d) o[d] += p[j] * v[d];
        }
      }
    }
  }
}

void CpuBackend::mla_decode(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                            float scale, Tensor& out) {
  int64_t T = q.size(0), H = q.size(1), D = q.size(2), L = out.size(2), N = cache.size(0);
  check_f32(q, {T, H, D}, "mla_decode q");
  check_f32(out, {T, H, L}, "mla_decode out");
  MLA_CHECK(cache.ndim() == 2 && cache.size(1) == D && cache.is_contiguous(),
            "mla_decode: cache {} for latent queries of {}", cache.describe(), D);
  check_i32(md.kv_indices, md.kv_indices.numel(), "mla_decode kv_indices");
  check_metadata(md, T, md.kv_indices.numel(), /*kv_capacity=*/true);
  auto places = place_queries(md, T);
  const int32_t *ks = md.kv_start.data<int32_t>(), *slots = md.kv_indices.data<int32_t>();
  for (int64_t i = 0; i < ks[md.num_seqs]; ++i)
    MLA_CHECK(slots[i] >= 0 && slots[i] < N, "mla_decode: slot {} outside the pool of {}", slots[i], N);
  // Latent rows are read once per (query, key) pair; converting the cache rows of each seq to
  // fp32 (times kv_scale) first keeps the inner loops simple for any cache dtype, FP8 included.
#pragma omp parallel if (worth_threads(int64_t(T) * H * md.max_seq_len * D * 2))
  {
    std::vector<float> p, krow(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < T; ++t) {
      const QueryPlace qp = places[t];
      int64_t n = qp.visible;
      p.assign(size_t(n * H), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        load_cache_row(cache, kv_scale, slots[ks[qp.seq] + j], krow.data());
        for (int64_t h = 0; h < H; ++h) {
          const float* qv = row_ptr(q, t, h);
          float acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += qv[d] * krow[d];
          p[h * n + j] = acc * scale;
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        softmax_inplace(p.data() + h * n, n);
        float* o = row_ptr(out, t, h);
        for (int64_t c = 0; c < L; ++c) o[c] = 0;
      }
      for (int64_t j = 0; j < n; ++j) {
        load_cache_row(cache, kv_scale, slots[ks[qp.seq] + j], krow.data());
        for (int64_t h = 0; h < H; ++h) {
          float pj = p[h * n + j];
          float* o = row_ptr(out, t, h);
          for (int64_t c = 0; c < L; ++c) o[c] += pj * krow[c];
        }
      }
    }
  }
}

}  // namespace mlaserve::cpu
