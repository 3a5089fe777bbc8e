// The reduction kernel's streamed outputs (non-temporal stores) give the same bits as its
// cached ones, whatever the dtype, op, alignment, length, leaf kind and aliasing.
#include "src/collectives/reduce_kernel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace replicator::detail {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                             DType::kI32, DType::kI64, DType::kU8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

// Random bytes that are valid elements of every dtype (no NaN patterns for the floats: the
// exponent's top bit is kept clear).
std::vector<std::byte> random_bytes(std::size_t bytes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(rng() & 0x3f);
  return v;
}

struct Case {
  int n;
  std::size_t count;
  std::size_t misalign;  // bytes added to every output's address
  int num_outputs;
  bool inputs_partial;
  bool outputs_partial;
  bool in_place;  // output 0 is input 0
};

// Runs `c` twice, cached and streamed, and expects the outputs to agree bit for bit.
void expect_streamed_equals_cached(DType dtype, ReduceOp op, const Case& c) {
  const std::size_t in_size = c.inputs_partial ? partial_size(dtype, op) : dtype_size(dtype);
  const std::size_t out_size = c.outputs_partial ? partial_size(dtype, op) : dtype_size(dtype);
  const std::size_t in_bytes = c.count * in_size;
  const std::size_t out_bytes = c.count * out_size;
  ReduceScratch scratch(c.n);
  std::vector<std::vector<std::byte>> results;
  for (const bool streaming : {false, true}) {
    std::vector<std::vector<std::byte>> inputs;
    for (int j = 0; j < c.n; ++j) {
      inputs.push_back(random_bytes(in_bytes + 64, 17u * static_cast<std::uint32_t>(j) + 5u));
    }
    std::vector<std::vector<std::byte>> outputs(static_cast<std::size_t>(c.num_outputs),
                                                std::vector<std::byte>(out_bytes + 64));
    std::vector<const void*> in_ptrs;
    for (auto& in : inputs) in_ptrs.push_back(in.data());
    std::vector<void*> out_ptrs;
    for (auto& out : outputs) out_ptrs.push_back(out.data() + c.misalign);
    if (c.in_place) out_ptrs[0] = inputs[0].data();
    tree_reduce({.op = op,
                 .dtype = dtype,
                 .inputs = in_ptrs.data(),
                 .n = c.n,
                 .inputs_partial = c.inputs_partial,
                 .outputs = out_ptrs.data(),
                 .num_outputs = c.num_outputs,
                 .outputs_partial = c.outputs_partial,
                 .count = c.count,
                 .divisor = static_cast<std::size_t>(c.n),
                 .streaming = streaming},
                scratch);
    std::vector<std::byte> all;
    for (void* out : out_ptrs) {
      const auto* p = static_cast<const std::byte*>(out);
      all.insert(all.end(), p, p + out_bytes);
    }
    results.push_back(std::move(all));
  }
  EXPECT_EQ(results[0], results[1])
      << to_string(dtype) << " " << to_string(op) << ", n " << c.n << ", count " << c.count
      << ", misalign " << c.misalign << ", outputs " << c.num_outputs << ", partial in/out "
      << c.inputs_partial << "/" << c.outputs_partial << ", in place " << c.in_place;
}

TEST(ReduceKernelTest, StreamedOutputsEqualCachedOnes) {
  for (const DType dtype : kDtypes) {
    for (const ReduceOp op : kOps) {
      for (const int n : {1, 2, 3, 5}) {
        for (const std::size_t count : {1ul, 5ul, 1023ul, 1024ul, 1025ul, 4099ul}) {
          for (const std::size_t misalign : {0ul, 4ul, 8ul}) {
            // Outputs must stay aligned to their element.
            if (misalign % dtype_size(dtype) != 0) continue;
            expect_streamed_equals_cached(dtype, op, {n, count, misalign, 1, false, false, false});
            expect_streamed_equals_cached(dtype, op, {n, count, misalign, 2, true, false, false});
          }
          expect_streamed_equals_cached(dtype, op, {n, count, 0, 1, true, true, false});
          expect_streamed_equals_cached(dtype, op, {n, count, 0, 2, false, false, true});
        }
      }
    }
  }
}

}  // namespace
}  // namespace replicator::detail
