// Freeway: a chicken crosses eight lanes of cars; +1 per crossing (then the cars get new
// speeds), hit by a car it goes back to the bottom. The game ends on its clock: 2500 steps
// counted down, over when the count drops below zero, so an episode is 2501 steps.
// Channels: chicken, car, then the car's trail by speed 1..5.
#include <array>
#include <cstdlib>

#include "src/rl/minatar/game.h"

namespace replicator::rl::minatar {
namespace {

constexpr int kPlayerSpeed = 3;
constexpr int kTimeLimit = 2500;

class Freeway final : public Game {
 public:
  int channels() const override { return 7; }

  void reset(NumpyRandom& rng) override {
    randomize_cars(rng, true);
    pos_ = 9;
    move_timer_ = kPlayerSpeed;
    clock_ = kTimeLimit;
    over_ = false;
  }

  int act(int action, NumpyRandom& rng) override {
    int reward = 0;
    if (action == kUp && move_timer_ == 0) {
      move_timer_ = kPlayerSpeed;
      pos_ = pos_ > 0 ? pos_ - 1 : 0;
    } else if (action == kDown && move_timer_ == 0) {
      move_timer_ = kPlayerSpeed;
      pos_ = pos_ < 9 ? pos_ + 1 : 9;
    }
    if (pos_ == 0) {
      reward += 1;
      randomize_cars(rng, false);
      pos_ = 9;
    }
    for (Car& car : cars_) {
      if (car.x == 4 && car.y == pos_) pos_ = 9;
      if (car.timer == 0) {
        car.timer = std::abs(car.speed);
        car.x += car.speed > 0 ? 1 : -1;
        if (car.x < 0) car.x = 9;
        if (car.x > 9) car.x = 0;
        if (car.x == 4 && car.y == pos_) pos_ = 9;
      } else {
        car.timer -= 1;
      }
    }
    if (move_timer_ > 0) move_timer_ -= 1;
    clock_ -= 1;
    if (clock_ < 0) over_ = true;
    return reward;
  }

  bool over() const override { return over_; }
  bool out_of_time() const override { return over_; }

  void observe(float* obs) const override {
    set_cell(obs, 7, pos_, 4, 0);
    for (const Car& car : cars_) {
      set_cell(obs, 7, car.y, car.x, 1);
      int back_x = car.speed > 0 ? car.x - 1 : car.x + 1;
      if (back_x < 0) back_x = 9;
      if (back_x > 9) back_x = 0;
      const int speed = std::abs(car.speed);
      if (speed >= 1 && speed <= 5) set_cell(obs, 7, car.y, back_x, 1 + speed);
    }
  }

 private:
  struct Car {
    int x, y, timer, speed;  // speed: signed, its sign the direction
  };

  // speeds = randint(1, 6, 8), then directions = sign(rand(8) - 0.5).
  void randomize_cars(NumpyRandom& rng, bool initialize) {
    std::array<int, 8> speeds{};
    for (int& s : speeds) s = rng.randint(1, 6);
    for (int& s : speeds) {
      const double d = rng.rand() - 0.5;
      s *= d > 0 ? 1 : (d < 0 ? -1 : 0);
    }
    for (int i = 0; i < 8; ++i) {
      if (initialize) cars_[i] = Car{0, i + 1, 0, 0};
      cars_[i].timer = std::abs(speeds[i]);
      cars_[i].speed = speeds[i];
    }
  }

  std::array<Car, 8> cars_{};
  int pos_ = 9, move_timer_ = 0, clock_ = 0;
  bool over_ = false;
};

}  // namespace

std::unique_ptr<Game> make_freeway() { return std::make_unique<Freeway>(); }

}  // namespace replicator::rl::minatar
