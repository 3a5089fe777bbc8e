// Element types and reduce operations that collectives understand, and the two 16-bit
// floating-point types (bfloat16, float16) as plain value types. Nothing here blocks or
// throws.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "replicator/device.h"

namespace replicator {

enum class DType : std::uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8 };

enum class ReduceOp : std::uint8_t { kSum, kMean, kMin, kMax, kProd };

std::size_t dtype_size(DType dtype);
std::string_view to_string(DType dtype);
std::string_view to_string(ReduceOp op);

// bfloat16: the top 16 bits of an IEEE f32. Conversion from float rounds to nearest even;
// NaN stays NaN.
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return std::bit_cast<float>(std::uint32_t{bits} << 16); }
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }

  static std::uint16_t from_float(float value) {
    const auto u = std::bit_cast<std::uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

// float16: IEEE 754 binary16. Conversion from float rounds to nearest even, overflows to
// infinity, keeps subnormals; a NaN becomes a quiet NaN with the top of its payload.
struct float16 {
  std::uint16_t bits = 0;

  float16() = default;
  explicit float16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return to_float(bits); }
  friend bool operator==(float16 a, float16 b) { return a.bits == b.bits; }

  static std::uint16_t from_float(float value);
  static float to_float(std::uint16_t bits);
};

template <typename T>
inline constexpr bool kIsElement =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
    std::is_same_v<T, float16> || std::is_same_v<T, std::int32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint8_t>;

template <typename T>
constexpr DType dtype_of() {
  static_assert(kIsElement<T>, "replicator collectives take f32, f64, bf16, f16, i32, i64, u8");
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, bfloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, float16>) return DType::kF16;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, std::uint8_t>) return DType::kU8;
}

// An untyped view of `count` elements of `dtype` at `data` on `device` (device.h): what the
// fused collectives take.
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::kF32;
  Device device{};

  template <typename T>
  static Buffer of(std::span<T> span) {
    using E = std::remove_const_t<T>;
    return Buffer{const_cast<E*>(span.data()), span.size(), dtype_of<E>()};
  }
  std::size_t bytes() const { return count * dtype_size(dtype); }
};

}  // namespace replicator
