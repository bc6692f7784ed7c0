// Element types of tensors and their conversions. 16-bit and 8-bit floats are stored as raw
// bits (uint16_t / uint8_t) so that host code needs no vendor headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mlaserve {

enum class DType : uint8_t { F32, BF16, F16, F8_E4M3, I32, I64, U8 };

size_t dtype_size(DType t);
// Safetensors spelling: "F32", "BF16", "F16", "F8_E4M3", "I32", "I64", "U8".
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
bool is_float(DType t);

float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);  // round to nearest even; NaN stays NaN
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
// OCP e4m3fn: bias 7, no infinities, 0x7f / 0xff are NaN, max finite 448.
float e4m3_to_f32(uint8_t bits);
uint8_t f32_to_e4m3(float value);  // round to nearest even, saturating to +-448
constexpr float kE4m3Max = 448.0f;
// The least amax a quantization group's scale is made from: an all-zero group gets zeros, not NaNs.
constexpr float kFp8MinAmax = 1e-10f;

// Reads element i of a float tensor of type t as fp32.
float load_as_f32(const void* data, DType t, size_t i);
void store_from_f32(void* data, DType t, size_t i, float value);

}  // namespace mlaserve
