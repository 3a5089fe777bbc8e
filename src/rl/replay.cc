#include "replicator/rl/replay.h"

#include <string>
#include <utility>

#include "replicator/errors.h"
#include "src/rl/seeding.h"

namespace replicator::rl {

namespace {

void check_size(std::span<const float> values, int expected, const char* what, const char* call) {
  if (values.size() != static_cast<std::size_t>(expected)) {
    throw InvalidArgument(std::string(call) + ": the " + what + " has " +
                          std::to_string(values.size()) + " values, expected " +
                          std::to_string(expected));
  }
}

}  // namespace

NStepAccumulator::NStepAccumulator(int num_envs, int n, double discount, int observation_size,
                                   int action_size)
    : n_(n), discount_(discount), observation_size_(observation_size), action_size_(action_size) {
  if (num_envs < 1 || n < 1 || observation_size < 0 || action_size < 0 ||
      !(discount >= 0 && discount <= 1)) {
    throw InvalidArgument("NStepAccumulator: needs num_envs >= 1 (got " + std::to_string(num_envs) +
                          "), n >= 1 (got " + std::to_string(n) + "), a discount in [0, 1] (got " +
                          std::to_string(discount) + ") and sizes >= 0");
  }
  envs_.resize(static_cast<std::size_t>(num_envs));
}

void NStepAccumulator::check_env(int env, const char* call) const {
  if (env < 0 || env >= num_envs()) {
    throw InvalidArgument(std::string(call) + ": env " + std::to_string(env) + " is outside [0, " +
                          std::to_string(num_envs()) + ")");
  }
}

void NStepAccumulator::start(int env, std::span<const float> first) {
  check_env(env, "NStepAccumulator::start");
  check_size(first, observation_size_, "observation", "NStepAccumulator::start");
  Env& e = envs_[static_cast<std::size_t>(env)];
  e.window.clear();
  e.current.assign(first.begin(), first.end());
  e.started = true;
}

Transition NStepAccumulator::complete(const Env& env, const std::vector<float>& last) const {
  // Summed in double, oldest step first, as the formula in the header reads.
  double reward = 0;
  double discount = 1;
  for (const Step& s : env.window) {
    reward += discount * s.reward;
    discount *= discount_ * s.discount;
  }
  const Step& first = env.window.front();
  return Transition{.observation = first.observation,
                    .action = first.action,
                    .reward = static_cast<float>(reward),
                    .discount = static_cast<float>(discount),
                    .next_observation = last};
}

void NStepAccumulator::add(int env, std::span<const float> action, float reward, float discount,
                           std::span<const float> next_observation, bool done,
                           std::vector<Transition>& out) {
  const char* call = "NStepAccumulator::add";
  check_env(env, call);
  Env& e = envs_[static_cast<std::size_t>(env)];
  if (!e.started) {
    throw InvalidArgument("NStepAccumulator::add: env " + std::to_string(env) +
                          " has no episode: call start() with its first observation");
  }
  if (!(discount >= 0 && discount <= 1)) {
    throw InvalidArgument("NStepAccumulator::add: a step's discount must be in [0, 1], got " +
                          std::to_string(discount));
  }
  check_size(action, action_size_, "action", call);
  check_size(next_observation, observation_size_, "next observation", call);

  e.window.push_back(Step{.observation = std::move(e.current),
                          .action = std::vector<float>(action.begin(), action.end()),
                          .reward = reward,
                          .discount = discount});
  e.current.assign(next_observation.begin(), next_observation.end());
  if (done) {
    // The episode's last steps: every window still open ends here.
    while (!e.window.empty()) {
      out.push_back(complete(e, e.current));
      e.window.pop_front();
    }
    e.started = false;
    return;
  }
  if (e.window.size() == static_cast<std::size_t>(n_)) {
    out.push_back(complete(e, e.current));
    e.window.pop_front();
  }
}

ReplayBuffer::ReplayBuffer(const ReplayOptions& options)
    : options_(options), state_(splitmix64(options.seed)) {
  if (options.capacity == 0 || options.min_size == 0 || options.min_size > options.capacity) {
    throw InvalidArgument(
        "ReplayBuffer: needs capacity >= 1 and 1 <= min_size <= capacity, got "
        "capacity " +
        std::to_string(options.capacity) + " and min_size " + std::to_string(options.min_size));
  }
}

void ReplayBuffer::insert(Transition transition) {
  const std::lock_guard lock(mu_);
  if (items_.size() < options_.capacity) {
    items_.push_back(std::move(transition));
  } else {
    items_[head_] = std::move(transition);
    head_ = (head_ + 1) % options_.capacity;
  }
  ++inserted_;
}

std::size_t ReplayBuffer::draw(std::size_t bound) {
  SplitMix64 rng(state_);
  const auto index = static_cast<std::size_t>(rng.below(bound));
  state_ = rng.state();
  return index;
}

std::vector<Transition> ReplayBuffer::sample(std::size_t k) {
  const std::lock_guard lock(mu_);
  if (items_.size() < options_.min_size) {
    throw InvalidArgument(
        "ReplayBuffer::sample: the buffer holds " + std::to_string(items_.size()) +
        " transitions, sampling needs at least min_size = " + std::to_string(options_.min_size) +
        "; insert more first");
  }
  std::vector<Transition> out;
  out.reserve(k);
  // Index i counts from the oldest transition; the ring's order does not matter to a
  // uniform draw, but keeps the draws a function of the inserts alone.
  for (std::size_t i = 0; i < k; ++i) {
    out.push_back(items_[(head_ + draw(items_.size())) % items_.size()]);
  }
  return out;
}

std::size_t ReplayBuffer::size() const {
  const std::lock_guard lock(mu_);
  return items_.size();
}

std::int64_t ReplayBuffer::inserted() const {
  const std::lock_guard lock(mu_);
  return inserted_;
}

}  // namespace replicator::rl
