// Batched environments with continuous actions (a Box action space), beside the discrete
// BatchedEnv of env.h and with its contract for everything but the actions: M envs stepped
// in one call, float32 observations [M × observation_size()] env-major, the "next step"
// auto-reset (the step after an episode's end ignores env i's action, starts a new episode
// and returns its first observation with reward 0), `terminated` / `truncated`, the ended
// episode's return and length, and a fixed function of (seed, i) for env i's random stream.
// No LibTorch.
//
// Tasks: "point_mass", a 1-D point mass that must be brought to 0 and kept there (a test
// task, not a benchmark): state (x, v), x0 uniform in [−1, 1], v0 = 0; the action is a force
// u in [−1, 1]; with dt = 0.1, v ← v + u dt then x ← x + v dt (semi-implicit Euler, in
// double); reward −x² after the step; the observation (x, v); never terminated, truncated
// after 50 steps.
//
// "half_cheetah": gymnasium's HalfCheetah-v5 on MuJoCo, in builds that have it (see
// docs/d4pg.md): 17 observations, 6 actions in [−1, 1], truncated after 1000 steps.
// make_continuous_env throws ConfigError where the build has no MuJoCo or the model cannot
// be read (REPLICATOR_MUJOCO_ASSETS names gymnasium's envs/mujoco/assets folder).
// Threads: a ContinuousEnv is used by one thread at a time; separate objects are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "replicator/rl/env.h"

namespace replicator::rl {

// A Box action space: action k lies in [low[k], high[k]] (low[k] < high[k], both finite).
struct ActionBounds {
  std::vector<float> low;
  std::vector<float> high;
};

class ContinuousEnv {
 public:
  virtual ~ContinuousEnv() = default;
  ContinuousEnv(const ContinuousEnv&) = delete;
  ContinuousEnv& operator=(const ContinuousEnv&) = delete;

  const std::string& name() const { return name_; }
  int num_envs() const { return num_envs_; }
  int observation_size() const { return observation_size_; }
  int action_size() const { return static_cast<int>(bounds_.low.size()); }
  const ActionBounds& action_bounds() const { return bounds_; }

  // As BatchedEnv::reset(): a new episode in every env; never blocks, never throws.
  StepResult reset();
  // Advances every env by one step; `actions` holds M × action_size() floats, env-major.
  // An action outside the bounds is clipped to them (as dm_control does). Never blocks.
  // Throws InvalidArgument, with the envs unchanged, for a wrong size or a non-finite value.
  StepResult step(std::span<const float> actions);
  // The results of the latest reset() or step().
  StepResult last() const;

 protected:
  ContinuousEnv(std::string name, int num_envs, int observation_size, ActionBounds bounds);
  virtual void do_reset() = 0;
  // Gets actions already checked and clipped; must honour the auto-reset contract.
  virtual void do_step(std::span<const float> actions) = 0;

  // The episode's bookkeeping, for do_reset() and do_step():
  // env i starts an episode: its step results, step count and return are zeroed (the task
  // writes its first observation);
  void start_episode(std::size_t i);
  // env i's step earned `reward`: it counts towards the episode, which ends terminated, or
  // truncated once it has `max_steps` steps; the env's next step is then a reset;
  void finish_step(std::size_t i, double reward, bool terminated, std::int32_t max_steps);
  // whether env i's episode has ended (its next step starts a new one).
  bool episode_over(std::size_t i) const { return over_[i] != 0; }

  std::vector<float> observations_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> terminated_;
  std::vector<std::uint8_t> truncated_;
  std::vector<float> episode_return_;
  std::vector<std::int32_t> episode_length_;

 private:
  std::string name_;
  int num_envs_;
  int observation_size_;
  ActionBounds bounds_;
  std::vector<float> clipped_;
  std::vector<double> returns_;      // of the episode so far, by env
  std::vector<std::int32_t> steps_;  // of the episode so far, by env
  std::vector<std::uint8_t> over_;   // the episode has ended, by env
};

// The names make_continuous_env accepts.
const std::vector<std::string>& continuous_env_names();

// A batch of `num_envs` copies of task `name`, env i seeded from (seed, i), already reset.
// Throws InvalidArgument for an unknown name (listing the valid ones) or num_envs < 1, and
// ConfigError for half_cheetah without MuJoCo or its model.
std::unique_ptr<ContinuousEnv> make_continuous_env(std::string_view name, int num_envs,
                                                   std::uint64_t seed);

}  // namespace replicator::rl
