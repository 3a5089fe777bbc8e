// env_dump: runs cases of the batched environments for the conformance scripts
// (tests/rl/conformance_*.py). Reads one JSON case per line on stdin and writes one JSON
// result per line on stdout, flushed after each:
//   {"env": "cartpole", "state": [x, x_dot, theta, theta_dot], "actions": [...]}
//   {"env": "cartpole", "state": [...], "policy": "pd", "steps": N}
//   {"env": "cartpole", "state": [...], "actions": [...], "states": [[...], ...]}
//       one env started from `state`, stepped until the actions (or N steps) are used or the
//       episode ends: {"actions", "obs" (the start first), "reward", "terminated",
//       "truncated"}. With "states", the float64 state is set to states[t] before step t
//       (the episode's step count runs on): each step is checked from the reference's state.
//   {"env": GAME, "seed": S, "sticky": p, "ramping": true, "actions": [...]}
//       one MinAtar env seeded with S through the auto-resets: {"numpy_seed" (its
//       RandomState seed), "obs" (strings of 0/1, the start first), "reward", "terminated",
//       "truncated", "episode_return", "episode_length"}.
//   {"env": NAME, "seed": S, "episodes": N}
//       N episodes of uniformly random actions (drawn from S; continuous tasks: uniform in
//       their bounds): {"returns", "lengths"}.
//   {"env": TASK, "seed": S, "actions": [[a_0 ...], ...]}
//       one continuous-control env (continuous_env.h) seeded with S: {"obs" (the start
//       first), "reward", "truncated"}.
#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "replicator/rl/continuous_env.h"
#include "replicator/rl/env.h"
#include "src/rl/cartpole.h"
#include "src/rl/seeding.h"

namespace {

using nlohmann::json;
using replicator::rl::BatchedEnv;
using replicator::rl::StepResult;

// A proportional-derivative balance on the pole's angle with a weak pull of the cart to the
// centre: keeps CartPole up for the whole 500 steps from any start state of the reset range.
int pd_action(std::span<const float> obs) {
  const double x = obs[0], x_dot = obs[1], theta = obs[2], theta_dot = obs[3];
  return theta * 10.0 + theta_dot * 2.0 + x * 0.1 + x_dot * 0.5 > 0.0 ? 1 : 0;
}

json cartpole_case(const json& in) {
  replicator::rl::CartPole env(1, 0);
  const auto s = in.at("state").get<std::vector<double>>();
  env.set_state(0, {s.at(0), s.at(1), s.at(2), s.at(3)});
  const bool pd = in.value("policy", "") == "pd";
  const auto given = pd ? std::vector<int>{} : in.at("actions").get<std::vector<int>>();
  const std::size_t steps = pd ? in.at("steps").get<std::size_t>() : given.size();
  json out = {{"actions", json::array()},
              {"obs", json::array()},
              {"reward", json::array()},
              {"terminated", json::array()},
              {"truncated", json::array()}};
  StepResult r = env.last();
  out["obs"].push_back(std::vector<float>(r.observations.begin(), r.observations.end()));
  const bool resync = in.contains("states");
  for (std::size_t t = 0; t < steps; ++t) {
    if (resync) {
      const auto st = in.at("states").at(t).get<std::vector<double>>();
      env.set_state(0, {st.at(0), st.at(1), st.at(2), st.at(3)});
    }
    const std::int32_t a = pd ? pd_action(r.observations) : given[t];
    r = env.step(std::span(&a, 1));
    out["actions"].push_back(a);
    out["obs"].push_back(std::vector<float>(r.observations.begin(), r.observations.end()));
    out["reward"].push_back(r.rewards[0]);
    out["terminated"].push_back(r.terminated[0] != 0);
    out["truncated"].push_back(r.truncated[0] != 0);
    if (r.terminated[0] || r.truncated[0]) break;
  }
  return out;
}

std::string bits(std::span<const float> obs) {
  std::string s(obs.size(), '0');
  for (std::size_t i = 0; i < obs.size(); ++i) s[i] = obs[i] != 0.0f ? '1' : '0';
  return s;
}

json minatar_case(const json& in) {
  const auto seed = in.at("seed").get<std::uint64_t>();
  const replicator::rl::EnvOptions options{.sticky_action_prob = in.value("sticky", 0.1),
                                           .difficulty_ramping = in.value("ramping", true)};
  auto env = replicator::rl::make_env(in.at("env").get<std::string>(), 1, seed, options);
  json out = {{"numpy_seed", replicator::rl::minatar_seed(seed, 0)},
              {"obs", json::array()},
              {"reward", json::array()},
              {"terminated", json::array()},
              {"truncated", json::array()},
              {"episode_return", json::array()},
              {"episode_length", json::array()}};
  StepResult r = env->last();
  out["obs"].push_back(bits(r.observations));
  for (const std::int32_t a : in.at("actions").get<std::vector<std::int32_t>>()) {
    r = env->step(std::span(&a, 1));
    out["obs"].push_back(bits(r.observations));
    out["reward"].push_back(r.rewards[0]);
    out["terminated"].push_back(r.terminated[0] != 0);
    out["truncated"].push_back(r.truncated[0] != 0);
    out["episode_return"].push_back(r.episode_return[0]);
    out["episode_length"].push_back(r.episode_length[0]);
  }
  return out;
}

json episodes_case(const json& in) {
  const auto seed = in.at("seed").get<std::uint64_t>();
  const auto episodes = in.at("episodes").get<std::size_t>();
  auto env = replicator::rl::make_env(in.at("env").get<std::string>(), 1, seed);
  replicator::rl::SplitMix64 policy(replicator::rl::splitmix64(seed ^ 0x5eedULL));
  json out = {{"returns", json::array()}, {"lengths", json::array()}};
  while (out["returns"].size() < episodes) {
    const auto a = static_cast<std::int32_t>(policy.next() % env->num_actions());
    const StepResult r = env->step(std::span(&a, 1));
    if (r.terminated[0] || r.truncated[0]) {
      out["returns"].push_back(r.episode_return[0]);
      out["lengths"].push_back(r.episode_length[0]);
    }
  }
  return out;
}

bool is_continuous(const std::string& name) {
  const auto& names = replicator::rl::continuous_env_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

json continuous_case(const json& in) {
  auto env = replicator::rl::make_continuous_env(in.at("env").get<std::string>(), 1,
                                                 in.at("seed").get<std::uint64_t>());
  json out = {{"obs", json::array()}, {"reward", json::array()}, {"truncated", json::array()}};
  StepResult r = env->last();
  out["obs"].push_back(std::vector<float>(r.observations.begin(), r.observations.end()));
  for (const auto& a : in.at("actions").get<std::vector<std::vector<float>>>()) {
    r = env->step(a);
    out["obs"].push_back(std::vector<float>(r.observations.begin(), r.observations.end()));
    out["reward"].push_back(r.rewards[0]);
    out["truncated"].push_back(r.truncated[0] != 0);
  }
  return out;
}

json continuous_episodes_case(const json& in) {
  const auto seed = in.at("seed").get<std::uint64_t>();
  const auto episodes = in.at("episodes").get<std::size_t>();
  auto env = replicator::rl::make_continuous_env(in.at("env").get<std::string>(), 1, seed);
  const replicator::rl::ActionBounds& bounds = env->action_bounds();
  replicator::rl::SplitMix64 policy(replicator::rl::splitmix64(seed ^ 0x5eedULL));
  std::vector<float> a(bounds.low.size());
  json out = {{"returns", json::array()}, {"lengths", json::array()}};
  while (out["returns"].size() < episodes) {
    for (std::size_t k = 0; k < a.size(); ++k) {
      a[k] =
          bounds.low[k] + static_cast<float>(policy.uniform()) * (bounds.high[k] - bounds.low[k]);
    }
    const StepResult r = env->step(a);
    if (r.terminated[0] || r.truncated[0]) {
      out["returns"].push_back(r.episode_return[0]);
      out["lengths"].push_back(r.episode_length[0]);
    }
  }
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const json in = json::parse(line);
    json out;
    const bool continuous = is_continuous(in.at("env").get<std::string>());
    if (in.contains("episodes")) {
      out = continuous ? continuous_episodes_case(in) : episodes_case(in);
    } else if (continuous) {
      out = continuous_case(in);
    } else if (in.at("env") == "cartpole") {
      out = cartpole_case(in);
    } else {
      out = minatar_case(in);
    }
    std::cout << out.dump() << '\n' << std::flush;
  }
  return 0;
}
