// How far a result is from a reference: ||got - want|| / ||want|| over all elements, for the tuners'
// checks of each launch against a reference product (tensors of up to hundreds of millions of
// elements: a 4096-token dense_gate_up product is 151 M).
#pragma once

#include "common/tensor.h"

namespace mlaserve {

// got: a host F32 or BF16 tensor; want: a host F32 tensor of the same shape; both contiguous.
// Infinite where got holds a NaN or infinity. Read in slices over up to `threads` threads (0: the
// machine's), each summing in double.
double relative_l2(const Tensor& got, const Tensor& want, unsigned threads = 0);

}  // namespace mlaserve
