// D4PG (Barth-Maron et al. 2018, "Distributed Distributional Deterministic Policy
// Gradients"): a deterministic policy, a categorical distributional critic, their target
// networks, and one replica's part of the replicated learner's update.
//
// The update, on a batch of n-step transitions (o, a, R, D, o') (replay.h):
// - critic: the cross-entropy between the critic's distribution at (o, a) and the target
//   Φ(R + D z, p'), where p' = softmax(target_critic(o', target_policy(o'))) and Φ is the
//   categorical projection (categorical.h); averaged over the batch;
// - policy: −E[Q(o, π(o))], the mean of the critic's distribution at the policy's action,
//   averaged over the batch, its gradient taken into the policy's parameters only;
// - both losses are computed from the same (pre-update) networks, then each network's
//   Adam steps on the gradient averaged over all replicas (ReplicatedOptimizer, kMean: every
//   replica takes an equal share of the batch, so the mean of the replicas' mean gradients
//   is the whole batch's mean gradient, whatever the replica count);
// - target networks: a copy of the online networks every `target_update_period` updates
//   (the D4PG paper's and Acme's choice: the targets stay fixed between copies, and a copy
//   is exact, so every replica's targets are the same bits without any communication).
//
// Replicas may be threads or processes (mpi, gloo): with the same batches and the same
// replica count the parameters are bitwise equal on every layout; with a different count
// they agree up to float rounding.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/adam.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "replicator/replica_context.h"
#include "replicator/rl/categorical.h"
#include "replicator/rl/continuous_env.h"
#include "replicator/rl/replay.h"
#include "replicator/torch/gradient_reducer.h"

namespace replicator::rl {

// How a network's parameters start: kRandom draws them from LibTorch's default generator
// (seed it first) as torch::nn::Linear does, U(±1/√fan_in); kZeros draws nothing, for a copy
// whose parameters are loaded next (other threads' draws from the generator stay as they
// would be: the learner's target networks are made so).
enum class NetworkInit { kRandom, kZeros };

// The deterministic policy: an MLP (ReLU between `hidden` layers) whose last layer goes
// through tanh and is scaled to the bounds: a = low + (tanh(x) + 1) / 2 · (high − low).
class DeterministicPolicyImpl : public ::torch::nn::Module {
 public:
  // Throws InvalidArgument for observation_size < 1, an empty action space, bounds of
  // different sizes or with low >= high, or a hidden size < 1.
  DeterministicPolicyImpl(int observation_size, ActionBounds bounds, std::vector<int> hidden,
                          NetworkInit init = NetworkInit::kRandom);

  // `observations` [B, observation_size] float32 -> actions [B, action_size], in bounds.
  ::torch::Tensor forward(const ::torch::Tensor& observations);

  int observation_size() const { return observation_size_; }
  int action_size() const { return static_cast<int>(bounds_.low.size()); }
  const ActionBounds& bounds() const { return bounds_; }
  const std::vector<int>& hidden() const { return hidden_; }

 private:
  int observation_size_;
  ActionBounds bounds_;
  std::vector<int> hidden_;
  ::torch::Tensor low_;                  // [action_size]
  ::torch::Tensor scale_;                // (high − low) / 2
  std::vector<::torch::Tensor> layers_;  // weight, bias of each layer
};
class DeterministicPolicy : public ::torch::nn::ModuleHolder<DeterministicPolicyImpl> {
 public:
  using ::torch::nn::ModuleHolder<DeterministicPolicyImpl>::ModuleHolder;
  using Impl = DeterministicPolicyImpl;
};

// The distributional critic: an MLP (ReLU between `hidden` layers) on the concatenated
// observation and action, ending in `num_atoms` logits (a categorical distribution over a
// CategoricalSupport of as many atoms).
class DistributionalCriticImpl : public ::torch::nn::Module {
 public:
  // Throws InvalidArgument for sizes < 1 or num_atoms < 2.
  DistributionalCriticImpl(int observation_size, int action_size, int num_atoms,
                           std::vector<int> hidden, NetworkInit init = NetworkInit::kRandom);

  // [B, observation_size] and [B, action_size] float32 -> logits [B, num_atoms].
  ::torch::Tensor forward(const ::torch::Tensor& observations, const ::torch::Tensor& actions);

  int observation_size() const { return observation_size_; }
  int action_size() const { return action_size_; }
  int num_atoms() const { return num_atoms_; }
  const std::vector<int>& hidden() const { return hidden_; }

 private:
  int observation_size_;
  int action_size_;
  int num_atoms_;
  std::vector<int> hidden_;
  std::vector<::torch::Tensor> layers_;
};
class DistributionalCritic : public ::torch::nn::ModuleHolder<DistributionalCriticImpl> {
 public:
  using ::torch::nn::ModuleHolder<DistributionalCriticImpl>::ModuleHolder;
  using Impl = DistributionalCriticImpl;
};

// A batch of transitions as tensors (row b is transition b).
struct TransitionBatch {
  ::torch::Tensor observations;       // [B, O] float32
  ::torch::Tensor actions;            // [B, A]
  ::torch::Tensor rewards;            // [B]: R
  ::torch::Tensor discounts;          // [B]: D
  ::torch::Tensor next_observations;  // [B, O]
};

// Stacks `transitions`. Throws InvalidArgument for an empty span or transitions whose sizes
// differ.
TransitionBatch stack_transitions(std::span<const Transition> transitions);

struct D4pgOptions {
  double policy_learning_rate = 1e-4;  // Adam's, as Acme's D4PG
  double critic_learning_rate = 1e-4;
  double adam_eps = 1e-8;
  CategoricalSupport support;               // must have the critic's number of atoms
  std::int64_t target_update_period = 100;  // updates between copies to the targets, >= 1
};

struct D4pgStats {
  double critic_loss = 0;  // of this replica's share
  double policy_loss = 0;  // −mean Q of this replica's share
};

class D4pgLearner {
 public:
  // For replica `ctx` (used from its thread only). `policy` and `critic` are this replica's
  // networks: every replica must start from the same parameters (e.g. the same seed). The
  // target networks start as copies. Throws InvalidArgument when the networks' sizes do not
  // match each other or the support, or for a bad option.
  D4pgLearner(ReplicaContext& ctx, DeterministicPolicy policy, DistributionalCritic critic,
              const D4pgOptions& options);

  // One update from this replica's `share` of the batch (every replica calls it, with
  // shares of the same size). BLOCKS in the gradient all-reduces; throws what collectives
  // throw, and InvalidArgument for a share whose sizes do not match the networks.
  D4pgStats update(const TransitionBatch& share);
  D4pgStats update(std::span<const Transition> share) { return update(stack_transitions(share)); }

  DeterministicPolicy& policy() { return policy_; }
  DistributionalCritic& critic() { return critic_; }
  DeterministicPolicy& target_policy() { return target_policy_; }
  DistributionalCritic& target_critic() { return target_critic_; }
  std::int64_t updates() const { return updates_; }
  // The networks' Adam optimizers (for a checkpoint).
  ::torch::optim::Adam& policy_optimizer() { return *policy_optimizer_; }
  ::torch::optim::Adam& critic_optimizer() { return *critic_optimizer_; }
  // Counts `updates` updates as taken, for a learner whose networks, optimizers and target
  // networks were loaded from a checkpoint written after that many: the targets' next copy
  // then comes when it would have without the stop. Never blocks; throws InvalidArgument for
  // a negative count.
  void resume_at(std::int64_t updates);

 private:
  void update_targets();

  DeterministicPolicy policy_;
  DistributionalCritic critic_;
  DeterministicPolicy target_policy_{nullptr};
  DistributionalCritic target_critic_{nullptr};
  D4pgOptions options_;
  std::shared_ptr<::torch::optim::Adam> policy_optimizer_;
  std::shared_ptr<::torch::optim::Adam> critic_optimizer_;
  torch::ReplicatedOptimizer replicated_policy_;
  torch::ReplicatedOptimizer replicated_critic_;
  std::int64_t updates_ = 0;
};

}  // namespace replicator::rl
