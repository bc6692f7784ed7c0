// Block-scaled e4m3 quantization of a weight matrix, the way DeepSeek-V3's FP8 checkpoints are
// made: one fp32 scale per block_n x block_k block, scale = amax / 448 (1 for an all-zero block)
// and code = e4m3(w / scale), so the block's largest magnitude maps to 448. The scales are the
// checkpoints' weight_scale_inv: w ~= e4m3_value(code) * scale.
#pragma once

#include "kernels/linear_weight.h"

namespace mlaserve {

// w: a 2-D host tensor of any float dtype. Returns an F8_E4M3 weight with its scale_inv.
LinearWeight quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k);

}  // namespace mlaserve
