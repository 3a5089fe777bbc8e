// Experience replay for off-policy learners (D4PG): n-step transitions, the accumulator
// that makes them from each environment's stream of steps, and a uniform replay buffer.
// No LibTorch.
//
// An n-step transition from step t of an episode, with rewards r and per-step discounts d
// (1, or 0 on the step that terminates the episode) and the learner's γ:
//   observation       o_t
//   action            a_t
//   reward            R = Σ_{k<m} (Π_{j<k} γ d_{t+j}) r_{t+k}  (Σ γ^k r_{t+k} in an episode)
//   discount          D = Π_{k<m} γ d_{t+k}                     (γ^m, or 0 past a termination)
//   next_observation  o_{t+m}
// where m = n, or fewer when the episode ends (terminates or is truncated) within the
// window: the window is cut at the episode's last step and o_{t+m} is its last observation.
// The learner's target is R + D · Q(o_{t+m}, ·).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

namespace replicator::rl {

struct Transition {
  std::vector<float> observation;
  std::vector<float> action;
  float reward = 0;    // R, the discounted sum of up to n rewards
  float discount = 0;  // D, what multiplies the bootstrap value of next_observation
  std::vector<float> next_observation;
};

// Turns the steps of `num_envs` environments into n-step transitions, each environment's
// steps kept apart (its window holds its last n steps).
//
// Per environment: start(env, o_0) at the beginning of each episode, then for each step
// add(env, a_t, r_t, d_t, o_{t+1}, done_t): r_t the reward of action a_t, d_t its discount (0
// when the step terminated the episode, 1 otherwise, also on a time-limit truncation, so
// that the learner bootstraps from o_{t+1}), done_t whether the episode ended on this step
// (terminated or truncated). Once the window holds n steps each add() completes the
// transition of its oldest step; an add() with done completes every step still in the
// window (the shorter windows at the episode's end). Transitions are appended to `out`.
// Threads: one thread at a time (an actor's); separate objects are independent.
class NStepAccumulator {
 public:
  // Throws InvalidArgument for num_envs < 1, n < 1, discount outside [0, 1] or negative
  // sizes.
  NStepAccumulator(int num_envs, int n, double discount, int observation_size, int action_size);

  // Starts an episode of env `env` at observation `first`, dropping any steps of an
  // episode that did not end (their transitions are never completed). Throws
  // InvalidArgument for an env outside [0, num_envs) or an observation of the wrong size.
  void start(int env, std::span<const float> first);

  // Adds one step of env `env` (see above). Throws InvalidArgument for an env outside
  // [0, num_envs), an env with no start() since its last episode ended, a discount outside
  // [0, 1], or an action or observation of the wrong size; nothing is added then.
  void add(int env, std::span<const float> action, float reward, float discount,
           std::span<const float> next_observation, bool done, std::vector<Transition>& out);

  int n() const { return n_; }
  int num_envs() const { return static_cast<int>(envs_.size()); }

 private:
  struct Step {
    std::vector<float> observation;  // o_t
    std::vector<float> action;
    float reward = 0;
    float discount = 0;
  };
  struct Env {
    bool started = false;
    std::deque<Step> window;     // the oldest step first, at most n
    std::vector<float> current;  // the observation the next step acts on
  };
  // The transition of `env`'s oldest step, its window ending at `last` (o_{t+m}).
  Transition complete(const Env& env, const std::vector<float>& last) const;
  void check_env(int env, const char* call) const;

  int n_;
  double discount_;
  int observation_size_;
  int action_size_;
  std::vector<Env> envs_;
};

struct ReplayOptions {
  std::size_t capacity = 1000000;  // transitions kept at most, >= 1; the oldest leave first
  std::size_t min_size = 1;        // sample() refuses while fewer are inside; >= 1
  std::uint64_t seed = 0;          // of the sampling stream
};

// A fixed-capacity replay buffer: insert() appends (evicting the oldest transition when full),
// sample(k) draws k transitions uniformly with replacement from those inside, from a
// generator seeded with ReplayOptions::seed (the same inserts and samples in the same order
// draw the same transitions on every machine).
// Threads: every member function may be called from any thread, concurrently (actors
// inserting while the learner samples); calls are serialised by one lock, so with several
// threads the draws follow the order in which the calls took it. Never blocks for longer
// than another call's copy.
class ReplayBuffer {
 public:
  // Throws InvalidArgument for capacity == 0, min_size == 0 or min_size > capacity.
  explicit ReplayBuffer(const ReplayOptions& options);

  void insert(Transition transition);

  // k transitions drawn uniformly with replacement (copies). Throws InvalidArgument, with
  // nothing drawn, when fewer than min_size are inside.
  std::vector<Transition> sample(std::size_t k);

  std::size_t size() const;
  std::size_t capacity() const { return options_.capacity; }
  std::int64_t inserted() const;  // since construction, evicted ones included

 private:
  // A uniform index in [0, bound), unbiased; advances state_.
  std::size_t draw(std::size_t bound);

  ReplayOptions options_;
  mutable std::mutex mu_;
  std::vector<Transition> items_;  // a ring: the oldest at head_ once full
  std::size_t head_ = 0;
  std::int64_t inserted_ = 0;
  std::uint64_t state_;  // of the SplitMix64 sampling stream
};

}  // namespace replicator::rl
