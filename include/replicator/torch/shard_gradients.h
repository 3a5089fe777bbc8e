// Gradients over logical shards (replicator/shards.h): the step runs forward and backward
// once per shard of its replica's range, and the gradients are combined in the canonical
// tree over shard ids, so the reduced gradient has the same bits for every replica count
// R <= S and every layout.
//
//   ShardGradients grads(ctx, model->parameters(), shards, {.buffers = model->buffers()});
//   const ShardLocalBatchNorm per_shard;         // batch norm over one shard at a time
//   for (int s = grads.range().first; s < grads.range().last; ++s) {
//     grads.begin_shard(s);                      // every shard starts from the same buffers
//     loss_of(shard_batch(s)).backward();
//     grads.add_shard(s);                        // takes the .grads and zeros them
//   }
//   grads.synchronize();                         // .grad = mean over all S shards
//   optimizer.step();
//
// Layers that mix examples within a batch see one shard at a time (batch norm normalises
// each shard by its own statistics: ShardLocalBatchNorm, replicator/torch/batch_norm.h),
// which is what makes the shard, not the replica, the unit of the computation. Buffers
// that a forward updates (running statistics) start every shard from the step's values and
// move by the mean over the S shards, in the same tree, of what each shard's forward
// changed them by: for batch norm's momentum update, towards the mean of the shards'
// statistics; a buffer that no forward changes keeps its bits.
// Use from the replica's own thread.
#pragma once

#include <torch/types.h>

#include <vector>

#include "replicator/call_site.h"
#include "replicator/replica_context.h"
#include "replicator/shards.h"

namespace replicator::torch {

struct ShardGradientsOptions {
  // kMean (the mean over shards, for losses averaged within a shard) or kSum.
  ReduceOp op = ReduceOp::kMean;
  Deadline timeout;  // of synchronize()'s collectives
  // The module's buffers (model->buffers()): every one is restored by begin_shard() to the
  // value it had when the step's first shard began; synchronize() moves the floating ones
  // (one dtype) by the mean over the S shards of each shard's change; the others (counters)
  // keep what the last shard's forward left, the same on every replica.
  std::vector<::torch::Tensor> buffers;
};

class ShardGradients {
 public:
  // For the parameters with requires_grad among `parameters` (CPU, one floating dtype
  // replicator carries). Throws InvalidArgument for parameters or buffers of another device
  // or of mixed floating dtypes, and where ctx has more replicas than `shards`. Does not
  // communicate.
  ShardGradients(ReplicaContext& ctx, std::vector<::torch::Tensor> parameters, int shards,
                 ShardGradientsOptions options = {});

  ShardRange range() const { return gradients_.range(); }

  // Before the forward of shard `shard` (the shards of range() in order): the first shard
  // of a step keeps a copy of the buffers, every later one restores them from it. Needed
  // only with buffers. Never blocks; throws InvalidArgument for a shard out of order.
  void begin_shard(int shard);

  // After the backward of shard `shard` (the shards of range() in order): takes every
  // parameter's .grad (an undefined one as zeros) and sets it to zero, and the floating
  // buffers' values. Never blocks; throws InvalidArgument for a shard out of order or, with
  // buffers, one that begin_shard() did not begin.
  void add_shard(int shard);

  // Collective: combines every shard's gradients (and floating buffers) in the canonical
  // tree over shard ids and writes the result to each parameter's .grad (and buffer).
  // Blocks; throws InvalidArgument where shards of range() were not added, and what
  // ShardReduce::all_reduce throws.
  void synchronize(CallSite where = CallSite::here());

 private:
  std::vector<::torch::Tensor> parameters_;
  std::vector<::torch::Tensor> buffers_;         // all of them
  std::vector<::torch::Tensor> floating_;        // those averaged over the shards
  std::vector<::torch::Tensor> step_start_;      // the buffers when the step's first shard began
  std::vector<::torch::Tensor> floating_start_;  // the floating ones among them
  ::torch::Tensor flat_;                         // one shard's gradients, packed
  ::torch::Tensor flat_buffers_;                 // one shard's floating buffers, packed
  int begun_ = -1;                               // the shard begin_shard() began last
  Deadline timeout_;
  ShardReduce gradients_;
  ShardReduce buffer_means_;
};

}  // namespace replicator::torch
