// Tests of the element types: the two 16-bit floats (exact round trips, round to nearest
// even, overflow, NaN, f16 subnormals), dtype_size, dtype_of, to_string and Buffer.
//
// Rounding is checked exhaustively against the definition: for every pair of neighbouring
// representable 16-bit values a < b, the f32 midpoint (exact in f32, since a 16-bit float
// has at most 11 significant bits and the midpoint needs one more) rounds to the one of a, b
// whose last mantissa bit is 0, and the f32 values just below and just above the midpoint
// round to a and b.
#include "replicator/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace replicator {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float f32_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits_of(float value) { return std::bit_cast<std::uint32_t>(value); }

// ---- dtype_size, dtype_of, to_string, Buffer -------------------------------------------

TEST(DTypeTest, SizesAreThoseOfTheElementTypes) {
  EXPECT_EQ(dtype_size(DType::kF32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::kF64), sizeof(double));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), sizeof(std::int32_t));
  EXPECT_EQ(dtype_size(DType::kI64), sizeof(std::int64_t));
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  EXPECT_EQ(sizeof(bfloat16), 2u);
  EXPECT_EQ(sizeof(float16), 2u);
}

TEST(DTypeTest, DTypeOfMapsEachElementType) {
  static_assert(dtype_of<float>() == DType::kF32);
  static_assert(dtype_of<double>() == DType::kF64);
  static_assert(dtype_of<bfloat16>() == DType::kBF16);
  static_assert(dtype_of<float16>() == DType::kF16);
  static_assert(dtype_of<std::int32_t>() == DType::kI32);
  static_assert(dtype_of<std::int64_t>() == DType::kI64);
  static_assert(dtype_of<std::uint8_t>() == DType::kU8);
  static_assert(!kIsElement<bool>);
  static_assert(!kIsElement<std::int8_t>);
  static_assert(!kIsElement<std::uint32_t>);
  SUCCEED();
}

TEST(DTypeTest, ToStringNamesEveryDTypeAndReduceOp) {
  EXPECT_EQ(to_string(DType::kF32), "f32");
  EXPECT_EQ(to_string(DType::kF64), "f64");
  EXPECT_EQ(to_string(DType::kBF16), "bf16");
  EXPECT_EQ(to_string(DType::kF16), "f16");
  EXPECT_EQ(to_string(DType::kI32), "i32");
  EXPECT_EQ(to_string(DType::kI64), "i64");
  EXPECT_EQ(to_string(DType::kU8), "u8");
  EXPECT_EQ(to_string(ReduceOp::kSum), "sum");
  EXPECT_EQ(to_string(ReduceOp::kMean), "mean");
  EXPECT_EQ(to_string(ReduceOp::kMin), "min");
  EXPECT_EQ(to_string(ReduceOp::kMax), "max");
  EXPECT_EQ(to_string(ReduceOp::kProd), "prod");
}

TEST(DTypeTest, BufferOfSpanRecordsPointerCountAndDType) {
  std::vector<double> data(5);
  const Buffer b = Buffer::of(std::span<double>(data));
  EXPECT_EQ(b.data, data.data());
  EXPECT_EQ(b.count, 5u);
  EXPECT_EQ(b.dtype, DType::kF64);
  EXPECT_EQ(b.bytes(), 40u);
  std::vector<bfloat16> half(3);
  const Buffer c = Buffer::of(std::span<bfloat16>(half));
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.bytes(), 6u);
  EXPECT_EQ(Buffer{}.bytes(), 0u);
}

// ---- bfloat16 ---------------------------------------------------------------------------

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(bfloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(bfloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(bfloat16(0.5f).bits, 0x3f00);
  EXPECT_EQ(bfloat16(256.0f).bits, 0x4380);
  EXPECT_EQ(static_cast<float>(bfloat16(3.0f)), 3.0f);
  EXPECT_EQ(bfloat16(kInf).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-kInf).bits, 0xff80);
}

// Every bf16 value is an f32 value (its top 16 bits), so bf16 -> f32 -> bf16 is the
// identity on every bit pattern but NaN, which must stay NaN.
TEST(BFloat16Test, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    bfloat16 x;
    x.bits = static_cast<std::uint16_t>(bits);
    const float f = static_cast<float>(x);
    ASSERT_EQ(bits_of(f), bits << 16) << std::hex << bits;
    const bool is_nan = (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(static_cast<float>(bfloat16(f)))) << std::hex << bits;
    } else {
      ASSERT_EQ(bfloat16(f).bits, bits) << std::hex << bits;
    }
  }
}

// For consecutive non-negative finite bf16 patterns a, a+1 (and the largest finite value
// with infinity, 0x7f80, as the next step up), the f32 midpoint has bits (a << 16) | 0x8000.
TEST(BFloat16Test, RoundsToNearestEvenEverywhere) {
  for (std::uint32_t a = 0; a < 0x7f80; ++a) {
    const std::uint32_t mid = (a << 16) | 0x8000u;
    const std::uint32_t even = (a & 1u) ? a + 1 : a;
    for (const std::uint32_t sign : {0u, 0x80000000u}) {
      const auto s16 = static_cast<std::uint16_t>(sign >> 16);
      ASSERT_EQ(bfloat16(f32_from_bits(sign | mid)).bits, s16 | even) << std::hex << a;
      ASSERT_EQ(bfloat16(f32_from_bits(sign | (mid - 1))).bits, s16 | a) << std::hex << a;
      ASSERT_EQ(bfloat16(f32_from_bits(sign | (mid + 1))).bits, s16 | (a + 1)) << std::hex << a;
    }
  }
}

TEST(BFloat16Test, SpecificTiesRoundToEven) {
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7 (odd): rounds down.
  EXPECT_EQ(bfloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(bfloat16(1.0f + 0x3p-8f).bits, 0x3f82);
  // 257 lies halfway between 256 and 258; 256 is even.
  EXPECT_EQ(static_cast<float>(bfloat16(257.0f)), 256.0f);
  EXPECT_EQ(static_cast<float>(bfloat16(259.0f)), 260.0f);
}

TEST(BFloat16Test, LargeFloatsOverflowToInfinity) {
  // FLT_MAX lies above the midpoint between the largest bf16 (0x7f7f) and 2^128.
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-std::numeric_limits<float>::max()).bits, 0xff80);
  // Just below that midpoint stays finite.
  EXPECT_EQ(bfloat16(f32_from_bits(0x7f7f7fffu)).bits, 0x7f7f);
}

TEST(BFloat16Test, NaNStaysNaN) {
  // A NaN whose payload is only in the low 16 bits would become infinity if truncated.
  for (const std::uint32_t nan :
       {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const bfloat16 x(f32_from_bits(nan));
    EXPECT_TRUE(std::isnan(static_cast<float>(x))) << std::hex << nan;
    EXPECT_EQ(x.bits & 0x8000u, (nan >> 16) & 0x8000u) << "sign kept for " << std::hex << nan;
  }
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
}

TEST(BFloat16Test, SubnormalFloatsKeepTheirTopBits) {
  // bf16 has f32's exponent range, so an f32 subnormal rounds like any other value.
  EXPECT_EQ(bfloat16(f32_from_bits(0x00010000u)).bits, 0x0001);
  EXPECT_EQ(bfloat16(f32_from_bits(0x00007fffu)).bits, 0x0000);
  EXPECT_EQ(bfloat16(f32_from_bits(0x00018000u)).bits, 0x0002);  // tie, 1 is odd
  EXPECT_EQ(bfloat16(f32_from_bits(0x00008000u)).bits, 0x0000);  // tie, 0 is even
}

TEST(BFloat16Test, EqualityComparesBits) {
  EXPECT_TRUE(bfloat16(1.5f) == bfloat16(1.5f));
  EXPECT_FALSE(bfloat16(1.5f) == bfloat16(1.0f));
  EXPECT_FALSE(bfloat16(0.0f) == bfloat16(-0.0f));  // bitwise, unlike float ==
}

// ---- float16 ----------------------------------------------------------------------------

// The value of an f16 bit pattern, computed from the IEEE 754 binary16 definition.
double f16_value(std::uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(float16(0.0f).bits, 0x0000);
  EXPECT_EQ(float16(-0.0f).bits, 0x8000);
  EXPECT_EQ(float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float16(0.5f).bits, 0x3800);
  EXPECT_EQ(float16(65504.0f).bits, 0x7bff);    // largest finite
  EXPECT_EQ(float16(0x1p-14f).bits, 0x0400);    // smallest normal
  EXPECT_EQ(float16(0x1p-24f).bits, 0x0001);    // smallest subnormal
  EXPECT_EQ(float16(0x3ffp-24f).bits, 0x03ff);  // largest subnormal
  EXPECT_EQ(float16(kInf).bits, 0x7c00);
  EXPECT_EQ(float16(-kInf).bits, 0xfc00);
}

TEST(Float16Test, ToFloatMatchesTheDefinitionForEveryBitPattern) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const double want = f16_value(b);
    const float got = float16::to_float(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), (bits & 0x8000u) != 0) << std::hex << bits;
    }
  }
}

TEST(Float16Test, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float16 x;
    x.bits = static_cast<std::uint16_t>(bits);
    const float f = static_cast<float>(x);
    if (std::isnan(f)) {
      const float16 back(f);
      ASSERT_TRUE(std::isnan(static_cast<float>(back))) << std::hex << bits;
    } else {
      ASSERT_EQ(float16(f).bits, bits) << std::hex << bits;
    }
  }
}

// Neighbours a, a+1 over all non-negative finite patterns, subnormals included; above the
// largest finite value (0x7bff = 65504) the next step is 65536, whose midpoint 65520 must
// round to infinity (0x7c00, even mantissa), as IEEE round-to-nearest-even says.
TEST(Float16Test, RoundsToNearestEvenEverywhere) {
  for (std::uint32_t a = 0; a < 0x7c00; ++a) {
    const double lo = f16_value(static_cast<std::uint16_t>(a));
    const double hi = a == 0x7bff ? 65536.0 : f16_value(static_cast<std::uint16_t>(a + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint must be exact in f32";
    const std::uint32_t even = (a & 1u) ? a + 1 : a;
    for (const float sign : {1.0f, -1.0f}) {
      const std::uint32_t s = sign < 0 ? 0x8000u : 0u;
      const float m = sign * mid;
      ASSERT_EQ(float16(m).bits, s | even) << std::hex << a;
      ASSERT_EQ(float16(std::nextafter(m, 0.0f)).bits, s | a) << std::hex << a;
      ASSERT_EQ(float16(std::nextafter(m, sign * kInf)).bits, s | (a + 1)) << std::hex << a;
    }
  }
}

TEST(Float16Test, SpecificTiesRoundToEven) {
  EXPECT_EQ(float16(1.0f + 0x1p-11f).bits, 0x3c00);  // between 0x3c00 (even) and 0x3c01
  EXPECT_EQ(float16(1.0f + 0x3p-11f).bits, 0x3c02);  // between 0x3c01 and 0x3c02 (even)
  EXPECT_EQ(static_cast<float>(float16(2049.0f)), 2048.0f);
  EXPECT_EQ(static_cast<float>(float16(2051.0f)), 2052.0f);
}

TEST(Float16Test, OverflowGoesToInfinity) {
  EXPECT_EQ(float16(65519.0f).bits, 0x7bff);  // below the midpoint 65520
  EXPECT_EQ(float16(65520.0f).bits, 0x7c00);  // the midpoint: ties to even = infinity
  EXPECT_EQ(float16(65536.0f).bits, 0x7c00);
  EXPECT_EQ(float16(1e6f).bits, 0x7c00);
  EXPECT_EQ(float16(-1e6f).bits, 0xfc00);
  EXPECT_EQ(float16(std::numeric_limits<float>::max()).bits, 0x7c00);
}

TEST(Float16Test, SubnormalsAndUnderflow) {
  // Subnormal f16 values are multiples of 2^-24.
  EXPECT_EQ(float16(0x1p-25f).bits, 0x0000);    // half the smallest: tie, 0 is even
  EXPECT_EQ(float16(0x1.8p-25f).bits, 0x0001);  // 0.75 * 2^-24 rounds up
  EXPECT_EQ(float16(0x1p-26f).bits, 0x0000);    // a quarter: rounds down
  EXPECT_EQ(float16(0x3p-25f).bits, 0x0002);    // 1.5 * 2^-24: tie, 2 is even
  EXPECT_EQ(float16(0x5p-25f).bits, 0x0002);    // 2.5 * 2^-24: tie, 2 is even
  EXPECT_EQ(float16(-0x1p-24f).bits, 0x8001);
  EXPECT_EQ(float16(-0x1p-26f).bits, 0x8000);  // underflow keeps the sign
  // 1023.5 * 2^-24 lies halfway between the largest subnormal and the smallest normal.
  EXPECT_EQ(float16(0x7ffp-25f).bits, 0x0400);
  EXPECT_EQ(float16(0x1p-30f).bits, 0x0000);
  EXPECT_EQ(float16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(float16::to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(float16::to_float(0x03ff), 0x3ffp-24f);
  EXPECT_EQ(float16::to_float(0x8001), -0x1p-24f);
}

TEST(Float16Test, NaNStaysNaN) {
  for (const std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const float16 x(f32_from_bits(nan));
    EXPECT_TRUE(std::isnan(static_cast<float>(x))) << std::hex << nan;
    EXPECT_EQ(x.bits & 0x7c00u, 0x7c00u);
    EXPECT_NE(x.bits & 0x3ffu, 0u);
    EXPECT_EQ(x.bits & 0x8000u, (nan >> 16) & 0x8000u) << "sign kept for " << std::hex << nan;
  }
  EXPECT_TRUE(std::isnan(float16::to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(float16::to_float(0x7c01)));
  EXPECT_TRUE(std::isnan(float16::to_float(0xfc01)));
  EXPECT_TRUE(std::isinf(float16::to_float(0x7c00)));
}

}  // namespace
}  // namespace replicator

#include <random>

#include "src/collectives/half_convert.h"

namespace replicator {
namespace {

// The vectorised bulk conversions must give the same bits as the scalar ones in dtype.h,
// for every kind of value (ties, subnormals, infinities, overflow); NaN stays NaN, and an
// f16 NaN keeps the top of the f32 payload and is quiet either way (as F16C converts it).
TEST(HalfConvertTest, BulkConversionsMatchScalarOnes) {
  std::mt19937 rng(7);
  std::vector<float> in;
  for (int i = 0; i < 20000; ++i)
    in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (float v : {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3.0e38f, 1.00390625f,
                  1.01171875f, std::numeric_limits<float>::infinity()}) {
    in.push_back(v);
    in.push_back(-v);
  }
  std::vector<bfloat16> b(in.size());
  std::vector<float16> h(in.size());
  detail::from_float(in.data(), b.data(), in.size());
  detail::from_float(in.data(), h.data(), in.size());
  std::vector<float> back_b(in.size()), back_h(in.size());
  detail::to_float(b.data(), back_b.data(), b.size());
  detail::to_float(h.data(), back_h.data(), h.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(b[i]))) << i;
      EXPECT_TRUE(std::isnan(static_cast<float>(h[i]))) << i;
      ASSERT_EQ(h[i].bits, float16(in[i]).bits)
          << "f16 of NaN " << std::hex << std::bit_cast<std::uint32_t>(in[i]);
      continue;
    }
    ASSERT_EQ(b[i].bits, bfloat16(in[i]).bits) << "bf16 of " << in[i];
    ASSERT_EQ(h[i].bits, float16(in[i]).bits) << "f16 of " << in[i];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back_b[i]),
              std::bit_cast<std::uint32_t>(static_cast<float>(b[i])));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back_h[i]),
              std::bit_cast<std::uint32_t>(static_cast<float>(h[i])));
  }
}

}  // namespace
}  // namespace replicator
