// The arithmetic of a reduction, one element at a time, compiled both for the host and (by
// nvcc) for the GPU: the device kernels and the fake device call the same functions, and the
// host build is tested bit for bit against the CPU kernel (src/collectives/reduce_kernel.h).
//
// reduce_element evaluates the canonical pairwise tree over inputs [0, n) (split at the
// largest power of two below n) with a binary-counter stack, combines as the CPU kernel does
// (NaN wins min and max; integers wrap), accumulates bf16 and f16 in f32, sums the mean of
// i32 and u8 in i64, divides the mean at the last combine, and rounds once to nearest even.
// Nothing here allocates, blocks or throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "replicator/dtype.h"

#if defined(__CUDACC__)
#define REPLICATOR_HD __host__ __device__ __forceinline__
#else
#define REPLICATOR_HD inline
#endif

namespace replicator::detail::elementwise {

// The most inputs reduce_element takes (a binary-counter stack of depth 7 is enough for 64).
inline constexpr int kMaxInputs = 64;

REPLICATOR_HD std::uint32_t bits_of(float value) {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  return u;
}

REPLICATOR_HD float float_of(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

REPLICATOR_HD float bf16_to_float(std::uint16_t bits) {
  return float_of(std::uint32_t{bits} << 16);
}

REPLICATOR_HD std::uint16_t float_to_bf16(float value) {
  const std::uint32_t u = bits_of(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

REPLICATOR_HD float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24, exact
    return sign ? -magnitude : magnitude;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

REPLICATOR_HD std::uint16_t float_to_f16(float value) {
  const std::uint32_t u = bits_of(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return sign;
    const int exp = static_cast<int>(abs >> 23);
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - exp;
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rest = mant & ((1u << shift) - 1);
    std::uint32_t result = mant >> shift;
    if (rest > half || (rest == half && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  const std::uint32_t rebased = abs - 0x38000000u;
  const std::uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

// The element type's storage, its accumulator and the conversions between them.
template <typename T, ReduceOp Op>
struct Element {
  using Storage = T;
  using Acc = std::conditional_t<Op == ReduceOp::kMean && std::is_integral_v<T> && sizeof(T) < 8,
                                 std::int64_t, T>;
  static REPLICATOR_HD Acc load(Storage x) { return static_cast<Acc>(x); }
  static REPLICATOR_HD Storage store(Acc a) { return static_cast<Storage>(a); }
};
template <ReduceOp Op>
struct Element<bfloat16, Op> {
  using Storage = std::uint16_t;
  using Acc = float;
  static REPLICATOR_HD Acc load(Storage x) { return bf16_to_float(x); }
  static REPLICATOR_HD Storage store(Acc a) { return float_to_bf16(a); }
};
template <ReduceOp Op>
struct Element<float16, Op> {
  using Storage = std::uint16_t;
  using Acc = float;
  static REPLICATOR_HD Acc load(Storage x) { return f16_to_float(x); }
  static REPLICATOR_HD Storage store(Acc a) { return float_to_f16(a); }
};

template <ReduceOp Op, typename A>
REPLICATOR_HD A combine(A a, A b) {
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kMean || Op == ReduceOp::kProd) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      if constexpr (Op == ReduceOp::kProd) {
        return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      } else {
        return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      }
    } else if constexpr (Op == ReduceOp::kProd) {
      return a * b;
    } else {
      return a + b;
    }
  } else if constexpr (Op == ReduceOp::kMin) {
    if constexpr (std::is_floating_point_v<A>) {
      return (a < b || a != a) ? a : b;  // NaN wins
    } else {
      return a < b ? a : b;
    }
  } else {
    if constexpr (std::is_floating_point_v<A>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
}

// Element i of the reduction of inputs[0..n) (n <= kMaxInputs), each an array of Storage.
template <typename T, ReduceOp Op>
REPLICATOR_HD typename Element<T, Op>::Storage reduce_element(const void* const* inputs, int n,
                                                              std::size_t i, std::size_t divisor) {
  using E = Element<T, Op>;
  using A = typename E::Acc;
  A stack[8] = {};
  int sizes[8];
  int depth = 0;
  for (int j = 0; j < n; ++j) {
    stack[depth] = E::load(static_cast<const typename E::Storage*>(inputs[j])[i]);
    sizes[depth++] = 1;
    while (depth >= 2 && sizes[depth - 1] == sizes[depth - 2]) {
      stack[depth - 2] = combine<Op>(stack[depth - 2], stack[depth - 1]);
      sizes[depth - 2] *= 2;
      --depth;
    }
  }
  // Leftover subtrees of decreasing size combine right to left.
  while (depth >= 2) {
    stack[depth - 2] = combine<Op>(stack[depth - 2], stack[depth - 1]);
    --depth;
  }
  A result = stack[0];
  if constexpr (Op == ReduceOp::kMean) result = static_cast<A>(result / static_cast<A>(divisor));
  return E::store(result);
}

// Calls f(Typed<T, Op>{}) for the element type of `dtype` and the reduce op `op` (host code:
// what picks the kernel to run).
template <typename T, ReduceOp Op>
struct Typed {
  using Type = T;
  static constexpr ReduceOp kOp = Op;
};

template <typename T, typename F>
void dispatch_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
      return f(Typed<T, ReduceOp::kSum>{});
    case ReduceOp::kMean:
      return f(Typed<T, ReduceOp::kMean>{});
    case ReduceOp::kMin:
      return f(Typed<T, ReduceOp::kMin>{});
    case ReduceOp::kMax:
      return f(Typed<T, ReduceOp::kMax>{});
    case ReduceOp::kProd:
      return f(Typed<T, ReduceOp::kProd>{});
  }
}

template <typename F>
void dispatch(DType dtype, ReduceOp op, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return dispatch_op<float>(op, f);
    case DType::kF64:
      return dispatch_op<double>(op, f);
    case DType::kBF16:
      return dispatch_op<bfloat16>(op, f);
    case DType::kF16:
      return dispatch_op<float16>(op, f);
    case DType::kI32:
      return dispatch_op<std::int32_t>(op, f);
    case DType::kI64:
      return dispatch_op<std::int64_t>(op, f);
    case DType::kU8:
      return dispatch_op<std::uint8_t>(op, f);
  }
}

}  // namespace replicator::detail::elementwise
