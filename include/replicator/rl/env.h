// Batched reinforcement-learning environments: one object steps M independent copies of a
// game in one call (EnvPool's model), with no LibTorch.
//
// Games: "cartpole" (gymnasium's CartPole-v1) and the five MinAtar games "breakout",
// "space_invaders", "freeway", "asterix", "seaquest" (MinAtar 1.0.15's rules, all six
// actions: 0 no-op, 1 left, 2 up, 3 right, 4 down, 5 fire).
//
// The contract, for a batch of M environments:
// - Observations are float32, one contiguous buffer [M × observation_size()], env-major.
//   CartPole: 4 values (x, x_dot, theta, theta_dot), the float32 rounding of the float64
//   state, as gymnasium returns it. MinAtar: 10 × 10 × C channels-last (row, column,
//   channel), each value exactly 0.0f or 1.0f.
// - Auto-reset, "next step" convention (EnvPool; gymnasium's vector AutoresetMode.NEXT_STEP):
//   on the step where env i's episode ends, step() returns that episode's last observation,
//   its reward, `terminated[i]` or `truncated[i]` (or both) set, and the episode's
//   `episode_return[i]` (sum of its rewards) and `episode_length[i]` (its number of steps).
//   The next step() ignores actions[i], starts a new episode for env i and returns its first
//   observation with reward 0, terminated = truncated = false; that reset step is not
//   counted in any episode's length.
// - `terminated`: the game ended (CartPole's pole fell or cart left the track; a MinAtar
//   game over). `truncated`: a time limit cut the episode, not a state of the game the agent
//   sees (CartPole-v1 after 500 steps; Freeway's 2500-step clock, which MinAtar reports as
//   game over but whose remaining time is not in the observation).
// - Deterministic: env i's random stream is a fixed function of (seed, i); the same seed,
//   M-prefix and actions give bitwise-identical results on every machine.
// - Sticky actions (MinAtar): with probability `sticky_action_prob` an env repeats its
//   previous action instead of the given one; the previous action carries over episodes.
// Threads: a BatchedEnv is used by one thread at a time; separate objects are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace replicator::rl {

struct EnvOptions {
  // MinAtar only: probability in [0, 1] that an env repeats its previous action.
  double sticky_action_prob = 0.1;
  // MinAtar only: Space Invaders, Asterix and Seaquest speed up as an episode goes on.
  bool difficulty_ramping = true;
};

// One step's results, viewing buffers the environment owns: valid until the next reset() or
// step() of the same object. Every span holds M entries, observations M × observation_size().
struct StepResult {
  std::span<const float> observations;
  std::span<const float> rewards;
  std::span<const std::uint8_t> terminated;  // 0 or 1
  std::span<const std::uint8_t> truncated;   // 0 or 1
  // Set where the episode ended on this step (terminated or truncated), 0 elsewhere.
  std::span<const float> episode_return;
  std::span<const std::int32_t> episode_length;
};

class BatchedEnv {
 public:
  virtual ~BatchedEnv() = default;
  BatchedEnv(const BatchedEnv&) = delete;
  BatchedEnv& operator=(const BatchedEnv&) = delete;

  // The game's name as make_env takes it, e.g. "cartpole".
  const std::string& name() const { return name_; }
  int num_envs() const { return num_envs_; }
  // Actions are integers in [0, num_actions()): 2 for CartPole (0 push left, 1 push right),
  // 6 for MinAtar.
  int num_actions() const { return num_actions_; }
  // One env's observation: {4} for CartPole, {10, 10, C} for MinAtar.
  const std::vector<int>& observation_shape() const { return observation_shape_; }
  // Floats per env: the product of observation_shape().
  int observation_size() const { return observation_size_; }

  // Starts a new episode in every env (drawing its start from the env's stream) and returns
  // the first observations; rewards, flags and episode fields are 0. Never blocks, never
  // throws. A new BatchedEnv has already been reset once; calling reset() is optional.
  StepResult reset();
  // Advances every env by one step with actions[i] for env i (see the auto-reset contract
  // above). Never blocks, allocates nothing for CartPole. Throws InvalidArgument when
  // actions.size() != num_envs() or an action is outside [0, num_actions()); the envs are
  // then unchanged.
  StepResult step(std::span<const std::int32_t> actions);
  // The results of the latest reset() or step().
  StepResult last() const;

 protected:
  BatchedEnv(std::string name, int num_envs, int num_actions, std::vector<int> shape);
  // Game-specific work: fill the buffers below. `do_reset` restarts every env; `do_step`
  // gets validated actions and must honour the auto-reset contract.
  virtual void do_reset() = 0;
  virtual void do_step(std::span<const std::int32_t> actions) = 0;
  // Env i's reward, flags and episode fields as a reset step leaves them: all 0.
  void clear_step_fields(std::size_t i) {
    rewards_[i] = 0.0f;
    terminated_[i] = 0;
    truncated_[i] = 0;
    episode_return_[i] = 0.0f;
    episode_length_[i] = 0;
  }

  std::vector<float> observations_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> terminated_;
  std::vector<std::uint8_t> truncated_;
  std::vector<float> episode_return_;
  std::vector<std::int32_t> episode_length_;

 private:
  std::string name_;
  int num_envs_;
  int num_actions_;
  std::vector<int> observation_shape_;
  int observation_size_;
};

// The names make_env accepts, in a fixed order.
const std::vector<std::string>& env_names();

// Whether `name` is one of the five MinAtar games. Pure; throws nothing.
bool minatar_game(std::string_view name);

// A batch of `num_envs` copies of game `name` (one of env_names()), env i seeded from
// (seed, i), already reset. Does not block. Throws InvalidArgument for an unknown name,
// num_envs < 1, or sticky_action_prob outside [0, 1] (the message lists the valid values).
std::unique_ptr<BatchedEnv> make_env(std::string_view name, int num_envs, std::uint64_t seed,
                                     const EnvOptions& options = {});

// Where an actor's environments come from when they are not make_env's (for example
// make_remote_env's, in an env server: remote.h's env_factory): called with the actor's id,
// M and the seed derived for it, it returns M environments, already reset.
using EnvFactory =
    std::function<std::unique_ptr<BatchedEnv>(int actor, int num_envs, std::uint64_t seed)>;

// Actor `actor`'s `num_envs` environments: factory(actor, num_envs, seed) where a factory is
// given, else make_env(name, num_envs, seed, options). Blocks and throws as the one called.
std::unique_ptr<BatchedEnv> make_actor_env(const EnvFactory& factory, std::string_view name,
                                           int actor, int num_envs, std::uint64_t seed,
                                           const EnvOptions& options = {});

// The mean return of a uniform random policy: the floor a learning curve is read against.
// Plays a batch of 16 environments (make_actor_env(factory, name, 0, 16, seed ^ 0x5eed)) with
// actions drawn uniformly from a generator seeded with `seed`, until at least `episodes`
// episodes have ended, and returns the mean over every episode that ended (those ending on
// the last step included). Deterministic where the environments are: the same arguments give
// the same bits. Blocks while it plays (an env server's environments: a call per step).
// Throws InvalidArgument for episodes < 1, and what making or stepping the environments throws.
double random_policy_return(const EnvFactory& factory, std::string_view name, int episodes,
                            std::uint64_t seed);

}  // namespace replicator::rl
