#include "replicator/shards.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "replicator/errors.h"
#include "src/collectives/reduce_kernel.h"

namespace replicator {
namespace {

std::string range_text(ShardRange r) {
  return "[" + std::to_string(r.first) + ", " + std::to_string(r.last) + ")";
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

// The reduction kernel's scratch for up to `inputs` inputs, one per thread that reduces.
detail::ReduceScratch& scratch_for(int inputs) {
  thread_local std::unique_ptr<detail::ReduceScratch> scratch;
  if (!scratch || scratch->max_inputs() < inputs) {
    scratch = std::make_unique<detail::ReduceScratch>(std::max(inputs, 2));
  }
  return *scratch;
}

}  // namespace

ShardRange shard_range(int shards, int replicas, int replica) {
  if (replicas < 1 || replicas > shards) {
    throw InvalidArgument("shard_range: " + std::to_string(replicas) + " replicas for " +
                          std::to_string(shards) +
                          " shards (every replica needs at least one shard)");
  }
  if (replica < 0 || replica >= replicas) {
    throw InvalidArgument("shard_range: replica " + std::to_string(replica) + " of " +
                          std::to_string(replicas));
  }
  const auto bound = [&](int r) {
    return static_cast<int>(static_cast<std::int64_t>(r) * shards / replicas);
  };
  return {bound(replica), bound(replica + 1)};
}

std::vector<ShardRange> canonical_blocks(ShardRange range, int shards) {
  if (range.first < 0 || range.first > range.last || range.last > shards) {
    throw InvalidArgument("canonical_blocks: shards " + range_text(range) + " of " +
                          std::to_string(shards));
  }
  std::vector<ShardRange> blocks;
  for (int a = range.first; a < range.last;) {
    int size = 1;
    while (a % (2 * size) == 0 && a + 2 * size <= range.last) size *= 2;
    blocks.push_back({a, a + size});
    a += size;
  }
  return blocks;
}

ShardReduce::ShardReduce(ReplicaContext& ctx, int shards, DType dtype, std::size_t count,
                         ReduceOp op)
    : ctx_(ctx),
      shards_(shards),
      dtype_(dtype),
      count_(count),
      op_(op),
      partial_bytes_(detail::partial_size(dtype, op)),
      range_(shard_range(shards, ctx.num_replicas(), ctx.replica_id())),
      next_(range_.first),
      signature_(mix(
          mix(mix(mix(0x5a4d, static_cast<std::uint64_t>(shards)), static_cast<std::uint64_t>(op)),
              static_cast<std::uint64_t>(dtype)),
          count)) {
  const int replicas = ctx.num_replicas();
  all_blocks_.resize(static_cast<std::size_t>(replicas));
  for (int i = 0; i < replicas; ++i) {
    all_blocks_[i] = canonical_blocks(shard_range(shards_, replicas, i), shards_);
    most_ = std::max(most_, all_blocks_[i].size());
  }
}

std::vector<std::byte> ShardReduce::take_partial() {
  if (spare_.empty()) return std::vector<std::byte>(count_ * partial_bytes_);
  std::vector<std::byte> partial = std::move(spare_.back());
  spare_.pop_back();
  return partial;
}

void ShardReduce::add(int shard, Buffer values) {
  if (shard != next_) {
    throw InvalidArgument("ShardReduce::add: shard " + std::to_string(shard) + ", expected " +
                          (next_ < range_.last
                               ? "shard " + std::to_string(next_)
                               : "none: every shard of " + range_text(range_) + " was added") +
                          " (replica " + std::to_string(ctx_.replica_id()) + " takes shards " +
                          range_text(range_) + " in order)");
  }
  if (values.count != count_ || values.dtype != dtype_) {
    throw InvalidArgument("ShardReduce::add: shard " + std::to_string(shard) + " has " +
                          std::to_string(values.count) + " elements of " +
                          std::string(to_string(values.dtype)) + ", the reduction " +
                          std::to_string(count_) + " of " + std::string(to_string(dtype_)));
  }
  Block leaf{{shard, shard + 1}, take_partial()};  // written whole by the kernel
  const void* input = values.data;
  void* output = leaf.partial.data();
  detail::tree_reduce({.op = op_,
                       .dtype = dtype_,
                       .inputs = &input,
                       .n = 1,
                       .outputs = &output,
                       .num_outputs = 1,
                       .outputs_partial = true,
                       .count = count_},
                      scratch_for(1));
  ++next_;
  fold(std::move(leaf));
}

void ShardReduce::fold(Block block) {
  blocks_.push_back(std::move(block));
  // Two neighbours of one size whose union is an aligned block are siblings in the tree.
  while (blocks_.size() >= 2) {
    Block& a = blocks_[blocks_.size() - 2];
    const Block& b = blocks_.back();
    const int size = a.shards.size();
    if (b.shards.size() != size || a.shards.first % (2 * size) != 0) break;
    const void* inputs[2] = {a.partial.data(), b.partial.data()};
    const int sizes[2] = {size, size};
    void* output = a.partial.data();  // aliases input 0 element for element
    detail::tree_reduce({.op = op_,
                         .dtype = dtype_,
                         .inputs = inputs,
                         .n = 2,
                         .sizes = sizes,
                         .inputs_partial = true,
                         .outputs = &output,
                         .num_outputs = 1,
                         .outputs_partial = true,
                         .count = count_},
                        scratch_for(2));
    a.shards.last = b.shards.last;
    spare_.push_back(std::move(blocks_.back().partial));
    blocks_.pop_back();
  }
}

void ShardReduce::all_reduce(Buffer output, Deadline timeout, CallSite where) {
  if (next_ != range_.last) {
    throw InvalidArgument("ShardReduce::all_reduce: replica " + std::to_string(ctx_.replica_id()) +
                          " did not add shards " + range_text({next_, range_.last}));
  }
  if (output.count != count_ || output.dtype != dtype_) {
    throw InvalidArgument("ShardReduce::all_reduce: output of " + std::to_string(output.count) +
                          " elements of " + std::string(to_string(output.dtype)) +
                          " for a reduction of " + std::to_string(count_) + " of " +
                          std::string(to_string(dtype_)));
  }
  const int replicas = ctx_.num_replicas();
  const int me = ctx_.replica_id();
  // Replica i sends each owner k_i partials of the owner's slice (all_blocks_[i]).
  const std::size_t slice = (count_ + replicas - 1) / replicas;  // elements per owner
  const std::size_t chunk = most_ * slice * partial_bytes_;      // bytes to each owner
  const auto slice_count = [&](int j) {
    const std::size_t begin = std::min(count_, j * slice);
    return std::min(count_, begin + slice) - begin;
  };
  sent_.resize(chunk * replicas);
  received_.resize(sent_.size());
  for (int j = 0; j < replicas; ++j) {
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      std::memcpy(sent_.data() + j * chunk + b * slice * partial_bytes_,
                  blocks_[b].partial.data() + j * slice * partial_bytes_,
                  slice_count(j) * partial_bytes_);
    }
  }
  const CollectiveOptions options{.timeout = timeout, .signature = signature_};
  ctx_.all_to_all(Buffer{sent_.data(), sent_.size(), DType::kU8},
                  Buffer{received_.data(), received_.size(), DType::kU8}, options, where);
  // This replica owns slice `me`: every replica's subtrees of it, in shard order.
  inputs_.clear();
  sizes_.clear();
  for (int i = 0; i < replicas; ++i) {
    for (std::size_t b = 0; b < all_blocks_[i].size(); ++b) {
      inputs_.push_back(received_.data() + i * chunk + b * slice * partial_bytes_);
      sizes_.push_back(all_blocks_[i][b].size());
    }
  }
  const std::size_t element = dtype_size(dtype_);
  mine_.resize(slice * element);
  void* out = mine_.data();
  detail::tree_reduce({.op = op_,
                       .dtype = dtype_,
                       .inputs = inputs_.data(),
                       .n = static_cast<int>(inputs_.size()),
                       .sizes = sizes_.data(),
                       .inputs_partial = true,
                       .outputs = &out,
                       .num_outputs = 1,
                       .count = slice_count(me),
                       .divisor = static_cast<std::size_t>(shards_)},
                      scratch_for(static_cast<int>(inputs_.size())));
  // Where the slices tile the output, the owners' slices are gathered into it directly.
  if (slice * replicas == count_) {
    ctx_.all_gather(Buffer{mine_.data(), slice, dtype_}, output, options, where);
  } else {
    gathered_.resize(slice * element * replicas);
    ctx_.all_gather(Buffer{mine_.data(), slice, dtype_},
                    Buffer{gathered_.data(), slice * replicas, dtype_}, options, where);
    if (count_ > 0) std::memcpy(output.data, gathered_.data(), count_ * element);
  }
  for (Block& block : blocks_) spare_.push_back(std::move(block.partial));
  blocks_.clear();
  next_ = range_.first;
}

}  // namespace replicator
