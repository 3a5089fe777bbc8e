// Gradient reduction over replicas for data-parallel training (TF-Replicator's
// wrap_optimizer): after backward, every replica holds the mean (by default) of all
// replicas' gradients, so every replica's optimizer takes the same step.
//
// Gradients are packed into buckets of about `bucket_bytes` (in reverse parameter order,
// roughly the order backward produces them), and each parameter's .grad becomes a view
// into its bucket laid out as the parameter is (a channels-last weight gets a channels-last
// gradient, as autograd would make it), so packing costs no copy. With `overlap`, a bucket is
// reduced from inside backward as soon as its last gradient has been accumulated; buckets are
// always reduced in bucket order, so every replica issues the same collectives in the same order.
// A parameter that got no gradient on this replica contributes zeros; one that got no
// gradient on ANY replica keeps an undefined .grad (optimizers skip it), exactly as
// single-replica training would.
//
// Use from the replica's own thread, as every ReplicaContext call.
// Models whose set of used parameters differs between replicas in a step (data-dependent
// branches) must set overlap = false, so that all buckets are reduced in synchronize().
//
// Parameters may be on the CPU or on CUDA devices (a bucket holds parameters of one dtype on
// one device, and is reduced where it lies: replicator/device.h). Overlap needs backward's
// hooks to run on the replica's thread, as they do for CPU parameters; autograd runs those of
// CUDA parameters on a thread of its own per GPU, shared by every replica on that GPU, where
// a collective could wait forever for a replica whose backward waits for that thread. So a
// reducer with any CUDA parameter reduces every bucket in synchronize(), after backward, and
// buckets_reduced_in_backward() is 0 for it. The reduction of a CUDA bucket waits for the
// work issued on the device's default stream (LibTorch's unless the caller set another):
// gradients computed on a stream of your own must be synchronised before synchronize().
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "replicator/replica_context.h"

namespace replicator::torch {

struct GradientOptions {
  std::size_t bucket_bytes = std::size_t{25} << 20;  // a parameter larger than this gets
                                                     // a bucket of its own
  bool overlap = true;            // reduce buckets from within backward when complete
  ReduceOp op = ReduceOp::kMean;  // kSum for losses summed (not averaged) over replicas
  Deadline timeout;               // per bucket collective
};

class GradientReducer {
 public:
  // Registers on `parameters` (those with requires_grad; others are ignored). Throws
  // InvalidArgument for parameters on a device or of a dtype collectives do not carry
  // (tensor_collectives.h: device_of, dtype_of), or for bucket_bytes == 0. Does not
  // communicate.
  GradientReducer(ReplicaContext& ctx, std::vector<::torch::Tensor> parameters,
                  GradientOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Sets every gradient to zero (in place, in the buckets), and re-attaches to parameters
  // whose data was replaced since (Module::load, set_data give a parameter a new gradient
  // accumulator) and lays gradients out again where a parameter's layout changed (e.g.
  // to_memory_format). Never blocks.
  void zero_grad();

  // Reduces the buckets backward did not already reduce, in bucket order, and leaves the
  // reduced gradients in each parameter's .grad. BLOCKS (collectives); throws what
  // collectives throw, and Error when a gradient bypassed the reducer (a parameter's data
  // was replaced and zero_grad() not called before backward). Call once after each
  // backward, before the optimizer step. `where` (the caller's line) names the buckets
  // reduced here in messages; those reduced from within backward name the reducer.
  void synchronize(CallSite where = CallSite::here());

  std::size_t num_buckets() const;
  // How many buckets of the last synchronized step were reduced from within backward.
  std::size_t buckets_reduced_in_backward() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// An optimizer whose step() first reduces the gradients over replicas.
class ReplicatedOptimizer {
 public:
  // Reduces the gradients of every parameter of `optimizer`'s parameter groups.
  ReplicatedOptimizer(ReplicaContext& ctx, std::shared_ptr<::torch::optim::Optimizer> optimizer,
                      GradientOptions options = {});

  // Zeros the gradients; never blocks.
  void zero_grad() { reducer_.zero_grad(); }
  // Reduces gradients (BLOCKS; throws what collectives throw), then steps the optimizer.
  void step(CallSite where = CallSite::here()) {
    reducer_.synchronize(where);
    optimizer_->step();
  }

  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  GradientReducer& reducer() { return reducer_; }

 private:
  std::shared_ptr<::torch::optim::Optimizer> optimizer_;
  GradientReducer reducer_;
};

}  // namespace replicator::torch
