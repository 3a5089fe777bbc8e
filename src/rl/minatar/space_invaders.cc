// Space Invaders: a cannon on the bottom row shoots at a block of aliens that marches side
// to side and down, the nearest alien shooting back; +1 per alien, a fresh block (and, with
// ramping, a faster march) once all are gone. Game over when an enemy bullet or an alien
// reaches the cannon, or the block steps down from the bottom row.
// Channels: cannon, alien, alien moving left, alien moving right, friendly and enemy bullet.
#include <algorithm>
#include <array>
#include <cstdlib>

#include "src/rl/minatar/game.h"

namespace replicator::rl::minatar {
namespace {

constexpr int kShotCoolDown = 5;
constexpr int kEnemyMoveInterval = 12;
constexpr int kEnemyShotInterval = 10;

using Grid = std::array<unsigned char, 100>;  // [row * 10 + column]

int count(const Grid& g) {
  int n = 0;
  for (auto v : g) n += v != 0;
  return n;
}

// numpy.roll along rows (axis 0) by `shift`: row r takes row r - shift, wrapping.
Grid roll_rows(const Grid& g, int shift) {
  Grid out{};
  for (int r = 0; r < 10; ++r) {
    const int from = ((r - shift) % 10 + 10) % 10;
    std::copy_n(g.begin() + from * 10, 10, out.begin() + r * 10);
  }
  return out;
}

// numpy.roll along columns (axis 1) by `shift`.
Grid roll_columns(const Grid& g, int shift) {
  Grid out{};
  for (int r = 0; r < 10; ++r) {
    for (int c = 0; c < 10; ++c) out[r * 10 + c] = g[r * 10 + ((c - shift) % 10 + 10) % 10];
  }
  return out;
}

class SpaceInvaders final : public Game {
 public:
  explicit SpaceInvaders(bool ramping) : ramping_(ramping) {}
  int channels() const override { return 6; }

  void reset(NumpyRandom&) override {
    pos_ = 5;
    friendly_ = {};
    enemy_ = {};
    aliens_ = {};
    fill_aliens();
    alien_dir_ = -1;
    move_interval_ = kEnemyMoveInterval;
    alien_move_timer_ = move_interval_;
    alien_shot_timer_ = kEnemyShotInterval;
    shot_timer_ = 0;
    over_ = false;
  }

  int act(int action, NumpyRandom&) override {
    int reward = 0;
    if (action == kFire && shot_timer_ == 0) {
      friendly_[90 + pos_] = 1;
      shot_timer_ = kShotCoolDown;
    } else if (action == kLeft) {
      pos_ = std::max(0, pos_ - 1);
    } else if (action == kRight) {
      pos_ = std::min(9, pos_ + 1);
    }

    friendly_ = roll_rows(friendly_, -1);
    std::fill_n(friendly_.begin() + 90, 10, 0);
    enemy_ = roll_rows(enemy_, 1);
    std::fill_n(enemy_.begin(), 10, 0);
    if (enemy_[90 + pos_]) over_ = true;

    if (aliens_[90 + pos_]) over_ = true;
    if (alien_move_timer_ == 0) {
      alien_move_timer_ = std::min(count(aliens_), move_interval_);
      bool left_edge = false, right_edge = false, bottom = false;
      for (int r = 0; r < 10; ++r) {
        left_edge = left_edge || aliens_[r * 10];
        right_edge = right_edge || aliens_[r * 10 + 9];
      }
      for (int c = 0; c < 10; ++c) bottom = bottom || aliens_[90 + c];
      if ((left_edge && alien_dir_ < 0) || (right_edge && alien_dir_ > 0)) {
        alien_dir_ = -alien_dir_;
        if (bottom) over_ = true;
        aliens_ = roll_rows(aliens_, 1);
      } else {
        aliens_ = roll_columns(aliens_, alien_dir_);
      }
      if (aliens_[90 + pos_]) over_ = true;
    }
    if (alien_shot_timer_ == 0) {
      alien_shot_timer_ = kEnemyShotInterval;
      shoot_from_nearest_alien();
    }

    for (int cell = 0; cell < 100; ++cell) {
      if (aliens_[cell] && friendly_[cell]) {
        reward += 1;
        aliens_[cell] = 0;
        friendly_[cell] = 0;
      }
    }

    if (shot_timer_ > 0) shot_timer_ -= 1;
    alien_move_timer_ -= 1;
    alien_shot_timer_ -= 1;
    if (count(aliens_) == 0) {
      if (move_interval_ > 6 && ramping_) move_interval_ -= 1;
      fill_aliens();
    }
    return reward;
  }

  bool over() const override { return over_; }

  void observe(float* obs) const override {
    set_cell(obs, 6, 9, pos_, 0);
    const int direction_channel = alien_dir_ < 0 ? 2 : 3;
    for (int cell = 0; cell < 100; ++cell) {
      const int r = cell / 10, c = cell % 10;
      if (aliens_[cell]) {
        set_cell(obs, 6, r, c, 1);
        set_cell(obs, 6, r, c, direction_channel);
      }
      if (friendly_[cell]) set_cell(obs, 6, r, c, 4);
      if (enemy_[cell]) set_cell(obs, 6, r, c, 5);
    }
  }

 private:
  void fill_aliens() {
    for (int r = 0; r < 4; ++r) {
      for (int c = 2; c < 8; ++c) aliens_[r * 10 + c] = 1;
    }
  }

  // The columns by distance from the cannon (ties: the left one first); the lowest alien of
  // the first column holding one shoots. There is always one: the block is refilled as soon
  // as it is empty.
  void shoot_from_nearest_alien() {
    std::array<int, 10> order{};
    for (int i = 0; i < 10; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [this](int a, int b) { return std::abs(a - pos_) < std::abs(b - pos_); });
    for (int c : order) {
      for (int r = 9; r >= 0; --r) {
        if (aliens_[r * 10 + c]) {
          enemy_[r * 10 + c] = 1;
          return;
        }
      }
    }
  }

  bool ramping_;
  int pos_ = 5, alien_dir_ = -1, move_interval_ = 0, alien_move_timer_ = 0;
  int alien_shot_timer_ = 0, shot_timer_ = 0;
  Grid friendly_{}, enemy_{}, aliens_{};
  bool over_ = false;
};

}  // namespace

std::unique_ptr<Game> make_space_invaders(bool ramping) {
  return std::make_unique<SpaceInvaders>(ramping);
}

}  // namespace replicator::rl::minatar
