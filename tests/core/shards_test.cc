// Logical shards (replicator/shards.h): the ranges, the canonical subtrees of a range, and
// ShardReduce, whose result must have the bits of the canonical tree over all S shards'
// values in one call of the reduction kernel, for every replica count R <= S.
#include "replicator/shards.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "src/collectives/reduce_kernel.h"
#include "tests/harness/harness.h"

namespace replicator {
namespace {

// Shard s's values: a fixed function of (s, i) spread over many exponents, so that the order
// of the additions shows in the bits.
template <typename T>
std::vector<T> shard_values(int s, std::size_t count) {
  std::mt19937_64 rng(0x51 + static_cast<std::uint64_t>(s));
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<T> v(count);
  for (T& x : v) x = T(static_cast<float>(std::ldexp(mantissa(rng), exponent(rng))));
  return v;
}

// The canonical tree over all `shards` values in one kernel call: what every R must give.
template <typename T>
std::vector<T> reference(int shards, std::size_t count, ReduceOp op) {
  std::vector<std::vector<T>> values;
  std::vector<const void*> inputs;
  for (int s = 0; s < shards; ++s) values.push_back(shard_values<T>(s, count));
  for (const auto& v : values) inputs.push_back(v.data());
  std::vector<T> out(count);
  void* output = out.data();
  detail::ReduceScratch scratch(std::max(shards, 2));
  detail::tree_reduce(op, dtype_of<T>(), inputs.data(), shards, &output, 1, count,
                      static_cast<std::size_t>(shards), scratch);
  return out;
}

template <typename T>
std::vector<T> reduced(int shards, int replicas, std::size_t count, ReduceOp op) {
  Replicator repl(Config{.local_replicas = replicas});
  const PerReplica<std::vector<T>> out = repl.run([&](ReplicaContext& ctx) {
    ShardReduce reduce(ctx, shards, dtype_of<T>(), count, op);
    for (int s = reduce.range().first; s < reduce.range().last; ++s) {
      std::vector<T> v = shard_values<T>(s, count);
      reduce.add(s, Buffer::of(std::span<T>(v)));
    }
    std::vector<T> result(count);
    reduce.all_reduce(Buffer::of(std::span<T>(result)));
    return result;
  });
  for (int r = 1; r < replicas; ++r) {
    EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), count * sizeof(T)), 0)
        << "replica " << r << " of " << replicas << " differs from replica 0";
  }
  return out[0];
}

template <typename T>
void expect_same_bits_for_every_replica_count(int shards, std::size_t count, ReduceOp op) {
  const std::vector<T> want = reference<T>(shards, count, op);
  for (int replicas = 1; replicas <= std::min(shards, 8); ++replicas) {
    const std::vector<T> got = reduced<T>(shards, replicas, count, op);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), count * sizeof(T)), 0)
        << "S = " << shards << ", R = " << replicas << ", op " << to_string(op) << ", " << count
        << " elements of " << to_string(dtype_of<T>());
  }
}

TEST(ShardRangeTest, RangesTileTheShardsInReplicaOrder) {
  for (int shards = 1; shards <= 17; ++shards) {
    for (int replicas = 1; replicas <= shards; ++replicas) {
      int next = 0;
      for (int r = 0; r < replicas; ++r) {
        const ShardRange range = shard_range(shards, replicas, r);
        EXPECT_EQ(range.first, next) << shards << " shards, replica " << r << " of " << replicas;
        EXPECT_GE(range.size(), 1);
        EXPECT_LE(range.size(), (shards + replicas - 1) / replicas);
        next = range.last;
      }
      EXPECT_EQ(next, shards);
    }
  }
  EXPECT_EQ(shard_range(8, 3, 0), (ShardRange{0, 2}));
  EXPECT_EQ(shard_range(8, 3, 1), (ShardRange{2, 5}));
  EXPECT_EQ(shard_range(8, 3, 2), (ShardRange{5, 8}));
  EXPECT_THROW(shard_range(4, 5, 0), InvalidArgument);  // a replica without a shard
  EXPECT_THROW(shard_range(4, 0, 0), InvalidArgument);
  EXPECT_THROW(shard_range(4, 2, 2), InvalidArgument);
}

TEST(ShardRangeTest, CanonicalBlocksAreAlignedPowersOfTwoCoveringTheRange) {
  EXPECT_EQ(canonical_blocks({3, 8}, 8), (std::vector<ShardRange>{{3, 4}, {4, 8}}));
  EXPECT_EQ(canonical_blocks({0, 8}, 8), (std::vector<ShardRange>{{0, 8}}));
  EXPECT_EQ(canonical_blocks({0, 6}, 6), (std::vector<ShardRange>{{0, 4}, {4, 6}}));
  EXPECT_EQ(canonical_blocks({1, 7}, 8), (std::vector<ShardRange>{{1, 2}, {2, 4}, {4, 6}, {6, 7}}));
  EXPECT_TRUE(canonical_blocks({5, 5}, 8).empty());
  for (int shards = 1; shards <= 16; ++shards) {
    for (int first = 0; first <= shards; ++first) {
      for (int last = first; last <= shards; ++last) {
        int next = first;
        for (const ShardRange& b : canonical_blocks({first, last}, shards)) {
          EXPECT_EQ(b.first, next);
          const int size = b.size();
          EXPECT_EQ(size & (size - 1), 0) << "a block of " << size;
          EXPECT_EQ(b.first % size, 0) << "[" << b.first << ", " << b.last << ") unaligned";
          next = b.last;
        }
        EXPECT_EQ(next, last);
      }
    }
  }
  EXPECT_THROW(canonical_blocks({2, 9}, 8), InvalidArgument);
  EXPECT_THROW(canonical_blocks({3, 2}, 8), InvalidArgument);
}

TEST(ShardReduceTest, SameBitsForEveryReplicaCountF32Sum) {
  for (int shards : {1, 2, 3, 5, 6, 7, 8, 11, 16}) {
    expect_same_bits_for_every_replica_count<float>(shards, 1037, ReduceOp::kSum);
  }
}

TEST(ShardReduceTest, SameBitsForEveryReplicaCountOtherTypesAndOps) {
  expect_same_bits_for_every_replica_count<float>(8, 2100, ReduceOp::kMean);
  expect_same_bits_for_every_replica_count<double>(7, 513, ReduceOp::kSum);
  expect_same_bits_for_every_replica_count<bfloat16>(8, 700, ReduceOp::kSum);
  expect_same_bits_for_every_replica_count<bfloat16>(6, 700, ReduceOp::kMean);
  expect_same_bits_for_every_replica_count<float16>(5, 300, ReduceOp::kSum);
  expect_same_bits_for_every_replica_count<float>(5, 300, ReduceOp::kMax);
  expect_same_bits_for_every_replica_count<float>(4, 300, ReduceOp::kProd);
}

TEST(ShardReduceTest, FewerElementsThanReplicasAndNone) {
  expect_same_bits_for_every_replica_count<float>(8, 3, ReduceOp::kSum);  // empty slices
  expect_same_bits_for_every_replica_count<float>(8, 1, ReduceOp::kSum);
  expect_same_bits_for_every_replica_count<float>(8, 0, ReduceOp::kSum);
}

TEST(ShardReduceTest, ReusableStepAfterStep) {
  Replicator repl(Config{.local_replicas = 3});
  const std::vector<float> want = reference<float>(8, 100, ReduceOp::kSum);
  repl.run([&](ReplicaContext& ctx) {
    ShardReduce reduce(ctx, 8, DType::kF32, 100);
    for (int step = 0; step < 3; ++step) {
      for (int s = reduce.range().first; s < reduce.range().last; ++s) {
        std::vector<float> v = shard_values<float>(s, 100);
        reduce.add(s, Buffer::of(std::span<float>(v)));
      }
      std::vector<float> result(100);
      reduce.all_reduce(Buffer::of(std::span<float>(result)));
      EXPECT_EQ(std::memcmp(result.data(), want.data(), 100 * sizeof(float)), 0) << "step " << step;
    }
  });
}

TEST(ShardReduceTest, RefusesWhatCannotBeReduced) {
  Replicator repl(Config{.local_replicas = 2});
  repl.run([&](ReplicaContext& ctx) {
    EXPECT_THROW(ShardReduce(ctx, 1, DType::kF32, 4), InvalidArgument);  // 2 replicas, 1 shard
    ShardReduce reduce(ctx, 4, DType::kF32, 4);
    std::vector<float> v(4, 1.0f);
    std::vector<double> d(4, 1.0);
    const int first = reduce.range().first;
    EXPECT_THROW(reduce.add(first + 1, Buffer::of(std::span<float>(v))), InvalidArgument);
    EXPECT_THROW(reduce.add(first, Buffer::of(std::span<double>(d))), InvalidArgument);
    EXPECT_THROW(reduce.add(first, Buffer::of(std::span<float>(v).first(3))), InvalidArgument);
    reduce.add(first, Buffer::of(std::span<float>(v)));
    std::vector<float> out(4);
    try {
      reduce.all_reduce(Buffer::of(std::span<float>(out)));  // shard first + 1 is missing
      ADD_FAILURE() << "all_reduce with a shard missing returned";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("did not add shards"), std::string::npos) << e.what();
    }
  });
}

TEST(ShardReduceTest, ReplicasThatDisagreeOnTheShardCountGetAMismatch) {
  Replicator repl(Config{.local_replicas = 2});
  std::vector<std::exception_ptr> caught(2);
  repl.run([&](ReplicaContext& ctx) {
    caught[static_cast<std::size_t>(ctx.replica_id())] = harness::capture([&] {
      ShardReduce reduce(ctx, ctx.replica_id() == 0 ? 4 : 6, DType::kF32, 16);
      for (int s = reduce.range().first; s < reduce.range().last; ++s) {
        std::vector<float> v(16, 1.0f);
        reduce.add(s, Buffer::of(std::span<float>(v)));
      }
      std::vector<float> out(16);
      reduce.all_reduce(Buffer::of(std::span<float>(out)));
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(harness::caught_as<CollectiveMismatch>(caught[static_cast<std::size_t>(r)]))
        << "replica " << r << ": " << harness::describe(caught[static_cast<std::size_t>(r)]);
  }
}

}  // namespace
}  // namespace replicator
