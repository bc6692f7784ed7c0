// --quantization and --kv-cache-dtype, shared by serve and generate: the values SGLang accepts
// that mlaserve can run, checked once with a reason for each refusal.
#pragma once

#include <string>

#include "common/dtype.h"

namespace mlaserve {

// "" (weights as stored) or "fp8" (linear weights quantized to e4m3 in 128x128 blocks at load).
void check_quantization_flag(const std::string& quantization);
// "auto" (the backend's activation dtype) or "fp8_e4m3".
void check_kv_cache_dtype_flag(const std::string& kv_cache_dtype);
// The KV pool's element type for a checked --kv-cache-dtype.
DType kv_cache_dtype_for(const std::string& kv_cache_dtype, DType activation_dtype);

}  // namespace mlaserve
