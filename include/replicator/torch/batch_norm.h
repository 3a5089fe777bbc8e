// Cross-replica batch normalization: in training, the mean and variance of each channel
// are those of the GLOBAL batch (every replica's examples), and in backward the sums that
// the input gradient needs are reduced across replicas too, so R replicas at batch B/R
// compute what one replica computes at batch B. Running statistics follow the global
// statistics (unbiased variance over the global count), so they are equal on every
// replica. In eval mode with running statistics nothing is reduced.
//
// Which replicas: the options' `context`, or, when null, the replica whose step the
// calling thread runs (ReplicaContext::current()); outside any step, and on a thread that
// holds a ShardLocalBatchNorm, it is plain batch norm. forward() and backward BLOCK in
// training mode on a collective per call (one in forward, one in backward), so every
// replica must run the same layers in the same order, and they throw what collectives
// throw; forward throws InvalidArgument for an input of the wrong rank or channel count,
// with a single value per channel over all replicas, or (when autograd records it) on a GPU
// whose backward this replica would share with another replica of its process
// (tensor_collectives.h: require_own_backward_thread). CPU and CUDA tensors both work.
//
// Input shapes: CrossReplicaBatchNorm1d takes [N, C] or [N, C, L]; CrossReplicaBatchNorm2d
// takes [N, C, H, W]. Parameters and buffers have the names of torch::nn::BatchNorm*d
// (weight, bias, running_mean, running_var, num_batches_tracked).
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "replicator/replica_context.h"

namespace replicator::torch {

struct CrossReplicaBatchNormOptions {
  /* implicit */ CrossReplicaBatchNormOptions(std::int64_t num_features)
      : num_features_(num_features) {}
  TORCH_ARG(std::int64_t, num_features);
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(double, momentum) = 0.1;
  TORCH_ARG(bool, affine) = true;
  // Without running statistics, eval mode normalizes with the batch's (global) statistics.
  TORCH_ARG(bool, track_running_stats) = true;
  using ContextPointer = ReplicaContext*;  // (TORCH_ARG needs a one-word type)
  TORCH_ARG(ContextPointer, context) = nullptr;
};

// While alive, batch norm called on this thread (every CrossReplicaBatchNorm, whatever its
// options' context) normalizes by the statistics of the batch it is given and reduces
// nothing: the per-shard batch norm of logical shards (replicator/shards.h,
// ShardGradients), whose result must not depend on which replica computes the shard.
// Running statistics are updated from that batch too (ShardGradients' buffers combine them
// over the shards). Nests; never blocks or throws. Keep it on the stack of the replica's
// thread around the shards' forward and backward.
class ShardLocalBatchNorm {
 public:
  ShardLocalBatchNorm();
  ~ShardLocalBatchNorm();
  ShardLocalBatchNorm(const ShardLocalBatchNorm&) = delete;
  ShardLocalBatchNorm& operator=(const ShardLocalBatchNorm&) = delete;

 private:
  bool previous_;
};

namespace detail {

// Shared implementation; `Dims` is 1 or 2.
template <int Dims, typename Derived>
class CrossReplicaBatchNormImplBase : public ::torch::nn::Cloneable<Derived> {
 public:
  explicit CrossReplicaBatchNormImplBase(const CrossReplicaBatchNormOptions& options);
  void reset() override;
  void reset_running_stats();
  ::torch::Tensor forward(const ::torch::Tensor& input);

  CrossReplicaBatchNormOptions options;
  ::torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

}  // namespace detail

class CrossReplicaBatchNorm1dImpl
    : public detail::CrossReplicaBatchNormImplBase<1, CrossReplicaBatchNorm1dImpl> {
 public:
  using CrossReplicaBatchNormImplBase::CrossReplicaBatchNormImplBase;
};
// The module holder (what TORCH_MODULE declares; spelled out because inside namespace
// replicator the macro's `torch::nn` would name this namespace).
class CrossReplicaBatchNorm1d : public ::torch::nn::ModuleHolder<CrossReplicaBatchNorm1dImpl> {
 public:
  using ::torch::nn::ModuleHolder<CrossReplicaBatchNorm1dImpl>::ModuleHolder;
  using Impl = CrossReplicaBatchNorm1dImpl;
};

class CrossReplicaBatchNorm2dImpl
    : public detail::CrossReplicaBatchNormImplBase<2, CrossReplicaBatchNorm2dImpl> {
 public:
  using CrossReplicaBatchNormImplBase::CrossReplicaBatchNormImplBase;
};
class CrossReplicaBatchNorm2d : public ::torch::nn::ModuleHolder<CrossReplicaBatchNorm2dImpl> {
 public:
  using ::torch::nn::ModuleHolder<CrossReplicaBatchNorm2dImpl>::ModuleHolder;
  using Impl = CrossReplicaBatchNorm2dImpl;
};

}  // namespace replicator::torch
