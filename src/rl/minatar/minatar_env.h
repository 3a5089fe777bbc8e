// The batched MinAtar environment: M games, each with its own numpy-compatible random stream,
// behind MinAtar's Environment wrapper (sticky actions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "replicator/rl/env.h"
#include "src/rl/minatar/game.h"
#include "src/rl/numpy_random.h"

namespace replicator::rl::minatar {

enum class GameKind { kBreakout, kSpaceInvaders, kFreeway, kAsterix, kSeaquest };

// The game called `name` in make_env, if it is a MinAtar game.
std::optional<GameKind> game_kind(std::string_view name);

class MinAtarEnv final : public BatchedEnv {
 public:
  // Env i's RandomState is seeded with minatar_seed(seed, i) (src/rl/seeding.h).
  MinAtarEnv(GameKind kind, int num_envs, std::uint64_t seed, const EnvOptions& options);

 private:
  void do_reset() override;
  void do_step(std::span<const std::int32_t> actions) override;
  void reset_env(std::size_t i);
  void write_observation(std::size_t i);

  double sticky_action_prob_;
  std::vector<std::unique_ptr<Game>> games_;
  std::vector<NumpyRandom> rng_;
  std::vector<int> last_action_;
  std::vector<std::uint8_t> needs_reset_;
  std::vector<float> return_;
  std::vector<std::int32_t> length_;
};

}  // namespace replicator::rl::minatar
