// BatchedEnv's checks, the factories and a random policy's return. The games live in
// cartpole.cc and minatar/.
#include "replicator/rl/env.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "src/rl/cartpole.h"
#include "src/rl/minatar/minatar_env.h"

namespace replicator::rl {

BatchedEnv::BatchedEnv(std::string name, int num_envs, int num_actions, std::vector<int> shape)
    : name_(std::move(name)),
      num_envs_(num_envs),
      num_actions_(num_actions),
      observation_shape_(std::move(shape)),
      observation_size_(1) {
  for (int d : observation_shape_) observation_size_ *= d;
  const auto m = static_cast<std::size_t>(num_envs);
  observations_.assign(m * static_cast<std::size_t>(observation_size_), 0.0f);
  rewards_.assign(m, 0.0f);
  terminated_.assign(m, 0);
  truncated_.assign(m, 0);
  episode_return_.assign(m, 0.0f);
  episode_length_.assign(m, 0);
}

StepResult BatchedEnv::reset() {
  do_reset();
  return last();
}

StepResult BatchedEnv::step(std::span<const std::int32_t> actions) {
  if (actions.size() != static_cast<std::size_t>(num_envs_)) {
    throw InvalidArgument(name_ + ": step() needs one action per env: expected " +
                          std::to_string(num_envs_) + " actions, got " +
                          std::to_string(actions.size()));
  }
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i] < 0 || actions[i] >= num_actions_) {
      throw InvalidArgument(name_ + ": action " + std::to_string(actions[i]) + " of env " +
                            std::to_string(i) + " is out of range: actions are 0.." +
                            std::to_string(num_actions_ - 1));
    }
  }
  do_step(actions);
  return last();
}

StepResult BatchedEnv::last() const {
  return StepResult{.observations = observations_,
                    .rewards = rewards_,
                    .terminated = terminated_,
                    .truncated = truncated_,
                    .episode_return = episode_return_,
                    .episode_length = episode_length_};
}

const std::vector<std::string>& env_names() {
  static const std::vector<std::string> names = {"cartpole", "breakout", "space_invaders",
                                                 "freeway",  "asterix",  "seaquest"};
  return names;
}

bool minatar_game(std::string_view name) { return minatar::game_kind(name).has_value(); }

std::unique_ptr<BatchedEnv> make_env(std::string_view name, int num_envs, std::uint64_t seed,
                                     const EnvOptions& options) {
  std::string valid;
  for (const std::string& n : env_names()) valid += (valid.empty() ? "" : ", ") + n;
  if (num_envs < 1) {
    throw InvalidArgument("make_env(\"" + std::string(name) + "\"): num_envs must be >= 1, got " +
                          std::to_string(num_envs));
  }
  if (!(options.sticky_action_prob >= 0.0 && options.sticky_action_prob <= 1.0)) {
    throw InvalidArgument("make_env(\"" + std::string(name) +
                          "\"): sticky_action_prob must be in [0, 1], got " +
                          std::to_string(options.sticky_action_prob));
  }
  if (name == "cartpole") return std::make_unique<CartPole>(num_envs, seed);
  if (auto game = minatar::game_kind(name)) {
    return std::make_unique<minatar::MinAtarEnv>(*game, num_envs, seed, options);
  }
  throw InvalidArgument("make_env: unknown environment \"" + std::string(name) +
                        "\"; valid names: " + valid);
}

std::unique_ptr<BatchedEnv> make_actor_env(const EnvFactory& factory, std::string_view name,
                                           int actor, int num_envs, std::uint64_t seed,
                                           const EnvOptions& options) {
  return factory ? factory(actor, num_envs, seed) : make_env(name, num_envs, seed, options);
}

double random_policy_return(const EnvFactory& factory, std::string_view name, int episodes,
                            std::uint64_t seed) {
  if (episodes < 1) {
    throw InvalidArgument("random_policy_return: episodes must be at least 1, got " +
                          std::to_string(episodes));
  }
  const std::unique_ptr<BatchedEnv> batch = make_actor_env(factory, name, 0, 16, seed ^ 0x5eedULL);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> action(0, batch->num_actions() - 1);
  std::vector<std::int32_t> actions(static_cast<std::size_t>(batch->num_envs()));
  double sum = 0;
  int finished = 0;
  while (finished < episodes) {
    for (std::int32_t& a : actions) a = action(rng);
    const StepResult r = batch->step(actions);
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (r.terminated[i] != 0 || r.truncated[i] != 0) {
        sum += r.episode_return[i];
        ++finished;
      }
    }
  }
  return sum / finished;
}

}  // namespace replicator::rl
