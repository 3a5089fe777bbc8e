// The one reduction kernel every collective uses: combines n inputs element-wise in the
// canonical pairwise tree over their index, and stores the result to any number of
// outputs.
//
// Canonical tree over inputs [0, n): split at h = the largest power of two below n,
// tree(0, n) = op(tree(0, h), tree(h, n)); a single input is itself. For n = 4 this is
// (x0 op x1) op (x2 op x3); for n = 3, (x0 op x1) op x2. The kernel evaluates it with a
// binary-counter stack of accumulator blocks, so the bits depend only on n and the data.
// bf16 and f16 accumulate in f32 and round once on store; kMean divides the sum by
// `divisor` before rounding. Integer sums and products wrap; the mean of i32 and u8 sums
// in i64 first.
#pragma once

#include <cstddef>
#include <memory>

#include "replicator/dtype.h"

namespace replicator::detail {

// Accumulator blocks for one thread. Allocated (and touched) once, reused for every call.
class ReduceScratch {
 public:
  static constexpr std::size_t kBlock = 1024;  // elements per accumulator block

  explicit ReduceScratch(int max_inputs);
  template <typename A>
  A* levels() {
    return reinterpret_cast<A*>(memory_.get());
  }
  int max_inputs() const { return max_inputs_; }

 private:
  int max_inputs_;
  std::unique_ptr<std::byte[]> memory_;
};

// outputs[k][i] = tree(op, inputs[0][i], ..., inputs[n-1][i]) for i < count, k < num_outputs.
// An output may alias an input only if every input element is read before it is written,
// which holds when outputs alias inputs element for element (in-place all_reduce).
// n must not exceed scratch.max_inputs().
void tree_reduce(ReduceOp op, DType dtype, const void* const* inputs, int n, void* const* outputs,
                 int num_outputs, std::size_t count, std::size_t divisor, ReduceScratch& scratch);

}  // namespace replicator::detail
