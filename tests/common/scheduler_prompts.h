// Prompts the scheduler tests (CPU and GPU) serve: deterministic ids, and a set of prompts that
// share a prefix, so the radix cache has something to reuse.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace mlaserve::testing {

// Prompt `i` of `len` ids, all in [2, 502).
inline std::vector<int32_t> prompt_of(int i, int len) {
  std::vector<int32_t> p;
  for (int t = 0; t < len; ++t) p.push_back(2 + (i * 37 + t * 11 + (t % 5) * 3) % 500);
  return p;
}

// `n` prompts: one common prefix of `common_len` ids, then prompt i's own tail of tail_len(i) ids.
inline std::vector<std::vector<int32_t>> shared_prefix_prompts(int common_len, int n,
                                                               const std::function<int(int)>& tail_len) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> common = prompt_of(99, common_len);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = common, tail = prompt_of(i, tail_len(i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace mlaserve::testing
