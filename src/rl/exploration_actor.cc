#include "replicator/rl/exploration_actor.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "replicator/errors.h"
#include "replicator/rl/policy.h"
#include "src/rl/seeding.h"

namespace replicator::rl {

namespace {
// What starting_ says of an env: its current observation starts an episode (a new actor), or
// its next step is the reset step after an episode's end (the action is ignored and the
// observation it returns starts the next episode).
constexpr std::uint8_t kStartHere = 1;
constexpr std::uint8_t kResetStep = 2;
}  // namespace

ExplorationActor::ExplorationActor(ContinuousEnv& env, DeterministicPolicy policy,
                                   const ExplorationOptions& options)
    : env_(env),
      policy_(std::move(policy)),
      options_(options),
      accumulator_(env.num_envs(), options.n_step, options.discount, env.observation_size(),
                   env.action_size()),
      noise_state_(splitmix64(options.seed)) {
  if (policy_->observation_size() != env.observation_size() ||
      policy_->bounds().low != env.action_bounds().low ||
      policy_->bounds().high != env.action_bounds().high) {
    throw InvalidArgument(
        "ExplorationActor: the policy's observation size and action bounds "
        "differ from those of the environment \"" +
        env.name() + "\"");
  }
  if (!(options.noise_std >= 0) || !std::isfinite(options.noise_std)) {
    throw InvalidArgument("ExplorationActor: noise_std must be >= 0, got " +
                          std::to_string(options.noise_std));
  }
  starting_.assign(static_cast<std::size_t>(env.num_envs()), kStartHere);
  actions_.assign(static_cast<std::size_t>(env.num_envs() * env.action_size()), 0.f);
}

void ExplorationActor::load_policy(std::span<const float> flat) { load_parameters(*policy_, flat); }

double ExplorationActor::gaussian() {
  // Box–Muller's cosine branch; 1 − u keeps the logarithm's argument in (0, 1].
  SplitMix64 rng(noise_state_);
  const double u1 = 1 - rng.uniform();
  const double u2 = rng.uniform();
  noise_state_ = rng.state();
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

void ExplorationActor::step(std::vector<Transition>& out) {
  const StepResult now = env_.last();
  const int M = env_.num_envs();
  const int O = env_.observation_size();
  const int A = env_.action_size();
  for (int i = 0; i < M; ++i) {
    if (starting_[static_cast<std::size_t>(i)] == kStartHere) {
      accumulator_.start(i, now.observations.subspan(static_cast<std::size_t>(i * O),
                                                     static_cast<std::size_t>(O)));
      starting_[static_cast<std::size_t>(i)] = 0;
    }
  }
  {
    const ::torch::NoGradGuard no_grad;
    const ::torch::Tensor obs =
        ::torch::from_blob(const_cast<float*>(now.observations.data()), {M, O}, ::torch::kFloat32);
    const ::torch::Tensor a = policy_->forward(obs).contiguous();
    const float* greedy = a.data_ptr<float>();
    const ActionBounds& b = env_.action_bounds();
    for (int i = 0; i < M * A; ++i) {
      const auto k = static_cast<std::size_t>(i % A);
      const double half = (static_cast<double>(b.high[k]) - b.low[k]) / 2;
      const double noisy = greedy[i] + options_.noise_std * half * gaussian();
      actions_[static_cast<std::size_t>(i)] =
          std::clamp(static_cast<float>(noisy), b.low[k], b.high[k]);
    }
  }
  const StepResult next = env_.step(actions_);
  for (int i = 0; i < M; ++i) {
    const auto e = static_cast<std::size_t>(i);
    const std::span<const float> observation =
        next.observations.subspan(e * static_cast<std::size_t>(O), static_cast<std::size_t>(O));
    if (starting_[e] == kResetStep) {  // its first observation starts the next episode
      accumulator_.start(i, observation);
      starting_[e] = 0;
      continue;
    }
    const bool done = next.terminated[e] || next.truncated[e];
    accumulator_.add(i,
                     std::span<const float>(actions_).subspan(e * static_cast<std::size_t>(A), A),
                     next.rewards[e], next.terminated[e] ? 0.f : 1.f, observation, done, out);
    if (done) {
      returns_.push_back(next.episode_return[e]);
      starting_[e] = kResetStep;
    }
  }
}

}  // namespace replicator::rl
