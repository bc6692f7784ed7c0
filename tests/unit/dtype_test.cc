// Conversions checked against values computed here from the format definitions, not from the
// code under test: e4m3 (OCP e4m3fn), bf16 and f16, including round-to-nearest-even ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/dtype.h"

namespace mlaserve {
namespace {

// OCP e4m3fn by definition: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, subnormals at
// exponent 0, S.1111.111 is NaN, no infinities.
double e4m3_reference(int code) {
  int sign = code >> 7, exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  double mag = exp == 0 ? (mant / 8.0) * std::pow(2.0, -6) : (1 + mant / 8.0) * std::pow(2.0, exp - 7);
  return sign ? -mag : mag;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DType, NamesAndSizes) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::I32, DType::I64, DType::U8})
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_FALSE(dtype_from_name("F64").has_value());
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
}

TEST(DType, E4m3DecodesAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    double want = e4m3_reference(c);
    float got = e4m3_to_f32(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(double(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;
    }
  }
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
}

TEST(DType, E4m3EncodeRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7f || c == 0xff) continue;
    EXPECT_EQ(f32_to_e4m3(float(e4m3_reference(c))), c) << "code " << c;
  }
}

TEST(DType, E4m3EncodeRoundsToNearestEven) {
  // Between neighbours c and c+1 (codes grow with magnitude, and the code's low bit is the
  // mantissa's low bit, also across an exponent step), the midpoint goes to the even code.
  for (int c = 0; c < 0x7e; ++c) {
    for (int sign : {0, 0x80}) {
      float lo = float(e4m3_reference(sign | c)), hi = float(e4m3_reference(sign | (c + 1)));
      float mid = (lo + hi) / 2;
      int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(f32_to_e4m3(mid), sign | even) << "between codes " << c << " and " << c + 1;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, lo)), sign | c) << "just below mid of " << c;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, hi)), sign | (c + 1)) << "just above mid of " << c;
    }
  }
}

TEST(DType, E4m3EncodeSaturatesAndKeepsNaN) {
  for (float v : {448.0f, 448.5f, 464.0f, 500.0f, 1e6f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_e4m3(v), 0x7e) << v;
    EXPECT_EQ(f32_to_e4m3(-v), 0xfe) << -v;
  }
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);  // far below the smallest subnormal
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, Bf16RoundTripAndRounding) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float f = bf16_to_f32(uint16_t(c));
    EXPECT_EQ(bits_of(f), c << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), c) << "code " << c;
    }
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  EXPECT_EQ(f32_to_bf16(1 + ulp / 2), 0x3f80);                          // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1 + 3 * ulp / 2), 0x3f82);                      // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1 + ulp / 2 + std::ldexp(1.0f, -20)), 0x3f81);  // past the tie
  EXPECT_EQ(f32_to_bf16(1 + ulp / 2 - std::ldexp(1.0f, -20)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripAndRounding) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float f = f16_to_f32(uint16_t(c));
    if (std::isnan(f)) {
      EXPECT_EQ(c & 0x7c00, 0x7c00u);
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), c) << "code " << c;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  const float ulp = std::ldexp(1.0f, -10);  // f16 spacing in [1, 2)
  EXPECT_EQ(f32_to_f16(1 + ulp / 2), 0x3c00);                           // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1 + 3 * ulp / 2), 0x3c02);                       // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1 + ulp / 2 + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie with 2^16 (even) -> inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // half the smallest subnormal: tie -> 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 subnormal steps: tie -> even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) * 1.01f), 0x0001);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, LoadStoreAsF32) {
  uint8_t buf[16] = {};
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3}) {
    store_from_f32(buf, t, 1, -1.5f);
    EXPECT_EQ(load_as_f32(buf, t, 1), -1.5f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace mlaserve
