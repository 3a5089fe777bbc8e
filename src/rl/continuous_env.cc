// ContinuousEnv's checks, the point mass and the factory.
#include "replicator/rl/continuous_env.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "replicator/errors.h"
#include "src/rl/mujoco_env.h"
#include "src/rl/seeding.h"

namespace replicator::rl {

ContinuousEnv::ContinuousEnv(std::string name, int num_envs, int observation_size,
                             ActionBounds bounds)
    : name_(std::move(name)),
      num_envs_(num_envs),
      observation_size_(observation_size),
      bounds_(std::move(bounds)) {
  const auto m = static_cast<std::size_t>(num_envs);
  observations_.assign(m * static_cast<std::size_t>(observation_size), 0.0f);
  rewards_.assign(m, 0.0f);
  terminated_.assign(m, 0);
  truncated_.assign(m, 0);
  episode_return_.assign(m, 0.0f);
  episode_length_.assign(m, 0);
  clipped_.assign(m * bounds_.low.size(), 0.0f);
  returns_.assign(m, 0.0);
  steps_.assign(m, 0);
  over_.assign(m, 0);
}

void ContinuousEnv::start_episode(std::size_t i) {
  returns_[i] = 0;
  steps_[i] = 0;
  over_[i] = 0;
  rewards_[i] = 0;
  terminated_[i] = truncated_[i] = 0;
  episode_return_[i] = 0;
  episode_length_[i] = 0;
}

void ContinuousEnv::finish_step(std::size_t i, double reward, bool terminated,
                                std::int32_t max_steps) {
  returns_[i] += reward;
  rewards_[i] = static_cast<float>(reward);
  ++steps_[i];
  const bool truncated = !terminated && steps_[i] == max_steps;
  const bool ended = terminated || truncated;
  terminated_[i] = terminated ? 1 : 0;
  truncated_[i] = truncated ? 1 : 0;
  episode_return_[i] = ended ? static_cast<float>(returns_[i]) : 0.f;
  episode_length_[i] = ended ? steps_[i] : 0;
  over_[i] = ended ? 1 : 0;
}

StepResult ContinuousEnv::reset() {
  do_reset();
  return last();
}

StepResult ContinuousEnv::step(std::span<const float> actions) {
  if (actions.size() != clipped_.size()) {
    throw InvalidArgument(name_ + ": step() needs " + std::to_string(action_size()) +
                          " action values per env, " + std::to_string(clipped_.size()) +
                          " in all, got " + std::to_string(actions.size()));
  }
  const std::size_t A = bounds_.low.size();
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (!std::isfinite(actions[i])) {
      throw InvalidArgument(name_ + ": action value " + std::to_string(i % A) + " of env " +
                            std::to_string(i / A) + " is not finite");
    }
  }
  for (std::size_t i = 0; i < actions.size(); ++i) {
    clipped_[i] = std::clamp(actions[i], bounds_.low[i % A], bounds_.high[i % A]);
  }
  do_step(clipped_);
  return last();
}

StepResult ContinuousEnv::last() const {
  return StepResult{.observations = observations_,
                    .rewards = rewards_,
                    .terminated = terminated_,
                    .truncated = truncated_,
                    .episode_return = episode_return_,
                    .episode_length = episode_length_};
}

namespace {

class PointMass final : public ContinuousEnv {
 public:
  static constexpr int kMaxEpisodeSteps = 50;
  static constexpr double kDt = 0.1;

  PointMass(int num_envs, std::uint64_t seed)
      : ContinuousEnv("point_mass", num_envs, 2, ActionBounds{{-1.f}, {1.f}}) {
    const auto m = static_cast<std::size_t>(num_envs);
    x_.assign(m, 0);
    v_.assign(m, 0);
    for (std::size_t i = 0; i < m; ++i) rng_.emplace_back(env_seed(seed, i));
    do_reset();
  }

 private:
  void do_reset() override {
    for (std::size_t i = 0; i < x_.size(); ++i) reset_env(i);
  }

  void reset_env(std::size_t i) {
    x_[i] = 2 * rng_[i].uniform() - 1;
    v_[i] = 0;
    start_episode(i);
    write_observation(i);
  }

  void do_step(std::span<const float> actions) override {
    for (std::size_t i = 0; i < x_.size(); ++i) {
      if (episode_over(i)) {
        reset_env(i);
        continue;
      }
      v_[i] += static_cast<double>(actions[i]) * kDt;
      x_[i] += v_[i] * kDt;
      finish_step(i, -x_[i] * x_[i], false, kMaxEpisodeSteps);
      write_observation(i);
    }
  }

  void write_observation(std::size_t i) {
    observations_[2 * i] = static_cast<float>(x_[i]);
    observations_[2 * i + 1] = static_cast<float>(v_[i]);
  }

  std::vector<double> x_, v_;
  std::vector<SplitMix64> rng_;
};

}  // namespace

const std::vector<std::string>& continuous_env_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = {"point_mass"};
#ifdef REPLICATOR_HAVE_MUJOCO
    for (const std::string& name : mujoco_env_names()) all.push_back(name);
#endif
    return all;
  }();
  return names;
}

std::unique_ptr<ContinuousEnv> make_continuous_env(std::string_view name, int num_envs,
                                                   std::uint64_t seed) {
  if (num_envs < 1) {
    throw InvalidArgument("make_continuous_env(\"" + std::string(name) +
                          "\"): num_envs must be >= 1, got " + std::to_string(num_envs));
  }
  if (name == "point_mass") return std::make_unique<PointMass>(num_envs, seed);
#ifdef REPLICATOR_HAVE_MUJOCO
  if (auto env = make_mujoco_env(name, num_envs, seed)) return env;
#else
  if (name == "half_cheetah") {
    throw ConfigError(
        "make_continuous_env: \"half_cheetah\" needs MuJoCo, and this build has "
        "none; install Debian's libmujoco-dev (scripts/install_deps.sh) and build "
        "again");
  }
#endif
  std::string valid;
  for (const std::string& n : continuous_env_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InvalidArgument("make_continuous_env: unknown task \"" + std::string(name) +
                        "\"; the tasks are " + valid);
}

}  // namespace replicator::rl
