#include "replicator/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace replicator {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProd:
      return "prod";
  }
  return "?";
}

// binary32 -> binary16 with round to nearest even.
std::uint16_t float16::from_float(float value) {
  const auto u = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  // NaN: quiet, with the top of its payload (as the F16C instructions convert it).
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow, inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in binary16: value = mantissa * 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const int exp = static_cast<int>(abs >> 23);
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - exp;  // 14..24
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rest = mant & ((1u << shift) - 1);
    std::uint32_t result = mant >> shift;
    if (rest > half || (rest == half && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  const std::uint32_t rebased = abs - 0x38000000u;  // exponent bias 127 -> 15
  const std::uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

float float16::to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace replicator
