#include "config/quantization_flags.h"

#include "common/error.h"

namespace mlaserve {

void check_quantization_flag(const std::string& q) {
  MLA_CHECK(q.empty() || q == "fp8",
            "--quantization {}: only fp8 is supported (e4m3 weights with one scale per 128x128 block, as in "
            "DeepSeek-V3's FP8 checkpoints; FP8 checkpoints need no flag)",
            q);
}

void check_kv_cache_dtype_flag(const std::string& kv) {
  MLA_CHECK(kv != "fp8_e5m2",
            "--kv-cache-dtype fp8_e5m2 is not supported: the FP8 KV cache is e4m3 (--kv-cache-dtype fp8_e4m3)");
  MLA_CHECK(kv == "auto" || kv == "fp8_e4m3",
            "--kv-cache-dtype {}: expected auto (the activation dtype: fp32 on the CPU, bf16 on CUDA) or fp8_e4m3", kv);
}

DType kv_cache_dtype_for(const std::string& kv, DType activation_dtype) {
  return kv == "fp8_e4m3" ? DType::F8_E4M3 : activation_dtype;
}

}  // namespace mlaserve
