// CartPole-v1. The arithmetic follows gymnasium's expression by expression, in float64 and
// in the same order (the build keeps the compiler from contracting it into fused
// multiply-adds), so that observations match gymnasium's to float32 rounding; sin and cos
// are libm's, which may differ from numpy's by an ulp.
#include "src/rl/cartpole.h"

#include <cmath>
#include <numbers>

namespace replicator::rl {
namespace {

constexpr double kGravity = 9.8;
constexpr double kMassCart = 1.0;
constexpr double kMassPole = 0.1;
constexpr double kTotalMass = kMassPole + kMassCart;
constexpr double kLength = 0.5;  // half the pole's length
constexpr double kPoleMassLength = kMassPole * kLength;
constexpr double kForceMag = 10.0;
constexpr double kTau = 0.02;
constexpr double kThetaThreshold = 12 * 2 * std::numbers::pi / 360;
constexpr double kXThreshold = 2.4;

}  // namespace

CartPole::CartPole(int num_envs, std::uint64_t seed)
    : BatchedEnv("cartpole", num_envs, 2, {4}),
      x_(static_cast<std::size_t>(num_envs)),
      x_dot_(x_.size()),
      theta_(x_.size()),
      theta_dot_(x_.size()),
      steps_(x_.size()),
      needs_reset_(x_.size()) {
  rng_.reserve(x_.size());
  for (std::size_t i = 0; i < x_.size(); ++i) rng_.emplace_back(env_seed(seed, i));
  do_reset();
}

std::array<double, 4> CartPole::state(int i) const {
  const auto k = static_cast<std::size_t>(i);
  return {x_[k], x_dot_[k], theta_[k], theta_dot_[k]};
}

void CartPole::set_state(int i, const std::array<double, 4>& state) {
  const auto k = static_cast<std::size_t>(i);
  x_[k] = state[0];
  x_dot_[k] = state[1];
  theta_[k] = state[2];
  theta_dot_[k] = state[3];
  write_observation(k);
}

void CartPole::write_observation(std::size_t i) {
  float* obs = observations_.data() + 4 * i;
  obs[0] = static_cast<float>(x_[i]);
  obs[1] = static_cast<float>(x_dot_[i]);
  obs[2] = static_cast<float>(theta_[i]);
  obs[3] = static_cast<float>(theta_dot_[i]);
}

// gymnasium: state = uniform(low=-0.05, high=0.05, size=(4,)), i.e. low + (high-low)·u.
void CartPole::reset_env(std::size_t i) {
  SplitMix64& rng = rng_[i];
  x_[i] = -0.05 + 0.1 * rng.uniform();
  x_dot_[i] = -0.05 + 0.1 * rng.uniform();
  theta_[i] = -0.05 + 0.1 * rng.uniform();
  theta_dot_[i] = -0.05 + 0.1 * rng.uniform();
  steps_[i] = 0;
  needs_reset_[i] = 0;
  clear_step_fields(i);
  write_observation(i);
}

void CartPole::do_reset() {
  for (std::size_t i = 0; i < x_.size(); ++i) reset_env(i);
}

void CartPole::do_step(std::span<const std::int32_t> actions) {
  const std::size_t m = x_.size();
  for (std::size_t i = 0; i < m; ++i) {
    if (needs_reset_[i]) {
      reset_env(i);
      continue;
    }
    const double x = x_[i], x_dot = x_dot_[i], theta = theta_[i], theta_dot = theta_dot_[i];
    const double force = actions[i] == 1 ? kForceMag : -kForceMag;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    const double temp = (force + kPoleMassLength * (theta_dot * theta_dot) * sintheta) / kTotalMass;
    const double thetaacc =
        (kGravity * sintheta - costheta * temp) /
        (kLength * (4.0 / 3.0 - kMassPole * (costheta * costheta) / kTotalMass));
    const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
    const double nx = x + kTau * x_dot;
    const double nx_dot = x_dot + kTau * xacc;
    const double ntheta = theta + kTau * theta_dot;
    const double ntheta_dot = theta_dot + kTau * thetaacc;
    x_[i] = nx;
    x_dot_[i] = nx_dot;
    theta_[i] = ntheta;
    theta_dot_[i] = ntheta_dot;
    float* obs = observations_.data() + 4 * i;
    obs[0] = static_cast<float>(nx);
    obs[1] = static_cast<float>(nx_dot);
    obs[2] = static_cast<float>(ntheta);
    obs[3] = static_cast<float>(ntheta_dot);

    const std::int32_t steps = ++steps_[i];
    const bool terminated = nx < -kXThreshold || nx > kXThreshold || ntheta < -kThetaThreshold ||
                            ntheta > kThetaThreshold;
    const bool truncated = steps >= kMaxEpisodeSteps;
    const bool done = terminated || truncated;
    // Every step of CartPole-v1 earns 1, the last one included: the return is the length.
    rewards_[i] = 1.0f;
    terminated_[i] = terminated;
    truncated_[i] = truncated;
    episode_return_[i] = done ? static_cast<float>(steps) : 0.0f;
    episode_length_[i] = done ? steps : 0;
    needs_reset_[i] = done;
  }
}

}  // namespace replicator::rl
