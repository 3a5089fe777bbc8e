// Determinism: every replica receives the same bits, on every repetition, and those bits are
// the canonical pairwise tree over replica ids — computed here by an independent
// implementation:
//   tree(lo, hi) = x[lo]                                  if hi - lo == 1
//                = op(tree(lo, lo + h), tree(lo + h, hi))  h = largest power of two < hi - lo
// accumulating in f32 (bf16: leaves widened to f32, the tree in f32, one rounding at the end).
//
// The data are random f32 values of mixed magnitude (2^-20 .. 2^20, both signs), so the
// association order changes the rounded result; the test shows that another order (left to
// right, or right to left) gives different bits for this data, so the comparison can fail.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "replicator/replicator.h"

namespace replicator {
namespace {

constexpr int kRepetitions = 100;
// 1001 elements are staged for every R here; 40013 are 160 KB of f32 and 80 KB of bf16,
// above the staged limit (min(64 KiB, 256 KiB / R)) for every R: the direct path.
constexpr std::size_t kSizes[] = {1001, 40013};

// Random f32 values: sign, exponent in [-20, 20] and a 24-bit mantissa, all from raw
// mt19937 bits (whose sequence the standard fixes), so the data are the same everywhere.
std::vector<std::vector<float>> random_inputs(int n, std::size_t size, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::vector<float>> x(static_cast<std::size_t>(n), std::vector<float>(size));
  for (auto& replica : x) {
    for (float& v : replica) {
      const std::uint32_t bits = gen();
      const std::uint32_t more = gen();
      const float mantissa = 1.0f + static_cast<float>(bits & 0x7fffffu) * 0x1p-23f;
      const int exponent = static_cast<int>(more % 41) - 20;
      v = std::ldexp((more & 0x100u) ? -mantissa : mantissa, exponent);
    }
  }
  return x;
}

// The canonical tree over leaves [lo, hi).
float canonical_tree(const std::vector<float>& leaves, std::size_t lo, std::size_t hi) {
  const std::size_t n = hi - lo;
  if (n == 1) return leaves[lo];
  std::size_t h = 1;
  while (h * 2 < n) h *= 2;
  return canonical_tree(leaves, lo, lo + h) + canonical_tree(leaves, lo + h, hi);
}

float left_to_right(const std::vector<float>& leaves) {
  float acc = leaves[0];
  for (std::size_t j = 1; j < leaves.size(); ++j) acc = acc + leaves[j];
  return acc;
}

float right_to_left(const std::vector<float>& leaves) {
  float acc = leaves.back();
  for (std::size_t j = leaves.size() - 1; j-- > 0;) acc = leaves[j] + acc;
  return acc;
}

// Per element k: the leaves x[0][k], ..., x[n-1][k] (as f32).
template <typename T>
std::vector<float> leaves_at(const std::vector<std::vector<T>>& x, std::size_t k) {
  std::vector<float> leaves;
  leaves.reserve(x.size());
  for (const auto& replica : x) leaves.push_back(static_cast<float>(replica[k]));
  return leaves;
}

template <typename T>
std::uint32_t bits(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<std::uint32_t>(v);
  } else {
    return v.bits;
  }
}

Config with_replicas(int n) {
  Config config;
  config.local_replicas = n;
  return config;
}

// Runs kRepetitions all_reduce(sum) of `inputs` in one step and counts, per replica, the
// elements whose bits differ from `want` over all repetitions.
template <typename T>
std::vector<std::size_t> repeated_all_reduce_mismatches(Replicator& repl,
                                                        const std::vector<std::vector<T>>& inputs,
                                                        const std::vector<T>& want) {
  std::vector<std::size_t> mismatches(inputs.size(), 0);
  repl.run([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.replica_id());
    std::vector<T> data(inputs[r].size());
    for (int rep = 0; rep < kRepetitions; ++rep) {
      std::memcpy(data.data(), inputs[r].data(), data.size() * sizeof(T));
      ctx.all_reduce(data, {.op = ReduceOp::kSum});
      // One memcmp (a single range access under ThreadSanitizer); count only on a difference.
      if (std::memcmp(data.data(), want.data(), data.size() * sizeof(T)) == 0) continue;
      for (std::size_t k = 0; k < data.size(); ++k) mismatches[r] += bits(data[k]) != bits(want[k]);
    }
  });
  return mismatches;
}

class DeterminismTest : public ::testing::TestWithParam<int> {};

TEST_P(DeterminismTest, F32SumIsTheCanonicalTreeOnEveryReplicaAndRepetition) {
  const int n = GetParam();
  Replicator repl(with_replicas(n));
  for (const std::size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto x = random_inputs(n, size, 1234u + static_cast<std::uint32_t>(n));
    std::vector<float> want(size);
    std::size_t differs_left = 0, differs_right = 0;
    for (std::size_t k = 0; k < size; ++k) {
      const std::vector<float> leaves = leaves_at(x, k);
      want[k] = canonical_tree(leaves, 0, leaves.size());
      differs_left += bits(left_to_right(leaves)) != bits(want[k]);
      differs_right += bits(right_to_left(leaves)) != bits(want[k]);
    }
    // The data make the order visible: for n = 3 left to right IS the canonical tree,
    // ((x0 + x1) + x2), so only right to left can differ there.
    if (n >= 4) {
      EXPECT_GT(differs_left, 0u) << "left to right gives the same bits: weak data";
    }
    EXPECT_GT(differs_right, 0u) << "right to left gives the same bits: weak data";

    const std::vector<std::size_t> mismatches = repeated_all_reduce_mismatches(repl, x, want);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(mismatches[static_cast<std::size_t>(r)], 0u)
          << "replica " << r << ": elements x repetitions differing from the canonical tree";
    }
  }
}

TEST_P(DeterminismTest, BF16SumAccumulatesInF32AndRoundsOnce) {
  const int n = GetParam();
  Replicator repl(with_replicas(n));
  for (const std::size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto raw = random_inputs(n, size, 99u + static_cast<std::uint32_t>(n));
    std::vector<std::vector<bfloat16>> x(raw.size());
    for (std::size_t r = 0; r < raw.size(); ++r) {
      for (const float v : raw[r]) x[r].push_back(bfloat16(v));
    }
    std::vector<bfloat16> want(size);
    std::size_t differs_rounding_each_step = 0;
    for (std::size_t k = 0; k < size; ++k) {
      const std::vector<float> leaves = leaves_at(x, k);
      want[k] = bfloat16(canonical_tree(leaves, 0, leaves.size()));
      // Rounding to bf16 after every addition (no f32 accumulator) would differ.
      bfloat16 acc = bfloat16(leaves[0]);
      for (std::size_t j = 1; j < leaves.size(); ++j) {
        acc = bfloat16(static_cast<float>(acc) + leaves[j]);
      }
      differs_rounding_each_step += acc.bits != want[k].bits;
    }
    EXPECT_GT(differs_rounding_each_step, 0u);

    const std::vector<std::size_t> mismatches = repeated_all_reduce_mismatches(repl, x, want);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(mismatches[static_cast<std::size_t>(r)], 0u)
          << "replica " << r << ": elements x repetitions differing from the canonical tree";
    }
  }
}

// mean is the canonical-tree sum divided by n in f32, and reduce_scatter reduces each block
// in the same tree: both give the same bits as the reference.
TEST_P(DeterminismTest, MeanAndReduceScatterFollowTheSameTree) {
  const int n = GetParam();
  const auto un = static_cast<std::size_t>(n);
  Replicator repl(with_replicas(n));
  for (const std::size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::size_t block = size / un;
    const auto x = random_inputs(n, block * un, 7u + static_cast<std::uint32_t>(n));
    std::vector<float> sum(block * un), mean(block * un);
    for (std::size_t k = 0; k < sum.size(); ++k) {
      const std::vector<float> leaves = leaves_at(x, k);
      sum[k] = canonical_tree(leaves, 0, leaves.size());
      mean[k] = sum[k] / static_cast<float>(n);
    }
    std::vector<std::size_t> mismatches(un, 0);
    repl.run([&](ReplicaContext& ctx) {
      const auto r = static_cast<std::size_t>(ctx.replica_id());
      std::vector<float> data = x[r];
      ctx.all_reduce(data, {.op = ReduceOp::kMean});
      for (std::size_t k = 0; k < data.size(); ++k) mismatches[r] += bits(data[k]) != bits(mean[k]);
      std::vector<float> out(block);
      ctx.reduce_scatter(x[r], out, {.op = ReduceOp::kSum});
      for (std::size_t i = 0; i < block; ++i) {
        mismatches[r] += bits(out[i]) != bits(sum[r * block + i]);
      }
    });
    for (std::size_t r = 0; r < un; ++r) EXPECT_EQ(mismatches[r], 0u) << "replica " << r;
  }
}

// Replicator::reduce combines one value per replica "in the same canonical tree order as
// the collectives".
TEST_P(DeterminismTest, ReplicatorReduceFollowsTheSameTree) {
  const int n = GetParam();
  Replicator repl(with_replicas(n));
  const auto x = random_inputs(n, 200, 4242u);
  std::size_t mismatches = 0;
  for (std::size_t k = 0; k < 200; ++k) {
    const PerReplica<float> values = repl.run(
        [&](ReplicaContext& ctx) { return x[static_cast<std::size_t>(ctx.replica_id())][k]; });
    const std::vector<float> leaves = leaves_at(x, k);
    mismatches +=
        bits(repl.reduce(ReduceOp::kSum, values)) != bits(canonical_tree(leaves, 0, leaves.size()));
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(ReplicaCounts, DeterminismTest, ::testing::Values(3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace replicator
