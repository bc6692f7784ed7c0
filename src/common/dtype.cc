#include "common/dtype.h"

#include <cmath>
#include <cstring>

#include "common/error.h"

namespace mlaserve {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::F8_E4M3: case DType::U8: return 1;
    case DType::I64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::I32, DType::I64, DType::U8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F8_E4M3;
}

float bf16_to_f32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if (std::isnan(value)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    f = mant ? NAN : INFINITY;
  } else {
    f = std::ldexp(float(mant | 0x400), int(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds |v| to a float with `mant_bits` explicit mantissa bits, exponent bias `bias`, and
// returns the code (exponent << mant_bits | mantissa). Subnormals included; no overflow handling.
static uint32_t encode_small_float(float v, int mant_bits, int bias) {
  int e;
  std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  int exp_field = e - 1 + bias;
  int scale_exp = exp_field >= 1 ? (e - 1 - mant_bits) : (1 - bias - mant_bits);
  float q = std::nearbyint(std::ldexp(v, -scale_exp));  // round half to even (default mode)
  uint32_t code = uint32_t(q);
  if (exp_field >= 1) {
    // q in [2^mant, 2^(mant+1)]; carry into the exponent when rounding reached the top.
    return (uint32_t(exp_field) << mant_bits) + (code - (1u << mant_bits));
  }
  return code;  // subnormal (a carry to 2^mant is the smallest normal's code, as it should be)
}

uint16_t f32_to_f16(float value) {
  uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  float a = std::fabs(value);
  if (std::isnan(value)) return 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a == 0) return sign;
  return sign | uint16_t(encode_small_float(a, 10, 15));
}

float e4m3_to_f32(uint8_t bits) {
  uint32_t exp = (bits >> 3) & 0xf, mant = bits & 0x7;
  if (exp == 0xf && mant == 0x7) return NAN;
  float f = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(float(mant | 8), int(exp) - 10);
  return (bits & 0x80) ? -f : f;
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float a = std::fabs(value);
  if (a >= kE4m3Max) return sign | 0x7e;
  if (a == 0) return sign;
  return sign | uint8_t(encode_small_float(a, 3, 7));
}

float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F8_E4M3: return e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::I32: return float(static_cast<const int32_t*>(data)[i]);
    case DType::I64: return float(static_cast<const int64_t*>(data)[i]);
    case DType::U8: return float(static_cast<const uint8_t*>(data)[i]);
  }
  return 0;
}

void store_from_f32(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(data)[i] = v; return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
    case DType::F8_E4M3: static_cast<uint8_t*>(data)[i] = f32_to_e4m3(v); return;
    case DType::I32: static_cast<int32_t*>(data)[i] = int32_t(v); return;
    case DType::I64: static_cast<int64_t*>(data)[i] = int64_t(v); return;
    case DType::U8: static_cast<uint8_t*>(data)[i] = uint8_t(v); return;
  }
}

}  // namespace mlaserve
