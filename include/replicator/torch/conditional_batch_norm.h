// Class-conditional cross-replica batch norm (BigGAN's generator): the activations are
// normalized with the statistics of the GLOBAL batch (CrossReplicaBatchNorm2d, no affine
// parameters of its own), then each example gets a gain and a bias of its own, projected
// from its conditioning vector (in BigGAN: [its chunk of z, the shared class embedding]):
//   y = x̂ · (1 + gain(cond)) + bias(cond),   gain, bias: SNLinear(cond_features → C, no bias).
// Running statistics are those of the inner batch norm (named "bn.running_mean", ...).
//
// forward() and backward BLOCK in training mode on the inner batch norm's collectives (one
// each), so every replica must run the same layers in the same order; they throw what
// collectives throw, and InvalidArgument for an input that is not [N, C, H, W] or a `cond`
// that is not [N, cond_features].
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "replicator/torch/batch_norm.h"
#include "replicator/torch/spectral_norm.h"

namespace replicator::torch {

struct ConditionalBatchNormOptions {
  ConditionalBatchNormOptions(std::int64_t num_features, std::int64_t cond_features)
      : num_features_(num_features), cond_features_(cond_features) {}
  TORCH_ARG(std::int64_t, num_features);
  TORCH_ARG(std::int64_t, cond_features);
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(double, momentum) = 0.1;
  using ContextPointer = ReplicaContext*;
  TORCH_ARG(ContextPointer, context) = nullptr;  // as CrossReplicaBatchNormOptions::context
  TORCH_ARG(SpectralNormOptions, spectral_norm) = {};
};

class ConditionalBatchNorm2dImpl : public ::torch::nn::Cloneable<ConditionalBatchNorm2dImpl> {
 public:
  explicit ConditionalBatchNorm2dImpl(const ConditionalBatchNormOptions& options);
  void reset() override;
  // x [N, C, H, W], cond [N, cond_features] → [N, C, H, W].
  ::torch::Tensor forward(const ::torch::Tensor& x, const ::torch::Tensor& cond);

  ConditionalBatchNormOptions options;
  CrossReplicaBatchNorm2d bn{nullptr};
  SNLinear gain{nullptr}, bias{nullptr};
};
class ConditionalBatchNorm2d : public ::torch::nn::ModuleHolder<ConditionalBatchNorm2dImpl> {
 public:
  using ::torch::nn::ModuleHolder<ConditionalBatchNorm2dImpl>::ModuleHolder;
  using Impl = ConditionalBatchNorm2dImpl;
};

}  // namespace replicator::torch
