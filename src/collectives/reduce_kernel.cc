#include "src/collectives/reduce_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "src/collectives/half_convert.h"
#include "src/engines/device/element_reduce.h"

namespace replicator::detail {
namespace {

template <typename T>
struct AccumulatorOf {
  using type = T;
};
template <>
struct AccumulatorOf<bfloat16> {
  using type = float;
};
template <>
struct AccumulatorOf<float16> {
  using type = float;
};
// The mean of narrow integers sums in i64, so it does not wrap before the division.
template <typename T, ReduceOp Op>
using Acc = std::conditional_t<Op == ReduceOp::kMean && std::is_integral_v<T> && sizeof(T) < 8,
                               std::int64_t, typename AccumulatorOf<T>::type>;

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// Block conversions between the element type and its accumulator.
template <typename A, typename T>
inline void load_block(const T* __restrict x, A* __restrict out, std::size_t m) {
  if constexpr (kIsHalf<T>) {
    to_float(x, out, m);
  } else {
    for (std::size_t i = 0; i < m; ++i) out[i] = static_cast<A>(x[i]);
  }
}

template <typename T, typename A>
inline void store_block(const A* __restrict in, T* __restrict out, std::size_t m) {
  if constexpr (kIsHalf<T>) {
    from_float(in, out, m);
  } else if constexpr (std::is_same_v<T, A>) {
    std::memcpy(out, in, m * sizeof(T));
  } else {
    for (std::size_t i = 0; i < m; ++i) out[i] = static_cast<T>(in[i]);
  }
}

// memcpy with non-temporal stores (a plain memcpy where the platform has none); the caller
// fences once it has streamed everything.
inline void stream_copy(void* dst, const void* src, std::size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(d) % 16;
  const std::size_t head = std::min(bytes, misaligned == 0 ? 0 : 16 - misaligned);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  for (; bytes >= 16; bytes -= 16, d += 16, s += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// One combine, as the device kernels do it (element_reduce.h): integers wrap, NaN wins min
// and max.
using elementwise::combine;

// dst[i] = a[i] op b[i], divided by `divisor` when `divide`. dst may be a or b itself
// (the same elements): no element is written before it is read, so ivdep holds.
template <ReduceOp Op, typename A>
inline void combine_block(A* dst, const A* a, const A* b, std::size_t m, bool divide,
                          std::size_t divisor) {
  if (divide) {
    const auto d = static_cast<A>(divisor);
#pragma GCC ivdep
    for (std::size_t i = 0; i < m; ++i) dst[i] = static_cast<A>(combine<Op>(a[i], b[i]) / d);
    return;
  }
#pragma GCC ivdep
  for (std::size_t i = 0; i < m; ++i) dst[i] = combine<Op>(a[i], b[i]);
}

// The binary-counter stack holds pointers: a leaf already in the accumulator type is read
// where it lies (no copy into the scratch), and the last combine writes straight into the
// first output when that holds accumulators (the mean's division fused into it), unless
// the outputs are streamed: then each block's result is streamed from the scratch. Each
// block is read whole before any output of that block is written.
template <typename T, ReduceOp Op, bool kInPartial, bool kOutPartial>
void tree_reduce_typed(const ReduceCall& c, ReduceScratch& scratch) {
  using A = Acc<T, Op>;
  using In = std::conditional_t<kInPartial, A, T>;
  using Out = std::conditional_t<kOutPartial, A, T>;
  constexpr bool kLeavesInPlace = std::is_same_v<In, A>;
  constexpr bool kSameOut = std::is_same_v<Out, A>;
  const bool direct_out = kSameOut && !c.streaming;
  constexpr bool kDivide = Op == ReduceOp::kMean && !kOutPartial;
  constexpr std::size_t kBlock = ReduceScratch::kBlock;
  A* const levels = scratch.levels<A>();
  const A* stack[64];
  int sizes[64];
  for (std::size_t base = 0; base < c.count; base += kBlock) {
    const std::size_t m = std::min(kBlock, c.count - base);
    A* const out0 = direct_out ? static_cast<A*>(c.outputs[0]) + base : nullptr;
    int depth = 0;
    bool written = false;  // the last combine wrote out0
    bool divided = false;  // the last combine divided (kMean)
    const auto merge = [&](bool last) {
      A* dst = levels + static_cast<std::size_t>(depth - 2) * kBlock;
      if (direct_out && last) {
        dst = out0;
        written = true;
      }
      combine_block<Op>(dst, stack[depth - 2], stack[depth - 1], m, kDivide && last, c.divisor);
      divided = kDivide && last;
      stack[depth - 2] = dst;
      --depth;
    };
    for (int j = 0; j < c.n; ++j) {
      const In* x = static_cast<const In*>(c.inputs[j]) + base;
      if constexpr (kLeavesInPlace) {
        stack[depth] = x;
      } else {
        A* tmp = levels + static_cast<std::size_t>(depth) * kBlock;
        load_block(x, tmp, m);
        stack[depth] = tmp;
      }
      sizes[depth++] = c.sizes ? c.sizes[j] : 1;
      while (depth >= 2 && sizes[depth - 1] == sizes[depth - 2]) {
        sizes[depth - 2] *= 2;
        merge(j == c.n - 1 && depth == 2);
      }
    }
    // Leftover subtrees of decreasing size combine right to left.
    // merge() pops one subtree (it lowers depth).
    while (depth >= 2) merge(depth == 2);  // NOLINT(bugprone-infinite-loop)

    if constexpr (kSameOut) {
      if (written) {
        for (int k = 1; k < c.num_outputs; ++k) {
          std::memcpy(static_cast<A*>(c.outputs[k]) + base, out0, m * sizeof(A));
        }
        continue;
      }
    }
    // One input, outputs of another type, or streamed outputs: the result goes through the
    // scratch.
    A* result = levels;
    if (stack[0] != result) std::memcpy(result, stack[0], m * sizeof(A));
    if (kDivide && !divided) {
      const auto d = static_cast<A>(c.divisor);
      for (std::size_t i = 0; i < m; ++i) result[i] = static_cast<A>(result[i] / d);
    }
    if (c.streaming) {
      // The block in its output type (converted into the next scratch block), then streamed.
      const void* block = result;
      if constexpr (!kSameOut) {
        T* converted = reinterpret_cast<T*>(levels + kBlock);
        store_block(result, converted, m);
        block = converted;
      }
      for (int k = 0; k < c.num_outputs; ++k) {
        stream_copy(static_cast<Out*>(c.outputs[k]) + base, block, m * sizeof(Out));
      }
      continue;
    }
    for (int k = 0; k < c.num_outputs; ++k) {
      if constexpr (kOutPartial) {
        std::memcpy(static_cast<A*>(c.outputs[k]) + base, result, m * sizeof(A));
      } else {
        store_block(result, static_cast<T*>(c.outputs[k]) + base, m);
      }
    }
  }
  if (c.streaming) stream_fence();
}

template <typename T, ReduceOp Op>
void dispatch_partial(const ReduceCall& c, ReduceScratch& scratch) {
  if (c.inputs_partial) {
    if (c.outputs_partial) return tree_reduce_typed<T, Op, true, true>(c, scratch);
    return tree_reduce_typed<T, Op, true, false>(c, scratch);
  }
  if (c.outputs_partial) return tree_reduce_typed<T, Op, false, true>(c, scratch);
  return tree_reduce_typed<T, Op, false, false>(c, scratch);
}

std::size_t scratch_bytes(int max_inputs) {
  // A binary-counter stack over n inputs holds at most bit_width(n) + 1 blocks.
  const auto levels = std::bit_width(static_cast<unsigned>(std::max(max_inputs, 1))) + 1;
  return static_cast<std::size_t>(levels) * ReduceScratch::kBlock * sizeof(double);
}

}  // namespace

ReduceScratch::ReduceScratch(int max_inputs)
    : max_inputs_(max_inputs), memory_(new std::byte[scratch_bytes(max_inputs)]) {
  std::memset(memory_.get(), 0, scratch_bytes(max_inputs));  // fault pages in now, once
}

void tree_reduce(const ReduceCall& c, ReduceScratch& scratch) {
  if (c.count == 0 || c.num_outputs == 0) return;
  elementwise::dispatch(c.dtype, c.op, [&]<typename Kind>(Kind) {
    dispatch_partial<typename Kind::Type, Kind::kOp>(c, scratch);
  });
}

void tree_reduce(ReduceOp op, DType dtype, const void* const* inputs, int n, void* const* outputs,
                 int num_outputs, std::size_t count, std::size_t divisor, ReduceScratch& scratch) {
  tree_reduce({.op = op,
               .dtype = dtype,
               .inputs = inputs,
               .n = n,
               .outputs = outputs,
               .num_outputs = num_outputs,
               .count = count,
               .divisor = divisor},
              scratch);
}

std::size_t partial_size(DType dtype, ReduceOp op) {
  std::size_t size = 0;
  elementwise::dispatch(
      dtype, op, [&]<typename Kind>(Kind) { size = sizeof(Acc<typename Kind::Type, Kind::kOp>); });
  return size;
}

}  // namespace replicator::detail
