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

// One reduction. Leaves may be partial results of aligned subtrees (their sizes, powers
// of two, in `sizes`), kept in the accumulator type (`partial_size` bytes an element):
// the tree over partials of the canonical subtrees of [0, n) in id order gives the same
// bits as the tree over the n leaves, which is how the reduction across processes stays
// identical to the one in a single process.
struct ReduceCall {
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  const void* const* inputs = nullptr;
  int n = 0;
  const int* sizes = nullptr;   // leaf sizes; nullptr: every leaf is one replica
  bool inputs_partial = false;  // inputs hold accumulators, not elements
  void* const* outputs = nullptr;
  int num_outputs = 0;
  bool outputs_partial = false;  // write accumulators: no division, no rounding
  std::size_t count = 0;
  std::size_t divisor = 1;  // kMean divides by this (the total replica count)
  // Write the outputs past the cache (non-temporal stores; fenced before the call returns).
  // For large results that another process copies straight out of this one's memory: a
  // result kept in this core's cache is read from there by the peer, and writing the same
  // lines again in the next call then waits for each to come back.
  bool streaming = false;
};
void tree_reduce(const ReduceCall& call, ReduceScratch& scratch);

// Bytes of one accumulator of `dtype` under `op` (f32 for 16-bit floats, i64 for the mean
// of i32 and u8, else the element itself).
std::size_t partial_size(DType dtype, ReduceOp op);

// outputs[k][i] = tree(op, inputs[0][i], ..., inputs[n-1][i]) for i < count, k < num_outputs.
// An output may alias an input only if every input element is read before it is written,
// which holds when outputs alias inputs element for element (in-place all_reduce).
// n must not exceed scratch.max_inputs().
void tree_reduce(ReduceOp op, DType dtype, const void* const* inputs, int n, void* const* outputs,
                 int num_outputs, std::size_t count, std::size_t divisor, ReduceScratch& scratch);

}  // namespace replicator::detail
