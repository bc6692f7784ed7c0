// Counter-based random numbers: the value for (seed, counter) never depends on call order, so
// sampling and dummy weights are reproducible across threads, batches and backends.
#pragma once

#include <cmath>
#include <cstdint>

// These also run in device code (the CUDA sampler and dummy-weight fill draw the same numbers).
#ifdef __CUDACC__
#define MLASERVE_HOST_DEVICE __host__ __device__
#else
#define MLASERVE_HOST_DEVICE
#endif

namespace mlaserve {

MLASERVE_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

MLASERVE_HOST_DEVICE inline uint64_t hash64(uint64_t seed, uint64_t counter) {
  return mix64(mix64(seed) ^ (counter * 0xd1b54a32d192ed03ull));
}

// Uniform in [0, 1).
MLASERVE_HOST_DEVICE inline double uniform01(uint64_t seed, uint64_t counter) {
  return double(hash64(seed, counter) >> 11) * 0x1.0p-53;
}

// Standard normal (Box-Muller on two counter draws). Double precision through the global
// ::sqrt/::log/::cos, which both host libm and CUDA provide, so host and device agree up to an ulp
// of those functions (rarely visible after the rounding to float).
MLASERVE_HOST_DEVICE inline float normal01(uint64_t seed, uint64_t counter) {
  double u1 = uniform01(seed, 2 * counter) + 0x1.0p-54, u2 = uniform01(seed, 2 * counter + 1);
  return float(::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2));
}

// Stable 64-bit hash of a string (FNV-1a), e.g. to give each named tensor its own stream.
inline uint64_t hash_string(const char* s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s) h = (h ^ uint8_t(*s)) * 0x100000001b3ull;
  return h;
}

}  // namespace mlaserve
