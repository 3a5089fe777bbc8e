#include "bench/env_speed.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "replicator/rl/env.h"

namespace replicator::bench {

EnvSpeed env_speed(const std::string& name, int num_envs, int steps, int warmup) {
  auto env = rl::make_env(name, num_envs, 1);
  // 64 batches of random actions, used in turn: small enough to stay in cache.
  constexpr int kBatches = 64;
  const auto m = static_cast<std::size_t>(num_envs);
  std::vector<std::int32_t> actions(kBatches * m);
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (auto& a : actions) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    a = static_cast<std::int32_t>((state >> 32) % static_cast<std::uint64_t>(env->num_actions()));
  }
  auto batch = [&](int s) {
    return std::span<const std::int32_t>(actions.data() + (s % kBatches) * m, m);
  };
  for (int s = 0; s < warmup; ++s) env->step(batch(s));
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) env->step(batch(s));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {static_cast<double>(steps) * num_envs / seconds, seconds};
}

}  // namespace replicator::bench
