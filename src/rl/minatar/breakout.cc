// Breakout: a paddle on the bottom row bounces a diagonal ball into three rows of bricks;
// +1 per brick, a fresh wall once all are gone, game over when the ball reaches the bottom
// row past the paddle. Channels: paddle, ball, trail (the ball's previous cell), brick.
#include <array>

#include "src/rl/minatar/game.h"

namespace replicator::rl::minatar {
namespace {

class Breakout final : public Game {
 public:
  int channels() const override { return 4; }

  void reset(NumpyRandom& rng) override {
    ball_y_ = 3;
    if (rng.randint(0, 2) == 0) {
      ball_x_ = 0;
      ball_dir_ = 2;
    } else {
      ball_x_ = 9;
      ball_dir_ = 3;
    }
    pos_ = 4;
    bricks_ = {};
    fill_bricks();
    strike_ = false;
    last_x_ = ball_x_;
    last_y_ = ball_y_;
    over_ = false;
  }

  // Directions 0..3: up-left, up-right, down-right, down-left.
  int act(int action, NumpyRandom&) override {
    int reward = 0;
    if (action == kLeft) pos_ = pos_ > 0 ? pos_ - 1 : 0;
    if (action == kRight) pos_ = pos_ < 9 ? pos_ + 1 : 9;

    last_x_ = ball_x_;
    last_y_ = ball_y_;
    int new_x = ball_x_ + (ball_dir_ == 1 || ball_dir_ == 2 ? 1 : -1);
    int new_y = ball_y_ + (ball_dir_ >= 2 ? 1 : -1);
    static constexpr std::array<int, 4> kFlipX = {1, 0, 3, 2};
    static constexpr std::array<int, 4> kFlipY = {3, 2, 1, 0};
    static constexpr std::array<int, 4> kTurn = {2, 3, 0, 1};
    bool striking = false;
    if (new_x < 0 || new_x > 9) {
      new_x = new_x < 0 ? 0 : 9;
      ball_dir_ = kFlipX[ball_dir_];
    }
    if (new_y < 0) {
      new_y = 0;
      ball_dir_ = kFlipY[ball_dir_];
    } else if (bricks_[new_y * 10 + new_x]) {
      striking = true;
      if (!strike_) {
        reward += 1;
        strike_ = true;
        bricks_[new_y * 10 + new_x] = 0;
        new_y = last_y_;
        ball_dir_ = kFlipY[ball_dir_];
      }
    } else if (new_y == 9) {
      bool empty = true;
      for (auto b : bricks_) empty = empty && !b;
      if (empty) fill_bricks();
      if (ball_x_ == pos_) {
        ball_dir_ = kFlipY[ball_dir_];
        new_y = last_y_;
      } else if (new_x == pos_) {
        ball_dir_ = kTurn[ball_dir_];
        new_y = last_y_;
      } else {
        over_ = true;
      }
    }
    if (!striking) strike_ = false;
    ball_x_ = new_x;
    ball_y_ = new_y;
    return reward;
  }

  bool over() const override { return over_; }

  void observe(float* obs) const override {
    set_cell(obs, 4, ball_y_, ball_x_, 1);
    set_cell(obs, 4, 9, pos_, 0);
    set_cell(obs, 4, last_y_, last_x_, 2);
    for (int cell = 0; cell < 100; ++cell) {
      if (bricks_[cell]) set_cell(obs, 4, cell / 10, cell % 10, 3);
    }
  }

 private:
  void fill_bricks() {
    for (int cell = 10; cell < 40; ++cell) bricks_[cell] = 1;
  }

  int ball_x_ = 0, ball_y_ = 0, ball_dir_ = 0, pos_ = 0, last_x_ = 0, last_y_ = 0;
  std::array<unsigned char, 100> bricks_{};
  bool strike_ = false;
  bool over_ = false;
};

}  // namespace

std::unique_ptr<Game> make_breakout() { return std::make_unique<Breakout>(); }

}  // namespace replicator::rl::minatar
