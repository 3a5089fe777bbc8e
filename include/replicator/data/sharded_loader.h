// ShardedLoader: one replica's share of shuffled global batches, prepared in the background.
//
// The contract, for N examples, global batch B and R replicas:
// - Epoch e visits the examples in an order that depends only on (seed, e, N): a
//   permutation when `shuffle`, else 0..N-1. Global batch b of the epoch is the positions
//   [b·B, min((b+1)·B, N)) of that order.
// - Replica r gets the positions [r·B/R, (r+1)·B/R) of each global batch, so the R slices,
//   concatenated in replica order, are exactly the global batch that R = 1 gets for the
//   same seed, epoch and index. B must be a multiple of R.
// - With `shards` = S (logical shards, replicator/shards.h) the global batch is S shards
//   of B/S positions each, shard s being [s·B/S, (s+1)·B/S), and replica r gets the shards
//   of shard_range(S, R, r), in order: which examples make up shard s of a batch depends on
//   (seed, epoch, index) only, never on R. B must be a multiple of S, and R <= S; R need
//   not divide S, so replicas may get different numbers of examples. A short last batch
//   (without drop_last) is split over the shards as it would be over S replicas.
// - With `drop_last` (training) an epoch has floor(N/B) batches. Without it (evaluation)
//   it has ceil(N/B), and the last global batch of n < B examples is split as evenly as
//   possible: replicas r < n % R get n/R + 1 examples, the others n/R — possibly 0, in
//   which case the replica still gets a Batch, with zero rows. Every replica therefore
//   sees the same number of batches per epoch, so they issue the same collectives.
// - `augment`: each example is flipped left-right with probability 1/2, then shifted by
//   dx, dy drawn uniformly from -2..2 (vacated pixels are 0, i.e. background), drawn from
//   (seed, epoch, the example's index in Examples): the same for every R and every run.
// - Batch::images is float32 [n, 1, 28, 28] = (pixel/255 − 0.2860)/0.3530; Batch::labels
//   is int64 [n].
// Threads: a ShardedLoader is used by one thread. Loaders of several replicas may share one
// Examples; none of them mutates it. Each started epoch runs one background thread that
// prepares up to `prefetch` batches ahead of next().
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "replicator/data/fashion_mnist.h"

namespace replicator::data {

struct LoaderOptions {
  std::int64_t global_batch = 256;  // B, examples per step over all replicas
  int replica = 0;                  // r, this loader's replica, 0 <= r < num_replicas
  int num_replicas = 1;             // R
  int shards = 0;                   // S logical shards of the global batch (0: none)
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = true;  // false for evaluation: keep the short last global batch
  bool augment = false;
  int prefetch = 2;  // batches prepared ahead of next(), >= 1
};

struct Batch {
  ::torch::Tensor images;  // float32 [n, 1, 28, 28], normalised
  ::torch::Tensor labels;  // int64 [n]
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // global batch index within the epoch
};

// Images as a Batch holds them: uint8 [n, 28, 28] on the CPU (any strides) → float32
// [n, 1, 28, 28] = (pixel/255 − 0.2860)/0.3530, the loader's values bit for bit (without
// augmentation). Throws InvalidArgument for images of another dtype, shape or device.
::torch::Tensor normalised_images(const ::torch::Tensor& images);

class ShardedLoader {
 public:
  // Does not block and starts no thread. `examples` must hold uint8 [N, 28, 28] contiguous
  // CPU images and int64 [N] labels. Throws InvalidArgument for bad examples or options
  // (B % R != 0 without shards, B % S != 0 or R > S with them, replica out of range, B or
  // prefetch < 1).
  ShardedLoader(std::shared_ptr<const Examples> examples, LoaderOptions options);
  // Stops the background thread; waits at most for the batch it is preparing.
  ~ShardedLoader();
  ShardedLoader(ShardedLoader&&) noexcept;
  ShardedLoader& operator=(ShardedLoader&&) noexcept;

  // floor(N/B) with drop_last, else ceil(N/B); the same on every replica.
  std::int64_t batches_per_epoch() const;
  const LoaderOptions& options() const { return options_; }

  // Positions the loader at global batch `first_batch` of `epoch` (e.g. to resume from a
  // checkpoint) and starts preparing batches in the background. Abandons an epoch in
  // progress, waiting only for the batch being prepared. Throws InvalidArgument unless
  // epoch >= 0 and 0 <= first_batch <= batches_per_epoch().
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);

  // This replica's slice of the next global batch, or nullopt once the epoch is over (and
  // on every call after). Blocks until the batch is ready. Throws InvalidArgument before
  // the first start_epoch(); an error of the background thread is rethrown as is, here and
  // on every later call until the next start_epoch().
  std::optional<Batch> next();

 private:
  struct Epoch;

  std::shared_ptr<const Examples> examples_;
  LoaderOptions options_;
  std::unique_ptr<Epoch> epoch_;
};

}  // namespace replicator::data
