// MinAtar's Environment wrapper batched: every act() first draws rand() from the game's own
// RandomState for the sticky action (also when the probability is 0), and the previous
// action is kept across episodes, as the reference does.
#include "src/rl/minatar/minatar_env.h"

#include <algorithm>
#include <string>

#include "src/rl/seeding.h"

namespace replicator::rl::minatar {
namespace {

struct GameInfo {
  std::string_view name;
  GameKind kind;
  int channels;
};

constexpr GameInfo kGames[] = {
    {"breakout", GameKind::kBreakout, 4},  {"space_invaders", GameKind::kSpaceInvaders, 6},
    {"freeway", GameKind::kFreeway, 7},    {"asterix", GameKind::kAsterix, 4},
    {"seaquest", GameKind::kSeaquest, 10},
};

const GameInfo& info(GameKind kind) {
  return *std::find_if(std::begin(kGames), std::end(kGames),
                       [kind](const GameInfo& g) { return g.kind == kind; });
}

std::unique_ptr<Game> make_game(GameKind kind, bool ramping) {
  switch (kind) {
    case GameKind::kBreakout:
      return make_breakout();
    case GameKind::kSpaceInvaders:
      return make_space_invaders(ramping);
    case GameKind::kFreeway:
      return make_freeway();
    case GameKind::kAsterix:
      return make_asterix(ramping);
    case GameKind::kSeaquest:
      return make_seaquest(ramping);
  }
  return nullptr;
}

}  // namespace

std::optional<GameKind> game_kind(std::string_view name) {
  for (const GameInfo& g : kGames) {
    if (g.name == name) return g.kind;
  }
  return std::nullopt;
}

MinAtarEnv::MinAtarEnv(GameKind kind, int num_envs, std::uint64_t seed, const EnvOptions& options)
    : BatchedEnv(std::string(info(kind).name), num_envs, 6, {10, 10, info(kind).channels}),
      sticky_action_prob_(options.sticky_action_prob),
      last_action_(static_cast<std::size_t>(num_envs), kNoop),
      needs_reset_(static_cast<std::size_t>(num_envs)),
      return_(static_cast<std::size_t>(num_envs)),
      length_(static_cast<std::size_t>(num_envs)) {
  const auto m = static_cast<std::size_t>(num_envs);
  games_.reserve(m);
  rng_.reserve(m);
  for (std::size_t i = 0; i < m; ++i) {
    games_.push_back(make_game(kind, options.difficulty_ramping));
    rng_.emplace_back(minatar_seed(seed, i));
  }
  do_reset();
}

void MinAtarEnv::write_observation(std::size_t i) {
  const auto size = static_cast<std::size_t>(observation_size());
  float* obs = observations_.data() + i * size;
  std::fill(obs, obs + size, 0.0f);
  games_[i]->observe(obs);
}

void MinAtarEnv::reset_env(std::size_t i) {
  games_[i]->reset(rng_[i]);
  needs_reset_[i] = 0;
  return_[i] = 0.0f;
  length_[i] = 0;
  clear_step_fields(i);
  write_observation(i);
}

void MinAtarEnv::do_reset() {
  for (std::size_t i = 0; i < games_.size(); ++i) reset_env(i);
}

void MinAtarEnv::do_step(std::span<const std::int32_t> actions) {
  for (std::size_t i = 0; i < games_.size(); ++i) {
    if (needs_reset_[i]) {
      reset_env(i);
      continue;
    }
    int action = actions[i];
    if (rng_[i].rand() < sticky_action_prob_) action = last_action_[i];
    last_action_[i] = action;
    Game& game = *games_[i];
    const auto reward = static_cast<float>(game.act(action, rng_[i]));
    return_[i] += reward;
    length_[i] += 1;
    const bool done = game.over();
    rewards_[i] = reward;
    truncated_[i] = done && game.out_of_time();
    terminated_[i] = done && !game.out_of_time();
    episode_return_[i] = done ? return_[i] : 0.0f;
    episode_length_[i] = done ? length_[i] : 0;
    needs_reset_[i] = done;
    write_observation(i);
  }
}

}  // namespace replicator::rl::minatar
