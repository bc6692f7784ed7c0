#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace mlaserve {

namespace {

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// The dim index at which a frequency completes `rotations` turns over the original context.
double correction_dim(double rotations, int64_t dim, double base, double original_max) {
  return double(dim) * std::log(original_max / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable make_rope_table(const ModelConfig& c) {
  int64_t dim = c.qk_rope_head_dim, half = dim / 2;
  RopeTable table;
  table.inv_freq = Tensor::empty(DType::F32, {half});
  float* inv = table.inv_freq.data<float>();
  // Exponents in fp32 as the reference does (arange(0, dim, 2).float() / dim).
  auto pos_freq = [&](int64_t i) { return std::pow(float(c.rope_theta), float(2 * i) / float(dim)); };
  auto plain = [&](int64_t i) { return 1.0f / pos_freq(i); };
  if (!c.rope_scaling) {
    for (int64_t i = 0; i < half; ++i) inv[i] = plain(i);
    return table;
  }
  const RopeScaling& y = *c.rope_scaling;
  double lo = std::floor(correction_dim(y.beta_fast, dim, c.rope_theta, double(y.original_max_position_embeddings)));
  double hi = std::ceil(correction_dim(y.beta_slow, dim, c.rope_theta, double(y.original_max_position_embeddings)));
  lo = std::max(lo, 0.0);
  hi = std::min(hi, double(dim - 1));
  if (lo == hi) hi += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    float extrapolated = plain(i);
    float interpolated = 1.0f / (float(y.factor) * pos_freq(i));
    float ramp = std::clamp(float((double(i) - lo) / (hi - lo)), 0.0f, 1.0f);
    float keep = 1.0f - ramp;  // share of the original (extrapolated) frequency
    inv[i] = interpolated * (1.0f - keep) + extrapolated * keep;
  }
  table.mscale = float(yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim));
  return table;
}

}  // namespace mlaserve
