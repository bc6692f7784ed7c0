// Whether a pointer can be read and written in 16-byte pieces: the test every vectorized launch
// makes before it picks its 16-byte kernel over the scalar one.
#pragma once

#include <cstdint>

namespace mlaserve::cuda {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace mlaserve::cuda
