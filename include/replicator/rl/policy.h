// The actor-critic network of the IMPALA job, and its parameters as one flat vector (what
// ParameterStore publishes).
//
// For a vector observation (CartPole: 4 floats) a two-layer perceptron, `hidden` units
// each, tanh; for an image observation H × W × C, channels last (MinAtar: 10 × 10 × C) the
// MinAtar paper's network: a 3 × 3 convolution with 16 filters (stride 1, no padding),
// ReLU, a fully connected layer of `hidden` units, ReLU; for an image at least 36 × 36 (Atari:
// 84 × 84 × 4 stacked frames) the IMPALA paper's shallow network: 8 × 8 convolution with 16
// filters at stride 4, ReLU, 4 × 4 with 32 at stride 2, ReLU, `hidden` units (256 in the
// paper), ReLU. All end in two linear heads: the policy's logits over the actions and the
// value.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <span>
#include <utility>
#include <vector>

namespace replicator::rl {

struct PolicyOutput {
  ::torch::Tensor logits;  // [N, A]
  ::torch::Tensor value;   // [N]
};

class PolicyNetImpl : public ::torch::nn::Module {
 public:
  // `observation_shape`: {size} or {H, W, C}; `hidden` > 0. Parameters are initialised from
  // LibTorch's default generator (seed it first for a reproducible network). Throws
  // InvalidArgument for another shape or non-positive sizes.
  PolicyNetImpl(std::vector<int> observation_shape, int num_actions, int hidden);

  // `observations` [N, observation size] float32, env-major as BatchedEnv returns them.
  // Never blocks; throws what LibTorch throws for a wrong size.
  PolicyOutput forward(const ::torch::Tensor& observations);

  const std::vector<int>& observation_shape() const { return shape_; }
  int num_actions() const { return num_actions_; }

 private:
  std::vector<int> shape_;
  int num_actions_;
  ::torch::nn::Sequential torso_{nullptr};
  ::torch::nn::Linear policy_{nullptr};
  ::torch::nn::Linear value_{nullptr};
};
// The module holder (what TORCH_MODULE would declare; spelled out because inside namespace
// replicator the name `torch` means replicator::torch).
class PolicyNet : public ::torch::nn::ModuleHolder<PolicyNetImpl> {
 public:
  using ::torch::nn::ModuleHolder<PolicyNetImpl>::ModuleHolder;
  using Impl = PolicyNetImpl;
};

// The parameters of `module` (in parameters() order) copied into one vector.
std::vector<float> flatten_parameters(::torch::nn::Module& module);
// Copies `flat` (as flatten_parameters wrote it) into the parameters of `module`. Throws
// InvalidArgument when the sizes differ.
void load_parameters(::torch::nn::Module& module, std::span<const float> flat);

}  // namespace replicator::rl
