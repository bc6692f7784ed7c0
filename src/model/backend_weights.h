// Moves a model's weights to the backend that will run it (CUDA: device copies, FP8 blocks kept as
// the backend's to_backend decides; the CPU keeps the mapped checkpoint views as they are).
#pragma once

#include "kernels/ops.h"
#include "weights/model_weights.h"

namespace mlaserve {

void move_weights_to_backend(ModelWeights& weights, Backend& backend);
// The index tensors of a batch, on the backend.
struct ForwardBatch;
ForwardBatch batch_to_backend(const ForwardBatch& batch, Backend& backend);

}  // namespace mlaserve
