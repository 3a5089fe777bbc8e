// Learner: one replica's part of an IMPALA update. Every replica of a Replicator holds the
// same PolicyNet and takes its own share of each batch of unrolls; it computes the V-trace
// targets and the IMPALA loss on its share (vtrace.h), the gradients are summed over all
// replicas (the loss is a sum over steps and unrolls, so the sum over replicas is the whole
// batch's gradient, whatever the replica count), clipped by their global norm and applied
// by RMSProp, identically on every replica.
//
// Replicas may be threads or processes (mpi, gloo): with the same batch and the same
// replica count the parameters are bitwise equal on every layout (the reduction is the
// library's canonical tree); with a different count they agree up to float rounding.
#pragma once

#include <torch/optim/rmsprop.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "replicator/replica_context.h"
#include "replicator/rl/policy.h"
#include "replicator/rl/unroll.h"
#include "replicator/rl/vtrace.h"
#include "replicator/torch/gradient_reducer.h"
#include "replicator/torch/shard_gradients.h"

namespace replicator::rl {

struct LearnerOptions {
  double learning_rate = 6e-4;
  double rmsprop_alpha = 0.99;  // decay of the squared-gradient average
  double rmsprop_eps = 0.01;    // IMPALA's RMSProp epsilon
  double rmsprop_momentum = 0;
  double max_grad_norm = 40;  // global gradient-norm clip; <= 0: none
  double discount = 0.99;     // γ
  double reward_clip = 0;     // > 0: rewards clipped to [-reward_clip, reward_clip]
  ImpalaLossOptions loss;
  int shards = 0;  // logical shards of each batch (0: none); at least the replica count
};

// A batch of unrolls as time-major tensors.
struct UnrollBatch {
  ::torch::Tensor observations;      // [T + 1, B, observation size]
  ::torch::Tensor actions;           // [T, B] int64
  ::torch::Tensor rewards;           // [T, B]
  ::torch::Tensor discounts;         // [T, B]: γ, or 0 after a done step
  ::torch::Tensor behaviour_logits;  // [T, B, A]
};

// Stacks `unrolls` (all of one length, observation size and action count). Throws
// InvalidArgument for an empty span, unrolls that disagree or one that is not consistent().
UnrollBatch stack_unrolls(std::span<const Unroll> unrolls, const LearnerOptions& options);

struct LearnerStats {
  double loss = 0;  // total loss of this replica's share
  double policy_gradient = 0;
  double baseline = 0;
  double entropy = 0;
  double grad_norm = 0;  // of the summed gradient, before clipping
};

class Learner {
 public:
  // For replica `ctx` (used from its thread only). `model` is this replica's copy: every
  // replica must start from the same parameters (e.g. the same seed).
  Learner(ReplicaContext& ctx, PolicyNet model, const LearnerOptions& options);

  // One update from this replica's `share` of the batch (every replica calls it, with
  // shares of the same size; with shards, the unrolls of the shards of shard_range(), the
  // same number per shard on every replica). BLOCKS in the gradient all-reduce; throws what
  // collectives throw, and InvalidArgument as stack_unrolls and for a share that does not
  // split into the replica's shards.
  LearnerStats update(std::span<const Unroll> share);

  // This replica's shards (with options' shards; the empty range without).
  ShardRange shard_range() const { return shards_ ? shards_->range() : ShardRange{}; }

  // The learning rate of the next updates (IMPALA anneals it linearly to 0). Never blocks;
  // throws InvalidArgument for a negative rate.
  void set_learning_rate(double learning_rate);

  PolicyNet& model() { return model_; }
  ::torch::optim::RMSprop& optimizer() { return *optimizer_; }
  std::int64_t updates() const { return updates_; }

 private:
  PolicyNet model_;
  LearnerOptions options_;
  std::shared_ptr<::torch::optim::RMSprop> optimizer_;
  torch::ReplicatedOptimizer replicated_;
  std::optional<torch::ShardGradients> shards_;
  std::int64_t updates_ = 0;
};

}  // namespace replicator::rl
