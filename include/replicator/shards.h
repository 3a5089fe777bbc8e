// Logical shards: the global batch of a step as S shards, whatever the replica count.
//
// Each of R replicas (any R <= S, not only divisors of S) takes a contiguous range of shard
// ids, computes one value per shard (a gradient, a batch-norm sum, a loss), and the values
// are combined in the canonical pairwise tree over SHARD ids (reduce_kernel.h's tree: split
// [0, S) at the largest power of two below S). Inside a replica its shards are folded into
// the canonical subtrees its range holds whole; across replicas the owner of each slice
// combines every replica's subtrees in shard order. So the result's bits depend on S and the
// shard values only: R = 1, 2, 3 or 8, threads or processes, give the same bits, which is
// what lets a job that loses or gains replicas go on exactly.
//
// What the caller keeps equal for the shard values themselves to match (the library cannot
// see inside a step): each shard computed from the same examples, in the same shapes, with
// the same intra-op thread count and the same kernels (LibTorch build, CPU code branch).
//
//   ShardReduce sum(ctx, shards, DType::kF32, count);
//   for (int s = sum.range().first; s < sum.range().last; ++s) {
//     sum.add(s, values_of_shard(s));                 // compute, then hand over
//   }
//   sum.all_reduce(output);                           // the same bits for any R <= shards
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "replicator/call_site.h"
#include "replicator/dtype.h"
#include "replicator/options.h"
#include "replicator/replica_context.h"

namespace replicator {

// Shard ids [first, last).
struct ShardRange {
  int first = 0;
  int last = 0;
  int size() const { return last - first; }
  bool operator==(const ShardRange&) const = default;
};

// The shards replica `replica` of `replicas` takes out of `shards`: [floor(r S / R),
// floor((r + 1) S / R)), so every replica has at least one and the ranges tile [0, S) in
// replica order. Pure; throws InvalidArgument unless 1 <= replicas <= shards and
// 0 <= replica < replicas.
ShardRange shard_range(int shards, int replicas, int replica);

// The canonical subtrees of the tree over [0, shards) that make up `range`, in shard order:
// from range.first, each time the largest block [a, a + 2^j) with a a multiple of 2^j that
// stays inside the range. Pure; throws InvalidArgument unless 0 <= first <= last <= shards.
std::vector<ShardRange> canonical_blocks(ShardRange range, int shards);

// A reduction over the shards of one step (see above). One object per replica, used on its
// replica's thread; reusable step after step (all_reduce leaves it empty).
class ShardReduce {
 public:
  // For ctx's replica in a step of `shards` shards, each value `count` elements of `dtype`.
  // Throws InvalidArgument where ctx has more replicas than `shards`.
  ShardReduce(ReplicaContext& ctx, int shards, DType dtype, std::size_t count,
              ReduceOp op = ReduceOp::kSum);

  ShardRange range() const { return range_; }
  int shards() const { return shards_; }
  // The shard add() takes next (range().last once every shard was added).
  int next_shard() const { return next_; }

  // Takes shard `shard`'s values (copied, or folded into what it already holds: keep no
  // reference). Shards of range() in increasing order, each once. Does not block; throws
  // InvalidArgument for another shard, another count or dtype.
  void add(int shard, Buffer values);

  // Collective: every replica calls it once per step, after adding all its shards. Writes
  // to `output` (count elements of dtype) the canonical tree over all S shards' values
  // (kMean divides by S). Blocks; throws InvalidArgument before any message where shards are
  // missing or `output` does not fit, and what all_to_all and all_gather throw
  // (CollectiveMismatch where replicas disagree on S, the op, dtype or count; Timeout,
  // PeerLost, Aborted).
  void all_reduce(Buffer output, Deadline timeout = {}, CallSite where = CallSite::here());

 private:
  struct Block {
    ShardRange shards;
    std::vector<std::byte> partial;  // accumulators (reduce_kernel.h's partial_size each)
  };
  void fold(Block block);
  std::vector<std::byte> take_partial();

  ReplicaContext& ctx_;
  int shards_;
  DType dtype_;
  std::size_t count_;
  ReduceOp op_;
  std::size_t partial_bytes_;  // bytes of one accumulator
  ShardRange range_;
  int next_;                   // the next shard add() takes
  std::vector<Block> blocks_;  // the canonical subtrees folded so far, in shard order
  std::uint64_t signature_;    // of (S, op, dtype, count), for the collectives' check
  // Every replica's canonical subtrees (fixed by S and R) and the most any replica has.
  std::vector<std::vector<ShardRange>> all_blocks_;
  std::size_t most_ = 0;
  // Kept from step to step, so that a step allocates nothing: accumulators of folded or
  // reduced subtrees, what goes to each owner and comes back, this replica's slice and the
  // gathered result (where the slices do not tile the output exactly).
  std::vector<std::vector<std::byte>> spare_;
  std::vector<std::byte> sent_, received_, mine_, gathered_;
  std::vector<const void*> inputs_;
  std::vector<int> sizes_;
};

}  // namespace replicator
