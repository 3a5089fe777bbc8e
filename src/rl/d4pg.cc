#include "replicator/rl/d4pg.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "replicator/errors.h"
#include "replicator/rl/policy.h"

namespace replicator::rl {

namespace {

// Registers the weight and bias of linear layers from `inputs` through `hidden` to
// `outputs` on `module` ("weight0", "bias0", "weight1", ...), initialised as `init` says.
std::vector<::torch::Tensor> register_mlp(::torch::nn::Module& module, int inputs,
                                          const std::vector<int>& hidden, int outputs,
                                          NetworkInit init, const char* who) {
  std::vector<int> widths{inputs};
  for (const int h : hidden) {
    if (h < 1) throw InvalidArgument(std::string(who) + ": hidden sizes must be >= 1");
    widths.push_back(h);
  }
  widths.push_back(outputs);
  std::vector<::torch::Tensor> layers;
  const ::torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k + 1 < widths.size(); ++k) {
    ::torch::Tensor weight = ::torch::zeros({widths[k + 1], widths[k]});
    ::torch::Tensor bias = ::torch::zeros({widths[k + 1]});
    if (init == NetworkInit::kRandom) {
      const double bound = 1 / std::sqrt(static_cast<double>(widths[k]));
      weight.uniform_(-bound, bound);
      bias.uniform_(-bound, bound);
    }
    layers.push_back(module.register_parameter("weight" + std::to_string(k), weight));
    layers.push_back(module.register_parameter("bias" + std::to_string(k), bias));
  }
  return layers;
}

// The MLP's forward: ReLU after every layer but the last.
::torch::Tensor mlp_forward(::torch::Tensor x, const std::vector<::torch::Tensor>& layers) {
  for (std::size_t k = 0; k < layers.size(); k += 2) {
    x = ::torch::nn::functional::linear(x, layers[k], layers[k + 1]);
    if (k + 2 < layers.size()) x = ::torch::relu(x);
  }
  return x;
}

void check_rows(const ::torch::Tensor& t, std::int64_t rows, std::int64_t columns,
                const char* what) {
  const bool ok = columns < 0 ? (t.dim() == 1 && t.size(0) == rows)
                              : (t.dim() == 2 && t.size(0) == rows && t.size(1) == columns);
  if (!ok) {
    throw InvalidArgument("D4pgLearner::update: the batch's " + std::string(what) + " have shape " +
                          c10::str(t.sizes()) + ", expected [" + std::to_string(rows) +
                          (columns < 0 ? "" : ", " + std::to_string(columns)) + "]");
  }
}

}  // namespace

DeterministicPolicyImpl::DeterministicPolicyImpl(int observation_size, ActionBounds bounds,
                                                 std::vector<int> hidden, NetworkInit init)
    : observation_size_(observation_size), bounds_(std::move(bounds)), hidden_(std::move(hidden)) {
  const std::size_t A = bounds_.low.size();
  bool ok = observation_size >= 1 && A >= 1 && bounds_.high.size() == A;
  for (std::size_t k = 0; ok && k < A; ++k) {
    ok = std::isfinite(bounds_.low[k]) && std::isfinite(bounds_.high[k]) &&
         bounds_.low[k] < bounds_.high[k];
  }
  if (!ok) {
    throw InvalidArgument("DeterministicPolicy: needs observation_size >= 1 (got " +
                          std::to_string(observation_size) +
                          ") and action bounds of one size >= 1 with finite low < high (got " +
                          std::to_string(A) + " low, " + std::to_string(bounds_.high.size()) +
                          " high)");
  }
  const auto n = static_cast<std::int64_t>(A);
  const ::torch::Tensor low = ::torch::from_blob(bounds_.low.data(), {n}, ::torch::kFloat32);
  const ::torch::Tensor high = ::torch::from_blob(bounds_.high.data(), {n}, ::torch::kFloat32);
  low_ = low.clone();
  scale_ = (high - low) / 2;
  layers_ = register_mlp(*this, observation_size, hidden_, static_cast<int>(A), init,
                         "DeterministicPolicy");
}

::torch::Tensor DeterministicPolicyImpl::forward(const ::torch::Tensor& observations) {
  return low_ + (::torch::tanh(mlp_forward(observations, layers_)) + 1) * scale_;
}

DistributionalCriticImpl::DistributionalCriticImpl(int observation_size, int action_size,
                                                   int num_atoms, std::vector<int> hidden,
                                                   NetworkInit init)
    : observation_size_(observation_size),
      action_size_(action_size),
      num_atoms_(num_atoms),
      hidden_(std::move(hidden)) {
  if (observation_size < 1 || action_size < 1 || num_atoms < 2) {
    throw InvalidArgument(
        "DistributionalCritic: needs observation and action sizes >= 1 and "
        "num_atoms >= 2, got " +
        std::to_string(observation_size) + ", " + std::to_string(action_size) + " and " +
        std::to_string(num_atoms));
  }
  layers_ = register_mlp(*this, observation_size + action_size, hidden_, num_atoms, init,
                         "DistributionalCritic");
}

::torch::Tensor DistributionalCriticImpl::forward(const ::torch::Tensor& observations,
                                                  const ::torch::Tensor& actions) {
  return mlp_forward(::torch::cat({observations, actions}, 1), layers_);
}

TransitionBatch stack_transitions(std::span<const Transition> transitions) {
  if (transitions.empty()) throw InvalidArgument("stack_transitions: no transitions");
  const std::size_t O = transitions.front().observation.size();
  const std::size_t A = transitions.front().action.size();
  const auto B = static_cast<std::int64_t>(transitions.size());
  TransitionBatch batch{
      .observations = ::torch::empty({B, static_cast<std::int64_t>(O)}, ::torch::kFloat32),
      .actions = ::torch::empty({B, static_cast<std::int64_t>(A)}, ::torch::kFloat32),
      .rewards = ::torch::empty({B}, ::torch::kFloat32),
      .discounts = ::torch::empty({B}, ::torch::kFloat32),
      .next_observations = ::torch::empty({B, static_cast<std::int64_t>(O)}, ::torch::kFloat32)};
  float* obs = batch.observations.data_ptr<float>();
  float* act = batch.actions.data_ptr<float>();
  float* next = batch.next_observations.data_ptr<float>();
  float* rew = batch.rewards.data_ptr<float>();
  float* dis = batch.discounts.data_ptr<float>();
  for (std::size_t b = 0; b < transitions.size(); ++b) {
    const Transition& t = transitions[b];
    if (t.observation.size() != O || t.next_observation.size() != O || t.action.size() != A) {
      throw InvalidArgument("stack_transitions: transition " + std::to_string(b) + " has " +
                            std::to_string(t.observation.size()) + " and " +
                            std::to_string(t.next_observation.size()) + " observation values and " +
                            std::to_string(t.action.size()) + " action values, the first " +
                            std::to_string(O) + " and " + std::to_string(A));
    }
    std::memcpy(obs + b * O, t.observation.data(), O * sizeof(float));
    std::memcpy(next + b * O, t.next_observation.data(), O * sizeof(float));
    std::memcpy(act + b * A, t.action.data(), A * sizeof(float));
    rew[b] = t.reward;
    dis[b] = t.discount;
  }
  return batch;
}

namespace {

std::shared_ptr<::torch::optim::Adam> adam(std::vector<::torch::Tensor> parameters, double lr,
                                           double eps) {
  return std::make_shared<::torch::optim::Adam>(std::move(parameters),
                                                ::torch::optim::AdamOptions(lr).eps(eps));
}

// Every replica's step on the mean of the replicas' gradients; reduced after backward, not
// from within it, so the order of the two networks' collectives is the order of step().
constexpr torch::GradientOptions kReduce{.overlap = false, .op = ReduceOp::kMean};

}  // namespace

D4pgLearner::D4pgLearner(ReplicaContext& ctx, DeterministicPolicy policy,
                         DistributionalCritic critic, const D4pgOptions& options)
    : policy_(std::move(policy)),
      critic_(std::move(critic)),
      options_(options),
      policy_optimizer_(
          adam(policy_->parameters(), options.policy_learning_rate, options.adam_eps)),
      critic_optimizer_(
          adam(critic_->parameters(), options.critic_learning_rate, options.adam_eps)),
      replicated_policy_(ctx, policy_optimizer_, kReduce),
      replicated_critic_(ctx, critic_optimizer_, kReduce) {
  if (policy_->observation_size() != critic_->observation_size() ||
      policy_->action_size() != critic_->action_size() ||
      critic_->num_atoms() != options.support.num_atoms) {
    throw InvalidArgument("D4pgLearner: the policy (" +
                          std::to_string(policy_->observation_size()) + " -> " +
                          std::to_string(policy_->action_size()) + "), the critic (" +
                          std::to_string(critic_->observation_size()) + " + " +
                          std::to_string(critic_->action_size()) + " -> " +
                          std::to_string(critic_->num_atoms()) + " atoms) and the support (" +
                          std::to_string(options.support.num_atoms) + " atoms) do not match");
  }
  if (options.target_update_period < 1) {
    throw InvalidArgument("D4pgLearner: target_update_period must be >= 1, got " +
                          std::to_string(options.target_update_period));
  }
  // Made without drawing from the default generator, which other replica threads may be
  // drawing their networks from at this moment.
  target_policy_ = DeterministicPolicy(policy_->observation_size(), policy_->bounds(),
                                       policy_->hidden(), NetworkInit::kZeros);
  target_critic_ =
      DistributionalCritic(critic_->observation_size(), critic_->action_size(),
                           critic_->num_atoms(), critic_->hidden(), NetworkInit::kZeros);
  for (::torch::Tensor& p : target_policy_->parameters()) p.set_requires_grad(false);
  for (::torch::Tensor& p : target_critic_->parameters()) p.set_requires_grad(false);
  update_targets();
}

void D4pgLearner::update_targets() {
  load_parameters(*target_policy_, flatten_parameters(*policy_));
  load_parameters(*target_critic_, flatten_parameters(*critic_));
}

void D4pgLearner::resume_at(std::int64_t updates) {
  if (updates < 0) {
    throw InvalidArgument("D4pgLearner::resume_at: a negative update count (" +
                          std::to_string(updates) + ")");
  }
  updates_ = updates;
}

D4pgStats D4pgLearner::update(const TransitionBatch& share) {
  const std::int64_t B = share.observations.size(0);
  const std::int64_t O = policy_->observation_size();
  check_rows(share.observations, B, O, "observations");
  check_rows(share.next_observations, B, O, "next observations");
  check_rows(share.actions, B, policy_->action_size(), "actions");
  check_rows(share.rewards, B, -1, "rewards");
  check_rows(share.discounts, B, -1, "discounts");

  replicated_critic_.zero_grad();
  replicated_policy_.zero_grad();
  ::torch::Tensor target;
  {
    const ::torch::NoGradGuard no_grad;
    const ::torch::Tensor next_logits = target_critic_->forward(
        share.next_observations, target_policy_->forward(share.next_observations));
    target = categorical_projection(::torch::softmax(next_logits, 1), share.rewards,
                                    share.discounts, options_.support);
  }
  const ::torch::Tensor logits = critic_->forward(share.observations, share.actions);
  const ::torch::Tensor critic_loss = -(target * ::torch::log_softmax(logits, 1)).sum(1).mean();
  critic_loss.backward();

  // Through the critic into the policy only: the critic's gradients are its own loss's.
  const ::torch::Tensor q = categorical_mean(
      critic_->forward(share.observations, policy_->forward(share.observations)), options_.support);
  const ::torch::Tensor policy_loss = -q.mean();
  policy_loss.backward({}, std::nullopt, false, policy_->parameters());

  replicated_critic_.step();
  replicated_policy_.step();
  if (++updates_ % options_.target_update_period == 0) update_targets();
  return {.critic_loss = critic_loss.item<double>(), .policy_loss = policy_loss.item<double>()};
}

}  // namespace replicator::rl
