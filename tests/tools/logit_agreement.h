// How close one model's logits are to another's, position by position: what the FP8 accuracy test
// (tests/unit/fp8_model_test.cc) bounds and the FP8 accuracy tool (fp8_accuracy.cc) reports.
// Each row (position) gets its cosine similarity and its max |got - want| over its max |want|.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/tensor.h"

namespace mlaserve {

struct LogitAgreement {
  std::vector<double> cosines, rel_errors;  // one per row
  int64_t argmax_equal = 0;                 // rows whose largest logit is the same token

  int64_t rows() const { return int64_t(cosines.size()); }
  double min_cosine() const { return rows() ? *std::min_element(cosines.begin(), cosines.end()) : 1; }
  double median_cosine() const { return median(cosines); }
  double mean_cosine() const {
    double sum = 0;
    for (double c : cosines) sum += c;
    return rows() ? sum / double(rows()) : 1;
  }
  double max_rel_error() const { return rows() ? *std::max_element(rel_errors.begin(), rel_errors.end()) : 0; }
  double median_rel_error() const { return median(rel_errors); }
  double argmax_agreement() const { return rows() ? double(argmax_equal) / double(rows()) : 1; }

  // Adds the rows of got and want ([R, V] fp32 host tensors).
  void add(const Tensor& got, const Tensor& want) {
    int64_t R = want.size(0), V = want.size(1);
    for (int64_t r = 0; r < R; ++r) {
      const float* g = got.data<float>() + r * got.stride(0);
      const float* w = want.data<float>() + r * want.stride(0);
      double dot = 0, gg = 0, ww = 0, max_diff = 0, max_want = 0;
      bool nan = false;
      for (int64_t v = 0; v < V; ++v) {
        nan |= std::isnan(g[v]);
        dot += double(g[v]) * w[v];
        gg += double(g[v]) * g[v];
        ww += double(w[v]) * w[v];
        max_diff = std::max(max_diff, std::fabs(double(g[v]) - w[v]));
        max_want = std::max(max_want, std::fabs(double(w[v])));
      }
      // NaN logits count as the worst.
      cosines.push_back(nan ? -1 : dot / std::sqrt(gg * ww));
      rel_errors.push_back(nan ? INFINITY : max_diff / max_want);
      argmax_equal += (std::max_element(g, g + V) - g) == (std::max_element(w, w + V) - w);
    }
  }

 private:
  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace mlaserve
