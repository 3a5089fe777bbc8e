// Asterix: the player moves among eight lanes where enemies and gold cross the screen;
// +1 per gold picked up, game over on touching an enemy. Spawning and movement speed up
// every 100 steps with ramping. Channels: player, enemy, trail, gold.
#include <algorithm>
#include <array>
#include <optional>

#include "src/rl/minatar/game.h"

namespace replicator::rl::minatar {
namespace {

constexpr int kRampInterval = 100;
constexpr int kInitSpawnSpeed = 10;
constexpr int kInitMoveInterval = 5;

class Asterix final : public Game {
 public:
  explicit Asterix(bool ramping) : ramping_(ramping) {}
  int channels() const override { return 4; }

  void reset(NumpyRandom&) override {
    player_x_ = 5;
    player_y_ = 5;
    entities_ = {};
    spawn_speed_ = kInitSpawnSpeed;
    spawn_timer_ = spawn_speed_;
    move_speed_ = kInitMoveInterval;
    move_timer_ = move_speed_;
    ramp_timer_ = kRampInterval;
    ramp_index_ = 0;
    over_ = false;
  }

  int act(int action, NumpyRandom& rng) override {
    int reward = 0;
    if (spawn_timer_ == 0) {
      spawn(rng);
      spawn_timer_ = spawn_speed_;
    }
    if (action == kLeft) player_x_ = std::max(0, player_x_ - 1);
    if (action == kRight) player_x_ = std::min(9, player_x_ + 1);
    if (action == kUp) player_y_ = std::max(1, player_y_ - 1);
    if (action == kDown) player_y_ = std::min(8, player_y_ + 1);

    for (auto& slot : entities_) {
      if (slot && slot->x == player_x_ && slot->y == player_y_) touch(slot, reward);
    }
    if (move_timer_ == 0) {
      move_timer_ = move_speed_;
      for (auto& slot : entities_) {
        if (!slot) continue;
        slot->x += slot->right ? 1 : -1;
        if (slot->x < 0 || slot->x > 9) {
          slot.reset();
        } else if (slot->x == player_x_ && slot->y == player_y_) {
          touch(slot, reward);
        }
      }
    }
    spawn_timer_ -= 1;
    move_timer_ -= 1;
    if (ramping_ && (spawn_speed_ > 1 || move_speed_ > 1)) {
      if (ramp_timer_ >= 0) {
        ramp_timer_ -= 1;
      } else {
        if (move_speed_ > 1 && ramp_index_ % 2) move_speed_ -= 1;
        if (spawn_speed_ > 1) spawn_speed_ -= 1;
        ramp_index_ += 1;
        ramp_timer_ = kRampInterval;
      }
    }
    return reward;
  }

  bool over() const override { return over_; }

  void observe(float* obs) const override {
    set_cell(obs, 4, player_y_, player_x_, 0);
    for (const auto& slot : entities_) {
      if (!slot) continue;
      set_cell(obs, 4, slot->y, slot->x, slot->gold ? 3 : 1);
      const int back_x = slot->right ? slot->x - 1 : slot->x + 1;
      if (back_x >= 0 && back_x <= 9) set_cell(obs, 4, slot->y, back_x, 2);
    }
  }

 private:
  struct Entity {
    int x, y;
    bool right, gold;
  };

  void touch(std::optional<Entity>& slot, int& reward) {
    if (slot->gold) {
      slot.reset();
      reward += 1;
    } else {
      over_ = true;
    }
  }

  // Direction and kind are drawn before looking for a free lane.
  void spawn(NumpyRandom& rng) {
    const bool right = rng.rand() < 1.0 / 2;
    const bool gold = rng.rand() < 1.0 / 3;
    std::array<int, 8> free{};
    int n = 0;
    for (int i = 0; i < 8; ++i) {
      if (!entities_[i]) free[n++] = i;
    }
    if (n == 0) return;
    const int slot = free[rng.randint(0, n)];
    entities_[slot] = Entity{right ? 0 : 9, slot + 1, right, gold};
  }

  bool ramping_;
  int player_x_ = 5, player_y_ = 5, spawn_speed_ = 0, spawn_timer_ = 0, move_speed_ = 0;
  int move_timer_ = 0, ramp_timer_ = 0, ramp_index_ = 0;
  std::array<std::optional<Entity>, 8> entities_{};
  bool over_ = false;
};

}  // namespace

std::unique_ptr<Game> make_asterix(bool ramping) { return std::make_unique<Asterix>(ramping); }

}  // namespace replicator::rl::minatar
